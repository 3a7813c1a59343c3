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
/// The field whose Certificate cert-manager fills a server Secret for.
pub const CERT_MANAGER_FIELD: &str = "spec.tls.certManager";
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
    check_served(SERVER_FIELD, secret, required_names, now)
}

/// [`check_server`] of a Secret that `field` names or has filled
/// ([`SERVER_FIELD`], [`CERT_MANAGER_FIELD`]): errors name that field.
pub fn check_served(
    field: &'static str,
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
    .map_err(|error| UserSecretError { field, ..error })
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
    let uncovered = names::uncovered(&leaf.names(), required_names);
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

#[cfg(test)]
mod tests {
    use kube::core::ObjectMeta;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

    use super::*;
    use crate::tls::authority::Leaf;
    use crate::tls::test_support::*;

    fn data(entries: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    fn required() -> Vec<String> {
        names::service_names("shop", "prod", "cluster.local", &[])
    }

    fn server_data(leaf: &Leaf, ca: &str) -> BTreeMap<String, ByteString> {
        data(&[
            (TLS_CRT, &leaf.cert_pem),
            (TLS_KEY, &leaf.key_pem),
            (CA_CRT, ca),
        ])
    }

    #[test]
    fn a_ca_secret_yields_its_authority() {
        let ca = ca();
        let given = data(&[(TLS_CRT, ca.cert_pem()), (TLS_KEY, ca.key_pem())]);
        let authority = check_ca_data("shop/my-ca", &given, now()).unwrap();
        assert_eq!(authority.info(), ca.info());
        let openssl = data(&[(TLS_CRT, USER_CA_CRT), (TLS_KEY, USER_CA_KEY)]);
        check_ca_data("shop/my-ca", &openssl, now()).unwrap();
        // cert-manager's default key encoding.
        let pkcs1 = data(&[(TLS_CRT, RSA_CA_CRT), (TLS_KEY, RSA_PKCS1_KEY)]);
        check_ca_data("shop/my-ca", &pkcs1, now()).unwrap();
    }

    #[test]
    fn ca_secret_problems_name_the_field_and_the_secret() {
        let ca = ca();
        let leaf = ca.issue_client("app", days(7), now()).unwrap();
        let other = crate::tls::test_support::ca();
        let table: Vec<(&str, BTreeMap<String, ByteString>, Timestamp, &str)> = vec![
            (
                "no key",
                data(&[(TLS_CRT, ca.cert_pem())]),
                now(),
                r#"spec.tls.ca.secretName: Secret "shop/my-ca" lacks tls.key"#,
            ),
            (
                "empty certificate",
                data(&[(TLS_CRT, ""), (TLS_KEY, ca.key_pem())]),
                now(),
                r#"spec.tls.ca.secretName: Secret "shop/my-ca" lacks tls.crt"#,
            ),
            (
                "a leaf",
                data(&[(TLS_CRT, &leaf.cert_pem), (TLS_KEY, &leaf.key_pem)]),
                now(),
                r#"spec.tls.ca.secretName: Secret "shop/my-ca" has a tls.crt that is not a CA certificate (no basicConstraints CA:TRUE)"#,
            ),
            (
                "another key",
                data(&[(TLS_CRT, ca.cert_pem()), (TLS_KEY, other.key_pem())]),
                now(),
                r#"spec.tls.ca.secretName: Secret "shop/my-ca" has a tls.key that is not the key of its tls.crt"#,
            ),
            (
                "expired",
                data(&[(TLS_CRT, ca.cert_pem()), (TLS_KEY, ca.key_pem())]),
                ca.info().not_after,
                r#"spec.tls.ca.secretName: Secret "shop/my-ca" has a tls.crt that expired at 2027-11-26T05:00:00Z"#,
            ),
        ];
        for (case, given, at, message) in table {
            let err = check_ca_data("shop/my-ca", &given, at).unwrap_err();
            assert_eq!(err.to_string(), message, "{case}");
        }
        let mut binary = data(&[(TLS_KEY, ca.key_pem())]);
        binary.insert(TLS_CRT.to_owned(), ByteString(vec![0xff, 0xfe]));
        let err = check_ca_data("shop/my-ca", &binary, now()).unwrap_err();
        assert_eq!(err.problem, Problem::NotUtf8 { key: TLS_CRT });
    }

    #[test]
    fn a_server_secret_covering_every_service_name_is_accepted() {
        let ca = ca();
        let leaf = ca.issue_server(&required(), days(30), now()).unwrap();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("my-cert".to_owned()),
                namespace: Some("shop".to_owned()),
                ..ObjectMeta::default()
            },
            data: Some(server_data(&leaf, ca.cert_pem())),
            ..Secret::default()
        };
        let material = check_server(&secret, &required(), now()).unwrap();
        assert_eq!(material.info, leaf.info);
        assert_eq!(material.ca_pem, ca.cert_pem());
        // Wildcards count, one label deep.
        let wildcard = ca
            .issue_server(
                &strings(&[
                    "shop-rw",
                    "shop-ro",
                    "shop-r",
                    "*.prod",
                    "*.prod.svc",
                    "*.prod.svc.cluster.local",
                ]),
                days(30),
                now(),
            )
            .unwrap();
        check_server_data(
            "shop/my-cert",
            &server_data(&wildcard, ca.cert_pem()),
            &required(),
            now(),
        )
        .unwrap();
    }

    #[test]
    fn server_secret_problems_name_the_field_and_the_secret() {
        let ca = ca();
        let other = Authority::generate("other", days(365), now()).unwrap();
        let leaf = ca.issue_server(&required(), days(30), now()).unwrap();
        let partial = ca
            .issue_server(&strings(&["shop-rw", "shop-rw.prod"]), days(30), now())
            .unwrap();
        let prefix = r#"spec.tls.server.secretName: Secret "shop/my-cert" "#;
        let table: Vec<(&str, BTreeMap<String, ByteString>, Timestamp, String)> = vec![
            (
                "no key",
                data(&[(TLS_CRT, &leaf.cert_pem), (CA_CRT, ca.cert_pem())]),
                now(),
                format!("{prefix}lacks tls.key"),
            ),
            (
                "no ca.crt",
                data(&[(TLS_CRT, &leaf.cert_pem), (TLS_KEY, &leaf.key_pem)]),
                now(),
                format!("{prefix}lacks ca.crt"),
            ),
            (
                "another key",
                data(&[
                    (TLS_CRT, &leaf.cert_pem),
                    (TLS_KEY, &partial.key_pem),
                    (CA_CRT, ca.cert_pem()),
                ]),
                now(),
                format!("{prefix}has a tls.key that is not the key of its tls.crt"),
            ),
            (
                "another CA",
                server_data(&leaf, other.cert_pem()),
                now(),
                format!("{prefix}has a ca.crt that did not issue its tls.crt"),
            ),
            (
                "expired",
                server_data(&leaf, ca.cert_pem()),
                leaf.info.not_after,
                format!(
                    "{prefix}has a tls.crt that expired at {}",
                    leaf.info.not_after
                ),
            ),
            (
                "names missing",
                server_data(&partial, ca.cert_pem()),
                now(),
                format!(
                    "{prefix}has a tls.crt that does not name shop-rw.prod.svc, shop-rw.prod.svc.cluster.local, \
                     shop-ro, shop-ro.prod, shop-ro.prod.svc, shop-ro.prod.svc.cluster.local, \
                     shop-r, shop-r.prod, shop-r.prod.svc, shop-r.prod.svc.cluster.local"
                ),
            ),
            (
                "not PEM",
                data(&[
                    (TLS_CRT, "hello"),
                    (TLS_KEY, &leaf.key_pem),
                    (CA_CRT, ca.cert_pem()),
                ]),
                now(),
                format!("{prefix}has an unreadable tls.crt: the bundle holds no PEM certificate"),
            ),
        ];
        for (case, given, at, message) in table {
            let err = check_server_data("shop/my-cert", &given, &required(), at).unwrap_err();
            assert_eq!(err.to_string(), message, "{case}");
        }
    }

    /// cert-manager's Secret is checked as a user's, its problems naming
    /// `spec.tls.certManager`.
    #[test]
    fn a_secret_cert_manager_fills_is_checked_naming_its_field() {
        let ca = ca();
        let leaf = ca.issue_server(&required(), days(30), now()).unwrap();
        let secret = |data| Secret {
            metadata: ObjectMeta {
                name: Some("shop-server-tls".to_owned()),
                namespace: Some("prod".to_owned()),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..Secret::default()
        };
        let good = secret(server_data(&leaf, ca.cert_pem()));
        let material = check_served(CERT_MANAGER_FIELD, &good, &required(), now()).unwrap();
        assert_eq!(material.info, leaf.info);
        // An issuer that writes no ca.crt.
        let no_ca = secret(data(&[(TLS_CRT, &leaf.cert_pem), (TLS_KEY, &leaf.key_pem)]));
        assert_eq!(
            check_served(CERT_MANAGER_FIELD, &no_ca, &required(), now())
                .unwrap_err()
                .to_string(),
            r#"spec.tls.certManager: Secret "prod/shop-server-tls" lacks ca.crt"#
        );
    }

    /// root -> intermediate -> leaf, with `tls.crt` = leaf + intermediate and
    /// `ca.crt` = root, as public CAs and cert-manager ship them.
    #[test]
    fn a_chain_through_intermediates_in_tls_crt_is_accepted() {
        let ca_params = || {
            let mut params = CertificateParams::default();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
        };
        let root_key = KeyPair::generate().unwrap();
        let mut root_params = ca_params();
        root_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "root");
        let root = root_params.self_signed(&root_key).unwrap();
        let root_issuer = Issuer::new(root_params, root_key);
        let mid_key = KeyPair::generate().unwrap();
        let mut mid_params = ca_params();
        mid_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "intermediate");
        let mid = mid_params.signed_by(&mid_key, &root_issuer).unwrap();
        let mid_issuer = Issuer::new(mid_params, mid_key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(required())
            .unwrap()
            .signed_by(&leaf_key, &mid_issuer)
            .unwrap();
        let chain = format!("{}{}", leaf.pem(), mid.pem());
        let given = data(&[
            (TLS_CRT, &chain),
            (TLS_KEY, &leaf_key.serialize_pem()),
            (CA_CRT, &root.pem()),
        ]);
        let material = check_server_data("shop/my-cert", &given, &required(), now()).unwrap();
        assert_eq!(material.cert_pem, chain);
        // Without the intermediate the chain is broken.
        let given = data(&[
            (TLS_CRT, &leaf.pem()),
            (TLS_KEY, &leaf_key.serialize_pem()),
            (CA_CRT, &root.pem()),
        ]);
        let err = check_server_data("shop/my-cert", &given, &required(), now()).unwrap_err();
        assert_eq!(err.problem, Problem::NotIssued);
    }
}
