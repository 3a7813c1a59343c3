//! `tusk instance`: the instance manager, PID 1 of every Postgres pod.
//!
//! It fills an empty data directory ([`bootstrap`]: initdb for the first
//! primary, a clone of the primary for a replica, [`restore`] from a backup),
//! renders the configuration from [`crate::postgres`] ([`files`]), supervises
//! the `postgres` postmaster as its child ([`process`], with the [`reaper`]
//! collecting every child as PID 1), takes part in leader selection ([`ha`]:
//! the primary lease, the peers, fencing; a former primary [`rejoin`]s as a
//! replica), keeps PostgreSQL's TLS material in effect without a restart
//! ([`tls`]: a private copy of the mounted Secret, reloaded when the Secret
//! changes; standbys reach a TLS primary with `verify-full` and the
//! replication certificate), takes base backups ([`backup`]), injects the
//! faults of a drill with their deadlines ([`drill`]) and serves an
//! HTTP API the operator and the other instances call ([`api`]: status,
//! metrics, reload, promotion, switchover, backups and the rest of the
//! contract in [`crate::contract`]).
//!
//! Everything it needs comes from the environment the operator sets on the pod
//! (see [`InstanceConfig`]); every setting is also a flag so tests can pass it.

mod api;
mod backup;
mod bootstrap;
mod drill;
mod files;
mod ha;
mod lockfile;
pub mod metrics;
mod partition;
mod process;
mod reaper;
mod rejoin;
mod restore;
mod sql;
pub mod tls;
mod verify;
mod volumes;
mod waldir;

pub use verify::{TERMINATION_LOG, verify_backup};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::postgres::config::{self, ConfigError, SyncReplication};

pub use crate::contract::Bootstrap as BootstrapMode;
use crate::contract::{Credential, env};

/// A secret from the environment. Its `Debug` output is redacted so that logging
/// the configuration never prints a password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

/// `spec.replication.mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    #[default]
    Async,
    Sync,
}

/// The instance manager's settings: the pod contract, as environment variables.
#[derive(clap::Args, Debug, Clone)]
pub struct InstanceConfig {
    /// This instance's name (`<db>-<serial>`); also its `application_name` upstream
    /// and, mangled, its replication slot.
    #[arg(long, env = env::INSTANCE)]
    pub instance: String,

    /// Name of the Database this instance belongs to.
    #[arg(long, env = env::DATABASE)]
    pub database: Option<String>,

    /// Pod name (downward API), reported in /status.
    #[arg(long, env = env::POD_NAME)]
    pub pod_name: Option<String>,

    /// Pod namespace (downward API), reported in /status.
    #[arg(long, env = env::POD_NAMESPACE)]
    pub pod_namespace: Option<String>,

    /// The data directory. A subdirectory of the volume, so that a fresh one can
    /// be renamed into place atomically.
    #[arg(long, env = env::PGDATA)]
    pub pgdata: PathBuf,

    /// Where a new cluster's WAL goes, on its own volume (`spec.walStorage`):
    /// PGDATA's `pg_wal` is then a symlink to it. Unset, WAL stays in PGDATA.
    #[arg(long, env = env::WALDIR)]
    pub waldir: Option<PathBuf>,

    /// Host of the primary (the `<db>-rw` Service) for cloning and streaming.
    #[arg(long, env = env::PRIMARY_SERVICE)]
    pub primary_host: Option<String>,

    /// Port of the primary.
    #[arg(long, env = env::PRIMARY_PORT, default_value_t = 5432)]
    pub primary_port: u16,

    /// How to fill an empty data directory.
    #[arg(long, env = env::BOOTSTRAP, value_enum)]
    pub bootstrap: BootstrapMode,

    /// Password of the `postgres` superuser.
    #[arg(long, env = env::SUPERUSER_PASSWORD, hide_env_values = true)]
    pub superuser_password: Secret,

    /// Password of the `tusk_replication` role.
    #[arg(long, env = env::REPLICATION_PASSWORD, hide_env_values = true)]
    pub replication_password: Secret,

    /// Password of the application owner role.
    #[arg(long, env = env::APP_PASSWORD, hide_env_values = true)]
    pub app_password: Option<Secret>,

    /// The application database created on the first primary.
    #[arg(long, env = env::APP_DATABASE)]
    pub app_database: Option<String>,

    /// The role that owns the application database.
    #[arg(long, env = env::APP_OWNER)]
    pub app_owner: Option<String>,

    /// Replication mode.
    #[arg(long, env = env::SYNC_MODE, value_enum, default_value_t = SyncMode::Async)]
    pub sync_mode: SyncMode,

    /// With sync mode, how many standbys must confirm each commit.
    #[arg(long, env = env::MIN_SYNC, default_value_t = 1)]
    pub min_sync: u32,

    /// With sync mode, the standbys' instance names (comma-separated); when empty,
    /// any standby counts (`ANY n (*)`).
    #[arg(long, env = env::SYNC_STANDBYS, value_delimiter = ',')]
    pub sync_standbys: Vec<String>,

    /// `spec.postgresql.parameters` as a JSON object of strings.
    #[arg(long, env = env::PARAMETERS, default_value = "{}")]
    pub parameters: String,

    /// The instance's TLS Secret as mounted (see `contract::tls`); unset, the
    /// manager and PostgreSQL run without TLS.
    #[arg(long, env = env::TLS_DIR)]
    pub tls_dir: Option<PathBuf>,

    /// Let clients in without TLS too (`spec.tls.allowPlaintext`).
    #[arg(long, env = env::TLS_ALLOW_PLAINTEXT, default_value_t = false)]
    pub tls_allow_plaintext: bool,

    /// PostgreSQL's `ssl_min_protocol_version`.
    #[arg(long, env = env::TLS_MIN_VERSION, default_value = crate::contract::tls::DEFAULT_MIN_VERSION)]
    pub tls_min_version: String,

    /// Roles that authenticate with a client certificate instead of a password.
    #[arg(long, env = env::TLS_CERT_USERS, value_delimiter = ',')]
    pub tls_cert_users: Vec<String>,

    /// Bearer token the mutating endpoints require; without it they are refused.
    #[arg(long, env = env::INSTANCE_TOKEN, hide_env_values = true)]
    pub token: Option<Secret>,

    /// Address of the manager's HTTP API.
    #[arg(long, env = env::LISTEN, default_value = "0.0.0.0:8000")]
    pub listen: SocketAddr,

    /// Port PostgreSQL listens on.
    #[arg(long, env = env::PORT, default_value_t = 5432)]
    pub port: u16,

    /// PostgreSQL's `listen_addresses`; tests narrow it to loopback.
    #[arg(long, env = env::LISTEN_ADDRESSES, default_value = "*")]
    pub listen_addresses: String,

    /// Directory for PostgreSQL's Unix socket and the manager's runtime files
    /// (a writable emptyDir in the pod).
    #[arg(long, env = env::SOCKET_DIR, default_value = "/var/run/postgresql")]
    pub socket_dir: PathBuf,

    /// Directory of the PostgreSQL programs; found through PATH (official images
    /// put `/usr/lib/postgresql/NN/bin` there) or `pg_config --bindir` when unset.
    #[arg(long, env = env::BINDIR)]
    pub bindir: Option<PathBuf>,

    /// The object store's bucket: when set, PostgreSQL archives its WAL there
    /// through `tusk wal-archive` (which reads the rest of the store's
    /// settings from the same environment) and can restore from it.
    #[arg(long, env = env::OBJECTSTORE_BUCKET)]
    pub objectstore_bucket: Option<String>,

    /// The Database's primary Lease (in the pod's namespace): set, this
    /// manager takes part in leader selection (see `ha`).
    #[arg(long, env = env::LEASE)]
    pub lease: Option<String>,
}

/// What can go wrong in the instance manager.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{program} failed ({status}): {stderr}")]
    Command {
        program: String,
        status: String,
        stderr: String,
    },

    #[error("SQL failed while {context}: {source}")]
    Sql {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },

    #[error("TUSK_PARAMETERS is not a JSON object of strings: {0}")]
    ParametersJson(#[source] serde_json::Error),

    #[error("invalid PostgreSQL configuration: {0}")]
    Config(#[from] ConfigError),

    #[error(
        "{} holds files but no PG_VERSION; refusing to initialise over data that is not a PostgreSQL cluster",
        .0.display()
    )]
    NotEmpty(PathBuf),

    #[error(
        "cannot find the PostgreSQL programs: no --bindir/TUSK_BINDIR, no postgres on PATH, no pg_config"
    )]
    NoBinaries,

    #[error("{0} needs TUSK_PRIMARY_SERVICE (the primary's host)")]
    MissingPrimary(&'static str),

    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),

    #[error("cannot install a handler for {signal}: {source}")]
    Signal {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot find the running executable: {0}")]
    CurrentExe(#[source] std::io::Error),

    #[error("the restore source is not usable: {0}")]
    RestoreSource(String),

    #[error("restoring from {location}: {why}")]
    RestoreRefused { location: String, why: String },

    #[error("restore failed: {0}")]
    Restore(String),

    #[error("recovery failed: {0}")]
    RestoreReplay(String),

    /// The mounted TLS Secret cannot be used.
    #[error("{0}")]
    Tls(String),

    /// The data directory is mid-upgrade, or of a major this image cannot
    /// run as a primary: starting would crash-loop or lose the way back.
    #[error("{0}")]
    Upgrade(String),
}

impl Error {
    /// The error is a filesystem out of room (`ENOSPC`).
    pub fn no_space(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.raw_os_error() == Some(nix::libc::ENOSPC))
    }

    fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_owned();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }

    fn sql(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Error {
        move |source| Error::Sql { context, source }
    }

    fn restore(error: impl std::fmt::Display) -> Error {
        Error::Restore(error.to_string())
    }
}

/// State shared by the supervisor, the bootstrap tasks and the HTTP handlers.
pub(crate) struct Shared {
    pub config: InstanceConfig,
    pub bindir: PathBuf,
    /// The user parameters currently rendered; `POST /reload` may replace them.
    parameters: Mutex<BTreeMap<String, String>>,
    /// Synchronous replication as currently rendered (`None`: asynchronous);
    /// starts from the environment, `POST /sync` replaces it.
    sync: Mutex<Option<SyncReplication>>,
    /// Passwords that changed since the start (`POST /roles/password`); the
    /// environment holds the rest.
    passwords: Mutex<BTreeMap<Credential, Secret>>,
    /// Signalled by `POST /restart`: the supervisor restarts the postmaster.
    pub restart: tokio::sync::Notify,
    /// Set once the data directory exists and the postmaster has been started.
    pub running: AtomicBool,
    /// The postmaster's pid while it runs (0 before the first start).
    pub postmaster: AtomicI32,
    /// Drill faults in effect, with their deadlines.
    pub drill: drill::Faults,
    /// Set once the primary's roles, passwords and database are in place.
    pub setup_done: AtomicBool,
    /// The data directory was upgraded to a new major and its server has
    /// not answered yet (see [`crate::upgrade::state`]).
    pub upgrade_pending: AtomicBool,
    /// Serialises rendering, reloads and promotion, which all rewrite the config.
    pub config_lock: tokio::sync::Mutex<()>,
    /// The last metrics sample and when it was taken: scrapes share it.
    pub metrics: metrics::SampleCache,
    /// Base backups asked for through `POST /backups`.
    pub backups: backup::Registry,
    /// A restore bootstrap's progress (`GET /restore`).
    restore: Mutex<Option<crate::contract::RestoreProgress>>,
    /// The primary lease, the peers and fencing.
    pub ha: ha::Ha,
    /// The TLS material in effect; `None` without `TUSK_TLS_DIR`.
    tls: Option<tls::Watched>,
}

impl Shared {
    fn new(config: InstanceConfig, bindir: PathBuf, parameters: BTreeMap<String, String>) -> Self {
        let sync = initial_sync(&config);
        let ha = ha::Ha::new(
            config.lease.clone(),
            config.pod_namespace.clone(),
            config.instance.clone(),
        );
        Shared {
            ha,
            config,
            bindir,
            parameters: Mutex::new(parameters),
            sync: Mutex::new(sync),
            passwords: Mutex::new(BTreeMap::new()),
            restart: tokio::sync::Notify::new(),
            running: AtomicBool::new(false),
            postmaster: AtomicI32::new(0),
            drill: drill::Faults::default(),
            setup_done: AtomicBool::new(false),
            upgrade_pending: AtomicBool::new(false),
            config_lock: tokio::sync::Mutex::new(()),
            metrics: metrics::SampleCache::default(),
            backups: backup::Registry::default(),
            restore: Mutex::new(None),
            tls: None,
        }
    }

    /// Runs with the TLS material `watched` (see [`tls`]).
    fn with_tls(mut self, watched: Option<tls::Watched>) -> Self {
        self.tls = watched;
        self
    }

    /// The TLS material in effect, for the instance API's server: `None`
    /// when the manager runs without TLS. The receiver's current value is
    /// the validated Secret whose files PostgreSQL has been reloaded with
    /// (`api_cert`/`api_key` to serve, `client_ca_bundle` to verify
    /// callers); it changes when a new Secret is in effect, never to
    /// material that failed validation.
    pub fn tls(&self) -> Option<watch::Receiver<Arc<tls::Material>>> {
        self.tls.as_ref().map(tls::Watched::subscribe)
    }

    /// `Status.tls`: what is in effect, and why newer files are not.
    pub fn tls_report(&self) -> Option<crate::contract::tls::TlsReport> {
        self.tls.as_ref().map(tls::Watched::report)
    }

    /// How this replica reaches its primary now (see [`tls::upstream`]): the
    /// lease holder's pod when leader selection runs and the operator said
    /// where it is, else the `-rw` Service. The Service follows the role
    /// label, which moves only after a promotion: a demoted primary still
    /// labelled would stream from itself, and a replica reconnecting in
    /// between from the old primary.
    pub fn upstream(&self) -> Option<tls::upstream::Upstream> {
        let holder = self.ha.holder_member();
        tls::upstream::decide(
            self.tls.is_some(),
            self.server_cert_names_me(),
            holder.as_ref(),
            self.config.primary_host.as_deref(),
            &self.ha.members(),
            &self.config.instance,
        )
    }

    /// This instance's server certificate carries its own name: Tusk issued
    /// it (a user's certificate names the Services only), so peers verify
    /// one another by instance name.
    fn server_cert_names_me(&self) -> bool {
        self.tls().is_some_and(|material| {
            crate::tls::CertInfo::parse(&material.borrow().server_cert)
                .is_ok_and(|cert| cert.names().contains(&self.config.instance))
        })
    }

    /// The private copies of the CA bundle and the replication
    /// certificate, for connections to a TLS primary.
    pub fn tls_client_files(&self) -> Option<tls::upstream::ClientFiles> {
        use crate::contract::tls as files;
        let watched = self.tls.as_ref()?;
        let path = |name: &str| watched.file(name).to_string_lossy().into_owned();
        Some(tls::upstream::ClientFiles {
            root: path(files::CA_BUNDLE),
            cert: path(files::REPLICATION_CERT),
            key: path(files::REPLICATION_KEY),
        })
    }

    pub fn parameters(&self) -> BTreeMap<String, String> {
        self.parameters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn set_parameters(&self, parameters: BTreeMap<String, String>) {
        *self
            .parameters
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = parameters;
    }

    pub fn sync(&self) -> Option<SyncReplication> {
        self.sync
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn set_sync(&self, sync: Option<SyncReplication>) {
        *self.sync.lock().unwrap_or_else(PoisonError::into_inner) = sync;
    }

    /// The current password of `credential`: the latest one pushed, else the
    /// one from the environment (`None`: no application role configured).
    pub fn password(&self, credential: Credential) -> Option<Secret> {
        let pushed = self
            .passwords
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&credential)
            .cloned();
        pushed.or_else(|| match credential {
            Credential::Superuser => Some(self.config.superuser_password.clone()),
            Credential::Replication => Some(self.config.replication_password.clone()),
            Credential::App => self.config.app_password.clone(),
        })
    }

    pub fn set_password(&self, credential: Credential, password: Secret) {
        self.passwords
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(credential, password);
    }
}

/// Synchronous replication as the environment asks for it at start.
fn initial_sync(config: &InstanceConfig) -> Option<SyncReplication> {
    (config.sync_mode == SyncMode::Sync && config.min_sync > 0).then(|| SyncReplication {
        min: config.min_sync,
        standbys: config.sync_standbys.clone(),
    })
}

/// Parse and validate `TUSK_PARAMETERS`.
pub fn parse_parameters(json: &str) -> Result<BTreeMap<String, String>, Error> {
    let parameters: BTreeMap<String, String> =
        serde_json::from_str(json).map_err(Error::ParametersJson)?;
    config::validate_parameters(&parameters)?;
    Ok(parameters)
}

/// Run the instance manager until SIGTERM or SIGINT, then stop PostgreSQL with a
/// fast shutdown and return.
pub async fn run(config: InstanceConfig) -> Result<(), Error> {
    if let Err(err) = crate::telemetry::init_logging() {
        eprintln!("tusk instance: {err}");
    }
    // The lease is held over TLS to the API server, with the provider the
    // operator uses too.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Bad parameters are a spec error: fail before touching the data directory.
    let parameters = parse_parameters(&config.parameters)?;
    let bindir = find_bindir(config.bindir.as_deref())?;
    tracing::info!(
        instance = %config.instance,
        pgdata = %config.pgdata.display(),
        bindir = %bindir.display(),
        bootstrap = ?config.bootstrap,
        "starting the instance manager"
    );
    let watched = match &config.tls_dir {
        Some(dir) => Some(tls::Watched::start(&config, dir)?),
        None => None,
    };
    let shared = Arc::new(Shared::new(config, bindir, parameters).with_tls(watched));

    // As PID 1 the default action of SIGTERM is "ignore", so handlers come first.
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut sigterm = signal(SignalKind::terminate()).map_err(|source| Error::Signal {
        signal: "SIGTERM",
        source,
    })?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|source| Error::Signal {
        signal: "SIGINT",
        source,
    })?;
    tokio::spawn(async move {
        tokio::select! {
            _ = sigterm.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = sigint.recv() => tracing::info!("SIGINT: shutting down"),
        }
        let _ = stop_tx.send(true);
    });

    // The API comes up before the bootstrap so that /healthz answers during a
    // long clone; /readyz stays false until PostgreSQL accepts connections.
    let listen = shared.config.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| Error::Listen {
            addr: listen,
            source,
        })?;
    let (server_stop_tx, server_stop_rx) = watch::channel(false);
    // The watcher's channel: the API and the peer client follow renewals
    // and CA rotations from the next connection on, without a restart.
    let api_material = shared.tls();
    if let Some(material) = &api_material {
        shared.ha.use_tls(material.clone());
    }
    let server = tokio::spawn(api::serve(
        listener,
        shared.clone(),
        api_material,
        server_stop_rx,
    ));

    let result = manage(shared, stop_rx).await;
    let _ = server_stop_tx.send(true);
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!(error = %err, "HTTP server failed"),
        Err(err) => tracing::warn!(error = %err, "HTTP server task failed"),
    }
    result
}

async fn manage(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Result<(), Error> {
    tokio::select! {
        result = bootstrap::ensure_data_directory(&shared) => result?,
        _ = stop.wait_for(|stop| *stop) => {
            tracing::info!("stopped during bootstrap");
            return Ok(());
        }
    }
    tokio::spawn(bootstrap::maintain(shared.clone(), stop.clone()));
    tokio::spawn(tls::watch(shared.clone(), stop.clone()));
    if shared.ha.enabled() {
        tokio::spawn(ha::lease_loop(shared.clone(), stop.clone()));
        tokio::spawn(ha::lease_watch_loop(shared.clone(), stop.clone()));
        tokio::spawn(ha::fence_loop(shared.clone(), stop.clone()));
        tokio::spawn(ha::peer_loop(shared.clone(), stop.clone()));
        tokio::spawn(ha::hang_loop(shared.clone(), stop.clone()));
    }
    process::supervise(shared, stop).await
}

/// Where the PostgreSQL programs are.
pub(crate) fn find_bindir(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(dir) = explicit {
        return Ok(dir.to_owned());
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("postgres").is_file() && dir.join("initdb").is_file() {
                return Ok(dir);
            }
        }
    }
    // Debian's packages keep the server programs off PATH; pg_config knows them.
    // This runs before the supervisor's reaper exists, so a plain wait is safe.
    if let Ok(output) = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("postgres").is_file() {
            return Ok(dir);
        }
    }
    Err(Error::NoBinaries)
}

/// `tusk copy-binary`: copy this executable to `destination` with mode 0755, for
/// the init container that brings `tusk` into a stock Postgres image (which has
/// no shell to run `cp` with). Written under a temporary name and renamed, so a
/// restarted init container never leaves a half-written binary behind.
pub fn copy_binary(destination: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;

    let source = std::env::current_exe().map_err(Error::CurrentExe)?;
    let mut partial = destination.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::copy(&source, &partial).map_err(Error::io("copy the tusk binary to", &partial))?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))
        .map_err(Error::io("set the mode of", &partial))?;
    std::fs::rename(&partial, destination).map_err(Error::io("rename into", destination))?;
    Ok(())
}

/// How long the manager waits for PostgreSQL after a fast shutdown request before
/// it escalates to an immediate shutdown.
const FAST_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

fn is_set(flag: &AtomicBool) -> bool {
    flag.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_come_from_a_json_object_and_owned_ones_are_refused() {
        let parsed = parse_parameters(r#"{"work_mem": "8MB"}"#).expect("parses");
        assert_eq!(parsed.get("work_mem").map(String::as_str), Some("8MB"));
        let err = parse_parameters(r#"{"port": "6000"}"#).expect_err("owned");
        assert!(err.to_string().contains("port"), "{err}");
        assert!(parse_parameters("[1]").is_err());
    }

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let secret = Secret::from("hunter2".to_owned());
        assert!(!format!("{secret:?}").contains("hunter2"));
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn copy_binary_writes_an_executable_copy() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tusk-copy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let dest = dir.join("tusk");
        copy_binary(&dest).expect("copies");
        let meta = std::fs::metadata(&dest).expect("stat");
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        assert!(meta.len() > 0);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
