//! Scheduled backups, retention and the final backup of a deletion, as the
//! plan decides them: table cases and properties over random Backups.

use std::collections::BTreeMap;

use jiff::Timestamp;
use proptest::prelude::*;

use super::tests::{async_spec, healthy_three, status};
use super::*;
use crate::api::status::{DatabasePhase as P, DatabaseStatus, InstanceRole};
use crate::api::v1::{BackupConfig, DatabaseSpec, ObjectStore};

fn at(text: &str) -> Timestamp {
    text.parse().expect("a timestamp")
}

fn spec(schedule: Option<&str>, retention: Option<&str>) -> DatabaseSpec {
    let mut spec = async_spec(3);
    spec.backup = Some(BackupConfig {
        schedule: schedule.map(str::to_owned),
        retention: retention.map(str::to_owned),
        object_store: Some(ObjectStore {
            bucket: "tusk".into(),
            ..Default::default()
        }),
        verify: None,
    });
    spec
}

/// A healthy Database created at 10:00:30 with these Backups, seen at `now`.
fn seen(now: &str, backups: Vec<(&str, BackupView)>) -> Observed {
    Observed {
        now: at(now),
        created: Some(at("2026-11-24T10:00:30Z")),
        backups_possible: true,
        backups: backups
            .into_iter()
            .map(|(n, b)| (n.to_owned(), b))
            .collect(),
        ..healthy_three()
    }
}

fn scheduled(when: &str, state: BackupState) -> BackupView {
    BackupView {
        scheduled_at: Some(at(when)),
        completed_at: (state == BackupState::Completed).then(|| at(when)),
        ..BackupView::from(state)
    }
}

fn takes(plan: &Plan) -> Vec<(String, BackupPurpose)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::TakeBackup { name, purpose } => Some((name.clone(), purpose.clone())),
            _ => None,
        })
        .collect()
}

fn ready() -> Option<DatabaseStatus> {
    status(P::Ready, Some(1))
}

#[test]
fn the_first_run_counts_from_the_databases_creation() {
    let spec = spec(Some("* * * * *"), None);
    let early = plan(
        &spec,
        ready().as_ref(),
        &seen("2026-11-24T10:00:50Z", vec![]),
    );
    assert_eq!(takes(&early), [], "no minute has begun since creation");
    // Look again just after the 10:01 run: 10 s, rounded up, and one more.
    assert_eq!(early.requeue_after_seconds, Some(11));

    let due = plan(
        &spec,
        ready().as_ref(),
        &seen("2026-11-24T10:01:02Z", vec![]),
    );
    assert_eq!(
        takes(&due),
        [(
            "orders-20261124100100".to_owned(),
            BackupPurpose::Scheduled {
                at: at("2026-11-24T10:01:00Z")
            }
        )]
    );
}

#[test]
fn after_downtime_one_run_is_taken_not_a_burst() {
    let spec = spec(Some("* * * * *"), None);
    let last = (
        "orders-20261124100100",
        scheduled("2026-11-24T10:01:00Z", BackupState::Completed),
    );
    let due = plan(
        &spec,
        ready().as_ref(),
        &seen("2026-11-24T10:07:30Z", vec![last.clone()]),
    );
    let names: Vec<String> = takes(&due).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["orders-20261124100700"],
        "only the latest missed run"
    );
    // Once taken, nothing more until the next minute.
    let taken = (
        "orders-20261124100700",
        scheduled("2026-11-24T10:07:00Z", BackupState::Running),
    );
    let again = plan(
        &spec,
        ready().as_ref(),
        &seen("2026-11-24T10:07:40Z", vec![last, taken]),
    );
    assert_eq!(takes(&again), []);
}

#[test]
fn a_waiting_scheduled_backup_holds_the_next_back() {
    let spec = spec(Some("* * * * *"), None);
    let pending = (
        "orders-20261124100100",
        scheduled("2026-11-24T10:01:00Z", BackupState::Running),
    );
    let due = plan(
        &spec,
        ready().as_ref(),
        &seen("2026-11-24T10:03:10Z", vec![pending]),
    );
    assert_eq!(takes(&due), []);
    // Backups someone else created do not count as the schedule's.
    let manual = ("manual", BackupView::from(BackupState::Running));
    let due = plan(
        &spec,
        ready().as_ref(),
        &seen("2026-11-24T10:03:10Z", vec![manual]),
    );
    assert_eq!(takes(&due).len(), 1);
    // No schedule, nothing, and the steady requeue.
    let plain = plan(
        &self::spec(None, None),
        ready().as_ref(),
        &seen("2026-11-24T10:03:10Z", vec![]),
    );
    assert_eq!(takes(&plain), []);
    assert_eq!(plain.requeue_after_seconds, Some(REQUEUE_STEADY_SECONDS));
}

#[test]
fn last_backup_is_the_latest_completed() {
    let completed = |when: &str| BackupView {
        completed_at: Some(at(when)),
        ..BackupView::from(BackupState::Completed)
    };
    let observed = seen(
        "2026-11-24T11:00:00Z",
        vec![
            ("b", completed("2026-11-24T10:05:00Z")),
            ("c", BackupView::from(BackupState::Failed("x".into()))),
            ("a", completed("2026-11-24T10:01:00Z")),
        ],
    );
    let decided = plan(&spec(None, None), ready().as_ref(), &observed);
    assert_eq!(decided.last_backup.map(|b| b.name).as_deref(), Some("b"));
    let none = seen(
        "2026-11-24T11:00:00Z",
        vec![("c", BackupView::from(BackupState::Failed("x".into())))],
    );
    assert_eq!(
        plan(&spec(None, None), ready().as_ref(), &none).last_backup,
        None
    );
}

fn retention(plan: &Plan) -> Vec<(String, Option<String>)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::RunRetention {
                primary,
                window_seconds,
                last_backup,
            } => {
                assert_eq!(*window_seconds, 7 * 86_400);
                Some((primary.clone(), last_backup.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn retention_runs_on_the_primary_once_per_new_backup_or_hour() {
    let spec = spec(None, Some("7d"));
    let newest = (
        "b",
        BackupView {
            completed_at: Some(at("2026-11-24T11:00:00Z")),
            ..BackupView::from(BackupState::Completed)
        },
    );
    let mut observed = seen("2026-11-24T12:00:00Z", vec![newest]);
    let first = plan(&spec, ready().as_ref(), &observed);
    assert_eq!(
        retention(&first),
        [("orders-1".to_owned(), Some("b".to_owned()))]
    );
    let pass = |when: &str, backup: &str| RetentionPass {
        at: at(when),
        last_backup: Some(backup.to_owned()),
    };
    observed.last_retention = Some(pass("2026-11-24T11:30:00Z", "b"));
    assert_eq!(retention(&plan(&spec, ready().as_ref(), &observed)), []);
    observed.last_retention = Some(pass("2026-11-24T11:30:00Z", "a"));
    assert_eq!(
        retention(&plan(&spec, ready().as_ref(), &observed)).len(),
        1
    );
    observed.last_retention = Some(pass("2026-11-24T10:59:00Z", "b"));
    assert_eq!(
        retention(&plan(&spec, ready().as_ref(), &observed)).len(),
        1
    );
    // No ready primary, no pass.
    observed.last_retention = None;
    if let Some(manager) = observed
        .instances
        .get_mut(&1)
        .and_then(|i| i.pod.as_mut())
        .and_then(|p| p.manager.as_mut())
    {
        manager.ready = false;
    }
    assert_eq!(retention(&plan(&spec, ready().as_ref(), &observed)), []);
}

fn deleting(backups: Vec<(&str, BackupView)>) -> Observed {
    Observed {
        database: "orders".into(),
        deleting: true,
        backups_possible: true,
        deletion: Deletion {
            uid: Some("uid-1".into()),
            requested_at: Some(at("2026-11-24T12:00:00Z")),
            ..Deletion::default()
        },
        backups: backups
            .into_iter()
            .map(|(n, b)| (n.to_owned(), b))
            .collect(),
        ..Observed::default()
    }
}

fn final_backup(state: BackupState, uid: &str) -> (&'static str, BackupView) {
    (
        "orders-final-20261124120000",
        BackupView {
            final_for: Some(uid.to_owned()),
            ready_message: "uploading".into(),
            ..BackupView::from(state)
        },
    )
}

#[test]
fn deletion_takes_one_final_backup_and_waits_for_it() {
    let spec = spec(None, None);
    let first = plan(&spec, ready().as_ref(), &deleting(vec![]));
    assert!(!first.release);
    assert_eq!(first.phase, P::Deleting);
    assert_eq!(
        takes(&first),
        [(
            "orders-final-20261124120000".to_owned(),
            BackupPurpose::Final
        )]
    );
    assert_eq!(first.conditions[0].reason, "FinalBackupRunning");

    let running = plan(
        &spec,
        ready().as_ref(),
        &deleting(vec![final_backup(BackupState::Running, "uid-1")]),
    );
    assert!(!running.release);
    assert_eq!(takes(&running), []);
    assert!(
        running.conditions[0].message.ends_with(": uploading"),
        "{}",
        running.conditions[0].message
    );

    let failed = plan(
        &spec,
        ready().as_ref(),
        &deleting(vec![final_backup(BackupState::Failed("x".into()), "uid-1")]),
    );
    assert!(!failed.release && failed.alarm);
    assert_eq!(failed.conditions[0].reason, "FinalBackupFailed");
    assert!(
        failed.conditions[0].message.contains(SKIP_FINAL_BACKUP),
        "{}",
        failed.conditions[0].message
    );

    let done = plan(
        &spec,
        ready().as_ref(),
        &deleting(vec![final_backup(BackupState::Completed, "uid-1")]),
    );
    assert!(done.release);
    assert_eq!(done.notes[0].reason, "FinalBackupCompleted");

    // The same name from an earlier Database of that name is not this one's.
    let stranger = plan(
        &spec,
        ready().as_ref(),
        &deleting(vec![final_backup(BackupState::Completed, "uid-0")]),
    );
    assert!(!stranger.release);
    assert_eq!(takes(&stranger).len(), 1);
}

#[test]
fn no_store_the_annotation_or_a_going_namespace_release_at_once() {
    let spec = spec(None, None);
    let mut none = deleting(vec![]);
    none.backups_possible = false;
    let decided = plan(&spec, ready().as_ref(), &none);
    assert!(decided.release && decided.actions.is_empty() && decided.notes.is_empty());
    let mut skipped = deleting(vec![]);
    skipped.deletion.skip_final_backup = true;
    assert!(plan(&spec, ready().as_ref(), &skipped).release);
    let mut going = deleting(vec![final_backup(BackupState::Running, "uid-1")]);
    going.deletion.namespace_terminating = true;
    let decided = plan(&spec, ready().as_ref(), &going);
    assert!(decided.release);
    assert_eq!(decided.notes[0].reason, "FinalBackupSkipped");
    assert!(decided.notes[0].warning);
}

fn backup_view() -> impl Strategy<Value = BackupView> {
    (
        prop_oneof![
            Just(BackupState::Running),
            Just(BackupState::Completed),
            Just(BackupState::Failed("x".into()))
        ],
        proptest::option::of(0i64..600),
        proptest::option::of(prop_oneof![Just("uid-1"), Just("uid-0")]),
    )
        .prop_map(|(state, scheduled, final_for)| BackupView {
            scheduled_at: scheduled.and_then(|s| Timestamp::from_second(1_764_000_000 + s).ok()),
            completed_at: (state == BackupState::Completed)
                .then(|| Timestamp::from_second(1_764_000_600).ok())
                .flatten(),
            final_for: final_for.map(str::to_owned),
            ..BackupView::from(state)
        })
}

fn with_backups() -> impl Strategy<Value = Observed> {
    (
        proptest::collection::btree_map(
            prop_oneof![
                Just("orders-a".to_owned()),
                Just("orders-b".to_owned()),
                Just("orders-final-20251124160000".to_owned())
            ],
            backup_view(),
            0..4,
        ),
        0i64..1200,
        any::<(bool, bool, bool)>(),
        proptest::option::of(0i64..1200),
        any::<bool>(),
    )
        .prop_map(
            |(backups, now, (deleting, skip, terminating), last, primary_ready)| {
                let mut observed = Observed {
                    backups: backups.into_iter().collect::<BTreeMap<_, _>>(),
                    now: Timestamp::from_second(1_764_000_000 + now).unwrap_or_default(),
                    created: Timestamp::from_second(1_764_000_000).ok(),
                    backups_possible: true,
                    deleting,
                    deletion: Deletion {
                        uid: Some("uid-1".into()),
                        requested_at: Timestamp::from_second(1_764_000_000).ok(),
                        skip_final_backup: skip,
                        namespace_terminating: terminating,
                    },
                    last_retention: last.map(|l| RetentionPass {
                        at: Timestamp::from_second(1_764_000_000 + l).unwrap_or_default(),
                        last_backup: None,
                    }),
                    ..healthy_three()
                };
                // A primary that does not answer ready runs no retention.
                if let Some(manager) = observed
                    .instances
                    .get_mut(&1)
                    .and_then(|i| i.pod.as_mut())
                    .and_then(|p| p.manager.as_mut())
                {
                    manager.ready = primary_ready;
                }
                observed
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn never_a_scheduled_backup_while_one_runs(observed in with_backups()) {
        let plan = plan(&spec(Some("* * * * *"), Some("1d")), ready().as_ref(), &observed);
        let taken = takes(&plan);
        prop_assert!(taken.len() <= 1, "{taken:?}");
        let busy = observed.backups.values()
            .any(|b| b.scheduled_at.is_some() && b.state == BackupState::Running);
        if busy {
            prop_assert!(
                !taken.iter().any(|(_, p)| matches!(p, BackupPurpose::Scheduled { .. })),
                "{taken:?} while a scheduled Backup runs"
            );
        }
    }

    #[test]
    fn retention_runs_once_on_the_ready_primary_of_a_live_database(observed in with_backups()) {
        let plan = plan(&spec(Some("* * * * *"), Some("1d")), ready().as_ref(), &observed);
        let passes = retention_targets(&plan);
        prop_assert!(passes.len() <= 1);
        if observed.deleting {
            prop_assert!(passes.is_empty());
        }
        for primary in passes {
            let serial = observed.serial_of(&primary).unwrap_or_default();
            let status = observed.instances.get(&serial).and_then(Instance::status);
            prop_assert!(status.is_some_and(|s| s.role == InstanceRole::Primary && s.ready));
        }
    }

    #[test]
    fn a_deletion_only_ever_takes_its_final_backup(observed in with_backups()) {
        let mut observed = observed;
        observed.deleting = true;
        let plan = plan(&spec(Some("* * * * *"), Some("1d")), ready().as_ref(), &observed);
        prop_assert_eq!(plan.phase, P::Deleting);
        for action in &plan.actions {
            prop_assert!(
                matches!(action, Action::TakeBackup { purpose: BackupPurpose::Final, .. }),
                "{action:?} while deleting"
            );
        }
        let own_final = observed.backups.get("orders-final-20251124160000")
            .filter(|b| b.final_for.as_deref() == Some("uid-1"));
        // Released only when nothing is wanted, the namespace goes, or it completed.
        if plan.release {
            prop_assert!(
                observed.deletion.skip_final_backup
                    || observed.deletion.namespace_terminating
                    || own_final.is_some_and(|b| b.state == BackupState::Completed)
            );
        }
    }
}

fn retention_targets(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::RunRetention { primary, .. } => Some(primary.clone()),
            _ => None,
        })
        .collect()
}
