//! Leader selection inside the pod: the primary lease, the peers' heartbeat
//! and self-fencing, applying the pure rules of [`crate::failover`].
//!
//! - A manager whose data directory is a primary's may start PostgreSQL only
//!   once it holds the lease (it renews its own, takes back one it released,
//!   and rejoins as a replica when another instance holds it or released it
//!   last: [`crate::failover::claim`]).
//! - While primary it renews the lease every period, each write carrying the
//!   resourceVersion it read. A fence check runs ten times a period: with
//!   neither a recent renewal nor a majority of peers reached, PostgreSQL is
//!   stopped at once (immediate shutdown) and stays stopped until a renewal
//!   succeeds, or the lease turns out to be another's (then it rejoins).
//! - Every manager calls its peers' `GET /peer` every period and answers
//!   theirs, recording when it last heard from each; `/status` reports it so
//!   that the operator can tell a dead primary from a partitioned operator.
//! - A primary probes its own PostgreSQL every period ([`hang`]): when it
//!   has not answered for a lease duration (it hangs, while this manager
//!   keeps renewing), it is killed and the lease released, so that a
//!   replica takes over; the old primary then rejoins as its replica.
//! - A replica watches the lease too (the operator's promotion asks it to
//!   take it) and, when the holder changes, restarts its WAL receiver so that
//!   it finds the new primary at once instead of after a TCP timeout. The
//!   lease's versions come from a Kubernetes watch ([`lease_watch`]); the
//!   lease is read only while the watch is quiet.
//!
//! The parts: [`state`] (what the manager knows, behind one lock),
//! [`lease`] (the Kubernetes Lease client and its typed errors),
//! [`lease_watch`] (the lease's versions as a watch delivers them),
//! [`leadership`] (claiming, taking, handing over and releasing the lease),
//! [`peers`] (calling the other instances), [`loops`] (the periodic tasks),
//! [`hang`] (the hang fence) and [`label`] (the pod's own role label).

mod hang;
mod label;
mod leadership;
mod lease;
mod lease_watch;
mod loops;
mod peers;
#[cfg(test)]
pub(crate) use peers::PeerClient as PeerClientForTests;
mod state;

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::watch;

use crate::contract::{HaStatus, Lsn, Member, PeerStatus};
use crate::failover::fencing::Writable;
use crate::failover::{Moment, Timing};

use super::{Shared, files};

pub use hang::{hang_loop, yield_lease};
pub use leadership::ClaimOutcome;
pub use lease::LeaseError;
pub use lease_watch::lease_watch_loop;
pub use loops::{fence_loop, lease_loop, peer_loop};

/// What the supervisor is to do with PostgreSQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Duty {
    /// Run as the data directory says.
    Serve,
    /// Keep PostgreSQL stopped: a primary that may no longer accept writes.
    Fence,
    /// Stop, rewind onto the lease holder and start as its replica.
    Rejoin,
    /// Stop cleanly, wait until `target` has every WAL record, hand it the
    /// lease and start as a replica (a switchover).
    Handover { target: String },
    /// PostgreSQL hangs ([`hang`]): kill it, release the lease, and rejoin
    /// the replica that takes it (or start again if none does).
    Yield,
}

/// The outcome of a handover, for the waiting `POST /switchover`.
pub type HandoverResult = Result<crate::contract::SwitchoverResponse, String>;

/// The manager's part of the protocol.
pub struct Ha {
    origin: Instant,
    me: String,
    lease: lease::LeaseClient,
    peers: peers::PeerClient,
    state: Mutex<state::State>,
    duty: watch::Sender<Duty>,
    handover: Mutex<Option<tokio::sync::oneshot::Sender<HandoverResult>>>,
    pub timing: Timing,
}

impl Ha {
    /// `lease_name` `None` (or empty) runs without leader selection.
    pub fn new(lease_name: Option<String>, namespace: Option<String>, me: String) -> Self {
        let (duty, _) = watch::channel(Duty::Serve);
        let timing = Timing::DEFAULT;
        Ha {
            origin: Instant::now(),
            lease: lease::LeaseClient::new(lease_name, namespace),
            peers: peers::PeerClient::new(me.clone(), &timing),
            me,
            state: Mutex::new(state::State::default()),
            duty,
            handover: Mutex::new(None),
            timing,
        }
    }

    /// Call the peers whose pods serve TLS over HTTPS, with the instance's
    /// API certificate and the newest `material`.
    pub fn use_tls(&self, material: crate::instance::api::MaterialRx) {
        self.peers.use_tls(material);
    }

    /// Leader selection is on: the pod names a lease.
    pub fn enabled(&self) -> bool {
        self.lease.enabled()
    }

    pub fn now(&self) -> Moment {
        self.origin.elapsed()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, state::State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn duty(&self) -> Duty {
        self.duty.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Duty> {
        self.duty.subscribe()
    }

    pub fn set_duty(&self, duty: Duty) {
        self.duty.send_if_modified(|current| {
            if *current == duty {
                return false;
            }
            tracing::info!(from = ?current, to = ?duty, "duty changes");
            *current = duty;
            true
        });
    }

    pub fn fenced(&self) -> bool {
        self.state().fenced()
    }

    /// Judge whether this primary may keep accepting writes.
    pub fn check(&self) -> Writable {
        let now = self.now();
        self.state().check(&self.me, now, &self.timing)
    }

    pub fn set_members(&self, members: Vec<Member>) {
        self.state().set_members(members);
    }

    pub fn members(&self) -> Vec<Member> {
        self.state().members().to_vec()
    }

    /// A peer called, or answered.
    pub fn heard_from(&self, peer: &str, answer: Option<PeerStatus>) {
        let now = self.now();
        self.state().heard_from(peer, answer, now);
    }

    /// `GET /peer`'s answer.
    pub fn peer_status(&self, primary_data: bool) -> PeerStatus {
        let fenced = self.fenced();
        PeerStatus {
            instance: self.me.clone(),
            primary: primary_data && !fenced,
            fenced: primary_data && fenced,
        }
    }

    /// The lease holder as last observed.
    fn lease_holder(&self) -> Option<String> {
        let now = self.now();
        self.state().lease_holder(now)
    }

    /// The lease holder's member entry, when it is another instance and the
    /// operator listed it: its name, address and whether its pod has TLS.
    pub fn holder_member(&self) -> Option<Member> {
        let now = self.now();
        self.state().holder_member(&self.me, now)
    }

    /// A replica's WAL receiver heard `lsn` as the WAL end of `primary`.
    pub fn heard_primary_end(&self, primary: &str, lsn: Lsn) {
        self.state().heard_primary_end(primary, lsn);
    }

    pub fn status(&self) -> Option<HaStatus> {
        if !self.enabled() {
            return None;
        }
        let now = self.now();
        Some(self.state().status(&self.me, now))
    }

    /// The supervisor finished (or gave up) a handover.
    pub fn handover_done(&self, result: HandoverResult) {
        if let Some(reply) = self
            .handover
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = reply.send(result);
        }
    }

    /// Ask the supervisor for a handover to `target` and wait for it.
    pub async fn handover(&self, target: String) -> HandoverResult {
        let (reply, answer) = tokio::sync::oneshot::channel();
        *self.handover.lock().unwrap_or_else(PoisonError::into_inner) = Some(reply);
        self.set_duty(Duty::Handover { target });
        answer
            .await
            .unwrap_or_else(|_| Err("the supervisor stopped before the handover finished".into()))
    }

    /// What `target` has received, from its `GET /status`.
    pub async fn peer_received(&self, target: &str) -> Result<Option<Lsn>, String> {
        let member = self
            .members()
            .into_iter()
            .find(|m| m.name == target)
            .ok_or_else(|| format!("{target} is not a member"))?;
        let status = self.peers.status(&member).await?;
        Ok(status.postgres.received_lsn)
    }
}

/// The data directory is a primary's: it exists and has no `standby.signal`.
pub fn primary_data(shared: &Shared) -> bool {
    let pgdata = &shared.config.pgdata;
    pgdata.join("PG_VERSION").is_file() && !files::is_standby(pgdata)
}
