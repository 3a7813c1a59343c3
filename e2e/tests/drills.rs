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
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let db = dbs.get(DB).await?;
    let last = db
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "LastDrill"))
        .ok_or("the Database has no LastDrill condition")?;
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
