//! `spec.tls.certManager`: PostgreSQL's serving certificate from cert-manager,
//! by reference to an issuer the user names. Tusk writes a cert-manager
//! `Certificate` for the names it would put on its own server certificates
//! and serves the Secret cert-manager fills exactly as it serves a
//! `spec.tls.server` Secret: checked, copied into each instance's Secret,
//! reloaded when it changes. Replication and the instance API keep Tusk's
//! CA, as with `server`.
//!
//! The issuer may be cert-manager's own (`Issuer` in the Database's
//! namespace, or `ClusterIssuer`) or an external issuer of another API group
//! (its own kinds): cert-manager's `issuerRef` allows both, so Tusk does too.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::field::FieldError;

/// cert-manager's API group, the default of `issuerRef.group`.
pub const GROUP: &str = "cert-manager.io";
/// The default of `issuerRef.kind`.
pub const DEFAULT_KIND: &str = "Issuer";
/// The kinds of cert-manager's own group.
pub const KINDS: [&str; 2] = ["Issuer", "ClusterIssuer"];

/// The `Certificate` Tusk writes for Database `db`.
pub fn certificate_name(db: &str) -> String {
    format!("{db}-server")
}

/// The Secret that `Certificate` has cert-manager fill: never an instance's
/// (`<db>-<serial>-tls`), nor another Database's (`<other>-server-tls` would
/// need a Database named `<db>-server`, whose instances' Secrets end in
/// digits before `-tls`).
pub fn secret_name(db: &str) -> String {
    format!("{db}-server-tls")
}

/// The rules the schema (CEL) and [`errors`] share, by message.
pub mod rules {
    /// `ca` or `server` with `certManager`.
    pub const EXCLUSIVE: &str = "spec.tls.certManager cannot be set with spec.tls.ca or spec.tls.server: each says where PostgreSQL's serving certificate comes from";
    /// A kind cert-manager's own group does not have.
    pub const KIND: &str = "spec.tls.certManager.issuerRef.kind must be Issuer or ClusterIssuer when issuerRef.group is cert-manager.io (the default)";

    /// Neither `ca` nor `server` beside `certManager` (on `spec.tls`).
    pub fn exclusive() -> String {
        "!has(self.certManager) || !(has(self.ca) || has(self.server))".to_owned()
    }

    /// cert-manager's group knows two kinds (on `issuerRef`).
    pub fn kind() -> String {
        let kinds: Vec<String> = super::KINDS.iter().map(|k| format!("'{k}'")).collect();
        format!(
            "(has(self.group) && self.group != '{}') || !has(self.kind) || self.kind in [{}]",
            super::GROUP,
            kinds.join(", ")
        )
    }
}

/// PostgreSQL's serving certificate from cert-manager: Tusk creates a
/// `Certificate` named `<name>-server` (owned by the Database) for every
/// name clients use (the Services' forms and the published hostnames and
/// addresses of `spec.expose`), lasting `certificateLifetime` and renewed
/// `renewBefore` its end, issued by `issuerRef` into Secret
/// `<name>-server-tls`; PostgreSQL serves that Secret as it would a
/// `spec.tls.server` one, and picks up each renewal by a reload.
/// Applications find the issuer's CA (the Secret's `ca.crt`) in `<name>-app`.
/// Replication and the instance API keep Tusk's CA. Not with `ca` or
/// `server`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerTls {
    /// The issuer: an `Issuer` in this namespace (default), a
    /// `ClusterIssuer`, or an external issuer by its group and kind.
    pub issuer_ref: IssuerReference,
}

/// A cert-manager issuer, as cert-manager's own `issuerRef` names one.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(rules::kind()).message(rules::KIND).field_path(".kind"))]
pub struct IssuerReference {
    /// The issuer's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// `Issuer` (default, in the Database's namespace) or `ClusterIssuer`;
    /// for an external issuer, its kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub kind: Option<String>,
    /// The issuer's API group: `cert-manager.io` (default), or an external
    /// issuer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub group: Option<String>,
}

/// [`IssuerReference`] with its defaults folded in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issuer {
    pub name: String,
    pub kind: String,
    pub group: String,
}

impl Issuer {
    /// The reference resolved: kind `Issuer` and group `cert-manager.io`
    /// unless given.
    pub fn resolve(reference: &IssuerReference) -> Self {
        Self {
            name: reference.name.clone(),
            kind: reference
                .kind
                .clone()
                .unwrap_or_else(|| DEFAULT_KIND.to_owned()),
            group: reference.group.clone().unwrap_or_else(|| GROUP.to_owned()),
        }
    }

    /// One of cert-manager's own issuers (whose readiness Tusk can read).
    pub fn is_cert_manager(&self) -> bool {
        self.group == GROUP
    }

    /// `Issuer "name"` or `ClusterIssuer "name"`, with the group when it is
    /// not cert-manager's: how messages name it.
    pub fn describe(&self) -> String {
        if self.is_cert_manager() {
            format!("{} \"{}\"", self.kind, self.name)
        } else {
            format!("{}.{} \"{}\"", self.kind, self.group, self.name)
        }
    }
}

/// Checks `spec.tls.certManager` beside the rest of `spec.tls` (the schema's
/// CEL says the same, for a Database admitted while the webhook was down).
pub fn errors(
    cert_manager: Option<&CertManagerTls>,
    ca: bool,
    server: bool,
    is_name: impl Fn(&str) -> bool,
) -> Vec<FieldError> {
    let Some(cert_manager) = cert_manager else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    if ca || server {
        errors.push(FieldError::new(
            "spec.tls.certManager",
            rules::EXCLUSIVE
                .trim_start_matches("spec.tls.certManager ")
                .to_owned(),
        ));
    }
    let reference = &cert_manager.issuer_ref;
    if !is_name(&reference.name) {
        errors.push(FieldError::new(
            "spec.tls.certManager.issuerRef.name",
            format!(
                "{:?} is not an object name (lower-case letters, digits, '-' and '.', at most 253)",
                reference.name
            ),
        ));
    }
    let issuer = Issuer::resolve(reference);
    if let Some(group) = &reference.group
        && !is_name(group)
    {
        errors.push(FieldError::new(
            "spec.tls.certManager.issuerRef.group",
            format!("{group:?} is not an API group such as cert-manager.io"),
        ));
    }
    if issuer.is_cert_manager() && !KINDS.contains(&issuer.kind.as_str()) {
        errors.push(FieldError::new(
            "spec.tls.certManager.issuerRef.kind",
            rules::KIND
                .trim_start_matches("spec.tls.certManager.issuerRef.kind ")
                .to_owned(),
        ));
    } else if !is_kind(&issuer.kind) {
        errors.push(FieldError::new(
            "spec.tls.certManager.issuerRef.kind",
            format!(
                "{:?} is not a kind (a letter, then letters and digits)",
                issuer.kind
            ),
        ));
    }
    errors
}

/// A Kubernetes kind: a letter, then letters and digits.
fn is_kind(kind: &str) -> bool {
    kind.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && kind.bytes().all(|b| b.is_ascii_alphanumeric())
        && kind.len() <= 63
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str, kind: Option<&str>, group: Option<&str>) -> CertManagerTls {
        CertManagerTls {
            issuer_ref: IssuerReference {
                name: name.into(),
                kind: kind.map(str::to_owned),
                group: group.map(str::to_owned),
            },
        }
    }

    fn paths(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    fn simple_name(name: &str) -> bool {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    }

    #[test]
    fn an_issuer_defaults_to_cert_manager_s_namespaced_issuer() {
        let issuer = Issuer::resolve(&reference("ca", None, None).issuer_ref);
        assert_eq!(
            issuer,
            Issuer {
                name: "ca".into(),
                kind: "Issuer".into(),
                group: "cert-manager.io".into()
            }
        );
        assert!(issuer.is_cert_manager());
        assert_eq!(issuer.describe(), "Issuer \"ca\"");
        let external = Issuer::resolve(
            &reference(
                "pca",
                Some("AWSPCAClusterIssuer"),
                Some("awspca.cert-manager.io"),
            )
            .issuer_ref,
        );
        assert_eq!(
            external.describe(),
            "AWSPCAClusterIssuer.awspca.cert-manager.io \"pca\""
        );
    }

    #[test]
    fn each_rule_names_its_field() {
        let ok = |spec: &CertManagerTls| errors(Some(spec), false, false, simple_name);
        assert!(ok(&reference("ca", None, None)).is_empty());
        assert!(ok(&reference("ca", Some("ClusterIssuer"), None)).is_empty());
        assert!(
            ok(&reference(
                "pca",
                Some("AWSPCAIssuer"),
                Some("awspca.cert-manager.io")
            ))
            .is_empty()
        );
        assert_eq!(
            paths(&ok(&reference("ca", Some("AWSPCAIssuer"), None))),
            ["spec.tls.certManager.issuerRef.kind"]
        );
        assert_eq!(
            ok(&reference("ca", Some("Issuers"), Some("cert-manager.io")))[0].to_string(),
            "spec.tls.certManager.issuerRef.kind: must be Issuer or ClusterIssuer when issuerRef.group is cert-manager.io (the default)"
        );
        assert_eq!(
            paths(&ok(&reference("Bad_Name", None, None))),
            ["spec.tls.certManager.issuerRef.name"]
        );
        assert_eq!(
            paths(&ok(&reference("ca", Some("x-y"), Some("example.com")))),
            ["spec.tls.certManager.issuerRef.kind"]
        );
        assert_eq!(
            paths(&ok(&reference("ca", Some("X"), Some("Example")))),
            ["spec.tls.certManager.issuerRef.group"]
        );
        let both = errors(Some(&reference("ca", None, None)), false, true, simple_name);
        assert_eq!(
            both[0].to_string(),
            "spec.tls.certManager: cannot be set with spec.tls.ca or spec.tls.server: each says where PostgreSQL's serving certificate comes from"
        );
        assert!(errors(None, true, true, simple_name).is_empty());
    }

    /// The API server enforces the rules even without the webhook.
    #[test]
    fn the_schema_refuses_a_second_source_and_a_kind_cert_manager_lacks() {
        let cel = |tls: crate::api::tls::TlsSpec| {
            let mut db = crate::api::arbitrary::sample_database();
            db.spec.tls = tls;
            match db.validate_cel() {
                Ok(()) => String::new(),
                Err(errors) => format!("{errors:?}"),
            }
        };
        let with = |cert_manager: CertManagerTls| crate::api::tls::TlsSpec {
            cert_manager: Some(cert_manager),
            ..Default::default()
        };
        assert_eq!(cel(with(reference("ca", None, None))), "");
        assert_eq!(cel(with(reference("ca", Some("ClusterIssuer"), None))), "");
        assert_eq!(
            cel(with(reference(
                "pca",
                Some("AWSPCAIssuer"),
                Some("awspca.cert-manager.io")
            ))),
            ""
        );
        let kind = cel(with(reference("ca", Some("AWSPCAIssuer"), None)));
        assert!(kind.contains(rules::KIND), "{kind}");
        let both = cel(crate::api::tls::TlsSpec {
            server: Some(crate::api::tls::TlsSecretReference {
                secret_name: "pg".into(),
            }),
            ..with(reference("ca", None, None))
        });
        assert!(both.contains(rules::EXCLUSIVE), "{both}");
    }

    #[test]
    fn the_kind_rule_in_cel_lists_cert_manager_s_kinds() {
        assert_eq!(
            rules::kind(),
            "(has(self.group) && self.group != 'cert-manager.io') || !has(self.kind) || self.kind in ['Issuer', 'ClusterIssuer']"
        );
    }
}
