//! Fixtures shared by the TLS core's tests.

use jiff::{SignedDuration, Timestamp};
use x509_parser::prelude::FromDer;

use super::authority::Authority;
use super::inspect::CertInfo;

/// A CA made by `openssl req -x509` (ECDSA P-256, PKCS#8 key, serial 0x8f01,
/// subject `O=Example Corp, CN=Example Root`, UTF8String), as a user brings.
pub const USER_CA_CRT: &str = include_str!("testdata/user-ca.crt");
pub const USER_CA_KEY: &str = include_str!("testdata/user-ca.key");
/// The same key in SEC1 form (`BEGIN EC PRIVATE KEY`).
pub const USER_CA_SEC1_KEY: &str = include_str!("testdata/user-ca.sec1.key");
/// What `openssl x509 -noout -serial -fingerprint -sha256` printed for it.
pub const USER_CA_SERIAL: &str = "8f01";
pub const USER_CA_FINGERPRINT: &str =
    "ff17f81250d0e511a10dc753de9a5957131921670d2dbe8659edfff40f3f5a36";
/// An RSA CA whose key is PKCS#1 (`BEGIN RSA PRIVATE KEY`), serial 0x0a.
pub const RSA_CA_CRT: &str = include_str!("testdata/rsa-ca.crt");
pub const RSA_PKCS1_KEY: &str = include_str!("testdata/rsa.pkcs1.key");

pub fn now() -> Timestamp {
    at("2026-11-26T05:00:00Z")
}

pub fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

pub fn days(n: i64) -> SignedDuration {
    SignedDuration::from_hours(24 * n)
}

pub fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// A CA valid for a year from [`now`].
pub fn ca() -> Authority {
    Authority::generate("test-ca", days(365), now()).unwrap()
}

/// (serverAuth, clientAuth) of a certificate's extendedKeyUsage.
pub fn ekus(info: &CertInfo) -> (bool, bool) {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(info.der()).unwrap();
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    (eku.server_auth, eku.client_auth)
}

/// The named curve of an EC public key, or None for another key type.
pub fn is_p256(info: &CertInfo) -> bool {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(info.der()).unwrap();
    let spki = cert.public_key();
    spki.algorithm.algorithm == x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
        && spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())
            == Some(x509_parser::oid_registry::OID_EC_P256)
}
