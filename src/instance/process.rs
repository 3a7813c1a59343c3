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

use super::{Error, FAST_SHUTDOWN_TIMEOUT, Shared, bootstrap::SECRET_ENV, files};

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
    loop {
        if *stop.borrow() {
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

fn start(shared: &Shared) -> Result<Pid, Error> {
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
