//! What the manager knows of the protocol: its view of the lease, its fence,
//! the members and when it last heard from each, and, on a replica, how far
//! its primary's WAL reaches. Kept behind one lock by [`super::Ha`]; every
//! method here takes the time it judges by.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;

use crate::contract::{HaStatus, Lsn, Member, PeerStatus, PeerView, PrimaryEnd};
use crate::failover::fencing::{Guard, Writable};
use crate::failover::lease::Observer;
use crate::failover::{Moment, Rules, Timing};

#[derive(Default)]
pub struct State {
    pub observer: Observer,
    guard: Guard,
    members: Vec<Member>,
    /// When each peer last exchanged a call with this one.
    contacts: BTreeMap<String, Moment>,
    /// Each peer's last answer.
    answers: BTreeMap<String, PeerStatus>,
    /// The last write of the lease by this instance succeeded and named it.
    holds: bool,
    /// The lease as this instance last wrote it, while that write named it
    /// and nothing is known to have changed it since: the next renewal is
    /// written over it without a read.
    written: Option<Lease>,
    /// When the lease watch last delivered a version.
    watched: Option<Moment>,
    /// A replica: the furthest WAL end its primary reported, and who that was.
    primary_end: Option<PrimaryEnd>,
}

impl State {
    /// A write naming this instance succeeded; it was sent at `sent`.
    pub fn renewed(&mut self, sent: Moment) {
        self.guard.renewed(sent);
        self.holds = true;
    }

    /// The lease is not (or no longer) this instance's.
    pub fn lost(&mut self) {
        self.holds = false;
        self.written = None;
        self.guard.lost();
    }

    /// This instance wrote `lease` (as the API server returned it): kept
    /// for the next renewal when it names `me`.
    pub fn wrote(&mut self, lease: &Lease, me: &str) {
        let mine = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(me);
        self.written = mine.then(|| lease.clone());
    }

    /// A write lost a race: what this instance wrote last is not the lease
    /// any more.
    pub fn overtaken(&mut self) {
        self.written = None;
    }

    /// The lease watch delivered a version at `now`.
    pub fn watched(&mut self, now: Moment) {
        self.watched = Some(now);
    }

    /// Whether the lease watch delivered a version less than `within` ago.
    pub fn watched_within(&self, now: Moment, within: Moment) -> bool {
        self.watched
            .is_some_and(|at| now.saturating_sub(at) < within)
    }

    /// The lease to renew without reading it first, if any.
    pub fn written(&self) -> Option<Lease> {
        self.written.clone()
    }

    pub fn fenced(&self) -> bool {
        self.guard.fenced()
    }

    /// Whether `me`, a primary, may keep accepting writes.
    pub fn check(&mut self, me: &str, now: Moment, timing: &Timing) -> Writable {
        let others: Vec<Option<Moment>> = self
            .members
            .iter()
            .filter(|m| m.name != me)
            .map(|m| self.contacts.get(&m.name).copied())
            .collect();
        // Until the operator said who the members are, a majority cannot be
        // counted: only the lease allows writes.
        let members = if self.members.is_empty() {
            2
        } else {
            self.members.len()
        };
        self.guard.check(&others, members, now, timing, &Rules::ALL)
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn set_members(&mut self, members: Vec<Member>) {
        if self.members != members {
            tracing::info!(?members, "members changed");
            self.members = members;
        }
    }

    /// A peer called, or answered; calls from non-members are not counted.
    pub fn heard_from(&mut self, peer: &str, answer: Option<PeerStatus>, now: Moment) {
        if !self.members.iter().any(|m| m.name == peer) {
            return;
        }
        self.contacts.insert(peer.to_owned(), now);
        if let Some(answer) = answer {
            self.answers.insert(peer.to_owned(), answer);
        }
    }

    /// The lease holder as last observed, live or expired.
    pub fn lease_holder(&self, now: Moment) -> Option<String> {
        self.observer.state(now).holder().map(str::to_owned)
    }

    /// The lease holder's member entry, when it is not `me` and the operator
    /// listed it.
    pub fn holder_member(&self, me: &str, now: Moment) -> Option<Member> {
        let holder = self.lease_holder(now).filter(|h| *h != me)?;
        self.members.iter().find(|m| m.name == holder).cloned()
    }

    /// A replica's WAL receiver heard `lsn` as the WAL end of `primary`.
    pub fn heard_primary_end(&mut self, primary: &str, lsn: Lsn) {
        match &mut self.primary_end {
            Some(end) if end.instance == primary => end.lsn = end.lsn.max(lsn),
            end => {
                *end = Some(PrimaryEnd {
                    instance: primary.to_owned(),
                    lsn,
                });
            }
        }
    }

    /// `/status`'s part on leader selection, as `me` sees it at `now`.
    pub fn status(&self, me: &str, now: Moment) -> HaStatus {
        let peers = self
            .members
            .iter()
            .filter(|m| m.name != me)
            .map(|m| {
                let last = self.contacts.get(&m.name).copied().unwrap_or_default();
                let answer = self.answers.get(&m.name);
                PeerView {
                    name: m.name.clone(),
                    silent_ms: u64::try_from(now.saturating_sub(last).as_millis())
                        .unwrap_or(u64::MAX),
                    fenced: answer.is_some_and(|a| a.fenced),
                    primary: answer.is_some_and(|a| a.primary),
                }
            })
            .collect();
        HaStatus {
            lease_holder: self.lease_holder(now),
            holds_lease: self.holds && !self.guard.fenced(),
            fenced: self.guard.fenced(),
            members: self.members.clone(),
            peers,
            primary_end: self.primary_end.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_keeps_the_furthest_wal_end_of_the_current_primary() {
        let mut state = State::default();
        assert_eq!(state.primary_end, None);
        state.heard_primary_end("pg-1", Lsn(300));
        // An older report (a keepalive carrying the sent position) does not
        // move it back.
        state.heard_primary_end("pg-1", Lsn(200));
        assert_eq!(
            state.primary_end,
            Some(PrimaryEnd {
                instance: "pg-1".into(),
                lsn: Lsn(300)
            })
        );
        // A new primary starts afresh.
        state.heard_primary_end("pg-3", Lsn(250));
        assert_eq!(
            state.primary_end,
            Some(PrimaryEnd {
                instance: "pg-3".into(),
                lsn: Lsn(250)
            })
        );
    }

    #[test]
    fn only_a_lease_written_in_this_instances_name_is_renewed_without_a_read() {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        let lease = |holder: Option<&str>, version: &str| Lease {
            metadata: kube::api::ObjectMeta {
                resource_version: Some(version.to_owned()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                ..LeaseSpec::default()
            }),
        };
        let mut state = State::default();
        assert_eq!(state.written(), None, "nothing written yet: read first");
        state.wrote(&lease(Some("pg-1"), "7"), "pg-1");
        assert_eq!(state.written(), Some(lease(Some("pg-1"), "7")));
        // A later renewal replaces it.
        state.wrote(&lease(Some("pg-1"), "9"), "pg-1");
        assert_eq!(state.written(), Some(lease(Some("pg-1"), "9")));
        // A lost race forgets it: the next claim reads.
        state.overtaken();
        assert_eq!(state.written(), None);
        // A write naming another instance (a hand-over) or nobody (a
        // release) is not renewed blindly.
        state.wrote(&lease(Some("pg-2"), "10"), "pg-1");
        assert_eq!(state.written(), None);
        state.wrote(&lease(Some("pg-1"), "11"), "pg-1");
        state.wrote(&lease(None, "12"), "pg-1");
        assert_eq!(state.written(), None);
        // Standing down forgets it too.
        state.wrote(&lease(Some("pg-1"), "13"), "pg-1");
        state.lost();
        assert_eq!(state.written(), None);
    }

    #[test]
    fn the_lease_is_read_only_while_its_watch_is_quiet() {
        let two = Moment::from_secs(2);
        let mut state = State::default();
        assert!(
            !state.watched_within(Moment::from_secs(1), two),
            "no watch yet"
        );
        state.watched(Moment::from_secs(10));
        assert!(state.watched_within(Moment::from_secs(11), two));
        assert!(
            !state.watched_within(Moment::from_secs(12), two),
            "quiet for two periods"
        );
    }

    #[test]
    fn only_members_count_as_contacts() {
        let mut state = State::default();
        let member = |name: &str| Member {
            name: name.to_owned(),
            address: format!("10.0.0.{}", name.len()),
            tls: false,
        };
        state.set_members(vec![member("pg-1"), member("pg-2")]);
        let now = Moment::from_secs(10);
        state.heard_from("pg-9", None, now);
        state.heard_from("pg-2", None, now);
        let status = state.status("pg-1", now);
        assert_eq!(status.peers.len(), 1);
        assert_eq!(status.peers[0].name, "pg-2");
        assert_eq!(status.peers[0].silent_ms, 0);
        assert!(!status.holds_lease);
    }
}
