//! The drill's state machine as plan rows: one observation, one decision.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::plan::{BASELINE_WRITES, MAX_RUNS, unix};
use super::verdict::judge;
use super::*;
use crate::api::drill::{
    DrillExpectations, DrillGuards, DrillRun, DrillSpec, DrillStatus, InjectedFault,
};

pub(super) const DB: &str = "orders";
pub(super) const NAME: &str = "weekly";

pub(super) fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).expect("a valid time")
}

pub(super) fn spec(scenario: Scenario) -> DrillSpec {
    DrillSpec {
        database: DB.into(),
        scenario,
        duration_seconds: Some(10),
        schedule: None,
        window_minutes: None,
        dry_run: false,
        abort_after_seconds: Some(120),
        guards: DrillGuards::default(),
        expect: DrillExpectations::default(),
    }
}

pub(super) fn member(name: &str, role: InstanceRole, ready: bool, lag: i64) -> Member {
    Member {
        name: name.into(),
        role: Some(role),
        ready,
        lag_bytes: Some(lag),
    }
}

/// A Ready 3-instance sync Database, `orders-1` primary.
pub(super) fn healthy() -> DatabaseView {
    DatabaseView {
        name: DB.into(),
        instances: 3,
        sync: true,
        ready: true,
        ready_since: Some(at(-3600)),
        phase: Some(DatabasePhase::Ready),
        current_primary: Some("orders-1".into()),
        target_primary: Some("orders-1".into()),
        members: vec![
            member("orders-1", InstanceRole::Primary, true, 0),
            member("orders-2", InstanceRole::Replica, true, 200),
            member("orders-3", InstanceRole::Replica, true, 100),
        ],
        last_failover: None,
        newest_verified_backup: None,
    }
}

/// A probe acknowledging a write at each of `seconds`.
pub(super) fn probe(seconds: &[i64]) -> ProbeView {
    ProbeView {
        exists: true,
        ended: None,
        report: Some(ProbeReport {
            acknowledged: seconds
                .iter()
                .enumerate()
                .map(|(i, s)| (i as i64 + 1, unix(at(*s))))
                .collect(),
            ..ProbeReport::default()
        }),
    }
}

pub(super) fn observed(now: i64, database: Option<DatabaseView>, probe: ProbeView) -> Observed {
    Observed {
        now: at(now),
        generation: Some(1),
        deleting: false,
        database,
        invalid: Vec::new(),
        running_drills: Vec::new(),
        probe,
        restore: Default::default(),
    }
}

fn event(phase: DrillPhase, second: i64) -> crate::api::drill::DrillEvent {
    crate::api::drill::DrillEvent {
        phase,
        at: Time(at(second)),
        message: None,
    }
}

/// A run in `phase`, started at 0, its fault (when injected) at 10.
fn running(scenario: Scenario, phase: DrillPhase) -> DrillStatus {
    let injected = !matches!(phase, DrillPhase::Probing);
    DrillStatus {
        phase: Some(phase),
        started_at: Some(Time(at(0))),
        probe: Some(probe_name(NAME)),
        fault: injected.then(|| InjectedFault {
            target: "orders-1".into(),
            injected_at: Time(at(10)),
            undo_by: scenario.holds_a_fault().then(|| Time(at(20))),
            object: None,
            undone_at: None,
        }),
        timeline: vec![event(phase, 10)],
        ..DrillStatus::default()
    }
}

fn has(step: &Step, wanted: impl Fn(&Action) -> bool) -> bool {
    step.actions.iter().any(wanted)
}

#[test]
fn a_healthy_database_starts_a_run_with_a_probe_and_nothing_injected_yet() {
    let step = plan(
        NAME,
        &spec(Scenario::DeletePrimaryPod),
        &DrillStatus::default(),
        &observed(0, Some(healthy()), ProbeView::default()),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Probing));
    assert_eq!(step.status.probe.as_deref(), Some("weekly-probe"));
    assert_eq!(step.status.started_at, Some(Time(at(0))));
    let phases: Vec<_> = step.status.timeline.iter().map(|e| e.phase).collect();
    assert_eq!(phases, [DrillPhase::CheckingGuards, DrillPhase::Probing]);
    assert!(has(&step, |a| *a == Action::CreateProbe));
    assert!(!has(&step, |a| matches!(a, Action::Inject { .. })));
    assert_eq!(step.requeue_after, Some(plan::POLL));
}

#[test]
fn each_refusal_names_what_failed() {
    let refused = |spec: DrillSpec, db: Option<DatabaseView>, others: Vec<String>| {
        let mut seen = observed(0, db, ProbeView::default());
        seen.running_drills = others;
        let step = plan(NAME, &spec, &DrillStatus::default(), &seen);
        assert_eq!(step.status.phase, Some(DrillPhase::Refused), "{step:?}");
        assert!(!has(&step, |a| matches!(
            a,
            Action::CreateProbe | Action::Inject { .. }
        )));
        step.status.verdict.unwrap_or_default()
    };
    let mut lagging = healthy();
    lagging.members[2].ready = false;
    lagging.members[1].lag_bytes = Some(1 << 30);
    let why = refused(spec(Scenario::KillPostgres), Some(lagging), vec![]);
    assert!(why.contains("replica orders-3 is not streaming"), "{why}");
    assert!(
        why.contains("replica orders-2 lags 1073741824 bytes, more than guards.maxLagBytes"),
        "{why}"
    );

    let mut single = healthy();
    single.instances = 1;
    single.members.truncate(1);
    let why = refused(spec(Scenario::DeletePrimaryPod), Some(single), vec![]);
    assert!(
        why.contains(
            "spec.scenario: delete-primary-pod needs at least 2 instances; Database orders has 1"
        ),
        "{why}"
    );

    let why = refused(spec(Scenario::Switchover), None, vec![]);
    assert!(
        why.contains("spec.database: Database orders does not exist"),
        "{why}"
    );

    let mut not_ready = healthy();
    not_ready.ready = false;
    not_ready.phase = Some(DatabasePhase::Upgrading);
    let why = refused(spec(Scenario::Switchover), Some(not_ready), vec![]);
    assert!(
        why.contains("not Ready at its generation (phase Upgrading)"),
        "{why}"
    );
    assert!(why.contains("an upgrade is under way"), "{why}");

    let why = refused(
        spec(Scenario::Switchover),
        Some(healthy()),
        vec!["other".into()],
    );
    assert!(
        why.contains("Drill other is running on Database orders"),
        "{why}"
    );

    let mut backed_up = spec(Scenario::Switchover);
    backed_up.guards.max_backup_age_hours = Some(24);
    let mut old = healthy();
    old.newest_verified_backup = Some(at(-25 * 3600));
    let why = refused(backed_up.clone(), Some(old), vec![]);
    assert!(
        why.contains(
            "guards.maxBackupAgeHours: no verified backup of orders completed in the last 24 h"
        ),
        "{why}"
    );
    let mut fresh = healthy();
    fresh.newest_verified_backup = Some(at(-3600));
    let step = plan(
        NAME,
        &backed_up,
        &DrillStatus::default(),
        &observed(0, Some(fresh), ProbeView::default()),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Probing));
}

/// A partition run in Probing with the baseline written and the canary
/// record `check`.
fn partition_probing(check: Option<crate::api::drill::PolicyCheck>) -> DrillStatus {
    DrillStatus {
        policy_check: check,
        ..running(Scenario::PartitionPrimary, DrillPhase::Probing)
    }
}

fn canary_record(
    applied: i64,
    enforced: Option<i64>,
    removed: Option<i64>,
) -> crate::api::drill::PolicyCheck {
    crate::api::drill::PolicyCheck {
        policy: format!("{NAME}-canary"),
        applied_at: Time(at(applied)),
        enforced_at: enforced.map(|s| Time(at(s))),
        removed_at: removed.map(|s| Time(at(s))),
    }
}

/// A probe that does not answer its report (the canary holds).
fn unreachable_probe() -> ProbeView {
    ProbeView {
        report: None,
        ..probe(&[1, 2, 3])
    }
}

#[test]
fn a_partition_first_applies_the_canary_on_record_and_injects_nothing() {
    let step = plan(
        NAME,
        &spec(Scenario::PartitionPrimary),
        &partition_probing(None),
        &observed(5, Some(healthy()), probe(&[1, 2, 3])),
    );
    assert_eq!(step.actions, vec![Action::ApplyCanary]);
    let check = step.status.policy_check.expect("the canary on record");
    assert_eq!(check.policy, format!("{NAME}-canary"));
    assert_eq!(check.applied_at, Time(at(5)));
    assert!(step.status.fault.is_none());
}

#[test]
fn a_cluster_that_does_not_enforce_policies_refuses_the_partition_naming_the_scenario() {
    let status = partition_probing(Some(canary_record(5, None, None)));
    let waiting = plan(
        NAME,
        &spec(Scenario::PartitionPrimary),
        &status,
        &observed(14, Some(healthy()), probe(&[1, 2, 3, 14])),
    );
    assert_eq!(waiting.status.phase, Some(DrillPhase::Probing));
    assert!(waiting.actions.is_empty(), "{:?}", waiting.actions);
    let step = plan(
        NAME,
        &spec(Scenario::PartitionPrimary),
        &status,
        &observed(15, Some(healthy()), probe(&[1, 2, 3, 15])),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Refused));
    let verdict = step.status.verdict.clone().unwrap_or_default();
    assert!(
        verdict.starts_with(
            "spec.scenario: partition-primary needs a cluster that enforces NetworkPolicy"
        ),
        "{verdict}"
    );
    assert!(has(&step, |a| *a == Action::RemoveCanary));
    assert!(has(&step, |a| *a == Action::DeleteProbe));
    assert!(!has(&step, |a| matches!(a, Action::Inject { .. })));
}

#[test]
fn a_probe_cut_off_by_the_canary_proves_enforcement_and_the_canary_goes() {
    let step = plan(
        NAME,
        &spec(Scenario::PartitionPrimary),
        &partition_probing(Some(canary_record(5, None, None))),
        &observed(7, Some(healthy()), unreachable_probe()),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Probing));
    let check = step.status.policy_check.clone().expect("the record");
    assert_eq!(check.enforced_at, Some(Time(at(7))));
    assert!(has(&step, |a| *a == Action::RemoveCanary));
    assert!(has(
        &step,
        |a| matches!(a, Action::Event { reason, .. } if reason == "NetworkPolicyEnforced")
    ));
    let removed = settle(
        NAME,
        &spec(Scenario::PartitionPrimary),
        &step.status,
        &Action::RemoveCanary,
        &Outcome::Done,
        at(8),
    )
    .expect("the removal is recorded");
    assert_eq!(
        removed.status.policy_check.and_then(|c| c.removed_at),
        Some(Time(at(8)))
    );
}

#[test]
fn the_partition_goes_in_once_the_probe_answers_again_with_its_policy_on_record() {
    let status = partition_probing(Some(canary_record(5, Some(7), Some(8))));
    let reopening = plan(
        NAME,
        &spec(Scenario::PartitionPrimary),
        &status,
        &observed(9, Some(healthy()), unreachable_probe()),
    );
    assert!(reopening.actions.is_empty(), "{:?}", reopening.actions);
    let step = plan(
        NAME,
        &spec(Scenario::PartitionPrimary),
        &status,
        &observed(10, Some(healthy()), probe(&[1, 2, 3, 10])),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Injecting));
    assert_eq!(
        step.actions.last(),
        Some(&Action::Inject {
            scenario: Scenario::PartitionPrimary,
            target: "orders-1".into()
        })
    );
    let fault = step.status.fault.expect("on record first");
    assert_eq!(fault.object.as_deref(), Some("weekly-partition"));
    assert_eq!(fault.undo_by, Some(Time(at(20))));
}

#[test]
fn a_canary_left_by_an_ended_run_is_removed_before_a_new_run() {
    let status = DrillStatus {
        phase: Some(DrillPhase::Aborted),
        policy_check: Some(canary_record(5, None, None)),
        ..DrillStatus::default()
    };
    let mut scheduled = spec(Scenario::PartitionPrimary);
    scheduled.schedule = Some("* * * * *".into());
    let step = plan(
        NAME,
        &scheduled,
        &status,
        &observed(120, Some(healthy()), ProbeView::default()),
    );
    assert_eq!(step.actions, vec![Action::RemoveCanary]);
    assert_eq!(step.status.phase, Some(DrillPhase::Aborted));
}

#[test]
fn a_dry_run_reports_the_guards_only() {
    let mut dry = spec(Scenario::DeletePrimaryPod);
    dry.dry_run = true;
    let step = plan(
        NAME,
        &dry,
        &DrillStatus::default(),
        &observed(0, Some(healthy()), ProbeView::default()),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Succeeded));
    assert!(
        step.status
            .verdict
            .as_deref()
            .is_some_and(|v| v.starts_with("dry run: every guard holds"))
    );
    assert!(step.status.probe.is_none());
    assert!(!has(&step, |a| matches!(
        a,
        Action::CreateProbe
            | Action::Inject { .. }
            | Action::ApplyLastDrill { .. }
            | Action::Record { .. }
    )));
    let mut sick = healthy();
    sick.ready = false;
    let step = plan(
        NAME,
        &dry,
        &DrillStatus::default(),
        &observed(0, Some(sick), ProbeView::default()),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Refused));
}

#[test]
fn the_fault_is_on_record_before_it_is_injected() {
    let status = running(Scenario::FreezePrimary, DrillPhase::Probing);
    let few = plan(
        NAME,
        &spec(Scenario::FreezePrimary),
        &status,
        &observed(9, Some(healthy()), probe(&[7, 8])),
    );
    assert_eq!(
        few.status.phase,
        Some(DrillPhase::Probing),
        "a baseline of {BASELINE_WRITES} writes first"
    );
    let step = plan(
        NAME,
        &spec(Scenario::FreezePrimary),
        &status,
        &observed(10, Some(healthy()), probe(&[7, 8, 9])),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Injecting));
    let fault = step.status.fault.clone().expect("a fault on record");
    assert_eq!(fault.target, "orders-1");
    assert_eq!(fault.injected_at, Time(at(10)));
    assert_eq!(fault.undo_by, Some(Time(at(20))), "durationSeconds after");
    assert!(has(&step, |a| *a
        == Action::Inject {
            scenario: Scenario::FreezePrimary,
            target: "orders-1".into()
        }));
}

#[test]
fn targets_the_primary_a_replica_or_the_most_advanced_replica() {
    let db = healthy();
    assert_eq!(
        plan::target(Scenario::DeletePrimaryPod, &db).as_deref(),
        Some("orders-1")
    );
    assert_eq!(
        plan::target(Scenario::StoreOutage, &db).as_deref(),
        Some("orders-1")
    );
    assert_eq!(
        plan::target(Scenario::Switchover, &db).as_deref(),
        Some("orders-3"),
        "least lag"
    );
    assert_eq!(
        plan::target(Scenario::KillReplica, &db).as_deref(),
        Some("orders-3")
    );
}

#[test]
fn a_held_fault_is_undone_at_its_deadline_and_recorded_once_undone() {
    let freeze = spec(Scenario::FreezePrimary);
    let observing = running(Scenario::FreezePrimary, DrillPhase::Observing);
    let early = plan(
        NAME,
        &freeze,
        &observing,
        &observed(15, Some(healthy()), probe(&[9])),
    );
    assert_eq!(early.status.phase, Some(DrillPhase::Observing));
    assert!(!has(&early, |a| matches!(a, Action::Undo { .. })));
    let due = plan(
        NAME,
        &freeze,
        &observing,
        &observed(20, Some(healthy()), probe(&[9])),
    );
    assert_eq!(due.status.phase, Some(DrillPhase::Undoing));
    assert!(has(
        &due,
        |a| matches!(a, Action::Undo { target, .. } if target == "orders-1")
    ));
    assert_eq!(
        due.status.fault.as_ref().and_then(|f| f.undone_at.clone()),
        None,
        "not before it happened"
    );
    let undo = Action::Undo {
        scenario: Scenario::FreezePrimary,
        target: "orders-1".into(),
    };
    assert_eq!(
        settle(
            NAME,
            &freeze,
            &due.status,
            &undo,
            &Outcome::Unknown("timeout".into()),
            at(21)
        ),
        None
    );
    let done = settle(NAME, &freeze, &due.status, &undo, &Outcome::Done, at(21)).expect("a step");
    assert_eq!(done.status.phase, Some(DrillPhase::Recovering));
    assert_eq!(
        done.status.fault.and_then(|f| f.undone_at),
        Some(Time(at(21)))
    );
}

#[test]
fn a_one_shot_fault_is_watched_then_recovery_is_measured() {
    let delete = spec(Scenario::DeletePrimaryPod);
    let injecting = running(Scenario::DeletePrimaryPod, DrillPhase::Injecting);
    let step = plan(
        NAME,
        &delete,
        &injecting,
        &observed(11, Some(healthy()), probe(&[9])),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Observing));
    let watching = plan(
        NAME,
        &delete,
        &step.status,
        &observed(12, Some(healthy()), probe(&[9])),
    );
    assert_eq!(watching.status.phase, Some(DrillPhase::Observing));
    let over = plan(
        NAME,
        &delete,
        &step.status,
        &observed(15, Some(healthy()), probe(&[9])),
    );
    assert_eq!(over.status.phase, Some(DrillPhase::Recovering));
    assert!(
        over.status
            .fault
            .as_ref()
            .is_some_and(|f| f.undone_at.is_some())
    );

    let mut failing_over = healthy();
    failing_over.ready = false;
    let waiting = plan(
        NAME,
        &delete,
        &over.status,
        &observed(16, Some(failing_over), probe(&[9, 14])),
    );
    assert_eq!(
        waiting.status.phase,
        Some(DrillPhase::Recovering),
        "not Ready yet"
    );
    let mut back = healthy();
    back.ready_since = Some(at(16));
    let no_writes = plan(
        NAME,
        &delete,
        &over.status,
        &observed(17, Some(back.clone()), probe(&[9])),
    );
    assert_eq!(
        no_writes.status.phase,
        Some(DrillPhase::Recovering),
        "no write acknowledged since the fault"
    );
    let ready = plan(
        NAME,
        &delete,
        &over.status,
        &observed(17, Some(back), probe(&[9, 14, 16])),
    );
    assert_eq!(ready.status.phase, Some(DrillPhase::Verifying));
    let figures = ready.status.figures.clone().unwrap_or_default();
    assert_eq!(
        figures.seconds_to_ready,
        Some(6.0),
        "Ready at 16, the fault at 10"
    );
}

#[test]
fn a_switchover_recovers_only_on_its_new_primary() {
    let switchover = spec(Scenario::Switchover);
    let mut status = running(Scenario::Switchover, DrillPhase::Recovering);
    if let Some(fault) = status.fault.as_mut() {
        fault.target = "orders-3".into();
    }
    let old = plan(
        NAME,
        &switchover,
        &status,
        &observed(20, Some(healthy()), probe(&[9, 12, 19])),
    );
    assert_eq!(old.status.phase, Some(DrillPhase::Recovering));
    let mut moved = healthy();
    moved.current_primary = Some("orders-3".into());
    let new = plan(
        NAME,
        &switchover,
        &status,
        &observed(20, Some(moved), probe(&[9, 12, 19])),
    );
    assert_eq!(new.status.phase, Some(DrillPhase::Verifying));
}

#[test]
fn verifying_finishes_the_probe_after_writes_then_judges() {
    let delete = spec(Scenario::DeletePrimaryPod);
    let mut status = running(Scenario::DeletePrimaryPod, DrillPhase::Verifying);
    status.timeline = vec![event(DrillPhase::Verifying, 20)];
    status.figures = Some(DrillFigures {
        seconds_to_ready: Some(8.0),
        ..DrillFigures::default()
    });
    let early = plan(
        NAME,
        &delete,
        &status,
        &observed(21, Some(healthy()), probe(&[9, 12, 21])),
    );
    assert!(!has(&early, |a| *a == Action::FinishProbe));
    let enough = plan(
        NAME,
        &delete,
        &status,
        &observed(23, Some(healthy()), probe(&[9, 12, 23])),
    );
    assert!(has(&enough, |a| *a == Action::FinishProbe));
    assert_eq!(enough.status.phase, Some(DrillPhase::Verifying));

    let mut finished = probe(&[9, 12, 13, 14, 15, 16, 17, 18, 19, 20, 23]);
    let mut db = healthy();
    db.last_failover = Some(Failover {
        time: at(11),
        duration_milliseconds: Some(2500),
        wal_gap_bytes: Some(0),
    });
    if let Some(report) = finished.report.as_mut() {
        report.finished = true;
    }
    let done = plan(
        NAME,
        &delete,
        &status,
        &observed(24, Some(db.clone()), finished.clone()),
    );
    assert_eq!(
        done.status.phase,
        Some(DrillPhase::Succeeded),
        "{:?}",
        done.status.verdict
    );
    let figures = done.status.figures.clone().unwrap_or_default();
    assert_eq!(figures.write_outage_seconds, Some(3.0));
    assert_eq!(figures.lost_writes, Some(0));
    assert_eq!(figures.acknowledged_writes, Some(11));
    assert_eq!(figures.failover_seconds, Some(2.5));
    assert_eq!(figures.wal_gap_bytes, Some(0));
    assert_eq!(done.status.finished_at, Some(Time(at(24))));
    assert!(has(&done, |a| *a == Action::DeleteProbe));
    assert!(has(
        &done,
        |a| matches!(a, Action::ApplyLastDrill { succeeded: true, reason, .. } if reason == "Succeeded")
    ));
    assert!(has(&done, |a| matches!(
        a,
        Action::Record {
            phase: DrillPhase::Succeeded,
            ..
        }
    )));

    if let Some(report) = finished.report.as_mut() {
        report.lost = vec![2];
    }
    let lost = plan(NAME, &delete, &status, &observed(24, Some(db), finished));
    assert_eq!(lost.status.phase, Some(DrillPhase::Failed));
    let verdict = lost.status.verdict.clone().unwrap_or_default();
    assert!(
        verdict.contains("1 acknowledged writes lost, more than expect.maxLostWrites (0)"),
        "{verdict}"
    );
    assert!(has(
        &lost,
        |a| matches!(a, Action::ApplyLastDrill { succeeded: false, reason, .. } if reason == "Failed")
    ));
}

#[test]
fn abort_after_seconds_aborts_and_undoes() {
    let freeze = spec(Scenario::FreezePrimary);
    let status = running(Scenario::FreezePrimary, DrillPhase::Observing);
    let step = plan(
        NAME,
        &freeze,
        &status,
        &observed(121, Some(healthy()), probe(&[9])),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Aborted));
    let verdict = step.status.verdict.clone().unwrap_or_default();
    assert!(
        verdict.contains("abortAfterSeconds (120) passed in phase Observing"),
        "{verdict}"
    );
    assert!(has(&step, |a| matches!(a, Action::Undo { .. })));
    assert!(has(&step, |a| *a == Action::DeleteProbe));
    // The undo was lost (a restart): the final phase undoes it again.
    let again = plan(
        NAME,
        &freeze,
        &step.status,
        &observed(122, Some(healthy()), probe(&[9])),
    );
    assert!(has(&again, |a| matches!(a, Action::Undo { .. })));
    assert_eq!(again.status.phase, Some(DrillPhase::Aborted));
}

#[test]
fn a_database_that_breaks_a_guard_mid_run_aborts_it() {
    let freeze = spec(Scenario::FreezePrimary);
    let status = running(Scenario::FreezePrimary, DrillPhase::Observing);
    let mut upgrading = healthy();
    upgrading.phase = Some(DatabasePhase::Upgrading);
    let step = plan(
        NAME,
        &freeze,
        &status,
        &observed(12, Some(upgrading), probe(&[9])),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Aborted));
    assert!(has(&step, |a| matches!(a, Action::Undo { .. })));
    let gone = plan(NAME, &freeze, &status, &observed(12, None, probe(&[9])));
    assert_eq!(gone.status.phase, Some(DrillPhase::Aborted));
    assert!(
        gone.status
            .verdict
            .unwrap_or_default()
            .contains("spec.database: Database orders no longer exists")
    );
}

#[test]
fn an_injection_the_manager_refuses_fails_the_run_with_its_error() {
    let kill = spec(Scenario::KillPostgres);
    let status = running(Scenario::KillPostgres, DrillPhase::Injecting);
    let inject = Action::Inject {
        scenario: Scenario::KillPostgres,
        target: "orders-1".into(),
    };
    let step = settle(
        NAME,
        &kill,
        &status,
        &inject,
        &Outcome::Refused("404 Not Found".into()),
        at(10),
    )
    .expect("a step");
    assert_eq!(step.status.phase, Some(DrillPhase::Failed));
    assert!(
        step.status
            .verdict
            .unwrap_or_default()
            .contains("injecting kill-postgres into orders-1 failed: 404 Not Found")
    );
    assert!(step.status.fault.is_some_and(|f| f.undone_at.is_some()));
    // A held fault whose injection timed out is undone all the same.
    let freeze = spec(Scenario::FreezePrimary);
    let status = running(Scenario::FreezePrimary, DrillPhase::Injecting);
    let inject = Action::Inject {
        scenario: Scenario::FreezePrimary,
        target: "orders-1".into(),
    };
    let step = settle(
        NAME,
        &freeze,
        &status,
        &inject,
        &Outcome::Unknown("timeout".into()),
        at(10),
    )
    .expect("a step");
    assert_eq!(step.status.phase, Some(DrillPhase::Failed));
    assert!(has(&step, |a| matches!(a, Action::Undo { .. })));
}

#[test]
fn a_scheduled_drill_waits_for_its_tick_retries_in_its_window_then_skips() {
    let mut every_minute = spec(Scenario::KillReplica);
    every_minute.schedule = Some("* * * * *".into());
    every_minute.window_minutes = Some(2);
    // 1_800_000_000 is 08:00:00 UTC: the next tick is a minute on.
    let first = plan(
        NAME,
        &every_minute,
        &DrillStatus::default(),
        &observed(0, Some(healthy()), ProbeView::default()),
    );
    assert_eq!(first.status.phase, Some(DrillPhase::Scheduled));
    assert_eq!(first.status.next_run_at, Some(Time(at(60))));
    assert!(
        first
            .actions
            .iter()
            .all(|a| matches!(a, Action::Event { .. }))
    );

    let mut sick = healthy();
    sick.ready = false;
    let retry = plan(
        NAME,
        &every_minute,
        &first.status,
        &observed(61, Some(sick.clone()), ProbeView::default()),
    );
    assert_eq!(retry.status.phase, Some(DrillPhase::CheckingGuards));
    assert_eq!(retry.requeue_after, Some(plan::GUARD_RETRY));
    assert!(!has(&retry, |a| *a == Action::CreateProbe));
    let skipped = plan(
        NAME,
        &every_minute,
        &retry.status,
        &observed(60 + 121, Some(sick), ProbeView::default()),
    );
    assert_eq!(skipped.status.phase, Some(DrillPhase::Scheduled));
    assert_eq!(skipped.status.next_run_at, Some(Time(at(240))));
    assert_eq!(
        skipped.status.runs.first().map(|r| r.phase),
        Some(DrillPhase::Refused)
    );

    let start = plan(
        NAME,
        &every_minute,
        &skipped.status,
        &observed(241, Some(healthy()), ProbeView::default()),
    );
    assert_eq!(start.status.phase, Some(DrillPhase::Probing));
    assert_eq!(
        start.status.next_run_at,
        Some(Time(at(300))),
        "the next tick is set when a run starts"
    );
}

#[test]
fn a_finished_scheduled_run_is_kept_among_the_last_ten() {
    let mut every_minute = spec(Scenario::KillReplica);
    every_minute.schedule = Some("* * * * *".into());
    let mut status = running(Scenario::KillReplica, DrillPhase::Verifying);
    status.runs = (0..MAX_RUNS)
        .map(|i| DrillRun {
            started_at: Time(at(-(i as i64) * 60)),
            phase: DrillPhase::Succeeded,
            figures: None,
            verdict: None,
        })
        .collect();
    let step = plan(
        NAME,
        &every_minute,
        &status,
        &observed(1000, Some(healthy()), probe(&[9])),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Aborted));
    assert_eq!(step.status.runs.len(), MAX_RUNS);
    assert_eq!(step.status.runs[0].phase, DrillPhase::Aborted);
    assert_eq!(step.status.runs[0].started_at, Time(at(0)));
}

#[test]
fn a_finished_one_shot_drill_stays_finished_and_removes_a_leftover_probe() {
    let delete = spec(Scenario::DeletePrimaryPod);
    let status = DrillStatus {
        phase: Some(DrillPhase::Succeeded),
        probe: Some(probe_name(NAME)),
        ..DrillStatus::default()
    };
    let step = plan(
        NAME,
        &delete,
        &status,
        &observed(500, Some(healthy()), probe(&[1])),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Succeeded));
    assert_eq!(step.actions, vec![Action::DeleteProbe]);
    assert_eq!(step.requeue_after, None);
}

#[test]
fn the_verdict_judges_each_expectation() {
    let mut s = spec(Scenario::DeletePrimaryPod);
    let figures = DrillFigures {
        write_outage_seconds: Some(12.0),
        lost_writes: Some(3),
        acknowledged_writes: Some(100),
        seconds_to_ready: Some(40.0),
        ..DrillFigures::default()
    };
    assert_eq!(
        judge(&s, true, &figures).0,
        DrillPhase::Failed,
        "3 lost in sync mode"
    );
    assert_eq!(
        judge(&s, false, &figures).0,
        DrillPhase::Succeeded,
        "async: reported only"
    );
    s.expect.max_write_outage_seconds = Some(10.0);
    let (phase, why) = judge(&s, false, &figures);
    assert_eq!(phase, DrillPhase::Failed);
    assert!(
        why.contains("write outage 12.0 s exceeds expect.maxWriteOutageSeconds (10)"),
        "{why}"
    );
    s.expect = DrillExpectations {
        max_seconds_to_ready: Some(30),
        max_lost_writes: Some(5),
        ..DrillExpectations::default()
    };
    let (phase, why) = judge(&s, true, &figures);
    assert_eq!(phase, DrillPhase::Failed);
    assert!(
        why.contains("Ready again after 40.0 s, more than expect.maxSecondsToReady (30)"),
        "{why}"
    );
    let unmeasured = DrillFigures::default();
    assert_eq!(
        judge(&spec(Scenario::KillReplica), false, &unmeasured).0,
        DrillPhase::Failed,
        "nothing measured never passes"
    );
}

#[test]
fn a_drill_the_admission_rules_refuse_now_does_not_start() {
    let mut seen = observed(0, Some(healthy()), ProbeView::default());
    seen.invalid = vec!["spec.schedule: not a cron expression".into()];
    let step = plan(
        NAME,
        &spec(Scenario::KillReplica),
        &DrillStatus::default(),
        &seen,
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Refused));
    let verdict = step.status.verdict.clone().unwrap_or_default();
    assert!(
        verdict.contains("spec.schedule: not a cron expression"),
        "{verdict}"
    );
    assert!(!has(&step, |a| *a == Action::CreateProbe));
}
