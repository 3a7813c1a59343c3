//! The `restore` scenario as plan rows: one observation, one decision.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::restore::{CheckView, CopyView, copy_name};
use super::tests::{NAME, at, healthy, observed, probe, spec};
use super::*;
use crate::api::drill::{DrillStatus, InjectedFault};
use crate::probe::check::CheckReport;

/// Writes acknowledged at 1..=7 s: the recovery point is 5 s (ids 1..=5).
const ACKS: [i64; 7] = [1, 2, 3, 4, 5, 6, 7];

fn copy() -> String {
    copy_name(NAME, at(0))
}

/// A restore run in `phase`, started at 0, its copy on record, restoring
/// to 5 s.
fn restoring(phase: DrillPhase) -> DrillStatus {
    DrillStatus {
        phase: Some(phase),
        started_at: Some(Time(at(0))),
        probe: Some(probe_name(NAME)),
        fault: Some(InjectedFault {
            target: copy(),
            injected_at: Time(at(5)),
            undo_by: None,
            object: Some(copy()),
            undone_at: None,
        }),
        ..DrillStatus::default()
    }
}

fn seen(now: i64, copy: Option<CopyView>, check: CheckView) -> Observed {
    let mut seen = observed(now, Some(healthy()), probe(&ACKS));
    seen.restore.copy = copy;
    seen.restore.check = check;
    seen
}

fn ready_copy(created: i64, ready: i64) -> Option<CopyView> {
    Some(CopyView {
        created: at(created),
        ready: true,
        ready_since: Some(at(ready)),
    })
}

fn checked(report: CheckReport) -> CheckView {
    CheckView {
        exists: true,
        ended: Some(Ok(report)),
    }
}

fn undoes_copy(step: &Step) -> bool {
    step.actions.contains(&Action::Undo {
        scenario: Scenario::Restore,
        target: copy(),
    })
}

#[test]
fn the_start_of_a_restore_records_the_copy_before_creating_it() {
    let mut probing = restoring(DrillPhase::Probing);
    probing.fault = None;
    let step = plan(
        NAME,
        &spec(Scenario::Restore),
        &probing,
        &observed(8, Some(healthy()), probe(&ACKS)),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Injecting));
    let fault = step.status.fault.clone().expect("the copy on record");
    assert_eq!(fault.target, copy());
    assert_eq!(fault.object.as_deref(), Some(copy().as_str()));
    assert_eq!(fault.injected_at.0, at(5), "two writes after the point");
    assert!(fault.undone_at.is_none() && fault.undo_by.is_none());
    assert!(step.actions.contains(&Action::StartRestore {
        primary: "orders-1".into(),
        copy: copy(),
        target_time: at(5),
    }));
    // Three writes, none after a whole second: no point yet, nothing asked.
    let early = plan(
        NAME,
        &spec(Scenario::Restore),
        &probing,
        &observed(4, Some(healthy()), probe(&[1, 2, 3])),
    );
    assert_eq!(early.status.phase, Some(DrillPhase::Probing));
    assert!(early.status.fault.is_none());
    assert!(
        !early
            .actions
            .iter()
            .any(|a| matches!(a, Action::StartRestore { .. }))
    );
}

#[test]
fn a_copy_that_is_restoring_is_watched_and_a_lost_creation_asked_again() {
    let restoring_copy = Some(CopyView {
        created: at(6),
        ready: false,
        ready_since: None,
    });
    let step = plan(
        NAME,
        &spec(Scenario::Restore),
        &restoring(DrillPhase::Injecting),
        &seen(9, restoring_copy, CheckView::default()),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Observing));
    assert!(step.requeue_after.is_some());
    // A restarted operator whose creation never happened: asked again,
    // with the point on record.
    let lost = plan(
        NAME,
        &spec(Scenario::Restore),
        &restoring(DrillPhase::Injecting),
        &seen(9, None, CheckView::default()),
    );
    assert!(lost.actions.contains(&Action::StartRestore {
        primary: "orders-1".into(),
        copy: copy(),
        target_time: at(5),
    }));
}

#[test]
fn a_ready_copy_gives_the_recovery_time_and_starts_the_checker() {
    let step = plan(
        NAME,
        &spec(Scenario::Restore),
        &restoring(DrillPhase::Observing),
        &seen(40, ready_copy(6, 36), CheckView::default()),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Verifying));
    let figures = step.status.figures.clone().unwrap_or_default();
    assert_eq!(figures.recovery_seconds, Some(30.0));
    assert!(step.actions.contains(&Action::CheckCopy {
        copy: copy(),
        ids: "1-5".into(),
    }));
}

#[test]
fn every_row_found_then_the_probe_finished_succeeds_and_deletes_the_copy() {
    let mut verifying = restoring(DrillPhase::Verifying);
    verifying.figures = Some(DrillFigures {
        recovery_seconds: Some(30.0),
        ..DrillFigures::default()
    });
    let found = checked(CheckReport::of(&[1, 2, 3, 4, 5], &(1..=5).collect()));
    let step = plan(
        NAME,
        &spec(Scenario::Restore),
        &verifying,
        &seen(41, ready_copy(6, 36), found.clone()),
    );
    assert!(step.actions.contains(&Action::FinishProbe));
    assert_eq!(
        step.status.figures.as_ref().and_then(|f| f.rows_compared),
        Some(5)
    );
    let mut finished = seen(42, ready_copy(6, 36), found);
    if let Some(report) = finished.probe.report.as_mut() {
        report.finished = true;
    }
    let step = plan(NAME, &spec(Scenario::Restore), &step.status, &finished);
    assert_eq!(
        step.status.phase,
        Some(DrillPhase::Succeeded),
        "{:?}",
        step.status.verdict
    );
    let verdict = step.status.verdict.clone().unwrap_or_default();
    assert!(
        verdict.contains("copy Ready after 30.0 s, 5 rows compared"),
        "{verdict}"
    );
    assert!(!verdict.contains("outage"), "{verdict}");
    assert!(undoes_copy(&step));
    assert!(step.actions.contains(&Action::DeleteProbe));
}

#[test]
fn rows_missing_from_the_copy_fail_the_run_naming_them() {
    let mut verifying = restoring(DrillPhase::Verifying);
    verifying.figures = Some(DrillFigures {
        recovery_seconds: Some(30.0),
        ..DrillFigures::default()
    });
    let missing = checked(CheckReport::of(&[1, 2, 3, 4, 5], &[1, 2].into()));
    let mut finished = seen(42, ready_copy(6, 36), missing);
    if let Some(report) = finished.probe.report.as_mut() {
        report.finished = true;
    }
    let step = plan(NAME, &spec(Scenario::Restore), &verifying, &finished);
    assert_eq!(step.status.phase, Some(DrillPhase::Failed));
    let verdict = step.status.verdict.clone().unwrap_or_default();
    assert!(
        verdict.contains("3 of the 5 writes acknowledged by the recovery point are missing from the copy (first: 3, 4, 5)"),
        "{verdict}"
    );
    assert!(undoes_copy(&step));
}

#[test]
fn a_checker_that_could_not_read_fails_the_run() {
    let failed = CheckView {
        exists: true,
        ended: Some(Err("it ended without a report (Error): boom".into())),
    };
    let step = plan(
        NAME,
        &spec(Scenario::Restore),
        &restoring(DrillPhase::Verifying),
        &seen(42, ready_copy(6, 36), failed),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Failed));
    assert!(
        step.status
            .verdict
            .clone()
            .unwrap_or_default()
            .contains("the checker could not read")
    );
    assert!(undoes_copy(&step));
}

#[test]
fn an_abort_deletes_the_copy_and_records_it_deleted_only_once_done() {
    let mut drill = spec(Scenario::Restore);
    drill.abort_after_seconds = Some(60);
    let step = plan(
        NAME,
        &drill,
        &restoring(DrillPhase::Observing),
        &seen(61, None, CheckView::default()),
    );
    assert_eq!(step.status.phase, Some(DrillPhase::Aborted));
    assert!(undoes_copy(&step));
    let fault = step.status.fault.clone().unwrap();
    assert!(
        fault.undone_at.is_none(),
        "not before the delete was accepted"
    );
    let undo = Action::Undo {
        scenario: Scenario::Restore,
        target: copy(),
    };
    let settled = settle(NAME, &drill, &step.status, &undo, &Outcome::Done, at(62))
        .expect("the undo is recorded");
    assert!(settled.status.fault.unwrap().undone_at.is_some());
    // A failed delete is retried by the next pass.
    let unknown = Outcome::Unknown("timeout".into());
    assert!(settle(NAME, &drill, &step.status, &undo, &unknown, at(62)).is_none());
}

#[test]
fn a_restarted_operator_deletes_a_copy_on_record_in_a_final_phase() {
    for phase in [
        DrillPhase::Failed,
        DrillPhase::Aborted,
        DrillPhase::Succeeded,
    ] {
        let step = plan(
            NAME,
            &spec(Scenario::Restore),
            &restoring(phase),
            &seen(500, ready_copy(6, 36), CheckView::default()),
        );
        assert!(undoes_copy(&step), "{phase:?}: {step:?}");
        assert_eq!(step.status.phase, Some(phase));
    }
}

#[test]
fn a_copy_that_cannot_be_created_fails_the_run_and_is_deleted_if_it_came_to_be() {
    let start = Action::StartRestore {
        primary: "orders-1".into(),
        copy: copy(),
        target_time: at(5),
    };
    let refused = Outcome::Refused(format!(
        "Database {} exists and is not this Drill's",
        copy()
    ));
    let step = settle(
        NAME,
        &spec(Scenario::Restore),
        &restoring(DrillPhase::Injecting),
        &start,
        &refused,
        at(9),
    )
    .expect("the run fails");
    assert_eq!(step.status.phase, Some(DrillPhase::Failed));
    assert!(
        step.status
            .verdict
            .clone()
            .unwrap_or_default()
            .contains("is not this Drill's")
    );
    // The undo deletes only a copy the Drill owns: asked either way.
    assert!(undoes_copy(&step));
}
