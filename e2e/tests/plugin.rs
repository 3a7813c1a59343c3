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

/// `scripts/release` builds the artefacts and the krew manifest; krew (built
/// from its module) installs the plugin from them with the checksum checked,
/// and kubectl finds what krew installed.
#[tokio::test]
async fn krew_installs_the_plugin_from_the_release_manifest() {
    let dir = std::env::temp_dir().join(format!("tusk-e2e-release-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.join("dist");
    let release = std::process::Command::new(tusk_e2e::repo_path("scripts/release"))
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run scripts/release");
    assert!(
        release.status.success(),
        "scripts/release failed: {}",
        String::from_utf8_lossy(&release.stderr)
    );
    let version = env!("CARGO_PKG_VERSION");
    let archive = out.join(format!("kubectl-tusk_{version}_linux_amd64.tar.gz"));
    let manifest = out.join("krew/tusk.yaml");
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).expect("SHA256SUMS");
    let text = std::fs::read_to_string(&manifest).expect("the krew manifest");
    let sha = sums
        .lines()
        .find(|l| l.ends_with(&format!("kubectl-tusk_{version}_linux_amd64.tar.gz")))
        .and_then(|l| l.split_whitespace().next())
        .expect("the plugin archive is in SHA256SUMS");
    assert!(
        text.contains(&format!("sha256: {sha}")),
        "the manifest carries the archive's checksum:\n{text}"
    );

    let krew = tool_path("krew");
    let install = |manifest: &std::path::Path, root: &std::path::Path| {
        std::process::Command::new(&krew)
            .arg("install")
            .arg(format!("--manifest={}", manifest.display()))
            .arg(format!("--archive={}", archive.display()))
            .env("KREW_ROOT", root)
            .output()
            .expect("run krew")
    };

    // A manifest whose checksum does not match is refused: the checksum is
    // what krew installs by.
    let tampered = dir.join("tampered.yaml");
    std::fs::write(&tampered, text.replace(sha, &"0".repeat(64))).expect("write");
    let refused = install(&tampered, &dir.join("krew-tampered"));
    assert!(
        !refused.status.success(),
        "krew installed a plugin whose checksum is wrong"
    );

    let root = dir.join("krew");
    let installed = install(&manifest, &root);
    assert!(
        installed.status.success(),
        "krew install failed: {}{}",
        String::from_utf8_lossy(&installed.stdout),
        String::from_utf8_lossy(&installed.stderr)
    );
    let kubectl = tusk_e2e::plugin::kubectl();
    let path = format!(
        "{}:{}:/usr/bin:/bin",
        root.join("bin").display(),
        kubectl.parent().expect("kubectl's directory").display()
    );
    let list = std::process::Command::new(&kubectl)
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .expect("run kubectl plugin list");
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.lines().any(|l| l.ends_with("/bin/kubectl-tusk")),
        "kubectl plugin list does not show what krew installed:\n{listed}"
    );
    let version_out = std::process::Command::new(&kubectl)
        .args(["tusk", "--version"])
        .env("PATH", &path)
        .output()
        .expect("run kubectl tusk --version");
    assert!(
        String::from_utf8_lossy(&version_out.stdout).contains(version),
        "kubectl tusk --version: {:?}",
        version_out
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn tool_path(tool: &str) -> std::path::PathBuf {
    let output = std::process::Command::new(tusk_e2e::repo_path("scripts/install-tools"))
        .args(["--path", tool])
        .output()
        .expect("run scripts/install-tools");
    assert!(
        output.status.success(),
        "scripts/install-tools --path {tool}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().into()
}
