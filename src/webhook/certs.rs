//! Self-managed webhook certificates: a long-lived CA and a short-lived serving
//! certificate, kept in one Secret. Rotation reissues the serving certificate
//! under the same CA (its key is in the Secret), so the `caBundle` the API server
//! trusts does not change and no request fails during a rotation.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp, tz::TimeZone};
use kube::core::ObjectMeta;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// Annotation on the Secret: when the serving certificate expires (RFC 3339).
pub const NOT_AFTER_ANNOTATION: &str = "tusk.dev/serving-not-after";
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

const CA_VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 365 * 10);
/// Serving certificates live 90 days and are reissued when fewer than 30 remain.
pub const SERVING_VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 90);
pub const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(24 * 30);

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the certificate Secret lacks {0}")]
    Missing(&'static str),
    #[error("the certificate Secret's {0} is not UTF-8 PEM")]
    NotPem(&'static str),
}

/// PEM material for the webhook server and the API server's `caBundle`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertBundle {
    pub ca_cert: String,
    pub ca_key: String,
    pub tls_cert: String,
    pub tls_key: String,
    pub not_after: Timestamp,
}

/// `at` as rcgen wants it; rcgen dates are whole days (UTC).
fn rcgen_time(at: Timestamp) -> time::OffsetDateTime {
    let date = at.to_zoned(TimeZone::UTC).date();
    // jiff guarantees month in 1..=12 and day in 1..=31.
    rcgen::date_time_ymd(
        i32::from(date.year()),
        date.month().unsigned_abs(),
        date.day().unsigned_abs(),
    )
}

/// The CA's parameters are deterministic so that, with its stored key, the same
/// issuer can be rebuilt to sign a new serving certificate.
fn ca_params(not_before: Timestamp) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "tusk-webhook-ca");
    name.push(DnType::OrganizationName, "tusk.dev");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen_time(not_before - SignedDuration::from_hours(24));
    params.not_after = rcgen_time(not_before + CA_VALIDITY);
    Ok(params)
}

/// DNS names under which the API server reaches the webhook Service.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

fn serving(
    names: Vec<String>,
    issuer: &Issuer<'_, KeyPair>,
    now: Timestamp,
) -> Result<(String, String, Timestamp), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.clone())?;
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.distinguished_name = name;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    // rcgen dates are whole days: start a day early so clock skew cannot make it "not yet valid".
    params.not_before = rcgen_time(now - SignedDuration::from_hours(24));
    let not_after = now + SERVING_VALIDITY;
    params.not_after = rcgen_time(not_after);
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// A new CA and serving certificate for `service.namespace`.
pub fn generate(service: &str, namespace: &str, now: Timestamp) -> Result<CertBundle, CertError> {
    let ca_key = KeyPair::generate()?;
    let params = ca_params(now)?;
    let ca_cert = params.self_signed(&ca_key)?.pem();
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(params, ca_key);
    let (tls_cert, tls_key, not_after) = serving(service_names(service, namespace), &issuer, now)?;
    Ok(CertBundle {
        ca_cert,
        ca_key: ca_key_pem,
        tls_cert,
        tls_key,
        not_after,
    })
}

/// Reissues the serving certificate under the existing CA.
pub fn renew(
    bundle: &CertBundle,
    service: &str,
    namespace: &str,
    now: Timestamp,
) -> Result<CertBundle, CertError> {
    let ca_key = KeyPair::from_pem(&bundle.ca_key)?;
    // The subject and key match the stored CA; validity fields do not enter the chain check.
    let issuer = Issuer::new(ca_params(now)?, ca_key);
    let (tls_cert, tls_key, not_after) = serving(service_names(service, namespace), &issuer, now)?;
    Ok(CertBundle {
        tls_cert,
        tls_key,
        not_after,
        ..bundle.clone()
    })
}

/// Whether the serving certificate must be reissued now.
pub fn needs_renewal(bundle: &CertBundle, now: Timestamp) -> bool {
    bundle.not_after - RENEW_BEFORE <= now
}

/// The Secret holding `bundle`.
pub fn to_secret(bundle: &CertBundle, name: &str, namespace: &str) -> Secret {
    let data = BTreeMap::from([
        (
            CA_CERT.to_owned(),
            ByteString(bundle.ca_cert.clone().into_bytes()),
        ),
        (
            CA_KEY.to_owned(),
            ByteString(bundle.ca_key.clone().into_bytes()),
        ),
        (
            TLS_CERT.to_owned(),
            ByteString(bundle.tls_cert.clone().into_bytes()),
        ),
        (
            TLS_KEY.to_owned(),
            ByteString(bundle.tls_key.clone().into_bytes()),
        ),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            annotations: Some(BTreeMap::from([(
                NOT_AFTER_ANNOTATION.to_owned(),
                bundle.not_after.to_string(),
            )])),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/name".to_owned(), "tusk".to_owned()),
                (
                    "app.kubernetes.io/component".to_owned(),
                    "webhook".to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Reads a bundle back; an unreadable expiry counts as expired, so it gets renewed.
pub fn from_secret(secret: &Secret) -> Result<CertBundle, CertError> {
    let data = secret.data.as_ref().ok_or(CertError::Missing("data"))?;
    let field = |key: &'static str| -> Result<String, CertError> {
        let bytes = data.get(key).ok_or(CertError::Missing(key))?;
        String::from_utf8(bytes.0.clone()).map_err(|_| CertError::NotPem(key))
    };
    let not_after = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NOT_AFTER_ANNOTATION))
        .and_then(|t| t.parse::<Timestamp>().ok())
        .unwrap_or(Timestamp::UNIX_EPOCH);
    Ok(CertBundle {
        ca_cert: field(CA_CERT)?,
        ca_key: field(CA_KEY)?,
        tls_cert: field(TLS_CERT)?,
        tls_key: field(TLS_KEY)?,
        not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-22T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_bundle_round_trips_through_its_secret() {
        let bundle = generate("tusk-webhook", "tusk-system", now()).unwrap();
        assert!(bundle.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(from_secret(&to_secret(&bundle, "s", "ns")).unwrap(), bundle);
    }

    #[test]
    fn renewal_is_due_thirty_days_before_expiry() {
        let bundle = generate("tusk-webhook", "tusk-system", now()).unwrap();
        assert!(!needs_renewal(&bundle, now()));
        assert!(!needs_renewal(
            &bundle,
            now() + SignedDuration::from_hours(24 * 59)
        ));
        assert!(needs_renewal(
            &bundle,
            now() + SignedDuration::from_hours(24 * 60)
        ));
    }

    #[test]
    fn renewing_keeps_the_ca_and_replaces_the_serving_pair() {
        let bundle = generate("tusk-webhook", "tusk-system", now()).unwrap();
        let later = now() + SignedDuration::from_hours(24 * 70);
        let renewed = renew(&bundle, "tusk-webhook", "tusk-system", later).unwrap();
        assert_eq!(renewed.ca_cert, bundle.ca_cert);
        assert_ne!(renewed.tls_cert, bundle.tls_cert);
        assert_ne!(renewed.tls_key, bundle.tls_key);
        assert_eq!(renewed.not_after, later + SERVING_VALIDITY);
    }

    #[test]
    fn a_secret_without_expiry_is_due() {
        let bundle = generate("tusk-webhook", "tusk-system", now()).unwrap();
        let mut secret = to_secret(&bundle, "s", "ns");
        secret.metadata.annotations = None;
        assert!(needs_renewal(&from_secret(&secret).unwrap(), now()));
    }
}
