//! `kubectl tusk` is a kubectl plugin: kubectl finds it on `PATH`, it
//! explains itself, completes in shells, and fails in one line with a code a
//! script can test.

use tusk_e2e::plugin::{kubectl_command, run, tusk};

#[tokio::test]
async fn kubectl_finds_the_plugin_and_it_explains_itself() {
    let list = run(kubectl_command(&["plugin", "list"]).await).await;
    assert!(
        list.stdout.lines().any(|l| l.ends_with("/kubectl-tusk")),
        "kubectl plugin list does not show kubectl-tusk:\n{}{}",
        list.stdout,
        list.stderr
    );

    let help = tusk(&["--help"]).await;
    assert_eq!(help.code, 0, "{help:?}");
    for command in [
        "status",
        "why",
        "plan",
        "switchover",
        "restart",
        "backup",
        "restore",
        "psql",
        "connect",
        "logs",
        "report",
        "history",
        "completion",
    ] {
        assert!(
            help.stdout
                .lines()
                .any(|l| l.trim_start().starts_with(command)),
            "`kubectl tusk --help` does not list {command}:\n{}",
            help.stdout
        );
    }
    let switchover = tusk(&["switchover", "--help"]).await;
    assert!(
        switchover.stdout.contains("Examples:") && switchover.stdout.contains("--wait"),
        "per-command help has examples: {switchover:?}"
    );

    let completion = tusk(&["completion", "bash"]).await;
    assert_eq!(completion.code, 0, "{completion:?}");
    assert!(
        completion.stdout.contains("complete") && completion.stdout.contains("switchover"),
        "a bash completion script: {}",
        &completion.stdout[..completion.stdout.len().min(400)]
    );
}

#[tokio::test]
async fn bad_usage_is_one_line_and_exit_code_2() {
    let outcome = tusk(&["switchover"]).await;
    assert_eq!(outcome.code, 2, "{outcome:?}");
    assert!(
        outcome.stderr.contains("<DATABASE>"),
        "names the missing argument: {outcome:?}"
    );
    let outcome = tusk(&["status", "pg", "-o", "xml"]).await;
    assert_eq!(outcome.code, 2, "{outcome:?}");
    assert!(outcome.stderr.contains("xml"), "{outcome:?}");
}
