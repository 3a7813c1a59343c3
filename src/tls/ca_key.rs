//! A CA's private key as rcgen signs with it, in any PEM form users bring:
//! PKCS#8, SEC1 (`BEGIN EC PRIVATE KEY`) or PKCS#1 (`BEGIN RSA PRIVATE
//! KEY`, cert-manager's default encoding). rcgen on ring reads PKCS#8 only,
//! so signing goes through rustls' ring signer, which reads all three.

use rcgen::{PublicKeyData, SignatureAlgorithm, SigningKey};
use rustls::SignatureScheme;
use rustls::sign::Signer;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use super::Error;
use super::inspect::check_key;
use super::pem;

/// The signature schemes a CA key may sign certificates with, each with the
/// X.509 algorithm it produces (same hash and encoding: ECDSA signatures in
/// ASN.1 DER, RSA PKCS#1 v1.5).
const SCHEMES: [(SignatureScheme, &SignatureAlgorithm); 4] = [
    (
        SignatureScheme::ECDSA_NISTP256_SHA256,
        &rcgen::PKCS_ECDSA_P256_SHA256,
    ),
    (
        SignatureScheme::ECDSA_NISTP384_SHA384,
        &rcgen::PKCS_ECDSA_P384_SHA384,
    ),
    (SignatureScheme::RSA_PKCS1_SHA256, &rcgen::PKCS_RSA_SHA256),
    (SignatureScheme::ED25519, &rcgen::PKCS_ED25519),
];

/// The private key of a CA certificate.
pub(crate) struct CaKey {
    signer: Box<dyn Signer>,
    /// The subjectPublicKey bits of the CA certificate (rcgen's `der_bytes`).
    public_key: Vec<u8>,
    algorithm: &'static SignatureAlgorithm,
}

impl CaKey {
    /// The key of the first certificate of `cert_pem`; an error if it is not.
    pub(crate) fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        check_key("the CA certificate", cert_pem, key_pem)?;
        let key = pem::private_key("the CA key", key_pem)?;
        let signing =
            rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| Error::BadKey {
                what: "the CA key",
                reason: e.to_string(),
            })?;
        let offered: Vec<SignatureScheme> = SCHEMES.iter().map(|(scheme, _)| *scheme).collect();
        let signer = signing.choose_scheme(&offered).ok_or(Error::BadKey {
            what: "the CA key",
            reason: "not an ECDSA P-256/P-384, RSA or Ed25519 key".to_owned(),
        })?;
        let algorithm = SCHEMES
            .iter()
            .find(|(scheme, _)| *scheme == signer.scheme())
            .map(|(_, algorithm)| *algorithm)
            .ok_or(Error::BadKey {
                what: "the CA key",
                reason: format!("unexpected signature scheme {:?}", signer.scheme()),
            })?;
        let certs = pem::certificates("the CA certificate", cert_pem)?;
        let der = certs.first().ok_or(Error::NoCertificate {
            what: "the CA certificate",
        })?;
        let (_, cert) = X509Certificate::from_der(der).map_err(|e| Error::BadCertificate {
            what: "the CA certificate",
            reason: e.to_string(),
        })?;
        Ok(Self {
            signer,
            public_key: cert.public_key().subject_public_key.data.to_vec(),
            algorithm,
        })
    }
}

impl PublicKeyData for CaKey {
    fn der_bytes(&self) -> &[u8] {
        &self.public_key
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.algorithm
    }
}

impl SigningKey for CaKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        self.signer
            .sign(msg)
            .map_err(|_| rcgen::Error::RemoteKeyError)
    }
}
