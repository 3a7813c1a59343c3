//! Reading certificates back: what the operator compares (serials,
//! fingerprints, names, validity) and whether one certificate really issued
//! another (its signature verified, not just the names compared).

use jiff::Timestamp;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use super::Error;
use super::pem;

/// One parsed certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// The serial number in lower-case hex without separators, as
    /// `openssl x509 -serial` prints it but lower-case: two digits a byte,
    /// leading zero bytes (DER's sign byte) dropped, at least one byte (`00`).
    pub serial: String,
    /// SHA-256 of the DER encoding, lower-case hex (`openssl x509 -fingerprint
    /// -sha256` without colons, lower-case).
    pub fingerprint: String,
    /// The subject's first common name.
    pub common_name: Option<String>,
    /// DNS names of the subjectAltName extension, in certificate order.
    pub dns_names: Vec<String>,
    pub not_before: Timestamp,
    pub not_after: Timestamp,
    /// basicConstraints CA:TRUE.
    pub is_ca: bool,
    der: Vec<u8>,
}

impl CertInfo {
    /// The first certificate of `pem`.
    pub fn parse(pem: &str) -> Result<Self, Error> {
        let certs = pem::certificates("the certificate", pem)?;
        // `certificates` never returns an empty list.
        let first = certs.first().ok_or(Error::NoCertificate {
            what: "the certificate",
        })?;
        Self::from_der(first)
    }

    /// Every certificate of a PEM bundle, in order.
    pub fn parse_bundle(pem: &str) -> Result<Vec<Self>, Error> {
        pem::certificates("the bundle", pem)?
            .iter()
            .map(Self::from_der)
            .collect()
    }

    /// One DER certificate (as a TLS peer presents it).
    pub fn from_der(der: &CertificateDer<'_>) -> Result<Self, Error> {
        let cert = parse_der(der)?;
        let dns_names = match cert.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    _ => None,
                })
                .collect(),
            Ok(None) => Vec::new(),
            Err(e) => return Err(bad(e)),
        };
        let is_ca = match cert.basic_constraints() {
            Ok(bc) => bc.is_some_and(|bc| bc.value.ca),
            Err(e) => return Err(bad(e)),
        };
        Ok(Self {
            serial: serial_hex(cert.raw_serial()),
            fingerprint: pem::hex(&Sha256::digest(der.as_ref())),
            common_name: cert
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .map(str::to_owned),
            dns_names,
            not_before: timestamp(cert.validity().not_before)?,
            not_after: timestamp(cert.validity().not_after)?,
            is_ca,
            der: der.to_vec(),
        })
    }

    /// The DER encoding.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// Whether `issuer`, a CA, signed this certificate: its subject is this
    /// certificate's issuer and its public key verifies the signature. Names
    /// alone prove nothing: two CAs generated with the same common name have
    /// equal subjects.
    pub fn issued_by(&self, issuer: &CertInfo) -> bool {
        let (Ok(cert), Ok(ca)) = (parse_der(&self.der), parse_der(&issuer.der)) else {
            return false;
        };
        issuer.is_ca
            && cert.issuer().as_raw() == ca.subject().as_raw()
            && cert.verify_signature(Some(ca.public_key())).is_ok()
    }

    /// Whether the certificate is valid at `now`.
    pub fn valid_at(&self, now: Timestamp) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// Whether `key_pem` is the private key of the first certificate in
/// `cert_pem`. Unreadable input does not match.
pub fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    check_key("the certificate", cert_pem, key_pem).is_ok()
}

/// Like [`key_matches`], saying what was wrong.
pub(crate) fn check_key(what: &'static str, cert_pem: &str, key_pem: &str) -> Result<(), Error> {
    let certs = pem::certificates(what, cert_pem)?;
    let first = certs.first().ok_or(Error::NoCertificate { what })?;
    let cert = parse_der(first)?;
    let key = pem::private_key("the private key", key_pem)?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| {
        Error::BadKey {
            what: "the private key",
            reason: e.to_string(),
        }
    })?;
    let public = signing.public_key().ok_or(Error::BadKey {
        what: "the private key",
        reason: "its public key cannot be derived".to_owned(),
    })?;
    if public.as_ref() == cert.public_key().raw {
        Ok(())
    } else {
        Err(Error::KeyMismatch { what })
    }
}

fn parse_der<'a>(der: &'a [u8]) -> Result<X509Certificate<'a>, Error> {
    let (_, cert) = X509Certificate::from_der(der).map_err(bad)?;
    Ok(cert)
}

fn bad(e: impl std::fmt::Display) -> Error {
    Error::BadCertificate {
        what: "the certificate",
        reason: e.to_string(),
    }
}

fn timestamp(at: x509_parser::time::ASN1Time) -> Result<Timestamp, Error> {
    Timestamp::from_second(at.timestamp()).map_err(bad)
}

/// DER integers carry a leading zero byte when the top bit is set; the
/// number is the same without it.
fn serial_hex(raw: &[u8]) -> String {
    let start = raw.iter().position(|b| *b != 0).unwrap_or(raw.len());
    match &raw[start..] {
        [] => "00".to_owned(),
        digits => pem::hex(digits),
    }
}

