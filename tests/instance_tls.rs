//! Component tests: PostgreSQL with Tusk's TLS material, on loopback. A CA
//! and its leaves are made here (rcgen), laid out as the kubelet mounts a
//! Secret (`..data` swapped atomically), and handed to real `tusk instance`
//! processes through `TUSK_TLS_DIR`.
//!
//! What they prove: a client verifying the server's name (libpq
//! `sslmode=verify-full`) gets in; plaintext TCP is refused by pg_hba; the
//! application role logs in with the certificate Tusk's issuer makes for it
//! and never with its password; a standby clones and streams over TLS
//! authenticated by its replication certificate, with no usable replication
//! password anywhere; a renewed
//! certificate is presented by new handshakes without a postmaster restart,
//! and a broken one is refused while the previous stays in effect; and
//! PostgreSQL 17's direct TLS negotiation (ALPN `postgresql`) works.
//!
//! Readiness is judged over TLS SQL rather than the instance API, which
//! serves HTTPS with client certificates when `TUSK_TLS_DIR` is set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use instance_support::*;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const READY: Duration = Duration::from_secs(120);

/// A test CA.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    key_pem: String,
}

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "tusk test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let key_pem = key.serialize_pem();
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA"),
            key_pem,
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf: common name `cn`, DNS names `names`, serial `serial`.
    fn leaf(&self, cn: &str, names: &[&str], serial: u64) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.serial_number = Some(SerialNumber::from(serial));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        Leaf {
            pem: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

#[derive(Clone)]
struct Leaf {
    pem: String,
    key: String,
    der: Vec<u8>,
}

/// An instance's Secret, as the operator writes it.
struct Secret {
    ca: String,
    server: Leaf,
    api: Leaf,
    replication: Leaf,
}

impl Secret {
    fn new(ca: &Ca, instance: &str, serial: u64) -> Secret {
        Secret {
            ca: ca.pem(),
            // `localhost`: the standbys here reach the primary through it,
            // as they reach `<db>-rw` in a cluster.
            server: ca.leaf(instance, &[instance, "localhost", "orders-rw"], serial),
            api: ca.leaf(instance, &[instance], serial + 1),
            replication: ca.leaf("tusk_replication", &[], serial + 2),
        }
    }

    fn files(&self) -> Vec<(&'static str, String)> {
        vec![
            ("ca.crt", self.ca.clone()),
            ("client-ca.crt", self.ca.clone()),
            ("tls.crt", self.server.pem.clone()),
            ("tls.key", self.server.key.clone()),
            ("api.crt", self.api.pem.clone()),
            ("api.key", self.api.key.clone()),
            ("replication.crt", self.replication.pem.clone()),
            ("replication.key", self.replication.key.clone()),
        ]
    }
}

/// A Secret volume as the kubelet lays it out: each file a symlink through
/// `..data`, which is swapped atomically for a new generation. Root-owned,
/// world-readable files: not what PostgreSQL accepts as a key.
struct Mount {
    path: PathBuf,
    generation: u32,
}

impl Mount {
    fn new(dir: &TestDir, name: &str, secret: &Secret) -> Mount {
        let path = dir.path.join(name);
        std::fs::create_dir_all(&path).expect("mkdir mount");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut mount = Mount {
            path,
            generation: 0,
        };
        mount.swap(&secret.files());
        for (name, _) in secret.files() {
            std::os::unix::fs::symlink(format!("..data/{name}"), mount.path.join(name))
                .expect("symlink a file");
        }
        mount
    }

    fn swap(&mut self, files: &[(&'static str, String)]) {
        self.generation += 1;
        let generation = format!("..gen{}", self.generation);
        let dir = self.path.join(&generation);
        std::fs::create_dir_all(&dir).expect("mkdir generation");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for (name, contents) in files {
            let file = dir.join(name);
            std::fs::write(&file, contents).expect("write a Secret file");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        let tmp = self.path.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&generation, &tmp).expect("symlink ..data_tmp");
        std::fs::rename(&tmp, self.path.join("..data")).expect("swap ..data");
    }
}

fn with_tls(mut options: Options, mount: &Mount) -> Options {
    options.env.extend([
        (
            "TUSK_TLS_DIR".to_owned(),
            mount.path.to_string_lossy().into_owned(),
        ),
        ("TUSK_TLS_CERT_USERS".to_owned(), "app".to_owned()),
    ]);
    options
}

/// Files a client reads (libpq wants keys 0600), outside the mounts.
fn client_file(dir: &TestDir, name: &str, contents: &str) -> String {
    let path = dir.path.join(name);
    std::fs::write(&path, contents).expect("write a client file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path.to_string_lossy().into_owned()
}

/// `psql -c sql` with `conninfo`: its output, or its error output.
async fn psql(
    pg: &Pg,
    conninfo: &str,
    password: Option<&str>,
    sql: &str,
) -> Result<String, String> {
    let mut command = tokio::process::Command::new(pg.bindir.join("psql"));
    command
        .args([
            "-X",
            "-A",
            "-t",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
            conninfo,
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PGCONNECT_TIMEOUT", "5");
    if let Some(password) = password {
        command.env("PGPASSWORD", password);
    }
    let output = command.output().await.expect("run psql");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}

/// A verify-full connection string as the superuser, by the server's name.
fn verified(port: u16, root: &str, extra: &str) -> String {
    format!(
        "host=localhost port={port} user=postgres dbname=postgres sslmode=verify-full sslrootcert={root} {extra}"
    )
}

/// Until the instance answers over verified TLS with `sql` giving `want`.
async fn wait_for(manager: &Manager, root: &str, sql: &str, want: &str) {
    let conninfo = verified(manager.pg_port, root, "");
    let mut last = String::new();
    let found = tokio::time::timeout(READY, async {
        loop {
            match psql(&manager.pg, &conninfo, Some(SUPERUSER_PASSWORD), sql).await {
                Ok(out) if out == want => return,
                Ok(out) => last = out,
                Err(err) => last = err,
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "{sql} never gave {want:?} (last: {last})\n{}",
        manager.logs()
    );
}

/// The certificate the server presents in a new handshake: PostgreSQL's
/// SSLRequest then TLS, or (PostgreSQL 17) TLS at once with ALPN
/// `postgresql`.
async fn presented(port: u16, ca: &str, direct: bool) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca.as_bytes()) {
        let cert: CertificateDer<'static> = cert.expect("CA PEM");
        roots.add(cert).expect("trust the CA");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    if direct {
        config.alpn_protocols = vec![b"postgresql".to_vec()];
    }
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    if !direct {
        stream
            .write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
            .await
            .expect("SSLRequest");
        let mut answer = [0u8; 1];
        stream
            .read_exact(&mut answer)
            .await
            .expect("SSLRequest answer");
        assert_eq!(answer[0], b'S', "the server does not offer TLS");
    }
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), stream)
        .await
        .expect("a verified TLS handshake");
    let (_, session) = tls.get_ref();
    let leaf = session
        .peer_certificates()
        .and_then(|certs| certs.first())
        .expect("a server certificate")
        .to_vec();
    (leaf, session.alpn_protocol().map(<[u8]>::to_vec))
}

/// (a) verify-full by name, (b) plaintext refused, (c) a standby streaming
/// over TLS with its certificate, (d) renewal by reload, and a broken
/// Secret refused.
async fn tls_everywhere(pg: Pg) {
    let dir = TestDir::new(&format!("tls{}", pg.major));
    let ca = Ca::new();
    let root = client_file(&dir, "root.crt", &ca.pem());
    let primary_secret = Secret::new(&ca, "orders-1", 100);
    let mut primary_mount = Mount::new(&dir, "orders-1-tls", &primary_secret);
    let primary = Manager::start(
        &dir,
        with_tls(Options::primary(&pg, "orders-1"), &primary_mount),
    );
    // Ready: the application database exists (the last step of the
    // primary's setup).
    wait_for(
        &primary,
        &root,
        "SELECT count(*) FROM pg_database WHERE datname = 'app'",
        "1",
    )
    .await;

    // (a) verify-full by the name the certificate carries, TLS 1.3.
    let out = psql(
        &pg,
        &verified(primary.pg_port, &root, ""),
        Some(SUPERUSER_PASSWORD),
        "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .await
    .expect("a verify-full connection");
    assert_eq!(out, "t|TLSv1.3");
    // ... and a name the certificate does not carry is refused by the client.
    let err = psql(
        &pg,
        &format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert={root}",
            primary.pg_port
        ),
        Some(SUPERUSER_PASSWORD),
        "SELECT 1",
    )
    .await
    .expect_err("127.0.0.1 is not in the certificate");
    assert!(err.contains("does not match host name"), "{err}");
    // The app role (a certificate user, `TUSK_TLS_CERT_USERS`) logs in
    // with the certificate the operator issues into `<db>-app` (the same
    // issuer code, EKU clientAuth only), no password...
    let authority = tusk::tls::Authority::from_pem(&ca.pem(), &ca.key_pem).expect("the test CA");
    let app = authority
        .issue_client(
            "app",
            jiff::SignedDuration::from_hours(1),
            jiff::Timestamp::now(),
        )
        .expect("the app role's certificate");
    let app_cert = client_file(&dir, "app.crt", &app.cert_pem);
    let app_key = client_file(&dir, "app.key", &app.key_pem);
    let as_app = |extra: &str| {
        format!(
            "host=localhost port={} user=app dbname=app sslmode=verify-full sslrootcert={root} {extra}",
            primary.pg_port
        )
    };
    let out = psql(
        &pg,
        &as_app(&format!("sslcert={app_cert} sslkey={app_key}")),
        None,
        "SELECT current_user || '|' || ssl::text || '|' || client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .await
    .expect("the app role by certificate");
    assert_eq!(out, "app|true|/CN=app");
    // ... while its right password over verified TLS is refused,
    let err = psql(&pg, &as_app(""), Some(APP_PASSWORD), "SELECT 1")
        .await
        .expect_err("the app role has no password login");
    assert!(
        err.contains("connection requires a valid client certificate"),
        "{err}"
    );
    // and so is a valid certificate of another role.
    let other = authority
        .issue_client(
            "someone",
            jiff::SignedDuration::from_hours(1),
            jiff::Timestamp::now(),
        )
        .expect("another role's certificate");
    let other_cert = client_file(&dir, "other.crt", &other.cert_pem);
    let other_key = client_file(&dir, "other.key", &other.key_pem);
    let err = psql(
        &pg,
        &as_app(&format!("sslcert={other_cert} sslkey={other_key}")),
        Some(APP_PASSWORD),
        "SELECT 1",
    )
    .await
    .expect_err("another role's certificate is not the app role's");
    assert!(err.contains("certificate authentication failed"), "{err}");

    // (b) plaintext TCP is refused by pg_hba, whatever the password.
    let err = psql(
        &pg,
        &format!(
            "host=localhost port={} user=postgres dbname=postgres sslmode=disable",
            primary.pg_port
        ),
        Some(SUPERUSER_PASSWORD),
        "SELECT 1",
    )
    .await
    .expect_err("plaintext must be refused");
    assert!(
        err.contains("pg_hba.conf rejects connection") && err.contains("no encryption"),
        "{err}"
    );

    // (c) a standby cloned and streaming over TLS by its certificate: its
    // replication password is wrong, so the password cannot be what
    // authenticates it.
    let replica_secret = Secret::new(&ca, "orders-2", 200);
    let replica_mount = Mount::new(&dir, "orders-2-tls", &replica_secret);
    let mut options = with_tls(
        Options::replica(&pg, "orders-2", primary.pg_port),
        &replica_mount,
    );
    options.env.extend([
        ("TUSK_PRIMARY_SERVICE".to_owned(), "localhost".to_owned()),
        (
            "TUSK_REPLICATION_PASSWORD".to_owned(),
            "not-the-password".to_owned(),
        ),
    ]);
    let replica = Manager::start(&dir, options);
    let streaming = "SELECT s.ssl::text || '|' || r.state || '|' || r.usename \
                     FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) \
                     WHERE r.application_name = 'orders-2'";
    wait_for(
        &primary,
        &root,
        streaming,
        "true|streaming|tusk_replication",
    )
    .await;
    let conninfo = psql(
        &pg,
        &verified(replica.pg_port, &root, ""),
        Some(SUPERUSER_PASSWORD),
        "SHOW primary_conninfo",
    )
    .await
    .expect("the standby's primary_conninfo");
    assert!(conninfo.contains("sslmode='verify-full'"), "{conninfo}");
    assert!(conninfo.contains("sslcert="), "{conninfo}");
    assert!(!conninfo.contains("passfile"), "{conninfo}");
    // The replication role cannot get in with a password over TLS either.
    let err = psql(
        &pg,
        &format!(
            "host=localhost port={} user=tusk_replication dbname=postgres sslmode=verify-full sslrootcert={root}",
            primary.pg_port
        ),
        Some(REPLICATION_PASSWORD),
        "SELECT 1",
    )
    .await
    .expect_err("the replication role needs its certificate");
    assert!(err.contains("certificate"), "{err}");
    // The private copy PostgreSQL reads: keys 0600, owned by the manager.
    let private = primary
        .pgdata
        .parent()
        .expect("volume")
        .parent()
        .expect("dir");
    let key = private.join("orders-1-run/tls/tls.key");
    let mode = std::fs::metadata(&key)
        .expect("the private key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{}", key.display());

    // (d) a renewed server certificate is presented by new handshakes, the
    // postmaster the same process.
    let (leaf, _) = presented(primary.pg_port, &ca.pem(), false).await;
    assert_eq!(leaf, primary_secret.server.der, "the first certificate");
    let postmaster = primary.postmaster_pid().expect("postmaster pid");
    let renewed = Secret {
        server: ca.leaf("orders-1", &["orders-1", "localhost", "orders-rw"], 150),
        ..Secret::new(&ca, "orders-1", 100)
    };
    primary_mount.swap(&renewed.files());
    eventually("the renewed certificate presented", READY, || async {
        let (leaf, _) = presented(primary.pg_port, &ca.pem(), false).await;
        (leaf == renewed.server.der).then_some(())
    })
    .await;
    assert_eq!(primary.postmaster_pid(), Some(postmaster), "a restart");
    // The standby still streams (new connections verify the new leaf).
    wait_for(
        &primary,
        &root,
        streaming,
        "true|streaming|tusk_replication",
    )
    .await;

    // A Secret whose key is not its certificate's is refused; the renewed
    // certificate stays in effect.
    let mut broken = renewed.files();
    let other_key = ca.leaf("orders-1", &["orders-1"], 160).key;
    for (name, contents) in &mut broken {
        if *name == "tls.key" {
            *contents = other_key.clone();
        }
    }
    primary_mount.swap(&broken);
    eventually("the broken Secret refused", READY, || async {
        primary
            .logs()
            .contains("tls.crt and tls.key: the private key does not match the certificate")
            .then_some(())
    })
    .await;
    let (leaf, _) = presented(primary.pg_port, &ca.pem(), false).await;
    assert_eq!(leaf, renewed.server.der, "the previous certificate stays");
    assert_eq!(primary.postmaster_pid(), Some(postmaster), "a restart");
    drop(replica);
}

per_major!(tls_everywhere);

/// (e) PostgreSQL 17's direct TLS negotiation: libpq 17 with
/// `sslnegotiation=direct`, and a bare TLS handshake with ALPN
/// `postgresql` (no SSLRequest first).
#[tokio::test(flavor = "multi_thread")]
async fn direct_tls_negotiation_pg17() {
    let pg = Pg::installed(17);
    let dir = TestDir::new("tls-direct");
    let ca = Ca::new();
    let root = client_file(&dir, "root.crt", &ca.pem());
    let secret = Secret::new(&ca, "orders-1", 300);
    let mount = Mount::new(&dir, "orders-1-tls", &secret);
    let primary = Manager::start(&dir, with_tls(Options::primary(&pg, "orders-1"), &mount));
    wait_for(&primary, &root, "SELECT 1", "1").await;
    let out = psql(
        &pg,
        &verified(primary.pg_port, &root, "sslnegotiation=direct"),
        Some(SUPERUSER_PASSWORD),
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .await
    .expect("a direct TLS connection");
    assert_eq!(out, "t");
    let (leaf, alpn) = presented(primary.pg_port, &ca.pem(), true).await;
    assert_eq!(leaf, secret.server.der);
    assert_eq!(alpn.as_deref(), Some(&b"postgresql"[..]));
}
