//! Supervising the postmaster.
//!
//! The manager is PID 1, so it inherits every orphan in the container (backends
//! left behind by a crashed postmaster, for instance) and must reap them, or they
//! stay zombies. A reaper calling `waitpid(-1)` would also steal the exit status
//! of a child that `tokio::process` waits for; so once the bootstrap (the only
//! user of `tokio::process`) is over, the postmaster is started with
//! `std::process` and a single reaper collects every child, passing exit
//! statuses on to the supervisor, which picks out the postmaster's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::ha::{self, Duty};
use super::{Error, FAST_SHUTDOWN_TIMEOUT, Shared, bootstrap::SECRET_ENV, files, lockfile, rejoin};

const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A postmaster that ran this long before dying counts as healthy: the next
/// restart starts from the shortest backoff again.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Start the postmaster, restart it with backoff when it dies, and stop it with a
/// fast shutdown when `stop` turns true. Returns once it has exited.
pub async fn supervise(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Result<(), Error> {
    // Subscribe to SIGCHLD before the first child exists, so no exit is missed.
    let mut sigchld = signal(SignalKind::child()).map_err(|source| Error::Signal {
        signal: "SIGCHLD",
        source,
    })?;
    let (exits_tx, mut exits) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            // The timer is a backstop: signals coalesce, and one sent before
            // the subscription is not delivered.
            tokio::select! {
                _ = sigchld.recv() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if !reap(&exits_tx) {
                return;
            }
        }
    });

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
        {
            let _guard = shared.config_lock.lock().await;
            files::write_config(&shared)?;
        }
        let pid = start(&shared)?;
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
                let wanted = shared.ha.duty();
                if matches!(wanted, Duty::Handover { .. }) {
                    shutdown(pid, &mut exits).await;
                } else {
                    // A fence must be quick: no checkpoint, no waiting for
                    // walsenders that may never get through.
                    immediate_shutdown(pid, &mut exits).await;
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
            ha::Claim::Held => return Ok(true),
            ha::Claim::Other { holder } => {
                tracing::warn!(%holder, "another instance holds the primary lease: this one rejoins as its replica");
                ha.set_duty(Duty::Rejoin);
            }
            ha::Claim::Unknown(why) => {
                if waited.is_multiple_of(10) {
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
    shared.ha.transfer(target).await?;
    files::mark_standby(&shared.config.pgdata).map_err(|e| e.to_string())?;
    tracing::info!(%target, %final_lsn, "handed the primary role over");
    Ok(crate::contract::SwitchoverResponse {
        target: target.to_owned(),
        final_lsn,
    })
}

const REJOIN_RETRY: Duration = Duration::from_secs(2);
/// How long a switchover waits for the target to receive the last WAL.
const HANDOVER_WAIT: Duration = Duration::from_secs(30);

/// Runs programs while the reaper collects every child: the exit status
/// comes from the reaper, the output through files.
pub struct Reaped<'a> {
    exits: &'a mut mpsc::UnboundedReceiver<WaitStatus>,
    shared: &'a Shared,
}

impl Reaped<'_> {
    /// Run `command` to completion; its standard output, or an error with
    /// the tail of its standard error.
    pub async fn run(
        &mut self,
        mut command: std::process::Command,
        program: &str,
    ) -> Result<String, Error> {
        let dir = &self.shared.config.socket_dir;
        let out_path = dir.join(".tusk-child.out");
        let err_path = dir.join(".tusk-child.err");
        let out = std::fs::File::create(&out_path).map_err(Error::io("create", &out_path))?;
        let err = std::fs::File::create(&err_path).map_err(Error::io("create", &err_path))?;
        for name in SECRET_ENV {
            command.env_remove(name);
        }
        let child = command
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| Error::Spawn {
                program: program.to_owned(),
                source,
            })?;
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let status = wait_for(self.exits, pid).await;
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
        match status {
            WaitStatus::Exited(_, 0) => Ok(stdout),
            status => Err(Error::Command {
                program: program.to_owned(),
                status: format!("{status:?}"),
                stderr: super::bootstrap::stderr_tail(&stderr).to_owned(),
            }),
        }
    }
}

fn start(shared: &Shared) -> Result<Pid, Error> {
    lockfile::clear_stale(&shared.config.pgdata)?;
    let program = shared.bindir.join("postgres");
    let mut command = std::process::Command::new(&program);
    command
        .arg("-D")
        .arg(&shared.config.pgdata)
        .stdin(std::process::Stdio::null());
    for name in SECRET_ENV {
        command.env_remove(name);
    }
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

/// Collect every exited child; false once the channel is gone.
fn reap(exits: &mpsc::UnboundedSender<WaitStatus>) -> bool {
    loop {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return true,
            Ok(status) => {
                if exits.send(status).is_err() {
                    return false;
                }
            }
            Err(Errno::EINTR) => {}
            Err(err) => {
                tracing::warn!(error = %err, "waitpid failed");
                return true;
            }
        }
    }
}

async fn wait_for(exits: &mut mpsc::UnboundedReceiver<WaitStatus>, pid: Pid) -> WaitStatus {
    while let Some(status) = exits.recv().await {
        match status {
            WaitStatus::Exited(p, _) | WaitStatus::Signaled(p, _, _) if p == pid => return status,
            _ => {} // an orphan, reaped on behalf of PID 1
        }
    }
    // Only when the reaper is gone, which happens only if this receiver was dropped.
    WaitStatus::StillAlive
}

/// SIGINT is PostgreSQL's fast shutdown: roll back open transactions, checkpoint,
/// exit. If it takes too long, SIGQUIT (immediate shutdown, crash recovery on the
/// next start) rather than leaving the kubelet to SIGKILL everything.
async fn shutdown(pid: Pid, exits: &mut mpsc::UnboundedReceiver<WaitStatus>) {
    tracing::info!(pid = pid.as_raw(), "fast shutdown of postgres");
    if let Err(err) = kill(pid, Signal::SIGINT) {
        tracing::warn!(error = %err, "cannot signal postgres");
    }
    match tokio::time::timeout(FAST_SHUTDOWN_TIMEOUT, wait_for(exits, pid)).await {
        Ok(status) => tracing::info!(?status, "postgres stopped"),
        Err(_) => {
            tracing::warn!("fast shutdown timed out; immediate shutdown");
            let _ = kill(pid, Signal::SIGQUIT);
            let status = wait_for(exits, pid).await;
            tracing::info!(?status, "postgres stopped");
        }
    }
}

/// SIGQUIT: PostgreSQL's immediate shutdown. Backends exit at once, nothing
/// more is acknowledged; the next start runs crash recovery.
async fn immediate_shutdown(pid: Pid, exits: &mut mpsc::UnboundedReceiver<WaitStatus>) {
    tracing::warn!(pid = pid.as_raw(), "immediate shutdown of postgres");
    if let Err(err) = kill(pid, Signal::SIGQUIT) {
        tracing::warn!(error = %err, "cannot signal postgres");
    }
    let status = wait_for(exits, pid).await;
    tracing::info!(?status, "postgres stopped");
}
