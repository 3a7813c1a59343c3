//! Checks of the Secrets a user hands to Tusk: their own CA
//! (`spec.tls.ca.secretName`) and their own PostgreSQL server certificate
//! (`spec.tls.server.secretName`). Errors name the field and the Secret so
//! that a condition or an admission message says exactly what to fix.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::authority::Authority;
use super::inspect::{CertInfo, check_key};
use super::{Error, names};

/// The field naming the user's CA Secret.
pub const CA_FIELD: &str = "spec.tls.ca.secretName";
/// The field naming the user's server certificate Secret.
pub const SERVER_FIELD: &str = "spec.tls.server.secretName";
/// Keys of a `kubernetes.io/tls` Secret (cert-manager adds `ca.crt`).
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";

/// What is wrong with a user's Secret.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: Secret \"{secret}\" {problem}")]
pub struct UserSecretError {
    /// The spec field that names the Secret.
    pub field: &'static str,
    /// `namespace/name`.
    pub secret: String,
    pub problem: Problem,
}

/// The problem, phrased to follow `Secret "ns/name"`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Problem {
    #[error("lacks {0}")]
    Missing(&'static str),
    #[error("has a {key} that is not UTF-8 text")]
    NotUtf8 { key: &'static str },
    #[error("has an unreadable {key}: {reason}")]
    Unreadable { key: &'static str, reason: String },
    #[error("has a tls.crt that is not a CA certificate (no basicConstraints CA:TRUE)")]
    NotCa,
    #[error("has a tls.key that is not the key of its tls.crt")]
    KeyMismatch,
    #[error("has a ca.crt that did not issue its tls.crt")]
    NotIssued,
    #[error("has a tls.crt that expired at {0}")]
    Expired(Timestamp),
    #[error("has a tls.crt that does not name {}", .0.join(", "))]
    Uncovered(Vec<String>),
}

/// The user's server certificate, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerMaterial {
    /// `tls.crt`: the leaf, possibly followed by intermediates.
    pub cert_pem: String,
    pub key_pem: String,
    /// `ca.crt`: what clients and standbys trust.
    pub ca_pem: String,
    /// The leaf.
    pub info: CertInfo,
}

impl std::fmt::Debug for ServerMaterial {
    /// The key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerMaterial")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// The user's CA from its Secret (`spec.tls.ca.secretName`): `tls.crt` must
/// be a CA valid at `now` and `tls.key` its key.
pub fn check_ca(secret: &Secret, now: Timestamp) -> Result<Authority, UserSecretError> {
    let empty = BTreeMap::new();
    check_ca_data(
        &secret_ref(secret),
        secret.data.as_ref().unwrap_or(&empty),
        now,
    )
}

/// [`check_ca`] on a Secret's data; `secret` is `namespace/name`.
pub fn check_ca_data(
    secret: &str,
    data: &BTreeMap<String, ByteString>,
    now: Timestamp,
) -> Result<Authority, UserSecretError> {
    let fail = |problem| UserSecretError {
        field: CA_FIELD,
        secret: secret.to_owned(),
        problem,
    };
    let cert = text(data, TLS_CRT).map_err(fail)?;
    let key = text(data, TLS_KEY).map_err(fail)?;
    let authority = Authority::from_pem(cert, key).map_err(|e| {
        fail(match e {
            Error::NotCa => Problem::NotCa,
            Error::KeyMismatch { .. } => Problem::KeyMismatch,
            e @ (Error::BadKey { .. } | Error::NoKey { .. }) => unreadable(TLS_KEY, &e),
            other => unreadable(TLS_CRT, &other),
        })
    })?;
    if authority.info().not_after <= now {
        return Err(fail(Problem::Expired(authority.info().not_after)));
    }
    Ok(authority)
}

/// The user's server certificate from its Secret
/// (`spec.tls.server.secretName`): `tls.crt` valid at `now`, `tls.key` its
/// key, `ca.crt` present and the issuer of `tls.crt` (directly or through
/// intermediates in `tls.crt`), and every one of `required_names`
/// ([`names::service_names`]: the instance names are Tusk's business)
/// covered.
pub fn check_server(
    secret: &Secret,
    required_names: &[String],
    now: Timestamp,
) -> Result<ServerMaterial, UserSecretError> {
    let empty = BTreeMap::new();
    check_server_data(
        &secret_ref(secret),
        secret.data.as_ref().unwrap_or(&empty),
        required_names,
        now,
    )
}

/// [`check_server`] on a Secret's data; `secret` is `namespace/name`.
pub fn check_server_data(
    secret: &str,
    data: &BTreeMap<String, ByteString>,
    required_names: &[String],
    now: Timestamp,
) -> Result<ServerMaterial, UserSecretError> {
    let fail = |problem| UserSecretError {
        field: SERVER_FIELD,
        secret: secret.to_owned(),
        problem,
    };
    let cert_pem = text(data, TLS_CRT).map_err(fail)?;
    let key_pem = text(data, TLS_KEY).map_err(fail)?;
    let ca_pem = text(data, CA_CRT).map_err(fail)?;
    let chain = CertInfo::parse_bundle(cert_pem).map_err(|e| fail(unreadable(TLS_CRT, &e)))?;
    let cas = CertInfo::parse_bundle(ca_pem).map_err(|e| fail(unreadable(CA_CRT, &e)))?;
    check_key("tls.crt", cert_pem, key_pem).map_err(|e| {
        fail(match e {
            Error::KeyMismatch { .. } => Problem::KeyMismatch,
            other => unreadable(TLS_KEY, &other),
        })
    })?;
    let (leaf, intermediates) = chain.split_first().ok_or(fail(Problem::Missing(TLS_CRT)))?;
    if !chains_to(leaf, intermediates, &cas) {
        return Err(fail(Problem::NotIssued));
    }
    if leaf.not_after <= now {
        return Err(fail(Problem::Expired(leaf.not_after)));
    }
    let uncovered = names::uncovered(&leaf.dns_names, required_names);
    if !uncovered.is_empty() {
        return Err(fail(Problem::Uncovered(uncovered)));
    }
    Ok(ServerMaterial {
        cert_pem: cert_pem.to_owned(),
        key_pem: key_pem.to_owned(),
        ca_pem: ca_pem.to_owned(),
        info: leaf.clone(),
    })
}

/// Whether one of `cas` issued `leaf`, directly or through `intermediates`
/// (each used at most once, so a loop of certificates ends).
fn chains_to(leaf: &CertInfo, intermediates: &[CertInfo], cas: &[CertInfo]) -> bool {
    let mut current = leaf;
    let mut unused: Vec<&CertInfo> = intermediates.iter().collect();
    loop {
        if cas.iter().any(|ca| current.issued_by(ca)) {
            return true;
        }
        match unused.iter().position(|next| current.issued_by(next)) {
            Some(i) => current = unused.swap_remove(i),
            None => return false,
        }
    }
}

fn secret_ref(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    )
}

fn text<'a>(data: &'a BTreeMap<String, ByteString>, key: &'static str) -> Result<&'a str, Problem> {
    let bytes = data.get(key).ok_or(Problem::Missing(key))?;
    if bytes.0.is_empty() {
        return Err(Problem::Missing(key));
    }
    std::str::from_utf8(&bytes.0).map_err(|_| Problem::NotUtf8 { key })
}

fn unreadable(key: &'static str, e: &Error) -> Problem {
    Problem::Unreadable {
        key,
        reason: e.to_string(),
    }
}
