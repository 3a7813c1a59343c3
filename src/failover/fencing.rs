//! May this primary accept writes? While its last renewal of the lease is
//! recent, yes. When it cannot renew (the API server is away, or slow), it
//! keeps serving as long as it still reaches a majority of the instances, so a
//! control-plane outage does not become a database outage; reaching neither,
//! it fences itself, well before any observer can see its lease expire. A
//! fence is lifted only by renewing the lease: regaining peers is not enough,
//! since a replica may have been promoted in between.

use super::quorum::majority;
use super::{Moment, Rules, Timing};

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writable {
    /// The last renewal is recent.
    Leased,
    /// The lease could not be renewed, but `reached` of the instances
    /// (itself included) answered recently, a majority of `members`.
    Failsafe { reached: usize, members: usize },
    /// Neither: stop accepting writes.
    Fenced { reached: usize, members: usize },
}

impl Writable {
    pub fn allows_writes(self) -> bool {
        !matches!(self, Writable::Fenced { .. })
    }
}

/// The primary's fencing memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Guard {
    /// When the last successful renewal (or acquisition) was sent.
    last_renewal: Option<Moment>,
    fenced: bool,
}

/// A new guard is fenced: a process that has not taken the lease yet may not
/// write, however many peers it reaches (a replica may have been promoted
/// while it was away).
impl Default for Guard {
    fn default() -> Self {
        Self {
            last_renewal: None,
            fenced: true,
        }
    }
}

impl Guard {
    /// A renewal sent at `sent_at` succeeded: writes are allowed again.
    pub fn renewed(&mut self, sent_at: Moment) {
        if self.last_renewal.is_none_or(|last| sent_at > last) {
            self.last_renewal = Some(sent_at);
        }
        self.fenced = false;
    }

    /// Another instance holds the lease now: fenced for good (this instance
    /// rejoins as a replica).
    pub fn lost(&mut self) {
        self.last_renewal = None;
        self.fenced = true;
    }

    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// Judge at `now`, with `contacts` the moments each *other* member last
    /// answered (or called) this one, `members` counting this one.
    pub fn check(
        &mut self,
        contacts: &[Option<Moment>],
        members: usize,
        now: Moment,
        timing: &Timing,
        rules: &Rules,
    ) -> Writable {
        let reached = 1 + contacts
            .iter()
            .flatten()
            .filter(|at| now.saturating_sub(**at) < timing.contact_window)
            .count();
        let leased = self
            .last_renewal
            .is_some_and(|at| now.saturating_sub(at) < timing.renew_deadline);
        if self.fenced && rules.sticky_fence {
            return Writable::Fenced { reached, members };
        }
        if leased && !self.fenced {
            return Writable::Leased;
        }
        if reached >= majority(members) || !rules.self_fence {
            self.fenced = false;
            return Writable::Failsafe { reached, members };
        }
        self.fenced = true;
        Writable::Fenced { reached, members }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const T: Timing = Timing::DEFAULT;

    fn ms(n: u64) -> Moment {
        Duration::from_millis(n)
    }

    #[test]
    fn a_new_guard_is_fenced_until_it_renews() {
        let mut guard = Guard::default();
        assert!(guard.fenced());
        // Every peer answering does not lift it.
        assert!(matches!(
            guard.check(&[Some(ms(0)), Some(ms(0))], 3, ms(100), &T, &Rules::ALL),
            Writable::Fenced { reached: 3, .. }
        ));
        guard.renewed(ms(200));
        assert_eq!(
            guard.check(&[None, None], 3, ms(300), &T, &Rules::ALL),
            Writable::Leased
        );
    }

    #[test]
    fn a_recent_renewal_allows_writes_whatever_the_peers() {
        let mut guard = Guard::default();
        guard.renewed(ms(1000));
        assert_eq!(
            guard.check(&[None, None], 3, ms(3999), &T, &Rules::ALL),
            Writable::Leased
        );
    }

    #[test]
    fn without_renewals_a_majority_keeps_it_serving_and_none_fences_it() {
        let mut guard = Guard::default();
        guard.renewed(ms(0));
        // The API server is gone; one peer of two still answers.
        assert_eq!(
            guard.check(&[Some(ms(9000)), None], 3, ms(10_000), &T, &Rules::ALL),
            Writable::Failsafe {
                reached: 2,
                members: 3
            }
        );
        // That peer's last answer is now too old.
        let verdict = guard.check(&[Some(ms(9000)), None], 3, ms(11_500), &T, &Rules::ALL);
        assert_eq!(
            verdict,
            Writable::Fenced {
                reached: 1,
                members: 3
            }
        );
        assert!(!verdict.allows_writes());
    }

    #[test]
    fn the_fence_holds_until_a_renewal_even_when_peers_return() {
        let mut guard = Guard::default();
        guard.renewed(ms(0));
        assert!(
            !guard
                .check(&[None, None], 3, ms(3000), &T, &Rules::ALL)
                .allows_writes()
        );
        let back = [Some(ms(4000)), Some(ms(4000))];
        assert!(
            !guard
                .check(&back, 3, ms(4100), &T, &Rules::ALL)
                .allows_writes()
        );
        guard.renewed(ms(4200));
        assert_eq!(
            guard.check(&back, 3, ms(4300), &T, &Rules::ALL),
            Writable::Leased
        );
    }

    #[test]
    fn losing_the_lease_fences_even_a_well_connected_primary() {
        let mut guard = Guard::default();
        guard.renewed(ms(0));
        guard.lost();
        assert!(guard.fenced());
        let peers = [Some(ms(900)), Some(ms(900))];
        assert!(
            !guard
                .check(&peers, 3, ms(1000), &T, &Rules::ALL)
                .allows_writes()
        );
    }

    #[test]
    fn a_single_instance_is_its_own_majority() {
        let mut guard = Guard::default();
        guard.renewed(ms(0));
        assert!(
            guard
                .check(&[], 1, ms(60_000), &T, &Rules::ALL)
                .allows_writes()
        );
    }

    #[test]
    fn the_fence_comes_before_any_observer_can_see_the_lease_expire() {
        // Renewal sent at 0 and seen by an observer no earlier than 0: the
        // observer may call it expired at `lease`; the holder fenced at
        // `renew_deadline`, a period earlier at least.
        let mut guard = Guard::default();
        guard.renewed(ms(0));
        let fenced_at = (0..10_000u64)
            .step_by(100)
            .find(|t| {
                !guard
                    .check(&[None, None], 3, ms(*t), &T, &Rules::ALL)
                    .allows_writes()
            })
            .expect("fences");
        assert!(
            ms(fenced_at) + T.period <= T.lease,
            "fenced at {fenced_at} ms"
        );
    }
}
