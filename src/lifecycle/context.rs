//! The inputs of one plan, with what every sub-planner needs derived once.

use std::collections::BTreeSet;

use crate::api::status::{DatabasePhase, DatabaseStatus};
use crate::api::v1::DatabaseSpec;

use super::observed::{Instance, Observed};

pub(super) struct Context<'a> {
    pub spec: &'a DatabaseSpec,
    pub previous: Option<&'a DatabaseStatus>,
    pub observed: &'a Observed,
    /// Serials with a PVC or a Pod (an entry with neither does not exist).
    pub members: BTreeSet<u32>,
    /// Still on the way to the first Ready.
    pub bootstrapping: bool,
}

impl<'a> Context<'a> {
    pub fn new(
        spec: &'a DatabaseSpec,
        previous: Option<&'a DatabaseStatus>,
        observed: &'a Observed,
    ) -> Self {
        let members = observed
            .instances
            .iter()
            .filter(|(_, i)| i.pvc.is_some() || i.pod.is_some())
            .map(|(serial, _)| *serial)
            .collect();
        let bootstrapping = matches!(
            previous.and_then(|s| s.phase),
            None | Some(
                DatabasePhase::Pending
                    | DatabasePhase::Provisioning
                    | DatabasePhase::InitializingPrimary
                    | DatabasePhase::CreatingReplicas
            )
        );
        Self {
            spec,
            previous,
            observed,
            members,
            bootstrapping,
        }
    }

    /// The first primary still has to be restored from a backup: see
    /// [`restore_pending`].
    pub fn restore_pending(&self) -> bool {
        restore_pending(self.spec, self.previous)
    }

    pub fn instance(&self, serial: u32) -> Option<&'a Instance> {
        if self.members.contains(&serial) {
            self.observed.instances.get(&serial)
        } else {
            None
        }
    }

    pub fn name(&self, serial: u32) -> String {
        self.observed.name(serial)
    }

    /// The phase to keep while waiting for information.
    pub fn keep_phase(&self) -> DatabasePhase {
        match self.previous.and_then(|s| s.phase) {
            None
            | Some(DatabasePhase::Pending | DatabasePhase::Provisioning | DatabasePhase::Blocked) => {
                DatabasePhase::InitializingPrimary
            }
            Some(phase) => phase,
        }
    }

    /// The recorded primary, by serial.
    pub fn recorded_primary(&self) -> Option<u32> {
        self.previous
            .and_then(|s| s.current_primary.as_deref())
            .and_then(|name| self.observed.serial_of(name))
    }

    /// Whether a primary may be created or labelled at `serial`: no other
    /// instance is, or may be, a primary.
    pub fn no_other_primary(&self, serial: u32) -> bool {
        let leased = self.holds_lease(serial);
        self.members
            .iter()
            .filter(|s| **s != serial)
            .filter_map(|s| self.observed.instances.get(s))
            .all(|i| !i.reports_primary() && (leased || !i.may_be_primary()))
    }

    /// The primary lease names `serial` and is live: no other instance may
    /// accept writes (its manager fenced, or never started PostgreSQL as
    /// primary), whatever its pod's label says.
    pub fn holds_lease(&self, serial: u32) -> bool {
        matches!(
            &self.observed.lease,
            super::observed::LeaseState::Held { holder, .. } if *holder == self.name(serial)
        )
    }

    pub fn desired_instances(&self) -> usize {
        usize::try_from(self.spec.instances.max(1)).unwrap_or(1)
    }
}

/// The spec restores from a backup and no instance has ever reported its
/// data (a manager answers `/status` only once the restore has promoted and
/// PostgreSQL runs): a primary created now must restore, not `initdb`, even on
/// a volume an interrupted restore left empty. Once data was seen, a primary's
/// own volume is simply restarted.
pub fn restore_pending(spec: &DatabaseSpec, previous: Option<&DatabaseStatus>) -> bool {
    let restores = spec
        .bootstrap
        .as_ref()
        .is_some_and(|b| b.recovery.is_some());
    let seen = previous.is_some_and(|s| s.instances.iter().any(|i| i.system_identifier.is_some()));
    restores && !seen
}
