//! Component tests: base backups taken by `tusk instance` (`POST /backups`)
//! of real PostgreSQL to a real S3 server (versitygw on loopback), proven by
//! starting PostgreSQL on what was stored and replaying the archive.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;
mod objectstore_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use instance_support::*;
use objectstore_support::S3Server;
use tusk::backup::manifest::Manifest;
use tusk::backup::{restore, take};
use tusk::objectstore::{Layout, Store};

const READY: Duration = Duration::from_secs(60);

async fn manifest_of(store: &Store, location: &str, bucket: &str) -> (String, Manifest) {
    let prefix = location
        .strip_prefix(&format!("s3://{bucket}/"))
        .expect("an s3:// location in the bucket");
    let bytes = store
        .get(&format!("{prefix}manifest.json"))
        .await
        .expect("get")
        .expect("the manifest is stored");
    (
        prefix.to_owned(),
        Manifest::from_json(&bytes).expect("a manifest"),
    )
}

/// PostgreSQL on a restored data directory, replaying the archive through
/// `tusk wal-restore` to its end and then promoting.
fn recover(dir: &TestDir, server: &S3Server, pg: &Pg, pgdata: &Path, bucket: &str) -> (Child, u16) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(pgdata, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(pgdata.join("recovery.signal"), "").expect("recovery.signal");
    let socket = dir.subdir("recovered-run");
    let port = free_port();
    let restore = format!("{} wal-restore %f %p", dir.path.join("tusk").display());
    let log = std::fs::File::create(dir.path.join("recovered.log")).expect("log");
    chown_tree(pgdata);
    let mut command = Command::new(pg.bindir.join("postgres"));
    command
        .arg("-D")
        .arg(pgdata)
        .args(["-c", &format!("port={port}")])
        .args(["-c", "listen_addresses=127.0.0.1"])
        .args([
            "-c",
            &format!("unix_socket_directories={}", socket.display()),
        ])
        .args([
            "-c",
            &format!("hba_file={}", pgdata.join("pg_hba.conf").display()),
        ])
        .args(["-c", "archive_mode=off"])
        .args(["-c", &format!("restore_command={restore}")])
        .env("PGDATA", pgdata)
        .env("TUSK_DATABASE", "orders")
        .envs(server.env(bucket, "team"))
        .stdout(Stdio::null())
        .stderr(log);
    if let Some((uid, gid)) = run_as() {
        use std::os::unix::process::CommandExt;
        command.uid(uid).gid(gid);
    }
    let child = {
        let _guard = exec_lock();
        command
            .spawn()
            .expect("start postgres on the restored data")
    };
    (child, port)
}

/// A backup of a primary with rows in it: Completed with LSNs, bytes and a
/// location; the manifest and data are in the layout's keys and agree; the
/// tar holds the label and none of the running server's files; PostgreSQL
/// started on it replays the archive and has every row written before and
/// after the backup. A second backup while one runs is refused; asking again
/// for the same one answers for it.
async fn a_primary_backup_restores_with_every_row(pg: Pg) {
    let dir = TestDir::new(&format!("basebackup{}", pg.major));
    let server = S3Server::start(&dir.path);
    let bucket = "backups";
    let store = server.bucket(bucket).await;
    let mut options = Options::primary(&pg, "orders-1");
    options.env = server.env(bucket, "team");
    let mut manager = Manager::start(&dir, options);
    manager.wait_ready(READY).await;
    let client = superuser(manager.pg_port).await;
    // Enough data that the backup takes a moment (and compresses).
    client
        .batch_execute(
            "CREATE TABLE t AS SELECT i, md5(i::text) AS h FROM generate_series(1, 400000) AS i",
        )
        .await
        .expect("rows before");

    let (code, first) = start_backup(&manager, "b1").await;
    assert_eq!(code, 202, "{first}");
    assert_eq!(first["run"], "running");
    let (code, busy) = start_backup(&manager, "b2").await;
    let (again_code, again) = start_backup(&manager, "b1").await;
    let run = finished(&manager, None, "b1").await;
    assert_eq!(run["run"], "completed", "{run}");
    // While b1 ran, b2 was refused; b1 asked again answered for itself.
    assert!(
        code == 409 && busy["error"].as_str().is_some_and(|e| e.contains("b1")),
        "{code} {busy}"
    );
    assert!(again_code == 202 && again["backup"] == "b1", "{again}");

    client
        .batch_execute("INSERT INTO t SELECT i, 'after' FROM generate_series(400001, 400100) AS i")
        .await
        .expect("rows after");
    // Archive everything written so far (the end of the archive is what
    // recovery reaches).
    archive_all(&client).await;

    let location = run["location"].as_str().expect("a location");
    let (prefix, manifest) = manifest_of(&store, location, bucket).await;
    let status = manager.status().await;
    let system: u64 = status["system_identifier"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a system identifier");
    let layout = Layout::new(Some("team"), "orders", system);
    assert!(prefix.starts_with(&layout.base_prefix()), "{prefix}");
    assert_eq!(manifest.system_identifier, system);
    assert_eq!(manifest.backup, "b1");
    assert!(!manifest.from_standby);
    assert_eq!(manifest.pg_version / 10_000, pg.major);
    assert!(manifest.begin_lsn < manifest.end_lsn, "{manifest:?}");
    assert_eq!(run["end_lsn"], manifest.end_lsn.to_string());
    assert!(
        manifest.raw_bytes > 20 << 20 && manifest.stored_bytes < manifest.raw_bytes / 2,
        "raw {} stored {}",
        manifest.raw_bytes,
        manifest.stored_bytes
    );

    // Unpacked as a restore does: streamed, checked against the manifest.
    assert_eq!(
        layout.backup_data_key(&manifest.id),
        format!("{prefix}data.tar.zst")
    );
    let restored = dir.path.join("restored");
    // In ranges smaller than the object, so that several are fetched at
    // once and put back in order.
    let downloaded = std::sync::atomic::AtomicU64::new(0);
    let range = (manifest.stored_bytes / 5).max(1);
    let unpacked =
        restore::unpack_counting(&store, &layout, &manifest, &restored, &downloaded, range)
            .await
            .expect("the backup unpacks");
    assert_eq!(downloaded.into_inner(), manifest.stored_bytes);
    assert_eq!(unpacked.raw_bytes, manifest.raw_bytes);
    // Into a directory that is not empty, never.
    let refused = restore::unpack(&store, &layout, &manifest, &restored).await;
    assert!(
        matches!(refused, Err(restore::Error::NotEmpty(_))),
        "{refused:?}"
    );
    let label = std::fs::read_to_string(restored.join("backup_label")).expect("backup_label");
    assert!(label.contains(&manifest.begin_wal), "{label}");
    for absent in ["postmaster.pid", "postmaster.opts"] {
        assert!(!restored.join(absent).exists(), "{absent} is in the backup");
    }
    assert!(restored.join("global/pg_control").is_file());
    assert_eq!(
        std::fs::read_dir(restored.join("pg_wal"))
            .expect("pg_wal")
            .filter(|e| e.as_ref().is_ok_and(|e| e.path().is_file()))
            .count(),
        0,
        "the backup carries WAL files; replay must come from the archive"
    );

    manager.stop();
    let (mut postgres, port) = recover(&dir, &server, &pg, &restored, bucket);
    let recovered = eventually("the restored server promoted", READY, || async {
        let client = connect(port, "postgres", SUPERUSER_PASSWORD, "postgres")
            .await
            .ok()?;
        let row = client
            .query_one("SELECT NOT pg_is_in_recovery()", &[])
            .await
            .ok()?;
        row.get::<_, bool>(0).then_some(client)
    })
    .await;
    let row = recovered
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE h = 'after') FROM t",
            &[],
        )
        .await
        .expect("count");
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (400_100, 100),
        "rows after recovery"
    );
    let _ = postgres.kill();
    let _ = postgres.wait();

    // A stored backup that no longer matches its manifest is refused,
    // naming its key.
    let key = layout.backup_data_key(&manifest.id);
    let mut data = store.get(&key).await.expect("get").expect("the data");
    let middle = data.len() / 2;
    data[middle] ^= 0xff;
    store.put(&key, data, &[]).await.expect("put");
    let corrupt = restore::unpack(&store, &layout, &manifest, &dir.path.join("corrupt")).await;
    let message = corrupt.expect_err("a corrupt backup unpacks").to_string();
    assert!(message.contains(&key), "{message}");
}

per_major!(a_primary_backup_restores_with_every_row);

/// A standby's backup: it waits for the WAL it ends in until the primary
/// switches segments, then completes from the standby; with the store
/// stopped mid-way the run fails and leaves no manifest.
async fn a_standby_backup_completes_and_a_failed_one_leaves_no_manifest(pg: Pg) {
    let dir = TestDir::new(&format!("standbybackup{}", pg.major));
    let mut server = S3Server::start(&dir.path);
    let bucket = "backups";
    let store = server.bucket(bucket).await;
    let env = server.env(bucket, "team");
    let mut options = Options::primary(&pg, "orders-1");
    options.env = env.clone();
    let mut primary = Manager::start(&dir, options);
    primary.wait_ready(READY).await;
    let mut options = Options::replica(&pg, "orders-2", primary.pg_port);
    options.env = env;
    let mut replica = Manager::start(&dir, options);
    replica.wait_ready(READY).await;
    superuser(primary.pg_port)
        .await
        .batch_execute("CREATE TABLE t AS SELECT generate_series(1, 1000) AS i")
        .await
        .expect("rows");

    let (code, body) = start_backup(&replica, "s1").await;
    assert_eq!(code, 202, "{body}");
    let run = finished(&replica, Some(&primary), "s1").await;
    assert_eq!(run["run"], "completed", "{run}");
    let location = run["location"].as_str().expect("a location");
    let (_, manifest) = manifest_of(&store, location, bucket).await;
    assert!(manifest.from_standby);
    assert_eq!(manifest.instance, "orders-2");
    let first_location = location.to_owned();
    // No backup may be written where a completed one is stored.
    let layout = Layout::new(Some("team"), "orders", manifest.system_identifier);
    let taken = take::refuse_taken(&store, &layout, &manifest.id).await;
    assert!(
        taken
            .as_ref()
            .is_err_and(|e| e.to_string().contains(&manifest.id)),
        "{taken:?}"
    );

    // The store goes away under a backup: it fails, and nothing claims to be
    // a backup.
    server.stop();
    let (code, body) = start_backup(&replica, "s2").await;
    assert_eq!(code, 202, "{body}");
    let run = finished(&replica, Some(&primary), "s2").await;
    assert_eq!(run["run"], "failed", "{run}");
    assert!(
        run["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{run}"
    );
    server.resume();
    let location = run["location"].as_str().expect("a location");
    // Even when started within the same second as the first (as it often
    // is), it has a place of its own.
    assert_ne!(location, first_location, "two backups share a location");
    let prefix = location
        .strip_prefix(&format!("s3://{bucket}/"))
        .expect("in the bucket");
    assert_eq!(
        store
            .head(&format!("{prefix}manifest.json"))
            .await
            .expect("head"),
        None,
        "a failed backup has a manifest"
    );
    replica.stop();
    primary.stop();
}

per_major!(a_standby_backup_completes_and_a_failed_one_leaves_no_manifest);
