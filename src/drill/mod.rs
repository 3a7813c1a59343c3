//! The Drill state machine, pure: [`plan`] takes a Drill's spec, its status
//! (the drill's whole state: nothing is kept in memory between passes) and
//! what the shell observed (the Database, the other Drills on it, the probe
//! and its report, the clock) and answers one [`Step`]: the next status, the
//! actions to carry out, and when to look again. [`settle`] folds the
//! outcome of an action whose result changes the state (an injection that
//! failed, an undo that succeeded) back into the status.
//!
//! The shell (`controller::drill`) writes the step's status before it
//! carries out the actions: a fault is on record (`status.fault`, with its
//! target and deadline) before it is injected, so an operator restarted at
//! any point reads from the status what it must undo; an undo is on record
//! (`fault.undoneAt`) only after it happened.
//!
//! Parts: [`guards`] (whether a run may start, each refusal naming what
//! failed), [`canary`] (whether the cluster enforces NetworkPolicy, before a
//! partition), [`verdict`] (the figures judged against `spec.expect`),
//! [`ticks`] (when a scheduled drill runs), [`plan`](mod@plan) (the phases),
//! [`restore`] (the `restore` scenario's recovery point, ids and names).
//! Pure: no clock, no I/O; the shell passes the time in [`Observed`].

pub mod canary;
pub mod guards;
pub mod plan;
pub mod restore;
pub mod ticks;
pub mod verdict;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod restore_tests;
#[cfg(test)]
mod tests;

use std::time::Duration;

use jiff::Timestamp;

use crate::api::drill::{DrillFigures, DrillPhase, Scenario};
use crate::api::status::{DatabasePhase, InstanceRole};
use crate::contract::drill::ProbeReport;

pub use plan::{Outcome, plan, settle};

/// What one pass decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The drill's next status, whole.
    pub status: crate::api::drill::DrillStatus,
    /// What to carry out, in order, after the status is written.
    pub actions: Vec<Action>,
    /// When to look again, if the drill waits for anything.
    pub requeue_after: Option<Duration>,
}

/// Something the shell carries out for a drill.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the probe pod (`status.probe`), writing through `-rw`.
    CreateProbe,
    /// Inject `scenario` into `target` (an instance of the Database).
    Inject { scenario: Scenario, target: String },
    /// Undo the fault `scenario` holds on `target` (`seconds: 0`).
    Undo { scenario: Scenario, target: String },
    /// Apply the canary NetworkPolicy (`status.policyCheck`): no ingress to
    /// the probe.
    ApplyCanary,
    /// Remove the canary (deleting a policy that is gone is done).
    RemoveCanary,
    /// `POST /finish` on the probe: stop writing and check every
    /// acknowledged write.
    FinishProbe,
    /// Delete the probe pod (never a PVC or a backup).
    DeleteProbe,
    /// Set the Database's `LastDrill` condition.
    ApplyLastDrill {
        succeeded: bool,
        reason: String,
        message: String,
    },
    /// Publish an Event on the Drill.
    Event {
        warning: bool,
        reason: String,
        message: String,
    },
    /// `restore`: switch `primary`'s WAL (so that the recovery point is
    /// archived), then create the throwaway Database `copy`, owned by the
    /// Drill, restoring the drill's Database to `target_time`.
    StartRestore {
        primary: String,
        copy: String,
        target_time: Timestamp,
    },
    /// `restore`: create the checker pod reading `ids` (ranges, as
    /// [`crate::probe::check::encode_ids`] writes them) back from `copy`.
    CheckCopy { copy: String, ids: String },
    /// Count a finished run in the metrics.
    Record {
        phase: DrillPhase,
        figures: DrillFigures,
        finished_at: Timestamp,
    },
}

/// What the shell observed for one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The time of the pass.
    pub now: Timestamp,
    /// The Drill's `metadata.generation`.
    pub generation: Option<i64>,
    /// The Drill is being deleted.
    pub deleting: bool,
    /// The Drill's Database, when it exists.
    pub database: Option<DatabaseView>,
    /// What the admission rules (`api::validate_drill`) find wrong with the
    /// Drill now, each naming its field: a Drill admitted while the webhook
    /// was down, or a Database changed since, cannot start a run.
    pub invalid: Vec<String>,
    /// The other Drills on the same Database whose run is under way.
    pub running_drills: Vec<String>,
    /// The probe pod and what it reports.
    pub probe: ProbeView,
    /// For `restore`: the throwaway Database and the checker pod.
    pub restore: restore::RestoreView,
}

/// The Database as a drill sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DatabaseView {
    pub name: String,
    /// `spec.instances`.
    pub instances: i32,
    /// `spec.replication.mode` is sync.
    pub sync: bool,
    /// Ready=True at the Database's current generation.
    pub ready: bool,
    /// When Ready last turned True.
    pub ready_since: Option<Timestamp>,
    pub phase: Option<DatabasePhase>,
    pub current_primary: Option<String>,
    pub target_primary: Option<String>,
    /// `status.instances`.
    pub members: Vec<Member>,
    /// `status.lastFailover`.
    pub last_failover: Option<Failover>,
    /// When the newest verified backup completed.
    pub newest_verified_backup: Option<Timestamp>,
}

/// One instance in the Database's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub role: Option<InstanceRole>,
    pub ready: bool,
    pub lag_bytes: Option<i64>,
}

/// The Database's `status.lastFailover`.
#[derive(Clone, Debug, PartialEq)]
pub struct Failover {
    pub time: Timestamp,
    pub duration_milliseconds: Option<i64>,
    pub wal_gap_bytes: Option<i64>,
}

/// The probe pod as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeView {
    /// The pod exists (and is not being deleted).
    pub exists: bool,
    /// Why the pod ended, when it did (phase Failed or Succeeded).
    pub ended: Option<String>,
    /// Its `GET /report`, when it answered.
    pub report: Option<ProbeReport>,
}

/// The name of the probe pod of `drill`.
pub fn probe_name(drill: &str) -> String {
    crate::resources::probe_pod_name(drill)
}

/// Whether a run in `phase` is under way (a probe may write, a fault may be
/// in effect).
pub fn is_running(phase: Option<DrillPhase>) -> bool {
    matches!(
        phase,
        Some(
            DrillPhase::Probing
                | DrillPhase::Injecting
                | DrillPhase::Observing
                | DrillPhase::Undoing
                | DrillPhase::Recovering
                | DrillPhase::Verifying
        )
    )
}

/// Whether a fault of `scenario` on record stays open until an undo action
/// succeeded: a fault that holds, and a `restore`'s throwaway Database
/// (deleted by the undo).
pub fn undone_by_action(scenario: Scenario) -> bool {
    scenario.holds_a_fault() || scenario == Scenario::Restore
}
