//! What the manager reads from PEM itself: the certificates of a file as
//! DER, their SHA-256 fingerprints and serial numbers, for the `/status`
//! report and the connections the manager makes.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha256};

/// Every certificate in `pem`, in order; an error names what did not parse.
pub fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("not PEM certificates: {error}"))?;
    if certificates.is_empty() {
        return Err("holds no certificate".to_owned());
    }
    Ok(certificates)
}

/// SHA-256 of the DER of a certificate, lower-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    hex(&Sha256::digest(der))
}

/// The fingerprints of every certificate in a bundle.
pub fn fingerprints(pem: &str) -> Result<Vec<String>, String> {
    Ok(certificates(pem)?
        .iter()
        .map(|der| fingerprint(der))
        .collect())
}

/// The serial number of the first certificate in `pem`, lower-case hex
/// without separators or the sign byte DER adds to a serial whose top bit
/// is set.
pub fn serial(pem: &str) -> Result<String, String> {
    let certificates = certificates(pem)?;
    let first = certificates.first().ok_or("holds no certificate")?;
    let serial = der_serial(first).ok_or("is not an X.509 certificate")?;
    let trimmed = match serial {
        [0, rest @ ..] if !rest.is_empty() => rest,
        all => all,
    };
    Ok(hex(trimmed))
}

/// `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version
/// OPTIONAL, serialNumber INTEGER, ... } ... }`: the serial's content bytes.
fn der_serial(der: &[u8]) -> Option<&[u8]> {
    let (tag, certificate, _) = der_element(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, tbs, _) = der_element(certificate)?;
    if tag != 0x30 {
        return None;
    }
    let (mut tag, mut content, mut rest) = der_element(tbs)?;
    if tag == 0xa0 {
        (tag, content, rest) = der_element(rest)?;
    }
    let _ = rest;
    (tag == 0x02).then_some(content)
}

/// One DER element: its tag, content and what follows it.
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, der) = der.split_first()?;
    let (&first, der) = der.split_first()?;
    let (length, der) = if first < 0x80 {
        (usize::from(first), der)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > std::mem::size_of::<usize>() || der.len() < count {
            return None;
        }
        let (bytes, der) = der.split_at(count);
        let length = bytes
            .iter()
            .fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
        (length, der)
    };
    if der.len() < length {
        return None;
    }
    let (content, rest) = der.split_at(length);
    Some((tag, content, rest))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(serial: &[u8]) -> String {
        let mut params =
            rcgen::CertificateParams::new(vec!["orders-1".to_owned()]).expect("params");
        params.serial_number = Some(rcgen::SerialNumber::from_slice(serial));
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("sign").pem()
    }

    #[test]
    fn the_serial_is_read_as_hex_without_the_sign_byte() {
        assert_eq!(serial(&certificate(&[0x01, 0x2a])).expect("serial"), "012a");
        assert_eq!(
            serial(&certificate(&[0x9f, 0x00, 0xff])).expect("serial"),
            "9f00ff"
        );
    }

    #[test]
    fn fingerprints_cover_every_certificate_of_a_bundle() {
        let bundle = format!("{}{}", certificate(&[1]), certificate(&[2]));
        let prints = fingerprints(&bundle).expect("fingerprints");
        assert_eq!(prints.len(), 2);
        assert_ne!(prints[0], prints[1]);
        assert_eq!(prints[0].len(), 64);
        assert!(fingerprints("not pem").is_err());
        assert!(serial("").is_err());
    }
}
