//! The pod's environment: the names the pod builder sets and the instance
//! manager reads (its `clap` arguments name these constants), so the two can
//! only disagree in a way the round-trip test in `resources` catches.

/// The pod's name (downward API).
pub const POD_NAME: &str = "POD_NAME";
/// The pod's namespace (downward API).
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
/// How to fill an empty volume: [`super::Bootstrap`], from [`BOOTSTRAP_ANNOTATION`].
pub const BOOTSTRAP: &str = "TUSK_BOOTSTRAP";
/// The pod annotation `TUSK_BOOTSTRAP` is read from, so that the choice stays
/// out of the pod spec (and its hash).
pub const BOOTSTRAP_ANNOTATION: &str = "tusk.dev/bootstrap";
pub const DATABASE: &str = "TUSK_DATABASE";
pub const INSTANCE: &str = "TUSK_INSTANCE";
pub const PGDATA: &str = "PGDATA";
/// Set only with `spec.walStorage`: the directory on the WAL volume where a
/// new cluster's WAL goes (initdb and pg_basebackup `--waldir`, a restore's
/// `pg_wal` moved there); PGDATA's `pg_wal` is then a symlink to it.
pub const WALDIR: &str = "TUSK_WALDIR";
/// Host of the primary (the `<db>-rw` Service).
pub const PRIMARY_SERVICE: &str = "TUSK_PRIMARY_SERVICE";
pub const PRIMARY_PORT: &str = "TUSK_PRIMARY_PORT";
pub const SUPERUSER_PASSWORD: &str = "POSTGRES_SUPERUSER_PASSWORD";
pub const REPLICATION_PASSWORD: &str = "TUSK_REPLICATION_PASSWORD";
pub const APP_PASSWORD: &str = "TUSK_APP_PASSWORD";
/// The directory of the instance's TLS Secret ([`super::tls::MOUNT`]); set,
/// PostgreSQL serves TLS, replication authenticates by certificate and the
/// instance API is HTTPS with client certificates. Unset (component tests,
/// a manager outside Kubernetes) everything is plaintext as before.
pub const TLS_DIR: &str = "TUSK_TLS_DIR";
/// `true`: `pg_hba.conf` also lets clients in without TLS (`spec.tls.allowPlaintext`).
pub const TLS_ALLOW_PLAINTEXT: &str = "TUSK_TLS_ALLOW_PLAINTEXT";
/// `ssl_min_protocol_version` (`TLSv1.2` or `TLSv1.3`).
pub const TLS_MIN_VERSION: &str = "TUSK_TLS_MIN_VERSION";
/// Roles (comma-separated) that authenticate with a client certificate
/// (`cert` in `pg_hba.conf`) instead of a password: the application owner
/// with `spec.tls.clientCertificates`.
pub const TLS_CERT_USERS: &str = "TUSK_TLS_CERT_USERS";
/// Bearer token of the mutating endpoints.
pub const INSTANCE_TOKEN: &str = "TUSK_INSTANCE_TOKEN";
pub const APP_DATABASE: &str = "TUSK_APP_DATABASE";
pub const APP_OWNER: &str = "TUSK_APP_OWNER";
/// `async` or `sync`: the mode at start; `POST /sync` changes it later.
pub const SYNC_MODE: &str = "TUSK_SYNC_MODE";
pub const MIN_SYNC: &str = "TUSK_MIN_SYNC";
pub const SYNC_STANDBYS: &str = "TUSK_SYNC_STANDBYS";
/// `spec.postgresql.parameters` as a JSON object of strings: the ones at start;
/// `POST /reload` changes them later.
pub const PARAMETERS: &str = "TUSK_PARAMETERS";
pub const LISTEN: &str = "TUSK_LISTEN";
pub const PORT: &str = "TUSK_PORT";
pub const LISTEN_ADDRESSES: &str = "TUSK_LISTEN_ADDRESSES";
pub const SOCKET_DIR: &str = "TUSK_SOCKET_DIR";
pub const BINDIR: &str = "TUSK_BINDIR";
/// The Database's primary Lease (`<db>-primary`, in `POD_NAMESPACE`): set, the
/// manager takes part in leader selection through the Kubernetes API with the
/// pod's service account; unset, it runs as its data directory says.
pub const LEASE: &str = "TUSK_LEASE";

/// The object store of `spec.backup.objectStore`, for `tusk wal-archive`,
/// `tusk wal-restore` and base backups (children of PostgreSQL and the
/// manager inherit them).
pub const OBJECTSTORE_BUCKET: &str = "TUSK_OBJECTSTORE_BUCKET";
pub const OBJECTSTORE_PATH: &str = "TUSK_OBJECTSTORE_PATH";
pub const OBJECTSTORE_ENDPOINT: &str = "TUSK_OBJECTSTORE_ENDPOINT";
pub const OBJECTSTORE_REGION: &str = "TUSK_OBJECTSTORE_REGION";
/// A PEM file of CAs to trust for the endpoint.
pub const OBJECTSTORE_CA_FILE: &str = "TUSK_OBJECTSTORE_CA_FILE";
/// The store's credentials, from the Secret `credentialsSecret` names (as
/// variables: a restore's source; as files: see [`OBJECTSTORE_CREDENTIALS_DIR`]).
pub const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// The directory where an instance's credentials Secret is mounted, one file
/// per key, read at each use: the Secret is optional, so an instance starts
/// without it, and the kubelet brings a Secret created or fixed later into
/// the running pod, where archiving then catches up.
pub const OBJECTSTORE_CREDENTIALS_DIR: &str = "TUSK_OBJECTSTORE_CREDENTIALS_DIR";
/// The name of that Secret, for the messages that say what is missing.
pub const OBJECTSTORE_CREDENTIALS_SECRET: &str = "TUSK_OBJECTSTORE_CREDENTIALS_SECRET";
/// WAL files uploaded at once by one `wal-archive` (the asked one and the
/// next `.ready` ones), and segments `wal-restore` fetches ahead.
pub const WAL_PARALLEL: &str = "TUSK_WAL_PARALLEL";

/// A restore bootstrap's source: the Database's name in the store's key
/// layout, and optionally its system identifier and the backup id to start
/// from (else found in the store).
pub const RESTORE_SOURCE: &str = "TUSK_RESTORE_SOURCE";
pub const RESTORE_SYSTEM: &str = "TUSK_RESTORE_SYSTEM";
pub const RESTORE_BACKUP: &str = "TUSK_RESTORE_BACKUP";
/// Where recovery stops (RFC 3339, or an LSN); neither: the end of the archive.
pub const RESTORE_TARGET_TIME: &str = "TUSK_RESTORE_TARGET_TIME";
pub const RESTORE_TARGET_LSN: &str = "TUSK_RESTORE_TARGET_LSN";

/// The store a restore reads from has its own variables, the store's with
/// this prefix (`TUSK_RESTORE_OBJECTSTORE_BUCKET`, `TUSK_RESTORE_AWS_ACCESS_KEY_ID`,
/// ...): it may be another bucket, endpoint or account than the one the
/// restored Database archives to, and is only ever read.
pub const RESTORE_PREFIX: &str = "TUSK_RESTORE_";

/// The restore store's name for one of the store's variables.
pub fn restore(name: &str) -> String {
    format!(
        "{RESTORE_PREFIX}{}",
        name.strip_prefix("TUSK_").unwrap_or(name)
    )
}

/// Variables that hold secrets: redacted in logs, removed from every child
/// process's environment.
pub const SECRETS: &[&str] = &[
    SUPERUSER_PASSWORD,
    REPLICATION_PASSWORD,
    APP_PASSWORD,
    INSTANCE_TOKEN,
];

/// Variables that only seed the manager at start: the operator changes what
/// they stand for through the API afterwards, so a pod whose values are older
/// than the spec is not outdated and is not rebuilt for them.
pub const START_ONLY: &[&str] = &[PARAMETERS, SYNC_MODE, MIN_SYNC, SYNC_STANDBYS];
