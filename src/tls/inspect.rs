//! Reading certificates back: what the operator compares (serials,
//! fingerprints, names, validity) and whether one certificate really issued
//! another (its signature verified, not just the names compared).

use std::net::IpAddr;

use jiff::Timestamp;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use super::Error;
use super::pem;

/// One parsed certificate.
#[derive(Clone, PartialEq, Eq)]
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
    /// IP addresses of the subjectAltName extension (a hostname given as an
    /// address is issued as one), in certificate order.
    pub ip_addresses: Vec<IpAddr>,
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
        let (dns_names, ip_addresses) = match cert.subject_alternative_name() {
            Ok(Some(san)) => alt_names(&san.value.general_names),
            Ok(None) => (Vec::new(), Vec::new()),
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
            ip_addresses,
            not_before: timestamp(cert.validity().not_before)?,
            not_after: timestamp(cert.validity().not_after)?,
            is_ca,
            der: der.to_vec(),
        })
    }

    /// Every subjectAltName this certificate covers: the DNS names, then the
    /// IP addresses (as [`IpAddr`] prints them).
    pub fn names(&self) -> Vec<String> {
        self.dns_names
            .iter()
            .cloned()
            .chain(self.ip_addresses.iter().map(IpAddr::to_string))
            .collect()
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

impl std::fmt::Debug for CertInfo {
    /// Everything but the DER bytes (they would drown a log line).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertInfo")
            .field("serial", &self.serial)
            .field("fingerprint", &self.fingerprint)
            .field("common_name", &self.common_name)
            .field("dns_names", &self.dns_names)
            .field("ip_addresses", &self.ip_addresses)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("is_ca", &self.is_ca)
            .finish_non_exhaustive()
    }
}

/// DNS names and IP addresses of a subjectAltName; other kinds are ignored.
fn alt_names(names: &[GeneralName<'_>]) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for name in names {
        match name {
            GeneralName::DNSName(name) => dns.push((*name).to_owned()),
            GeneralName::IPAddress(bytes) => {
                if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                    ips.push(IpAddr::from(v4));
                } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                    ips.push(IpAddr::from(v6));
                }
            }
            _ => {}
        }
    }
    (dns, ips)
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
    let signing =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| Error::BadKey {
            what: "the private key",
            reason: e.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_support::*;

    #[test]
    fn serial_and_fingerprint_read_as_openssl_prints_them_lower_case() {
        let info = CertInfo::parse(USER_CA_CRT).unwrap();
        // DER stores 0x8f01 as 00 8f 01 (sign byte): dropped.
        assert_eq!(info.serial, USER_CA_SERIAL);
        assert_eq!(info.fingerprint, USER_CA_FINGERPRINT);
        assert_eq!(info.common_name.as_deref(), Some("Example Root"));
        assert!(info.is_ca);
        assert!(info.dns_names.is_empty());
        assert_eq!(CertInfo::parse(RSA_CA_CRT).unwrap().serial, "0a");
    }

    #[test]
    fn serial_hex_table() {
        let table: &[(&[u8], &str)] = &[
            (&[0x00, 0x8f, 0x01], "8f01"),
            (&[0x7f, 0x00], "7f00"),
            (&[0x0a], "0a"),
            (&[0x00, 0x00, 0x01], "01"),
            (&[0x00], "00"),
            (&[], "00"),
        ];
        for (raw, hex) in table {
            assert_eq!(serial_hex(raw), *hex, "{raw:?}");
        }
    }

    #[test]
    fn a_bundle_reads_in_order() {
        let ca = ca();
        let bundle = format!("{}{}", ca.cert_pem(), USER_CA_CRT);
        let infos = CertInfo::parse_bundle(&bundle).unwrap();
        assert_eq!(infos.len(), 2);
        assert_eq!(&infos[0], ca.info());
        assert_eq!(infos[1].fingerprint, USER_CA_FINGERPRINT);
        assert!(matches!(
            CertInfo::parse_bundle("nothing"),
            Err(Error::NoCertificate { .. })
        ));
    }

    #[test]
    fn issued_by_verifies_the_signature_not_the_name() {
        let ca = ca();
        // Same subject (common name "test-ca"), another key.
        let twin = crate::tls::test_support::ca();
        assert_eq!(ca.info().common_name, twin.info().common_name);
        let leaf = ca.issue_client("app", days(7), now()).unwrap();
        assert!(leaf.info.issued_by(ca.info()));
        assert!(!leaf.info.issued_by(twin.info()));
        // A leaf never issues, even one it could verify.
        assert!(!leaf.info.issued_by(&leaf.info));
    }

    #[test]
    fn a_key_matches_its_certificate_in_every_pem_form() {
        assert!(key_matches(USER_CA_CRT, USER_CA_KEY));
        assert!(key_matches(USER_CA_CRT, USER_CA_SEC1_KEY));
        assert!(key_matches(RSA_CA_CRT, RSA_PKCS1_KEY));
        assert!(!key_matches(USER_CA_CRT, RSA_PKCS1_KEY));
        assert!(!key_matches(RSA_CA_CRT, USER_CA_KEY));
        let ca = ca();
        assert!(key_matches(ca.cert_pem(), ca.key_pem()));
        assert!(!key_matches(ca.cert_pem(), USER_CA_KEY));
        assert!(!key_matches(ca.cert_pem(), "garbage"));
        assert!(!key_matches("garbage", ca.key_pem()));
    }

    #[test]
    fn validity_is_inclusive() {
        let info = ca().info().clone();
        assert!(info.valid_at(info.not_before));
        assert!(info.valid_at(info.not_after));
        assert!(!info.valid_at(info.not_after + jiff::SignedDuration::from_secs(1)));
    }
}
