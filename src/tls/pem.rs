//! PEM to DER, with errors that say which input was wrong.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::Error;

/// Every certificate in `pem` (a bundle); at least one.
pub(crate) fn certificates(
    what: &'static str,
    pem: &str,
) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::BadCertificate {
            what,
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(Error::NoCertificate { what });
    }
    Ok(certs)
}

/// The first private key in `pem`: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
pub(crate) fn private_key(what: &'static str, pem: &str) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => Error::NoKey { what },
        other => Error::BadKey {
            what,
            reason: other.to_string(),
        },
    })
}

/// Lower-case hex, two digits a byte.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, b| {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
        out
    })
}
