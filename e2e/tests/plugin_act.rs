//! `kubectl tusk` commands that act and wait, through the real kubectl
//! against real Databases: a switchover whose reported write pause matches
//! the writer's, a rolling restart, a backup then a restore of it,
//! psql on a replica; and bad input refused in one line with its exit code
//! before anything changes.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, PatchParams};
use tusk::api::status::HistoryKind;
use tusk::api::v1::{Backup, Database};
use tusk_e2e::plugin::{Outcome, tusk};
use tusk_e2e::store::{archive_all, spec_with_store, sql_on, store_up};
use tusk_e2e::writer::{
    current_primary, instance_pods, longest_pause, nothing_lost, start_writing, unix_now,
};
use tusk_e2e::{apply_value, database, in_namespace, install_operator, wait_for, wait_ready};

/// A refusal: exit `code`, one line on stderr starting with `starts`.
fn refused(outcome: &Outcome, code: i32, starts: &str) {
    assert_eq!(outcome.code, code, "{outcome:?}");
    let lines: Vec<&str> = outcome.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {outcome:?}");
    assert!(
        lines[0].starts_with(&format!("error: {starts}")),
        "{starts:?} expected: {outcome:?}"
    );
}

/// The `writes paused …` figure of the switchover's last line, in seconds.
fn reported_pause(stdout: &str) -> Option<f64> {
    let words: Vec<&str> = stdout
        .lines()
        .last()?
        .split("writes paused ")
        .nth(1)?
        .split(' ')
        .collect();
    let value: f64 = words.first()?.parse().ok()?;
    match *words.get(1)? {
        "ms" => Some(value / 1000.0),
        "s" => Some(value),
        "min" => Some(value * 60.0),
        _ => None,
    }
}

#[tokio::test]
async fn switchover_restart_and_psql_act_and_report() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-plugin-act",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let spec = serde_json::json!({
                "version": "17", "instances": 2, "storage": {"size": "1Gi"}
            });
            apply_value(&client, Some(&ns), database("pg", spec), &apply).await?;
            wait_ready(&client, &ns, "pg", 2).await?;
            let primary = current_primary(&client, &ns, "pg").await?;
            let replica = if primary == "pg-1" { "pg-2" } else { "pg-1" };
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            let generation = databases.get("pg").await?.metadata.generation;

            // Bad input changes nothing and says what is wrong in one line.
            refused(
                &tusk(&["-n", &ns, "switchover", "nope"]).await,
                3,
                &format!("Database nope not found in namespace {ns}"),
            );
            refused(
                &tusk(&["-n", &ns, "switchover", "pg", "--to", "9"]).await,
                3,
                "pg-9 is not an instance of Database pg",
            );
            refused(
                &tusk(&["-n", &ns, "switchover", "pg", "--to", &primary]).await,
                1,
                &format!("{primary} is already the primary of pg"),
            );
            refused(
                &tusk(&["-n", &ns, "psql", "nope"]).await,
                3,
                "Database nope not found",
            );
            assert_eq!(
                databases.get("pg").await?.metadata.generation,
                generation,
                "a refused command changed the spec"
            );

            // A switchover against a writer: the pause it reports (the
            // operator's, from the hand-over to `-rw` routing to the new
            // primary) is the one the writer saw, within the writer's
            // reconnect and kube-proxy's sync.
            start_writing(&client, &ns, "pg").await?;
            let asked = unix_now();
            let switched = tusk(&["-n", &ns, "switchover", "pg", "--wait", "--timeout", "300"])
                .await
                .ok("switchover pg --wait")?;
            let done = unix_now();
            assert!(
                switched.contains(&format!("{replica} is the primary (was {primary})")),
                "{switched}"
            );
            let pause = reported_pause(&switched)
                .ok_or_else(|| format!("no write pause reported: {switched}"))?;
            let gap = longest_pause(&client, &ns, asked, done).await?;
            assert!(
                (pause - gap).abs() <= 1.0,
                "kubectl tusk reported a write pause of {pause:.3} s, the writer's longest gap was {gap:.3} s"
            );
            println!("switchover: reported pause {pause:.3} s, writer's longest gap {gap:.3} s");
            assert_eq!(current_primary(&client, &ns, "pg").await?, replica);
            let history = databases
                .get("pg")
                .await?
                .status
                .unwrap_or_default()
                .history;
            assert!(
                history.iter().any(|e| e.kind == HistoryKind::Switchover
                    && e.to.as_deref() == Some(replica)
                    && e.from.as_deref() == Some(primary.as_str())),
                "no Switchover entry: {history:?}"
            );

            // A rolling restart replaces every pod and loses nothing.
            let before: Vec<String> = instance_pods(&client, &ns, "pg")
                .await?
                .iter()
                .filter_map(|p| p.uid())
                .collect();
            let restarted = tusk(&["-n", &ns, "restart", "pg", "--wait", "--timeout", "600"])
                .await
                .ok("restart pg --wait")?;
            assert!(
                restarted.contains("pg restarted: every instance replaced in"),
                "{restarted}"
            );
            wait_ready(&client, &ns, "pg", 2).await?;
            let pods = instance_pods(&client, &ns, "pg").await?;
            for pod in &pods {
                assert!(
                    !before.contains(&pod.uid().unwrap_or_default()),
                    "{} was not replaced",
                    pod.name_any()
                );
                assert!(
                    pod.annotations().contains_key("tusk.dev/restartedAt"),
                    "{} does not carry the restart",
                    pod.name_any()
                );
            }
            let rows = nothing_lost(&client, &ns, "pg").await?;
            println!("restart: {rows} acknowledged rows all there");

            // psql on a replica, input from a pipe (no TTY).
            let in_recovery = tusk(&[
                "-n",
                &ns,
                "psql",
                "pg",
                "--replica",
                "--",
                "-tAc",
                "select pg_is_in_recovery()",
            ])
            .await
            .ok("psql pg --replica")?;
            assert_eq!(in_recovery.trim(), "t");
            Ok(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_backup_then_a_restore_of_it_wait_and_report() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-plugin-backup",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            let mut spec = spec_with_store(1, &endpoint, &bucket);
            spec["backup"]["verify"] = serde_json::json!(true);
            apply_value(&client, Some(&ns), database("pg", spec), &apply).await?;
            wait_ready(&client, &ns, "pg", 1).await?;
            sql_on(
                &client,
                &ns,
                "pg",
                "rw",
                "CREATE TABLE t (i int); INSERT INTO t SELECT generate_series(1, 1000)",
            )
            .await?;

            let backed_up = tusk(&[
                "-n", &ns, "backup", "pg", "--name", "first", "--wait", "--timeout", "600",
            ])
            .await
            .ok("backup pg --wait")?;
            let last = backed_up.lines().last().unwrap_or_default();
            assert!(
                last.starts_with("Backup first completed: ") && last.contains(" in "),
                "{backed_up}"
            );
            assert!(last.contains("verified by a restore"), "{backed_up}");
            let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
            let status = backups.get("first").await?.status.unwrap_or_default();
            assert_eq!(status.verified, Some(true));
            // The operator records the Backup in the Database's history.
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            wait_for(&databases, "pg", Duration::from_secs(120), |db| {
                db.status.as_ref().is_some_and(|s| {
                    s.history.iter().any(|e| {
                        e.kind == HistoryKind::Backup
                            && e.name.as_deref() == Some("first")
                            && e.succeeded
                            && e.bytes.is_some()
                    })
                })
            })
            .await?;
            refused(
                &tusk(&["-n", &ns, "backup", "pg", "--name", "first"]).await,
                2,
                "Backup first already exists",
            );

            // Refused before anything is created.
            refused(
                &tusk(&[
                    "-n",
                    &ns,
                    "restore",
                    "pg",
                    "--to",
                    "early",
                    "--time",
                    "2001-01-01T00:00:00Z",
                ])
                .await,
                2,
                "--time 2001-01-01T00:00:00Z is before pg's earliest completed backup",
            );
            refused(
                &tusk(&["-n", &ns, "restore", "pg", "--to", "pg"]).await,
                2,
                "Database pg already exists",
            );
            refused(
                &tusk(&["-n", &ns, "restore", "nope", "--to", "copy"]).await,
                3,
                "Database nope not found",
            );
            assert!(databases.get_opt("early").await?.is_none());

            sql_on(
                &client,
                &ns,
                "pg",
                "rw",
                "INSERT INTO t SELECT generate_series(1001, 1500)",
            )
            .await?;
            archive_all(&client, &ns, "pg").await?;
            let restored = tusk(&[
                "-n", &ns, "restore", "pg", "--to", "copy", "--wait", "--timeout", "600",
            ])
            .await
            .ok("restore pg --to copy --wait")?;
            assert!(
                restored.contains("copy restored from pg and Ready in"),
                "{restored}"
            );
            let count = |db: &'static str| {
                let client = client.clone();
                let ns = ns.clone();
                async move {
                    sql_on(&client, &ns, db, "rw", "SELECT count(*), sum(i) FROM t").await
                }
            };
            assert_eq!(count("copy").await?, count("pg").await?);
            assert_eq!(count("copy").await?.trim(), "1500|1125750");
            Ok(())
        },
    )
    .await;
}
