//! Component tests: `tusk upgrade` (check, run, rollback, stage-old) on real
//! PostgreSQL 15 data upgraded to 17 on loopback, run as the `postgres` OS
//! user as in a Job's pod.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

// The harness's per-major macro is for tests of one major at a time.
#[allow(unused_macros, unused_imports)]
mod instance_support;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use instance_support::*;

const OLD: u32 = 15;
const NEW: u32 = 17;
/// A non-default WAL segment size (MB) the new cluster must keep.
const SEGMENT_MB: u64 = 32;
const ROWS: i64 = 5000;

fn bindir(major: u32) -> PathBuf {
    Pg::installed(major).bindir
}

/// Runs `program args` as the manager's user, failing with its output.
fn run_as_postgres(program: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let output = command(program, args, env).output().expect("spawn");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{} {args:?} failed:\n{text}",
        program.display()
    );
    text
}

fn command(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C");
    for (k, v) in env {
        command.env(k, v);
    }
    if let Some((uid, gid)) = run_as() {
        command.uid(uid).gid(gid);
    }
    command
}

/// A PostgreSQL 15 cluster with Tusk-like authentication (peer locally,
/// SCRAM over TCP), data checksums, 32 MB WAL segments and C.UTF-8.
struct Old {
    dir: TestDir,
    pgdata: PathBuf,
    sockets: PathBuf,
    port: u16,
}

impl Old {
    fn create(name: &str) -> Old {
        Old::create_with(name, None)
    }

    /// With `waldir` (a WAL volume's directory), initdb puts the WAL there.
    fn create_with(name: &str, waldir: Option<&str>) -> Old {
        let dir = TestDir::new(name);
        let waldir = waldir.map(|name| dir.subdir("wal-volume").join(name));
        let volume = dir.subdir("volume");
        let sockets = dir.subdir("sockets");
        let pgdata = volume.join("pgdata");
        dir.subdir("scratch");
        let pwfile = dir.path.join("pwfile");
        std::fs::write(&pwfile, format!("{SUPERUSER_PASSWORD}\n")).expect("pwfile");
        chown_tree(&pwfile);
        run_as_postgres(
            &bindir(OLD).join("initdb"),
            &[
                "--pgdata",
                pgdata.to_str().expect("utf-8"),
                "--username=postgres",
                "--auth-local=peer",
                "--auth-host=scram-sha-256",
                "--pwfile",
                pwfile.to_str().expect("utf-8"),
                "--data-checksums",
                &format!("--wal-segsize={SEGMENT_MB}"),
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                &waldir
                    .as_ref()
                    .map(|w| format!("--waldir={}", w.display()))
                    .unwrap_or_else(|| "--no-instructions".to_owned()),
            ],
            &[],
        );
        let old = Old {
            port: free_port(),
            dir,
            pgdata,
            sockets,
        };
        std::fs::write(
            old.pgdata.join("postgresql.auto.conf"),
            format!(
                "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n",
                old.port,
                old.sockets.display()
            ),
        )
        .expect("config");
        chown_tree(&old.pgdata);
        old
    }

    fn start(&self, major: u32) {
        let log = self.dir.path.join(format!("server-{major}.log"));
        std::fs::write(&log, "").expect("log");
        chown_tree(&log);
        run_as_postgres(
            &bindir(major).join("pg_ctl"),
            &[
                "start",
                "--wait",
                "--pgdata",
                self.pgdata.to_str().expect("utf-8"),
                "--log",
                log.to_str().expect("utf-8"),
            ],
            &[],
        );
    }

    fn stop(&self, major: u32) {
        run_as_postgres(
            &bindir(major).join("pg_ctl"),
            &[
                "stop",
                "--wait",
                "--mode=fast",
                "--pgdata",
                self.pgdata.to_str().expect("utf-8"),
            ],
            &[],
        );
    }

    async fn client(&self) -> tokio_postgres::Client {
        superuser(self.port).await
    }

    async fn fill(&self) {
        self.client()
            .await
            .batch_execute(&format!(
                "CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL);
                 CREATE INDEX items_name ON items (name);
                 CREATE SEQUENCE ticket START 100;
                 INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, {ROWS}) i;
                 SELECT nextval('ticket') FROM generate_series(1, 7);"
            ))
            .await
            .expect("fill");
    }

    /// `tusk upgrade <args>`: the outcome from the termination log, and
    /// whether the process succeeded.
    fn upgrade(&self, args: &[&str], env: &[(&str, &str)]) -> (bool, serde_json::Value) {
        let log = self.dir.path.join("termination-log");
        let _ = std::fs::remove_file(&log);
        let work = self.dir.path.join("scratch").join("work");
        let mut all: Vec<&str> = vec!["upgrade"];
        all.extend_from_slice(args);
        let log_arg = log.to_str().expect("utf-8").to_owned();
        let work_arg = work.to_str().expect("utf-8").to_owned();
        all.extend_from_slice(&["--termination-log", &log_arg, "--work-dir", &work_arg]);
        std::fs::write(&log, "").expect("log");
        chown_tree(&log);
        let output = {
            let _guard = exec_lock();
            command(&self.dir.path.join("tusk"), &all, env).spawn()
        }
        .expect("spawn tusk")
        .wait_with_output()
        .expect("wait");
        let text = std::fs::read_to_string(&log).expect("termination log");
        assert!(text.len() <= 4096, "{} bytes", text.len());
        let outcome: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("outcome {text:?}: {e}"));
        assert_eq!(
            outcome["ok"].as_bool(),
            Some(output.status.success()),
            "the exit status and the outcome agree: {outcome}"
        );
        (output.status.success(), outcome)
    }

    fn dirs_args(&self, old_bindir: &Path) -> Vec<String> {
        vec![
            "--old-bindir".into(),
            old_bindir.display().to_string(),
            "--new-bindir".into(),
            bindir(NEW).display().to_string(),
            "--pgdata".into(),
            self.pgdata.display().to_string(),
        ]
    }

    fn step(
        &self,
        step: &str,
        old_bindir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> (bool, serde_json::Value) {
        let dirs = self.dirs_args(old_bindir);
        let mut args: Vec<&str> = vec![step];
        args.extend(dirs.iter().map(String::as_str));
        args.extend_from_slice(extra);
        self.upgrade(&args, env)
    }

    fn rollback(&self) -> (bool, serde_json::Value) {
        let pgdata = self.pgdata.display().to_string();
        let old = OLD.to_string();
        self.upgrade(&["rollback", "--pgdata", &pgdata, "--old-major", &old], &[])
    }

    fn old_dir(&self) -> PathBuf {
        PathBuf::from(format!("{}.{OLD}.old", self.pgdata.display()))
    }

    fn state(&self) -> Option<serde_json::Value> {
        let text =
            std::fs::read_to_string(format!("{}.upgrade.json", self.pgdata.display())).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn data_major(&self) -> String {
        std::fs::read_to_string(self.pgdata.join("PG_VERSION"))
            .expect("PG_VERSION")
            .trim()
            .to_owned()
    }

    /// Every row, the index, the sequence, and the settings are there.
    async fn assert_data(&self, major: u32) {
        let client = self.client().await;
        let version: String = client
            .query_one("SHOW server_version_num", &[])
            .await
            .expect("version")
            .get(0);
        assert_eq!(version.parse::<u32>().expect("number") / 10000, major);
        let row = client
            .query_one("SELECT count(*), sum(id)::bigint FROM items", &[])
            .await
            .expect("count");
        assert_eq!(row.get::<_, i64>(0), ROWS);
        assert_eq!(row.get::<_, i64>(1), ROWS * (ROWS + 1) / 2);
        client
            .batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
            .await
            .expect("set");
        let plan: Vec<String> = client
            .query("EXPLAIN SELECT id FROM items WHERE name = 'item 42'", &[])
            .await
            .expect("explain")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            plan.iter().any(|l| l.contains("items_name")),
            "the index is used: {plan:?}"
        );
        let found: i64 = client
            .query_one("SELECT id FROM items WHERE name = 'item 42'", &[])
            .await
            .expect("lookup")
            .get(0);
        assert_eq!(found, 42);
        let row = client
            .query_one("SELECT last_value, is_called FROM ticket", &[])
            .await
            .expect("sequence");
        assert_eq!(
            (row.get::<_, i64>(0), row.get::<_, bool>(1)),
            (106, true),
            "the sequence is where it was"
        );
        for (setting, expected) in [
            ("data_checksums", "on".to_owned()),
            ("wal_segment_size", format!("{SEGMENT_MB}MB")),
            ("server_encoding", "UTF8".to_owned()),
        ] {
            let value: String = client
                .query_one(&format!("SHOW {setting}"), &[])
                .await
                .expect("show")
                .get(0);
            assert_eq!(value, expected, "{setting}");
        }
        let row = client
            .query_one(
                "SELECT datcollate::text, datctype::text FROM pg_database WHERE datname = 'template0'",
                &[],
            )
            .await
            .expect("locale");
        assert_eq!(
            (row.get::<_, String>(0), row.get::<_, String>(1)),
            ("C.UTF-8".to_owned(), "C.UTF-8".to_owned())
        );
    }
}

fn message(outcome: &serde_json::Value) -> String {
    outcome["message"].as_str().unwrap_or_default().to_owned()
}

/// The whole path on one cluster: a live check (through the server's own
/// socket, and through the TCP forwarder), the link upgrade, a rerun that
/// changes nothing, a rollback to 15 with every row, the upgrade again, 17
/// with every row, the index, the sequence and the settings, and rollbacks
/// refused once 17 started.
#[tokio::test(flavor = "multi_thread")]
async fn check_run_rollback_and_run_again_keep_every_row() {
    let old = Old::create("upgrade-path");
    old.start(OLD);
    old.fill().await;
    let pid_before = std::fs::read_to_string(old.pgdata.join("postmaster.pid")).expect("pid");

    let (ok, outcome) = old.step("check", &bindir(OLD), &[], &[]);
    assert!(ok, "{outcome}");
    assert!(message(&outcome).contains("passed"), "{outcome}");
    assert!(
        message(&outcome).contains("WAL segments of 32 MB"),
        "{outcome}"
    );

    // Through TCP, as from the Job's pod: the socket pg_upgrade uses is the
    // forwarder's, not the server's.
    let port = old.port.to_string();
    let (ok, outcome) = old.step(
        "check",
        &bindir(OLD),
        &["--primary-host", "127.0.0.1", "--port", &port],
        &[("POSTGRES_SUPERUSER_PASSWORD", SUPERUSER_PASSWORD)],
    );
    assert!(ok, "{outcome}");
    // Without the password the forwarded connections are refused: proof
    // that they went over TCP (local connections are peer-authenticated).
    let (ok, outcome) = old.step(
        "check",
        &bindir(OLD),
        &["--primary-host", "127.0.0.1", "--port", &port],
        &[("POSTGRES_SUPERUSER_PASSWORD", "wrong")],
    );
    assert!(!ok, "{outcome}");
    assert!(message(&outcome).contains("password"), "{outcome}");

    // The checks left the live server alone.
    let pid_after = std::fs::read_to_string(old.pgdata.join("postmaster.pid")).expect("pid");
    assert_eq!(pid_before, pid_after);
    assert!(old.state().is_none());
    old.assert_data(OLD).await;

    // A run while the server runs is refused.
    let (ok, outcome) = old.step("run", &bindir(OLD), &[], &[]);
    assert!(
        !ok && message(&outcome).contains("postmaster.pid"),
        "{outcome}"
    );

    old.stop(OLD);
    let (ok, outcome) = old.step("run", &bindir(OLD), &[], &[]);
    assert!(ok, "{outcome}");
    assert_eq!(old.data_major(), NEW.to_string());
    assert!(old.old_dir().join("global/pg_control.old").exists());
    assert_eq!(old.state().expect("state")["stage"], "swapped");
    let (ok, outcome) = old.step("run", &bindir(OLD), &[], &[]);
    assert!(
        ok && message(&outcome).contains("nothing to do"),
        "{outcome}"
    );

    let (ok, outcome) = old.rollback();
    assert!(ok, "{outcome}");
    assert_eq!(old.data_major(), OLD.to_string());
    assert!(!old.old_dir().exists());
    assert!(old.state().is_none());
    old.start(OLD);
    old.assert_data(OLD).await;
    old.stop(OLD);

    let (ok, outcome) = old.step("run", &bindir(OLD), &[], &[]);
    assert!(ok, "{outcome}");
    old.start(NEW);
    old.assert_data(NEW).await;
    let next: i64 = old
        .client()
        .await
        .query_one("SELECT nextval('ticket')", &[])
        .await
        .expect("nextval")
        .get(0);
    assert_eq!(next, 107, "the sequence continues where it was");
    // What the instance manager does on the first answer: started first.
    let state = old.state().expect("state");
    let started = serde_json::json!({"from": OLD, "to": NEW, "stage": "started"});
    std::fs::write(
        format!("{}.upgrade.json", old.pgdata.display()),
        started.to_string(),
    )
    .expect("state");
    assert_eq!(state["stage"], "swapped");
    let (ok, outcome) = old.rollback();
    assert!(
        !ok && message(&outcome).contains("already started"),
        "{outcome}"
    );
    assert_eq!(old.data_major(), NEW.to_string());
    old.stop(NEW);
    // Once the old directory is gone, a rollback still refuses.
    std::fs::remove_dir_all(old.old_dir()).expect("remove old");
    std::fs::remove_file(format!("{}.upgrade.json", old.pgdata.display())).expect("rm");
    let (ok, outcome) = old.rollback();
    assert!(!ok && message(&outcome).contains("impossible"), "{outcome}");
    let (ok, outcome) = old.step("run", &bindir(OLD), &[], &[]);
    assert!(
        ok && message(&outcome).contains("nothing to do"),
        "{outcome}"
    );
}

impl Old {
    /// Serves TLS as a Tusk primary does: a certificate naming `orders-rw`
    /// and the instance, from a fresh CA, and a pg_hba that takes TCP only
    /// over TLS (`hostssl`). Returns the CA file a check verifies it with.
    fn serve_tls(&self) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let now = jiff::Timestamp::now();
        let ca = tusk::tls::Authority::generate(
            "upgrade test CA",
            jiff::SignedDuration::from_hours(24),
            now,
        )
        .expect("CA");
        let names = ["orders-rw".to_owned(), "orders-1".to_owned()];
        let leaf = ca
            .issue_server(&names, jiff::SignedDuration::from_hours(24), now)
            .expect("server certificate");
        let cert = self.pgdata.join("server.crt");
        let key = self.pgdata.join("server.key");
        std::fs::write(&cert, &leaf.cert_pem).expect("cert");
        std::fs::write(&key, &leaf.key_pem).expect("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let mut conf =
            std::fs::read_to_string(self.pgdata.join("postgresql.auto.conf")).expect("conf");
        conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        std::fs::write(self.pgdata.join("postgresql.auto.conf"), conf).expect("conf");
        std::fs::write(
            self.pgdata.join("pg_hba.conf"),
            "local all all peer\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
        )
        .expect("pg_hba");
        chown_tree(&self.pgdata);
        let ca_file = self.dir.path.join("primary-ca.crt");
        std::fs::write(&ca_file, ca.cert_pem()).expect("CA file");
        chown_tree(&ca_file);
        ca_file
    }
}

/// A primary that serves TLS and takes TCP only over TLS, as every Tusk
/// instance does: the check through the plaintext relay is refused by
/// pg_hba (what the Job did before), through the TLS relay verifying
/// `orders-rw` it passes, and a relay expecting another name is refused
/// with the reason in the outcome.
#[tokio::test(flavor = "multi_thread")]
async fn a_check_reaches_a_tls_only_primary_through_the_tls_relay() {
    let old = Old::create("upgrade-tls");
    let ca_file = old.serve_tls();
    old.start(OLD);
    let port = old.port.to_string();
    let ca = ca_file.display().to_string();
    let tcp = ["--primary-host", "127.0.0.1", "--port", &port];
    let env = [("POSTGRES_SUPERUSER_PASSWORD", SUPERUSER_PASSWORD)];

    let (ok, outcome) = old.step("check", &bindir(OLD), &tcp, &env);
    assert!(!ok, "{outcome}");
    assert!(message(&outcome).contains("no encryption"), "{outcome}");

    let with_tls = |name: &'static str| -> Vec<String> {
        tcp.iter()
            .map(|a| (*a).to_owned())
            .chain([
                "--primary-name".into(),
                name.into(),
                "--primary-ca".into(),
                ca.clone(),
            ])
            .collect()
    };
    let args = with_tls("orders-rw");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, outcome) = old.step("check", &bindir(OLD), &args, &env);
    assert!(ok, "{outcome}");
    assert!(
        message(&outcome).contains(&format!("from {OLD} to {NEW} passed")),
        "{outcome}"
    );

    let args = with_tls("orders-ro");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, outcome) = old.step("check", &bindir(OLD), &args, &env);
    assert!(!ok, "{outcome}");
    assert!(
        message(&outcome).contains(r#"not valid for name \"orders-ro\""#)
            || message(&outcome).contains(r#"not valid for name "orders-ro""#),
        "{outcome}"
    );
    old.stop(OLD);
}

/// A user table with a `regproc` column: the live check fails, names the
/// cause and quotes the report file with the column; nothing changed.
#[tokio::test(flavor = "multi_thread")]
async fn a_check_that_fails_names_the_cause() {
    let old = Old::create("upgrade-regproc");
    old.start(OLD);
    old.client()
        .await
        .batch_execute("CREATE TABLE handlers (id int, handler regproc); INSERT INTO handlers VALUES (1, 'now')")
        .await
        .expect("create");
    let (ok, outcome) = old.step("check", &bindir(OLD), &[], &[]);
    assert!(!ok, "{outcome}");
    let text = message(&outcome);
    assert!(text.contains("reg* data types in user tables"), "{text}");
    assert!(text.contains("tables_using_reg.txt"), "{text}");
    assert!(text.contains("handlers"), "{text}");
    assert!(old.state().is_none());
    old.stop(OLD);
    // A run fails the same way and leaves 15 startable.
    let (ok, outcome) = old.step("run", &bindir(OLD), &[], &[]);
    assert!(!ok, "{outcome}");
    assert!(message(&outcome).contains("handlers"), "{outcome}");
    assert!(message(&outcome).contains("unchanged"), "{outcome}");
    assert_eq!(old.data_major(), OLD.to_string());
    assert!(old.state().is_none());
    old.start(OLD);
    let n: i64 = old
        .client()
        .await
        .query_one("SELECT count(*) FROM handlers", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1);
    old.stop(OLD);
}

/// `stage-old` from this host's 15 into a directory: the staged programs
/// find their share and module directories inside it and their libraries in
/// lib-deps; `check` and `run` work with them.
#[tokio::test(flavor = "multi_thread")]
async fn staged_old_binaries_check_and_upgrade() {
    let old = Old::create("upgrade-staged");
    let dest = old.dir.subdir("staged");
    let dest_arg = dest.display().to_string();
    let old_bindir = bindir(OLD).display().to_string();
    let (ok, outcome) = old.upgrade(
        &["stage-old", "--dest", &dest_arg, "--bindir", &old_bindir],
        &[],
    );
    assert!(ok, "{outcome}");
    let staged = dest.join("bin");
    let real = dest.join(format!("usr/lib/postgresql/{OLD}/bin"));
    assert!(real.join("postgres").is_file());
    assert!(
        dest.join(format!("usr/share/postgresql/{OLD}/postgres.bki"))
            .is_file()
    );
    assert!(
        !dest
            .join(format!("usr/lib/postgresql/{OLD}/lib/llvmjit.so"))
            .exists()
    );
    let deps: Vec<String> = std::fs::read_dir(dest.join("lib-deps"))
        .expect("lib-deps")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(deps.iter().any(|d| d.starts_with("libssl")), "{deps:?}");
    assert!(
        !deps
            .iter()
            .any(|d| d.starts_with("libc.so") || d.starts_with("ld-linux")),
        "{deps:?}"
    );
    let version = run_as_postgres(&staged.join("postgres"), &["-V"], &[]);
    assert!(version.contains("(PostgreSQL) 15."), "{version}");
    // Relative to the staged executable, not the compiled-in /usr paths.
    let sharedir = run_as_postgres(
        &staged.join("pg_config"),
        &["--sharedir", "--pkglibdir"],
        &[],
    );
    assert!(
        sharedir.lines().all(|l| l.starts_with(&dest_arg)),
        "{sharedir}"
    );

    // A server from the staged copy loads its modules and libraries there.
    old.start_with(&staged);
    old.fill().await;
    old.client()
        .await
        .batch_execute("DO $$ BEGIN PERFORM 1; END $$")
        .await
        .expect("plpgsql");
    let pid: i32 = std::fs::read_to_string(old.pgdata.join("postmaster.pid"))
        .expect("pid")
        .lines()
        .next()
        .and_then(|l| l.parse().ok())
        .expect("pid");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    assert!(
        maps.contains(&format!("{dest_arg}/lib-deps/")),
        "libraries from lib-deps"
    );
    assert!(maps.contains(&format!("{dest_arg}/usr/lib/postgresql/{OLD}/bin/postgres")));

    let (ok, outcome) = old.step("check", &staged, &[], &[]);
    assert!(ok, "{outcome}");
    old.stop_with(&staged);
    let (ok, outcome) = old.step("run", &staged, &[], &[]);
    assert!(ok, "{outcome}");
    old.start(NEW);
    old.assert_data(NEW).await;
    old.stop(NEW);
}

impl Old {
    fn start_with(&self, bindir: &Path) {
        let log = self.dir.path.join("server-staged.log");
        std::fs::write(&log, "").expect("log");
        chown_tree(&log);
        run_as_postgres(
            &bindir.join("pg_ctl"),
            &[
                "start",
                "--wait",
                "--pgdata",
                self.pgdata.to_str().expect("utf-8"),
                "--log",
                log.to_str().expect("utf-8"),
            ],
            &[],
        );
    }

    fn stop_with(&self, bindir: &Path) {
        run_as_postgres(
            &bindir.join("pg_ctl"),
            &[
                "stop",
                "--wait",
                "--mode=fast",
                "--pgdata",
                self.pgdata.to_str().expect("utf-8"),
            ],
            &[],
        );
    }
}

/// The instance managers' side: a Tusk 15 primary and replica; the
/// primary's data upgraded; the 17 manager starts it, marks the upgrade
/// started, removes the old directory and rebuilds statistics; the replica's
/// 15 data, under a 17 image, is cloned again from the upgraded primary
/// instead of crash-looping.
#[tokio::test(flavor = "multi_thread")]
async fn managers_finish_the_upgrade_and_reclone_replicas() {
    let ready = std::time::Duration::from_secs(120);
    let dir = TestDir::new("upgrade-managers");
    let pg15 = Pg::installed(OLD);
    let pg17 = Pg::installed(NEW);
    let mut primary = Manager::start(&dir, Options::primary(&pg15, "orders-1"));
    primary.wait_ready(ready).await;
    let mut replica = Manager::start(&dir, Options::replica(&pg15, "orders-2", primary.pg_port));
    replica.wait_ready(ready).await;
    superuser(primary.pg_port)
        .await
        .batch_execute("CREATE TABLE kept AS SELECT g AS id FROM generate_series(1, 1000) g")
        .await
        .expect("fill");
    replica.stop();
    primary.stop();

    let pgdata = primary.pgdata.clone();
    let scratch = dir.subdir("scratch");
    let log = scratch.join("termination-log");
    let tusk = dir.path.join("tusk");
    let output = {
        let _guard = exec_lock();
        command(
            &tusk,
            &[
                "upgrade",
                "run",
                "--old-bindir",
                bindir(OLD).to_str().expect("utf-8"),
                "--new-bindir",
                bindir(NEW).to_str().expect("utf-8"),
                "--pgdata",
                pgdata.to_str().expect("utf-8"),
                "--work-dir",
                scratch.join("work").to_str().expect("utf-8"),
                "--termination-log",
                log.to_str().expect("utf-8"),
            ],
            &[],
        )
        .spawn()
    }
    .expect("spawn")
    .wait_with_output()
    .expect("wait");
    assert!(
        output.status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let old_dir = PathBuf::from(format!("{}.{OLD}.old", pgdata.display()));
    let state = PathBuf::from(format!("{}.upgrade.json", pgdata.display()));
    assert!(old_dir.exists() && state.exists());

    let mut primary = Manager::start(&dir, Options::primary(&pg17, "orders-1"));
    primary.wait_ready(ready).await;
    eventually("the old directory removed", ready, || async {
        (!old_dir.exists() && !state.exists()).then_some(())
    })
    .await;
    let n: i64 = superuser(primary.pg_port)
        .await
        .query_one("SELECT count(*) FROM kept", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1000);
    eventually("statistics rebuilt", ready, || async {
        primary
            .logs()
            .contains("statistics rebuilt after the upgrade")
            .then_some(())
    })
    .await;

    let mut replica = Manager::start(&dir, Options::replica(&pg17, "orders-2", primary.pg_port));
    replica.wait_ready(ready).await;
    let n: i64 = superuser(replica.pg_port)
        .await
        .query_one("SELECT count(*) FROM kept", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1000);
    replica.stop();
    primary.stop();

    // A primary's data of another major is never wiped: refused, named.
    let mut stale = Manager::start(&dir, Options::primary(&pg15, "orders-1"));
    let exited = eventually("the 15 manager refuses 17 data", ready, || {
        let status = stale
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        async move { status }
    })
    .await;
    assert!(!exited.success());
    assert!(
        stale.logs().contains("cannot be downgraded"),
        "{}",
        stale.logs()
    );
    assert_eq!(
        std::fs::read_to_string(pgdata.join("PG_VERSION"))
            .expect("version")
            .trim(),
        NEW.to_string()
    );
}

/// With a WAL volume (`TUSK_WALDIR`, `spec.walStorage`): `run` gives the new
/// cluster a WAL directory of its own beside the old one's, which stays for a
/// rollback; a rollback removes the new cluster with its WAL; the upgraded
/// server serves every row with its WAL on the volume; and the manager's
/// first-start step removes the old cluster with its WAL.
#[tokio::test(flavor = "multi_thread")]
async fn with_a_wal_volume_each_cluster_keeps_its_own_wal() {
    let old = Old::create_with("upgrade-wal", Some("pg_wal"));
    let wal = old.dir.path.join("wal-volume/pg_wal");
    let new_wal = old.dir.path.join(format!("wal-volume/pg_wal.{NEW}"));
    let link = |dir: &Path| std::fs::read_link(dir.join("pg_wal")).expect("pg_wal is a symlink");
    assert_eq!(link(&old.pgdata), wal);
    old.start(OLD);
    old.fill().await;
    old.stop(OLD);
    let waldir = wal.display().to_string();
    let env = [("TUSK_WALDIR", waldir.as_str())];

    let (ok, outcome) = old.step("run", &bindir(OLD), &[], &env);
    assert!(ok, "{outcome}");
    assert_eq!(old.data_major(), NEW.to_string());
    assert_eq!(link(&old.pgdata), new_wal);
    assert_eq!(link(&old.old_dir()), wal, "the old cluster's WAL stays");

    let (ok, outcome) = old.rollback();
    assert!(ok, "{outcome}");
    assert_eq!(link(&old.pgdata), wal);
    assert!(!new_wal.exists(), "the rejected cluster's WAL went with it");
    old.start(OLD);
    old.assert_data(OLD).await;
    old.stop(OLD);

    let (ok, outcome) = old.step("run", &bindir(OLD), &[], &env);
    assert!(ok, "{outcome}");
    assert_eq!(link(&old.pgdata), new_wal);
    old.start(NEW);
    old.assert_data(NEW).await;
    let segment: String = old
        .client()
        .await
        .query_one("SELECT pg_walfile_name(pg_current_wal_insert_lsn())", &[])
        .await
        .expect("segment")
        .get(0);
    assert!(
        new_wal.join(&segment).is_file(),
        "{segment} in {}",
        new_wal.display()
    );
    tusk::upgrade::state::finish_first_start(&old.pgdata).expect("first start");
    assert!(!old.old_dir().exists());
    assert!(!wal.exists(), "the old cluster's WAL went with it");
    assert!(new_wal.join(&segment).is_file());
    old.stop(NEW);
}
