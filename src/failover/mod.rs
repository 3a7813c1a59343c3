//! The failover protocol as pure functions: the primary lease and who may
//! claim it, self-fencing, the quorum arithmetic and candidate choice. No
//! kube, no tokio, no clock: every function takes the local time it judges by (a [`Moment`]), so the
//! instance manager, the operator and the model checker (`tests/failover_model.rs`)
//! run exactly the same rules.
//!
//! The protocol, in one paragraph. The primary's instance manager holds the
//! Database's Lease and renews it about every second, each write carrying the
//! resourceVersion it read, so the lease write is the single point of truth.
//! It may accept writes while its last renewal is recent ([`fencing`]) or,
//! during a control-plane outage, while it still reaches a majority of the
//! instances; otherwise it fences, and stays fenced until it renews again.
//! Instances call each other about every second and report how long ago they
//! last heard from each peer. The operator fails over only when the lease has
//! expired by its own observation ([`lease`]: time since the resourceVersion
//! last changed, never a comparison of clocks across machines) and enough of
//! the other instances ([`quorum`]) confirm they have not heard from the
//! primary for longer than it could have kept writing; it then picks the most
//! advanced eligible replica ([`candidate`]), which takes the lease (again
//! with the resourceVersion precondition) before it promotes. A primary that
//! finds the lease released takes it back only if it released it itself
//! ([`claim`]). A primary whose PostgreSQL stopped answering for a lease
//! duration while its manager still renews ([`pulse`]: a hang, not a crash)
//! kills it and releases the lease, so the failover is the ordinary one.

pub mod candidate;
pub mod claim;
pub mod fencing;
pub mod lease;
pub mod pulse;
pub mod quorum;

use std::time::Duration;

/// A point in local monotonic time, as the distance from an arbitrary origin
/// fixed by each process. Moments from different processes are never compared.
pub type Moment = Duration;

/// The protocol's timing. The safety argument needs only the inequalities
/// [`Timing::is_safe`] checks; the values trade detection speed against
/// tolerance of a slow network or API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `spec.leaseDurationSeconds`: how long after the last observed change of
    /// the lease an observer may consider it expired.
    pub lease: Duration,
    /// How often the holder renews and every manager polls its peers.
    pub period: Duration,
    /// A primary whose last successful renewal was *sent* this long ago stops
    /// relying on the lease (it must be well inside `lease`, since the
    /// observers' clocks start when they see the write, which is later).
    pub renew_deadline: Duration,
    /// A peer counts as reached while its last answer is this recent.
    pub contact_window: Duration,
    /// Timeout of one peer call.
    pub request_timeout: Duration,
    /// A replica confirms the primary gone after hearing nothing from it for
    /// this long.
    pub gone_after: Duration,
    /// How often a primary judges whether it may keep writing: a verdict
    /// stays in force this long.
    pub fence_check: Duration,
}

impl Timing {
    /// What Tusk runs with: an abrupt loss is acted on about five seconds
    /// later, a clean shutdown at once (the lease is released).
    pub const DEFAULT: Timing = Timing {
        lease: Duration::from_secs(5),
        period: Duration::from_secs(1),
        renew_deadline: Duration::from_secs(3),
        contact_window: Duration::from_millis(2500),
        request_timeout: Duration::from_millis(800),
        gone_after: Duration::from_secs(4),
        fence_check: Duration::from_millis(100),
    };

    /// The inequalities the safety argument rests on:
    /// - the holder stops relying on a renewal before any observer can see
    ///   the lease expire (`renew_deadline < lease`), with a period to spare;
    /// - a primary counts a peer as reached only while that peer cannot yet
    ///   confirm it gone: the peer's clock for an exchange starts when it
    ///   answers, at most `request_timeout` before the primary's, and the
    ///   primary acts on a verdict up to `fence_check` late.
    pub fn is_safe(&self) -> bool {
        self.renew_deadline + self.period <= self.lease
            && self.contact_window + self.request_timeout + self.fence_check < self.gone_after
            && self.period < self.contact_window
            && self.fence_check <= self.period
    }
}

/// The rules that keep the protocol safe, each switchable so that the model
/// checker can show what goes wrong without it. Production code uses
/// [`Rules::ALL`] and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rules {
    /// Fail over only once the lease has expired (or was released).
    pub lease_expiry: bool,
    /// Fail over only when enough other instances confirm the primary gone.
    pub confirmations: bool,
    /// With synchronous replication, promote only a synchronous standby, and
    /// only when enough of them reported.
    pub sync_quorum: bool,
    /// A primary that can neither renew nor reach a majority fences itself.
    pub self_fence: bool,
    /// Once fenced, only a renewal of the lease lifts the fence (regaining a
    /// majority does not).
    pub sticky_fence: bool,
    /// Among candidates, the most advanced one wins.
    pub most_advanced: bool,
    /// A released lease is retaken only by the instance that released it
    /// ([`claim`]).
    pub releaser_retakes: bool,
    /// A primary whose PostgreSQL hangs kills it and releases the lease
    /// ([`pulse`]); without it a hung primary that renews is never replaced.
    pub hang_fence: bool,
}

impl Rules {
    pub const ALL: Rules = Rules {
        lease_expiry: true,
        confirmations: true,
        sync_quorum: true,
        self_fence: true,
        sticky_fence: true,
        most_advanced: true,
        releaser_retakes: true,
        hang_fence: true,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_timing_is_safe_and_unsafe_ones_are_caught() {
        assert!(Timing::DEFAULT.is_safe());
        let late_fence = Timing {
            renew_deadline: Duration::from_secs(5),
            ..Timing::DEFAULT
        };
        assert!(!late_fence.is_safe());
        let eager_peers = Timing {
            gone_after: Duration::from_secs(3),
            ..Timing::DEFAULT
        };
        assert!(!eager_peers.is_safe());
        // Judged once a period, the default windows leave no margin.
        let lazy_fence = Timing {
            fence_check: Duration::from_secs(1),
            ..Timing::DEFAULT
        };
        assert!(!lazy_fence.is_safe());
    }
}
