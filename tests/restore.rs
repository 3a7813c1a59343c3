//! Component tests: `tusk instance` with `TUSK_BOOTSTRAP=restore` against a
//! real S3 server (versitygw on loopback) and real PostgreSQL: a base backup
//! and the WAL after it, restored to a time between two commits, to the end
//! of the archive, and refused (naming why) for a target before the backup
//! and for an image of another major.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;
mod objectstore_support;

use std::time::Duration;

use instance_support::*;
use objectstore_support::S3Server;
use serde_json::Value;
use tusk::contract::env;

const READY: Duration = Duration::from_secs(60);
const RESTORED: Duration = Duration::from_secs(180);

async fn backup(manager: &Manager, name: &str) -> Value {
    let (code, reply) = start_backup(manager, name).await;
    assert_eq!(code, 202, "{reply}");
    finished(manager, None, name).await
}

async fn count(port: u16) -> i64 {
    superuser(port)
        .await
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .expect("count")
        .get(0)
}

async fn restore_progress(manager: &Manager) -> Option<Value> {
    let (code, body) = http(manager.http_port, "GET", "/restore", None, None)
        .await
        .ok()?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// The environment of a restore of `orders` (path `team`) from `server`,
/// archiving as `database` to the same bucket.
fn restore_env(
    server: &S3Server,
    database: &str,
    target: &[(&str, &str)],
) -> Vec<(String, String)> {
    let mut vars = server.env("backups", "team");
    let source: Vec<(String, String)> = vars
        .iter()
        .map(|(name, value)| (env::restore(name), value.clone()))
        .collect();
    vars.extend(source);
    vars.push((env::DATABASE.to_owned(), database.to_owned()));
    vars.push((env::RESTORE_SOURCE.to_owned(), "orders".to_owned()));
    vars.extend(
        target
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    vars
}

fn restored(
    pg: &Pg,
    dir: &TestDir,
    server: &S3Server,
    name: &str,
    target: &[(&str, &str)],
) -> Manager {
    let mut options = Options::primary(pg, &format!("{name}-1"));
    options.bootstrap = "restore";
    options.env = restore_env(server, name, target);
    Manager::start(dir, options)
}

/// `tusk verify-backup` of backup `id` up to `end_lsn`, with synchronous
/// replication in the environment (as a Database with `mode: sync` gives its
/// Job): its JSON outcome.
fn verify(pg: &Pg, dir: &TestDir, server: &S3Server, id: &str, end_lsn: &str) -> Value {
    use std::os::unix::process::CommandExt;
    let volume = dir.subdir("verify-volume");
    let run = dir.subdir("verify-run");
    let report = dir.path.join("verify.json");
    std::fs::write(&report, "").expect("report file");
    chown_tree(&dir.path.join("verify.json"));
    let mut command = std::process::Command::new(dir.path.join("tusk"));
    command
        .arg("verify-backup")
        .arg("--termination-log")
        .arg(&report)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TUSK_INSTANCE", "b1-verify")
        .env("TUSK_DATABASE", "orders")
        .env("PGDATA", volume.join("pgdata"))
        .env("TUSK_BOOTSTRAP", "restore")
        .env("POSTGRES_SUPERUSER_PASSWORD", "unused")
        .env("TUSK_REPLICATION_PASSWORD", "unused")
        .env("TUSK_SYNC_MODE", "sync")
        .env("TUSK_MIN_SYNC", "1")
        .env("TUSK_PARAMETERS", r#"{"max_connections": "150"}"#)
        .env("TUSK_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env("TUSK_PORT", free_port().to_string())
        .env("TUSK_SOCKET_DIR", &run)
        .env("TUSK_BINDIR", &pg.bindir)
        .env(env::RESTORE_BACKUP, id)
        .env(env::RESTORE_TARGET_LSN, end_lsn)
        .envs(
            restore_env(server, "orders", &[])
                .into_iter()
                .filter(|(k, _)| k.starts_with(env::RESTORE_PREFIX)),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    if let Some((uid, gid)) = run_as() {
        command.uid(uid).gid(gid);
    }
    let mut child = {
        let _guard = exec_lock();
        command.spawn().expect("start tusk verify-backup")
    };
    let deadline = std::time::Instant::now() + RESTORED;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("tusk verify-backup did not finish in {RESTORED:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report"))
        .expect("a JSON report");
    assert_eq!(status.success(), outcome["verified"] == true, "{outcome}");
    outcome
}

/// Rows, a backup, rows, the time T, rows: restored to T, exactly the rows
/// committed before T, on a new timeline that archives under the restored
/// Database's name while the source's archive stays as it was; restored to
/// the end of the archive, every row; verified by `tusk verify-backup`;
/// restored to a time before the backup, refused with the reason, and nothing
/// started.
async fn restores_to_a_time_and_to_the_end_of_the_archive(pg: Pg) {
    let dir = TestDir::new(&format!("restore{}", pg.major));
    let server = S3Server::start(&dir.path);
    let store = server.bucket("backups").await;
    let mut options = Options::primary(&pg, "orders-1");
    options.env = server.env("backups", "team");
    // More than the restored instances' default 100: a hot standby would
    // refuse to recover it ("insufficient parameter settings").
    options.parameters = r#"{"max_connections": "150"}"#.to_owned();
    let mut source = Manager::start(&dir, options);
    source.wait_ready(READY).await;
    let client = superuser(source.pg_port).await;
    client
        .batch_execute("CREATE TABLE t (i int); INSERT INTO t SELECT generate_series(1, 1000)")
        .await
        .expect("rows before the backup");
    let before_backup: String = client
        .query_one("SELECT to_json(clock_timestamp())#>>'{}'", &[])
        .await
        .expect("time")
        .get(0);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let run = backup(&source, "b1").await;
    assert_eq!(run["run"], "completed", "{run}");
    let end_lsn = run["end_lsn"].as_str().expect("an end LSN").to_owned();
    client
        .batch_execute("INSERT INTO t SELECT generate_series(1001, 2000)")
        .await
        .expect("rows after the backup");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let target: String = client
        .query_one("SELECT to_json(clock_timestamp())#>>'{}'", &[])
        .await
        .expect("time")
        .get(0);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    client
        .batch_execute("INSERT INTO t SELECT generate_series(2001, 3000)")
        .await
        .expect("rows after the target");
    archive_all(&client).await;
    source.stop();
    let source_keys = |listed: Vec<tusk::objectstore::Listed>| -> Vec<(String, u64)> {
        listed.into_iter().map(|l| (l.key, l.size)).collect()
    };
    let before = source_keys(store.list("team/orders/").await.expect("list"));

    // To T: the rows committed before it, none after.
    let to_time = [(env::RESTORE_TARGET_TIME, target.as_str())];
    let mut at_t = restored(&pg, &dir, &server, "copy", &to_time);
    at_t.wait_ready(RESTORED).await;
    assert_eq!(count(at_t.pg_port).await, 2000, "rows at {target}");
    let progress = restore_progress(&at_t).await.expect("restore progress");
    assert_eq!(progress["stage"], "done", "{progress}");
    assert!(progress["backup"].is_string(), "{progress}");
    assert!(
        progress["downloaded_bytes"].as_u64() == progress["total_bytes"].as_u64()
            && progress["total_bytes"].as_u64() > Some(0),
        "{progress}"
    );
    let status = at_t.status().await;
    assert_eq!(status["role"], "primary", "{status}");
    assert!(status["timeline"].as_u64() >= Some(2), "{status}");
    // It writes, and archives under its own name, its new timeline first.
    superuser(at_t.pg_port)
        .await
        .batch_execute("INSERT INTO t VALUES (-1); SELECT pg_switch_wal()")
        .await
        .expect("writes after the restore");
    eventually(
        "the restored Database archives its own WAL",
        READY,
        || async {
            let listed = store.list("team/copy/").await.ok()?;
            listed
                .iter()
                .any(|l| l.key.ends_with(".history.zst"))
                .then_some(())
        },
    )
    .await;
    at_t.stop();

    // To the end of the archive: every row.
    let mut at_end = restored(&pg, &dir, &server, "all", &[]);
    at_end.wait_ready(RESTORED).await;
    assert_eq!(
        count(at_end.pg_port).await,
        3000,
        "rows at the end of the archive"
    );
    at_end.stop();

    // Verified: restored to its end, every database answering (a commit
    // included, which synchronous replication must not hold up).
    let id = progress["backup"]
        .as_str()
        .expect("the backup id")
        .to_owned();
    let outcome = verify(&pg, &dir, &server, &id, &end_lsn);
    assert_eq!(outcome["verified"], true, "{outcome}");
    assert_eq!(outcome["backup"], id.as_str());
    assert!(outcome["databases"].as_u64() >= Some(2), "{outcome}");

    // Before the backup: refused before any download, naming the backup.
    let too_early = [(env::RESTORE_TARGET_TIME, before_backup.as_str())];
    let early = restored(&pg, &dir, &server, "early", &too_early);
    let refused = eventually("the early restore refused", READY, || async {
        let progress = restore_progress(&early).await?;
        (progress["stage"] == "failed").then_some(progress)
    })
    .await;
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("before the oldest usable backup"),
        "{refused}"
    );
    assert_eq!(refused["downloaded_bytes"], 0, "{refused}");
    assert!(!early.pgdata.join("PG_VERSION").exists());
    drop(early);

    // With the other major: refused before any download, naming both.
    let other = Pg::installed(if pg.major == 15 { 17 } else { 15 });
    let mismatched = restored(&other, &dir, &server, "other", &[]);
    let refused = eventually("the other major's restore refused", READY, || async {
        let progress = restore_progress(&mismatched).await?;
        (progress["stage"] == "failed").then_some(progress)
    })
    .await;
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("taken with PostgreSQL {}", pg.major))
            && error.contains(&format!("this image runs {}", other.major)),
        "{refused}"
    );
    assert_eq!(refused["downloaded_bytes"], 0, "{refused}");
    drop(mismatched);

    // The source's archive was only read.
    let after = source_keys(store.list("team/orders/").await.expect("list"));
    assert_eq!(before, after, "the source's objects changed");
}

per_major!(restores_to_a_time_and_to_the_end_of_the_archive);
