//! INTERIM (issue #27): stand-ins with the signatures the `certs` branch
//! provides in `crate::tls::rustls_config`, so the instance API can be built
//! and tested before that branch lands. When `certs` is merged, this file is
//! deleted and its users import `crate::tls::rustls_config` instead.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// Why TLS material could not be turned into a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{what}: {source}")]
    Pem {
        what: &'static str,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{what}: no certificate in the PEM")]
    Empty { what: &'static str },
    #[error("{what}: {source}")]
    Rustls {
        what: &'static str,
        #[source]
        source: rustls::Error,
    },
    #[error("the expected server name {0:?} is not a DNS name")]
    Name(String),
    #[error("client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

fn certs(what: &'static str, pem: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ConfigError::Pem { what, source })?;
    if certs.is_empty() {
        return Err(ConfigError::Empty { what });
    }
    Ok(certs)
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>, ConfigError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|source| ConfigError::Pem {
        what: "private key",
        source,
    })
}

fn roots(pem: &str) -> Result<RootCertStore, ConfigError> {
    let mut roots = RootCertStore::empty();
    for cert in certs("trust bundle", pem)? {
        roots.add(cert).map_err(|source| ConfigError::Rustls {
            what: "trust bundle",
            source,
        })?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server presenting `cert_pem`/`key_pem`; client certificates are
/// verified against `client_ca_bundle_pem` but optional.
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_bundle_pem: &str,
) -> Result<ServerConfig, ConfigError> {
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots(client_ca_bundle_pem)?), provider())
            .allow_unauthenticated()
            .build()?;
    ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| ConfigError::Rustls {
            what: "protocol versions",
            source,
        })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs("server certificate", cert_pem)?, key(key_pem)?)
        .map_err(|source| ConfigError::Rustls {
            what: "server certificate and key",
            source,
        })
}

/// A client trusting `trust_bundle_pem`, presenting `identity` (certificate
/// and key PEM) when given, and accepting only a server whose certificate
/// names `expected_name`, whatever address was dialled.
pub fn client_config(
    trust_bundle_pem: &str,
    identity: Option<(&str, &str)>,
    expected_name: &str,
) -> Result<ClientConfig, ConfigError> {
    let expected = ServerName::try_from(expected_name.to_owned())
        .map_err(|_| ConfigError::Name(expected_name.to_owned()))?;
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(trust_bundle_pem)?), provider())
        .build()
        .map_err(|e| ConfigError::Name(e.to_string()))?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| ConfigError::Rustls {
            what: "protocol versions",
            source,
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { expected, inner }));
    match identity {
        Some((cert, key_pem)) => builder
            .with_client_auth_cert(certs("client certificate", cert)?, key(key_pem)?)
            .map_err(|source| ConfigError::Rustls {
                what: "client certificate and key",
                source,
            }),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The common name of a certificate (the first CN of its subject).
pub fn peer_common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned)
}

/// Verifies the chain with webpki against `expected` instead of the name
/// the connection was opened with (an IP address).
#[derive(Debug)]
struct Pinned {
    expected: ServerName<'static>,
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.expected, ocsp, now)
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
