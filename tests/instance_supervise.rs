//! Component test: the manager restarts a postmaster that dies, and starts
//! one over the lock file a killed container left behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use instance_support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A ready primary `orders-1` holding table `survives` with the row 7.
async fn primary_with_a_row(dir: &TestDir, pg: &Pg) -> Manager {
    let mut manager = Manager::start(dir, Options::primary(pg, "orders-1"));
    manager.wait_ready(Duration::from_secs(60)).await;
    superuser(manager.pg_port)
        .await
        .batch_execute("CREATE TABLE survives (id int); INSERT INTO survives VALUES (7)")
        .await
        .expect("write");
    manager
}

/// (4) SIGKILL the postmaster: the manager starts a new one on the same data,
/// and the instance answers again.
async fn a_killed_postgres_is_restarted(pg: Pg) {
    let dir = TestDir::new(&format!("supervise{}", pg.major));
    let mut manager = primary_with_a_row(&dir, &pg).await;

    let old = manager.postmaster_pid().expect("postmaster.pid");
    kill(Pid::from_raw(old), Signal::SIGKILL).expect("kill the postmaster");

    let new = eventually("a new postmaster", Duration::from_secs(60), || {
        let pid = manager.postmaster_pid().filter(|pid| *pid != old);
        async move { pid }
    })
    .await;
    assert_ne!(new, old);
    manager.wait_ready(Duration::from_secs(60)).await;
    assert_eq!(manager.status().await["role"], "primary");
    let id: i32 = superuser(manager.pg_port)
        .await
        .query_one("SELECT id FROM survives", &[])
        .await
        .expect("read after restart")
        .get(0);
    assert_eq!(id, 7);
    assert!(
        manager
            .logs()
            .contains("postgres exited unexpectedly; restarting"),
        "{}",
        manager.logs()
    );
    assert!(manager.stop().expect("running").success());
}
per_major!(a_killed_postgres_is_restarted);

/// Whether any process still works in `pgdata` (a postmaster and its backends
/// have it as their working directory).
fn works_in(pgdata: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .flatten()
        .any(|entry| std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == pgdata))
}

/// (5) The container dies with its postmaster (node restart, OOM): the lock
/// file stays, and in the next container its PID belongs to another process of
/// the same user (here a `sleep`; in a pod, often a thread of the manager).
/// PostgreSQL alone takes that for a running postmaster and refuses to start,
/// forever; the manager removes the stale file and the data comes back.
async fn a_stale_lock_file_does_not_keep_postgres_down(pg: Pg) {
    let dir = TestDir::new(&format!("stalepid{}", pg.major));
    let mut manager = primary_with_a_row(&dir, &pg).await;
    let postmaster = manager.postmaster_pid().expect("postmaster.pid");

    // The manager first, so that nothing restarts the postmaster.
    let mut child = manager.child.take().expect("running");
    child.kill().expect("SIGKILL the manager");
    child.wait().expect("reap the manager");
    kill(Pid::from_raw(postmaster), Signal::SIGKILL).expect("SIGKILL the postmaster");
    let pgdata = manager.pgdata.canonicalize().expect("pgdata");
    eventually(
        "no process left in the data directory",
        Duration::from_secs(30),
        || {
            let gone = !works_in(&pgdata);
            async move { gone.then_some(()) }
        },
    )
    .await;
    let lock = pgdata.join("postmaster.pid");
    assert!(lock.exists(), "a killed postmaster leaves its lock file");

    // A live process of the manager's user takes the lock file's PID.
    let mut sleep = Command::new("sleep");
    sleep.arg("300").stdin(Stdio::null());
    if let Some((uid, gid)) = run_as() {
        sleep.uid(uid).gid(gid);
    }
    let mut holder = {
        let _guard = exec_lock();
        sleep.spawn().expect("start sleep")
    };
    let contents = std::fs::read_to_string(&lock).expect("read the lock file");
    let rest: String = contents.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(&lock, format!("{}\n{rest}", holder.id())).expect("rewrite the lock file");

    let mut restarted = Manager::start(&dir, Options::primary(&pg, "orders-1"));
    restarted.wait_ready(Duration::from_secs(60)).await;
    let id: i32 = superuser(restarted.pg_port)
        .await
        .query_one("SELECT id FROM survives", &[])
        .await
        .expect("read after the restart")
        .get(0);
    assert_eq!(id, 7);
    let logs = restarted.logs();
    assert!(
        logs.contains("removed a stale postmaster.pid")
            && logs.contains(&format!("PID {}", holder.id())),
        "{logs}"
    );
    assert!(restarted.stop().expect("running").success());
    let _ = holder.kill();
    let _ = holder.wait();
}
per_major!(a_stale_lock_file_does_not_keep_postgres_down);
