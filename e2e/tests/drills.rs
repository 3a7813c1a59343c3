//! Drills on the cluster (issue #30): `Drill` objects against real
//! Databases, judged by Tusk's own probe writing through `-rw`.
//!
//! - On a 3-instance sync Database: a dry run reports its guards only; a
//!   `delete-primary-pod`, a `switchover`, a `kill-replica` and a
//!   `kill-postgres` drill each
//!   succeed with no acknowledged write lost, their probe pods removed and
//!   the Database's `LastDrill` condition set.
//! - A drill on a Database that is not Ready yet is Refused, naming why; a
//!   scheduled drill (`* * * * *`) on it, once Ready, runs by itself.
//! - The operator killed while a `freeze-primary` drill observes its fault:
//!   the next leader ends the run with the fault undone.
//! - `kill-postgres` on the primary (through its instance manager) succeeds
//!   with no acknowledged write lost.
//! - `partition-primary`: the canary proves the cluster enforces
//!   NetworkPolicy, the partition replaces the primary, and once the policy
//!   goes the old primary rejoins as a replica; no policy is left behind.
//! - `store-outage` on a Database with a store: a segment closed during the
//!   outage fails to archive, and reaches the store once it is undone.
//! - A `restore` drill on a 2-instance sync Database with a store and a
//!   completed Backup, the operator killed once its throwaway copy is on
//!   record: the next leader sees the copy Ready, holding every write the
//!   probe saw acknowledged by the recovery point, and deletes it; the
//!   source's Backups and volumes are untouched.
//!
//! The figures each drill measured (write outage, lost writes, time to
//! Ready) are printed, never asserted beyond the drill's own verdict:
//! `bench/drills` is where the figures come from.
//!   e2e-run drills  (or: cargo test --manifest-path e2e/Cargo.toml --test drills -- --nocapture)

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::{Api, DeleteParams, PatchParams};
use serde_json::{Value, json};
use tusk::api::drill::{Drill, DrillPhase};
use tusk::api::status::InstanceRole;
use tusk::api::v1::Database;
use tusk_e2e::drills::{self, finished, phase, report, until as drill_until};
use tusk_e2e::store::{archive_all, spec_with_store, sql_on, store_up};
use tusk_e2e::{
    OPERATOR_NAMESPACE, Result, apply_value, database, in_namespace, install_operator, wait_ready,
};

const DB: &str = "pg";

/// A 3-instance sync Database `pg`, Ready.
async fn sync_database(client: &Client, ns: &str, instances: i32) -> Result<()> {
    let spec = json!({
        "version": "17", "instances": instances,
        "storage": {"size": "1Gi"},
        "replication": {"mode": "sync", "minSyncReplicas": 1}
    });
    apply_value(
        client,
        Some(ns),
        database(DB, spec),
        &PatchParams::apply(tusk_e2e::MANAGER),
    )
    .await?;
    wait_ready(client, ns, DB, instances).await?;
    Ok(())
}

/// Creates Drill `name` with `spec` (the Database is `pg`).
async fn drill(client: &Client, ns: &str, name: &str, spec: Value) -> Result<()> {
    drills::apply(client, ns, DB, name, spec).await
}

/// Runs Drill `name` on `pg` to its end and checks it succeeded with no
/// acknowledged write lost, its probe pod gone and `LastDrill` set.
async fn succeeds(client: &Client, ns: &str, name: &str, spec: Value) -> Result<Drill> {
    drill(client, ns, name, spec).await?;
    let done = drills::succeeded(client, ns, name).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let probe = format!("{name}-probe");
    let deadline = Instant::now() + Duration::from_secs(60);
    while pods.get_opt(&probe).await?.is_some() {
        if Instant::now() > deadline {
            return Err(format!("the probe pod {probe} is still there after the drill").into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The verdict is on record before the pass that wrote it sets
    // `LastDrill` (write-ahead: a restarted operator finishes the run from
    // it), so the condition may follow a moment later.
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    let last = loop {
        let db = dbs.get(DB).await?;
        let last = db
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "LastDrill"));
        match last {
            Some(last) if last.message.contains(name) => break last,
            _ if Instant::now() > deadline => {
                return Err(format!("the Database has no LastDrill condition for {name}").into());
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    if last.status != "True" || last.reason != "Succeeded" || !last.message.contains(name) {
        return Err(format!("LastDrill does not name {name}'s success: {last:?}").into());
    }
    // The next drill starts on a Ready Database with every instance back.
    wait_ready(client, ns, DB, 3).await?;
    Ok(done)
}

#[tokio::test]
async fn drills_on_a_healthy_sync_database_succeed_and_lose_nothing() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-drills",
        Duration::from_secs(1800),
        |client, ns| async move {
            sync_database(&client, &ns, 3).await?;
            // A dry run: the guards only, no probe.
            drill(
                &client,
                &ns,
                "dry",
                json!({"scenario": "delete-primary-pod", "dryRun": true}),
            )
            .await?;
            let dry = drill_until(&client, &ns, "dry", Duration::from_secs(120), finished).await?;
            let line = report("dry run", &dry);
            let status = dry.status.clone().unwrap_or_default();
            if status.phase != Some(DrillPhase::Succeeded)
                || !status
                    .verdict
                    .unwrap_or_default()
                    .contains("dry run: every guard holds")
                || status.probe.is_some()
                || status.fault.is_some()
            {
                return Err(format!("the dry run did more than check the guards: {line}").into());
            }
            let dbs: Api<Database> = Api::namespaced(client.clone(), &ns);
            let before = dbs.get(DB).await?.status.unwrap_or_default();
            let primary = before.current_primary.clone().unwrap_or_default();

            let deleted = succeeds(
                &client,
                &ns,
                "delete-primary",
                json!({"scenario": "delete-primary-pod"}),
            )
            .await?;
            let target = deleted
                .status
                .as_ref()
                .and_then(|s| s.fault.as_ref())
                .map(|f| f.target.clone());
            if target.as_deref() != Some(primary.as_str()) {
                return Err(
                    format!("the drill targeted {target:?}, the primary was {primary}").into(),
                );
            }

            let switched = succeeds(
                &client,
                &ns,
                "switchover",
                json!({"scenario": "switchover"}),
            )
            .await?;
            let new = switched
                .status
                .as_ref()
                .and_then(|s| s.fault.as_ref())
                .map(|f| f.target.clone());
            let now = dbs
                .get(DB)
                .await?
                .status
                .unwrap_or_default()
                .current_primary;
            if new.is_none() || now != new {
                return Err(format!(
                    "after the switchover drill the primary is {now:?}, not {new:?}"
                )
                .into());
            }

            succeeds(
                &client,
                &ns,
                "kill-replica",
                json!({"scenario": "kill-replica"}),
            )
            .await?;

            // The primary's postmaster killed through its instance manager.
            let primary = dbs
                .get(DB)
                .await?
                .status
                .unwrap_or_default()
                .current_primary
                .unwrap_or_default();
            let killed = succeeds(
                &client,
                &ns,
                "kill-postgres",
                json!({"scenario": "kill-postgres"}),
            )
            .await?;
            let target = drills::fault(&killed).map(|f| f.target);
            if target.as_deref() != Some(primary.as_str()) {
                return Err(format!(
                    "kill-postgres targeted {target:?}, the primary was {primary}"
                )
                .into());
            }
            Ok(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_drill_on_an_unready_database_is_refused_and_a_scheduled_one_runs_by_itself() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-drills-refused",
        Duration::from_secs(900),
        |client, ns| async move {
            // Asynchronous: killing the one replica does not stall commits.
            let spec = json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"}});
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec),
                &PatchParams::apply(tusk_e2e::MANAGER),
            )
            .await?;
            drill(
                &client,
                &ns,
                "too-early",
                json!({"scenario": "kill-replica"}),
            )
            .await?;
            let refused = drill_until(
                &client,
                &ns,
                "too-early",
                Duration::from_secs(120),
                finished,
            )
            .await?;
            let line = report("too early", &refused);
            let verdict = refused
                .status
                .as_ref()
                .and_then(|s| s.verdict.clone())
                .unwrap_or_default();
            if phase(&refused) != Some(DrillPhase::Refused)
                || !verdict.contains("is not Ready at its generation")
            {
                return Err(format!("want Refused naming the unready Database: {line}").into());
            }
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            if pods.get_opt("too-early-probe").await?.is_some() {
                return Err("a refused drill started a probe".into());
            }

            wait_ready(&client, &ns, DB, 2).await?;
            drill(
                &client,
                &ns,
                "every-minute",
                json!({"scenario": "kill-replica", "schedule": "* * * * *"}),
            )
            .await?;
            let ran = drill_until(
                &client,
                &ns,
                "every-minute",
                Duration::from_secs(400),
                |d| d.status.as_ref().is_some_and(|s| !s.runs.is_empty()),
            )
            .await?;
            let line = report("scheduled", &ran);
            let status = ran.status.clone().unwrap_or_default();
            let run = status.runs.first().ok_or("no run")?;
            if run.phase != DrillPhase::Succeeded || status.next_run_at.is_none() {
                return Err(format!(
                    "the scheduled run did not succeed or has no next tick: {line}; {run:?}"
                )
                .into());
            }
            // Stop the schedule before the namespace goes.
            let drills: Api<Drill> = Api::namespaced(client.clone(), &ns);
            drills
                .delete("every-minute", &DeleteParams::default())
                .await?;
            Ok(())
        },
    )
    .await;
}

#[tokio::test]
async fn an_operator_killed_mid_drill_still_undoes_the_fault() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-drills-operator",
        Duration::from_secs(900),
        |client, ns| async move {
            sync_database(&client, &ns, 3).await?;
            drill(
                &client,
                &ns,
                "freeze",
                json!({"scenario": "freeze-primary", "durationSeconds": 30, "expect": {"maxWriteOutageSeconds": 120}}),
            )
            .await?;
            let observing = drill_until(&client, &ns, "freeze", Duration::from_secs(300), |d| {
                phase(d) == Some(DrillPhase::Observing)
            })
            .await?;
            let target = observing
                .status
                .as_ref()
                .and_then(|s| s.fault.as_ref())
                .map(|f| f.target.clone())
                .ok_or("no fault on record while observing")?;
            let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
            let leader = leases
                .get("tusk-operator")
                .await?
                .spec
                .and_then(|s| s.holder_identity)
                .ok_or("no operator leader")?;
            let operators: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
            operators
                .delete(&leader, &DeleteParams::default().grace_period(0))
                .await?;
            println!("freeze of {target}: operator {leader} killed while the drill observed");
            let done = drill_until(&client, &ns, "freeze", Duration::from_secs(400), finished).await?;
            let line = report("freeze, operator killed", &done);
            let fault = done
                .status
                .as_ref()
                .and_then(|s| s.fault.clone())
                .ok_or("the finished drill lost its fault record")?;
            if fault.undone_at.is_none() {
                return Err(format!("the fault is not undone: {line}").into());
            }
            if !matches!(phase(&done), Some(DrillPhase::Succeeded | DrillPhase::Failed)) {
                return Err(format!("the run did not reach a verdict: {line}").into());
            }
            // Undone for real: the Database serves again with every instance.
            wait_ready(&client, &ns, DB, 3).await?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            if pods.get_opt("freeze-probe").await?.is_some() {
                return Err("the probe pod outlived the drill".into());
            }
            Ok(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_partitioned_primary_is_replaced_and_rejoins_once_the_policy_goes() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-drills-partition",
        Duration::from_secs(900),
        |client, ns| async move {
            sync_database(&client, &ns, 3).await?;
            let dbs: Api<Database> = Api::namespaced(client.clone(), &ns);
            let primary = dbs
                .get(DB)
                .await?
                .status
                .unwrap_or_default()
                .current_primary
                .unwrap_or_default();
            let done = succeeds(
                &client,
                &ns,
                "cut",
                json!({"scenario": "partition-primary", "durationSeconds": 20,
                       "expect": {"maxWriteOutageSeconds": 60}}),
            )
            .await?;
            let line = report("partition", &done);
            let status = done.status.clone().unwrap_or_default();
            // The canary proved enforcement and went before the partition.
            let check = status
                .policy_check
                .clone()
                .ok_or_else(|| format!("no NetworkPolicy check on record: {line}"))?;
            if check.enforced_at.is_none() || check.removed_at.is_none() {
                return Err(format!("the canary did not prove enforcement: {check:?}").into());
            }
            let fault = status.fault.clone().ok_or("no fault on record")?;
            if fault.target != primary || fault.object.as_deref() != Some("cut-partition") {
                return Err(
                    format!("the partition cut {fault:?}, the primary was {primary}").into(),
                );
            }
            // Cut off, the primary was replaced: a failover happened.
            let now = dbs.get(DB).await?.status.unwrap_or_default();
            if now.current_primary.as_deref() == Some(primary.as_str())
                || drills::figures(&done).failover_seconds.is_none()
            {
                return Err(format!(
                    "no failover away from the partitioned {primary}: primary {:?}; {line}",
                    now.current_primary
                )
                .into());
            }
            // Both policies are gone, the old primary is back as a replica.
            let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns);
            let left: Vec<String> = policies
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            if !left.is_empty() {
                return Err(format!("NetworkPolicies left after the drill: {left:?}").into());
            }
            let members = now.instances;
            let old = members
                .iter()
                .find(|m| m.name == primary)
                .ok_or_else(|| format!("{primary} is not among the instances"))?;
            if old.role != Some(InstanceRole::Replica) || !old.ready {
                return Err(format!("{primary} did not rejoin as a ready replica: {old:?}").into());
            }
            Ok(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_store_outage_is_undone_and_archiving_catches_up() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-drills-store",
        Duration::from_secs(900),
        |client, ns| async move {
            let (endpoint, bucket) = store_up(&ns).await?;
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec_with_store(1, &endpoint, &bucket)),
                &PatchParams::apply(tusk_e2e::MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, DB, 1).await?;
            sql_on(&client, &ns, DB, "rw", "CREATE TABLE filler (x text)").await?;
            archive_all(&client, &ns, DB).await?;
            drill(
                &client,
                &ns,
                "store",
                json!({"scenario": "store-outage", "durationSeconds": 30}),
            )
            .await?;
            drills::injected(&client, &ns, "store").await?;
            drill_until(&client, &ns, "store", Duration::from_secs(60), |d| {
                phase(d) == Some(DrillPhase::Observing) || finished(d)
            })
            .await?;
            // A segment closed during the outage: archiving it fails.
            let failures = |row: &str| row.trim().parse::<i64>().unwrap_or(-1);
            let before = failures(
                &sql_on(
                    &client,
                    &ns,
                    DB,
                    "rw",
                    "SELECT failed_count FROM pg_stat_archiver",
                )
                .await?,
            );
            sql_on(
                &client,
                &ns,
                DB,
                "rw",
                "INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 100)",
            )
            .await?;
            let closed = sql_on(
                &client,
                &ns,
                DB,
                "rw",
                "SELECT pg_walfile_name(pg_switch_wal())",
            )
            .await?
            .trim()
            .to_owned();
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let now = failures(
                    &sql_on(
                        &client,
                        &ns,
                        DB,
                        "rw",
                        "SELECT failed_count FROM pg_stat_archiver",
                    )
                    .await?,
                );
                if now > before {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "archiving {closed} did not fail during the drill's store outage"
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let done = drills::succeeded(&client, &ns, "store").await?;
            let fault = drills::fault(&done).ok_or("no fault on record")?;
            if fault.undone_at.is_none() {
                return Err(format!("the store outage is not undone: {fault:?}").into());
            }
            // Undone: the segment closed during the outage reaches the store.
            archive_all(&client, &ns, DB).await?;
            let archived = sql_on(
                &client,
                &ns,
                DB,
                "rw",
                &format!("SELECT last_archived_wal >= '{closed}' FROM pg_stat_archiver"),
            )
            .await?;
            if archived.trim() != "t" {
                return Err(format!("{closed} never reached the store after the drill").into());
            }
            Ok(())
        },
    )
    .await;
}

/// The names and uids of `ns`'s objects of kind `K` whose label
/// `tusk.dev/database` (for Backups: `spec.database`) is `db`.
async fn restore_drill_owned<K>(
    client: &Client,
    ns: &str,
    db: &str,
) -> Result<Vec<(String, String)>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + serde::Serialize,
    <K as kube::Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let mut found: Vec<(String, String)> = api
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|o| {
            let value = serde_json::to_value(o).unwrap_or_default();
            value["metadata"]["labels"]["tusk.dev/database"] == db
                || value["spec"]["database"] == db
        })
        .map(|o| {
            let meta = o.meta();
            (
                meta.name.clone().unwrap_or_default(),
                meta.uid.clone().unwrap_or_default(),
            )
        })
        .collect();
    found.sort();
    Ok(found)
}

/// A `restore` drill: the newest backup and the archive restored into a
/// throwaway Database at a point between the probe's writes, every write
/// acknowledged by that point found in it, the copy deleted; the source's
/// Backups and PVCs untouched. The operator is killed once the copy is on
/// record: the next leader goes on from the Drill's status.
#[tokio::test]
async fn a_restore_drill_restores_checks_and_removes_a_throwaway_copy() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use tusk::api::status::BackupPhase;
    use tusk::api::v1::Backup;
    use tusk_e2e::store::{spec_with_store, store_up};

    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-drill-restore",
        Duration::from_secs(1500),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            let mut spec = spec_with_store(2, &endpoint, &bucket);
            spec["replication"] = json!({"mode": "sync", "minSyncReplicas": 1});
            apply_value(&client, Some(&ns), database(DB, spec), &apply).await?;
            wait_ready(&client, &ns, DB, 2).await?;
            apply_value(
                &client,
                Some(&ns),
                json!({
                    "apiVersion": "tusk.dev/v1", "kind": "Backup", "metadata": {"name": "base"},
                    "spec": {"database": DB}
                }),
                &apply,
            )
            .await?;
            let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
            let base = tusk_e2e::wait_for(&backups, "base", Duration::from_secs(300), |b| {
                matches!(
                    b.status.as_ref().and_then(|s| s.phase),
                    Some(BackupPhase::Completed | BackupPhase::Failed)
                )
            })
            .await?;
            if base.status.as_ref().and_then(|s| s.phase) != Some(BackupPhase::Completed) {
                return Err(format!("Backup base did not complete: {:?}", base.status).into());
            }
            let backups_before = restore_drill_owned::<Backup>(&client, &ns, DB).await?;
            let claims_before =
                restore_drill_owned::<PersistentVolumeClaim>(&client, &ns, DB).await?;

            // Timing is bench/drills' business: bounds that only a hang misses.
            drill(
                &client,
                &ns,
                "restore",
                json!({
                    "scenario": "restore",
                    "abortAfterSeconds": 1200,
                    "expect": {"maxSecondsToReady": 1200}
                }),
            )
            .await?;
            let recorded = drill_until(&client, &ns, "restore", Duration::from_secs(600), |d| {
                d.status.as_ref().is_some_and(|s| s.fault.is_some()) || finished(d)
            })
            .await?;
            let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
            let leader = leases
                .get("tusk-operator")
                .await?
                .spec
                .and_then(|s| s.holder_identity)
                .ok_or("no operator leader")?;
            let operators: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
            operators
                .delete(&leader, &DeleteParams::default().grace_period(0))
                .await?;
            println!(
                "restore: operator {leader} killed in phase {:?}",
                phase(&recorded)
            );
            // The verdict is written before the copy's deletion is: wait
            // for both (a copy never recorded deleted times out here, with
            // the Drill's status).
            let done = drill_until(&client, &ns, "restore", Duration::from_secs(1300), |d| {
                finished(d) && drills::fault(d).is_none_or(|f| f.undone_at.is_some())
            })
            .await?;
            let line = report("restore", &done);
            let status = done.status.clone().unwrap_or_default();
            let figures = status.figures.clone().unwrap_or_default();
            println!(
                "restore: recovery {:?} s, {:?} rows compared",
                figures.recovery_seconds, figures.rows_compared
            );
            if status.phase != Some(DrillPhase::Succeeded) {
                return Err(format!("the restore drill did not succeed: {line}").into());
            }
            let recovered = figures.recovery_seconds.is_some_and(|s| s > 0.0);
            let compared = figures.rows_compared.is_some_and(|n| n >= 3);
            if !(recovered && compared) {
                return Err(format!("want a recovery time and at least 3 rows compared: {figures:?}").into());
            }
            let fault = status.fault.clone().ok_or("the finished drill lost its copy's record")?;
            let copy = fault.object.clone().ok_or("no copy on record")?;
            if fault.undone_at.is_none() {
                return Err(format!("the copy {copy} is not recorded deleted: {line}").into());
            }
            // The copy, its volumes and the checker go.
            let dbs: Api<Database> = Api::namespaced(client.clone(), &ns);
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let deadline = Instant::now() + Duration::from_secs(180);
            loop {
                let copy_left = dbs.get_opt(&copy).await?.is_some();
                let claims_left = restore_drill_owned::<PersistentVolumeClaim>(&client, &ns, &copy)
                    .await?;
                let checker_left = pods.get_opt("restore-check").await?.is_some();
                if !copy_left && claims_left.is_empty() && !checker_left {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "after the drill: copy {copy} left {copy_left}, its volumes {claims_left:?}, the checker left {checker_left}"
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            // The source's Backups and volumes are the same objects.
            let backups_after = restore_drill_owned::<Backup>(&client, &ns, DB).await?;
            let claims_after =
                restore_drill_owned::<PersistentVolumeClaim>(&client, &ns, DB).await?;
            if backups_after != backups_before || claims_after != claims_before {
                return Err(format!(
                    "the source's objects changed: Backups {backups_before:?} -> {backups_after:?}, PVCs {claims_before:?} -> {claims_after:?}"
                )
                .into());
            }
            wait_ready(&client, &ns, DB, 2).await?;
            Ok(())
        },
    )
    .await;
}
