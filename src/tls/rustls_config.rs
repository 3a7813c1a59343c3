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

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
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
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert_pem, key_pem)) => {
            check_key("the client certificate", cert_pem, key_pem)?;
            let certs = pem::certificates("the client certificate", cert_pem)?;
            let key = pem::private_key("the client key", key_pem)?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|source| Error::Rustls {
                    what: "the client certificate",
                    source,
                })
        }
    }
}

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
