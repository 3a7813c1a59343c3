//! The Backup controller: observe the Database it names → validate → pure plan →
//! status. Taking the backup itself arrives with object-storage support; until
//! then a valid Backup waits in `Pending` and says so.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio::sync::watch;
use tracing::{Span, field, info, instrument};

use super::conditions::{self, Desired, READY};
use super::{Change, Context, FIELD_MANAGER, FINALIZER, key_of, namespace_of, reconciled};
use crate::api::status::{BackupPhase, BackupStatus};
use crate::api::v1::{Backup, Database};
use crate::api::validate::{self, FieldError};
use crate::controller::Error;
use crate::telemetry;
use crate::telemetry::metrics::{BackupResult, DatabaseLabels};

pub const CONTROLLER: &str = "backup";

/// Reason of the Ready condition of a valid Backup this build cannot take.
const UNAVAILABLE: &str = "BackupUnavailable";
/// Reason of the Ready condition of a Backup with an invalid spec.
const INVALID_SPEC: &str = "InvalidSpec";

/// The pure decision for one Backup pass.
pub fn plan(backup: &Backup, errors: &[FieldError], now: &Time) -> BackupStatus {
    let previous = backup.status.clone().unwrap_or_default();
    let generation = backup.metadata.generation;
    let ready = if errors.is_empty() {
        Desired::new(
            READY,
            false,
            UNAVAILABLE,
            "the Backup is valid; this Tusk build does not take backups yet",
        )
    } else {
        Desired::new(READY, false, INVALID_SPEC, validate::summary(errors))
    };
    BackupStatus {
        phase: Some(previous.phase.unwrap_or(BackupPhase::Pending)),
        observed_generation: generation,
        conditions: conditions::merge(&previous.conditions, &[ready], generation, now),
        ..previous
    }
}

/// Where the Backup controller took a Backup, as `status` says: the phase when it
/// ended, else why it was not started. `None` while it may still start.
pub fn outcome(status: &BackupStatus) -> Option<BackupResult> {
    match status.phase {
        Some(BackupPhase::Completed) => return Some(BackupResult::Completed),
        Some(BackupPhase::Failed) => return Some(BackupResult::Failed),
        Some(BackupPhase::Pending | BackupPhase::Running) | None => {}
    }
    let ready = status.conditions.iter().find(|c| c.type_ == READY)?;
    match ready.reason.as_str() {
        UNAVAILABLE => Some(BackupResult::Unavailable),
        INVALID_SPEC => Some(BackupResult::Invalid),
        _ => None,
    }
}

/// The completion time (Unix seconds) of the newest Completed Backup of each
/// Database among `backups`.
pub fn last_successes(backups: &[Arc<Backup>]) -> BTreeMap<DatabaseLabels, f64> {
    let mut latest = BTreeMap::new();
    for backup in backups {
        let Some(status) = &backup.status else {
            continue;
        };
        let (Some(BackupPhase::Completed), Some(completed_at), Some(namespace)) =
            (status.phase, &status.completed_at, backup.namespace())
        else {
            continue;
        };
        let seconds = completed_at.0.as_millisecond() as f64 / 1000.0;
        let labels = DatabaseLabels {
            namespace,
            database: backup.spec.database.clone(),
        };
        latest
            .entry(labels)
            .and_modify(|newest: &mut f64| *newest = newest.max(seconds))
            .or_insert(seconds);
    }
    latest
}

/// Keeps the gauges computed from the Backup cache current: the work-queue depth
/// and the last successful backup of each Database. `stores` are the caches of
/// every Backup controller (one per watched namespace).
pub async fn sample(
    stores: Vec<Store<Backup>>,
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    super::sample_every(stores, shutdown, |backups| {
        ctx.metrics
            .set_queue_depth(CONTROLLER, ctx.queue_depth(backups));
        ctx.metrics.set_last_backups(last_successes(backups));
    })
    .await;
}

/// One pass over a Backup in a `reconcile` span that carries the error when
/// the pass fails.
#[instrument(
    name = "reconcile",
    skip_all,
    fields(
        controller = CONTROLLER,
        backup = %backup.name_any(),
        namespace = backup.metadata.namespace.as_deref().unwrap_or_default(),
        error = field::Empty,
    )
)]
pub async fn reconcile(backup: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = pass(backup, ctx).await;
    if let Err(error) = &result {
        telemetry::record_error(&Span::current(), error);
    }
    result
}

async fn pass(backup: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _pass = ctx.pass(CONTROLLER, backup.as_ref());
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
    // Counted once the status says so, once per Backup and outcome.
    if let Some(result) = outcome(&next) {
        let stored = outcome(&before).map(BackupResult::as_str);
        if ctx.remember(&key_of(backup), stored, result.as_str()) != Change::Unchanged {
            ctx.metrics.backup_finished(result);
        }
    }
    for changed in conditions::transitions(&before.conditions, &next.conditions) {
        let type_ = if changed.reason == INVALID_SPEC {
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
        assert_eq!(outcome(&status), Some(BackupResult::Invalid));
    }

    #[test]
    fn a_valid_backup_is_unavailable_in_this_build() {
        let b = backup();
        let status = plan(&b, &[], &Time(Timestamp::UNIX_EPOCH));
        assert_eq!(status.phase, Some(BackupPhase::Pending));
        assert_eq!(outcome(&status), Some(BackupResult::Unavailable));
        assert_eq!(outcome(&BackupStatus::default()), None);
        let running = BackupStatus {
            phase: Some(BackupPhase::Running),
            ..BackupStatus::default()
        };
        assert_eq!(outcome(&running), None);
        let failed = BackupStatus {
            phase: Some(BackupPhase::Failed),
            ..status
        };
        assert_eq!(outcome(&failed), Some(BackupResult::Failed));
    }

    fn stored(
        name: &str,
        database: &str,
        phase: BackupPhase,
        completed: Option<i64>,
    ) -> Arc<Backup> {
        let mut b = Backup::new(
            name,
            crate::api::v1::BackupSpec {
                database: database.into(),
                target: Default::default(),
            },
        );
        b.metadata.namespace = Some("shop".into());
        b.status = Some(BackupStatus {
            phase: Some(phase),
            completed_at: completed
                .map(|s| Time(Timestamp::from_second(s).expect("a valid timestamp"))),
            ..BackupStatus::default()
        });
        Arc::new(b)
    }

    #[test]
    fn last_successes_take_the_newest_completed_backup_per_database() {
        let latest = last_successes(&[
            stored("a", "orders", BackupPhase::Completed, Some(100)),
            stored("b", "orders", BackupPhase::Completed, Some(300)),
            stored("c", "orders", BackupPhase::Failed, Some(500)),
            stored("d", "users", BackupPhase::Completed, Some(200)),
            stored("e", "users", BackupPhase::Running, None),
            stored("f", "audit", BackupPhase::Pending, None),
        ]);
        let key = |database: &str| DatabaseLabels {
            namespace: "shop".into(),
            database: database.into(),
        };
        assert_eq!(latest.len(), 2, "{latest:?}");
        assert_eq!(latest[&key("orders")], 300.0);
        assert_eq!(latest[&key("users")], 200.0);
    }
}
