//! The three periodic tasks of leader selection: the lease loop (renew on a
//! primary, watch on a replica), the fence check and the heartbeat.

use std::sync::Arc;

use tokio::sync::watch;

use crate::failover::fencing::Writable;

use super::super::tls::upstream::{Redial, Upstream, redial};
use super::super::{Shared, files, is_set, sql};
use super::leadership::ClaimOutcome;
use super::lease::LeaseError;
use super::{Duty, primary_data};

/// The lease loop: renew (primary) or watch (replica) every period; restart
/// the WAL receiver of a replica when the holder changes. A replica reads
/// the lease only while its watch ([`super::lease_watch`]) is quiet.
pub async fn lease_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ha = &shared.ha;
    let mut interval = tokio::time::interval(ha.timing.period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The primary this replica's configuration names, once the lease or the
    // operator said (`None` before: the configuration written at start).
    let mut following: Option<Upstream> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let duty = ha.duty();
        if primary_data(&shared) && is_set(&shared.running) || duty == Duty::Fence {
            match ha.claim().await {
                ClaimOutcome::Held => {
                    if duty == Duty::Fence {
                        tracing::warn!("renewed the primary lease: lifting the fence");
                        ha.set_duty(Duty::Serve);
                    }
                }
                ClaimOutcome::Other { holder } => {
                    if matches!(duty, Duty::Serve | Duty::Fence) {
                        tracing::warn!(%holder, "another instance holds the primary lease: rejoining as its replica");
                        ha.set_duty(Duty::Rejoin);
                    }
                }
                ClaimOutcome::Unknown(LeaseError::Conflict { .. }) => tracing::debug!(
                    "lost a race to renew the primary lease: another write changed it first"
                ),
                ClaimOutcome::Unknown(why) => {
                    tracing::debug!(%why, "cannot renew the primary lease")
                }
            }
        } else if !ha.watch_is_live()
            && let Err(why) = ha.read().await
        {
            tracing::debug!(%why, "cannot read the primary lease");
        }
        let holder = ha.lease_holder();
        if let Some(primary) = holder.as_deref().filter(|h| *h != ha.me)
            && !primary_data(&shared)
            && let Some(lsn) = sql::primary_end_lsn(&shared).await
        {
            ha.heard_primary_end(primary, lsn);
        }
        if !primary_data(&shared) && is_set(&shared.running) {
            // The whole upstream, not only its address: a primary whose pod
            // gained TLS changes how it is reached, not where.
            let upstream = shared.upstream();
            let followed = match redial(following.as_ref(), upstream.as_ref()) {
                Redial::Stay => false,
                Redial::Reload => follow(&shared, upstream.as_ref(), true).await,
                Redial::ReloadUnlessStreaming => {
                    let streaming = sql::streams_from_primary(&shared).await;
                    follow(&shared, upstream.as_ref(), !streaming).await
                }
            };
            if followed {
                following = upstream;
            }
        }
    }
}

/// Point a running replica's `primary_conninfo` at `upstream`: PostgreSQL
/// restarts its WAL receiver when a reload changes it, so the replica leaves
/// a primary that is gone (or cut off, whose connection would otherwise hang
/// until `wal_receiver_timeout`) for the one that took the lease. Without
/// `reload` only the file changes, for the receiver's next connection.
/// `false` when it could not: the next period tries again.
async fn follow(shared: &Shared, upstream: Option<&Upstream>, reload: bool) -> bool {
    if let Err(error) = files::write_config(shared) {
        tracing::warn!(%error, "cannot write the configuration to follow the new primary");
        return false;
    }
    if !reload {
        tracing::info!(
            ?upstream,
            "already streaming from the primary: its address is written for the next connection, the WAL receiver is left alone"
        );
        return true;
    }
    let reloaded = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
        Ok(client) => sql::reload(&client).await,
        Err(error) => Err(error),
    };
    match reloaded {
        Ok(()) => {
            tracing::info!(?upstream, "following the primary");
            true
        }
        Err(error) => {
            tracing::warn!(%error, "cannot reload to follow the new primary");
            false
        }
    }
}

/// The fence check, ten times a period, on a running primary.
pub async fn fence_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ha = &shared.ha;
    let mut interval = tokio::time::interval(ha.timing.fence_check);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        if ha.duty() != Duty::Serve || !primary_data(&shared) || !is_set(&shared.running) {
            continue;
        }
        if let Writable::Fenced { reached, members } = ha.check() {
            tracing::error!(
                reached,
                members,
                "cannot renew the primary lease and reach no majority: fencing (PostgreSQL stops accepting writes)"
            );
            ha.set_duty(Duty::Fence);
        }
    }
}

/// The heartbeat: call every peer's `GET /peer` each period.
pub async fn peer_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ha = &shared.ha;
    let Some(token) = shared.config.token.clone() else {
        tracing::warn!("no instance token: peers cannot be called");
        return;
    };
    let mut interval = tokio::time::interval(ha.timing.period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let members = ha.members();
        let calls = members
            .iter()
            .filter(|m| m.name != ha.me && !m.address.is_empty())
            .map(|member| async {
                match ha.peers.heartbeat(member, token.expose()).await {
                    Ok(answer) => ha.heard_from(&member.name, Some(answer)),
                    Err(why) => tracing::debug!(peer = %member.name, %why, "peer did not answer"),
                }
            });
        futures::future::join_all(calls).await;
    }
}
