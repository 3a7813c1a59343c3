//! Supervising the postmaster: it starts (a primary's data only under the
//! lease), restarts with backoff when it dies (a full volume included: it
//! PANICs on the WAL write that fails, and keeps failing crash recovery
//! until the volume grows), stops for a fence, a rejoin
//! or a switchover, is killed with every child when it hangs (then the
//! lease is yielded, see [`super::ha`]), and stops cleanly on shutdown. It is started with
//! `std::process`, its exit collected by the [`super::reaper`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::upgrade::child;

use super::ha::{self, ClaimOutcome, Duty, LeaseError};
use super::reaper::{self, Reaped, wait_for};
use super::{Error, FAST_SHUTDOWN_TIMEOUT, Shared, files, lockfile, rejoin};

const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A postmaster that ran this long before dying counts as healthy: the next
/// restart starts from the shortest backoff again.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Start the postmaster, restart it with backoff when it dies, and stop it with a
/// fast shutdown when `stop` turns true. Returns once it has exited.
pub async fn supervise(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Result<(), Error> {
    let mut exits = reaper::start()?;

    let mut backoff = MIN_BACKOFF;
    let mut duty = shared.ha.subscribe();
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        // A primary's data starts only under the lease; a fence or a rejoin
        // is carried out before anything starts.
        let mut reaped = Reaped {
            exits: &mut exits,
            shared: &shared,
        };
        if !gate(&shared, &mut reaped, &mut duty, &mut stop).await? {
            return Ok(());
        }
        // Re-render before every start: a promotion or a crash may have changed
        // the role, and a restart is when postmaster-level settings apply.
        let written = {
            let _guard = shared.config_lock.lock().await;
            files::write_config(&shared)
        };
        // A full volume is no reason to give up: once it grows, PostgreSQL
        // starts (and recovers) again, so keep trying as after a crash.
        if let Err(error) = &written
            && error.no_space()
        {
            tracing::error!(%error, retry_in = ?backoff, "the data volume is full; PostgreSQL starts once it has room");
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.wait_for(|stop| *stop) => return Ok(()),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            continue;
        }
        written?;
        let pid = start(&shared)?;
        shared.postmaster.store(pid.as_raw(), Ordering::SeqCst);
        shared.running.store(true, Ordering::SeqCst);
        let started = Instant::now();
        tracing::info!(pid = pid.as_raw(), "started postgres");

        let status = tokio::select! {
            status = wait_for(&mut exits, pid) => status,
            _ = stop.wait_for(|stop| *stop) => {
                shutdown(pid, &mut exits).await;
                shared.running.store(false, Ordering::SeqCst);
                // Stopped cleanly: a replica may take over at once.
                shared.ha.release().await;
                return Ok(());
            }
            () = shared.restart.notified() => {
                // Asked for (a postmaster-level parameter changed): a clean stop
                // and an immediate start, without the crash backoff.
                tracing::info!("restarting postgres on request");
                // Not running from here on, so a second request during the
                // shutdown is refused rather than queued for another restart.
                shared.running.store(false, Ordering::SeqCst);
                shutdown(pid, &mut exits).await;
                continue;
            }
            _ = duty.wait_for(|d| *d != Duty::Serve) => {
                shared.running.store(false, Ordering::SeqCst);
                match shared.ha.duty() {
                    Duty::Handover { .. } => shutdown(pid, &mut exits).await,
                    // Hung: it would handle no other signal.
                    Duty::Yield => kill_all(pid, &mut exits).await,
                    // A fence must be quick: no checkpoint, no waiting for
                    // walsenders that may never get through.
                    _ => immediate_shutdown(pid, &mut exits).await,
                }
                continue;
            }
        };
        shared.running.store(false, Ordering::SeqCst);
        if started.elapsed() >= HEALTHY_RUN {
            backoff = MIN_BACKOFF;
        }
        tracing::warn!(?status, retry_in = ?backoff, "postgres exited unexpectedly; restarting");
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Before PostgreSQL starts: carry out the duty, and make sure a primary's
/// data directory holds the lease. `false` when asked to stop meanwhile.
async fn gate(
    shared: &Shared,
    reaped: &mut Reaped<'_>,
    duty: &mut watch::Receiver<Duty>,
    stop: &mut watch::Receiver<bool>,
) -> Result<bool, Error> {
    let ha = &shared.ha;
    let mut waited = 0u32;
    loop {
        if *stop.borrow() {
            return Ok(false);
        }
        match ha.duty() {
            Duty::Fence => {
                tracing::warn!("fenced: PostgreSQL stays stopped until the lease is renewed");
                tokio::select! {
                    _ = duty.wait_for(|d| *d != Duty::Fence) => {}
                    _ = stop.wait_for(|stop| *stop) => return Ok(false),
                }
                continue;
            }
            Duty::Rejoin => {
                match rejoin::rejoin(shared, reaped).await {
                    Ok(()) => ha.set_duty(Duty::Serve),
                    Err(error) => {
                        tracing::warn!(%error, "cannot rejoin yet; trying again");
                        tokio::select! {
                            _ = tokio::time::sleep(REJOIN_RETRY) => {}
                            _ = stop.wait_for(|stop| *stop) => return Ok(false),
                        }
                    }
                }
                continue;
            }
            Duty::Yield => {
                if !ha::yield_lease(shared, stop).await {
                    return Ok(false);
                }
                continue;
            }
            Duty::Handover { target } => {
                let result = handover(shared, reaped, &target).await;
                if let Err(why) = &result {
                    tracing::error!(%why, %target, "switchover failed; staying primary");
                }
                ha.set_duty(Duty::Serve);
                ha.handover_done(result);
                continue;
            }
            Duty::Serve => {}
        }
        if !ha.enabled() || !ha::primary_data(shared) {
            return Ok(true);
        }
        match ha.claim().await {
            ClaimOutcome::Held => return Ok(true),
            ClaimOutcome::Other { holder } => {
                tracing::warn!(%holder, "another instance holds the primary lease: this one rejoins as its replica");
                ha.set_duty(Duty::Rejoin);
            }
            ClaimOutcome::Unknown(why) => {
                if let LeaseError::Conflict { .. } = why {
                    tracing::info!(
                        "lost a race for the primary lease: another write changed it first"
                    );
                } else if waited.is_multiple_of(10) {
                    tracing::warn!(%why, "a primary's data directory waits for the primary lease");
                }
                waited += 1;
                tokio::select! {
                    _ = tokio::time::sleep(ha.timing.period) => {}
                    _ = stop.wait_for(|stop| *stop) => return Ok(false),
                }
            }
        }
    }
}

/// A switchover's part on the old primary, PostgreSQL already stopped
/// cleanly: wait until the target received the shutdown checkpoint, hand it
/// the lease, and become a standby. On any failure the data is still the
/// primary's and the lease still this instance's: it starts as primary again.
async fn handover(
    shared: &Shared,
    reaped: &mut Reaped<'_>,
    target: &str,
) -> super::ha::HandoverResult {
    let final_lsn = rejoin::final_lsn(shared, reaped)
        .await
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + HANDOVER_WAIT;
    loop {
        let received = shared.ha.peer_received(target).await;
        match received {
            Ok(Some(lsn)) if lsn > final_lsn => break,
            Ok(_) | Err(_) if Instant::now() >= deadline => {
                return Err(format!(
                    "{target} did not receive WAL up to {final_lsn} within {} s ({received:?})",
                    HANDOVER_WAIT.as_secs()
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    shared
        .ha
        .transfer(target)
        .await
        .map_err(|e| e.to_string())?;
    files::mark_standby(&shared.config.pgdata).map_err(|e| e.to_string())?;
    tracing::info!(%target, %final_lsn, "handed the primary role over");
    // Off -rw before this instance starts again as a standby (it would be
    // Ready, and take writes it must refuse, until the operator relabels it).
    shared.ha.label_self(crate::contract::Role::Replica).await;
    Ok(crate::contract::SwitchoverResponse {
        target: target.to_owned(),
        final_lsn,
    })
}

const REJOIN_RETRY: Duration = Duration::from_secs(2);
/// How long a switchover waits for the target to receive the last WAL.
const HANDOVER_WAIT: Duration = Duration::from_secs(30);

fn start(shared: &Shared) -> Result<Pid, Error> {
    lockfile::clear_stale(&shared.config.pgdata)?;
    let program = shared.bindir.join("postgres");
    let mut command = child::command(&program);
    command
        .arg("-D")
        .arg(&shared.config.pgdata)
        .stdin(std::process::Stdio::null());
    // The Child handle is dropped without waiting: the reaper collects the exit.
    let child = command.spawn().map_err(|source| Error::Spawn {
        program: program.display().to_string(),
        source,
    })?;
    let pid = i32::try_from(child.id()).map_err(|_| Error::Spawn {
        program: program.display().to_string(),
        source: std::io::Error::other("pid out of range"),
    })?;
    Ok(Pid::from_raw(pid))
}

/// SIGINT is PostgreSQL's fast shutdown: roll back open transactions, checkpoint,
/// exit. If it takes too long, SIGQUIT (immediate shutdown, crash recovery on the
/// next start, and SIGKILL if even that is not acted on) rather than leaving
/// the kubelet to SIGKILL everything.
async fn shutdown(pid: Pid, exits: &mut mpsc::UnboundedReceiver<WaitStatus>) {
    tracing::info!(pid = pid.as_raw(), "fast shutdown of postgres");
    if let Err(err) = kill(pid, Signal::SIGINT) {
        tracing::warn!(error = %err, "cannot signal postgres");
    }
    match tokio::time::timeout(FAST_SHUTDOWN_TIMEOUT, wait_for(exits, pid)).await {
        Ok(status) => tracing::info!(?status, "postgres stopped"),
        Err(_) => {
            tracing::warn!("fast shutdown timed out; immediate shutdown");
            immediate_shutdown(pid, exits).await;
        }
    }
}

/// SIGQUIT: PostgreSQL's immediate shutdown. Backends exit at once, nothing
/// more is acknowledged; the next start runs crash recovery. A postmaster
/// that does not act on it (stopped, or stuck) is killed after
/// [`IMMEDIATE_SHUTDOWN_TIMEOUT`].
async fn immediate_shutdown(pid: Pid, exits: &mut mpsc::UnboundedReceiver<WaitStatus>) {
    tracing::warn!(pid = pid.as_raw(), "immediate shutdown of postgres");
    if let Err(err) = kill(pid, Signal::SIGQUIT) {
        tracing::warn!(error = %err, "cannot signal postgres");
    }
    match tokio::time::timeout(IMMEDIATE_SHUTDOWN_TIMEOUT, wait_for(exits, pid)).await {
        Ok(status) => tracing::info!(?status, "postgres stopped"),
        Err(_) => kill_all(pid, exits).await,
    }
}

/// How long an immediate shutdown may take before everything is killed.
const IMMEDIATE_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// SIGKILL to the postmaster and every PostgreSQL process of the container
/// (a killed postmaster leaves its backends behind, and a stopped backend
/// would otherwise wake up later): the only signal a stopped or stuck
/// process cannot ignore, and one that ends it before it runs another
/// instruction, so nothing more is acknowledged once it is sent.
async fn kill_all(pid: Pid, exits: &mut mpsc::UnboundedReceiver<WaitStatus>) {
    match super::drill::signal_postgres(Some(pid), Signal::SIGKILL) {
        Ok(pids) => tracing::warn!(?pids, "killed PostgreSQL (SIGKILL)"),
        Err(error) => tracing::warn!(%error, "cannot kill PostgreSQL"),
    }
    let status = wait_for(exits, pid).await;
    tracing::info!(?status, "postgres stopped");
}
