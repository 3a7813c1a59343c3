//! What one pass of the Drill controller reads: the Drill's Database (and,
//! for the backup guard, its verified Backups), the other Drills on the same
//! Database, the probe pod and its `GET /report`, what the admission rules
//! find wrong with the Drill now, and for `restore` the throwaway Database
//! and the checker pod ([`restore`]). Turned into the pure [`Observed`] the
//! state machine plans from.

mod restore;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::probe_client;
use crate::api::v1::{Backup, Database, Drill, ReplicationMode};
use crate::api::{store, validate_drill};
use crate::controller::{Context, Error};
use crate::drill::{DatabaseView, Failover, Member, Observed, ProbeView, is_running};
use crate::resources::probe_pod_name;

/// The Database condition a drill starts on and waits for again.
const READY: &str = "Ready";

/// The observation of one pass, and the objects the actions need.
pub struct Seen {
    pub observed: Observed,
    pub database: Option<Database>,
    /// The probe pod's IP, when it has one.
    pub probe_ip: Option<String>,
}

/// Reads everything drill `drill` plans from.
pub async fn observe(ctx: &Context, drill: &Drill, namespace: &str) -> Result<Seen, Error> {
    let databases: Api<Database> = Api::namespaced(ctx.client.clone(), namespace);
    let database = databases
        .get_opt(&drill.spec.database)
        .await
        .map_err(Error::kube("reading the Drill's Database"))?;
    let newest_verified_backup = match (&database, drill.spec.guards.max_backup_age_hours) {
        (Some(_), Some(_)) => newest_verified_backup(ctx, namespace, &drill.spec.database).await?,
        _ => None,
    };
    let view = database
        .as_ref()
        .map(|db| database_view(db, newest_verified_backup));
    let drills: Api<Drill> = Api::namespaced(ctx.client.clone(), namespace);
    let running_drills = drills
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing the Drills"))?
        .items
        .into_iter()
        .filter(|d| d.spec.database == drill.spec.database && d.name_any() != drill.name_any())
        .filter(|d| is_running(d.status.as_ref().and_then(|s| s.phase)))
        .map(|d| d.name_any())
        .collect();
    let with_store = database
        .as_ref()
        .map(|db| store::with_default(db, ctx.build.default_store.as_ref()));
    // The Database's absence is a guard of its own.
    let invalid = match &with_store {
        Some(db) => validate_drill::errors(drill, Some(db))
            .iter()
            .map(ToString::to_string)
            .collect(),
        None => Vec::new(),
    };
    let (probe, probe_ip) = probe(ctx, namespace, &drill.name_any()).await?;
    let restore = restore::view(ctx, drill, namespace).await?;
    Ok(Seen {
        observed: Observed {
            now: Timestamp::now(),
            generation: drill.metadata.generation,
            deleting: drill.metadata.deletion_timestamp.is_some(),
            database: view,
            invalid,
            running_drills,
            probe,
            restore,
        },
        database,
        probe_ip,
    })
}

/// The Database as the state machine sees it.
fn database_view(db: &Database, newest_verified_backup: Option<Timestamp>) -> DatabaseView {
    let status = db.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().find(|c| c.type_ == READY);
    let generation = db.metadata.generation;
    DatabaseView {
        name: db.name_any(),
        instances: db.spec.instances,
        sync: db.spec.replication.mode == ReplicationMode::Sync,
        ready: ready.is_some_and(|c| c.status == "True" && c.observed_generation == generation)
            && status.observed_generation == generation,
        ready_since: ready
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.0),
        phase: status.phase,
        current_primary: status.current_primary,
        target_primary: status.target_primary,
        members: status
            .instances
            .into_iter()
            .map(|i| Member {
                name: i.name,
                role: i.role,
                ready: i.ready,
                lag_bytes: i.lag_bytes,
            })
            .collect(),
        last_failover: status.last_failover.map(|f| Failover {
            time: f.time.0,
            duration_milliseconds: f.duration_milliseconds,
            wal_gap_bytes: f.wal_gap_bytes,
        }),
        newest_verified_backup,
    }
}

/// When the newest verified Backup of `database` completed.
async fn newest_verified_backup(
    ctx: &Context,
    namespace: &str,
    database: &str,
) -> Result<Option<Timestamp>, Error> {
    let backups: Api<Backup> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(backups
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing the Database's Backups"))?
        .items
        .into_iter()
        .filter(|b| b.spec.database == database)
        .filter_map(|b| b.status)
        .filter(|s| s.verified == Some(true))
        .filter_map(|s| s.completed_at.map(|t| t.0))
        .max())
}

/// The probe pod and, when it runs, its report.
async fn probe(
    ctx: &Context,
    namespace: &str,
    drill: &str,
) -> Result<(ProbeView, Option<String>), Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let Some(pod) = pods
        .get_opt(&probe_pod_name(drill))
        .await
        .map_err(Error::kube("reading the drill's probe pod"))?
    else {
        return Ok((ProbeView::default(), None));
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok((ProbeView::default(), None));
    }
    let status = pod.status.clone().unwrap_or_default();
    let terminated = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.clone());
    let ended = match status.phase.as_deref() {
        Some(phase @ ("Failed" | "Succeeded")) => Some(format!(
            "pod phase {phase}{}",
            terminated
                .and_then(|t| t.message.or(t.reason))
                .or(status.message.clone())
                .map(|m| format!(": {}", m.trim()))
                .unwrap_or_default()
        )),
        _ => None,
    };
    let ip = status.pod_ip.filter(|ip| !ip.is_empty());
    let report = match &ip {
        Some(ip) if ended.is_none() => probe_client::report(ip).await.ok(),
        _ => None,
    };
    Ok((
        ProbeView {
            exists: true,
            ended,
            report,
        },
        ip,
    ))
}
