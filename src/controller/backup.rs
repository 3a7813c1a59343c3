//! The Backup controller: observe the Database it names → validate → pure plan →
//! status. Taking the backup itself arrives with object-storage support; until
//! then a valid Backup waits in `Pending` and says so.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use serde_json::json;
use tracing::{info, instrument};

use super::conditions::{self, Desired, READY};
use super::{Context, FIELD_MANAGER, FINALIZER, namespace_of, reconciled};
use crate::api::status::{BackupPhase, BackupStatus};
use crate::api::v1::{Backup, Database};
use crate::api::validate::{self, FieldError};
use crate::error::Error;

pub const CONTROLLER: &str = "backup";

/// The pure decision for one Backup pass.
pub fn plan(backup: &Backup, errors: &[FieldError], now: &Time) -> BackupStatus {
    let previous = backup.status.clone().unwrap_or_default();
    let generation = backup.metadata.generation;
    let ready = if errors.is_empty() {
        Desired::new(
            READY,
            false,
            "BackupUnavailable",
            "the Backup is valid; this Tusk build does not take backups yet",
        )
    } else {
        Desired::new(READY, false, "InvalidSpec", validate::summary(errors))
    };
    BackupStatus {
        phase: Some(previous.phase.unwrap_or(BackupPhase::Pending)),
        observed_generation: generation,
        conditions: conditions::merge(&previous.conditions, &[ready], generation, now),
        ..previous
    }
}

#[instrument(skip_all, fields(backup = %backup.name_any()))]
pub async fn reconcile(backup: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(CONTROLLER);
    let namespace = namespace_of(backup.as_ref())?;
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), &namespace);
    let databases: Api<Database> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, backup, |event| async {
        match event {
            Finalizer::Apply(backup) => apply(&backup, &api, &databases, &ctx).await,
            // Deleting a Backup object keeps the data in object storage: retention,
            // not a kubectl delete, decides when stored backups go.
            Finalizer::Cleanup(_) => Ok(Action::await_change()),
        }
    })
    .await
    .map_err(|source| Error::Finalizer {
        name: format!("{namespace}/Backup"),
        source: Box::new(source),
    })
}

async fn apply(
    backup: &Backup,
    api: &Api<Backup>,
    databases: &Api<Database>,
    ctx: &Context,
) -> Result<Action, Error> {
    let database = databases
        .get_opt(&backup.spec.database)
        .await
        .map_err(Error::kube("reading the Backup's Database"))?;
    let errors = validate::backup(backup, database.as_ref());
    let next = plan(backup, &errors, &Time(Timestamp::now()));
    let body = json!({ "apiVersion": "tusk.dev/v1", "kind": "Backup", "status": next });
    api.patch_status(
        &backup.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(Error::kube("writing the Backup status"))?;
    let before = backup.status.clone().unwrap_or_default();
    for changed in conditions::transitions(&before.conditions, &next.conditions) {
        let type_ = if changed.reason == "InvalidSpec" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        ctx.publish(
            backup,
            type_,
            &changed.reason,
            "Reconcile",
            changed.message.clone(),
        )
        .await;
    }
    reconciled(backup, ctx);
    info!(valid = errors.is_empty(), "reconciled");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup() -> Backup {
        let mut backup = Backup::new(
            "nightly",
            crate::api::v1::BackupSpec {
                database: "orders".into(),
                target: Default::default(),
            },
        );
        backup.metadata.generation = Some(1);
        backup
    }

    #[test]
    fn a_backup_of_a_missing_database_says_which_field() {
        let b = backup();
        let errors = validate::backup(&b, None);
        let status = plan(&b, &errors, &Time(Timestamp::UNIX_EPOCH));
        assert_eq!(status.phase, Some(BackupPhase::Pending));
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.conditions[0].reason, "InvalidSpec");
        assert!(
            status.conditions[0]
                .message
                .starts_with("spec.database: no Database \"orders\"")
        );
    }
}
