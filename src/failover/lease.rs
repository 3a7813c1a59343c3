//! Judging the primary lease as client-go's leader election does: an observer
//! remembers when it last saw the lease's resourceVersion change and considers
//! the lease expired once `leaseDurationSeconds` of its own time have passed
//! since. The `renewTime` written by the holder is never compared with the
//! observer's clock, so skewed clocks cannot make a live lease look expired.

use std::time::Duration;

use super::{Moment, Rules};

/// The lease as read: its resourceVersion, holder and duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub version: String,
    /// `spec.holderIdentity`; `None` (or empty) when released.
    pub holder: Option<String>,
    pub duration: Duration,
}

/// What an observer may conclude about the lease now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum State {
    /// Not read yet (or not since this observer started): nothing may be
    /// concluded, in particular not that it expired.
    #[default]
    Unobserved,
    /// Nobody holds it: the last holder gave it up after it stopped writing.
    Released,
    /// `holder` holds it for at least `remaining` more of local time.
    Held { holder: String, remaining: Duration },
    /// `holder` has not renewed it for a full lease duration, and `overdue`
    /// more.
    Expired { holder: String, overdue: Duration },
}

impl State {
    /// The holder, live or expired.
    pub fn holder(&self) -> Option<&str> {
        match self {
            State::Held { holder, .. } | State::Expired { holder, .. } => Some(holder),
            State::Unobserved | State::Released => None,
        }
    }
}

/// One process's memory of the lease.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Observer {
    last: Option<(String, Option<String>, Duration)>,
    changed_at: Moment,
}

impl Observer {
    /// Record a read of the lease at `now`.
    pub fn observe(&mut self, record: &Record, now: Moment) {
        let holder = record.holder.clone().filter(|h| !h.is_empty());
        let changed = self
            .last
            .as_ref()
            .is_none_or(|(version, _, _)| *version != record.version);
        if changed {
            self.changed_at = now;
        }
        self.last = Some((record.version.clone(), holder, record.duration));
    }

    /// Forget what was seen (the lease is gone, or this process lost track).
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// The resourceVersion last seen.
    pub fn version(&self) -> Option<&str> {
        self.last.as_ref().map(|(version, _, _)| version.as_str())
    }

    pub fn state(&self, now: Moment) -> State {
        let Some((_, holder, duration)) = &self.last else {
            return State::Unobserved;
        };
        let Some(holder) = holder else {
            return State::Released;
        };
        let age = now.saturating_sub(self.changed_at);
        if age >= *duration {
            State::Expired {
                holder: holder.clone(),
                overdue: age - *duration,
            }
        } else {
            State::Held {
                holder: holder.clone(),
                remaining: *duration - age,
            }
        }
    }
}

/// Why `me` may not take the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    Unobserved,
    HeldBy { holder: String, remaining: Duration },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unobserved => f.write_str("the lease has not been observed yet"),
            Refusal::HeldBy { holder, remaining } => write!(
                f,
                "{holder} holds the lease for another {:.1} s",
                remaining.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// Whether `me` may write itself into the lease (the write still carries the
/// resourceVersion observed, so a renewal in between makes it fail). The
/// rule is [`Rules::lease_expiry`], the one `elect` applies too.
pub fn may_take(state: &State, me: &str, rules: &Rules) -> Result<(), Refusal> {
    if !rules.lease_expiry {
        return Ok(());
    }
    match state {
        State::Unobserved => Err(Refusal::Unobserved),
        State::Released | State::Expired { .. } => Ok(()),
        State::Held { holder, .. } if holder == me => Ok(()),
        State::Held { holder, remaining } => Err(Refusal::HeldBy {
            holder: holder.clone(),
            remaining: *remaining,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: &str, holder: Option<&str>) -> Record {
        Record {
            version: version.to_owned(),
            holder: holder.map(str::to_owned),
            duration: Duration::from_secs(5),
        }
    }

    fn at(seconds: u64) -> Moment {
        Duration::from_secs(seconds)
    }

    #[test]
    fn expiry_counts_from_the_last_change_this_observer_saw() {
        let mut observer = Observer::default();
        assert_eq!(observer.state(at(100)), State::Unobserved);
        observer.observe(&record("1", Some("pg-1")), at(10));
        // Reading the same version again does not restart the clock.
        observer.observe(&record("1", Some("pg-1")), at(13));
        assert_eq!(
            observer.state(at(14)),
            State::Held {
                holder: "pg-1".into(),
                remaining: Duration::from_secs(1)
            }
        );
        assert_eq!(
            observer.state(at(15)),
            State::Expired {
                holder: "pg-1".into(),
                overdue: Duration::ZERO,
            }
        );
        assert_eq!(
            observer.state(at(17)),
            State::Expired {
                holder: "pg-1".into(),
                overdue: Duration::from_secs(2),
            }
        );
        // A renewal (new version) does.
        observer.observe(&record("2", Some("pg-1")), at(16));
        assert!(matches!(observer.state(at(20)), State::Held { .. }));
    }

    #[test]
    fn a_new_observer_never_concludes_expiry_from_the_writers_timestamps() {
        // However old the lease's renewTime, a fresh observer waits a full
        // duration: the record carries no time at all.
        let mut observer = Observer::default();
        observer.observe(&record("7", Some("pg-1")), at(1000));
        assert!(matches!(observer.state(at(1004)), State::Held { .. }));
        assert!(matches!(observer.state(at(1005)), State::Expired { .. }));
    }

    #[test]
    fn who_may_take_the_lease() {
        let mut observer = Observer::default();
        assert_eq!(
            may_take(&observer.state(at(0)), "pg-2", &Rules::ALL),
            Err(Refusal::Unobserved)
        );
        observer.observe(&record("1", Some("pg-1")), at(0));
        let held = observer.state(at(2));
        assert!(matches!(
            may_take(&held, "pg-2", &Rules::ALL),
            Err(Refusal::HeldBy { .. })
        ));
        assert_eq!(may_take(&held, "pg-1", &Rules::ALL), Ok(()));
        assert_eq!(
            may_take(&observer.state(at(5)), "pg-2", &Rules::ALL),
            Ok(())
        );
        observer.observe(&record("2", Some("")), at(6));
        assert_eq!(observer.state(at(6)), State::Released);
        assert_eq!(
            may_take(&observer.state(at(6)), "pg-2", &Rules::ALL),
            Ok(())
        );
        let off = Rules {
            lease_expiry: false,
            ..Rules::ALL
        };
        assert_eq!(may_take(&held, "pg-2", &off), Ok(()));
    }
}
