//! Drill faults the operator's drill controller injects through the instance
//! API ([`crate::contract::drill`]), each with a deadline this manager keeps
//! by itself: a fault never outlives its deadline, even when the operator
//! that asked for it is gone.
//!
//! - freeze: SIGSTOP to every PostgreSQL process of the container (the
//!   postmaster first, so that it forks nothing new, then its children, until
//!   a pass finds none left running), SIGCONT at the deadline or at once with
//!   `seconds: 0`. The manager itself is never stopped. A stopped postmaster
//!   is not a dead one: the reaper asks `waitpid` for exits only, never for
//!   stops, so the supervisor goes on waiting for it.
//! - kill-postgres: SIGKILL to the postmaster; the supervisor sees it die and
//!   does what it does after any crash.
//! - store-outage: WAL archiving meets an unreachable store until the
//!   deadline ([`crate::wal::outage`]: a file `tusk wal-archive` reads).
//! - partition: the connections that outlive the drill's NetworkPolicy are
//!   ended once it holds ([`super::partition`]).
//!
//! The same process scan serves the hang fence of [`super::ha`]: a hung
//! PostgreSQL is killed with every child ([`signal_postgres`]).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::contract::drill::{ActiveFault, ActiveFaults, FaultRequest, FaultResponse};

use super::Shared;

/// Why a fault could not be injected.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// PostgreSQL is not running here: there is nothing to freeze or kill.
    #[error("PostgreSQL is not running")]
    NotRunning,
    #[error("cannot signal PostgreSQL (pid {pid}): {source}")]
    Signal {
        pid: i32,
        #[source]
        source: nix::Error,
    },
    #[error("cannot {action} the store outage file: {source}")]
    OutageFile {
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A freeze in effect.
#[derive(Clone, Debug)]
struct Freeze {
    until: SystemTime,
    pids: Vec<i32>,
    generation: u64,
}

/// The faults in effect, with their deadlines.
#[derive(Default)]
pub struct Faults {
    freeze: Mutex<Option<Freeze>>,
    /// Each injection's number: an undo scheduled for an older one is void
    /// once a newer one replaced it.
    generation: AtomicU64,
    outage_generation: AtomicU64,
    /// A partition drill's record ([`super::partition`]).
    pub(super) partition: super::partition::Partition,
}

impl Faults {
    fn next(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn freeze_state(&self) -> std::sync::MutexGuard<'_, Option<Freeze>> {
        self.freeze.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The faults in effect at `now`, for `/status`; `None` when none is.
    pub fn report(&self, pgdata: &Path, now: SystemTime) -> Option<ActiveFaults> {
        let freeze = self.freeze_state().as_ref().map(|f| ActiveFault {
            until: rfc3339(f.until),
            pids: f
                .pids
                .iter()
                .filter_map(|p| u32::try_from(*p).ok())
                .collect(),
        });
        let store_outage = crate::wal::outage::active(pgdata, now).map(|until| ActiveFault {
            until: rfc3339(until),
            pids: Vec::new(),
        });
        let partition = self.partition.until(now).map(|until| ActiveFault {
            until: rfc3339(until),
            pids: Vec::new(),
        });
        let faults = ActiveFaults {
            freeze,
            store_outage,
            partition,
        };
        (!faults.is_empty()).then_some(faults)
    }
}

/// `POST /drill/freeze`.
pub fn freeze(shared: &Arc<Shared>, request: &FaultRequest) -> Result<FaultResponse, FaultError> {
    let faults = &shared.drill;
    if request.seconds == 0 {
        thaw(shared, None);
        return Ok(FaultResponse {
            active: false,
            until: None,
            pids: Vec::new(),
        });
    }
    let postmaster = postmaster(shared).ok_or(FaultError::NotRunning)?;
    let stopped = signal_postgres(Some(postmaster), Signal::SIGSTOP)?;
    let hold = Duration::from_secs(u64::from(request.seconds));
    let until = SystemTime::now() + hold;
    let generation = faults.next();
    {
        let mut state = faults.freeze_state();
        // A freeze renewed before its end keeps every process it stopped.
        let mut pids: BTreeSet<i32> = state
            .take()
            .map(|f| f.pids)
            .unwrap_or_default()
            .into_iter()
            .collect();
        pids.extend(&stopped);
        *state = Some(Freeze {
            until,
            pids: pids.into_iter().collect(),
            generation,
        });
    }
    tracing::warn!(seconds = request.seconds, pids = ?stopped, "drill: PostgreSQL frozen (SIGSTOP)");
    let at_deadline = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        thaw(&at_deadline, Some(generation));
    });
    Ok(FaultResponse {
        active: true,
        until: Some(rfc3339(until)),
        pids: to_u32(&stopped),
    })
}

/// SIGCONT to what the freeze stopped (and to any PostgreSQL process still
/// stopped: harmless to a running one). `Some(generation)`: the deadline of
/// that freeze, void if another replaced it since.
fn thaw(shared: &Shared, generation: Option<u64>) {
    let freeze = {
        let mut state = shared.drill.freeze_state();
        if !undo_applies(state.as_ref().map(|f| f.generation), generation) {
            return;
        }
        state.take()
    };
    let mut pids: BTreeSet<i32> = freeze
        .map(|f| f.pids)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let postmaster = Some(shared.postmaster.load(Ordering::SeqCst)).filter(|p| *p > 0);
    pids.extend(postgres_pids(postmaster));
    for pid in &pids {
        // A process that died meanwhile (a fence killed it) is no error.
        let _ = kill(Pid::from_raw(*pid), Signal::SIGCONT);
    }
    tracing::warn!(pids = ?pids, "drill: PostgreSQL continued (SIGCONT)");
}

/// Whether an undo applies to the freeze in effect (`current`, its
/// generation): one asked for now (`None`) always does, a deadline only to
/// the freeze that set it, not to a later one that replaced it.
fn undo_applies(current: Option<u64>, deadline_of: Option<u64>) -> bool {
    match deadline_of {
        None => true,
        Some(generation) => current == Some(generation),
    }
}

/// `POST /drill/kill-postgres`.
pub fn kill_postgres(shared: &Shared) -> Result<FaultResponse, FaultError> {
    let postmaster = postmaster(shared).ok_or(FaultError::NotRunning)?;
    kill(postmaster, Signal::SIGKILL).map_err(|source| FaultError::Signal {
        pid: postmaster.as_raw(),
        source,
    })?;
    tracing::warn!(
        pid = postmaster.as_raw(),
        "drill: postmaster killed (SIGKILL)"
    );
    Ok(FaultResponse {
        active: false,
        until: None,
        pids: to_u32(&[postmaster.as_raw()]),
    })
}

/// `POST /drill/store-outage`.
pub fn store_outage(
    shared: &Arc<Shared>,
    request: &FaultRequest,
) -> Result<FaultResponse, FaultError> {
    let pgdata = &shared.config.pgdata;
    let generation = shared
        .drill
        .outage_generation
        .fetch_add(1, Ordering::SeqCst)
        + 1;
    if request.seconds == 0 {
        crate::wal::outage::end(pgdata).map_err(|source| FaultError::OutageFile {
            action: "remove",
            source,
        })?;
        tracing::warn!("drill: store outage ended");
        return Ok(FaultResponse {
            active: false,
            until: None,
            pids: Vec::new(),
        });
    }
    let hold = Duration::from_secs(u64::from(request.seconds));
    let until = SystemTime::now() + hold;
    crate::wal::outage::begin(pgdata, until).map_err(|source| FaultError::OutageFile {
        action: "write",
        source,
    })?;
    tracing::warn!(
        seconds = request.seconds,
        "drill: WAL archiving goes to an unreachable store"
    );
    let at_deadline = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        // `wal-archive` ignores the file from the deadline on; removing it
        // keeps the volume tidy, unless a newer outage replaced it.
        if at_deadline.drill.outage_generation.load(Ordering::SeqCst) == generation {
            let pgdata = &at_deadline.config.pgdata;
            if let Err(error) = crate::wal::outage::end(pgdata) {
                tracing::warn!(%error, "cannot remove the store outage file");
            }
            tracing::warn!("drill: store outage over");
        }
    });
    Ok(FaultResponse {
        active: true,
        until: Some(rfc3339(until)),
        pids: Vec::new(),
    })
}

/// The running postmaster, as the supervisor started it.
fn postmaster(shared: &Shared) -> Option<Pid> {
    let pid = shared.postmaster.load(Ordering::SeqCst);
    (pid > 0 && super::is_set(&shared.running)).then(|| Pid::from_raw(pid))
}

/// Send `signal` to the postmaster first (once stopped or killed it forks
/// nothing new), then to every other PostgreSQL process of the container,
/// scanning again until a pass finds no process it has not signalled. The
/// pids signalled.
pub fn signal_postgres(postmaster: Option<Pid>, signal: Signal) -> Result<Vec<i32>, FaultError> {
    let mut signalled = BTreeSet::new();
    if let Some(pid) = postmaster {
        kill(pid, signal).map_err(|source| FaultError::Signal {
            pid: pid.as_raw(),
            source,
        })?;
        signalled.insert(pid.as_raw());
    }
    let postmaster = postmaster.map(Pid::as_raw);
    for _ in 0..10 {
        let found: Vec<i32> = postgres_pids(postmaster)
            .into_iter()
            .filter(|p| !signalled.contains(p))
            .collect();
        if found.is_empty() {
            break;
        }
        for pid in found {
            // Gone since the scan: nothing left to signal.
            let _ = kill(Pid::from_raw(pid), signal);
            signalled.insert(pid);
        }
    }
    Ok(signalled.into_iter().collect())
}

/// The PostgreSQL processes of this manager: the postmaster's children, and
/// those this manager inherited when their postmaster died (as the
/// container's PID 1 it adopts every orphan). Never another program, never
/// a process of someone else (outside a container, `/proc` shows the whole
/// machine).
pub fn postgres_pids(postmaster: Option<i32>) -> Vec<i32> {
    // Orphans are adopted by PID 1: this manager in a container, someone
    // else's init in a test.
    let adopter = (std::process::id() == 1).then_some(1);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let process = Process::parse(&stat)?;
            process.ours(adopter, postmaster).then_some(process.pid)
        })
        .collect()
}

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: i32,
    /// The program's name (PostgreSQL's process titles leave it alone).
    pub comm: String,
    /// `S`, `R`, `T` (stopped), `Z` (zombie)…
    pub state: String,
    pub ppid: i32,
}

impl Process {
    pub fn parse(stat: &str) -> Option<Process> {
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let pid = stat.get(..open)?.trim().parse().ok()?;
        let comm = stat.get(open + 1..close)?.to_owned();
        let mut rest = stat.get(close + 1..)?.split_whitespace();
        let state = rest.next()?.to_owned();
        let ppid = rest.next()?.parse().ok()?;
        Some(Process {
            pid,
            comm,
            state,
            ppid,
        })
    }

    /// A live `postgres` process that is the postmaster, its child, or an
    /// orphan this manager (`adopter`, when it is PID 1) adopted.
    pub fn ours(&self, adopter: Option<i32>, postmaster: Option<i32>) -> bool {
        let related = Some(self.pid) == postmaster
            || Some(self.ppid) == postmaster
            || Some(self.ppid) == adopter;
        self.comm == "postgres" && !matches!(self.state.as_str(), "Z" | "X") && related
    }
}

fn to_u32(pids: &[i32]) -> Vec<u32> {
    pids.iter().filter_map(|p| u32::try_from(*p).ok()).collect()
}

pub(super) fn rfc3339(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at)
        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_postmaster_its_children_and_adopted_orphans_are_ours() {
        let adopter = Some(1);
        let postmaster = Some(42);
        // (a /proc/<pid>/stat line, whether it is one of ours)
        let rows = [
            ("42 (postgres) S 1 42 42 0 -1", true),
            ("43 (postgres) T 42 42 42 0 -1", true),
            // A backend whose postmaster died: adopted by PID 1.
            ("44 (postgres) S 1 42 42 0 -1", true),
            ("45 (postgres) Z 42 42 42 0 -1", false),
            ("1 (tusk) S 0 1 1 0 -1", false),
            // archive_command's shell, and what it runs.
            ("46 (sh) S 42 42 42 0 -1", false),
            // Someone else's server (outside a container /proc shows it).
            ("900 (postgres) S 899 899 899 0 -1", false),
            // A command name with a space and parentheses of its own.
            ("47 (x) (postgres) S 42", false),
        ];
        for (stat, expected) in rows {
            let process = Process::parse(stat).expect(stat);
            assert_eq!(process.ours(adopter, postmaster), expected, "{stat}");
        }
        // Not PID 1 (a test): orphans are someone else's.
        let orphan = Process::parse("44 (postgres) S 1 42").expect("parses");
        assert!(!orphan.ours(None, postmaster));
        assert_eq!(Process::parse("garbage"), None);
        assert_eq!(
            Process::parse("7 (a b) R 3 7"),
            Some(Process {
                pid: 7,
                comm: "a b".into(),
                state: "R".into(),
                ppid: 3
            })
        );
    }

    #[test]
    fn a_deadline_undoes_only_its_own_freeze() {
        // (freeze in effect, the undo's freeze or None for a request, applies)
        let rows = [
            (Some(3), Some(3), true),
            (Some(4), Some(3), false),
            (None, Some(3), false),
            (Some(3), None, true),
            (None, None, true),
        ];
        for (current, asked, applies) in rows {
            assert_eq!(
                undo_applies(current, asked),
                applies,
                "{current:?} {asked:?}"
            );
        }
    }

    #[test]
    fn deadlines_are_reported_to_the_second() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_400);
        assert_eq!(rfc3339(at), "2023-11-14T22:13:20Z");
    }

    /// A child of the test process, stopped as a freeze stops PostgreSQL.
    #[test]
    fn a_stopped_child_is_not_reported_as_exited() {
        use nix::sys::wait::{WaitStatus, waitpid};
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        kill(pid, Signal::SIGSTOP).expect("stop");
        std::thread::sleep(Duration::from_millis(200));
        // The reaper's flags: exits only.
        assert_eq!(
            waitpid(pid, Some(super::super::reaper::REAP_FLAGS)).expect("waitpid"),
            WaitStatus::StillAlive
        );
        kill(pid, Signal::SIGCONT).expect("continue");
        // SIGKILL reaches a stopped process too (the hang fence relies on it).
        kill(pid, Signal::SIGSTOP).expect("stop");
        kill(pid, Signal::SIGKILL).expect("kill");
        assert!(matches!(
            waitpid(pid, None).expect("waitpid"),
            WaitStatus::Signaled(_, Signal::SIGKILL, _)
        ));
        // Already collected above: this only satisfies the handle.
        let _ = child.wait();
    }
}
