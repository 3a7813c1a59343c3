//! Component tests: `tusk instance` with a WAL volume (`TUSK_WALDIR`, from
//! `spec.walStorage`), against real PostgreSQL processes on loopback: initdb
//! and a clone put PGDATA's `pg_wal` on the WAL directory (a symlink to it,
//! the current segment there, no staging directory left), and replication
//! streams between the two.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use instance_support::*;

const READY: Duration = Duration::from_secs(90);

/// `Options` for `instance` with its WAL directory on a "volume" of its own.
fn with_waldir(mut options: Options, dir: &TestDir) -> (Options, PathBuf) {
    let volume = dir.subdir(&format!("{}-wal-volume", options.instance));
    let waldir = volume.join("pg_wal");
    options
        .env
        .push(("TUSK_WALDIR".into(), waldir.display().to_string()));
    (options, waldir)
}

/// PGDATA's pg_wal links to `waldir`, which holds `segment`; nothing of a
/// bootstrap is left beside either.
fn wal_is_on_its_volume(manager: &Manager, waldir: &Path, segment: &str) {
    let link = std::fs::read_link(manager.pgdata.join("pg_wal")).expect("pg_wal is a symlink");
    assert_eq!(link, waldir);
    assert!(
        waldir.join(segment).is_file(),
        "{segment} is not in {}",
        waldir.display()
    );
    let volume = waldir.parent().expect("the WAL volume");
    let entries: Vec<String> = std::fs::read_dir(volume)
        .expect("read the WAL volume")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries, ["pg_wal"], "the WAL volume holds only pg_wal");
}

async fn current_segment(client: &tokio_postgres::Client) -> String {
    client
        .query_one("SELECT pg_walfile_name(pg_current_wal_insert_lsn())", &[])
        .await
        .expect("current segment")
        .get(0)
}

/// initdb and a clone with `TUSK_WALDIR`: each instance's WAL on its own
/// WAL directory; a row written on the primary reads on the replica.
async fn initdb_and_clone_put_wal_on_the_wal_volume(pg: Pg) {
    let dir = TestDir::new(&format!("walvolume{}", pg.major));
    let (options, primary_wal) = with_waldir(Options::primary(&pg, "orders-1"), &dir);
    let mut primary = Manager::start(&dir, options);
    primary.wait_ready(READY).await;
    let su = superuser(primary.pg_port).await;
    su.batch_execute("CREATE TABLE orders (id int); INSERT INTO orders VALUES (42)")
        .await
        .expect("write on the primary");
    wal_is_on_its_volume(&primary, &primary_wal, &current_segment(&su).await);

    let (options, replica_wal) =
        with_waldir(Options::replica(&pg, "orders-2", primary.pg_port), &dir);
    let mut replica = Manager::start(&dir, options);
    replica.wait_ready(READY).await;
    let replica_su = superuser(replica.pg_port).await;
    // Written after the clone, so that it reaches the replica by streaming.
    su.batch_execute("UPDATE orders SET id = 43")
        .await
        .expect("write on the primary");
    let id: i32 = eventually("the row to reach the replica", READY, || {
        let c = &replica_su;
        async move {
            c.query_opt("SELECT id FROM orders WHERE id = 43", &[])
                .await
                .ok()
                .flatten()
                .map(|row| row.get(0))
        }
    })
    .await;
    assert_eq!(id, 43);
    // pg_walfile_name does not run during recovery; the replica streams
    // the primary's timeline-1 segments under the same names.
    let received = current_segment(&su).await;
    wal_is_on_its_volume(&replica, &replica_wal, &received);
    assert!(
        !std::fs::read_link(replica.pgdata.join("pg_wal"))
            .expect("link")
            .starts_with(primary_wal.parent().expect("volume")),
        "the replica writes to its own WAL volume"
    );
}
per_major!(initdb_and_clone_put_wal_on_the_wal_volume);
