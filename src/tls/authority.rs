//! A certificate authority (a CA certificate and its key) and the leaves it
//! issues: PostgreSQL server certificates, client certificates for roles, and
//! instance identities for the instance API.
//!
//! Leaves get precise validity times (seconds, not whole days) because they
//! live days, not years, and every leaf stays inside its issuer's validity: a
//! verifier may reject a leaf that starts before its CA, and one outliving its
//! CA would be renewed too late.

use jiff::{SignedDuration, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};

use super::Error;
use super::inspect::{CertInfo, check_key};

/// How far before "now" a new certificate starts, so that a peer whose clock
/// is a little behind does not see it as not yet valid. Never earlier than the
/// issuer's own start.
pub const BACKDATE: SignedDuration = SignedDuration::from_mins(5);

/// A CA that can issue leaves.
pub struct Authority {
    cert_pem: String,
    key_pem: String,
    info: CertInfo,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    /// The key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// A certificate and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    /// The certificate as parsed back (serial, fingerprint, validity).
    pub info: CertInfo,
}

impl std::fmt::Debug for Leaf {
    /// The key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// A new self-signed CA with an ECDSA P-256 key, valid from
    /// `now - BACKDATE` to `now + lifetime`.
    pub fn generate(
        common_name: &str,
        lifetime: SignedDuration,
        now: Timestamp,
    ) -> Result<Self, Error> {
        let generate = |source| Error::Generate {
            what: "a CA",
            source,
        };
        let key = KeyPair::generate().map_err(generate)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name_only(common_name);
        // Path length 0: the CA signs leaves only, never another CA.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.serial_number = Some(random_serial());
        params.not_before = asn1_time(now - BACKDATE)?;
        params.not_after = asn1_time(now + lifetime)?;
        let cert_pem = params.self_signed(&key).map_err(generate)?.pem();
        let key_pem = key.serialize_pem();
        let info = CertInfo::parse(&cert_pem)?;
        Ok(Self {
            cert_pem,
            key_pem,
            info,
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from its certificate and key (stored by Tusk, or the user's own
    /// CA). The certificate must be a CA and the key its key. The key must be
    /// PKCS#8 (`BEGIN PRIVATE KEY`): ECDSA P-256/P-384, Ed25519 or RSA.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        let info = CertInfo::parse(cert_pem)?;
        if !info.is_ca {
            return Err(Error::NotCa);
        }
        check_key("the CA certificate", cert_pem, key_pem)?;
        let key = KeyPair::from_pem(key_pem).map_err(|e| Error::BadKey {
            what: "the CA key",
            reason: format!("{e} (a PKCS#8 key, BEGIN PRIVATE KEY, is needed)"),
        })?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| Error::BadCertificate {
            what: "the CA certificate",
            reason: e.to_string(),
        })?;
        Ok(Self {
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
            info,
            issuer,
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    pub fn info(&self) -> &CertInfo {
        &self.info
    }

    /// A PostgreSQL server certificate naming every one of `dns_names`
    /// (subjectAltName; the common name is the first), EKU serverAuth.
    pub fn issue_server(
        &self,
        dns_names: &[String],
        lifetime: SignedDuration,
        now: Timestamp,
    ) -> Result<Leaf, Error> {
        let first = dns_names
            .first()
            .ok_or_else(|| Error::NoNames("a server".to_owned()))?;
        self.issue(
            first,
            dns_names.to_vec(),
            vec![ExtendedKeyUsagePurpose::ServerAuth],
            lifetime,
            now,
        )
    }

    /// A client certificate whose common name is a PostgreSQL role (`cert`
    /// authentication maps the common name to the role), EKU clientAuth.
    pub fn issue_client(
        &self,
        common_name: &str,
        lifetime: SignedDuration,
        now: Timestamp,
    ) -> Result<Leaf, Error> {
        self.issue(
            common_name,
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
            lifetime,
            now,
        )
    }

    /// An instance's identity on the instance API, as server and as client of
    /// its peers: common name and DNS name = the instance name.
    pub fn issue_identity(
        &self,
        instance: &str,
        lifetime: SignedDuration,
        now: Timestamp,
    ) -> Result<Leaf, Error> {
        self.issue(
            instance,
            vec![instance.to_owned()],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            lifetime,
            now,
        )
    }

    /// The validity of a leaf issued at `now`: backdated a little, never
    /// outside the CA's own validity.
    pub fn leaf_validity(
        &self,
        lifetime: SignedDuration,
        now: Timestamp,
    ) -> Result<(Timestamp, Timestamp), Error> {
        if now >= self.info.not_after {
            return Err(Error::CaExpired {
                not_after: self.info.not_after,
                now,
            });
        }
        let not_before = (now - BACKDATE).max(self.info.not_before);
        let not_after = (now + lifetime).min(self.info.not_after);
        if not_after <= not_before {
            return Err(Error::EmptyValidity {
                not_before,
                not_after,
            });
        }
        Ok((not_before, not_after))
    }

    fn issue(
        &self,
        common_name: &str,
        dns_names: Vec<String>,
        usages: Vec<ExtendedKeyUsagePurpose>,
        lifetime: SignedDuration,
        now: Timestamp,
    ) -> Result<Leaf, Error> {
        let generate = |source| Error::Generate {
            what: "a certificate",
            source,
        };
        let (not_before, not_after) = self.leaf_validity(lifetime, now)?;
        let key = KeyPair::generate().map_err(generate)?;
        let mut params = CertificateParams::new(dns_names).map_err(generate)?;
        params.distinguished_name = common_name_only(common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages;
        params.serial_number = Some(random_serial());
        params.use_authority_key_identifier_extension = true;
        params.not_before = asn1_time(not_before)?;
        params.not_after = asn1_time(not_after)?;
        let cert_pem = params.signed_by(&key, &self.issuer).map_err(generate)?.pem();
        let info = CertInfo::parse(&cert_pem)?;
        Ok(Leaf {
            cert_pem,
            key_pem: key.serialize_pem(),
            info,
        })
    }
}

fn common_name_only(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

/// 127 random bits, positive and without a leading zero byte, so the serial
/// reads the same everywhere (RFC 5280: at most 20 bytes, positive).
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f).max(1);
    SerialNumber::from_slice(&bytes)
}

/// X.509 times are whole seconds.
fn asn1_time(at: Timestamp) -> Result<time::OffsetDateTime, Error> {
    time::OffsetDateTime::from_unix_timestamp(at.as_second())
        .map_err(|_| Error::TimeOutOfRange(at))
}
