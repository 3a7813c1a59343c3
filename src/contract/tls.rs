//! TLS between the operator, the instance managers, PostgreSQL and clients:
//! the files an instance's pod mounts (one Secret per instance, `<instance>-tls`,
//! at [`env::TLS_DIR`](super::env::TLS_DIR)), the identities the certificates
//! name, and what a manager reports about the material it has loaded.
//!
//! One Secret per instance (rather than a shared server Secret and a shared
//! CA Secret) because the kubelet swaps a Secret volume atomically: a
//! certificate, its key and the bundles that verify its peers always change
//! together, so a manager never loads a new certificate with an old key.

use serde::{Deserialize, Serialize};

/// Where the pod builder mounts the instance's TLS Secret.
pub const MOUNT: &str = "/tusk/tls";

/// CAs trusted to verify a PostgreSQL server certificate (the primary's, for
/// standbys, clones and `pg_rewind`). PEM, one or more certificates: during a
/// CA rotation both the old and the new CA.
pub const CA_BUNDLE: &str = "ca.crt";
/// CAs trusted to verify client certificates: the replication role, an
/// application role with certificate authentication, and the instance API's
/// callers (the operator, peer instances). Tusk's own CA (or the user's CA),
/// also during a rotation both.
pub const CLIENT_CA_BUNDLE: &str = "client-ca.crt";
/// PostgreSQL's server certificate and key: every name a client may use.
pub const SERVER_CERT: &str = "tls.crt";
pub const SERVER_KEY: &str = "tls.key";
/// The instance's own identity on the instance API, as server and as client
/// of its peers: common name and DNS name = the instance name, from Tusk's CA.
pub const API_CERT: &str = "api.crt";
pub const API_KEY: &str = "api.key";
/// The replication role's client certificate (common name
/// `tusk_replication`): standbys, clones and `pg_rewind` authenticate with it
/// instead of a password.
pub const REPLICATION_CERT: &str = "replication.crt";
pub const REPLICATION_KEY: &str = "replication.key";

/// Every key of an instance's TLS Secret.
pub const FILES: [&str; 8] = [
    CA_BUNDLE,
    CLIENT_CA_BUNDLE,
    SERVER_CERT,
    SERVER_KEY,
    API_CERT,
    API_KEY,
    REPLICATION_CERT,
    REPLICATION_KEY,
];

/// The common name of the operator's client certificate on the instance API.
pub const OPERATOR_COMMON_NAME: &str = "tusk-operator";

/// The protocol version PostgreSQL accepts at least, unless the spec says
/// otherwise (`ssl_min_protocol_version`).
pub const DEFAULT_MIN_VERSION: &str = "TLSv1.3";

/// What a manager has loaded from its TLS Secret: reported on `/status` so the
/// operator can tell when a stage of a renewal or a CA rotation is in effect
/// on every instance (PostgreSQL reloaded, the API serving the new material).
/// Absent when the manager runs without TLS.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TlsReport {
    /// Serial (lower-case hex, no separators) of the PostgreSQL server
    /// certificate in effect.
    #[serde(default)]
    pub server_serial: String,
    /// Serial of the instance API certificate in effect.
    #[serde(default)]
    pub api_serial: String,
    /// SHA-256 fingerprints (lower-case hex) of the certificates in
    /// [`CA_BUNDLE`] as loaded.
    #[serde(default)]
    pub trusted: Vec<String>,
    /// SHA-256 fingerprints of the certificates in [`CLIENT_CA_BUNDLE`] as loaded.
    #[serde(default)]
    pub client_trusted: Vec<String>,
    /// Why the newest files in the Secret were not loaded (a key that does not
    /// match its certificate, a reload PostgreSQL refused); the previous
    /// material stays in effect meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
