//! Whether to fail over, and to whom. The operator calls [`elect`] with what
//! it observed; the model checker calls it with the model's state.

use std::time::Duration;

use super::lease::State;
use super::quorum::{self, Report};
use super::{Rules, Timing};

/// A replica that might be promoted, as its manager reported.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    pub name: String,
    pub timeline: u32,
    /// WAL received and flushed: what it will have replayed once promoted.
    pub received: u64,
    pub replayed: u64,
    /// Its manager answers and PostgreSQL runs as a replica.
    pub healthy: bool,
    /// Its volume is full: promoted, it would stop at its first write just
    /// as the primary did, so it is never chosen.
    pub full: bool,
}

impl Candidate {
    fn position(&self) -> (u32, u64, u64) {
        (self.timeline, self.received, self.replayed)
    }
}

/// `synchronous_standby_names = ANY min (standbys)` as the primary ran it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SyncQuorum {
    pub standbys: Vec<String>,
    pub min: usize,
}

/// Everything a failover decision rests on.
#[derive(Clone, Debug)]
pub struct Situation<'a> {
    /// The lease as the deciding process observes it.
    pub lease: &'a State,
    /// The primary being replaced.
    pub primary: &'a str,
    /// Instances of the Database, the primary included.
    pub members: usize,
    /// What the other instances that answered say of the primary.
    pub reports: &'a [Report],
    /// Replicas that answered.
    pub candidates: &'a [Candidate],
    /// Synchronous replication, when on.
    pub sync: Option<&'a SyncQuorum>,
    /// How long an expired lease must stay expired before a promotion
    /// (`spec.failover.delaySeconds`): a primary that comes back within it
    /// keeps its role. A released lease needs no wait: its holder stopped on
    /// purpose.
    pub delay: Duration,
}

/// The outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Promote(String),
    /// Not (yet): why, for the condition message.
    Wait(String),
}

/// Decide on a failover away from `situation.primary`.
pub fn elect(situation: &Situation<'_>, timing: &Timing, rules: &Rules) -> Decision {
    let primary = situation.primary;
    if rules.lease_expiry {
        match situation.lease {
            State::Released => {}
            State::Expired { holder, overdue } => {
                if *overdue < situation.delay {
                    return Decision::Wait(format!(
                        "failover.delaySeconds: the lease of {holder} expired {:.1} s ago; promoting waits {:.1} s more",
                        overdue.as_secs_f64(),
                        (situation.delay - *overdue).as_secs_f64()
                    ));
                }
            }
            State::Unobserved => {
                return Decision::Wait("the primary lease has not been observed yet".into());
            }
            State::Held { holder, remaining } => {
                return Decision::Wait(format!(
                    "{holder} holds the primary lease for another {:.1} s",
                    remaining.as_secs_f64()
                ));
            }
        }
    }
    // A released lease is the primary's own word that it stopped.
    let released = *situation.lease == State::Released;
    if rules.confirmations && !released {
        let needed = quorum::confirmations_needed(situation.members);
        let confirmed = situation
            .reports
            .iter()
            .filter(|r| quorum::confirms_gone(**r, timing))
            .count();
        if confirmed < needed {
            return Decision::Wait(format!(
                "{confirmed} of the {needed} instances needed confirm that {primary} is gone"
            ));
        }
    }
    choose(situation.candidates, situation.sync, rules)
}

/// The most advanced healthy replica by (timeline, received, replayed); with
/// synchronous replication only a synchronous standby, and only when enough
/// of them reported that the most advanced of them holds every commit that
/// was acknowledged. Ties go to the first listed (the lowest serial).
pub fn choose(candidates: &[Candidate], sync: Option<&SyncQuorum>, rules: &Rules) -> Decision {
    let healthy = candidates.iter().filter(|c| c.healthy && !c.full);
    let eligible: Vec<&Candidate> = match sync.filter(|_| rules.sync_quorum) {
        Some(sync) => {
            let reporting: Vec<&Candidate> = healthy
                .filter(|c| sync.standbys.contains(&c.name))
                .collect();
            let needed = quorum::sync_reports_needed(sync.standbys.len(), sync.min);
            if reporting.len() < needed {
                return Decision::Wait(format!(
                    "{} of the {needed} synchronous standbys needed to be sure no acknowledged commit is lost answer",
                    reporting.len()
                ));
            }
            reporting
        }
        None => healthy.collect(),
    };
    let best = if rules.most_advanced {
        eligible
            .iter()
            .copied()
            .fold(None::<&Candidate>, |best, c| match best {
                Some(b) if b.position() >= c.position() => Some(b),
                _ => Some(c),
            })
    } else {
        eligible.first().copied()
    };
    match best {
        Some(c) => Decision::Promote(c.name.clone()),
        None => {
            let full: Vec<&str> = candidates
                .iter()
                .filter(|c| c.full)
                .map(|c| c.name.as_str())
                .collect();
            if full.is_empty() {
                Decision::Wait("no healthy replica can be promoted".into())
            } else {
                Decision::Wait(format!(
                    "no replica can be promoted: the volume of {} is full too",
                    full.join(", ")
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(name: &str, timeline: u32, received: u64) -> Candidate {
        Candidate {
            name: name.into(),
            timeline,
            received,
            replayed: received,
            healthy: true,
            full: false,
        }
    }

    fn silent(secs: u64) -> Report {
        Report {
            silent_for: Duration::from_secs(secs),
            fenced: false,
        }
    }

    fn expired() -> State {
        State::Expired {
            holder: "pg-1".into(),
            overdue: Duration::from_secs(1),
        }
    }

    fn situation<'a>(
        lease: &'a State,
        reports: &'a [Report],
        candidates: &'a [Candidate],
        sync: Option<&'a SyncQuorum>,
    ) -> Situation<'a> {
        Situation {
            lease,
            primary: "pg-1",
            members: 3,
            reports,
            candidates,
            sync,
            delay: Duration::ZERO,
        }
    }

    #[test]
    fn the_most_advanced_replica_wins_by_timeline_then_lsn() {
        let candidates = [
            candidate("pg-2", 2, 500),
            candidate("pg-3", 3, 100),
            candidate("pg-4", 3, 90),
        ];
        assert_eq!(
            choose(&candidates, None, &Rules::ALL),
            Decision::Promote("pg-3".into())
        );
        let mut sick = candidates.clone();
        sick[1].healthy = false;
        assert_eq!(
            choose(&sick, None, &Rules::ALL),
            Decision::Promote("pg-4".into())
        );
    }

    #[test]
    fn a_replica_whose_volume_is_full_is_never_promoted() {
        let mut candidates = [candidate("pg-2", 3, 500), candidate("pg-3", 3, 100)];
        candidates[0].full = true;
        assert_eq!(
            choose(&candidates, None, &Rules::ALL),
            Decision::Promote("pg-3".into()),
            "the most advanced replica is as full as the primary"
        );
        candidates[1].full = true;
        assert_eq!(
            choose(&candidates, None, &Rules::ALL),
            Decision::Wait(
                "no replica can be promoted: the volume of pg-2, pg-3 is full too".into()
            )
        );
        let sync = SyncQuorum {
            standbys: vec!["pg-2".into(), "pg-3".into()],
            min: 1,
        };
        assert!(
            matches!(
                choose(&candidates, Some(&sync), &Rules::ALL),
                Decision::Wait(_)
            ),
            "synchronous standbys that are full are not promoted either"
        );
    }

    #[test]
    fn a_live_or_unobserved_lease_blocks_failover() {
        let reports = [silent(10), silent(10)];
        let candidates = [candidate("pg-2", 1, 10)];
        for lease in [
            State::Unobserved,
            State::Held {
                holder: "pg-1".into(),
                remaining: Duration::from_secs(2),
            },
        ] {
            let decision = elect(
                &situation(&lease, &reports, &candidates, None),
                &Timing::DEFAULT,
                &Rules::ALL,
            );
            assert!(matches!(decision, Decision::Wait(_)), "{lease:?}");
        }
    }

    #[test]
    fn an_expired_lease_needs_confirmations_a_released_one_does_not() {
        let candidates = [candidate("pg-2", 1, 10), candidate("pg-3", 1, 20)];
        let lease = expired();
        let one = [silent(10), silent(1)];
        let decision = elect(
            &situation(&lease, &one, &candidates, None),
            &Timing::DEFAULT,
            &Rules::ALL,
        );
        assert_eq!(
            decision,
            Decision::Wait("1 of the 2 instances needed confirm that pg-1 is gone".into())
        );
        let two = [silent(10), silent(4)];
        assert_eq!(
            elect(
                &situation(&lease, &two, &candidates, None),
                &Timing::DEFAULT,
                &Rules::ALL
            ),
            Decision::Promote("pg-3".into())
        );
        assert_eq!(
            elect(
                &situation(&State::Released, &[], &candidates, None),
                &Timing::DEFAULT,
                &Rules::ALL
            ),
            Decision::Promote("pg-3".into())
        );
    }

    #[test]
    fn an_expired_lease_waits_out_the_failover_delay() {
        let candidates = [candidate("pg-2", 1, 10)];
        let reports = [silent(10), silent(10)];
        let mut situation = situation(&State::Released, &reports, &candidates, None);
        situation.delay = Duration::from_secs(3);
        // A released lease is not waited for.
        assert_eq!(
            elect(&situation, &Timing::DEFAULT, &Rules::ALL),
            Decision::Promote("pg-2".into())
        );
        let young = State::Expired {
            holder: "pg-1".into(),
            overdue: Duration::from_secs(1),
        };
        situation.lease = &young;
        assert_eq!(
            elect(&situation, &Timing::DEFAULT, &Rules::ALL),
            Decision::Wait(
                "failover.delaySeconds: the lease of pg-1 expired 1.0 s ago; promoting waits 2.0 s more"
                    .into()
            )
        );
        let old = State::Expired {
            holder: "pg-1".into(),
            overdue: Duration::from_secs(3),
        };
        situation.lease = &old;
        assert_eq!(
            elect(&situation, &Timing::DEFAULT, &Rules::ALL),
            Decision::Promote("pg-2".into())
        );
    }

    #[test]
    fn sync_mode_promotes_only_a_synchronous_standby_heard_with_enough_others() {
        let sync = SyncQuorum {
            standbys: vec!["pg-2".into(), "pg-3".into()],
            min: 1,
        };
        let candidates = [candidate("pg-2", 1, 10), candidate("pg-4", 1, 99)];
        // pg-3 did not answer: it may hold the last acknowledged commit.
        assert!(matches!(
            choose(&candidates, Some(&sync), &Rules::ALL),
            Decision::Wait(_)
        ));
        let all = [
            candidate("pg-2", 1, 10),
            candidate("pg-3", 1, 12),
            candidate("pg-4", 1, 99),
        ];
        assert_eq!(
            choose(&all, Some(&sync), &Rules::ALL),
            Decision::Promote("pg-3".into())
        );
    }
}
