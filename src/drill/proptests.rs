//! The drill's safety properties over random worlds: a fault is always
//! undone, no drill starts while a guard fails, a restarted operator (the
//! status read back, nothing in memory, the actions of the pass it died in
//! lost) resumes or undoes, `abortAfterSeconds` aborts and undoes, a final
//! phase never injects. The world models the `restore` scenario's
//! throwaway Database as its held fault (created by `StartRestore`, gone
//! when the undo reaches it) and its checker as finding every row.

use proptest::prelude::*;

use super::restore::{CheckView, CopyView};
use super::tests::{NAME, at, healthy, observed, probe, spec};
use super::*;
use crate::api::drill::{DrillSpec, DrillStatus, InjectedFault};
use crate::probe::check::CheckReport;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn scenario() -> impl Strategy<Value = Scenario> {
    prop::sample::select(Scenario::ALL.to_vec())
}

fn phase() -> impl Strategy<Value = DrillPhase> {
    prop::sample::select(vec![
        DrillPhase::Pending,
        DrillPhase::Scheduled,
        DrillPhase::CheckingGuards,
        DrillPhase::Probing,
        DrillPhase::Injecting,
        DrillPhase::Observing,
        DrillPhase::Undoing,
        DrillPhase::Recovering,
        DrillPhase::Verifying,
        DrillPhase::Succeeded,
        DrillPhase::Failed,
        DrillPhase::Aborted,
        DrillPhase::Refused,
    ])
}

/// A Database with random health, healthy a third of the time (so that
/// the guards hold often enough for a broken plan to show).
fn database() -> impl Strategy<Value = Option<DatabaseView>> {
    prop_oneof![1 => Just(Some(healthy())), 2 => any_database()]
}

fn any_database() -> impl Strategy<Value = Option<DatabaseView>> {
    (
        any::<bool>(),
        1i32..4,
        prop::collection::vec((any::<bool>(), 0i64..(32 << 20)), 0..3),
        prop::sample::select(vec![
            DatabasePhase::Ready,
            DatabasePhase::Degraded,
            DatabasePhase::FailingOver,
            DatabasePhase::SwitchingOver,
            DatabasePhase::Upgrading,
        ]),
        any::<bool>(),
        0u8..8,
    )
        .prop_map(|(ready, instances, replicas, phase, moving, gone)| {
            (gone != 0).then(|| {
                let mut db = healthy();
                db.ready = ready;
                db.instances = instances;
                db.phase = Some(phase);
                db.members.truncate(1);
                for (i, (ready, lag)) in replicas.into_iter().enumerate() {
                    db.members.push(Member {
                        name: format!("orders-{}", i + 2),
                        role: Some(InstanceRole::Replica),
                        ready,
                        lag_bytes: Some(lag),
                    });
                }
                if moving {
                    db.target_primary = Some("orders-2".into());
                }
                db
            })
        })
}

fn drill_spec() -> impl Strategy<Value = DrillSpec> {
    (
        scenario(),
        any::<bool>(),
        any::<bool>(),
        30u32..200,
        1u32..30,
    )
        .prop_map(|(scenario, dry_run, scheduled, abort_after, duration)| {
            let mut s = spec(scenario);
            s.dry_run = dry_run;
            s.schedule = scheduled.then(|| "* * * * *".to_owned());
            s.abort_after_seconds = Some(abort_after);
            s.duration_seconds = Some(duration);
            s
        })
}

/// Any status a drill may be found in, a fault on record or not.
fn drill_status() -> impl Strategy<Value = DrillStatus> {
    (
        phase(),
        any::<bool>(),
        any::<bool>(),
        0i64..400,
        any::<bool>(),
    )
        .prop_map(|(phase, faulted, undone, started, next)| DrillStatus {
            phase: Some(phase),
            started_at: Some(Time(at(started))),
            probe: Some(probe_name(NAME)),
            // A run records its fault when it injects: from Injecting on,
            // or in a final phase it reached after that.
            fault: (faulted
                && !matches!(
                    phase,
                    DrillPhase::Pending
                        | DrillPhase::Scheduled
                        | DrillPhase::CheckingGuards
                        | DrillPhase::Probing
                ))
            .then(|| InjectedFault {
                target: "orders-1".into(),
                injected_at: Time(at(started + 5)),
                undo_by: Some(Time(at(started + 15))),
                object: None,
                undone_at: undone.then(|| Time(at(started + 16))),
            }),
            next_run_at: next.then(|| Time(at(60))),
            ..DrillStatus::default()
        })
}

/// Whether `step` starts or continues toward a fault.
fn starts(step: &Step) -> bool {
    step.actions.iter().any(|a| {
        matches!(
            a,
            Action::CreateProbe | Action::Inject { .. } | Action::StartRestore { .. }
        )
    })
}

/// The status as a restarted operator reads it back.
fn read_back(status: &DrillStatus) -> DrillStatus {
    let json = serde_json::to_value(status).expect("a status serializes");
    serde_json::from_value(json).expect("and reads back")
}

/// Whether `status` records a held fault (or a restore's copy) not undone.
fn outstanding(spec: &DrillSpec, status: &DrillStatus) -> bool {
    undone_by_action(spec.scenario) && status.fault.as_ref().is_some_and(|f| f.undone_at.is_none())
}

/// Whether `action` injects: a fault, or a restore's copy.
fn injects(action: &Action) -> bool {
    matches!(action, Action::Inject { .. } | Action::StartRestore { .. })
}

/// A simulated world: the Database, the probe, a fault held by the
/// instance manager, and an operator that may die after any status write.
struct World {
    now: i64,
    /// The drill is a `restore`: `held` is its copy.
    restoring: bool,
    db: DatabaseView,
    probe_exists: bool,
    finished: bool,
    acks: Vec<i64>,
    /// A fault held by a manager, or a restore's copy in the cluster.
    held: bool,
    /// The cluster enforces NetworkPolicy: the canary cuts the probe off.
    enforces: bool,
    /// The canary policy exists.
    canary: bool,
    /// A restore's checker pod exists (and has found every row).
    checker: bool,
}

impl World {
    fn observe(&self) -> Observed {
        let mut seen = observed(self.now, Some(self.db.clone()), probe(&self.acks));
        seen.probe.exists = self.probe_exists;
        if let Some(report) = seen.probe.report.as_mut() {
            report.finished = self.finished;
        }
        if !self.probe_exists || (self.canary && self.enforces) {
            seen.probe.report = None;
        }
        if self.restoring {
            seen.restore.copy = self.held.then(|| CopyView {
                created: at(self.now - 1),
                ready: self.db.ready,
                ready_since: None,
            });
            seen.restore.check = CheckView {
                exists: self.checker,
                ended: self.checker.then(|| Ok(CheckReport::of(&[1], &[1].into()))),
            };
        }
        seen
    }
}

/// One random choice per pass: does the operator die after the status
/// write, does the undo reach the manager, is the Database Ready, how much
/// time passes.
type Luck = (bool, bool, bool, u8);

fn luck() -> impl Strategy<Value = Vec<Luck>> {
    let passes = prop::collection::vec(
        (
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.6),
            any::<bool>(),
            0u8..4,
        ),
        200,
    );
    // A stretch of passes in which the manager is unreachable: undos fail
    // for as long as a scheduled drill needs to reach its next tick.
    (passes, 0usize..200, 0usize..120).prop_map(|(mut passes, from, length)| {
        for pass in passes.iter_mut().skip(from).take(length) {
            pass.1 = false;
        }
        passes
    })
}

/// Runs `spec` from `status` for every pass of `passes`, then fairly (no
/// deaths, every undo reaching its manager, the Database Ready) until the
/// run under way ends; answers the last status and the world. Checks at
/// every pass that an injection is on record first, that a final phase
/// never injects, and that a fault the manager holds is on record as not
/// undone (so a later pass undoes it).
fn simulate(spec: &DrillSpec, mut status: DrillStatus, passes: &[Luck]) -> (DrillStatus, World) {
    let mut world = World {
        now: 0,
        restoring: spec.scenario == Scenario::Restore,
        checker: false,
        db: healthy(),
        probe_exists: false,
        finished: false,
        acks: Vec::new(),
        // A fault on record and not undone may be in effect.
        held: outstanding(spec, &status),
        enforces: passes.first().is_some_and(|luck| luck.2),
        // A canary on record and not removed may exist.
        canary: canary::outstanding(status.policy_check.as_ref()),
    };
    let fair: Luck = (false, true, true, 1);
    let tail = std::iter::repeat_n(&fair, 1000);
    for (i, &(dies, undo_reaches, ready, elapse)) in passes.iter().chain(tail).enumerate() {
        let in_tail = i >= passes.len();
        // The fair tail runs until the run is over and its fault closed on
        // record too: a final phase keeps undoing an open fault.
        let open = status.fault.as_ref().is_some_and(|f| f.undone_at.is_none());
        let canary_open = canary::outstanding(status.policy_check.as_ref());
        if in_tail
            && !is_running(status.phase)
            && !world.held
            && !open
            && !world.canary
            && !canary_open
        {
            break;
        }
        assert!(i < passes.len() + 999, "the run never ended: {status:?}");
        world.db.ready = ready;
        let step = plan(NAME, spec, &read_back(&status), &world.observe());
        for action in &step.actions {
            let recorded = match action {
                Action::Inject { target, .. } => Some(target),
                Action::StartRestore { copy, .. } => Some(copy),
                _ => None,
            };
            if let Some(target) = recorded {
                let fault = step.status.fault.as_ref();
                assert!(
                    fault.is_some_and(|f| f.target == *target && f.undone_at.is_none()),
                    "an injection not on record first: {:?}",
                    step.status
                );
                assert!(
                    !status.phase.is_some_and(DrillPhase::is_final),
                    "a final phase injects"
                );
            }
        }
        status = step.status.clone();
        if !dies {
            for action in &step.actions {
                let outcome = world.carry_out(action, undo_reaches);
                if let Some(next) = settle(NAME, spec, &status, action, &outcome, at(world.now)) {
                    status = next.status;
                }
            }
        }
        if world.canary {
            assert!(
                canary::outstanding(status.policy_check.as_ref()),
                "a canary policy exists that the status does not hold: {status:?}"
            );
        }
        if world.held {
            assert!(
                status.fault.as_ref().is_some_and(|f| f.undone_at.is_none()),
                "the manager holds a fault the status does not: {status:?}"
            );
        }
        world.now += i64::from(elapse) + 1;
        // A held fault stops the probe's writes; a restore's copy does not.
        let writes = !world.held || world.restoring;
        if world.probe_exists && !world.finished && writes {
            world.acks.push(world.now);
        }
    }
    (status, world)
}

impl World {
    fn carry_out(&mut self, action: &Action, undo_reaches: bool) -> Outcome {
        match action {
            Action::CreateProbe => {
                self.probe_exists = true;
                self.finished = false;
            }
            Action::DeleteProbe => {
                self.probe_exists = false;
                self.acks.clear();
            }
            Action::FinishProbe => self.finished = true,
            Action::Inject { scenario, .. } if scenario.holds_a_fault() => {
                self.held = true;
            }
            Action::StartRestore { .. } => self.held = true,
            Action::CheckCopy { .. } => self.checker = true,
            Action::Undo { .. } if undo_reaches => {
                self.held = false;
                self.checker = false;
            }
            Action::Undo { .. } => return Outcome::Unknown("timeout".into()),
            Action::ApplyCanary => self.canary = true,
            Action::RemoveCanary if undo_reaches => self.canary = false,
            Action::RemoveCanary => return Outcome::Unknown("timeout".into()),
            _ => {}
        }
        Outcome::Done
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_fault_is_always_undone(spec in drill_spec(), passes in luck()) {
        let (status, world) = simulate(&spec, DrillStatus::default(), &passes);
        prop_assert!(!world.held, "the manager still holds the fault: {status:?}");
        prop_assert!(!world.canary, "the canary policy is still there: {status:?}");
        if let Some(fault) = &status.fault {
            prop_assert!(fault.undone_at.is_some() || is_running(status.phase),
                "a finished run left its fault open: {status:?}");
        }
    }

    #[test]
    fn a_restart_in_any_phase_resumes_or_undoes(
        spec in drill_spec(),
        status in drill_status(),
        passes in luck(),
    ) {
        // The operator comes back to a status it did not write in this
        // process: a held fault on record may be in effect.
        let held = outstanding(&spec, &status);
        let (end, world) = simulate(&spec, status, &passes);
        prop_assert!(!world.held, "{end:?}");
        if held {
            prop_assert!(end.fault.as_ref().is_none_or(|f| f.undone_at.is_some()), "{end:?}");
        }
    }

    #[test]
    fn no_drill_starts_while_a_guard_fails(
        spec in drill_spec(),
        status in drill_status(),
        db in database(),
        others in prop::collection::vec("[a-z]{3}", 0..2),
        now in 0i64..600,
    ) {
        let mut seen = observed(now, db, probe(&[1, 2, 3]));
        seen.running_drills = others;
        prop_assume!(!guards::refusals(&spec, &seen).is_empty());
        let step = plan(NAME, &spec, &status, &seen);
        if !is_running(status.phase) {
            prop_assert!(!starts(&step), "{step:?}");
            prop_assert!(!is_running(step.status.phase), "{step:?}");
        }
        if status.phase == Some(DrillPhase::Probing) {
            prop_assert!(!step.actions.iter().any(injects), "{step:?}");
        }
    }

    #[test]
    fn abort_after_seconds_aborts_and_undoes(
        spec in drill_spec(),
        status in drill_status(),
        late in 1i64..1000,
    ) {
        prop_assume!(is_running(status.phase));
        let started = status.started_at.as_ref().map(|t| t.0).unwrap_or(at(0));
        let abort_after = i64::from(spec.abort_after_seconds.unwrap_or(300));
        let now = started.as_second() - at(0).as_second() + abort_after + late;
        let step = plan(NAME, &spec, &status, &observed(now, Some(healthy()), probe(&[1])));
        prop_assert_eq!(step.status.phase, Some(DrillPhase::Aborted));
        let held = outstanding(&spec, &status);
        prop_assert_eq!(held, step.actions.iter().any(|a| matches!(a, Action::Undo { .. })), "{:?}", step);
        prop_assert!(step.actions.contains(&Action::DeleteProbe));
    }

    #[test]
    fn a_final_phase_never_injects(
        spec in drill_spec(),
        status in drill_status(),
        db in database(),
        now in 0i64..600,
    ) {
        prop_assume!(status.phase.is_some_and(DrillPhase::is_final));
        let step = plan(NAME, &spec, &status, &observed(now, db, probe(&[1, 2, 3, 4])));
        prop_assert!(!step.actions.iter().any(injects), "{step:?}");
    }

    #[test]
    fn the_plan_reads_only_the_status(
        spec in drill_spec(),
        status in drill_status(),
        db in database(),
        now in 0i64..600,
    ) {
        let seen = observed(now, db, probe(&[1, 2, 3, 4]));
        prop_assert_eq!(plan(NAME, &spec, &status, &seen), plan(NAME, &spec, &read_back(&status), &seen));
    }
}
