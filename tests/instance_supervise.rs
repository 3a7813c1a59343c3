//! Component test: the manager restarts a postmaster that dies.

mod instance_support;

use std::time::Duration;

use instance_support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// (4) SIGKILL the postmaster: the manager starts a new one on the same data,
/// and the instance answers again.
async fn a_killed_postgres_is_restarted(pg: Pg) {
    let dir = TestDir::new(&format!("supervise{}", pg.major));
    let mut manager = Manager::start(&dir, Options::primary(&pg, "orders-1"));
    manager.wait_ready(Duration::from_secs(60)).await;
    superuser(manager.pg_port)
        .await
        .batch_execute("CREATE TABLE survives (id int); INSERT INTO survives VALUES (7)")
        .await
        .expect("write");

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
