//! A Database with an object store is released only after a final base
//! backup (which also archives the WAL it ends in): until then the finalizer
//! holds it, with phase Deleting and a Ready condition saying where the final
//! backup is, or why it failed and how to go on.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use tracing::info;

use super::backups::{self, Final};
use super::{policy, status};
use crate::api::status::DatabasePhase;
use crate::api::store;
use crate::api::v1::Database;
use crate::controller::conditions::{DEGRADED, Desired, PROGRESSING, READY};
use crate::controller::{Context, Error, FINALIZER, conditions};

const POLL: Duration = Duration::from_secs(5);
const FAILED_RETRY: Duration = Duration::from_secs(60);

/// `Some(action)` while the deletion of `db` must wait for its final backup;
/// `None` when the finalizer may release it.
pub async fn hold(
    db: &Database,
    api: &Api<Database>,
    ctx: &Context,
) -> Result<Option<Action>, Error> {
    if db.metadata.deletion_timestamp.is_none() || !db.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(None);
    }
    let db = &store::with_default(db, ctx.build.default_store.as_ref());
    if !backups::wants_final_backup(db, None) {
        return Ok(None);
    }
    let namespace = db.namespace().unwrap_or_default();
    let all = policy::list(ctx, &namespace).await?;
    let own = backups::of_database(db, &all);
    let decision = backups::finalize(db, None, &own);
    if !matches!(decision, Final::Release { .. })
        && let Some(built) = backups::final_backup(db)
        && namespace_terminating(ctx, &namespace, &built).await
    {
        // The namespace goes with everything in it (pods, volumes, the
        // store's Secret): no backup can be taken or recorded any more, and
        // holding on would keep the namespace from going.
        ctx.publish(
            db,
            EventType::Warning,
            "FinalBackupSkipped",
            "Delete",
            "the namespace is being deleted: releasing the Database without a final backup"
                .to_owned(),
        )
        .await;
        return Ok(None);
    }
    let (reason, message, wait) = match decision {
        Final::Release { completed } => {
            if let Some(name) = completed {
                ctx.publish(
                    db,
                    EventType::Normal,
                    "FinalBackupCompleted",
                    "Delete",
                    format!("final backup {name} completed; releasing the Database"),
                )
                .await;
            }
            return Ok(None);
        }
        Final::Create(backup) => {
            let name = backup.name_any();
            let backups_api: Api<crate::api::v1::Backup> =
                Api::namespaced(ctx.client.clone(), &namespace);
            match backups_api
                .create(&PostParams::default(), backup.as_ref())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(Error::kube("creating the final Backup")(error)),
            }
            info!(backup = %name, "final backup requested");
            ctx.publish(
                db,
                EventType::Normal,
                "FinalBackup",
                "Delete",
                format!("taking final backup {name} before releasing the Database"),
            )
            .await;
            (
                "FinalBackupRunning",
                format!("taking the final backup {name} before the Database goes"),
                POLL,
            )
        }
        Final::Wait { message, .. } => ("FinalBackupRunning", message, POLL),
        Final::Failed { message, .. } => ("FinalBackupFailed", message, FAILED_RETRY),
    };
    let now = Time(Timestamp::now());
    let previous = db.status.clone().unwrap_or_default();
    let desired = [
        Desired::new(READY, false, reason, message.clone()),
        Desired::new(
            PROGRESSING,
            reason == "FinalBackupRunning",
            reason,
            message.clone(),
        ),
        Desired::new(DEGRADED, false, "Deleting", "the Database is being deleted"),
    ];
    let next = crate::api::status::DatabaseStatus {
        phase: Some(DatabasePhase::Deleting),
        conditions: conditions::merge(&previous.conditions, &desired, db.metadata.generation, &now),
        ..previous.clone()
    };
    if next != previous {
        status::apply(api, &db.name_any(), &next).await?;
        let type_ = if reason == "FinalBackupFailed" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        if conditions::transitions(&previous.conditions, &next.conditions)
            .iter()
            .any(|c| c.type_ == READY)
        {
            ctx.publish(db, type_, reason, "Delete", message).await;
        }
    }
    Ok(Some(Action::requeue(wait)))
}

/// Whether `namespace` is being deleted, asked the way a namespaced operator
/// can: a dry-run create there is refused for that reason alone.
async fn namespace_terminating(
    ctx: &Context,
    namespace: &str,
    probe: &crate::api::v1::Backup,
) -> bool {
    let api: Api<crate::api::v1::Backup> = Api::namespaced(ctx.client.clone(), namespace);
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&params, probe).await {
        Err(kube::Error::Api(status)) => {
            status.code == 403 && status.message.contains("being terminated")
        }
        _ => false,
    }
}
