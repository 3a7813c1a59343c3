//! The pure lifecycle state machine of a Database: from the spec, the previous
//! status and what the controller observed, the phase to show and the ordered
//! actions to apply. No Kubernetes client, no async, no clock, no randomness:
//! the same inputs always give the same plan, so every transition is a unit
//! test and the safety invariants are property tests.
//!
//! `Pending → Provisioning → InitializingPrimary → CreatingReplicas → Ready`,
//! and from `Ready`: `Scaling`, `Degraded`, and back; `Deleting` while the
//! object is deleted. `FailingOver` and `Failed` are only reported here (a lost
//! primary, several primaries): promotion comes with the failover module.

mod action;
mod observed;
mod plan;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use action::{Action, Bootstrap, DeleteReason};
pub use observed::{
    Instance, InstanceState, ManagerStatus, Observed, Pod, PodPhase, PvcState, SyncStandbys,
};
pub use plan::{Plan, REQUEUE_SOON_SECONDS, REQUEUE_STEADY_SECONDS, plan};
