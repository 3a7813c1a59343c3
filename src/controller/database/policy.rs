//! The shell of [`super::backups`] for a Database that lives: create the
//! Backup its schedule has due, and run retention on its primary's manager.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::events::EventType;
use tracing::{info, warn};

use super::backups;
use super::instances::{Answer, Call};
use super::observe::Snapshot;
use crate::api::status::LastBackup;
use crate::api::v1::{Backup, Database};
use crate::api::validate::parse_retention;
use crate::contract::{RetentionRequest, Role};
use crate::controller::credentials::instance_token;
use crate::controller::{Context, Error, key_of};

/// Every Backup of the namespace (the caller picks the Database's).
pub async fn list(ctx: &Context, namespace: &str) -> Result<Vec<Backup>, Error> {
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing the Database's Backups"))?
        .items)
}

/// Creates the Backup of the run due now, if any; returns how long until
/// the next run.
pub async fn schedule(
    ctx: &Context,
    db: &Database,
    namespace: &str,
    backups: &[&Backup],
) -> Result<Option<Duration>, Error> {
    let now = Timestamp::now();
    let step = backups::schedule(db, backups, now);
    if let Some(backup) = step.create {
        let name = backup.name_any();
        let api: Api<Backup> = Api::namespaced(ctx.client.clone(), namespace);
        match api.create(&PostParams::default(), &backup).await {
            Ok(_) => {
                info!(backup = %name, "scheduled backup created");
                ctx.publish(
                    db,
                    EventType::Normal,
                    "BackupScheduled",
                    "Backup",
                    format!("created Backup {name} for spec.backup.schedule"),
                )
                .await;
            }
            // A pass from a stale cache made it already.
            Err(kube::Error::Api(answer)) if answer.code == 409 => {}
            Err(error) => return Err(Error::kube("creating a scheduled Backup")(error)),
        }
    }
    Ok(step.next.and_then(|next| {
        Duration::try_from(next.duration_since(now))
            .ok()
            .map(|wait| wait + Duration::from_secs(1))
    }))
}

/// Runs a retention pass on the primary when one is due; a failure is an
/// Event and a warning, and is tried again with the next backup or after
/// [`backups::PRUNE_EVERY`].
pub async fn retention(
    ctx: &Context,
    db: &Database,
    namespace: &str,
    snapshot: &Snapshot,
    backups: &[&Backup],
    last_backup: Option<&LastBackup>,
) -> Result<(), Error> {
    let Some(window) = db
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.retention.as_deref())
        .and_then(|r| parse_retention(r).ok())
    else {
        return Ok(());
    };
    let key = key_of(db);
    let now = Timestamp::now();
    if !backups::prune_due(ctx.last_prune(&key).as_ref(), last_backup, now) {
        return Ok(());
    }
    let Some(ip) = snapshot
        .managers
        .iter()
        .find(|(_, s)| s.postgres.role == Role::Primary && s.ready)
        .and_then(|(pod, _)| snapshot.pod_ip(pod))
    else {
        return Ok(());
    };
    let token = instance_token(ctx, namespace, &db.name_any()).await?;
    let call = Call::Retention(RetentionRequest {
        window_seconds: window,
    });
    ctx.pruned(&key, now, last_backup.map(|b| b.name.clone()));
    let report = match ctx.instances.call(&ip, &token, call).await {
        Ok(Answer::Retention(report)) => report,
        Ok(_) => return Ok(()),
        Err(error) => {
            warn!(%error, "retention pass failed");
            ctx.publish(
                db,
                EventType::Warning,
                "RetentionFailed",
                "Retention",
                format!("spec.backup.retention: the pass failed: {error}"),
            )
            .await;
            return Ok(());
        }
    };
    info!(removed = ?report.removed, wal = report.wal_removed, "retention pass");
    if report.deleted > 0 {
        ctx.publish(
            db,
            EventType::Normal,
            "Pruned",
            "Retention",
            format!(
                "spec.backup.retention: removed backups {:?} ({} interrupted) and {} WAL files; kept {:?}",
                report.removed,
                report.interrupted_removed.len(),
                report.wal_removed,
                report.kept
            ),
        )
        .await;
    }
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), namespace);
    for gone in backups::pruned_objects(backups, &report.removed) {
        let name = gone.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => info!(backup = %name, "deleted the Backup whose data retention removed"),
            Err(kube::Error::Api(answer)) if answer.code == 404 => {}
            Err(error) => return Err(Error::kube("deleting a pruned Backup")(error)),
        }
    }
    Ok(())
}
