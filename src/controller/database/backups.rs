//! The Database's Backup objects as a pass sees them: listed once, reduced
//! to the [`BackupView`]s the lifecycle decides on, and the gauges sampled
//! from the Database cache. What to do with them is the lifecycle's
//! (`lifecycle::backups`, `lifecycle::deletion`).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::api::status::BackupPhase;
use crate::api::store;
use crate::api::v1::{Backup, Database, ObjectStore};
use crate::controller::{Context, Error};
use crate::lifecycle::{BackupState, BackupView};
use crate::resources::{FINAL_FOR, SCHEDULED_AT};
use crate::schedule::Schedule;
use crate::telemetry::metrics::DatabaseLabels;

/// Every Backup of the namespace (the caller picks the Database's).
pub async fn list(ctx: &Context, namespace: &str) -> Result<Vec<Backup>, Error> {
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing the Database's Backups"))?
        .items)
}

/// The Backups of `db` among `all` (the namespace's), by name.
pub fn of_database(db: &Database, all: &[Backup]) -> BTreeMap<String, BackupView> {
    let name = db.name_any();
    all.iter()
        .filter(|b| b.spec.database == name)
        .map(|b| (b.name_any(), view(b)))
        .collect()
}

/// A Backup as the lifecycle sees it.
pub fn view(backup: &Backup) -> BackupView {
    let status = backup.status.clone().unwrap_or_default();
    let state = match status.phase {
        Some(BackupPhase::Completed) => BackupState::Completed,
        Some(BackupPhase::Failed) => BackupState::Failed(
            status
                .conditions
                .iter()
                .find(|c| c.status == "False")
                .map(|c| c.message.clone())
                .unwrap_or_else(|| "the Backup failed".to_owned()),
        ),
        Some(BackupPhase::Pending | BackupPhase::Running) | None => BackupState::Running,
    };
    BackupView {
        state,
        scheduled_at: backup
            .annotations()
            .get(SCHEDULED_AT)
            .and_then(|a| a.parse().ok()),
        final_for: backup.annotations().get(FINAL_FOR).cloned(),
        completed_at: status.completed_at.as_ref().map(|t| t.0),
        backup_id: backup_id(backup),
        ready_message: status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.message.clone())
            .unwrap_or_default(),
    }
}

/// The backup id in the store: the last part of `status.location`.
fn backup_id(backup: &Backup) -> Option<String> {
    let location = backup.status.as_ref()?.location.as_deref()?;
    location
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .map(str::to_owned)
}

/// Backup objects the schedule created whose data a retention pass removed:
/// they would claim a backup that is gone. Matched by the backup id at the
/// end of their location.
pub fn pruned_objects<'a>(
    backups: &'a BTreeMap<String, BackupView>,
    removed: &[String],
) -> Vec<&'a str> {
    backups
        .iter()
        .filter(|(_, b)| b.scheduled_at.is_some())
        .filter(|(_, b)| {
            b.backup_id
                .as_ref()
                .is_some_and(|id| removed.iter().any(|r| r == id))
        })
        .map(|(name, _)| name.as_str())
        .collect()
}

/// `tusk_backup_schedule_period_seconds`: the time between the next two runs
/// of each Database's schedule (what a "verification too old" alert compares
/// with). `now` is the sampling time.
pub fn schedule_periods(
    databases: &[std::sync::Arc<Database>],
    now: Timestamp,
) -> BTreeMap<DatabaseLabels, f64> {
    databases
        .iter()
        .filter_map(|db| {
            let expr = db.spec.backup.as_ref()?.schedule.as_deref()?;
            let schedule = Schedule::parse(expr).ok()?;
            let next = schedule.next_after(now)?;
            let after = schedule.next_after(next)?;
            let seconds = after.duration_since(next).as_secs_f64();
            Some((
                DatabaseLabels {
                    namespace: db.namespace()?,
                    database: db.name_any(),
                },
                seconds,
            ))
        })
        .collect()
}

/// `tusk_backup_last_success_timestamp_seconds` for every Database with an
/// object store in effect: its last completed backup, or 0 when it has none
/// (so "no recent backup" alerts fire for it too).
pub fn last_successes(
    databases: &[std::sync::Arc<Database>],
    default: Option<&ObjectStore>,
) -> BTreeMap<DatabaseLabels, f64> {
    databases
        .iter()
        .filter(|db| store::effective(db, default).is_some())
        .filter_map(|db| {
            let namespace = db.namespace()?;
            let seconds = db
                .status
                .as_ref()
                .and_then(|s| s.last_backup.as_ref())
                .and_then(|b| b.completed_at.as_ref())
                .map_or(0.0, |t| t.0.as_millisecond() as f64 / 1000.0);
            Some((
                DatabaseLabels {
                    namespace,
                    database: db.name_any(),
                },
                seconds,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::status::{BackupStatus, LastBackup};
    use crate::api::v1::{BackupConfig, BackupSpec, BackupTarget};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn database(schedule: Option<&str>, store: bool) -> Database {
        let mut db = sample_database();
        db.metadata.name = Some("orders".into());
        db.metadata.namespace = Some("shop".into());
        db.metadata.uid = Some("uid-1".into());
        db.metadata.creation_timestamp = Some(Time(at("2026-11-24T10:00:30Z")));
        db.spec.backup = Some(BackupConfig {
            schedule: schedule.map(str::to_owned),
            retention: None,
            object_store: store.then(|| ObjectStore {
                bucket: "tusk".into(),
                ..Default::default()
            }),
            verify: None,
        });
        db
    }

    fn backup(name: &str, scheduled: Option<&str>, phase: Option<BackupPhase>) -> Backup {
        let mut b = Backup::new(
            name,
            BackupSpec {
                database: "orders".into(),
                target: BackupTarget::default(),
            },
        );
        if let Some(when) = scheduled {
            b.metadata.annotations = Some(BTreeMap::from([(SCHEDULED_AT.into(), when.into())]));
        }
        b.status = Some(BackupStatus {
            phase,
            ..Default::default()
        });
        b
    }

    fn completed(name: &str, when: &str, location: &str) -> Backup {
        let mut b = backup(name, Some(when), Some(BackupPhase::Completed));
        if let Some(status) = b.status.as_mut() {
            status.completed_at = Some(Time(at(when)));
            status.location = Some(location.into());
        }
        b
    }

    #[test]
    fn only_scheduled_backups_whose_data_went_are_deleted() {
        let gone = completed(
            "a",
            "2026-11-24T10:01:00Z",
            "s3://t/p/orders/7/base/20261124T100105Z/",
        );
        let kept = completed(
            "b",
            "2026-11-24T10:05:00Z",
            "s3://t/p/orders/7/base/20261124T100505Z/",
        );
        let mut manual = completed(
            "c",
            "2026-11-24T10:02:00Z",
            "s3://t/p/orders/7/base/20261124T100205Z/",
        );
        manual.metadata.annotations = None;
        let removed = vec!["20261124T100105Z".to_owned(), "20261124T100205Z".to_owned()];
        let views = of_database(&database(None, true), &[gone, kept, manual]);
        assert_eq!(pruned_objects(&views, &removed), ["a"]);
    }

    #[test]
    fn a_backup_is_viewed_with_its_run_its_id_and_its_words() {
        let mut failed = completed("a", "2026-11-24T10:01:00Z", "s3://t/p/orders/7/base/X/");
        if let Some(status) = failed.status.as_mut() {
            status.phase = Some(BackupPhase::Failed);
            status.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "Failed".into(),
                message: "no space".into(),
                last_transition_time: Time(at("2026-11-24T10:01:00Z")),
                observed_generation: None,
            }];
        }
        let seen = view(&failed);
        assert_eq!(seen.state, BackupState::Failed("no space".into()));
        assert_eq!(seen.ready_message, "no space");
        assert_eq!(seen.backup_id.as_deref(), Some("X"));
        assert_eq!(seen.scheduled_at, Some(at("2026-11-24T10:01:00Z")));
        assert_eq!(seen.completed_at, Some(at("2026-11-24T10:01:00Z")));
        let pending = backup("b", None, None);
        assert_eq!(view(&pending).state, BackupState::Running);
        assert_eq!(view(&pending).scheduled_at, None);
    }

    #[test]
    fn every_database_with_a_store_has_a_last_success_figure() {
        let mut with = database(None, true);
        with.status = Some(crate::api::status::DatabaseStatus {
            last_backup: Some(LastBackup {
                name: "a".into(),
                completed_at: Some(Time(at("2026-11-24T10:00:00Z"))),
            }),
            ..Default::default()
        });
        let mut never = database(None, true);
        never.metadata.name = Some("users".into());
        let mut without = database(None, false);
        without.metadata.name = Some("audit".into());
        let figures = last_successes(
            &[
                std::sync::Arc::new(with),
                std::sync::Arc::new(never),
                std::sync::Arc::new(without),
            ],
            None,
        );
        let key = |d: &str| DatabaseLabels {
            namespace: "shop".into(),
            database: d.into(),
        };
        assert_eq!(figures.len(), 2);
        assert_eq!(
            figures[&key("orders")],
            at("2026-11-24T10:00:00Z").as_second() as f64
        );
        assert_eq!(figures[&key("users")], 0.0);
    }
}
