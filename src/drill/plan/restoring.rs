//! The `restore` scenario's phases. Probing as every run; then, instead of
//! a fault:
//!
//! - `Injecting`: the recovery point T ([`recovery_point`]) and the
//!   throwaway Database are on record (`fault.injectedAt` is T,
//!   `fault.target` and `fault.object` the copy's name) before the shell
//!   switches the primary's WAL and creates the copy;
//! - `Observing`: the copy restores; Ready at its generation gives
//!   `recoverySeconds` (its creation to Ready);
//! - `Verifying`: the checker pod counts in the copy the probe's writes
//!   acknowledged by T (`rowsCompared`), the probe is finished as usual,
//!   and [`judge_restore`] gives the verdict.
//!
//! Closing the "fault" is deleting the copy ([`Action::Undo`], carried out
//! only on a copy this Drill owns): at the end of the run, on an abort, or
//! by the first pass of a restarted operator that finds it on record and
//! not undone.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Outcome, POLL, Pass, probe_gone};
use crate::api::drill::{DrillFigures, DrillPhase, InjectedFault, Scenario};
use crate::drill::restore::{acknowledged_by, copy_name, recovery_point};
use crate::drill::verdict::{judge_restore, summary_restore};
use crate::drill::{Action, Observed};
use crate::probe::check::{CheckReport, encode_ids};

impl Pass<'_> {
    /// Whether `phase` is one the restore scenario runs itself: every phase
    /// of its runs after `Probing`.
    pub(super) fn restoring(&self, phase: DrillPhase) -> bool {
        self.spec.scenario == Scenario::Restore && phase != DrillPhase::Probing
    }

    /// The baseline is written and the guards hold: mark the recovery point
    /// and start the copy, once the probe's writes allow a point.
    pub(super) fn start_restore(&mut self, observed: &Observed) {
        let Some(primary) = observed
            .database
            .as_ref()
            .and_then(|db| db.current_primary.clone())
        else {
            return self.finish(
                DrillPhase::Aborted,
                "no primary to archive the recovery point from".to_owned(),
            );
        };
        let Some(point) = observed.probe.report.as_ref().and_then(recovery_point) else {
            return;
        };
        let started = self.status.started_at.as_ref().map_or(self.now, |t| t.0);
        let copy = copy_name(self.name, started);
        self.status.fault = Some(InjectedFault {
            target: copy.clone(),
            injected_at: Time(point),
            undo_by: None,
            object: Some(copy.clone()),
            undone_at: None,
        });
        self.enter(
            DrillPhase::Injecting,
            format!(
                "restoring {} to {point} into the throwaway Database {copy}",
                self.spec.database
            ),
        );
        self.actions.push(Action::StartRestore {
            primary,
            copy,
            target_time: point,
        });
    }

    /// A restore run after `Probing`.
    pub(super) fn restore_running(&mut self, phase: DrillPhase, observed: &Observed) {
        self.wake_in(POLL);
        if let Some(gone) = probe_gone(observed) {
            return self.finish(DrillPhase::Failed, gone);
        }
        let Some(fault) = self.status.fault.clone() else {
            return self.finish(
                DrillPhase::Failed,
                "no throwaway Database on record".to_owned(),
            );
        };
        match phase {
            DrillPhase::Verifying => self.compare(&fault, observed),
            _ => self.wait_for_copy(phase, &fault, observed),
        }
    }

    /// Until the copy is Ready; then the checker.
    fn wait_for_copy(&mut self, phase: DrillPhase, fault: &InjectedFault, observed: &Observed) {
        let copy = fault.target.clone();
        let point = fault.injected_at.0;
        let Some(view) = &observed.restore.copy else {
            // Asked for after the status said so; an operator that died in
            // between never asked. Creating it again is harmless (the shell
            // takes an existing copy of this Drill's as created).
            if let Some(primary) = observed
                .database
                .as_ref()
                .and_then(|db| db.current_primary.clone())
            {
                self.actions.push(Action::StartRestore {
                    primary,
                    copy,
                    target_time: point,
                });
            }
            return;
        };
        if !view.ready {
            if phase != DrillPhase::Observing {
                self.enter(
                    DrillPhase::Observing,
                    format!("{copy} is restoring to {point}"),
                );
            }
            return;
        }
        let ready_at = view
            .ready_since
            .filter(|at| *at >= view.created)
            .unwrap_or(self.now);
        let seconds = ready_at.duration_since(view.created).as_secs_f64();
        self.status
            .figures
            .get_or_insert_with(DrillFigures::default)
            .recovery_seconds = Some(seconds);
        let Some(report) = &observed.probe.report else {
            return;
        };
        let ids = acknowledged_by(report, point);
        self.enter(
            DrillPhase::Verifying,
            format!(
                "{copy} Ready after {seconds:.0} s; looking for the {} writes acknowledged by {point}",
                ids.len()
            ),
        );
        self.actions.push(Action::CheckCopy {
            copy,
            ids: encode_ids(&ids),
        });
    }

    /// The checker's report, then the probe's, then the verdict.
    fn compare(&mut self, fault: &InjectedFault, observed: &Observed) {
        let Some(report) = &observed.probe.report else {
            return;
        };
        let copy = fault.target.clone();
        let check = match &observed.restore.check.ended {
            None => {
                if !observed.restore.check.exists {
                    let ids = acknowledged_by(report, fault.injected_at.0);
                    self.actions.push(Action::CheckCopy {
                        copy,
                        ids: encode_ids(&ids),
                    });
                }
                return;
            }
            Some(Err(why)) => return self.checker_failed(&copy, why),
            Some(Ok(CheckReport {
                error: Some(why), ..
            })) => return self.checker_failed(&copy, why),
            Some(Ok(check)) => check.clone(),
        };
        let figures = self
            .status
            .figures
            .get_or_insert_with(DrillFigures::default);
        figures.rows_compared = Some(check.compared);
        if !report.finished {
            self.actions.push(Action::FinishProbe);
            return;
        }
        figures.acknowledged_writes = i64::try_from(report.acknowledged.len()).ok();
        figures.lost_writes = report
            .error
            .is_none()
            .then(|| i64::try_from(report.lost.len()).unwrap_or(i64::MAX));
        let figures = figures.clone();
        let sync = observed.database.as_ref().is_some_and(|db| db.sync);
        let (phase, verdict) = match &report.error {
            Some(error) => (
                DrillPhase::Failed,
                format!(
                    "the probe could not check its writes: {error}; {}",
                    summary_restore(&figures)
                ),
            ),
            None => judge_restore(self.spec, sync, &figures, &check),
        };
        self.finish(phase, verdict);
    }

    fn checker_failed(&mut self, copy: &str, why: &str) {
        let figures = self.status.figures.clone().unwrap_or_default();
        self.finish(
            DrillPhase::Failed,
            format!(
                "the checker could not read {copy}: {why}; {}",
                summary_restore(&figures)
            ),
        );
    }

    /// The outcome of a restore action: a copy that could not be created
    /// fails the run (and the copy, if it came to be, is deleted by the
    /// undo that ends it); a checker refused fails it, one that may exist is
    /// looked for again by the next pass. `None` when nothing changes.
    pub(super) fn settle_restore(&mut self, action: &Action, outcome: &Outcome) -> Option<()> {
        match (action, outcome) {
            (_, Outcome::Done) => None,
            (
                Action::StartRestore { copy, .. },
                Outcome::Refused(error) | Outcome::Unknown(error),
            ) => {
                self.finish(
                    DrillPhase::Failed,
                    format!(
                        "restoring {} into {copy} failed: {error}",
                        self.spec.database
                    ),
                );
                Some(())
            }
            (Action::CheckCopy { copy, .. }, Outcome::Refused(error)) => {
                self.finish(
                    DrillPhase::Failed,
                    format!("the checker of {copy} could not be created: {error}"),
                );
                Some(())
            }
            _ => None,
        }
    }
}
