//! The pure lifecycle state machine of a Database: from the spec, the previous
//! status and what the controller observed, the phase to show, the ordered
//! actions to apply and the conditions. No Kubernetes client, no async, no
//! clock, no randomness: the same inputs always give the same plan, so every
//! transition is a unit test and the safety invariants are property tests.
//!
//! `Pending → Provisioning → InitializingPrimary → CreatingReplicas → Ready`,
//! and from `Ready`: `Scaling`, `Configuring`, `SwitchingOver`,
//! `FailingOver`, `Upgrading`, `Degraded`, `Blocked`, and back; `Deleting`
//! while the object is deleted (held for a final backup when it has a store);
//! `Failed` when several instances claim to be primary.
//!
//! The planner is in parts, one per concern, each contributing actions and
//! [`Verdict`]s; [`plan`] combines them. Every decision of a pass is one of
//! them: instances and their roles, failover and switchover (`primary`),
//! rolling updates and major upgrades, scheduled backups, retention and the
//! final backup, schema migrations, volumes that grow (`growth`),
//! certificates and CA rotations (`tls`), the published endpoints
//! (`exposure`). Whether an instance that does not serve
//! is an alarm (`Degraded`) or progress (starting for the first time, a
//! switchover under way) is decided once, in `alarm`. [`Observed`] carries
//! everything they decide on, the pass's time included, so the same inputs
//! always give the same plan.

mod action;
mod alarm;
mod backups;
mod configuration;
mod context;
pub mod cpu;
mod deletion;
pub mod endpoints;
mod exposure;
pub mod growth;
mod metadata;
mod migrations;
mod note;
mod objects;
mod observed;
mod plan;
mod primary;
mod published;
mod requests;
mod resize;
mod roles;
mod rollout;
mod scheduling;
mod serving;
mod shape;
pub mod tls;
pub mod tls_cert_manager;
mod tls_pass;
mod topology;

mod upgrade;
mod verdict;
mod volume;

#[cfg(test)]
mod alarm_tests;
#[cfg(test)]
mod backups_tests;
#[cfg(test)]
mod endpoints_tests;
#[cfg(test)]
mod migrations_tests;
#[cfg(test)]
mod primary_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod rollout_tests;
#[cfg(test)]
mod scheduling_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upgrade_tests;

pub use action::{Action, BackupPurpose, Bootstrap, DeleteReason, ExposureRemoval, GrowReason};
pub use alarm::{STARTUP_GRACE_SECONDS, SWITCHOVER_GRACE_SECONDS};
pub use backups::{BACKUP_HEALTHY, PRUNE_EVERY};
pub use context::restore_pending;
pub use deletion::SKIP_FINAL_BACKUP;
pub use endpoints::EXPOSED;
pub use migrations::tail;
pub use observed::{
    BackupState, BackupView, Deletion, ExposedService, HaView, InheritedDrift, Instance,
    InstanceState, JobState, LeaseState, ManagerStatus, MigrationJob, Observed, Pod, PodPhase,
    PvcState, RestoreView, RetentionPass, Routing, SyncStandbys,
};
pub use plan::{Note, Plan, REQUEUE_SOON_SECONDS, REQUEUE_STEADY_SECONDS, plan};
pub use verdict::{DEGRADED, Desired, PROGRESSING, READY, Verdict};
