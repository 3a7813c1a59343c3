//! Which certificate a PostgreSQL server presents, proved by a handshake: the
//! operator confirms a renewal or a CA rotation stage only when each pod's
//! PostgreSQL port presents the new certificate, not when the Secret merely
//! holds it. The same negotiation ([`connect`]) carries the major
//! upgrade's check to the old primary.

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
    let mut tls = connect(addr, config, server_name, negotiation).await?;
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

/// Connects to the PostgreSQL server at `addr` and starts TLS as
/// `negotiation` says, verified by `config` (build it with
/// [`rustls_config::client_config`], which checks the name the caller
/// meant): the stream is then ready for the startup message. The major
/// upgrade's check relays pg_upgrade's connections through this.
pub async fn connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    negotiation: Negotiation,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    let io = |what| move |source| Error::Io { addr, what, source };
    let mut tcp = TcpStream::connect(addr).await.map_err(io("connect"))?;
    let _ = tcp.set_nodelay(true);
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
    TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .map_err(io("TLS handshake"))
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::*;
    use crate::tls::authority::{Authority, Leaf};
    use crate::tls::test_support::*;

    /// How the in-test server behaves before TLS.
    #[derive(Clone, Copy)]
    enum Server {
        /// Expects an SSLRequest and answers `S`.
        Postgres,
        /// Expects an SSLRequest and answers `N` (ssl=off).
        PlaintextOnly,
        /// Expects TLS at once and requires ALPN `postgresql`.
        DirectTls,
    }

    /// Serves one connection on loopback as PostgreSQL would, with `leaf`;
    /// returns its address and what the server saw (an error if the client
    /// misbehaved).
    async fn serve(
        leaf: &Leaf,
        how: Server,
    ) -> (SocketAddr, tokio::task::JoinHandle<Result<(), String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let alpn: &[&[u8]] = match how {
            Server::DirectTls => &[ALPN_POSTGRESQL],
            _ => &[],
        };
        let config =
            rustls_config::server_config(&leaf.cert_pem, &leaf.key_pem, None, alpn).unwrap();
        let task = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
            if !matches!(how, Server::DirectTls) {
                let mut request = [0u8; 8];
                tcp.read_exact(&mut request)
                    .await
                    .map_err(|e| e.to_string())?;
                if request != SSL_REQUEST {
                    return Err(format!("not an SSLRequest: {request:?}"));
                }
                let answer = if matches!(how, Server::PlaintextOnly) {
                    b'N'
                } else {
                    b'S'
                };
                tcp.write_all(&[answer]).await.map_err(|e| e.to_string())?;
                if answer == b'N' {
                    return Ok(());
                }
            }
            let tls = TlsAcceptor::from(config)
                .accept(tcp)
                .await
                .map_err(|e| e.to_string())?;
            if matches!(how, Server::DirectTls)
                && tls.get_ref().1.alpn_protocol() != Some(ALPN_POSTGRESQL)
            {
                return Err("direct TLS without ALPN postgresql".to_owned());
            }
            Ok(())
        });
        (addr, task)
    }

    fn server_leaf(ca: &Authority, instance: &str) -> Leaf {
        ca.issue_server(&strings(&["shop-rw", instance]), days(7), now())
            .unwrap()
    }

    #[tokio::test]
    async fn the_probe_reports_the_leaf_the_server_presented_and_its_ca() {
        let old = ca();
        let new = Authority::generate("new-ca", days(365), now()).unwrap();
        let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
        let leaf = server_leaf(&new, "shop-1");
        let (addr, server) = serve(&leaf, Server::Postgres).await;
        let presented = postgres_handshake(addr, "shop-1", &bundle, Negotiation::SslRequest)
            .await
            .unwrap();
        server.await.unwrap().unwrap();
        assert_eq!(
            presented,
            Presented {
                serial: leaf.info.serial.clone(),
                fingerprint: leaf.info.fingerprint.clone(),
                not_after: leaf.info.not_after,
                issuer_fingerprint: Some(new.info().fingerprint.clone()),
            }
        );
    }

    #[tokio::test]
    async fn direct_tls_offers_alpn_postgresql_and_sends_no_sslrequest() {
        let ca = ca();
        let leaf = server_leaf(&ca, "shop-1");
        let (addr, server) = serve(&leaf, Server::DirectTls).await;
        let presented = postgres_handshake(addr, "shop-1", ca.cert_pem(), Negotiation::DirectTls)
            .await
            .unwrap();
        server.await.unwrap().unwrap();
        assert_eq!(presented.serial, leaf.info.serial);
    }

    #[tokio::test]
    async fn a_server_without_tls_is_reported_as_such() {
        let ca = ca();
        let (addr, server) = serve(&server_leaf(&ca, "shop-1"), Server::PlaintextOnly).await;
        let err = postgres_handshake(addr, "shop-1", ca.cert_pem(), Negotiation::SslRequest)
            .await
            .unwrap_err();
        server.await.unwrap().unwrap();
        assert!(
            matches!(err, Error::SslRefused { answer: 'N', .. }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_probe_refuses_a_server_naming_another_instance() {
        let ca = ca();
        let (addr, _server) = serve(&server_leaf(&ca, "shop-2"), Server::Postgres).await;
        let err = postgres_handshake(addr, "shop-1", ca.cert_pem(), Negotiation::SslRequest)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains(r#"not valid for name "shop-1""#),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_probe_refuses_a_server_from_an_untrusted_ca() {
        let ca = ca();
        let stranger = Authority::generate("stranger", days(365), now()).unwrap();
        let (addr, _server) = serve(&server_leaf(&stranger, "shop-1"), Server::Postgres).await;
        let err = postgres_handshake(addr, "shop-1", ca.cert_pem(), Negotiation::SslRequest)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    }

    #[tokio::test]
    async fn a_closed_port_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = postgres_handshake(addr, "shop-1", ca().cert_pem(), Negotiation::SslRequest)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Io {
                    what: "connect",
                    ..
                }
            ),
            "{err}"
        );
    }
}
