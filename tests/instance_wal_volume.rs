//! Component tests: `tusk instance` with a WAL volume (`TUSK_WALDIR`, from
//! `spec.walStorage`), against real PostgreSQL processes on loopback: initdb
//! and a clone put PGDATA's `pg_wal` on the WAL directory (a symlink to it,
//! the current segment there, no staging directory left), and replication
//! streams between the two; a base backup of such a primary (its `pg_wal` a
//! symlink) restored with `TUSK_WALDIR` (against a real S3 server) replays
//! onto the restored instance's own WAL directory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;
mod objectstore_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use instance_support::*;
use objectstore_support::S3Server;
use tusk::contract::env;

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

/// A primary with a WAL volume, backed up (its pg_wal a symlink) with rows
/// before and after the backup, restored to the end of the archive into an
/// instance with its own WAL volume: every row, its pg_wal on its WAL
/// directory with the segment it writes.
async fn a_backup_restores_onto_a_wal_volume(pg: Pg) {
    let dir = TestDir::new(&format!("walrestore{}", pg.major));
    let server = S3Server::start(&dir.path);
    let _store = server.bucket("backups").await;
    let (mut options, _) = with_waldir(Options::primary(&pg, "orders-1"), &dir);
    options.env.extend(server.env("backups", "team"));
    let mut source = Manager::start(&dir, options);
    source.wait_ready(READY).await;
    let client = superuser(source.pg_port).await;
    client
        .batch_execute("CREATE TABLE t (i int); INSERT INTO t SELECT generate_series(1, 1000)")
        .await
        .expect("rows before the backup");
    let (code, reply) = start_backup(&source, "b1").await;
    assert_eq!(code, 202, "{reply}");
    let run = finished(&source, None, "b1").await;
    assert_eq!(run["run"], "completed", "{run}");
    client
        .batch_execute("INSERT INTO t SELECT generate_series(1001, 2000)")
        .await
        .expect("rows after the backup");
    archive_all(&client).await;
    source.stop();

    let mut options = Options::primary(&pg, "copy-1");
    options.bootstrap = "restore";
    let mut vars = server.env("backups", "team");
    let restore: Vec<(String, String)> = vars
        .iter()
        .map(|(name, value)| (env::restore(name), value.clone()))
        .collect();
    vars.extend(restore);
    vars.push((env::DATABASE.to_owned(), "copy".to_owned()));
    vars.push((env::RESTORE_SOURCE.to_owned(), "orders".to_owned()));
    options.env = vars;
    let (options, waldir) = with_waldir(options, &dir);
    let mut copy = Manager::start(&dir, options);
    copy.wait_ready(Duration::from_secs(180)).await;
    let restored = superuser(copy.pg_port).await;
    let rows: i64 = restored
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, 2000, "every row, those after the backup included");
    restored
        .batch_execute("INSERT INTO t VALUES (-1)")
        .await
        .expect("writes after the restore");
    wal_is_on_its_volume(&copy, &waldir, &current_segment(&restored).await);
    copy.stop();
}
per_major!(a_backup_restores_onto_a_wal_volume);
