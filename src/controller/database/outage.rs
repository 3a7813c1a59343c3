//! What a failover cost, as this operator saw it: how long writes had no
//! primary (from the first pass that found the recorded primary not serving
//! to the promoted instance accepting writes) and how much WAL the old
//! primary had reported beyond what the promoted one had received. The old
//! primary's last position is the furthest of what this operator last read
//! from it and what the replicas' WAL receivers last heard from it (they ask
//! every second, so it is at most about a second old). Pure: the controller
//! feeds it each pass's observation and the clock.
//!
//! A switchover's write pause as clients see it runs from asking the primary
//! to hand over until the `-rw` Service routes to the new primary: the role
//! label moves and the endpoints follow a pass or two after the promotion,
//! kube-proxy's rules after them, and that is most of the pause (0.2 s to
//! the promotion, 0.4 s to the EndpointSlice, 1.6 s to a client in our
//! runs). The hand-over is remembered here until a pass's client of `-rw`
//! reaches the new primary ([`super::observe::route`]).

use std::time::{Duration, Instant};

/// One Database's memory between passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outage {
    /// The serving primary last seen, and the WAL position it reported.
    last_primary: Option<(String, u64)>,
    /// When a pass first found no serving primary.
    down_since: Option<Instant>,
    /// A switchover handed over and not yet routed to.
    switchover: Option<Handover>,
}

/// A switchover between its hand-over and `-rw` routing to the new primary.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Handover {
    from: String,
    to: String,
    asked: Instant,
    /// From asking to the new primary accepting writes.
    promoted: Duration,
}

/// How long a hand-over waits for `-rw` to route to the new primary before
/// it is recorded with only the time to the promotion.
pub const ROUTED_WITHIN: Duration = Duration::from_secs(60);

/// A switchover's cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switched {
    pub from: String,
    pub to: String,
    /// From asking the old primary to hand over to `-rw` routing to the new
    /// one; `None` when that was not seen within [`ROUTED_WITHIN`].
    pub routed: Option<Duration>,
    /// From asking to the new primary accepting writes.
    pub promoted: Duration,
}

/// A promotion's cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cost {
    /// Since the primary was first found not serving; `None` when this
    /// process did not see the start (it restarted in the middle of the
    /// failover).
    pub duration: Option<Duration>,
    /// WAL the old primary reported past what the promoted instance had
    /// received; `None` when this process never heard the old primary.
    pub wal_gap_bytes: Option<u64>,
}

impl Outage {
    /// A pass found `serving` (name, WAL position) as the primary, or nobody.
    /// Returns the primary last seen serving when this pass is the first to
    /// find none, so that the moment the operator noticed is on record.
    pub fn observe(&mut self, serving: Option<(&str, u64)>, now: Instant) -> Option<String> {
        match serving {
            Some((name, lsn)) => {
                self.last_primary = Some((name.to_owned(), lsn));
                self.down_since = None;
                None
            }
            None if self.down_since.is_none() => {
                self.down_since = Some(now);
                self.last_primary.as_ref().map(|(name, _)| name.clone())
            }
            None => None,
        }
    }

    /// `to`, which had received WAL up to `received` (when it said), was
    /// promoted in place of `from` and accepts writes as of `now`. `heard`:
    /// the furthest WAL end the replicas heard `from` report.
    pub fn promoted(
        &mut self,
        from: &str,
        to: &str,
        received: Option<u64>,
        heard: Option<u64>,
        now: Instant,
    ) -> Cost {
        let duration = self
            .down_since
            .map(|since| now.saturating_duration_since(since));
        let seen = self
            .last_primary
            .as_ref()
            .filter(|(name, _)| name == from)
            .map(|(_, lsn)| *lsn);
        let end = seen.max(heard);
        let wal_gap_bytes = end
            .zip(received)
            .map(|(end, received)| end.saturating_sub(received));
        self.last_primary = received.map(|r| (to.to_owned(), r));
        self.down_since = None;
        Cost {
            duration,
            wal_gap_bytes,
        }
    }
}

impl Outage {
    /// `from` handed the primary role to `to`, asked at `asked`; `to`
    /// accepted writes `promoted` later.
    pub fn handed_over(&mut self, from: &str, to: &str, asked: Instant, promoted: Duration) {
        self.switchover = Some(Handover {
            from: from.to_owned(),
            to: to.to_owned(),
            asked,
            promoted,
        });
    }

    /// The new primary of a switchover that `-rw` does not route to yet.
    pub fn awaiting_route(&self) -> Option<&str> {
        self.switchover.as_ref().map(|h| h.to.as_str())
    }

    /// Whether a client dialling `-rw` `reached` the new primary at `now`:
    /// the switchover's cost once it does, or once it waited too long.
    pub fn routed(&mut self, reached: bool, now: Instant) -> Option<Switched> {
        let handover = self.switchover.as_ref()?;
        let waited = now.saturating_duration_since(handover.asked);
        if !reached && waited < ROUTED_WITHIN {
            return None;
        }
        let handover = self.switchover.take()?;
        Some(Switched {
            from: handover.from,
            to: handover.to,
            routed: reached.then_some(waited),
            promoted: handover.promoted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_pass_without_a_serving_primary_names_the_lost_one() {
        let start = Instant::now();
        let mut outage = Outage::default();
        assert_eq!(outage.observe(None, start), None, "never saw one serving");
        assert_eq!(outage.observe(Some(("pg-1", 10)), start), None);
        assert_eq!(outage.observe(None, start), Some("pg-1".to_owned()));
        assert_eq!(outage.observe(None, start + Duration::from_secs(1)), None);
        assert_eq!(outage.observe(Some(("pg-2", 12)), start), None);
        assert_eq!(outage.observe(None, start), Some("pg-2".to_owned()));
    }

    #[test]
    fn a_switchover_costs_until_a_client_of_rw_reaches_the_new_primary() {
        let start = Instant::now();
        let mut outage = Outage::default();
        assert_eq!(outage.awaiting_route(), None);
        assert_eq!(outage.routed(true, start), None);
        outage.handed_over("pg-1", "pg-2", start, Duration::from_millis(200));
        assert_eq!(outage.awaiting_route(), Some("pg-2"));
        assert_eq!(
            outage.routed(false, start + Duration::from_millis(900)),
            None
        );
        let switched = outage.routed(true, start + Duration::from_millis(1600));
        assert_eq!(
            switched,
            Some(Switched {
                from: "pg-1".into(),
                to: "pg-2".into(),
                routed: Some(Duration::from_millis(1600)),
                promoted: Duration::from_millis(200),
            })
        );
        // Recorded once.
        assert_eq!(outage.awaiting_route(), None);
        assert_eq!(outage.routed(true, start + Duration::from_secs(2)), None);
    }

    #[test]
    fn a_switchover_never_routed_to_is_recorded_with_the_promotion_alone() {
        let start = Instant::now();
        let mut outage = Outage::default();
        outage.handed_over("pg-1", "pg-2", start, Duration::from_millis(300));
        let switched = outage.routed(false, start + ROUTED_WITHIN);
        assert_eq!(
            switched.map(|s| (s.routed, s.promoted)),
            Some((None, Duration::from_millis(300)))
        );
    }

    #[test]
    fn the_cost_runs_from_the_first_pass_without_a_primary() {
        let start = Instant::now();
        let mut outage = Outage::default();
        outage.observe(Some(("pg-0", 5000)), start);
        outage.observe(None, start + Duration::from_millis(100));
        // Later passes without a primary do not move the start.
        outage.observe(None, start + Duration::from_millis(900));
        let cost = outage.promoted(
            "pg-0",
            "pg-1",
            Some(4800),
            None,
            start + Duration::from_millis(2600),
        );
        assert_eq!(
            cost,
            Cost {
                duration: Some(Duration::from_millis(2500)),
                wal_gap_bytes: Some(200),
            }
        );
        // The next outage starts afresh, measured against the new primary.
        outage.observe(None, start + Duration::from_secs(10));
        let cost = outage.promoted(
            "pg-1",
            "pg-2",
            Some(4900),
            None,
            start + Duration::from_secs(13),
        );
        assert_eq!(cost.duration, Some(Duration::from_secs(3)));
        assert_eq!(cost.wal_gap_bytes, Some(0));
    }

    #[test]
    fn what_this_process_did_not_see_is_not_guessed() {
        let start = Instant::now();
        let mut outage = Outage::default();
        // Restarted mid-failover: neither the old primary nor the start seen.
        let cost = outage.promoted("pg-0", "pg-1", Some(10), None, start);
        assert_eq!(cost.duration, None);
        assert_eq!(cost.wal_gap_bytes, None);
        // A gap is only measured against the primary being replaced.
        outage.observe(Some(("pg-2", 99)), start);
        assert_eq!(
            outage
                .promoted("pg-0", "pg-1", Some(10), None, start)
                .wal_gap_bytes,
            None
        );
    }

    #[test]
    fn the_replicas_word_counts_when_it_is_further() {
        let start = Instant::now();
        let mut outage = Outage::default();
        outage.observe(Some(("pg-0", 100)), start);
        let cost = outage.promoted("pg-0", "pg-1", Some(150), Some(400), start);
        assert_eq!(cost.wal_gap_bytes, Some(250));
        // Only the replicas heard it: still measured.
        let mut fresh = Outage::default();
        let cost = fresh.promoted("pg-0", "pg-1", Some(150), Some(160), start);
        assert_eq!(cost.wal_gap_bytes, Some(10));
    }

    #[test]
    fn a_primary_ahead_of_the_old_one_is_no_gap() {
        let start = Instant::now();
        let mut outage = Outage::default();
        outage.observe(Some(("pg-0", 100)), start);
        assert_eq!(
            outage
                .promoted("pg-0", "pg-1", Some(150), None, start)
                .wal_gap_bytes,
            Some(0)
        );
    }
}
