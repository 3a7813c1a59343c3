//! A real S3 server for component tests: versitygw (built from its Go module
//! by scripts/install-tools) over a temporary directory on loopback, stopped
//! when dropped; it can be stopped and started again on the same port and
//! data to play an outage.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tusk::objectstore::{Store, StoreConfig};

pub const ACCESS_KEY: &str = "tusk-test-access";
pub const SECRET_KEY: &str = "tusk-test-secret-0123456789";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The versitygw binary, built when missing.
pub fn versitygw() -> PathBuf {
    let output = Command::new(repo().join("scripts/install-tools"))
        .args(["--path", "versitygw"])
        .output()
        .expect("run scripts/install-tools");
    assert!(
        output.status.success(),
        "scripts/install-tools --path versitygw: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

pub struct S3Server {
    child: Option<Child>,
    pub port: u16,
    root: PathBuf,
    meta: PathBuf,
    log: PathBuf,
}

impl S3Server {
    /// Serves `root` (each subdirectory a bucket) on a free loopback port.
    pub fn start(root: &Path) -> S3Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let data = root.join("buckets");
        std::fs::create_dir_all(&data).expect("mkdir s3");
        // Object metadata beside the data, not in xattrs, which not every
        // filesystem under a test directory keeps.
        std::fs::create_dir_all(root.join("s3meta")).expect("mkdir s3meta");
        let mut server = S3Server {
            child: None,
            port,
            root: data,
            meta: root.join("s3meta"),
            log: root.join("versitygw.log"),
        };
        server.resume();
        server
    }

    /// Starts the server again after [`S3Server::stop`], same port, same data.
    pub fn resume(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log");
        let child = Command::new(versitygw())
            .args(["--access", ACCESS_KEY, "--secret", SECRET_KEY, "--quiet"])
            .args(["--port", &format!("127.0.0.1:{}", self.port)])
            .arg("posix")
            .arg("--sidecar")
            .arg(&self.meta)
            .arg(&self.root)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .spawn()
            .expect("start versitygw");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "versitygw did not listen: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (SIGKILL: an outage, not a goodbye).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn config(&self, bucket: &str) -> StoreConfig {
        StoreConfig {
            endpoint: Some(self.endpoint()),
            region: "us-east-1".into(),
            bucket: bucket.into(),
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
            ca_bundle: None,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A client of a new bucket on this server.
    pub async fn bucket(&self, bucket: &str) -> Store {
        let store = Store::new(&self.config(bucket)).expect("a store");
        store.create_bucket().await.expect("create the bucket");
        store
    }

    /// The environment `tusk wal-archive` and the instance manager read.
    pub fn env(&self, bucket: &str, path: &str) -> Vec<(String, String)> {
        [
            ("TUSK_OBJECTSTORE_BUCKET", bucket),
            ("TUSK_OBJECTSTORE_PATH", path),
            ("TUSK_OBJECTSTORE_ENDPOINT", &self.endpoint()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
