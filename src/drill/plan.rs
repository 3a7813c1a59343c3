//! The phases of a run, one pass at a time: `Pending → CheckingGuards →
//! Probing → Injecting → Observing → (Undoing) → Recovering → Verifying →`
//! a verdict; a scheduled drill waits for its tick (`Scheduled`) and retries
//! its guards in the tick's window (`CheckingGuards`).
//!
//! Rules that hold in every phase: a fault on record and not undone is
//! undone (a final phase included, so an abort whose undo was lost is
//! finished by the next pass); a run past `abortAfterSeconds`, on a Drill
//! being deleted or on a Database that broke a guard is Aborted with its
//! fault undone; a final phase never injects.
//!
//! The `restore` scenario's phases are in [`restoring`]: its "fault" is a
//! throwaway Database restored to a recovery point, closed by deleting it.

mod restoring;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::canary::{self, Check};
use super::ticks::{self, Tick};
use super::verdict::{judge, summary};
use super::{
    Action, DatabaseView, Observed, Step, guards, is_running, probe_name, undone_by_action,
};
use crate::api::drill::{
    DrillEvent, DrillFigures, DrillPhase, DrillRun, DrillSpec, DrillStatus, InjectedFault,
    PolicyCheck, Scenario, defaults,
};
use crate::api::status::InstanceRole;
use crate::contract::drill::ProbeReport;
use crate::resources::{DrillPolicy, drill_policy_name};

/// How often a run under way is looked at.
pub const POLL: Duration = Duration::from_secs(1);
/// How often a scheduled drill retries its guards within the window.
pub const GUARD_RETRY: Duration = Duration::from_secs(15);
/// The longest a scheduled drill sleeps before looking at its tick again.
const SCHEDULE_CAP: Duration = Duration::from_secs(300);
/// Acknowledged writes the probe must have before the fault: the baseline
/// the write outage is measured from.
pub const BASELINE_WRITES: usize = 3;
/// How long a one-shot fault (a pod deleted, a process killed) is watched
/// before recovery is looked for: time for the Database's status to show it.
pub const OBSERVE_AT_LEAST: SignedDuration = SignedDuration::from_secs(5);
/// Acknowledged writes the probe must show after the Database is Ready
/// again before it is finished, in seconds.
pub const WRITES_AFTER_RECOVERY: f64 = 3.0;
/// Writes flow when one was acknowledged this recently, in seconds.
pub const WRITES_FLOWING: f64 = 2.0;
/// How many earlier runs `status.runs` keeps.
pub const MAX_RUNS: usize = 10;

/// The outcome of an action whose result changes the drill's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It happened.
    Done,
    /// It was refused: nothing happened (a 4xx from the manager, a pod
    /// that is not there).
    Refused(String),
    /// It failed and may or may not have happened (a timeout).
    Unknown(String),
}

/// The pure state machine: the next status and actions of drill `name`.
pub fn plan(name: &str, spec: &DrillSpec, status: &DrillStatus, observed: &Observed) -> Step {
    let mut pass = Pass::new(name, spec, status, observed.now);
    pass.status.observed_generation = observed.generation;
    if is_running(status.phase) {
        pass.running(observed);
    } else {
        pass.idle(observed);
    }
    pass.into_step()
}

/// Folds the outcome of `action`, carried out after `status` was written,
/// into the status; `None` when nothing changes (a failed undo is retried
/// by the next pass, as is everything idempotent).
pub fn settle(
    name: &str,
    spec: &DrillSpec,
    status: &DrillStatus,
    action: &Action,
    outcome: &Outcome,
    now: Timestamp,
) -> Option<Step> {
    let mut pass = Pass::new(name, spec, status, now);
    match (action, outcome) {
        (Action::Undo { .. }, Outcome::Done) => {
            let fault = pass.status.fault.as_mut()?;
            fault.undone_at = Some(Time(now));
            if pass.status.phase == Some(DrillPhase::Undoing) {
                pass.enter(
                    DrillPhase::Recovering,
                    "the fault is undone; waiting for the Database to be Ready again".to_owned(),
                );
                pass.requeue = Some(POLL);
            }
        }
        (Action::Inject { scenario, target }, Outcome::Refused(error)) => {
            // Refused: never in effect, nothing to undo.
            if let Some(fault) = pass.status.fault.as_mut() {
                fault.undone_at = Some(Time(now));
            }
            pass.finish(
                DrillPhase::Failed,
                format!(
                    "injecting {} into {target} failed: {error}",
                    scenario.as_str()
                ),
            );
        }
        (Action::Inject { scenario, target }, Outcome::Unknown(error)) => pass.finish(
            DrillPhase::Failed,
            format!(
                "injecting {} into {target} failed (it may hold until undone): {error}",
                scenario.as_str()
            ),
        ),
        (Action::RemoveCanary, Outcome::Done) => {
            let check = pass.status.policy_check.as_mut()?;
            check.removed_at = Some(Time(now));
        }
        (Action::ApplyCanary, Outcome::Refused(error) | Outcome::Unknown(error)) => {
            if let (Some(check), Outcome::Refused(_)) = (pass.status.policy_check.as_mut(), outcome)
            {
                // Refused: never in effect, nothing to remove.
                check.removed_at = Some(Time(now));
            }
            pass.finish(
                DrillPhase::Failed,
                format!("the canary NetworkPolicy could not be applied: {error}"),
            );
        }
        (Action::StartRestore { .. } | Action::CheckCopy { .. }, _) => {
            pass.settle_restore(action, outcome)?;
        }
        (Action::CreateProbe, Outcome::Refused(error) | Outcome::Unknown(error)) => {
            pass.finish(
                DrillPhase::Failed,
                format!(
                    "the probe {} could not be created: {error}",
                    probe_name(name)
                ),
            );
        }
        _ => return None,
    }
    Some(pass.into_step())
}

/// One pass over a drill: the status being built and what to do.
struct Pass<'a> {
    name: &'a str,
    spec: &'a DrillSpec,
    now: Timestamp,
    status: DrillStatus,
    actions: Vec<Action>,
    requeue: Option<Duration>,
}

impl<'a> Pass<'a> {
    fn new(name: &'a str, spec: &'a DrillSpec, status: &DrillStatus, now: Timestamp) -> Self {
        Pass {
            name,
            spec,
            now,
            status: status.clone(),
            actions: Vec::new(),
            requeue: None,
        }
    }

    fn into_step(self) -> Step {
        Step {
            status: self.status,
            actions: self.actions,
            requeue_after: self.requeue,
        }
    }

    fn wake_in(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    /// Enters `phase`: a timeline entry and an Event.
    fn enter(&mut self, phase: DrillPhase, message: String) {
        self.status.phase = Some(phase);
        self.status.timeline.push(DrillEvent {
            phase,
            at: Time(self.now),
            message: Some(message.clone()),
        });
        self.actions.push(Action::Event {
            warning: matches!(
                phase,
                DrillPhase::Failed | DrillPhase::Aborted | DrillPhase::Refused
            ),
            reason: phase.as_str().to_owned(),
            message,
        });
    }

    /// Ends the run in `phase`: the fault closed (undone, or nothing to
    /// undo), the probe deleted, the verdict published.
    fn finish(&mut self, phase: DrillPhase, verdict: String) {
        self.close_fault();
        self.close_canary();
        self.enter(phase, verdict.clone());
        self.status.verdict = Some(verdict.clone());
        self.status.finished_at = Some(Time(self.now));
        if self.status.probe.is_some() {
            self.actions.push(Action::DeleteProbe);
        }
        let figures = self.status.figures.clone().unwrap_or_default();
        if !self.spec.dry_run {
            self.actions.push(Action::ApplyLastDrill {
                succeeded: phase == DrillPhase::Succeeded,
                reason: phase.as_str().to_owned(),
                message: format!(
                    "drill {} ({}) {} at {}: {verdict}",
                    self.name,
                    self.spec.scenario.as_str(),
                    phase.as_str(),
                    self.now
                ),
            });
            self.actions.push(Action::Record {
                phase,
                figures: figures.clone(),
                finished_at: self.now,
            });
        }
        if self.spec.schedule.is_some() {
            self.remember_run(DrillRun {
                started_at: self.status.started_at.clone().unwrap_or(Time(self.now)),
                phase,
                figures: self.status.figures.clone(),
                verdict: Some(verdict),
            });
        }
    }

    fn remember_run(&mut self, run: DrillRun) {
        self.status.runs.insert(0, run);
        self.status.runs.truncate(MAX_RUNS);
    }

    /// A fault that holds, or a restore's copy, is undone (recorded when
    /// the undo succeeded); a one-shot fault has nothing to undo and is
    /// closed now.
    fn close_fault(&mut self) {
        let scenario = self.spec.scenario;
        let Some(fault) = self.status.fault.as_mut() else {
            return;
        };
        if fault.undone_at.is_some() {
            return;
        }
        if undone_by_action(scenario) {
            self.actions.push(Action::Undo {
                scenario,
                target: fault.target.clone(),
            });
            self.wake_in(POLL);
        } else {
            fault.undone_at = Some(Time(self.now));
        }
    }

    /// A canary on record and not removed is removed (again: deleting a
    /// policy that is gone is done).
    fn close_canary(&mut self) {
        if canary::outstanding(self.status.policy_check.as_ref()) {
            self.actions.push(Action::RemoveCanary);
            self.wake_in(POLL);
        }
    }

    /// A fault that holds (or a restore's copy), on record and not undone.
    fn outstanding(&self) -> bool {
        undone_by_action(self.spec.scenario)
            && self
                .status
                .fault
                .as_ref()
                .is_some_and(|f| f.undone_at.is_none())
    }

    /// Not running: a final phase, or waiting to start.
    fn idle(&mut self, observed: &Observed) {
        // An abort or failure written before its undo happened: no new run
        // (which would forget the fault) until it is undone.
        self.close_fault();
        self.close_canary();
        if self.outstanding() || canary::outstanding(self.status.policy_check.as_ref()) {
            return;
        }
        let final_phase = self.status.phase.is_some_and(DrillPhase::is_final);
        if final_phase && self.status.probe.is_some() && observed.probe.exists {
            self.actions.push(Action::DeleteProbe);
        }
        if observed.deleting {
            return;
        }
        match self.spec.schedule.as_deref() {
            Some(expr) => self.scheduled(expr, observed),
            None if !final_phase => self.try_start(observed, None),
            None => {}
        }
    }

    /// A scheduled drill between runs.
    fn scheduled(&mut self, expr: &str, observed: &Observed) {
        let Some(next) = self.status.next_run_at.as_ref().map(|t| t.0) else {
            match ticks::next_tick(expr, self.now) {
                Ok(at) => {
                    self.status.next_run_at = Some(Time(at));
                    if self.status.phase.is_none() || self.status.phase == Some(DrillPhase::Pending)
                    {
                        self.enter(DrillPhase::Scheduled, format!("next run at {at}"));
                    }
                    self.sleep_until(at);
                }
                Err(refused) => self.refuse_schedule(refused.to_string()),
            }
            return;
        };
        match ticks::tick(self.spec, expr, next, self.now) {
            Ok(Tick::Waiting(at)) => self.sleep_until(at),
            Ok(Tick::Due) => self.try_start(observed, Some(ticks::window_end(self.spec, next))),
            Ok(Tick::Missed(at)) => {
                let why = self
                    .status
                    .verdict
                    .clone()
                    .filter(|_| self.status.phase == Some(DrillPhase::CheckingGuards))
                    .unwrap_or_else(|| "the operator did not run it in time".to_owned());
                let skipped = format!("the run due at {next} was skipped: {why}");
                self.remember_run(DrillRun {
                    started_at: Time(next),
                    phase: DrillPhase::Refused,
                    figures: None,
                    verdict: Some(skipped.clone()),
                });
                self.status.next_run_at = Some(Time(at));
                if self.status.phase == Some(DrillPhase::CheckingGuards) {
                    self.status.verdict = Some(skipped.clone());
                    self.enter(DrillPhase::Scheduled, skipped);
                }
                self.sleep_until(at);
            }
            Err(refused) => self.refuse_schedule(refused.to_string()),
        }
    }

    fn refuse_schedule(&mut self, why: String) {
        if self.status.phase != Some(DrillPhase::Refused) {
            self.new_run();
            self.finish(DrillPhase::Refused, why);
        }
    }

    fn sleep_until(&mut self, at: Timestamp) {
        let wait = self
            .now
            .duration_until(at)
            .try_into()
            .unwrap_or(Duration::ZERO)
            .clamp(Duration::from_secs(1), SCHEDULE_CAP);
        self.wake_in(wait);
    }

    /// Starts a run when every guard holds; otherwise refuses it (a
    /// one-shot drill) or waits for the guards until `window` closes.
    fn try_start(&mut self, observed: &Observed, window: Option<Timestamp>) {
        let refused = guards::refusals(self.spec, observed);
        if !refused.is_empty() {
            let why = refused.join("; ");
            match window {
                None => {
                    self.new_run();
                    self.enter(DrillPhase::CheckingGuards, "checking the guards".to_owned());
                    self.finish(
                        DrillPhase::Refused,
                        format!("the guards do not hold: {why}"),
                    );
                }
                Some(end) => {
                    let waiting = format!("waiting until {end} for the guards: {why}");
                    if self.status.phase != Some(DrillPhase::CheckingGuards) {
                        self.enter(DrillPhase::CheckingGuards, waiting.clone());
                    }
                    self.status.verdict = Some(waiting);
                    self.wake_in(GUARD_RETRY);
                }
            }
            return;
        }
        self.new_run();
        if let Some(expr) = self.spec.schedule.as_deref()
            && let Ok(at) = ticks::next_tick(expr, self.now)
        {
            self.status.next_run_at = Some(Time(at));
        }
        self.enter(DrillPhase::CheckingGuards, "every guard holds".to_owned());
        if self.spec.dry_run {
            self.finish(
                DrillPhase::Succeeded,
                "dry run: every guard holds; nothing injected".to_owned(),
            );
            return;
        }
        let probe = probe_name(self.name);
        self.status.probe = Some(probe.clone());
        self.enter(
            DrillPhase::Probing,
            format!("probe {probe} writes through {}-rw", self.spec.database),
        );
        self.actions.push(Action::CreateProbe);
        self.wake_in(POLL);
    }

    /// Forgets the last run's state: a new run starts now.
    fn new_run(&mut self) {
        self.status.started_at = Some(Time(self.now));
        self.status.finished_at = None;
        self.status.fault = None;
        self.status.probe = None;
        self.status.policy_check = None;
        self.status.figures = None;
        self.status.verdict = None;
        self.status.timeline.clear();
    }

    /// A run under way.
    fn running(&mut self, observed: &Observed) {
        if observed.deleting {
            return self.finish(DrillPhase::Aborted, "the Drill is being deleted".to_owned());
        }
        let abort_after = self
            .spec
            .abort_after_seconds
            .unwrap_or(defaults::ABORT_AFTER_SECONDS);
        let started = self.status.started_at.as_ref().map_or(self.now, |t| t.0);
        if self.now.duration_since(started) > SignedDuration::from_secs(i64::from(abort_after)) {
            let phase = self.status.phase.map_or("?", DrillPhase::as_str);
            return self.finish(
                DrillPhase::Aborted,
                format!("abortAfterSeconds ({abort_after}) passed in phase {phase}"),
            );
        }
        if let Some(broken) = guards::broken_mid_run(self.spec, observed) {
            return self.finish(DrillPhase::Aborted, broken);
        }
        match self.status.phase {
            Some(phase) if self.restoring(phase) => self.restore_running(phase, observed),
            Some(DrillPhase::Probing) => self.probing(observed),
            Some(DrillPhase::Injecting) => {
                // The injection was asked for after the status said so; a
                // restart cannot tell whether it happened: watch, and undo a
                // held fault at its deadline either way.
                self.enter(
                    DrillPhase::Observing,
                    "the fault is in effect; watching".to_owned(),
                );
                self.wake_in(POLL);
            }
            Some(DrillPhase::Observing) => self.observing(),
            Some(DrillPhase::Undoing) => self.undoing(),
            Some(DrillPhase::Recovering) => self.recovering(observed),
            Some(DrillPhase::Verifying) => self.verifying(observed),
            _ => {}
        }
    }

    fn probing(&mut self, observed: &Observed) {
        if let Some(why) = &observed.probe.ended {
            let probe = probe_name(self.name);
            return self.finish(
                DrillPhase::Failed,
                format!("the probe {probe} ended: {why}"),
            );
        }
        self.wake_in(POLL);
        if !observed.probe.exists {
            self.actions.push(Action::CreateProbe);
            return;
        }
        // Behind the canary the probe does not answer: the check reads that
        // before the baseline would wait for an answer.
        if self.status.policy_check.is_some() && !self.canary(observed) {
            return;
        }
        let acknowledged = observed
            .probe
            .report
            .as_ref()
            .map_or(0, |r| r.acknowledged.len());
        if acknowledged < BASELINE_WRITES {
            return;
        }
        let refused = guards::refusals(self.spec, observed);
        if !refused.is_empty() {
            return self.finish(
                DrillPhase::Aborted,
                format!("a guard broke before the fault: {}", refused.join("; ")),
            );
        }
        if self.spec.scenario.needs_network_policy() && self.status.policy_check.is_none() {
            return self.apply_canary();
        }
        if self.spec.scenario == Scenario::Restore {
            return self.start_restore(observed);
        }
        let Some(target) = observed
            .database
            .as_ref()
            .and_then(|db| target(self.spec.scenario, db))
        else {
            return self.finish(
                DrillPhase::Aborted,
                format!("no instance to inject {} into", self.spec.scenario.as_str()),
            );
        };
        let undo_by = self.spec.scenario.holds_a_fault().then(|| {
            let seconds = self
                .spec
                .duration_seconds
                .unwrap_or(defaults::DURATION_SECONDS);
            Time(
                self.now
                    .checked_add(SignedDuration::from_secs(i64::from(seconds)))
                    .unwrap_or(self.now),
            )
        });
        self.status.fault = Some(InjectedFault {
            target: target.clone(),
            injected_at: Time(self.now),
            undo_by,
            object: (self.spec.scenario == Scenario::PartitionPrimary)
                .then(|| drill_policy_name(self.name, DrillPolicy::Partition)),
            undone_at: None,
        });
        self.enter(
            DrillPhase::Injecting,
            format!("injecting {} into {target}", self.spec.scenario.as_str()),
        );
        self.actions.push(Action::Inject {
            scenario: self.spec.scenario,
            target,
        });
    }

    /// Puts the canary on record, then applies it.
    fn apply_canary(&mut self) {
        self.status.policy_check = Some(PolicyCheck {
            policy: drill_policy_name(self.name, DrillPolicy::Canary),
            applied_at: Time(self.now),
            enforced_at: None,
            removed_at: None,
        });
        self.actions.push(Action::ApplyCanary);
    }

    /// One step of the NetworkPolicy check; true once it passed (enforced,
    /// removed, the probe answering again).
    fn canary(&mut self, observed: &Observed) -> bool {
        let probe = probe_name(self.name);
        let answers = observed.probe.report.is_some();
        let record = self.status.policy_check.clone();
        match canary::check(record.as_ref(), answers, self.now) {
            Check::Passed => return true,
            Check::Apply => self.apply_canary(),
            Check::Waiting | Check::Reopening => {}
            Check::Enforced => {
                if let Some(check) = self.status.policy_check.as_mut() {
                    check.enforced_at = Some(Time(self.now));
                }
                let after = record.map_or(0.0, |r| {
                    self.now.duration_since(r.applied_at.0).as_secs_f64()
                });
                self.actions.push(Action::Event {
                    warning: false,
                    reason: "NetworkPolicyEnforced".to_owned(),
                    message: format!(
                        "the canary policy cut the operator off probe {probe} within {after:.0} s: this cluster enforces NetworkPolicy"
                    ),
                });
                self.actions.push(Action::RemoveCanary);
            }
            Check::Remove => self.actions.push(Action::RemoveCanary),
            Check::NotEnforced => {
                let policy = record.map(|r| r.policy).unwrap_or_default();
                self.finish(
                    DrillPhase::Refused,
                    format!(
                        "spec.scenario: {} needs a cluster that enforces NetworkPolicy, and this one does not: NetworkPolicy {policy} denies all ingress to probe {probe}, yet the operator still reached it {} s later",
                        self.spec.scenario.as_str(),
                        canary::CANARY_WAIT.as_secs()
                    ),
                );
            }
            Check::StaysClosed => self.finish(
                DrillPhase::Aborted,
                format!(
                    "probe {probe} still does not answer {} s after the canary policy was removed",
                    canary::CANARY_WAIT.as_secs()
                ),
            ),
        }
        false
    }

    fn observing(&mut self) {
        let Some(fault) = self.status.fault.clone() else {
            return self.finish(
                DrillPhase::Failed,
                "no fault on record while observing".to_owned(),
            );
        };
        if self.spec.scenario.holds_a_fault() {
            let undo_by = fault.undo_by.map_or(self.now, |t| t.0);
            if self.now >= undo_by {
                self.enter(
                    DrillPhase::Undoing,
                    format!(
                        "undoing {} on {}",
                        self.spec.scenario.as_str(),
                        fault.target
                    ),
                );
                self.undoing();
            } else {
                let left = self.now.duration_until(undo_by).try_into().unwrap_or(POLL);
                self.wake_in(left.min(POLL * 2));
            }
            return;
        }
        let watched = self.now.duration_since(fault.injected_at.0);
        if watched >= OBSERVE_AT_LEAST {
            if let Some(fault) = self.status.fault.as_mut() {
                fault.undone_at = Some(Time(self.now));
            }
            self.enter(
                DrillPhase::Recovering,
                "nothing to undo; waiting for the Database to be Ready again".to_owned(),
            );
        }
        self.wake_in(POLL);
    }

    fn undoing(&mut self) {
        match &self.status.fault {
            Some(fault) if fault.undone_at.is_none() => {
                self.actions.push(Action::Undo {
                    scenario: self.spec.scenario,
                    target: fault.target.clone(),
                });
            }
            _ => self.enter(
                DrillPhase::Recovering,
                "the fault is undone; waiting for the Database to be Ready again".to_owned(),
            ),
        }
        self.wake_in(POLL);
    }

    fn recovering(&mut self, observed: &Observed) {
        self.wake_in(POLL);
        if let Some(gone) = probe_gone(observed) {
            return self.finish(DrillPhase::Failed, gone);
        }
        let (Some(db), Some(fault)) = (&observed.database, &self.status.fault) else {
            return;
        };
        let Some(ready_at) = recovered(self.spec.scenario, db, fault, observed) else {
            return;
        };
        let seconds = ready_at.duration_since(fault.injected_at.0).as_secs_f64();
        self.status
            .figures
            .get_or_insert_with(DrillFigures::default)
            .seconds_to_ready = Some(seconds);
        self.enter(
            DrillPhase::Verifying,
            format!("Ready again after {seconds:.1} s; checking the probe's writes"),
        );
    }

    fn verifying(&mut self, observed: &Observed) {
        self.wake_in(POLL);
        if let Some(gone) = probe_gone(observed) {
            return self.finish(DrillPhase::Failed, gone);
        }
        let Some(report) = &observed.probe.report else {
            return;
        };
        if !report.finished {
            let since = self
                .status
                .timeline
                .iter()
                .rev()
                .find(|e| e.phase == DrillPhase::Verifying)
                .map_or(self.now, |e| e.at.0);
            let enough = unix(since) + WRITES_AFTER_RECOVERY;
            if report.acknowledged.iter().any(|(_, at)| *at >= enough) {
                self.actions.push(Action::FinishProbe);
            }
            return;
        }
        let figures = self.measure(report, observed.database.as_ref());
        self.status.figures = Some(figures.clone());
        let sync = observed.database.as_ref().is_some_and(|db| db.sync);
        let (phase, verdict) = match &report.error {
            Some(error) => (
                DrillPhase::Failed,
                format!(
                    "the probe could not check its writes: {error}; {}",
                    summary(&figures)
                ),
            ),
            None => judge(self.spec, sync, &figures),
        };
        self.finish(phase, verdict);
    }

    /// The figures of a finished probe's report.
    fn measure(&self, report: &ProbeReport, db: Option<&DatabaseView>) -> DrillFigures {
        let mut figures = self.status.figures.clone().unwrap_or_default();
        let injected = self.status.fault.as_ref().map(|f| f.injected_at.0);
        // Up to the moment the Database was Ready again with writes flowing.
        let ready = self
            .status
            .timeline
            .iter()
            .rev()
            .find(|e| e.phase == DrillPhase::Verifying)
            .map_or(self.now, |e| e.at.0);
        figures.write_outage_seconds = injected
            .and_then(|at| longest_gap(report, unix(at), unix(ready)))
            .map(|(start, end)| end - start);
        figures.acknowledged_writes = i64::try_from(report.acknowledged.len()).ok();
        figures.lost_writes = report
            .error
            .is_none()
            .then(|| i64::try_from(report.lost.len()).unwrap_or(i64::MAX));
        let started = self.status.started_at.as_ref().map(|t| t.0);
        if let Some(failover) = db
            .and_then(|db| db.last_failover.as_ref())
            .filter(|f| started.is_some_and(|s| f.time >= s))
        {
            figures.failover_seconds = failover.duration_milliseconds.map(|ms| ms as f64 / 1000.0);
            figures.wal_gap_bytes = failover.wal_gap_bytes;
        }
        figures
    }
}

/// The instance `scenario` is injected into: the primary, a replica for
/// `kill-replica`, for `switchover` the most advanced ready replica.
pub fn target(scenario: Scenario, db: &DatabaseView) -> Option<String> {
    let mut replicas: Vec<_> = db
        .members
        .iter()
        .filter(|m| m.ready && m.role == Some(InstanceRole::Replica))
        .collect();
    replicas.sort_by_key(|m| (m.lag_bytes.unwrap_or(i64::MAX), m.name.clone()));
    match scenario {
        Scenario::Switchover | Scenario::KillReplica => replicas.first().map(|m| m.name.clone()),
        _ => db.current_primary.clone(),
    }
}

/// When the Database was Ready again after `fault`, if it is: Ready at its
/// generation with every instance ready, for a switchover on its new
/// primary, and the probe's writes acknowledged again.
fn recovered(
    scenario: Scenario,
    db: &DatabaseView,
    fault: &InjectedFault,
    observed: &Observed,
) -> Option<Timestamp> {
    let injected = fault.injected_at.0;
    let everyone = db.members.len() >= usize::try_from(db.instances).unwrap_or(0)
        && db.members.iter().all(|m| m.ready);
    let moved = scenario != Scenario::Switchover
        || db.current_primary.as_deref() == Some(fault.target.as_str());
    if !(db.ready && everyone && moved) {
        return None;
    }
    let report = observed.probe.report.as_ref()?;
    let now = unix(observed.now);
    // Writes flow again: one acknowledged in the last moments.
    let last = report
        .acknowledged
        .iter()
        .map(|(_, at)| *at)
        .fold(f64::MIN, f64::max);
    if last < now - WRITES_FLOWING {
        return None;
    }
    let resumed = longest_gap(report, unix(injected), now).map_or(unix(injected), |(_, end)| end);
    let resumed = Timestamp::from_millisecond((resumed * 1000.0) as i64).ok()?;
    let ready_since = db.ready_since.filter(|at| *at > injected);
    Some(ready_since.map_or(resumed, |r| r.max(resumed)))
}

/// The longest pause between two consecutive acknowledged writes that ends
/// after `from` and starts before `to`, as (start, end) in Unix seconds.
///
/// The fault's recorded time is whole seconds (`metav1.Time`) and the fault
/// takes effect a moment after it (the call, the kubelet killing a
/// container), so a write may still be acknowledged after the recorded time:
/// the outage is the pause around it, not the gap at one instant
/// (`ProbeReport::outage_around` would measure the moment before the fault
/// took hold).
pub fn longest_gap(report: &ProbeReport, from: f64, to: f64) -> Option<(f64, f64)> {
    let mut times: Vec<f64> = report.acknowledged.iter().map(|(_, at)| *at).collect();
    times.sort_by(f64::total_cmp);
    times
        .windows(2)
        .map(|pair| (pair[0], pair[1]))
        .filter(|(start, end)| *end > from && *start < to)
        .max_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
}

fn probe_gone(observed: &Observed) -> Option<String> {
    if let Some(why) = &observed.probe.ended {
        return Some(format!("the probe ended before the run did: {why}"));
    }
    (!observed.probe.exists).then(|| "the probe pod is gone: its figures are lost".to_owned())
}

/// Unix time in seconds, as the probe reports it.
pub fn unix(at: Timestamp) -> f64 {
    at.as_millisecond() as f64 / 1000.0
}
