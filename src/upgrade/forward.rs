//! A local PostgreSQL socket that is really the old primary over TCP: every
//! connection to `<dir>/.s.PGSQL.<port>` is relayed to `host:port`, so that
//! pg_upgrade (which reaches a live old server only through a socket
//! directory) can check a server in another pod.
//!
//! libpq never starts TLS on a unix socket, and a primary that serves TLS
//! accepts no plaintext TCP (`hostssl` only). So with [`Tls`] the relay
//! itself starts TLS on each connection to the primary (PostgreSQL's
//! SSLRequest, then a handshake verifying the certificate names the
//! primary, as [`crate::tls::probe::connect`] does) and copies the client's
//! plaintext protocol into it. Without it (a Job built before TLS, or a
//! primary that serves none) the bytes go over TCP as they are.
//!
//! Over TLS the server also offers SCRAM with channel binding
//! (`SCRAM-SHA-256-PLUS`), which libpq on a socket without TLS takes for a
//! stripped connection and refuses outright. The relay takes that one
//! mechanism out of the server's offer ([`without_channel_binding`]), so
//! libpq uses plain SCRAM, as on any connection without TLS; channel
//! binding would bind the client to the relay's TLS session, which the relay
//! itself has already verified by the primary's certificate and name.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::JoinHandle;

use super::Error;
use crate::tls::probe::{self, Negotiation};

/// TLS to the old primary: the CAs that verify it and the name its
/// certificate must carry.
#[derive(Clone)]
pub struct Tls {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl Tls {
    /// Trusts the CAs of the PEM file `ca_file` and requires the primary's
    /// certificate to name `expected_name`.
    pub fn from_file(ca_file: &Path, expected_name: &str) -> Result<Tls, Error> {
        let bundle = std::fs::read_to_string(ca_file).map_err(Error::io("read", ca_file))?;
        let tls_error = |source| Error::Tls {
            context: "the old primary's CA bundle and name",
            source,
        };
        let config = crate::tls::rustls_config::client_config(&bundle, None, expected_name)
            .map_err(tls_error)?;
        let name = ServerName::try_from(expected_name.to_owned())
            .map_err(|_| tls_error(crate::tls::Error::ServerName(expected_name.to_owned())))?;
        Ok(Tls { config, name })
    }
}

/// The forwarder; stops (and removes its socket) when dropped.
pub struct Forwarder {
    task: JoinHandle<()>,
    socket: PathBuf,
    last_error: Arc<Mutex<Option<String>>>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Forwarder {
    /// Why the last connection to the old primary could not be set up, if
    /// one failed: the client only sees its socket closed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }
}

/// The socket file PostgreSQL clients look for in `dir` for `port`.
pub fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// Where a relayed connection goes.
#[derive(Clone)]
struct Upstream {
    host: String,
    port: u16,
    tls: Option<Tls>,
}

/// Listens on the socket for `local_port` in `dir` and relays each
/// connection to `host:port`, over TLS when `tls` is set.
pub fn start(
    dir: &Path,
    local_port: u16,
    host: &str,
    port: u16,
    tls: Option<Tls>,
) -> Result<Forwarder, Error> {
    let socket = socket_path(dir, local_port);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(Error::io("listen on", &socket))?;
    let upstream = Upstream {
        host: host.to_owned(),
        port,
        tls,
    };
    let last_error = Arc::new(Mutex::new(None));
    let errors = last_error.clone();
    let task = tokio::spawn(async move {
        loop {
            let (local, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "the forwarder cannot accept a connection");
                    continue;
                }
            };
            let upstream = upstream.clone();
            let errors = errors.clone();
            tokio::spawn(async move {
                // Dropping the local end tells the client; pg_upgrade then
                // reports it cannot connect, and the check adds this reason.
                if let Err(error) = relay(local, &upstream).await {
                    tracing::warn!(
                        %error, host = %upstream.host, port = upstream.port,
                        "cannot reach the old primary"
                    );
                    if let Ok(mut last) = errors.lock() {
                        *last = Some(error);
                    }
                }
            });
        }
    });
    Ok(Forwarder {
        task,
        socket,
        last_error,
    })
}

/// One connection: to the primary (TLS first when asked), then bytes both
/// ways until either side closes. Errors setting it up are returned; one
/// ending a relayed connection is only logged (the client saw it).
async fn relay(mut local: UnixStream, upstream: &Upstream) -> Result<(), String> {
    let addr = resolve(&upstream.host, upstream.port).await?;
    match &upstream.tls {
        Some(tls) => {
            let connect = probe::connect(
                addr,
                tls.config.clone(),
                tls.name.clone(),
                Negotiation::SslRequest,
            );
            let remote = tokio::time::timeout(probe::TIMEOUT, connect)
                .await
                .map_err(|_| format!("{addr}: no TLS within {} s", probe::TIMEOUT.as_secs()))?
                .map_err(|error| error.to_string())?;
            copy_hiding_channel_binding(local, remote).await;
        }
        None => {
            let mut remote = TcpStream::connect(addr)
                .await
                .map_err(|error| format!("{addr}: connect: {error}"))?;
            let _ = remote.set_nodelay(true);
            copy(&mut local, &mut remote).await;
        }
    }
    Ok(())
}

async fn copy(local: &mut UnixStream, remote: &mut (impl AsyncRead + AsyncWrite + Unpin)) {
    if let Err(error) = tokio::io::copy_bidirectional(local, remote).await {
        tracing::debug!(%error, "a forwarded connection ended");
    }
}

/// Bytes both ways, the server's authentication messages filtered by
/// [`relay_authentication`].
async fn copy_hiding_channel_binding(
    local: UnixStream,
    remote: impl AsyncRead + AsyncWrite + Unpin,
) {
    let (mut local_read, mut local_write) = local.into_split();
    let (mut remote_read, mut remote_write) = tokio::io::split(remote);
    let upstream = async {
        let copied = tokio::io::copy(&mut local_read, &mut remote_write).await;
        let _ = remote_write.shutdown().await;
        copied.map(|_| ())
    };
    let downstream = async {
        let mut copied = relay_authentication(&mut remote_read, &mut local_write).await;
        if copied.is_ok() {
            copied = tokio::io::copy(&mut remote_read, &mut local_write)
                .await
                .map(|_| ());
        }
        let _ = local_write.shutdown().await;
        copied
    };
    let (up, down) = tokio::join!(upstream, downstream);
    if let Err(error) = up.and(down) {
        tracing::debug!(%error, "a forwarded connection ended");
    }
}

/// Type and length of a protocol message from the server.
const HEADER: usize = 5;
/// `AuthenticationSASL`'s code in an `R` message; 0 is `AuthenticationOk`.
const AUTH_SASL: u32 = 10;
const AUTH_OK: u32 = 0;
/// Larger than any message before authentication ends: anything else is not
/// the protocol this filter knows, and is passed on untouched.
const MAX_AUTH_MESSAGE: usize = 64 * 1024;
/// The mechanism libpq refuses on a connection without TLS.
const CHANNEL_BINDING: &[u8] = b"SCRAM-SHA-256-PLUS";

/// Copies the server's messages to the client until authentication ends
/// (`AuthenticationOk` or an error), offering SASL without
/// [`CHANNEL_BINDING`]. The rest of the stream is the caller's to copy.
async fn relay_authentication(
    server: &mut (impl AsyncRead + Unpin),
    client: &mut (impl AsyncWrite + Unpin),
) -> std::io::Result<()> {
    loop {
        let mut header = [0u8; HEADER];
        server.read_exact(&mut header).await?;
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if !(4..=MAX_AUTH_MESSAGE).contains(&length) {
            return client.write_all(&header).await;
        }
        let mut body = vec![0u8; length - 4];
        server.read_exact(&mut body).await?;
        let code = body
            .get(..4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        let (body, done) = match (header[0], code) {
            (b'R', Some(AUTH_SASL)) => (without_channel_binding(&body), false),
            (b'R', Some(AUTH_OK)) | (b'E', _) => (body, true),
            _ => (body, false),
        };
        let mut message = Vec::with_capacity(HEADER + body.len());
        message.push(header[0]);
        message.extend_from_slice(&u32::to_be_bytes(body.len() as u32 + 4));
        message.extend_from_slice(&body);
        client.write_all(&message).await?;
        if done {
            return Ok(());
        }
    }
}

/// The body of an `AuthenticationSASL` message (its code, then each
/// mechanism NUL-terminated, then a NUL) without [`CHANNEL_BINDING`].
fn without_channel_binding(body: &[u8]) -> Vec<u8> {
    let Some((code, list)) = body.split_at_checked(4) else {
        return body.to_vec();
    };
    let mut out = code.to_vec();
    for name in list.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if name != CHANNEL_BINDING {
            out.extend_from_slice(name);
            out.push(0);
        }
    }
    out.push(0);
    out
}

/// `host` (the primary's pod IP, or a name) and `port` as one address.
async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|error| format!("cannot resolve {host}: {error}"))?
        .next()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use jiff::{SignedDuration, Timestamp};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::*;
    use crate::tls::Authority;

    fn authority() -> Authority {
        Authority::generate("test-ca", SignedDuration::from_hours(24), Timestamp::now()).unwrap()
    }

    /// A PostgreSQL-like server on loopback for one connection: it wants an
    /// SSLRequest, answers `S`, does TLS as `shop-rw`/`shop-1`, then echoes
    /// one message. Returns its port and what it saw.
    async fn tls_server(ca: &Authority) -> (u16, JoinHandle<Result<Vec<u8>, String>>) {
        let names = vec!["shop-rw".to_owned(), "shop-1".to_owned()];
        let leaf = ca
            .issue_server(&names, SignedDuration::from_hours(1), Timestamp::now())
            .unwrap();
        let config =
            crate::tls::rustls_config::server_config(&leaf.cert_pem, &leaf.key_pem, None, &[])
                .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let fail = |e: std::io::Error| e.to_string();
            let (mut tcp, _) = listener.accept().await.map_err(fail)?;
            let mut request = [0u8; 8];
            tcp.read_exact(&mut request).await.map_err(fail)?;
            if request != probe::SSL_REQUEST {
                return Err(format!("plaintext from the relay: {request:?}"));
            }
            tcp.write_all(b"S").await.map_err(fail)?;
            let mut tls = TlsAcceptor::from(config).accept(tcp).await.map_err(fail)?;
            let mut message = [0u8; 5];
            tls.read_exact(&mut message).await.map_err(fail)?;
            tls.write_all(&message).await.map_err(fail)?;
            tls.flush().await.map_err(fail)?;
            Ok(message.to_vec())
        });
        (port, task)
    }

    fn ca_file(dir: &Path, ca: &Authority) -> PathBuf {
        let path = dir.join("ca.crt");
        std::fs::write(&path, ca.cert_pem()).unwrap();
        path
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tusk-forward-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn the_relay_starts_tls_verifying_the_name_and_carries_the_bytes() {
        let dir = scratch("tls");
        let ca = authority();
        let (port, server) = tls_server(&ca).await;
        let tls = Tls::from_file(&ca_file(&dir, &ca), "shop-rw").unwrap();
        let forwarder = start(&dir, 5432, "127.0.0.1", port, Some(tls)).unwrap();
        let mut client = UnixStream::connect(socket_path(&dir, 5432)).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        let mut echo = [0u8; 5];
        client.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"hello");
        assert_eq!(server.await.unwrap().unwrap(), b"hello");
        assert_eq!(forwarder.last_error(), None);
        drop(forwarder);
        assert!(!socket_path(&dir, 5432).exists(), "the socket goes with it");
    }

    #[tokio::test]
    async fn a_primary_naming_another_server_is_refused_and_the_reason_kept() {
        let dir = scratch("name");
        let ca = authority();
        let (port, _server) = tls_server(&ca).await;
        let tls = Tls::from_file(&ca_file(&dir, &ca), "other-rw").unwrap();
        let forwarder = start(&dir, 5432, "127.0.0.1", port, Some(tls)).unwrap();
        let mut client = UnixStream::connect(socket_path(&dir, 5432)).await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "closed without a byte");
        let why = forwarder.last_error().expect("a reason");
        assert!(why.contains(r#"not valid for name "other-rw""#), "{why}");
    }

    #[tokio::test]
    async fn without_tls_the_bytes_go_as_they_are() {
        let dir = scratch("plain");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let forwarder = start(&dir, 5432, "127.0.0.1", port, None).unwrap();
        let mut client = UnixStream::connect(socket_path(&dir, 5432)).await.unwrap();
        client.write_all(b"plain").await.unwrap();
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut seen = [0u8; 5];
        tcp.read_exact(&mut seen).await.unwrap();
        assert_eq!(&seen, b"plain");
        assert_eq!(forwarder.last_error(), None);
    }

    #[test]
    fn the_sasl_offer_loses_channel_binding_only() {
        let offer = b"\0\0\0\x0aSCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0";
        assert_eq!(
            without_channel_binding(offer),
            b"\0\0\0\x0aSCRAM-SHA-256\0\0".to_vec()
        );
        let plain = b"\0\0\0\x0aSCRAM-SHA-256\0\0";
        assert_eq!(without_channel_binding(plain), plain.to_vec());
        assert_eq!(without_channel_binding(b"\0\0"), b"\0\0".to_vec());
    }

    #[tokio::test]
    async fn authentication_is_filtered_then_the_rest_passes_as_it_is() {
        fn message(kind: u8, body: &[u8]) -> Vec<u8> {
            let mut m = vec![kind];
            m.extend_from_slice(&u32::to_be_bytes(body.len() as u32 + 4));
            m.extend_from_slice(body);
            m
        }
        let sasl = message(b'R', b"\0\0\0\x0aSCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        let ok = message(b'R', b"\0\0\0\0");
        // After AuthenticationOk the bytes are no longer looked at: a later
        // message that looks like an offer passes unchanged.
        let later = sasl.clone();
        let server: Vec<u8> = [sasl, ok.clone(), later.clone()].concat();
        let mut client = Vec::new();
        let mut reader = &server[..];
        relay_authentication(&mut reader, &mut client)
            .await
            .unwrap();
        tokio::io::copy(&mut reader, &mut client).await.unwrap();
        let expected: Vec<u8> = [message(b'R', b"\0\0\0\x0aSCRAM-SHA-256\0\0"), ok, later].concat();
        assert_eq!(client, expected);
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let dir = scratch("missing");
        let err = Tls::from_file(&dir.join("ca.crt"), "shop-rw")
            .err()
            .expect("an error");
        assert!(err.to_string().contains("ca.crt"), "{err}");
        std::fs::write(dir.join("empty.crt"), "").unwrap();
        let err = Tls::from_file(&dir.join("empty.crt"), "shop-rw")
            .err()
            .expect("an error");
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
    }
}
