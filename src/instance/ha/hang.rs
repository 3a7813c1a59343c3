//! The hang fence: a primary whose PostgreSQL stopped answering while this
//! manager goes on renewing the lease gives the primary role up, applying
//! [`crate::failover::pulse`].
//!
//! [`hang_loop`] probes the local PostgreSQL every period on a serving
//! primary (a connection over the Unix socket and `SELECT 1`, bounded by
//! [`pulse::hang_after`]); once it is hung it asks the supervisor to
//! [`Duty::Yield`]. The supervisor kills every PostgreSQL process (SIGKILL:
//! a stopped or stuck process handles nothing else) and then runs
//! [`yield_lease`]: the lease is released, so the operator promotes a
//! replica at once (a released lease needs neither its expiry nor the
//! peers' confirmations), and this instance waits until another holds it,
//! then rejoins as its replica. When nobody takes over within
//! [`YIELD_HOLD`] (no replica, or no operator), it takes its own release back
//! (the claim rule allows exactly that) and starts PostgreSQL again: a
//! restart is then the best left to do.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use crate::failover::Rules;
use crate::failover::claim::Claim;
use crate::failover::pulse::{self, Health, Probe, Pulse};

use super::super::{Shared, is_set, sql};
use super::{Duty, primary_data};

/// How long a primary that released its lease after a hang waits for a
/// replica to take it before it takes it back: several times what the
/// operator needs to promote one (it is woken by the lease's change).
pub const YIELD_HOLD: Duration = Duration::from_secs(30);

/// The probe loop, every period, on a serving primary.
pub async fn hang_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ha = &shared.ha;
    let mut interval = tokio::time::interval(ha.timing.period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pulse = Pulse::default();
    // The postmaster the pulse is about: a new one starts unarmed.
    let mut watching = 0;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let postmaster = shared.postmaster.load(Ordering::SeqCst);
        if postmaster != watching || !serving(&shared) {
            pulse = Pulse::default();
            watching = postmaster;
            continue;
        }
        let sent = ha.now();
        let probe = tokio::select! {
            probe = probe(&shared, pulse::hang_after(&ha.timing)) => probe,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        // Stopped or replaced on purpose meanwhile: not a hang.
        if shared.postmaster.load(Ordering::SeqCst) != watching || !serving(&shared) {
            continue;
        }
        pulse.record(sent, probe);
        match pulse.health(ha.now(), &ha.timing) {
            health @ Health::Hung { silent_for } if health.gives_up(&Rules::ALL) => {
                tracing::error!(
                    silent_for = ?silent_for,
                    "PostgreSQL has not answered for a lease duration: killing it and releasing the primary lease so that a replica takes over"
                );
                ha.set_duty(Duty::Yield);
                pulse = Pulse::default();
            }
            Health::Silent { for_ } => {
                tracing::warn!(silent_for = ?for_, "PostgreSQL does not answer");
            }
            Health::Answering | Health::Unarmed | Health::Hung { .. } => {}
        }
    }
}

/// A primary that serves as far as this manager knows.
fn serving(shared: &Shared) -> bool {
    shared.ha.duty() == Duty::Serve && is_set(&shared.running) && primary_data(shared)
}

/// One probe: any reply of the server is an answer.
async fn probe(shared: &Shared, timeout: Duration) -> Probe {
    let attempt = async {
        let client = sql::connect_local(&shared.config.socket_dir, shared.config.port).await?;
        client.simple_query("SELECT 1").await.map(|_| ())
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(())) => Probe::Ready,
        Ok(Err(error)) if error.as_db_error().is_some() => Probe::Answered,
        Ok(Err(error)) => {
            tracing::debug!(%error, "PostgreSQL probe failed");
            Probe::Silent
        }
        Err(_) => Probe::Silent,
    }
}

/// After the supervisor killed a hung PostgreSQL: release the lease and wait
/// for another instance to take it (then rejoin), or take it back after
/// [`YIELD_HOLD`] (then start again as primary). `false` when asked to stop
/// meanwhile.
pub async fn yield_lease(shared: &Shared, stop: &mut watch::Receiver<bool>) -> bool {
    let ha = &shared.ha;
    ha.release().await;
    // Alone, nobody can take over: start again at once.
    let alone = !ha.members().iter().any(|m| m.name != ha.me);
    let hold = if alone { Duration::ZERO } else { YIELD_HOLD };
    let until = ha.now() + hold;
    loop {
        match ha.standing().await {
            Ok(Claim::StandDown { holder }) => {
                tracing::warn!(%holder, "another instance took the primary lease: rejoining as its replica");
                ha.set_duty(Duty::Rejoin);
                return true;
            }
            Ok(_) | Err(_) if ha.now() >= until => {
                tracing::warn!(
                    hold = ?hold,
                    "no other instance took the primary lease: starting PostgreSQL again"
                );
                ha.set_duty(Duty::Serve);
                return true;
            }
            Ok(_) => {}
            Err(why) => tracing::debug!(%why, "cannot read the primary lease"),
        }
        tokio::select! {
            _ = tokio::time::sleep(ha.timing.period) => {}
            _ = stop.wait_for(|stop| *stop) => return false,
        }
    }
}
