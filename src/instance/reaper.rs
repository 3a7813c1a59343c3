//! Collecting children as PID 1. The manager inherits every orphan in the
//! container (backends left behind by a crashed postmaster, for instance) and
//! must reap them, or they stay zombies; a reaper calling `waitpid(-1)` would
//! also steal the exit status of a child that `tokio::process` waits for. So
//! once the bootstrap (the only user of `tokio::process`) is over, a single
//! reaper collects every child and passes the exit statuses on: the
//! supervisor picks out the postmaster's, and [`Reaped`] runs the programs
//! of a rejoin or a switchover against it.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use super::{Error, Shared};

/// Runs programs while the reaper collects every child: the exit status
/// comes from the reaper, the output through files.
pub struct Reaped<'a> {
    pub exits: &'a mut mpsc::UnboundedReceiver<WaitStatus>,
    pub shared: &'a Shared,
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

/// Start the reaper: every child's exit status, from now on, arrives on
/// the channel returned. Subscribes to SIGCHLD before the first child exists,
/// so no exit is missed.
pub fn start() -> Result<mpsc::UnboundedReceiver<WaitStatus>, Error> {
    let mut sigchld = signal(SignalKind::child()).map_err(|source| Error::Signal {
        signal: "SIGCHLD",
        source,
    })?;
    let (exits_tx, exits) = mpsc::unbounded_channel();
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
    Ok(exits)
}

/// What the reaper asks `waitpid` for: exits only, never stops
/// (`WUNTRACED`), so a postmaster a drill froze with SIGSTOP is not taken
/// for a dead one.
pub const REAP_FLAGS: WaitPidFlag = WaitPidFlag::WNOHANG;

/// Collect every exited child; false once the channel is gone.
fn reap(exits: &mpsc::UnboundedSender<WaitStatus>) -> bool {
    loop {
        match waitpid(None::<Pid>, Some(REAP_FLAGS)) {
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

pub async fn wait_for(exits: &mut mpsc::UnboundedReceiver<WaitStatus>, pid: Pid) -> WaitStatus {
    while let Some(status) = exits.recv().await {
        match status {
            WaitStatus::Exited(p, _) | WaitStatus::Signaled(p, _, _) if p == pid => return status,
            _ => {} // an orphan, reaped on behalf of PID 1
        }
    }
    // Only when the reaper is gone, which happens only if this receiver was dropped.
    WaitStatus::StillAlive
}
