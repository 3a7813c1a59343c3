//! Shared harness for the instance manager's component tests: real `tusk instance`
//! processes supervising real PostgreSQL on loopback, each with its own ports and
//! temporary directories.
//!
//! PostgreSQL refuses to run as root, and these tests run as root on the CI
//! machines. The simplest correct answer is to start the manager itself as the
//! `postgres` OS user (`CommandExt::uid/gid`), exactly as it runs in a pod (uid
//! 999): no test-only option in the product, and everything it creates belongs to
//! the right user. The binary is copied into the test's directory first, because
//! cargo's target directory under /root is not reachable for that user.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, User};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const SUPERUSER_PASSWORD: &str = "super'secret";
pub const REPLICATION_PASSWORD: &str = "repl:secret\\x";
pub const APP_PASSWORD: &str = "app-secret";
pub const TOKEN: &str = "test-token-0123456789";

/// One PostgreSQL major the tests run against, and where its programs are.
#[derive(Clone, Debug)]
pub struct Pg {
    pub major: u32,
    pub bindir: PathBuf,
}

impl Pg {
    /// The major as Debian's packages install it. Fails the test, never skips
    /// it, when the major is missing: scripts/install-test-deps installs every
    /// major [`per_major!`] names, and CI runs it first.
    pub fn installed(major: u32) -> Pg {
        let bindir = PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"));
        // Every program the manager runs from its bindir.
        for program in ["postgres", "initdb", "pg_basebackup"] {
            assert!(
                bindir.join(program).is_file(),
                "PostgreSQL {major} is not installed ({} is missing): \
                 run scripts/install-test-deps (as root) first",
                bindir.join(program).display()
            );
        }
        Pg { major, bindir }
    }
}

/// Stamps out one test per supported PostgreSQL major for an async test body
/// that takes the major: `async fn name(pg: Pg)` and then `per_major!(name);`
/// give the tests `name::pg15` and `name::pg17` (a module and a function may
/// share a name). A failure names its major, a filter such as `pg15` picks one
/// major, and the variants run in parallel like any other tests. A body left
/// without its `per_major!` is dead code, which clippy refuses. Keep the list in
/// step with scripts/install-test-deps.
macro_rules! per_major {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread")]
            async fn pg15() {
                super::$name($crate::instance_support::Pg::installed(15)).await
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn pg17() {
                super::$name($crate::instance_support::Pg::installed(17)).await
            }
        }
    };
}
pub(crate) use per_major;

/// A loopback port nothing listens on, and that this process has not handed out
/// before: the port is only taken once the manager or PostgreSQL binds it,
/// seconds later (after initdb), and the kernel may offer the same free port to
/// a test running meanwhile in another thread.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<BTreeSet<u16>> = std::sync::Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind an ephemeral port")
            .local_addr()
            .expect("local addr")
            .port();
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// The uid/gid to run the manager as: `postgres` when the tests run as root.
pub fn run_as() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = User::from_name("postgres")
        .expect("read /etc/passwd")
        .expect("the tests run as root, so they need a postgres OS user (scripts/install-test-deps installs it)");
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

/// Held while a test thread writes an executable or forks: a child forked while
/// another thread still has a freshly copied binary open for writing would keep
/// that descriptor until its exec, and exec of that binary then fails with
/// ETXTBSY ("text file busy").
static EXEC_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn exec_lock() -> std::sync::MutexGuard<'static, ()> {
    EXEC_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Gives `path` and everything under it to the user the manager runs as.
pub fn chown_tree(path: &Path) {
    let Some((uid, gid)) = run_as() else {
        return;
    };
    let owner = (
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    );
    let mut pending = vec![path.to_owned()];
    while let Some(next) = pending.pop() {
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            &next,
            owner.0,
            owner.1,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .expect("chown");
        if next.is_dir() && !next.is_symlink() {
            for entry in std::fs::read_dir(&next).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
        }
    }
}

/// A temporary directory owned by the user the manager runs as, removed on drop.
pub struct TestDir {
    pub path: PathBuf,
}

impl TestDir {
    pub fn new(name: &str) -> TestDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "tusk-it-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create test dir");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // The binary, copied where the manager's user can execute it.
        let binary = path.join("tusk");
        let guard = exec_lock();
        std::fs::copy(env!("CARGO_BIN_EXE_tusk"), &binary).expect("copy tusk");
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755))
            .expect("chmod tusk");
        drop(guard);
        TestDir { path }
    }

    /// A subdirectory owned by the manager's user.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let dir = self.path.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        if let Some((uid, gid)) = run_as() {
            nix::unistd::chown(
                &dir,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .expect("chown");
        }
        dir
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.path);
        } else {
            eprintln!("keeping {} for inspection", self.path.display());
        }
    }
}

/// How to start one manager.
pub struct Options {
    pub instance: String,
    pub bootstrap: &'static str,
    pub primary_port: Option<u16>,
    pub parameters: String,
    pub token: Option<String>,
    pub pg: Pg,
    /// More environment for the manager (e.g. OTLP settings).
    pub env: Vec<(String, String)>,
}

impl Options {
    pub fn primary(pg: &Pg, instance: &str) -> Options {
        Options {
            instance: instance.to_owned(),
            bootstrap: "initdb",
            primary_port: None,
            parameters: "{}".to_owned(),
            token: Some(TOKEN.to_owned()),
            pg: pg.clone(),
            env: Vec::new(),
        }
    }

    pub fn replica(pg: &Pg, instance: &str, primary_port: u16) -> Options {
        Options {
            bootstrap: "clone",
            primary_port: Some(primary_port),
            ..Options::primary(pg, instance)
        }
    }
}

/// A running `tusk instance`; stopped with SIGTERM when dropped.
pub struct Manager {
    pub child: Option<Child>,
    pub pg_port: u16,
    pub http_port: u16,
    pub pgdata: PathBuf,
    pub log: PathBuf,
    pub pg: Pg,
}

impl Manager {
    pub fn start(dir: &TestDir, options: Options) -> Manager {
        let volume = dir.subdir(&format!("{}-volume", options.instance));
        let run = dir.subdir(&format!("{}-run", options.instance));
        let pgdata = volume.join("pgdata");
        let pg_port = free_port();
        let http_port = free_port();
        let log = dir.path.join(format!("{}.log", options.instance));
        let log_file = std::fs::File::create(&log).expect("create log");
        let mut command = Command::new(dir.path.join("tusk"));
        command
            .arg("instance")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &dir.path)
            .env("TUSK_INSTANCE", &options.instance)
            .env("TUSK_DATABASE", "orders")
            .env("PGDATA", &pgdata)
            .env("TUSK_BOOTSTRAP", options.bootstrap)
            .env("POSTGRES_SUPERUSER_PASSWORD", SUPERUSER_PASSWORD)
            .env("TUSK_REPLICATION_PASSWORD", REPLICATION_PASSWORD)
            .env("TUSK_APP_PASSWORD", APP_PASSWORD)
            .env("TUSK_APP_DATABASE", "app")
            .env("TUSK_APP_OWNER", "app")
            .env("TUSK_SYNC_MODE", "async")
            .env("TUSK_PARAMETERS", &options.parameters)
            .env("TUSK_LISTEN", format!("127.0.0.1:{http_port}"))
            .env("TUSK_PORT", pg_port.to_string())
            .env("TUSK_LISTEN_ADDRESSES", "127.0.0.1")
            .env("TUSK_SOCKET_DIR", &run)
            .env("TUSK_BINDIR", &options.pg.bindir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup log"))
            .stderr(log_file);
        if let Some(port) = options.primary_port {
            command
                .env("TUSK_PRIMARY_SERVICE", "127.0.0.1")
                .env("TUSK_PRIMARY_PORT", port.to_string());
        }
        if let Some(token) = &options.token {
            command.env("TUSK_INSTANCE_TOKEN", token);
        }
        command.envs(options.env.iter().map(|(k, v)| (k, v)));
        if let Some((uid, gid)) = run_as() {
            command.uid(uid).gid(gid);
        }
        let child = {
            let _guard = exec_lock();
            command.spawn().expect("start tusk instance")
        };
        Manager {
            child: Some(child),
            pg_port,
            http_port,
            pgdata,
            log,
            pg: options.pg,
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for `/readyz`, failing with the manager's log, then check that the
    /// instance runs the major the test asked for.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        self.wait_readyz(timeout).await;
        self.assert_runs_major();
    }

    /// A `pg15` test that silently ran PostgreSQL 17 (a program found on PATH,
    /// or Debian's wrappers in /usr/bin, which pick the newest) would prove
    /// nothing about 15. Checked from the outside, without asking the manager:
    /// the data directory's own major, and the binary the postmaster runs.
    fn assert_runs_major(&self) {
        let data_major = std::fs::read_to_string(self.pgdata.join("PG_VERSION"))
            .expect("read PG_VERSION of a ready instance");
        assert_eq!(
            data_major.trim(),
            self.pg.major.to_string(),
            "the data directory's major\n{}",
            self.logs()
        );
        let pid = self
            .postmaster_pid()
            .expect("postmaster.pid of a ready instance");
        let running =
            std::fs::read_link(format!("/proc/{pid}/exe")).expect("the postmaster's binary");
        let expected = self
            .pg
            .bindir
            .join("postgres")
            .canonicalize()
            .expect("canonical path of postgres");
        assert_eq!(running, expected, "the postmaster's binary");
    }

    async fn wait_readyz(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "the manager exited ({status}) before ready:\n{}",
                    self.logs()
                );
            }
            if let Ok((200, _)) = http(self.http_port, "GET", "/readyz", None, None).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not ready after {timeout:?}:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn status(&self) -> serde_json::Value {
        let (code, body) = http(self.http_port, "GET", "/status", None, None)
            .await
            .expect("GET /status");
        assert_eq!(code, 200, "/status: {body}\n{}", self.logs());
        serde_json::from_str(&body).expect("status JSON")
    }

    /// The postmaster's pid, from the first line of postmaster.pid.
    pub fn postmaster_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.pgdata.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// SIGTERM and wait for the exit status (SIGKILL after 30 s).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A tiny HTTP/1.1 client (no client crate among the dependencies).
pub async fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let body = body.unwrap_or("");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n{auth}\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(90), stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::other("HTTP response timed out"))??;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("malformed response: {text}")))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status code: {head}")))?;
    Ok((code, body.to_owned()))
}

/// A TCP connection with a password (SCRAM, as pg_hba.conf demands).
pub async fn connect(
    port: u16,
    user: &str,
    password: &str,
    dbname: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user(user)
        .password(password)
        .dbname(dbname)
        .connect_timeout(Duration::from_secs(5));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

pub async fn superuser(port: u16) -> tokio_postgres::Client {
    connect(port, "postgres", SUPERUSER_PASSWORD, "postgres")
        .await
        .expect("connect as postgres")
}

/// Poll `check` until it returns Some, or fail with `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub fn path_exists(path: &Path) -> bool {
    path.exists()
}

/// Closes the current WAL segment and waits until the archiver has stored it:
/// everything written so far is then in the archive.
pub async fn archive_all(client: &tokio_postgres::Client) {
    // The segment just closed: a record written after the switch (an
    // autovacuum analyze, a standby snapshot) would put the insert position
    // in a segment that only archive_timeout closes.
    let closed: String = client
        .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
        .await
        .expect("switch")
        .get(0);
    eventually(
        "the last segment archived",
        Duration::from_secs(60),
        || async {
            let row = client
                .query_one(
                    "SELECT last_archived_wal >= $1 FROM pg_stat_archiver",
                    &[&closed],
                )
                .await
                .ok()?;
            row.get::<_, Option<bool>>(0).unwrap_or(false).then_some(())
        },
    )
    .await;
}

/// `GET /backups` of `manager`: its base backup runs.
pub async fn backups(manager: &Manager) -> Vec<serde_json::Value> {
    let (code, body) = http(manager.http_port, "GET", "/backups", None, None)
        .await
        .expect("GET /backups");
    assert_eq!(code, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("json");
    listed["backups"].as_array().cloned().unwrap_or_default()
}

/// `POST /backups` asking `manager` for backup `name`: the status code and body.
pub async fn start_backup(manager: &Manager, name: &str) -> (u16, serde_json::Value) {
    let body = format!(r#"{{"backup": "{name}"}}"#);
    let (code, body) = http(
        manager.http_port,
        "POST",
        "/backups",
        Some(TOKEN),
        Some(&body),
    )
    .await
    .expect("POST /backups");
    (
        code,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// Waits until the run `name` has finished, nudging `primary` to switch WAL
/// (as the operator does for a standby's backup) while it waits for it.
pub async fn finished(
    manager: &Manager,
    primary: Option<&Manager>,
    name: &str,
) -> serde_json::Value {
    eventually(
        &format!("backup {name} finished"),
        Duration::from_secs(120),
        || async {
            let run = backups(manager)
                .await
                .into_iter()
                .find(|b| b["backup"] == name)?;
            if run["stage"] == "waiting_for_wal"
                && let Some(primary) = primary
            {
                let _ = http(primary.http_port, "POST", "/wal/switch", Some(TOKEN), None).await;
            }
            (run["run"] != "running").then_some(run)
        },
    )
    .await
}
