//! Backups as the Database controller runs them beside the lifecycle plan,
//! because they need the clock and the Database's Backup objects: scheduled
//! Backups, `status.lastBackup`, when a retention pass is due, and the final
//! backup that holds a deletion. The decisions are pure functions here; the
//! shell in `mod.rs` and `finalize.rs` carries them out.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::status::{BackupPhase, LastBackup};
use crate::api::store;
use crate::api::v1::{Backup, BackupSpec, BackupTarget, Database, ObjectStore};
use crate::backup::schedule::{Schedule, backup_name};
use crate::resources::{labels, owner_reference};
use crate::telemetry::metrics::DatabaseLabels;

/// On a Backup the schedule created: the run it is for (RFC 3339). The
/// newest one is where the schedule resumes.
pub const SCHEDULED_AT: &str = "tusk.dev/scheduled-at";
/// On the Backup taken because its Database is deleted: the Database's uid.
pub const FINAL_FOR: &str = "tusk.dev/final-backup-for";
/// On a Database: `"true"` lets a deletion go ahead without a final backup.
pub const SKIP_FINAL_BACKUP: &str = "tusk.dev/skip-final-backup";
/// How often retention runs when no new backup completed meanwhile.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The Backups of `db` among `all` (the namespace's).
pub fn of_database<'a>(db: &Database, all: &'a [Backup]) -> Vec<&'a Backup> {
    let name = db.name_any();
    all.iter().filter(|b| b.spec.database == name).collect()
}

fn phase(backup: &Backup) -> Option<BackupPhase> {
    backup.status.as_ref().and_then(|s| s.phase)
}

/// `status.lastBackup`: the Completed Backup that completed last.
pub fn last_backup(backups: &[&Backup]) -> Option<LastBackup> {
    backups
        .iter()
        .filter(|b| phase(b) == Some(BackupPhase::Completed))
        .filter_map(|b| {
            let completed = b.status.as_ref()?.completed_at.clone()?;
            Some((completed, b.name_any()))
        })
        .max_by(|a, b| a.0.0.cmp(&b.0.0).then_with(|| a.1.cmp(&b.1)))
        .map(|(completed_at, name)| LastBackup {
            name,
            completed_at: Some(completed_at),
        })
}

/// What the schedule asks for now.
#[derive(Clone, Debug, PartialEq)]
pub struct Scheduled {
    /// The Backup to create for the run that is due.
    pub create: Option<Backup>,
    /// The next run after now: when to look again.
    pub next: Option<Timestamp>,
}

fn scheduled_at(backup: &Backup) -> Option<Timestamp> {
    backup.annotations().get(SCHEDULED_AT)?.parse().ok()
}

/// The run of `spec.backup.schedule` due at `now`, if any. The schedule
/// resumes from its newest Backup (else from the Database's creation), and
/// [`Schedule::due`] gives only the latest missed run: after downtime, one
/// backup, not a burst. While a scheduled Backup still waits or runs, none
/// is added behind it.
pub fn schedule(db: &Database, backups: &[&Backup], now: Timestamp) -> Scheduled {
    let none = Scheduled {
        create: None,
        next: None,
    };
    let Some(expr) = db.spec.backup.as_ref().and_then(|b| b.schedule.as_deref()) else {
        return none;
    };
    let Ok(schedule) = Schedule::parse(expr) else {
        return none;
    };
    let mine: Vec<&&Backup> = backups
        .iter()
        .filter(|b| scheduled_at(b).is_some())
        .collect();
    let since = mine
        .iter()
        .filter_map(|b| scheduled_at(b))
        .max()
        .or_else(|| db.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now);
    let busy = mine.iter().any(|b| {
        matches!(
            phase(b),
            None | Some(BackupPhase::Pending | BackupPhase::Running)
        )
    });
    let create = if busy {
        None
    } else {
        schedule
            .due(since, now)
            .and_then(|at| scheduled_backup(db, at))
    };
    Scheduled {
        create,
        next: schedule.next_after(now),
    }
}

fn backup_for(db: &Database, name: String, annotations: BTreeMap<String, String>) -> Backup {
    let mut backup = Backup::new(
        &name,
        BackupSpec {
            database: db.name_any(),
            target: BackupTarget::default(),
        },
    );
    backup.metadata = ObjectMeta {
        name: Some(name),
        namespace: db.namespace(),
        labels: Some(BTreeMap::from([
            (
                labels::MANAGED_BY.to_owned(),
                labels::MANAGED_BY_VALUE.to_owned(),
            ),
            (labels::DATABASE.to_owned(), db.name_any()),
        ])),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    backup
}

/// The Backup for the scheduled run at `at`, owned by the Database (it goes
/// with it; its data stays in the store). `None` for a Database never stored.
pub fn scheduled_backup(db: &Database, at: Timestamp) -> Option<Backup> {
    let owner = owner_reference(db)?;
    let annotations = BTreeMap::from([(SCHEDULED_AT.to_owned(), at.to_string())]);
    let mut backup = backup_for(db, backup_name(&db.name_any(), at), annotations);
    backup.metadata.owner_references = Some(vec![owner]);
    Some(backup)
}

/// The Backup a major upgrade takes before it stops anything, owned by the
/// Database like a scheduled one.
pub fn upgrade_backup(db: &Database, name: &str) -> Option<Backup> {
    let owner = owner_reference(db)?;
    let annotations = BTreeMap::from([(BEFORE_UPGRADE.to_owned(), "true".to_owned())]);
    let mut backup = backup_for(db, name.to_owned(), annotations);
    backup.metadata.owner_references = Some(vec![owner]);
    Some(backup)
}

/// Where a Backup is, for the lifecycle.
pub fn state(backup: &Backup) -> crate::lifecycle::BackupState {
    use crate::lifecycle::BackupState;
    let status = backup.status.clone().unwrap_or_default();
    match status.phase {
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
    }
}

/// Marks the Backup a major upgrade took first.
pub const BEFORE_UPGRADE: &str = "tusk.dev/before-upgrade";

/// The final Backup of a Database being deleted: named for the deletion, and
/// owned by nothing, so the record of the last backup outlives the Database.
pub fn final_backup(db: &Database) -> Option<Backup> {
    let uid = db.uid()?;
    let deleted = db.metadata.deletion_timestamp.as_ref()?.0;
    let name = backup_name(&format!("{}-final", db.name_any()), deleted);
    Some(backup_for(
        db,
        name,
        BTreeMap::from([(FINAL_FOR.to_owned(), uid)]),
    ))
}

/// Where a deletion stands with its final backup.
#[derive(Clone, Debug, PartialEq)]
pub enum Final {
    /// Nothing to wait for: no object store, skipped by annotation, or the
    /// final backup completed (its name).
    Release { completed: Option<String> },
    /// Create this Backup and wait.
    Create(Box<Backup>),
    /// The final Backup runs or waits to.
    Wait { backup: String, message: String },
    /// It failed: the deletion waits for a human.
    Failed { backup: String, message: String },
}

/// Whether deleting `db` takes a final backup: it has an object store and
/// the skip annotation is not set.
pub fn wants_final_backup(db: &Database, default: Option<&ObjectStore>) -> bool {
    let skip = db
        .annotations()
        .get(SKIP_FINAL_BACKUP)
        .is_some_and(|v| v == "true");
    !skip && store::effective(db, default).is_some()
}

/// The pure decision of a deletion: `backups` are the Database's.
pub fn finalize(db: &Database, default: Option<&ObjectStore>, backups: &[&Backup]) -> Final {
    if !wants_final_backup(db, default) {
        return Final::Release { completed: None };
    }
    let Some(built) = final_backup(db) else {
        return Final::Release { completed: None };
    };
    let uid = db.uid();
    let existing = backups.iter().find(|b| {
        b.name_any() == built.name_any()
            && b.annotations().get(FINAL_FOR).map(String::as_str) == uid.as_deref()
    });
    let Some(existing) = existing else {
        return Final::Create(Box::new(built));
    };
    let name = existing.name_any();
    let ready_message = existing
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    match phase(existing) {
        Some(BackupPhase::Completed) => Final::Release {
            completed: Some(name),
        },
        Some(BackupPhase::Failed) => Final::Failed {
            message: format!(
                "the final backup {name} failed: {ready_message}; the Database stays until it \
                 succeeds: fix the cause and delete Backup {name} to take it again, or annotate \
                 the Database {SKIP_FINAL_BACKUP}=true to delete it without a final backup"
            ),
            backup: name,
        },
        _ => Final::Wait {
            message: format!(
                "taking the final backup {name} before the Database goes: {}",
                if ready_message.is_empty() {
                    "waiting to start"
                } else {
                    &ready_message
                }
            ),
            backup: name,
        },
    }
}

/// Whether a retention pass is due: none yet by this operator, a backup
/// completed since the last one, or [`PRUNE_EVERY`] passed.
pub fn prune_due(
    last: Option<&(Timestamp, Option<String>)>,
    last_backup: Option<&LastBackup>,
    now: Timestamp,
) -> bool {
    let Some((at, seen)) = last else {
        return true;
    };
    let newest = last_backup.map(|b| &b.name);
    newest != seen.as_ref()
        || now
            .duration_since(*at)
            .try_into()
            .is_ok_and(|elapsed: Duration| elapsed >= PRUNE_EVERY)
}

/// Backup objects the schedule created whose data a retention pass removed:
/// they would claim a backup that is gone. Matched by the backup id at the
/// end of their location.
pub fn pruned_objects<'a>(backups: &[&'a Backup], removed: &[String]) -> Vec<&'a Backup> {
    backups
        .iter()
        .copied()
        .filter(|b| scheduled_at(b).is_some())
        .filter(|b| {
            let id = b
                .status
                .as_ref()
                .and_then(|s| s.location.as_deref())
                .and_then(|l| l.trim_end_matches('/').rsplit('/').next());
            id.is_some_and(|id| removed.iter().any(|r| r == id))
        })
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
    use crate::api::status::BackupStatus;
    use crate::api::v1::BackupConfig;
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
    fn the_first_run_counts_from_the_databases_creation() {
        let db = database(Some("* * * * *"), true);
        let early = schedule(&db, &[], at("2026-11-24T10:00:50Z"));
        assert_eq!(early.create, None, "no minute has begun since creation");
        assert_eq!(early.next, Some(at("2026-11-24T10:01:00Z")));

        let due = schedule(&db, &[], at("2026-11-24T10:01:02Z"));
        let created = due.create.expect("the 10:01 run");
        assert_eq!(created.name_any(), "orders-20261124100100");
        assert_eq!(
            created.annotations().get(SCHEDULED_AT).map(String::as_str),
            Some("2026-11-24T10:01:00Z")
        );
        let owner = &created.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Database", "orders")
        );
        assert_eq!(created.spec.database, "orders");
    }

    #[test]
    fn after_downtime_one_run_is_taken_not_a_burst() {
        let db = database(Some("* * * * *"), true);
        let last = completed(
            "orders-20261124100100",
            "2026-11-24T10:01:00Z",
            "s3://t/x/1/",
        );
        let due = schedule(&db, &[&last], at("2026-11-24T10:07:30Z"));
        assert_eq!(
            due.create.map(|b| b.name_any()).as_deref(),
            Some("orders-20261124100700"),
            "only the latest missed run"
        );
        // Once taken, nothing more until the next minute.
        let taken = backup("orders-20261124100700", Some("2026-11-24T10:07:00Z"), None);
        let again = schedule(&db, &[&last, &taken], at("2026-11-24T10:07:40Z"));
        assert_eq!(again.create, None);
    }

    #[test]
    fn a_waiting_scheduled_backup_holds_the_next_back() {
        let db = database(Some("* * * * *"), true);
        let pending = backup(
            "orders-20261124100100",
            Some("2026-11-24T10:01:00Z"),
            Some(BackupPhase::Running),
        );
        let due = schedule(&db, &[&pending], at("2026-11-24T10:03:10Z"));
        assert_eq!(due.create, None);
        assert_eq!(due.next, Some(at("2026-11-24T10:04:00Z")));
        // Backups someone else created do not count as the schedule's.
        let manual = backup("manual", None, Some(BackupPhase::Running));
        let due = schedule(&db, &[&manual], at("2026-11-24T10:03:10Z"));
        assert!(due.create.is_some());
        // No schedule, nothing.
        let plain = database(None, true);
        assert_eq!(schedule(&plain, &[], at("2026-11-24T10:03:10Z")).next, None);
    }

    #[test]
    fn last_backup_is_the_latest_completed() {
        let a = completed("a", "2026-11-24T10:01:00Z", "s3://t/x/1/");
        let b = completed("b", "2026-11-24T10:05:00Z", "s3://t/x/2/");
        let failed = backup("c", None, Some(BackupPhase::Failed));
        let last = last_backup(&[&b, &failed, &a]).expect("one");
        assert_eq!(last.name, "b");
        assert_eq!(last_backup(&[&failed]), None);
    }

    #[test]
    fn deletion_takes_one_final_backup_and_waits_for_it() {
        let mut db = database(None, true);
        db.metadata.deletion_timestamp = Some(Time(at("2026-11-24T12:00:00Z")));
        let Final::Create(built) = finalize(&db, None, &[]) else {
            panic!("a final backup is created first");
        };
        assert_eq!(built.name_any(), "orders-final-20261124120000");
        assert_eq!(
            built.metadata.owner_references, None,
            "outlives the Database"
        );
        assert_eq!(
            built.annotations().get(FINAL_FOR).map(String::as_str),
            Some("uid-1")
        );

        let mut running = (*built).clone();
        running.status = Some(BackupStatus {
            phase: Some(BackupPhase::Running),
            ..Default::default()
        });
        assert!(matches!(
            finalize(&db, None, &[&running]),
            Final::Wait { .. }
        ));

        let mut failed = running.clone();
        if let Some(s) = failed.status.as_mut() {
            s.phase = Some(BackupPhase::Failed);
        }
        let Final::Failed { message, .. } = finalize(&db, None, &[&failed]) else {
            panic!("a failed final backup holds the deletion");
        };
        assert!(message.contains(SKIP_FINAL_BACKUP), "{message}");

        let mut done = running.clone();
        if let Some(s) = done.status.as_mut() {
            s.phase = Some(BackupPhase::Completed);
        }
        assert_eq!(
            finalize(&db, None, &[&done]),
            Final::Release {
                completed: Some("orders-final-20261124120000".into())
            }
        );

        // The same name from an earlier Database of that name is not this one's.
        let mut stranger = done.clone();
        stranger.metadata.annotations = Some(BTreeMap::from([(FINAL_FOR.into(), "uid-0".into())]));
        assert!(matches!(
            finalize(&db, None, &[&stranger]),
            Final::Create(_)
        ));
    }

    #[test]
    fn no_store_or_the_annotation_releases_at_once() {
        let mut db = database(None, false);
        db.metadata.deletion_timestamp = Some(Time(at("2026-11-24T12:00:00Z")));
        assert_eq!(finalize(&db, None, &[]), Final::Release { completed: None });
        let mut skipped = database(None, true);
        skipped.metadata.deletion_timestamp = Some(Time(at("2026-11-24T12:00:00Z")));
        skipped.metadata.annotations =
            Some(BTreeMap::from([(SKIP_FINAL_BACKUP.into(), "true".into())]));
        assert_eq!(
            finalize(&skipped, None, &[]),
            Final::Release { completed: None }
        );
    }

    #[test]
    fn retention_runs_once_per_new_backup_or_hour() {
        let now = at("2026-11-24T12:00:00Z");
        let newest = LastBackup {
            name: "b".into(),
            completed_at: None,
        };
        assert!(prune_due(None, Some(&newest), now));
        let recent = (at("2026-11-24T11:30:00Z"), Some("b".to_owned()));
        assert!(!prune_due(Some(&recent), Some(&newest), now));
        let before_b = (at("2026-11-24T11:30:00Z"), Some("a".to_owned()));
        assert!(prune_due(Some(&before_b), Some(&newest), now));
        let old = (at("2026-11-24T10:59:00Z"), Some("b".to_owned()));
        assert!(prune_due(Some(&old), Some(&newest), now));
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
        let deleted: Vec<String> = pruned_objects(&[&gone, &kept, &manual], &removed)
            .iter()
            .map(|b| b.name_any())
            .collect();
        assert_eq!(deleted, ["a"]);
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
