//! rustls configurations for the instance API and connections to PostgreSQL,
//! built from PEM strings (no files, no process-wide crypto provider: ring is
//! passed explicitly so tests and binaries behave alike).
//!
//! Callers dial pod IPs, so a client checks that the server's certificate
//! names the instance it meant (`expected_name`), whatever address it dialled:
//! verifying against the address would fail (the certificates carry DNS names
//! only) and skipping the name check would let any instance holding a
//! certificate from the same CA impersonate another.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use super::inspect::{CertInfo, check_key};
use super::{Error, pem};

/// The crypto provider of every configuration built here.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client that trusts the CAs of `trust_bundle_pem` only, accepts a server
/// only if its certificate names `expected_name` (a DNS name, usually the
/// instance name), and presents `identity` (certificate and key PEM) when the
/// server asks for one.
pub fn client_config(
    trust_bundle_pem: &str,
    identity: Option<(&str, &str)>,
    expected_name: &str,
) -> Result<Arc<ClientConfig>, Error> {
    Ok(Arc::new(client(trust_bundle_pem, identity, expected_name)?))
}

/// [`client_config`] before it is shared, for callers that set ALPN.
pub(crate) fn client(
    trust_bundle_pem: &str,
    identity: Option<(&str, &str)>,
    expected_name: &str,
) -> Result<ClientConfig, Error> {
    let provider = provider();
    let roots = Arc::new(roots("the trust bundle", trust_bundle_pem)?);
    let name = ServerName::try_from(expected_name.to_owned())
        .map_err(|_| Error::ServerName(expected_name.to_owned()))?;
    let inner = WebPkiServerVerifier::builder_with_provider(roots, provider.clone()).build()?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| Error::Rustls {
            what: "the client protocol versions",
            source,
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NamedServerVerifier { inner, name }));
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert_pem, key_pem)) => {
            check_key("the client certificate", cert_pem, key_pem)?;
            let certs = pem::certificates("the client certificate", cert_pem)?;
            let key = pem::private_key("the client key", key_pem)?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|source| Error::Rustls {
                    what: "the client certificate",
                    source,
                })?
        }
    };
    // A config is pinned to one server, dialled at one address or a few over
    // its life; rustls' default session cache is sized for 256 servers and
    // allocated up front, which is about half of a config's memory, and the
    // operator holds a config for every instance it polls.
    config.resumption = Resumption::in_memory_sessions(SESSIONS_PER_CONFIG);
    Ok(config)
}

/// Servers whose sessions a client config keeps for resumption.
const SESSIONS_PER_CONFIG: usize = 4;

/// A server presenting `cert_pem` (its chain, leaf first) with `key_pem`.
/// With `client_ca_bundle`, client certificates are verified against it but
/// remain optional at the TLS layer (kubelet probes present none): the
/// application decides per request what an unauthenticated peer may do (see
/// [`peer_common_name`]). `alpn` lists the protocols offered, most preferred
/// first (empty: no ALPN).
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_bundle: Option<&str>,
    alpn: &[&[u8]],
) -> Result<Arc<ServerConfig>, Error> {
    check_key("the server certificate", cert_pem, key_pem)?;
    let certs = pem::certificates("the server certificate", cert_pem)?;
    let key = pem::private_key("the server key", key_pem)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|source| Error::Rustls {
            what: "the server protocol versions",
            source,
        })?;
    let builder = match client_ca_bundle {
        None => builder.with_no_client_auth(),
        Some(bundle) => {
            let roots = Arc::new(roots("the client CA bundle", bundle)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .allow_unauthenticated()
                .build()?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|source| Error::Rustls {
            what: "the server certificate",
            source,
        })?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The common name of a peer's leaf certificate (the first of the chain), as
/// rustls hands it over after verification (`peer_certificates()`).
pub fn peer_common_name(chain: &[CertificateDer<'_>]) -> Option<String> {
    CertInfo::from_der(chain.first()?).ok()?.common_name
}

fn roots(what: &'static str, bundle_pem: &str) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for cert in pem::certificates(what, bundle_pem)? {
        roots
            .add(cert)
            .map_err(|source| Error::Rustls { what, source })?;
    }
    Ok(roots)
}

/// WebPKI verification against a fixed name instead of the dialled one.
#[derive(Debug)]
struct NamedServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for NamedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _dialled: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    use super::*;
    use crate::tls::authority::{Authority, Leaf};
    use crate::tls::test_support::*;

    struct Accepted {
        peer_common_name: Option<String>,
        alpn: Option<Vec<u8>>,
    }

    /// One exchange over an in-memory pipe: the client dials `dialled`.
    async fn exchange(
        client: Arc<ClientConfig>,
        dialled: &str,
        server: Arc<ServerConfig>,
    ) -> (io::Result<()>, io::Result<Accepted>) {
        let (near, far) = tokio::io::duplex(64 * 1024);
        let dialled = ServerName::try_from(dialled.to_owned()).unwrap();
        let client = async move {
            let mut tls = TlsConnector::from(client).connect(dialled, near).await?;
            tls.write_all(b"?").await?;
            tls.flush().await?;
            let mut answer = [0u8; 1];
            tls.read_exact(&mut answer).await?;
            Ok(())
        };
        let server = async move {
            let mut tls = TlsAcceptor::from(server).accept(far).await?;
            let mut question = [0u8; 1];
            tls.read_exact(&mut question).await?;
            tls.write_all(b"!").await?;
            tls.flush().await?;
            let connection = tls.get_ref().1;
            Ok(Accepted {
                peer_common_name: peer_common_name(connection.peer_certificates().unwrap_or(&[])),
                alpn: connection.alpn_protocol().map(<[u8]>::to_vec),
            })
        };
        tokio::join!(client, server)
    }

    fn api_server(ca: &Authority, instance: &str) -> Arc<ServerConfig> {
        let leaf = ca.issue_identity(instance, days(7), now()).unwrap();
        server_config(&leaf.cert_pem, &leaf.key_pem, Some(ca.cert_pem()), &[]).unwrap()
    }

    fn identity(leaf: &Leaf) -> Option<(&str, &str)> {
        Some((leaf.cert_pem.as_str(), leaf.key_pem.as_str()))
    }

    #[tokio::test]
    async fn a_client_accepts_the_instance_it_meant_whatever_address_it_dialled() {
        let ca = ca();
        let client = client_config(ca.cert_pem(), None, "shop-1").unwrap();
        let (dialled, accepted) = exchange(client, "10.0.0.7", api_server(&ca, "shop-1")).await;
        dialled.unwrap();
        assert_eq!(accepted.unwrap().peer_common_name, None);
    }

    #[tokio::test]
    async fn a_client_refuses_another_instance_even_when_it_dialled_that_name() {
        let ca = ca();
        let client = client_config(ca.cert_pem(), None, "shop-1").unwrap();
        let (dialled, _) = exchange(client.clone(), "10.0.0.7", api_server(&ca, "shop-2")).await;
        let err = dialled.unwrap_err();
        assert!(
            err.to_string().contains(r#"not valid for name "shop-1""#),
            "{err}"
        );
        let (dialled, _) = exchange(client, "shop-2", api_server(&ca, "shop-2")).await;
        assert!(dialled.is_err());
    }

    #[tokio::test]
    async fn a_client_refuses_a_certificate_from_a_ca_it_does_not_trust() {
        let ca = ca();
        let other = crate::tls::test_support::ca();
        let client = client_config(other.cert_pem(), None, "shop-1").unwrap();
        let (dialled, _) = exchange(client, "10.0.0.7", api_server(&ca, "shop-1")).await;
        let err = dialled.unwrap_err();
        // Same subject as the trusted CA, another key.
        assert!(err.to_string().contains("BadSignature"), "{err}");
    }

    #[tokio::test]
    async fn during_a_rotation_a_bundle_of_both_cas_accepts_either() {
        let old = ca();
        let new = crate::tls::test_support::ca();
        let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
        for issuer in [&old, &new] {
            let client = client_config(&bundle, None, "shop-1").unwrap();
            let (dialled, _) = exchange(client, "10.0.0.7", api_server(issuer, "shop-1")).await;
            dialled.unwrap();
        }
    }

    #[tokio::test]
    async fn a_client_certificate_is_optional_but_verified_when_presented() {
        let ca = ca();
        let operator = ca.issue_client("tusk-operator", days(7), now()).unwrap();
        let client = client_config(ca.cert_pem(), identity(&operator), "shop-1").unwrap();
        let (dialled, accepted) = exchange(client, "10.0.0.7", api_server(&ca, "shop-1")).await;
        dialled.unwrap();
        assert_eq!(
            accepted.unwrap().peer_common_name.as_deref(),
            Some("tusk-operator")
        );

        let stranger = crate::tls::test_support::ca()
            .issue_client("tusk-operator", days(7), now())
            .unwrap();
        let client = client_config(ca.cert_pem(), identity(&stranger), "shop-1").unwrap();
        let (_, accepted) = exchange(client, "10.0.0.7", api_server(&ca, "shop-1")).await;
        let err = accepted.err().unwrap();
        // Same subject as the trusted CA, another key.
        assert!(err.to_string().contains("BadSignature"), "{err}");
    }

    #[tokio::test]
    async fn a_server_without_a_client_ca_asks_for_no_certificate() {
        let ca = ca();
        let leaf = ca.issue_identity("shop-1", days(7), now()).unwrap();
        let server = server_config(&leaf.cert_pem, &leaf.key_pem, None, &[]).unwrap();
        let operator = ca.issue_client("tusk-operator", days(7), now()).unwrap();
        let client = client_config(ca.cert_pem(), identity(&operator), "shop-1").unwrap();
        let (dialled, accepted) = exchange(client, "10.0.0.7", server).await;
        dialled.unwrap();
        assert_eq!(accepted.unwrap().peer_common_name, None);
    }

    #[tokio::test]
    async fn the_server_offers_its_alpn_protocols() {
        let ca = ca();
        let leaf = ca.issue_identity("shop-1", days(7), now()).unwrap();
        let server = server_config(&leaf.cert_pem, &leaf.key_pem, None, &[b"postgresql"]).unwrap();
        let mut client = client(ca.cert_pem(), None, "shop-1").unwrap();
        client.alpn_protocols = vec![b"postgresql".to_vec()];
        let (dialled, accepted) = exchange(Arc::new(client), "10.0.0.7", server).await;
        dialled.unwrap();
        assert_eq!(accepted.unwrap().alpn.as_deref(), Some(&b"postgresql"[..]));
    }

    #[test]
    fn bad_material_is_named() {
        let ca = ca();
        let leaf = ca.issue_identity("shop-1", days(7), now()).unwrap();
        let err = server_config(&leaf.cert_pem, ca.key_pem(), None, &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the private key does not match the server certificate"
        );
        let err = client_config("", None, "shop-1").unwrap_err();
        assert_eq!(err.to_string(), "the trust bundle holds no PEM certificate");
        let err = client_config(ca.cert_pem(), None, "not a name!").unwrap_err();
        assert!(matches!(err, Error::ServerName(_)), "{err}");
        let err =
            client_config(ca.cert_pem(), Some((&leaf.cert_pem, ca.key_pem())), "x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the private key does not match the client certificate"
        );
    }

    #[test]
    fn the_peer_common_name_is_the_leafs() {
        let ca = ca();
        let leaf = ca.issue_identity("shop-1", days(7), now()).unwrap();
        let chain = vec![
            CertificateDer::from(leaf.info.der().to_vec()),
            CertificateDer::from(ca.info().der().to_vec()),
        ];
        assert_eq!(peer_common_name(&chain).as_deref(), Some("shop-1"));
        assert_eq!(peer_common_name(&[]), None);
        assert_eq!(peer_common_name(&[CertificateDer::from(vec![1, 2])]), None);
    }
}
