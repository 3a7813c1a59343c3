//! Component tests: the object store client and WAL archiving against a real
//! S3 server (versitygw on loopback) and real PostgreSQL run by `tusk instance`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;
mod objectstore_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use instance_support::*;
use objectstore_support::S3Server;
use tokio::io::AsyncRead;
use tusk::objectstore::{Layout, Store, WalFile};

const READY: Duration = Duration::from_secs(60);

/// Bytes that do not compress to nothing, the same for the same seed.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// A reader that fails after `good` bytes, as a dying data source would.
struct Failing {
    good: usize,
}

impl AsyncRead for Failing {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.good == 0 {
            return std::task::Poll::Ready(Err(std::io::Error::other("the source died")));
        }
        let n = self.good.min(buf.remaining());
        buf.put_slice(&vec![7u8; n]);
        self.good -= n;
        std::task::Poll::Ready(Ok(()))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_round_trip_with_parallel_multipart_and_clean_failures() {
    let dir = TestDir::new("s3-round-trip");
    let mut server = S3Server::start(&dir.path);
    let store = server.bucket("round-trip").await;

    store
        .put("a/one", b"first".to_vec(), &[("wal-size", "5")])
        .await
        .expect("put");
    assert_eq!(
        store.get("a/one").await.expect("get").as_deref(),
        Some(&b"first"[..])
    );
    assert_eq!(store.get("a/none").await.expect("get"), None);
    let meta = store.head("a/one").await.expect("head").expect("present");
    assert_eq!(meta.get("wal-size").map(String::as_str), Some("5"));
    assert_eq!(store.head("a/none").await.expect("head"), None);

    // Three parts and a short one, two in flight.
    let big = noise(3 * tusk::objectstore::PART_SIZE + 12_345, 42);
    let written = store
        .upload("a/big", big.as_slice(), 2, &[])
        .await
        .expect("multipart upload");
    assert_eq!(written, big.len() as u64);
    assert!(
        store
            .get("a/big")
            .await
            .expect("get")
            .is_some_and(|b| b == big)
    );
    let listed = store.list("a/").await.expect("list");
    let keys: Vec<(&str, u64)> = listed.iter().map(|l| (l.key.as_str(), l.size)).collect();
    assert_eq!(keys, [("a/big", big.len() as u64), ("a/one", 5)]);

    // A source that dies mid-way leaves nothing under the key.
    let failed = store
        .upload(
            "a/torn",
            Failing {
                good: tusk::objectstore::PART_SIZE + 10,
            },
            2,
            &[],
        )
        .await;
    assert!(failed.is_err(), "a torn upload succeeded");
    assert_eq!(store.head("a/torn").await.expect("head"), None);

    store
        .delete(&["a/big".to_owned(), "a/one".to_owned()])
        .await
        .expect("delete");
    assert_eq!(store.list("a/").await.expect("list"), []);

    // Wrong credentials: the store refuses, and says so.
    let mut config = server.config("round-trip");
    config.secret_access_key = "wrong".into();
    let refused = Store::new(&config).expect("a store").get("a/one").await;
    assert!(
        refused
            .as_ref()
            .is_err_and(tusk::objectstore::Error::refused),
        "{refused:?}"
    );

    // An unreachable store is an error, not a refusal (retrying may help).
    server.stop();
    let down = store.get("a/one").await;
    assert!(down.as_ref().is_err_and(|e| !e.refused()), "{down:?}");
}

/// Runs `tusk wal-archive`/`wal-restore` as PostgreSQL would, with the
/// manager's data directory and the store's environment.
fn wal_command(dir: &TestDir, server: &S3Server, pgdata: &Path, args: &[&str]) -> (bool, String) {
    let output = Command::new(dir.path.join("tusk"))
        .args(args)
        .current_dir(pgdata)
        .env_clear()
        .env("PGDATA", pgdata)
        .env("TUSK_DATABASE", "orders")
        .envs(server.env("wal", "team"))
        .output()
        .expect("run tusk");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn archiver(client: &tokio_postgres::Client) -> (i64, i64, String) {
    let row = client
        .query_one(
            "SELECT archived_count, failed_count, coalesce(last_archived_wal, '') FROM pg_stat_archiver",
            &[],
        )
        .await
        .expect("pg_stat_archiver");
    (row.get(0), row.get(1), row.get(2))
}

/// PostgreSQL archives through `tusk wal-archive` into the layout's keys;
/// `tusk wal-restore` gives back the same bytes and prefetches the next
/// segment; archiving the same file again succeeds and other content under
/// its name is refused; with the store down the WAL stays in `pg_wal` and
/// archiving catches up when it returns.
async fn postgres_archives_through_tusk_and_restores_from_the_store(pg: Pg) {
    let dir = TestDir::new(&format!("wal{}", pg.major));
    let mut server = S3Server::start(&dir.path);
    let store = server.bucket("wal").await;
    let mut options = Options::primary(&pg, "orders-1");
    options.env = server.env("wal", "team");
    let mut manager = Manager::start(&dir, options);
    manager.wait_ready(READY).await;
    let client = superuser(manager.pg_port).await;
    let status = manager.status().await;
    let system: u64 = status["system_identifier"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a system identifier");
    let layout = Layout::new(Some("team"), "orders", system);

    client
        .batch_execute(
            "CREATE TABLE t AS SELECT generate_series(1, 50000) AS i; SELECT pg_switch_wal();
             INSERT INTO t SELECT generate_series(1, 50000); SELECT pg_switch_wal();
             INSERT INTO t SELECT generate_series(1, 50000); SELECT pg_switch_wal();",
        )
        .await
        .expect("write and switch");
    let (count, failed, last) = eventually("three segments archived", READY, || async {
        let (count, failed, last) = archiver(&client).await;
        (count >= 3).then_some((count, failed, last))
    })
    .await;
    assert_eq!(
        failed, 0,
        "archiving failed {failed} times before {count} successes"
    );
    let keys: Vec<String> = store
        .list(&layout.wal_prefix())
        .await
        .expect("list")
        .into_iter()
        .map(|l| l.key)
        .collect();
    let last_file = WalFile::parse(&last).expect("a segment name");
    assert!(
        keys.contains(&layout.wal_key(&last_file)),
        "{last} not in {keys:?}"
    );

    // Back from the store, byte for byte; the next segment is prefetched.
    let first = WalFile::parse(
        keys.first()
            .and_then(|k| k.rsplit('/').next())
            .and_then(|n| n.strip_suffix(".zst"))
            .expect("a WAL key"),
    )
    .expect("a segment");
    let restored = dir.path.join("restored-segment");
    let (ok, stderr) = wal_command(
        &dir,
        &server,
        &manager.pgdata,
        &[
            "wal-restore",
            first.name(),
            restored.to_str().expect("utf-8"),
        ],
    );
    assert!(ok, "wal-restore failed: {stderr}");
    let original = std::fs::read(manager.pgdata.join("pg_wal").join(first.name()))
        .expect("the segment in pg_wal");
    assert!(
        std::fs::read(&restored).expect("restored") == original,
        "restored bytes differ"
    );
    let next = first
        .next_segment(original.len() as u64)
        .expect("a next segment");
    let spool = tusk::wal::default_spool(&manager.pgdata).join("restored");
    assert!(
        spool.join(next.name()).is_file(),
        "{next} was not prefetched"
    );
    let (ok, stderr) = wal_command(
        &dir,
        &server,
        &manager.pgdata,
        &["wal-restore", "0000000F0000000000000001", "x"],
    );
    assert!(!ok && stderr.contains("not in the archive"), "{stderr}");

    // The same content again is fine; other content under the name is refused.
    let segment = manager.pgdata.join("pg_wal").join(first.name());
    let (ok, stderr) = wal_command(
        &dir,
        &server,
        &manager.pgdata,
        &["wal-archive", segment.to_str().expect("utf-8")],
    );
    assert!(ok, "archiving the same segment again failed: {stderr}");
    let forged_dir = dir.path.join("forged");
    std::fs::create_dir_all(&forged_dir).expect("mkdir");
    let mut forged = original.clone();
    forged[100] ^= 0xff;
    let forged_path = forged_dir.join(first.name());
    std::fs::write(&forged_path, &forged).expect("write");
    let (ok, stderr) = wal_command(
        &dir,
        &server,
        &manager.pgdata,
        &["wal-archive", forged_path.to_str().expect("utf-8")],
    );
    assert!(!ok && stderr.contains("refusing to overwrite"), "{stderr}");
    assert!(
        store
            .get(&layout.wal_key(&first))
            .await
            .expect("get")
            .is_some_and(|z| zstd::decode_all(z.as_slice()).expect("zstd") == original)
    );

    // The store goes away: WAL waits in pg_wal, marked ready, and is archived
    // once the store is back.
    server.stop();
    client
        .batch_execute("INSERT INTO t SELECT generate_series(1, 1000)")
        .await
        .expect("insert");
    let pending: String = client
        .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
        .await
        .expect("switch")
        .get(0);
    eventually(
        "archiving failing while the store is down",
        READY,
        || async {
            let (_, failed, _) = archiver(&client).await;
            (failed > 0).then_some(())
        },
    )
    .await;
    let ready = manager
        .pgdata
        .join("pg_wal/archive_status")
        .join(format!("{pending}.ready"));
    assert!(ready.is_file(), "{pending} is not waiting in pg_wal");
    server.resume();
    eventually("archiving caught up", Duration::from_secs(120), || async {
        let (_, _, last) = archiver(&client).await;
        (last >= pending).then_some(())
    })
    .await;
    let pending_file = WalFile::parse(&pending).expect("a segment");
    assert!(
        store
            .head(&layout.wal_key(&pending_file))
            .await
            .expect("head")
            .is_some()
    );
    manager.stop();
}

per_major!(postgres_archives_through_tusk_and_restores_from_the_store);
