//! Which certificate a PostgreSQL server presents, proved by a handshake: the
//! operator confirms a renewal or a CA rotation stage only when each pod's
//! PostgreSQL port presents the new certificate, not when the Secret merely
//! holds it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::inspect::CertInfo;
use super::{Error, rustls_config};

/// PostgreSQL's SSLRequest: length 8, then the code 80877103 (1234 << 16 | 5679).
pub const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
/// The ALPN protocol of PostgreSQL's direct TLS (PostgreSQL 17 and later).
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";
/// How long the whole probe (connect, negotiation, handshake) may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// How the client starts TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negotiation {
    /// Send an SSLRequest and expect `S` (every PostgreSQL version).
    SslRequest,
    /// Start the TLS handshake at once with ALPN `postgresql`
    /// (`sslnegotiation=direct`, PostgreSQL 17 and later).
    DirectTls,
}

/// The leaf certificate a server presented in a verified handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Presented {
    /// As [`CertInfo::serial`].
    pub serial: String,
    /// As [`CertInfo::fingerprint`].
    pub fingerprint: String,
    pub not_after: Timestamp,
    /// The fingerprint of the CA of the trust bundle that issued the leaf
    /// (during a CA rotation: old or new); `None` when the leaf was verified
    /// through an intermediate the server sent.
    pub issuer_fingerprint: Option<String>,
}

/// Connects to the PostgreSQL server at `addr`, starts TLS and returns the
/// leaf it presented, verified against `trust_bundle_pem` and required to
/// name `expected_name` (the instance name: `addr` is usually the pod IP).
/// Presents no client certificate and closes right after the handshake.
pub async fn postgres_handshake(
    addr: SocketAddr,
    expected_name: &str,
    trust_bundle_pem: &str,
    negotiation: Negotiation,
) -> Result<Presented, Error> {
    let mut config = rustls_config::client(trust_bundle_pem, None, expected_name)?;
    if negotiation == Negotiation::DirectTls {
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    }
    let server_name = ServerName::try_from(expected_name.to_owned())
        .map_err(|_| Error::ServerName(expected_name.to_owned()))?;
    let handshake = handshake(addr, Arc::new(config), server_name, negotiation);
    let chain = tokio::time::timeout(TIMEOUT, handshake)
        .await
        .map_err(|_| Error::Timeout {
            addr,
            seconds: TIMEOUT.as_secs(),
        })??;
    let leaf = CertInfo::from_der(chain.first().ok_or(Error::NoPeerCertificate { addr })?)?;
    let issuer_fingerprint = CertInfo::parse_bundle(trust_bundle_pem)?
        .into_iter()
        .find(|ca| leaf.issued_by(ca))
        .map(|ca| ca.fingerprint);
    Ok(Presented {
        serial: leaf.serial,
        fingerprint: leaf.fingerprint,
        not_after: leaf.not_after,
        issuer_fingerprint,
    })
}

/// The verified peer chain.
async fn handshake(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    negotiation: Negotiation,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, Error> {
    let io = |what| move |source| Error::Io { addr, what, source };
    let mut tcp = TcpStream::connect(addr).await.map_err(io("connect"))?;
    if negotiation == Negotiation::SslRequest {
        tcp.write_all(&SSL_REQUEST)
            .await
            .map_err(io("send the SSLRequest"))?;
        let answer = tcp
            .read_u8()
            .await
            .map_err(io("read the SSLRequest answer"))?;
        if answer != b'S' {
            return Err(Error::SslRefused {
                addr,
                answer: char::from(answer),
            });
        }
    }
    let mut tls = TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .map_err(io("TLS handshake"))?;
    let chain = tls
        .get_ref()
        .1
        .peer_certificates()
        .map(|chain| chain.iter().map(|c| c.clone().into_owned()).collect())
        .unwrap_or_default();
    // Best effort: the server learns the client is gone either way.
    let _ = tls.shutdown().await;
    Ok(chain)
}
