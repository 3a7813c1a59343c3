//! Major upgrades on the cluster (issue #16, item 2): `spec.version` 15 → 17
//! runs `pg_upgrade --check` in a Job while 15 serves, stops the instances,
//! runs `pg_upgrade --link` in a Job on the primary's volume, starts 17 on it
//! and re-clones the replicas; a check that fails leaves 15 running,
//! untouched, with the cause in the Ready condition; a link that fails after
//! the check passed (a view on a statistics column 17 removed, which only
//! the schema restore finds) is rolled back: 15 serves again on its own data,
//! every row there, the cause in the Ready condition; a first start of 17
//! that fails (a parameter 17 removed) is undone by setting `spec.version`
//! back before 17 answered.
//!
//! Times are printed, never asserted: `bench/upgrade` measures them.
//!   cargo test --manifest-path e2e/Cargo.toml --test major_upgrades -- --nocapture

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tusk::api::status::{BackupPhase, BackupStatus, DatabasePhase, UpgradeStep};
use tusk::api::v1::{Backup, Database};
use tusk::resources::POSTGRES_CONTAINER;
use tusk_e2e::faults::psql_local;
use tusk_e2e::store::{in_store, spec_with_store, store_up};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, ready_condition, wait_for,
    wait_ready,
};

const DB: &str = "pg";
/// Long enough for two Jobs, a stop, a start and two clones on a busy node.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(600);

fn spec(version: &str, instances: i32) -> serde_json::Value {
    json!({
        "version": version, "instances": instances, "storage": {"size": "1Gi"},
        "bootstrap": {"initdb": {"database": "app", "owner": "app"}}
    })
}

/// `statements` on instance `pod` through its unix socket, in database `app`.
async fn on(client: &Client, ns: &str, pod: &str, statements: &[&str]) -> Result<String> {
    let mut all = vec!["\\c app"];
    all.extend(statements);
    let out = psql_local(client, ns, pod, &all).await?;
    if !out.success {
        return Err(format!("psql on {pod} failed: {}{}", out.stdout, out.stderr).into());
    }
    Ok(out.stdout.trim().to_owned())
}

async fn primary(client: &Client, ns: &str) -> Result<String> {
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    let db = databases.get(DB).await?;
    db.status
        .and_then(|s| s.current_primary)
        .ok_or_else(|| "no current primary".into())
}

async fn set_version(client: &Client, ns: &str, version: &str) -> Result<()> {
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    databases
        .patch(
            DB,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": version}})),
        )
        .await?;
    Ok(())
}

fn postgres_image(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == POSTGRES_CONTAINER))
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// Each of `expected` was seen in `steps`, in this order (a step that was
/// never seen fails, where comparing two `Option` positions would not).
fn assert_seen_in_order(steps: &[UpgradeStep], expected: &[UpgradeStep]) {
    let at: Vec<usize> = expected
        .iter()
        .map(|step| {
            steps
                .iter()
                .position(|s| s == step)
                .unwrap_or_else(|| panic!("{step:?} never seen: {steps:?}"))
        })
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "not in the order {expected:?}: {steps:?}"
    );
}

#[test]
fn a_step_never_seen_or_out_of_order_fails_the_order_check() {
    use UpgradeStep::{BackingUp, Checking, Stopping};
    let order = [Checking, BackingUp, Stopping];
    assert_seen_in_order(&[Checking, BackingUp, Stopping], &order);
    for steps in [
        vec![BackingUp, Stopping],
        vec![Checking, Stopping],
        vec![Checking, Stopping, BackingUp],
        vec![],
    ] {
        let failed = std::panic::catch_unwind(|| assert_seen_in_order(&steps, &order));
        assert!(failed.is_err(), "{steps:?} passed");
    }
}

/// Sets `spec.version` to 17 and waits for the upgrade to be done with
/// `instances` ready: the Database and the steps seen on the way.
async fn upgrade_to_seventeen(
    client: &Client,
    ns: &str,
    instances: i32,
) -> Result<(Database, Vec<UpgradeStep>)> {
    let started = Instant::now();
    set_version(client, ns, "17").await?;
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    let mut steps: Vec<UpgradeStep> = Vec::new();
    loop {
        let db = databases.get(DB).await?;
        let status = db.status.clone().unwrap_or_default();
        if let Some(step) = status.upgrade.as_ref().map(|u| u.step)
            && steps.last() != Some(&step)
        {
            println!(
                "{:>6.1} s: {step:?} ({:?})",
                started.elapsed().as_secs_f64(),
                status.phase
            );
            steps.push(step);
        }
        let settled = status.phase == Some(DatabasePhase::Ready)
            && status.observed_generation == db.metadata.generation
            && status.ready_instances == Some(instances)
            && status
                .upgrade
                .as_ref()
                .is_some_and(|u| u.step == UpgradeStep::Done);
        if settled {
            return Ok((db, steps));
        }
        if started.elapsed() > UPGRADE_TIMEOUT {
            return Err(format!(
                "not upgraded after {UPGRADE_TIMEOUT:?}: steps {steps:?}, Ready {:?}",
                ready_condition(&db)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_fifteen_database_is_upgraded_to_seventeen_with_all_its_data() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("major-upgrade", UPGRADE_TIMEOUT * 2, |client, ns| async move {
        apply_value(&client, Some(&ns), database(DB, spec("15", 3)), &PatchParams::apply(tusk_e2e::MANAGER)).await?;
        wait_ready(&client, &ns, DB, 3).await?;
        let old = primary(&client, &ns).await?;
        on(
            &client,
            &ns,
            &old,
            &[
                "CREATE TABLE items (id bigserial PRIMARY KEY, label text NOT NULL, created timestamptz DEFAULT now())",
                "INSERT INTO items (label) SELECT 'item-' || g FROM generate_series(1, 5000) g",
                "CREATE INDEX items_label ON items (label)",
                "CREATE SEQUENCE tickets START 100",
                "SELECT nextval('tickets') FROM generate_series(1, 5)",
            ],
        )
        .await?;
        let before = on(&client, &ns, &old, &["SELECT sum(id), count(*) FROM items"]).await?;

        let started = Instant::now();
        let (done, steps) = upgrade_to_seventeen(&client, &ns, 3).await?;
        println!("15 -> 17 of 3 instances: Ready again after {:.1} s", started.elapsed().as_secs_f64());
        for step in [
            UpgradeStep::Checking,
            UpgradeStep::Stopping,
            UpgradeStep::Upgrading,
            UpgradeStep::Starting,
            UpgradeStep::Done,
        ] {
            assert!(steps.contains(&step), "{step:?} never seen: {steps:?}");
        }
        let upgrade = done.status.as_ref().and_then(|s| s.upgrade.clone()).expect("upgrade");
        assert_eq!((upgrade.from, upgrade.to), (15, 17));

        let new = primary(&client, &ns).await?;
        assert_eq!(new, old, "the upgraded data directory is the primary's");
        assert!(
            on(&client, &ns, &new, &["SHOW server_version_num"]).await?.starts_with("17"),
            "the primary runs 17"
        );
        assert_eq!(on(&client, &ns, &new, &["SELECT sum(id), count(*) FROM items"]).await?, before);
        let plan = on(
            &client,
            &ns,
            &new,
            &["SET enable_seqscan = off", "EXPLAIN SELECT * FROM items WHERE label = 'item-42'"],
        )
        .await?;
        assert!(plan.contains("items_label"), "the index is used on 17: {plan}");
        assert_eq!(on(&client, &ns, &new, &["SELECT nextval('tickets')"]).await?, "105");

        // Every replica streams from the upgraded primary and runs 17.
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        for serial in 1..=3 {
            let name = format!("{DB}-{serial}");
            let pod = pods.get(&name).await?;
            assert_eq!(postgres_image(&pod), "localhost/postgres:17", "{name}");
            assert!(on(&client, &ns, &name, &["SHOW server_version_num"]).await?.starts_with("17"));
            if name != new {
                assert_eq!(on(&client, &ns, &name, &["SELECT count(*) FROM items"]).await?, "5000");
            }
        }
        let streaming = on(
            &client,
            &ns,
            &new,
            &["SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"],
        )
        .await?;
        assert_eq!(streaming, "2", "both replicas stream from the upgraded primary");
        // Writes work on 17, and the old data directory is gone.
        on(&client, &ns, &new, &["INSERT INTO items (label) VALUES ('after')"]).await?;
        let kept = tusk_e2e::faults::exec(
            &client,
            &ns,
            &new,
            POSTGRES_CONTAINER,
            &["sh", "-c", "ls -d /var/lib/postgresql/data/pgdata.15.old 2>/dev/null || true"],
        )
        .await?;
        assert_eq!(kept.stdout.trim(), "", "the old data directory is removed once 17 answered");
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn a_failing_check_leaves_fifteen_running_and_names_the_cause() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("upgrade-check", UPGRADE_TIMEOUT, |client, ns| async move {
        apply_value(
            &client,
            Some(&ns),
            database(DB, spec("15", 1)),
            &PatchParams::apply(tusk_e2e::MANAGER),
        )
        .await?;
        wait_ready(&client, &ns, DB, 1).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let uid = pods.get(&format!("{DB}-1")).await?.uid();
        // pg_upgrade refuses user tables with reg* columns (other than
        // regclass, regrole and regtype): their OIDs do not survive.
        on(
            &client,
            &ns,
            &format!("{DB}-1"),
            &[
                "CREATE TABLE hooks (fn regproc)",
                "INSERT INTO hooks VALUES ('now')",
            ],
        )
        .await?;

        set_version(&client, &ns, "17").await?;
        let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
        let failed = wait_for(&databases, DB, UPGRADE_TIMEOUT, |db| {
            ready_condition(db).is_some_and(|(_, reason, _)| reason == "UpgradeCheckFailed")
        })
        .await?;
        let (status, _, message) = ready_condition(&failed).expect("Ready");
        println!("Ready: {message}");
        assert_eq!(status, "False");
        assert!(message.starts_with("spec.version: "), "{message}");
        assert!(
            message.contains("reg*"),
            "pg_upgrade's words are quoted: {message}"
        );
        let upgrade = failed
            .status
            .as_ref()
            .and_then(|s| s.upgrade.clone())
            .expect("upgrade");
        assert_eq!(upgrade.step, UpgradeStep::CheckFailed);
        assert_eq!(
            failed.status.as_ref().and_then(|s| s.phase),
            Some(DatabasePhase::Blocked)
        );

        // 15 runs on, untouched: the same pod, its data, writable.
        let pod = pods.get(&format!("{DB}-1")).await?;
        assert_eq!(pod.uid(), uid, "the instance was not restarted");
        assert_eq!(postgres_image(&pod), "localhost/postgres:15");
        let name = format!("{DB}-1");
        assert!(
            on(&client, &ns, &name, &["SHOW server_version_num"])
                .await?
                .starts_with("15")
        );
        assert_eq!(
            on(&client, &ns, &name, &["SELECT count(*) FROM hooks"]).await?,
            "1"
        );
        on(&client, &ns, &name, &["INSERT INTO hooks VALUES ('now')"]).await?;

        // Asking for 15 again is the way back: Ready on 15.
        set_version(&client, &ns, "15").await?;
        let back = wait_ready(&client, &ns, DB, 1).await?;
        assert_eq!(pods.get(&name).await?.uid(), uid);
        println!(
            "back on 15: Ready {:?}",
            ready_condition(&back).map(|(_, reason, _)| reason)
        );
        Ok(())
    })
    .await;
}

/// The check passes but `pg_upgrade --link` fails: a view reads
/// `pg_stat_bgwriter.checkpoints_timed`, a column 17 moved to
/// `pg_stat_checkpointer`, and `--check` does not restore the schema, so
/// only the real run finds it (before linking anything). The rollback Job
/// puts 15 back: it serves on its own data with every row, and the Ready
/// condition quotes pg_upgrade.
#[tokio::test]
async fn a_failing_link_is_rolled_back_to_fifteen_with_every_row_and_names_the_cause() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("upgrade-link", UPGRADE_TIMEOUT, |client, ns| async move {
        apply_value(
            &client,
            Some(&ns),
            database(DB, spec("15", 1)),
            &PatchParams::apply(tusk_e2e::MANAGER),
        )
        .await?;
        wait_ready(&client, &ns, DB, 1).await?;
        let name = format!("{DB}-1");
        on(
            &client,
            &ns,
            &name,
            &[
                "CREATE TABLE items AS SELECT g AS id, md5(g::text) AS label FROM generate_series(1, 5000) g",
                "CREATE VIEW checkpoints AS SELECT checkpoints_timed FROM pg_stat_bgwriter",
            ],
        )
        .await?;
        let rows = "SELECT sum(id), count(*), max(label) FROM items";
        let before = on(&client, &ns, &name, &[rows]).await?;

        let started = Instant::now();
        set_version(&client, &ns, "17").await?;
        let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
        let mut steps: Vec<UpgradeStep> = Vec::new();
        let undone = loop {
            let db = databases.get(DB).await?;
            let status = db.status.clone().unwrap_or_default();
            if let Some(step) = status.upgrade.as_ref().map(|u| u.step)
                && steps.last() != Some(&step)
            {
                println!("{:>6.1} s: {step:?} ({:?})", started.elapsed().as_secs_f64(), status.phase);
                steps.push(step);
            }
            let back = ready_condition(&db).is_some_and(|(_, reason, _)| reason == "UpgradeRolledBack")
                && status.ready_instances == Some(1);
            if back {
                break db;
            }
            if started.elapsed() > UPGRADE_TIMEOUT {
                return Err(format!(
                    "not rolled back after {UPGRADE_TIMEOUT:?}: steps {steps:?}, Ready {:?}",
                    ready_condition(&db)
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert_seen_in_order(
            &steps,
            &[
                UpgradeStep::Checking,
                UpgradeStep::Upgrading,
                UpgradeStep::RollingBack,
                UpgradeStep::RolledBack,
            ],
        );
        let (status, _, message) = ready_condition(&undone).expect("Ready");
        println!("Ready: {message}");
        assert_eq!(status, "False");
        assert!(message.starts_with("spec.version: "), "{message}");
        assert!(
            message.contains("pg_upgrade --link from 15 to 17 failed")
                && message.contains("checkpoints_timed"),
            "pg_upgrade's words are quoted: {message}"
        );
        assert!(message.contains("15 runs on its own data"), "{message}");
        let upgrade = undone.status.as_ref().and_then(|s| s.upgrade.clone()).expect("upgrade");
        assert_eq!((upgrade.from, upgrade.to, upgrade.step), (15, 17, UpgradeStep::RolledBack));

        // 15 serves again, on its own data, every row there, writable.
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        assert_eq!(postgres_image(&pods.get(&name).await?), "localhost/postgres:15");
        assert!(on(&client, &ns, &name, &["SHOW server_version_num"]).await?.starts_with("15"));
        assert_eq!(on(&client, &ns, &name, &[rows]).await?, before);
        on(&client, &ns, &name, &["INSERT INTO items VALUES (5001, 'after')"]).await?;
        assert_eq!(on(&client, &ns, &name, &["SELECT count(*) FROM items"]).await?, "5001");
        let left = tusk_e2e::faults::exec(
            &client,
            &ns,
            &name,
            POSTGRES_CONTAINER,
            &["sh", "-c", "ls -d /var/lib/postgresql/data/pgdata.* 2>/dev/null || true"],
        )
        .await?;
        assert_eq!(left.stdout.trim(), "", "no new or old data directory is left beside PGDATA");
        Ok(())
    })
    .await;
}

/// The link succeeds but PostgreSQL 17 does not start on the upgraded data:
/// `spec.postgresql.parameters` sets `old_snapshot_threshold`, which 15 knows
/// and 17 removed. Neither `pg_upgrade --check` nor the link starts the new
/// major with the Database's parameters, so only the first start finds it.
/// Until 17 answers, setting `spec.version` back undoes the upgrade: the
/// rollback Job puts 15's data directory back and 15 serves with every row.
#[tokio::test]
async fn a_first_start_that_fails_is_undone_by_setting_the_version_back() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("upgrade-start", UPGRADE_TIMEOUT, |client, ns| async move {
        let mut fifteen = spec("15", 1);
        fifteen["postgresql"] = json!({"parameters": {"old_snapshot_threshold": "-1"}});
        apply_value(
            &client,
            Some(&ns),
            database(DB, fifteen),
            &PatchParams::apply(tusk_e2e::MANAGER),
        )
        .await?;
        wait_ready(&client, &ns, DB, 1).await?;
        let name = format!("{DB}-1");
        on(
            &client,
            &ns,
            &name,
            &["CREATE TABLE items AS SELECT g AS id, md5(g::text) AS label FROM generate_series(1, 5000) g"],
        )
        .await?;
        let rows = "SELECT sum(id), count(*), max(label) FROM items";
        let before = on(&client, &ns, &name, &[rows]).await?;

        let started = Instant::now();
        set_version(&client, &ns, "17").await?;
        let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let mut steps: Vec<UpgradeStep> = Vec::new();
        // Proof that 17 was started and refused: its own words in the pod's log.
        let refused = loop {
            let db = databases.get(DB).await?;
            let status = db.status.clone().unwrap_or_default();
            let step = status.upgrade.as_ref().map(|u| u.step);
            if let Some(step) = step
                && steps.last() != Some(&step)
            {
                println!("{:>6.1} s: {step:?} ({:?})", started.elapsed().as_secs_f64(), status.phase);
                steps.push(step);
            }
            if step == Some(UpgradeStep::Starting)
                && let Ok(pod) = pods.get(&name).await
                && postgres_image(&pod) == "localhost/postgres:17"
            {
                let params = kube::api::LogParams {
                    container: Some(POSTGRES_CONTAINER.to_owned()),
                    ..Default::default()
                };
                let log = pods.logs(&name, &params).await.unwrap_or_default();
                if let Some(line) = log
                    .lines()
                    .find(|l| l.contains("old_snapshot_threshold") && l.contains("unrecognized"))
                {
                    break line.to_owned();
                }
            }
            assert_ne!(step, Some(UpgradeStep::Done), "17 answered with a parameter it removed");
            if started.elapsed() > UPGRADE_TIMEOUT {
                return Err(format!("17 never refused to start: steps {steps:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        println!("{:>6.1} s: 17 refused: {refused}", started.elapsed().as_secs_f64());
        let db = databases.get(DB).await?;
        let (ready, _, message) = ready_condition(&db).expect("Ready");
        println!("Ready while 17 does not start: {message}");
        assert_eq!(ready, "False");
        let upgrade = db.status.as_ref().and_then(|s| s.upgrade.clone()).expect("upgrade");
        assert_eq!((upgrade.from, upgrade.to, upgrade.step), (15, 17, UpgradeStep::Starting));

        set_version(&client, &ns, "15").await?;
        let back = loop {
            let db = databases.get(DB).await?;
            let status = db.status.clone().unwrap_or_default();
            if let Some(step) = status.upgrade.as_ref().map(|u| u.step)
                && steps.last() != Some(&step)
            {
                println!("{:>6.1} s: {step:?} ({:?})", started.elapsed().as_secs_f64(), status.phase);
                steps.push(step);
            }
            if status.phase == Some(DatabasePhase::Ready)
                && status.observed_generation == db.metadata.generation
                && steps.last() == Some(&UpgradeStep::RolledBack)
            {
                break db;
            }
            if started.elapsed() > UPGRADE_TIMEOUT {
                return Err(format!("not back on 15 after {UPGRADE_TIMEOUT:?}: steps {steps:?}, Ready {:?}", ready_condition(&db)).into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert_seen_in_order(
            &steps,
            &[
                UpgradeStep::Checking,
                UpgradeStep::Upgrading,
                UpgradeStep::Starting,
                UpgradeStep::RollingBack,
                UpgradeStep::RolledBack,
            ],
        );
        let upgrade = back.status.as_ref().and_then(|s| s.upgrade.clone()).expect("upgrade");
        let said = upgrade.message.clone().unwrap_or_default();
        println!("upgrade: {said}");
        assert!(said.contains("went back to 15 before PostgreSQL 17 answered"), "{said}");

        // 15 serves again, on its own data, every row there, writable.
        assert_eq!(postgres_image(&pods.get(&name).await?), "localhost/postgres:15");
        assert!(on(&client, &ns, &name, &["SHOW server_version_num"]).await?.starts_with("15"));
        assert_eq!(on(&client, &ns, &name, &[rows]).await?, before);
        on(&client, &ns, &name, &["INSERT INTO items VALUES (5001, 'after')"]).await?;
        assert_eq!(on(&client, &ns, &name, &["SELECT count(*) FROM items"]).await?, "5001");
        Ok(())
    })
    .await;
}

/// A Backup's status once `done` says so, within the backup timeout.
async fn backup_when(
    client: &Client,
    ns: &str,
    name: &str,
    done: impl Fn(&BackupStatus) -> bool,
) -> Result<BackupStatus> {
    let backups: Api<Backup> = Api::namespaced(client.clone(), ns);
    let backup = wait_for(&backups, name, Duration::from_secs(300), |b| {
        b.status.as_ref().is_some_and(&done)
    })
    .await?;
    Ok(backup.status.unwrap_or_default())
}

/// With an object store (item 2, "backup first" and "the new system
/// identifier's path"): a base backup of 15 completes before anything stops
/// and is proven by a restore with 15; once 17 answers, the new system
/// identifier archives its WAL and gets its first base backup under its own
/// path, proven by a restore with 17.
#[tokio::test]
async fn with_a_store_a_backup_comes_first_and_the_new_system_archives_its_own() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "major-upgrade-store",
        UPGRADE_TIMEOUT * 2,
        |client, ns| async move {
            let (endpoint, bucket) = store_up(&ns).await?;
            let mut spec = spec_with_store(1, &endpoint, &bucket);
            spec["version"] = json!("15");
            spec["backup"]["verify"] = json!(true);
            spec["bootstrap"] = json!({"initdb": {"database": "app", "owner": "app"}});
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec),
                &PatchParams::apply(tusk_e2e::MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, DB, 1).await?;
            let pod = format!("{DB}-1");
            on(
                &client,
                &ns,
                &pod,
                &["CREATE TABLE items AS SELECT g AS id FROM generate_series(1, 1000) g"],
            )
            .await?;
            let system = "SELECT system_identifier FROM pg_control_system()";
            let old_system = on(&client, &ns, &pod, &[system]).await?;

            let (_, steps) = upgrade_to_seventeen(&client, &ns, 1).await?;
            assert_seen_in_order(
                &steps,
                &[
                    UpgradeStep::Checking,
                    UpgradeStep::BackingUp,
                    UpgradeStep::Stopping,
                ],
            );

            // The backup was complete before the instance stopped (the pod that
            // runs 17 was created after the stop).
            let before = backup_when(&client, &ns, &format!("{DB}-upgrade-15-17-before"), |s| {
                s.phase == Some(BackupPhase::Completed) && s.verified.is_some()
            })
            .await?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let restarted = pods
                .get(&pod)
                .await?
                .metadata
                .creation_timestamp
                .ok_or("no creation time")?;
            let completed = before
                .completed_at
                .clone()
                .ok_or("the before-backup has no completion time")?;
            assert!(
                completed.0 <= restarted.0,
                "completed {completed:?}, instance re-created {restarted:?}"
            );
            assert_eq!(before.image.as_deref(), Some("localhost/postgres:15"));
            assert_eq!(
                before.verified,
                Some(true),
                "a restore with 15 proves it: {:?}",
                before.conditions
            );
            let location = before.location.clone().unwrap_or_default();
            assert!(location.contains(&format!("/{old_system}/")), "{location}");

            // The new system: its own identifier, its first base backup, its WAL.
            let new_system = on(&client, &ns, &pod, &[system]).await?;
            assert_ne!(
                new_system, old_system,
                "pg_upgrade makes a new system identifier"
            );
            let after = backup_when(&client, &ns, &format!("{DB}-upgrade-15-17-after"), |s| {
                s.phase == Some(BackupPhase::Completed) && s.verified.is_some()
            })
            .await?;
            let location = after.location.clone().unwrap_or_default();
            assert!(location.contains(&format!("/{new_system}/")), "{location}");
            assert_eq!(after.image.as_deref(), Some("localhost/postgres:17"));
            assert_eq!(
                after.verified,
                Some(true),
                "a restore with 17 proves it: {:?}",
                after.conditions
            );

            on(&client, &ns, &pod, &["INSERT INTO items VALUES (1001)"]).await?;
            let closed = on(
                &client,
                &ns,
                &pod,
                &["SELECT pg_walfile_name(pg_switch_wal())"],
            )
            .await?;
            let archived = format!("SELECT last_archived_wal >= '{closed}' FROM pg_stat_archiver");
            let deadline = Instant::now() + Duration::from_secs(120);
            while on(&client, &ns, &pod, &[&archived]).await? != "t" {
                if Instant::now() > deadline {
                    return Err(format!("segment {closed} of 17 is not archived").into());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let stored = in_store(
                &client,
                &ns,
                &format!("ls /data/buckets/tusk/e2e/{DB}/{new_system}/wal/*/ 2>/dev/null"),
            )
            .await?;
            assert!(
                stored.contains(&closed),
                "segment {closed} under the new system's path: {stored}"
            );
            Ok(())
        },
    )
    .await;
}
