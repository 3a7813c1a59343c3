//! Does the primary's PostgreSQL still answer? A primary whose PostgreSQL
//! hangs (its processes exist but serve nothing: stopped, or stuck) while
//! its manager goes on renewing the lease would stall every write for as
//! long as the hang lasts, since nothing else in the protocol replaces a
//! primary that renews. So the manager probes its own PostgreSQL and, once
//! it is [`Health::Hung`], kills it and releases the lease: a replica takes
//! over through the ordinary failover (a released lease needs neither
//! expiry nor confirmations), and the old primary rejoins as its replica.
//!
//! The bound. A probe is a local connection over the Unix socket and
//! `SELECT 1`. Any reply of the server counts as an answer, an error
//! included: "too many clients", "the database system is starting up" or
//! "in recovery mode" come from a postmaster that works. A live postmaster
//! answers a local connection in milliseconds, and under heavy load (CPU
//! saturated, I/O bound, every connection slot taken) still in well under a
//! second, because accepting and forking is all the postmaster does. So
//! PostgreSQL is hung only when it has sent nothing at all, to any probe,
//! for a whole lease duration ([`hang_after`], 5 s by default), with at
//! least one probe made meanwhile (a manager that could not probe, starved
//! itself, concludes nothing). A lease duration is what the protocol already
//! allows any primary to stay silent before it is replaced, so this judges
//! PostgreSQL no faster than the lease judges its manager.
//!
//! Start-up and recovery are not judged: the pulse is armed only by a
//! successful `SELECT 1` after the postmaster started (a server in crash
//! recovery answers with an error, which proves it alive but does not arm),
//! and reset whenever the postmaster is restarted.

use std::time::Duration;

use super::{Moment, Rules, Timing};

/// What one probe got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `SELECT 1` returned.
    Ready,
    /// The server replied with an error: it is alive.
    Answered,
    /// Nothing came back within [`hang_after`], or no connection could be
    /// made at all.
    Silent,
}

/// The verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Not armed yet: PostgreSQL has not completed a query since it started.
    Unarmed,
    /// The last probe got an answer.
    Answering,
    /// The probes since the last answer got nothing, for `for_` so far.
    Silent { for_: Duration },
    /// Nothing for at least [`hang_after`]: kill it and give up the lease.
    Hung { silent_for: Duration },
}

impl Health {
    /// Whether the primary gives its role up now: kills PostgreSQL and
    /// releases the lease ([`Rules::hang_fence`]).
    pub fn gives_up(self, rules: &Rules) -> bool {
        rules.hang_fence && matches!(self, Health::Hung { .. })
    }
}

/// How long PostgreSQL may send nothing before it counts as hung: a lease
/// duration. Also the timeout of one probe.
pub fn hang_after(timing: &Timing) -> Duration {
    timing.lease
}

/// One postmaster's probe history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pulse {
    /// When the last answered probe was sent; `None`: not armed.
    last_answer: Option<Moment>,
    /// Probes that got nothing since.
    silent_probes: u32,
}

impl Pulse {
    /// A probe sent at `sent` got `probe`.
    pub fn record(&mut self, sent: Moment, probe: Probe) {
        match probe {
            Probe::Ready => self.answered(sent),
            Probe::Answered if self.last_answer.is_some() => self.answered(sent),
            Probe::Answered => {}
            Probe::Silent => {
                if self.last_answer.is_some() {
                    self.silent_probes = self.silent_probes.saturating_add(1);
                }
            }
        }
    }

    fn answered(&mut self, sent: Moment) {
        self.last_answer = Some(self.last_answer.map_or(sent, |last| last.max(sent)));
        self.silent_probes = 0;
    }

    /// The verdict at `now`.
    pub fn health(&self, now: Moment, timing: &Timing) -> Health {
        let Some(last) = self.last_answer else {
            return Health::Unarmed;
        };
        if self.silent_probes == 0 {
            return Health::Answering;
        }
        let silent_for = now.saturating_sub(last);
        if silent_for >= hang_after(timing) {
            Health::Hung { silent_for }
        } else {
            Health::Silent { for_: silent_for }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing::DEFAULT;

    fn ms(n: u64) -> Moment {
        Duration::from_millis(n)
    }

    /// Probes (sent at, outcome), when judged, the verdict.
    type Row = (Vec<(u64, Probe)>, u64, Health);

    /// Plays `probes` (sent at, outcome) and judges at `now`.
    fn judge(probes: &[(u64, Probe)], now: u64) -> Health {
        let mut pulse = Pulse::default();
        for (sent, probe) in probes {
            pulse.record(ms(*sent), *probe);
        }
        pulse.health(ms(now), &T)
    }

    #[test]
    fn hung_only_after_a_lease_duration_of_complete_silence() {
        use Probe::{Answered, Ready, Silent};
        let hung = |silent_for: u64| Health::Hung {
            silent_for: ms(silent_for),
        };
        let silent = |for_: u64| Health::Silent { for_: ms(for_) };
        // (probes, now, verdict)
        let rows: Vec<Row> = vec![
            // Start-up: replies, even errors, do not arm; silence neither.
            (vec![], 60_000, Health::Unarmed),
            (vec![(0, Answered), (1000, Silent)], 60_000, Health::Unarmed),
            (vec![(0, Silent), (6000, Silent)], 60_000, Health::Unarmed),
            (vec![(0, Ready)], 60_000, Health::Answering),
            // A frozen server: the probe sent at 1 s waited the whole 5 s.
            (vec![(0, Ready), (1000, Silent)], 6000, hung(6000)),
            // Refused at once (a full backlog) for less than 5 s: not yet.
            (
                vec![(0, Ready), (1000, Silent), (2000, Silent)],
                4999,
                silent(4999),
            ),
            (
                vec![(0, Ready), (1000, Silent), (2000, Silent)],
                5000,
                hung(5000),
            ),
            // Slow but answering, even with errors (out of connection
            // slots): never hung, however late the answer.
            (
                vec![(0, Ready), (1000, Silent), (4900, Answered)],
                9000,
                Health::Answering,
            ),
            (vec![(0, Ready), (4999, Ready)], 9998, Health::Answering),
            // A manager that made no probe since the answer concludes
            // nothing, however long it was away.
            (vec![(0, Ready)], 600_000, Health::Answering),
            // An answer to an older probe arriving after a newer one failed
            // does not move the clock back.
            (
                vec![(3000, Ready), (1000, Ready), (4000, Silent)],
                8000,
                hung(5000),
            ),
        ];
        for (probes, now, verdict) in rows {
            assert_eq!(judge(&probes, now), verdict, "{probes:?} at {now}");
        }
    }

    #[test]
    fn only_a_hung_server_gives_the_role_up_and_only_with_the_rule() {
        let hung = Health::Hung {
            silent_for: T.lease,
        };
        assert!(hung.gives_up(&Rules::ALL));
        let off = Rules {
            hang_fence: false,
            ..Rules::ALL
        };
        assert!(!hung.gives_up(&off));
        for alive in [
            Health::Unarmed,
            Health::Answering,
            Health::Silent { for_: ms(4999) },
        ] {
            assert!(!alive.gives_up(&Rules::ALL), "{alive:?}");
        }
    }

    #[test]
    fn the_bound_is_the_lease_duration() {
        assert_eq!(hang_after(&T), T.lease);
        assert_eq!(hang_after(&T), Duration::from_secs(5));
    }
}
