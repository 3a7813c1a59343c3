//! The pure lifecycle state machine of a Database: from the spec, the previous
//! status and what the controller observed, the phase to show, the ordered
//! actions to apply and the conditions. No Kubernetes client, no async, no
//! clock, no randomness: the same inputs always give the same plan, so every
//! transition is a unit test and the safety invariants are property tests.
//!
//! `Pending → Provisioning → InitializingPrimary → CreatingReplicas → Ready`,
//! and from `Ready`: `Scaling`, `Configuring`, `Degraded`, `Blocked`, and
//! back; `Deleting` while the object is deleted. `FailingOver` and `Failed`
//! are only reported here (a lost primary, several primaries): promotion
//! comes with the failover work.
//!
//! The planner is in parts, one per concern, each contributing actions and
//! [`Verdict`]s; [`plan`] combines them.

mod action;
mod backup;
mod configuration;
mod context;
mod failover;
mod objects;
mod observed;
mod plan;
mod requests;
mod roles;
mod rollout;
mod serving;
mod topology;
mod upgrade;
mod verdict;

#[cfg(test)]
mod failover_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod rollout_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upgrade_tests;

pub use action::{Action, Bootstrap, DeleteReason};
pub use backup::BACKUP_HEALTHY;
pub use context::restore_pending;
pub use observed::{
    BackupState, HaView, Instance, InstanceState, JobState, LeaseState, ManagerStatus, Observed,
    Pod, PodPhase, PvcState, RestoreView, Routing, SyncStandbys,
};
pub use plan::{Plan, REQUEUE_SOON_SECONDS, REQUEUE_STEADY_SECONDS, plan};
pub use verdict::{DEGRADED, Desired, PROGRESSING, READY, Verdict};
