//! `spec.tls` and `status.tls`: how a Database's connections are encrypted
//! and authenticated, the rules a spec must meet beyond its schema
//! ([`errors`], run by the webhook and the reconciler like the rest of
//! [`super::validate`]), the settings the builders take once resolved
//! ([`TlsSettings`]), and what status reports about the certificates in effect.
//!
//! TLS is always on: every Database serves TLS and requires it from clients
//! (`hostssl`) unless `allowPlaintext` opens plaintext TCP too. `spec.tls`
//! only says how. Where the certificates come from is one of three sources
//! ([`TlsSource`]): Tusk's own CA (default), a CA the user provides
//! (`ca.secretName`: Tusk issues everything from it), or a server
//! certificate the user provides (`server.secretName`: it only replaces
//! PostgreSQL's serving certificate; the internal identities, replication
//! and the instance API, still come from Tusk's CA). `ca` and `server`
//! together are refused: a user CA already issues the server certificate,
//! and a server certificate beside it would leave two issuers for clients to
//! trust with no rule saying which of them rotates what. A fourth source,
//! cert-manager by reference (`certManager`, [`super::tls_cert_manager`]),
//! is served like a `server` Secret that cert-manager fills and renews.
//!
//! Durations use the grammar of `spec.backup.retention`: a number and a
//! unit, `h`, `d` or `w` (`7d`, `36h`, `4w`).

use std::time::Duration;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::field::FieldError;
use super::tls_cert_manager::{self as cert_manager, CertManagerTls, Issuer};

/// `spec.tls.certificateLifetime` when unset.
pub const DEFAULT_CERTIFICATE_LIFETIME: &str = "7d";
/// `spec.tls.caLifetime` when unset: ten years.
pub const DEFAULT_CA_LIFETIME: &str = "3650d";
/// `spec.tls.caRenewBefore` when unset.
pub const DEFAULT_CA_RENEW_BEFORE: &str = "90d";
/// The shortest leaf lifetime: renewal must have time to be confirmed.
pub const MIN_CERTIFICATE_LIFETIME: Duration = Duration::from_secs(3600);
/// The longest leaf lifetime: what browsers and the CA/Browser Forum accept
/// for a TLS server certificate (397 days).
pub const MAX_CERTIFICATE_LIFETIME: Duration = Duration::from_secs(397 * 86_400);
/// The longest CA lifetime (100 years, in days within the duration grammar).
pub const MAX_CA_LIFETIME: Duration = Duration::from_secs(36_500 * 86_400);

/// TLS for client, replication and instance-API connections. Always on; this
/// says how. Certificates come from Tusk's own CA (kept in the `<name>-ca`
/// Secret, never mounted in a pod) unless `ca` or `server` names a Secret of
/// yours. Applications find the CA in the `<name>-app` Secret (`ca.crt`) and
/// URIs with `sslmode=verify-full`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.ca) && has(self.server))").message("spec.tls.ca and spec.tls.server are mutually exclusive: with ca Tusk issues every certificate (the server's too) from your CA; with server only PostgreSQL's serving certificate is yours").field_path(".server"))]
#[x_kube(validation = Rule::new(cert_manager::rules::exclusive()).message(cert_manager::rules::EXCLUSIVE).field_path(".certManager"))]
#[x_kube(validation = Rule::new("!(has(self.ca) && has(self.rotateCA))").message("spec.tls.rotateCA rotates Tusk's own CA; with spec.tls.ca you rotate your CA yourself by updating its Secret").field_path(".rotateCA"))]
pub struct TlsSpec {
    /// Also accept clients without TLS (plaintext TCP, password
    /// authentication). Default `false`: every non-local connection must use
    /// TLS. Standbys and Tusk itself always use TLS. A change restarts the
    /// instances one at a time (replicas, a switchover, then the old primary).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_plaintext: bool,

    /// The lowest TLS version PostgreSQL accepts: `TLSv1.3` (default) or
    /// `TLSv1.2` for older clients. A change restarts the instances one at a
    /// time.
    #[serde(default, skip_serializing_if = "is_default")]
    pub min_protocol_version: TlsVersion,

    /// The application role (`spec.bootstrap.initdb.owner`) authenticates
    /// with a client certificate instead of its password: Tusk issues it
    /// (common name = the role, from the CA that verifies clients: Tusk's,
    /// or yours with `ca`) into the `<name>-app` Secret as `tls.crt` and
    /// `tls.key` (PEM; `tls.pk8` is the key as PKCS#8 DER for JDBC), and
    /// renews it like the server's, also through a CA rotation. A password
    /// login of that role is refused. A change restarts the instances one at
    /// a time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_certificates: bool,

    /// How long a certificate Tusk issues is valid: a number and a unit `h`,
    /// `d` or `w` (`7d`, `36h`). Between 1h and 397d. Default `7d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,4}[hdw]$"))]
    pub certificate_lifetime: Option<String>,

    /// Renew a certificate when less than this remains of it; shorter than
    /// `certificateLifetime`. Default: a third of `certificateLifetime`.
    /// Renewal is a reload, never a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,4}[hdw]$"))]
    pub renew_before: Option<String>,

    /// How long Tusk's own CA is valid. Default `3650d` (ten years); at most
    /// `36500d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,4}[hdw]$"))]
    pub ca_lifetime: Option<String>,

    /// Start a staged rotation of Tusk's own CA when less than this remains
    /// of it; shorter than `caLifetime` and longer than
    /// `certificateLifetime` (so that no certificate outlives its CA).
    /// Default `90d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,4}[hdw]$"))]
    pub ca_renew_before: Option<String>,

    /// Your CA instead of Tusk's: a `kubernetes.io/tls` Secret in this
    /// namespace with the CA certificate in `tls.crt` and its key in
    /// `tls.key`. Tusk issues every certificate (server, replication,
    /// instance API, the application's) from it. Updating the Secret
    /// rotates the CA the same staged way. Not with `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<TlsSecretReference>,

    /// Your certificate for PostgreSQL to serve instead of one Tusk issues: a
    /// Secret in this namespace with `tls.crt`, `tls.key` and `ca.crt` (the
    /// CA that issued it, given to clients). It must name `<name>-rw`,
    /// `<name>-ro` and `<name>-r` (as `name`, `name.<namespace>`, `name.<namespace>.svc` and `name.<namespace>.svc.cluster.local`; standbys verify `<name>-rw`); Tusk
    /// reports in the `Certificates` condition when it does not. Replication
    /// and the instance API still use certificates from Tusk's CA. Updating
    /// the Secret is picked up by a reload. Not with `ca`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<TlsSecretReference>,

    /// PostgreSQL's serving certificate from cert-manager, issued by the
    /// issuer you name: Tusk creates the `Certificate` (`<name>-server`,
    /// into Secret `<name>-server-tls`) for every name clients use and
    /// serves it like a `server` Secret. Not with `ca` or `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<CertManagerTls>,

    /// Any new value starts a staged rotation of Tusk's own CA: the new CA
    /// is trusted everywhere, certificates are reissued from it, then the old
    /// CA is dropped; `status.tls.stage` shows the progress. A date such as
    /// `2026-11-26` is a good value. Not with `ca` (rotate your CA yourself).
    #[serde(default, rename = "rotateCA", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub rotate_ca: Option<String>,
}

/// The lowest TLS protocol version PostgreSQL accepts.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    #[serde(rename = "TLSv1.2")]
    Tls12,
    /// TLS 1.3 only.
    #[default]
    #[serde(rename = "TLSv1.3")]
    Tls13,
}

impl TlsVersion {
    /// PostgreSQL's `ssl_min_protocol_version` value (and `TUSK_TLS_MIN_VERSION`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tls12 => "TLSv1.2",
            Self::Tls13 => "TLSv1.3",
        }
    }
}

/// A Secret in the Database's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsSecretReference {
    /// The Secret's name. It may be created after the Database: until it
    /// exists and is valid, the `Certificates` condition names it and Tusk
    /// keeps what is in effect.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// Where the certificates come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    /// Tusk's own CA, in `<db>-ca`.
    Operator,
    /// The user's CA (`spec.tls.ca.secretName`) issues everything.
    CaSecret(String),
    /// The user's server certificate (`spec.tls.server.secretName`) for
    /// PostgreSQL; everything else from Tusk's CA.
    ServerSecret(String),
    /// PostgreSQL's server certificate from cert-manager
    /// (`spec.tls.certManager`): a `Certificate` Tusk writes, served from
    /// the Secret cert-manager fills (`secret`) as [`Self::ServerSecret`]
    /// is; everything else from Tusk's CA.
    CertManager { issuer: Issuer, secret: String },
}

impl TlsSource {
    /// Whether Tusk's own CA (`<db>-ca`'s `ca.crt`/`ca.key`) is in use: it
    /// issues at least the internal identities.
    pub fn operator_ca(&self) -> bool {
        !matches!(self, Self::CaSecret(_))
    }

    /// `status.tls.source`.
    pub fn status(&self) -> TlsSourceStatus {
        match self {
            Self::Operator => TlsSourceStatus::Operator,
            Self::CaSecret(_) => TlsSourceStatus::CaSecret,
            Self::ServerSecret(_) => TlsSourceStatus::ServerSecret,
            Self::CertManager { .. } => TlsSourceStatus::CertManager,
        }
    }

    /// The user Secret this source reads, with the field that names it.
    pub fn user_secret(&self) -> Option<(&'static str, &str)> {
        match self {
            Self::Operator => None,
            Self::CaSecret(name) => Some(("spec.tls.ca.secretName", name)),
            Self::ServerSecret(name) => Some(("spec.tls.server.secretName", name)),
            Self::CertManager { secret, .. } => Some(("spec.tls.certManager", secret)),
        }
    }

    /// The Secret PostgreSQL serves as is (`server` or cert-manager's),
    /// with the field that says so.
    pub fn served_secret(&self) -> Option<(&'static str, &str)> {
        match self {
            Self::ServerSecret(_) | Self::CertManager { .. } => self.user_secret(),
            Self::Operator | Self::CaSecret(_) => None,
        }
    }
}

/// `spec.tls`, resolved: defaults folded in, durations parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// `allowPlaintext`.
    pub allow_plaintext: bool,
    /// `minProtocolVersion`.
    pub min_protocol_version: TlsVersion,
    /// `clientCertificates`: the application role authenticates with a
    /// certificate from `<db>-app`.
    pub client_certificates: bool,
    /// `certificateLifetime`.
    pub certificate_lifetime: Duration,
    /// `renewBefore`.
    pub renew_before: Duration,
    /// `caLifetime`.
    pub ca_lifetime: Duration,
    /// `caRenewBefore`.
    pub ca_renew_before: Duration,
    /// `ca` / `server` / `certManager`.
    pub source: TlsSource,
    /// `rotateCA`.
    pub rotate_ca: Option<String>,
}

impl TlsSettings {
    /// `spec` resolved; `None` when a duration does not parse ([`errors`]
    /// refuses such a spec before the model is built).
    pub fn resolve(spec: &TlsSpec) -> Option<Self> {
        Self::resolve_for(spec, "")
    }

    /// [`Self::resolve`] for Database `database`, whose name the
    /// cert-manager Secret's carries.
    pub fn resolve_for(spec: &TlsSpec, database: &str) -> Option<Self> {
        let certificate_lifetime = parse_duration(
            spec.certificate_lifetime
                .as_deref()
                .unwrap_or(DEFAULT_CERTIFICATE_LIFETIME),
        )
        .ok()?;
        let renew_before = match &spec.renew_before {
            Some(value) => parse_duration(value).ok()?,
            None => certificate_lifetime / 3,
        };
        let source = match (&spec.ca, &spec.server, &spec.cert_manager) {
            (Some(ca), _, _) => TlsSource::CaSecret(ca.secret_name.clone()),
            (None, Some(server), _) => TlsSource::ServerSecret(server.secret_name.clone()),
            (None, None, Some(cert_manager)) => TlsSource::CertManager {
                issuer: Issuer::resolve(&cert_manager.issuer_ref),
                secret: cert_manager::secret_name(database),
            },
            (None, None, None) => TlsSource::Operator,
        };
        Some(Self {
            allow_plaintext: spec.allow_plaintext,
            min_protocol_version: spec.min_protocol_version,
            client_certificates: spec.client_certificates,
            certificate_lifetime,
            renew_before,
            ca_lifetime: parse_duration(spec.ca_lifetime.as_deref().unwrap_or(DEFAULT_CA_LIFETIME))
                .ok()?,
            ca_renew_before: parse_duration(
                spec.ca_renew_before
                    .as_deref()
                    .unwrap_or(DEFAULT_CA_RENEW_BEFORE),
            )
            .ok()?,
            source,
            rotate_ca: spec.rotate_ca.clone(),
        })
    }

    /// The roles that authenticate with a client certificate (`cert` in
    /// `pg_hba.conf`, `TUSK_TLS_CERT_USERS`): the application owner with
    /// `clientCertificates`, else none.
    pub fn cert_users(&self, app_owner: &str) -> Vec<String> {
        if self.client_certificates {
            vec![app_owner.to_owned()]
        } else {
            Vec::new()
        }
    }
}

impl Default for TlsSettings {
    fn default() -> Self {
        // The defaults are constants that parse; `resolve` of the empty
        // spec cannot fail (a test proves it), the fallback only keeps this
        // free of a panic.
        Self::resolve(&TlsSpec::default()).unwrap_or(Self {
            allow_plaintext: false,
            min_protocol_version: TlsVersion::Tls13,
            client_certificates: false,
            certificate_lifetime: Duration::from_secs(7 * 86_400),
            renew_before: Duration::from_secs(7 * 86_400 / 3),
            ca_lifetime: Duration::from_secs(3650 * 86_400),
            ca_renew_before: Duration::from_secs(90 * 86_400),
            source: TlsSource::Operator,
            rotate_ca: None,
        })
    }
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Parses a duration such as `7d`, `36h` or `4w` (the grammar of
/// `spec.backup.retention`).
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let bad = || format!("{value:?} is not a duration such as \"7d\", \"36h\" or \"4w\"");
    let unit = value.chars().last().ok_or_else(bad)?;
    let digits = &value[..value.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let amount: u64 = digits.parse().map_err(|_| bad())?;
    let seconds = match unit {
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return Err(bad()),
    };
    if amount == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(amount * seconds))
}

/// Checks `spec.tls` on its own (create, and every reconcile). The user
/// Secrets it names are not looked up here: they may be created after the
/// Database; the controller reports them in the `Certificates` condition.
pub fn errors(spec: &TlsSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut parsed = |field: &str, value: Option<&String>, default: &str| match parse_duration(
        value.map_or(default, String::as_str),
    ) {
        Ok(duration) => Some(duration),
        Err(e) => {
            errors.push(FieldError::new(format!("spec.tls.{field}"), e));
            None
        }
    };
    let lifetime = parsed(
        "certificateLifetime",
        spec.certificate_lifetime.as_ref(),
        DEFAULT_CERTIFICATE_LIFETIME,
    );
    let renew_before = match &spec.renew_before {
        Some(value) => parsed("renewBefore", Some(value), ""),
        None => lifetime.map(|l| l / 3),
    };
    let ca_lifetime = parsed("caLifetime", spec.ca_lifetime.as_ref(), DEFAULT_CA_LIFETIME);
    let ca_renew_before = parsed(
        "caRenewBefore",
        spec.ca_renew_before.as_ref(),
        DEFAULT_CA_RENEW_BEFORE,
    );
    errors.extend(lifetime_errors(
        lifetime,
        renew_before,
        ca_lifetime,
        ca_renew_before,
    ));
    errors.extend(source_errors(spec));
    errors.extend(cert_manager::errors(
        spec.cert_manager.as_ref(),
        spec.ca.is_some(),
        spec.server.is_some(),
        is_dns_subdomain,
    ));
    errors
}

/// The durations against each other and their bounds.
fn lifetime_errors(
    lifetime: Option<Duration>,
    renew_before: Option<Duration>,
    ca_lifetime: Option<Duration>,
    ca_renew_before: Option<Duration>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(lifetime) = lifetime
        && !(MIN_CERTIFICATE_LIFETIME..=MAX_CERTIFICATE_LIFETIME).contains(&lifetime)
    {
        errors.push(FieldError::new(
            "spec.tls.certificateLifetime",
            "must be between 1h and 397d",
        ));
    }
    if let (Some(lifetime), Some(renew_before)) = (lifetime, renew_before)
        && renew_before >= lifetime
    {
        errors.push(FieldError::new(
            "spec.tls.renewBefore",
            "must be shorter than spec.tls.certificateLifetime: a certificate would be renewed as soon as it is issued",
        ));
    }
    if let Some(ca_lifetime) = ca_lifetime
        && ca_lifetime > MAX_CA_LIFETIME
    {
        errors.push(FieldError::new(
            "spec.tls.caLifetime",
            "must be at most 36500d",
        ));
    }
    if let (Some(ca_lifetime), Some(ca_renew_before)) = (ca_lifetime, ca_renew_before)
        && ca_renew_before >= ca_lifetime
    {
        errors.push(FieldError::new(
            "spec.tls.caRenewBefore",
            "must be shorter than spec.tls.caLifetime: the CA would be rotated as soon as it is created",
        ));
    }
    if let (Some(lifetime), Some(ca_renew_before)) = (lifetime, ca_renew_before)
        && ca_renew_before <= lifetime
    {
        errors.push(FieldError::new(
            "spec.tls.caRenewBefore",
            "must be longer than spec.tls.certificateLifetime: a certificate issued just before the CA rotation starts would outlive its CA",
        ));
    }
    errors
}

/// `ca`, `server` and `rotateCA` together (the schema's CEL says the same,
/// for a Database admitted while the webhook was down).
fn source_errors(spec: &TlsSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if spec.ca.is_some() && spec.server.is_some() {
        errors.push(FieldError::new(
            "spec.tls.server",
            "cannot be set with spec.tls.ca: with ca Tusk issues every certificate (the server's too) from your CA; with server only PostgreSQL's serving certificate is yours",
        ));
    }
    if spec.ca.is_some() && spec.rotate_ca.is_some() {
        errors.push(FieldError::new(
            "spec.tls.rotateCA",
            "rotates Tusk's own CA and cannot be set with spec.tls.ca: rotate your CA by updating its Secret",
        ));
    }
    for (field, reference) in [("ca", &spec.ca), ("server", &spec.server)] {
        if let Some(reference) = reference
            && !is_dns_subdomain(&reference.secret_name)
        {
            errors.push(FieldError::new(
                format!("spec.tls.{field}.secretName"),
                format!(
                    "{:?} is not a Secret name (lower-case letters, digits, '-' and '.', at most 253)",
                    reference.secret_name
                ),
            ));
        }
    }
    if let Some(rotate) = &spec.rotate_ca
        && (rotate.is_empty() || rotate.len() > 63)
    {
        errors.push(FieldError::new(
            "spec.tls.rotateCA",
            "must be 1 to 63 characters, for example today's date",
        ));
    }
    errors
}

/// A Kubernetes object name (RFC 1123 subdomain).
fn is_dns_subdomain(name: &str) -> bool {
    let alphanumeric = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| alphanumeric(b) || b == b'-' || b == b'.')
        && name.bytes().next().is_some_and(alphanumeric)
        && name.bytes().last().is_some_and(alphanumeric)
}

/// The `Certificates` condition: `True` when every certificate the spec asks
/// for is in effect on every instance; `False` naming the Secret when one is
/// expired, does not match its key, does not cover the names clients use,
/// or a user Secret is missing or malformed.
pub mod condition {
    /// The condition type.
    pub const TYPE: &str = "Certificates";
    /// Every certificate is valid, covers its names and is in effect.
    pub const IN_EFFECT: &str = "InEffect";
    /// A renewal or CA rotation is under way (`status.tls.stage`).
    pub const ROTATING: &str = "Rotating";
    /// A certificate in effect has expired.
    pub const EXPIRED: &str = "Expired";
    /// A certificate does not match its key, or was not issued by the CA
    /// the instances trust.
    pub const MISMATCHED: &str = "Mismatched";
    /// A server certificate does not name every Service and instance.
    pub const NAMES_NOT_COVERED: &str = "NamesNotCovered";
    /// The Secret `spec.tls.ca` or `spec.tls.server` names does not exist,
    /// or cert-manager has not filled `spec.tls.certManager`'s yet.
    pub const SECRET_MISSING: &str = "SecretMissing";
    /// `spec.tls.certManager`, but cert-manager's `Certificate` resource is
    /// not installed in the cluster.
    pub const CERT_MANAGER_MISSING: &str = "CertManagerNotInstalled";
    /// `spec.tls.certManager`: the issuer it names does not exist or is not
    /// ready.
    pub const ISSUER_NOT_READY: &str = "IssuerNotReady";
    /// `spec.tls.certManager`: cert-manager reports the `Certificate` not
    /// ready (issuing, or failing to).
    pub const CERTIFICATE_NOT_READY: &str = "CertificateNotReady";
    /// That Secret lacks a key, or a key does not parse.
    pub const SECRET_INVALID: &str = "SecretInvalid";
}

/// What status reports about a Database's certificates.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsStatus {
    /// The CA rotation stage: `Stable`, `TrustingBoth` (old and new CA
    /// trusted everywhere), `Reissuing` (certificates reissued by the new
    /// CA), `DroppingOld` (the old CA no longer trusted).
    #[serde(default)]
    pub stage: TlsStage,

    /// Where the certificates come from: `operator` (Tusk's CA),
    /// `ca-secret` (`spec.tls.ca`), `server-secret` (`spec.tls.server`) or
    /// `cert-manager` (`spec.tls.certManager`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<TlsSourceStatus>,

    /// When the CA in effect expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_not_after: Option<String>,

    /// When the first certificate in effect expires (RFC 3339): the next
    /// renewal happens before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest_not_after: Option<String>,

    /// Per instance: the certificate its Secret holds and whether it was
    /// seen presented.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceTlsStatus>,
}

/// The stage of a CA rotation.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum TlsStage {
    /// One CA, every certificate issued by it.
    #[default]
    Stable,
    /// Old and new CA trusted everywhere; certificates still from the old.
    TrustingBoth,
    /// Certificates being reissued by the new CA.
    Reissuing,
    /// The old CA being dropped from every trust bundle.
    DroppingOld,
}

/// `status.tls.source`.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
#[serde(rename_all = "kebab-case")]
pub enum TlsSourceStatus {
    /// Tusk's own CA.
    #[default]
    Operator,
    /// The user's CA (`spec.tls.ca`).
    CaSecret,
    /// The user's server certificate (`spec.tls.server`).
    ServerSecret,
    /// PostgreSQL's certificate from cert-manager (`spec.tls.certManager`).
    CertManager,
}

/// The TLS state of one instance.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTlsStatus {
    /// The instance.
    pub name: String,
    /// Its TLS Secret (`<instance>-tls`).
    pub secret: String,
    /// Serial (lower-case hex) of the PostgreSQL server certificate in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// When that certificate expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    /// Whether PostgreSQL was seen presenting it in a TLS handshake.
    #[serde(default)]
    pub presented: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str) -> Option<TlsSecretReference> {
        Some(TlsSecretReference {
            secret_name: name.into(),
        })
    }

    fn messages(spec: &TlsSpec) -> Vec<String> {
        errors(spec).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_defaults_are_valid_and_resolve_as_documented() {
        assert!(errors(&TlsSpec::default()).is_empty());
        let settings = TlsSettings::resolve(&TlsSpec::default());
        assert_eq!(settings.as_ref(), Some(&TlsSettings::default()));
        let settings = TlsSettings::default();
        assert_eq!(
            settings.certificate_lifetime,
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(
            settings.renew_before,
            Duration::from_secs(7 * 86_400 / 3),
            "a third of the lifetime"
        );
        assert_eq!(settings.ca_lifetime, Duration::from_secs(3650 * 86_400));
        assert_eq!(settings.ca_renew_before, Duration::from_secs(90 * 86_400));
        assert_eq!(settings.min_protocol_version.as_str(), "TLSv1.3");
        assert_eq!(settings.source, TlsSource::Operator);
        assert!(!settings.allow_plaintext);
        assert!(settings.cert_users("app").is_empty());
    }

    #[test]
    fn renew_before_defaults_to_a_third_of_the_lifetime_the_spec_sets() {
        let spec = TlsSpec {
            certificate_lifetime: Some("30d".into()),
            ..TlsSpec::default()
        };
        let settings = TlsSettings::resolve(&spec).unwrap_or_default();
        assert_eq!(settings.renew_before, Duration::from_secs(10 * 86_400));
    }

    #[test]
    fn durations_parse_in_the_retention_grammar() {
        assert_eq!(parse_duration("36h"), Ok(Duration::from_secs(36 * 3600)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in ["", "0d", "7", "d", "7m", "-1d", "1.5d", "123456d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn each_duration_rule_names_its_field() {
        let cases = [
            (
                TlsSpec {
                    certificate_lifetime: Some("7x".into()),
                    ..TlsSpec::default()
                },
                "spec.tls.certificateLifetime: \"7x\" is not a duration",
            ),
            (
                TlsSpec {
                    certificate_lifetime: Some("398d".into()),
                    ..TlsSpec::default()
                },
                "spec.tls.certificateLifetime: must be between 1h and 397d",
            ),
            (
                TlsSpec {
                    renew_before: Some("7d".into()),
                    ..TlsSpec::default()
                },
                "spec.tls.renewBefore: must be shorter than spec.tls.certificateLifetime",
            ),
            (
                TlsSpec {
                    ca_renew_before: Some("3650d".into()),
                    ..TlsSpec::default()
                },
                "spec.tls.caRenewBefore: must be shorter than spec.tls.caLifetime",
            ),
            (
                TlsSpec {
                    ca_renew_before: Some("5d".into()),
                    ..TlsSpec::default()
                },
                "spec.tls.caRenewBefore: must be longer than spec.tls.certificateLifetime",
            ),
            (
                TlsSpec {
                    ca_lifetime: Some("5300w".into()),
                    ..TlsSpec::default()
                },
                "spec.tls.caLifetime: must be at most 36500d",
            ),
        ];
        for (spec, expected) in cases {
            let found = messages(&spec);
            assert!(
                found.iter().any(|m| m.starts_with(expected)),
                "{expected:?} not in {found:?}"
            );
        }
    }

    #[test]
    fn ca_and_server_are_exclusive_and_rotate_ca_is_for_tusk_s_ca_only() {
        let both = TlsSpec {
            ca: secret("corp-ca"),
            server: secret("pg-cert"),
            ..TlsSpec::default()
        };
        assert_eq!(
            errors(&both)
                .iter()
                .map(|e| e.path.as_str())
                .collect::<Vec<_>>(),
            ["spec.tls.server"]
        );
        let rotate_user_ca = TlsSpec {
            ca: secret("corp-ca"),
            rotate_ca: Some("2026-11-26".into()),
            ..TlsSpec::default()
        };
        assert_eq!(
            errors(&rotate_user_ca)
                .iter()
                .map(|e| e.path.as_str())
                .collect::<Vec<_>>(),
            ["spec.tls.rotateCA"]
        );
        let rotate_with_server = TlsSpec {
            server: secret("pg-cert"),
            rotate_ca: Some("2026-11-26".into()),
            ..TlsSpec::default()
        };
        assert!(
            errors(&rotate_with_server).is_empty(),
            "Tusk's CA still issues the internal identities"
        );
    }

    #[test]
    fn a_secret_name_must_be_an_object_name() {
        let spec = TlsSpec {
            server: secret("Not_A_Name"),
            ..TlsSpec::default()
        };
        assert_eq!(
            messages(&spec),
            [
                "spec.tls.server.secretName: \"Not_A_Name\" is not a Secret name (lower-case letters, digits, '-' and '.', at most 253)"
            ]
        );
    }

    #[test]
    fn the_source_follows_the_secret_the_spec_names() {
        let resolved = |spec: TlsSpec| TlsSettings::resolve(&spec).map(|s| s.source);
        assert_eq!(
            resolved(TlsSpec {
                ca: secret("corp-ca"),
                ..TlsSpec::default()
            }),
            Some(TlsSource::CaSecret("corp-ca".into()))
        );
        let server = TlsSource::ServerSecret("pg-cert".into());
        assert_eq!(
            resolved(TlsSpec {
                server: secret("pg-cert"),
                ..TlsSpec::default()
            }),
            Some(server.clone())
        );
        assert!(server.operator_ca());
        assert!(!TlsSource::CaSecret("x".into()).operator_ca());
        assert_eq!(
            server.user_secret(),
            Some(("spec.tls.server.secretName", "pg-cert"))
        );
    }

    #[test]
    fn client_certificates_make_the_app_owner_a_cert_user() {
        let settings = TlsSettings::resolve(&TlsSpec {
            client_certificates: true,
            ..TlsSpec::default()
        })
        .unwrap_or_default();
        assert_eq!(settings.cert_users("clerk"), ["clerk"]);
    }

    #[test]
    fn the_spec_serialises_in_the_api_s_spelling() {
        let spec = TlsSpec {
            allow_plaintext: true,
            min_protocol_version: TlsVersion::Tls12,
            rotate_ca: Some("r1".into()),
            server: secret("pg"),
            ..TlsSpec::default()
        };
        let json = serde_json::to_value(&spec).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "allowPlaintext": true,
                "minProtocolVersion": "TLSv1.2",
                "rotateCA": "r1",
                "server": {"secretName": "pg"},
            })
        );
        assert_eq!(
            serde_json::to_value(TlsSpec::default()).unwrap_or_default(),
            serde_json::json!({})
        );
    }

    /// The rules the schema can say are CEL the API server enforces even
    /// without the webhook.
    #[test]
    fn the_schema_refuses_ca_with_server_and_rotate_ca_with_a_user_ca() {
        let cel = |tls: TlsSpec| {
            let mut db = crate::api::arbitrary::sample_database();
            db.spec.tls = tls;
            match db.validate_cel() {
                Ok(()) => String::new(),
                Err(errors) => format!("{errors:?}"),
            }
        };
        assert_eq!(cel(TlsSpec::default()), "");
        let both = cel(TlsSpec {
            ca: secret("corp-ca"),
            server: secret("pg-cert"),
            ..TlsSpec::default()
        });
        assert!(
            both.contains("spec.tls.ca and spec.tls.server are mutually exclusive"),
            "{both}"
        );
        let rotate = cel(TlsSpec {
            ca: secret("corp-ca"),
            rotate_ca: Some("2026-11-26".into()),
            ..TlsSpec::default()
        });
        assert!(
            rotate.contains("spec.tls.rotateCA rotates Tusk's own CA"),
            "{rotate}"
        );
        assert_eq!(
            cel(TlsSpec {
                server: secret("pg-cert"),
                rotate_ca: Some("2026-11-26".into()),
                ..TlsSpec::default()
            }),
            ""
        );
    }

    /// The webhook and the reconciler run `validate::database`, which
    /// includes these rules: a bad field is refused at admission, named.
    #[test]
    fn validation_of_a_database_includes_spec_tls() {
        let mut db = crate::api::arbitrary::sample_database();
        db.spec.tls.renew_before = Some("8d".into());
        let errors = crate::api::validate::database(&db);
        assert_eq!(
            errors.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
            ["spec.tls.renewBefore"]
        );
        let defaults = crate::api::model::Defaults {
            store: None,
            postgres_repository: "postgres",
            node_ports: Default::default(),
        };
        db.spec.tls.renew_before = Some("2d".into());
        let model =
            crate::api::validate::validated(&db, &defaults).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(model.tls.renew_before, Duration::from_secs(2 * 86_400));
        // The controller issues the application role's certificate.
        db.spec.tls.client_certificates = true;
        assert!(crate::api::validate::database(&db).is_empty());
        let model =
            crate::api::validate::validated(&db, &defaults).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(model.tls.cert_users(&model.initdb.owner), ["app"]);
    }
}
