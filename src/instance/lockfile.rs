//! A `postmaster.pid` left behind by a postmaster that did not stop cleanly
//! (a node restart, a container killed, the OOM killer).
//!
//! PostgreSQL removes such a file itself when the PID in it is dead, but
//! refuses to start, forever, when that PID is alive: "lock file
//! postmaster.pid already exists … Is another postmaster (PID 9) running". In
//! a new container the old postmaster's PID is routinely alive, because PIDs
//! start again from 1: a thread of this manager, or any other process, has it.
//!
//! A container has its own PID namespace, and every postmaster this container
//! runs on the data directory is started by this manager, one at a time, after
//! the previous one was reaped. So before anything of ours starts PostgreSQL on
//! the data directory, the file is removed unless its PID is a live `postgres`
//! process here. A postmaster of another pod on the same volume is invisible
//! to this check, as it is to PostgreSQL's own (`kill(pid, 0)` in this
//! namespace); the primary lease is what keeps two primaries apart.

use std::path::Path;

use super::Error;

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "postmaster.pid";

/// What a PID names in this container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// A running process called `postgres`.
    Postgres,
    /// A running process (or a thread) that is something else.
    Other,
    /// Nothing, or a zombie.
    Gone,
}

/// Why the lock file with `contents` is stale, or `None` when a live
/// `postgres` process holds it (then PostgreSQL decides).
pub fn stale(contents: &str, own_pid: i32, holder: impl Fn(i32) -> Holder) -> Option<String> {
    let Some(pid) = contents
        .lines()
        .next()
        .and_then(|line| line.trim().parse::<i32>().ok())
        .filter(|pid| *pid > 0)
    else {
        // PostgreSQL refuses an empty file too: a postmaster that died while
        // writing it.
        return Some("it names no process (a postmaster that died while starting)".to_owned());
    };
    if pid == own_pid {
        return Some(format!("its PID {pid} is this manager's"));
    }
    match holder(pid) {
        Holder::Postgres => None,
        Holder::Other => Some(format!(
            "its PID {pid} now belongs to a process that is not a postmaster"
        )),
        Holder::Gone => Some(format!("its PID {pid} is not running")),
    }
}

/// What `pid` names, from `/proc/<pid>/status`: a thread's ID is a valid
/// `kill` target too, so the thread group must be the PID itself.
fn holder(pid: i32) -> Holder {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => holder_from_status(&status, pid),
        Err(_) => Holder::Gone,
    }
}

fn holder_from_status(status: &str, pid: i32) -> Holder {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    if field("State:").is_some_and(|state| state.starts_with('Z')) {
        return Holder::Gone;
    }
    let leader = field("Tgid:").and_then(|tgid| tgid.parse::<i32>().ok()) == Some(pid);
    if leader && field("Name:") == Some("postgres") {
        Holder::Postgres
    } else {
        Holder::Other
    }
}

/// Remove `pgdata`'s lock file when it is stale; returns why it was removed.
pub fn clear_stale(pgdata: &Path) -> Result<Option<String>, Error> {
    let path = pgdata.join(LOCK_FILE);
    let contents = match std::fs::read_to_string(&path) {
        Ok(contents) => contents,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", &path)(e)),
    };
    let Some(why) = stale(&contents, nix::unistd::getpid().as_raw(), holder) else {
        return Ok(None);
    };
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove", &path)(e)),
    }
    tracing::warn!(path = %path.display(), reason = %why, "removed a stale postmaster.pid");
    Ok(Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "22\n/var/lib/postgresql/data/pgdata\n1764031664\n5432\n/var/run/postgresql\n*\n  5432001         0\nready   \n";

    #[test]
    fn a_pid_taken_by_another_process_or_thread_is_stale() {
        let why = stale(FILE, 1, |_| Holder::Other).expect("stale");
        assert!(
            why.contains("PID 22") && why.contains("not a postmaster"),
            "{why}"
        );
        let thread = "Name:\ttokio-runtime-w\nState:\tS (sleeping)\nTgid:\t1\nPid:\t22\n";
        assert_eq!(holder_from_status(thread, 22), Holder::Other);
        let postgres_thread = "Name:\tpostgres\nState:\tS (sleeping)\nTgid:\t20\nPid:\t22\n";
        assert_eq!(holder_from_status(postgres_thread, 22), Holder::Other);
        let shell = "Name:\tsh\nState:\tS (sleeping)\nTgid:\t22\nPid:\t22\n";
        assert_eq!(holder_from_status(shell, 22), Holder::Other);
    }

    #[test]
    fn a_live_postgres_keeps_the_file() {
        assert_eq!(stale(FILE, 1, |_| Holder::Postgres), None);
        let postmaster =
            "Name:\tpostgres\nUmask:\t0077\nState:\tS (sleeping)\nTgid:\t22\nPid:\t22\n";
        assert_eq!(holder_from_status(postmaster, 22), Holder::Postgres);
    }

    #[test]
    fn a_dead_pid_a_zombie_our_own_pid_or_no_pid_is_stale() {
        assert!(stale(FILE, 1, |_| Holder::Gone).is_some_and(|w| w.contains("not running")));
        let zombie = "Name:\tpostgres\nState:\tZ (zombie)\nTgid:\t22\nPid:\t22\n";
        assert_eq!(holder_from_status(zombie, 22), Holder::Gone);
        // Whatever /proc says about PID 22, it is the manager itself.
        assert!(stale(FILE, 22, |_| Holder::Postgres).is_some_and(|w| w.contains("manager")));
        for broken in ["", "\n", "abc\n/var/lib", "-5\n", "0\n"] {
            assert!(
                stale(broken, 1, |_| Holder::Postgres).is_some(),
                "{broken:?}"
            );
        }
    }

    #[test]
    fn clear_stale_removes_a_stale_file_and_accepts_none() {
        let dir = std::env::temp_dir().join(format!("tusk-lockfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        assert_eq!(clear_stale(&dir).expect("no file"), None);
        // This test's own PID names a process that is not postgres.
        let own = std::process::id();
        std::fs::write(dir.join(LOCK_FILE), format!("{own}\n")).expect("write");
        // Our own PID is refused as the manager's: the file goes.
        assert!(clear_stale(&dir).expect("clear").is_some());
        assert!(!dir.join(LOCK_FILE).exists());
        std::fs::remove_dir_all(&dir).expect("rmdir");
    }
}
