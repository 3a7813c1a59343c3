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
use super::ca_key::CaKey;
use super::inspect::CertInfo;

/// How far before "now" a new certificate starts, so that a peer whose clock
/// is a little behind does not see it as not yet valid. Never earlier than the
/// issuer's own start.
pub const BACKDATE: SignedDuration = SignedDuration::from_mins(5);

/// A CA that can issue leaves.
pub struct Authority {
    cert_pem: String,
    key_pem: String,
    info: CertInfo,
    issuer: Issuer<'static, CaKey>,
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
        // One signing path for generated and loaded CAs.
        let signing_key = CaKey::from_pem(&cert_pem, &key_pem)?;
        Ok(Self {
            cert_pem,
            key_pem,
            info,
            issuer: Issuer::new(params, signing_key),
        })
    }

    /// A CA from its certificate and key (stored by Tusk, or the user's own
    /// CA). The certificate must be a CA and the key its key: ECDSA
    /// P-256/P-384, RSA or Ed25519, in PKCS#8, SEC1 or PKCS#1 PEM. Leaves are
    /// signed with SHA-256 (P-256, RSA) or SHA-384 (P-384).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        let info = CertInfo::parse(cert_pem)?;
        if !info.is_ca {
            return Err(Error::NotCa);
        }
        let key = CaKey::from_pem(cert_pem, key_pem)?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| Error::BadCertificate {
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
    /// (subjectAltName; the common name is the first), EKU serverAuth. A name
    /// that parses as an IP address becomes an IP address entry.
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
        let cert_pem = params
            .signed_by(&key, &self.issuer)
            .map_err(generate)?
            .pem();
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
    time::OffsetDateTime::from_unix_timestamp(at.as_second()).map_err(|_| Error::TimeOutOfRange(at))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::tls::test_support::*;

    #[test]
    fn a_generated_ca_is_a_p256_ca_valid_from_a_little_before_now() {
        let ca = ca();
        let info = ca.info();
        assert!(info.is_ca);
        assert!(is_p256(info));
        assert_eq!(info.common_name.as_deref(), Some("test-ca"));
        assert_eq!(info.not_before, now() - BACKDATE);
        assert_eq!(info.not_after, now() + days(365));
        assert!(info.issued_by(info), "self-signed");
    }

    #[test]
    fn a_server_leaf_names_every_name_with_precise_times() {
        let ca = ca();
        let issued_at = now() + days(30) + SignedDuration::from_secs(4321);
        let names = strings(&["shop-rw", "shop-rw.prod.svc", "shop-1"]);
        let leaf = ca.issue_server(&names, days(7), issued_at).unwrap();
        assert_eq!(leaf.info.dns_names, names);
        assert_eq!(leaf.info.common_name.as_deref(), Some("shop-rw"));
        assert_eq!(leaf.info.not_before, issued_at - BACKDATE);
        assert_eq!(leaf.info.not_after, issued_at + days(7));
        assert_eq!(ekus(&leaf.info), (true, false));
        assert!(!leaf.info.is_ca);
        assert!(is_p256(&leaf.info));
        assert!(leaf.info.issued_by(ca.info()));
        assert!(crate::tls::key_matches(&leaf.cert_pem, &leaf.key_pem));
    }

    #[test]
    fn an_address_among_the_names_becomes_an_ip_entry() {
        let names = strings(&["shop-rw", "10.0.0.9", "db.example.com"]);
        let leaf = ca().issue_server(&names, days(7), now()).unwrap();
        assert_eq!(leaf.info.dns_names, strings(&["shop-rw", "db.example.com"]));
        assert_eq!(
            leaf.info.ip_addresses,
            vec![std::net::IpAddr::from([10, 0, 0, 9])]
        );
        assert_eq!(
            leaf.info.names(),
            strings(&["shop-rw", "db.example.com", "10.0.0.9"])
        );
    }

    #[test]
    fn a_client_leaf_names_the_role_and_authenticates_clients_only() {
        let leaf = ca().issue_client("app", days(7), now()).unwrap();
        assert_eq!(leaf.info.common_name.as_deref(), Some("app"));
        assert!(leaf.info.dns_names.is_empty());
        assert_eq!(ekus(&leaf.info), (false, true));
    }

    #[test]
    fn an_identity_names_the_instance_as_server_and_client() {
        let leaf = ca().issue_identity("shop-1", days(7), now()).unwrap();
        assert_eq!(leaf.info.common_name.as_deref(), Some("shop-1"));
        assert_eq!(leaf.info.dns_names, strings(&["shop-1"]));
        assert_eq!(ekus(&leaf.info), (true, true));
    }

    #[test]
    fn a_server_leaf_needs_a_name() {
        let err = ca().issue_server(&[], days(7), now()).unwrap_err();
        assert!(matches!(err, Error::NoNames(_)), "{err}");
    }

    #[test]
    fn leaves_stay_inside_their_ca() {
        let ca = ca();
        // Issued as the CA is made: the backdate stops at the CA's start.
        let leaf = ca.issue_client("app", days(7), now() - BACKDATE).unwrap();
        assert_eq!(leaf.info.not_before, ca.info().not_before);
        // Issued near the CA's end: the leaf ends with it.
        let late = ca.info().not_after - days(2);
        let leaf = ca.issue_client("app", days(7), late).unwrap();
        assert_eq!(leaf.info.not_after, ca.info().not_after);
    }

    #[test]
    fn an_expired_or_not_yet_valid_ca_issues_nothing() {
        let ca = ca();
        let err = ca
            .issue_client("app", days(7), ca.info().not_after)
            .unwrap_err();
        assert!(matches!(err, Error::CaExpired { .. }), "{err}");
        let err = ca
            .issue_client("app", SignedDuration::from_mins(1), now() - days(1))
            .unwrap_err();
        assert!(matches!(err, Error::EmptyValidity { .. }), "{err}");
    }

    #[test]
    fn serials_are_random_positive_and_sixteen_bytes() {
        let ca = ca();
        let a = ca.issue_client("app", days(7), now()).unwrap().info.serial;
        let b = ca.issue_client("app", days(7), now()).unwrap().info.serial;
        assert_ne!(a, b);
        for serial in [a, b, ca.info().serial.clone()] {
            assert_eq!(serial.len(), 32, "{serial}");
            assert!(serial.as_str() < "80", "{serial} is negative in DER");
        }
    }

    #[test]
    fn a_ca_read_back_from_pem_issues_leaves_its_original_verifies() {
        let ca = ca();
        let again = Authority::from_pem(ca.cert_pem(), ca.key_pem()).unwrap();
        assert_eq!(again.info(), ca.info());
        let leaf = again.issue_identity("shop-1", days(7), now()).unwrap();
        assert!(leaf.info.issued_by(ca.info()));
    }

    #[test]
    fn an_openssl_ca_issues_leaves_chaining_to_it() {
        let ca = Authority::from_pem(USER_CA_CRT, USER_CA_KEY).unwrap();
        assert_eq!(ca.info().serial, USER_CA_SERIAL);
        let leaf = ca.issue_identity("shop-1", days(7), now()).unwrap();
        assert!(leaf.info.issued_by(ca.info()));
    }

    #[test]
    fn a_ca_key_in_sec1_or_pkcs1_form_signs_too() {
        for (cert, key) in [(USER_CA_CRT, USER_CA_SEC1_KEY), (RSA_CA_CRT, RSA_PKCS1_KEY)] {
            let ca = Authority::from_pem(cert, key).unwrap();
            let leaf = ca.issue_identity("shop-1", days(7), now()).unwrap();
            assert!(leaf.info.issued_by(ca.info()), "{cert}");
            // The leaf's own key is still a fresh P-256 key.
            assert!(is_p256(&leaf.info));
        }
    }

    #[test]
    fn from_pem_refuses_a_leaf_or_another_key() {
        let ca = ca();
        let leaf = ca.issue_client("app", days(7), now()).unwrap();
        let err = Authority::from_pem(&leaf.cert_pem, &leaf.key_pem).unwrap_err();
        assert!(matches!(err, Error::NotCa), "{err}");
        let other = super::super::test_support::ca();
        let err = Authority::from_pem(ca.cert_pem(), other.key_pem()).unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { .. }), "{err}");
        let err = Authority::from_pem(ca.cert_pem(), "no key here").unwrap_err();
        assert!(matches!(err, Error::NoKey { .. }), "{err}");
    }

    #[test]
    fn a_key_is_kept_out_of_debug_output() {
        let ca = ca();
        let leaf = ca.issue_client("app", days(7), now()).unwrap();
        assert!(!format!("{ca:?}{leaf:?}").contains("PRIVATE KEY"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whenever and for however long a leaf is issued, it lies inside
        /// its CA's validity and starts no later than the issue time (or the
        /// CA's start, when issued on a clock behind the CA's).
        #[test]
        fn every_leaf_lies_inside_its_issuer(
            ca_minutes in 1i64..(60 * 24 * 30),
            issued_minutes in -(60 * 24 * 2)..(60 * 24 * 40i64),
            lifetime_minutes in 1i64..(60 * 24 * 60),
        ) {
            let ca = Authority::generate("p", SignedDuration::from_mins(ca_minutes), now()).unwrap();
            let issued_at = now() + SignedDuration::from_mins(issued_minutes);
            let lifetime = SignedDuration::from_mins(lifetime_minutes);
            match ca.issue_identity("shop-1", lifetime, issued_at) {
                Ok(leaf) => {
                    prop_assert!(leaf.info.not_before >= ca.info().not_before);
                    prop_assert!(leaf.info.not_after <= ca.info().not_after);
                    prop_assert!(leaf.info.not_before <= issued_at.max(ca.info().not_before));
                    prop_assert!(leaf.info.not_before >= issued_at - BACKDATE);
                    prop_assert!(leaf.info.not_after <= issued_at + lifetime);
                    prop_assert!(leaf.info.issued_by(ca.info()));
                }
                Err(Error::CaExpired { .. }) => prop_assert!(issued_at >= ca.info().not_after),
                Err(Error::EmptyValidity { .. }) => {
                    prop_assert!(issued_at + lifetime <= ca.info().not_before)
                }
                Err(e) => prop_assert!(false, "{e}"),
            }
        }
    }
}
