//! What the topology sub-planner decided ([`Topology`]), apart from how it
//! decides it: the roles, configuration, failover and serving sub-planners
//! read it, and the topology asks the failover sub-planner for a new primary,
//! so the shape lives below all of them.

use crate::api::status::DatabasePhase;

use super::action::Action;
use super::observed::ManagerStatus;

/// What the topology decided, its actions grouped so that the combined plan
/// can put them in a safe order around the other sub-planners' actions.
pub(super) struct Topology {
    pub phase: DatabasePhase,
    /// A ready primary accepts connections.
    pub serving: bool,
    pub reason: &'static str,
    pub message: String,
    /// An instance that served, or failed to start, is unhealthy whatever
    /// the phase (a first primary whose pod failed is still initialising,
    /// yet that is an alarm): `Degraded=True` with the reason and message.
    pub alarm: bool,
    /// The primary to record in status.
    pub primary: Option<u32>,
    /// The one instance whose manager reports primary, ready or not.
    pub reporting_primary: Option<(u32, ManagerStatus)>,
    /// Replicas that stay (not being removed), and new serials.
    pub keep: Vec<u32>,
    pub new: Vec<u32>,
    /// Bootstrap or restart of the primary.
    pub first: Vec<Action>,
    pub budgets: Vec<Action>,
    pub removals: Vec<Action>,
    pub slots: Vec<Action>,
    pub additions: Vec<Action>,
    pub repairs: Vec<Action>,
}

impl Topology {
    pub(super) fn wait(
        phase: DatabasePhase,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            phase,
            serving: false,
            reason,
            message: message.into(),
            alarm: false,
            primary: None,
            reporting_primary: None,
            keep: Vec::new(),
            new: Vec::new(),
            first: Vec::new(),
            budgets: Vec::new(),
            removals: Vec::new(),
            slots: Vec::new(),
            additions: Vec::new(),
            repairs: Vec::new(),
        }
    }

    pub(super) fn primary(mut self, serial: u32) -> Self {
        self.primary = Some(serial);
        self
    }
}
