//! tokio-postgres over rustls, for the manager's connections to its primary
//! and the drill probe's to `-rw`,
//! with a configuration from [`crate::tls::rustls_config::client_config`]:
//! the server's chain is verified against the CA bundle and its name against
//! the one the caller meant (the verify-full of libpq, also when the
//! connection dials a `hostaddr`), and the replication role's certificate is
//! presented.
//!
//! A small adapter rather than a crate: the maintained one pulls a second
//! SHA-2 and an X.509 stack for channel binding, which a name-verified TLS
//! connection does not need (SCRAM's channel binding guards against a
//! server that was not verified; `cert` authentication sends no password).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// [`MakeTlsConnect`] for tokio-postgres: the name verified is the one the
/// configuration pins, whatever host tokio-postgres hands over.
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl MakeRustls {
    /// `config` verifies `name`, which is also sent as SNI.
    pub fn new(
        config: Arc<ClientConfig>,
        name: &str,
    ) -> Result<Self, rustls::pki_types::InvalidDnsNameError> {
        Ok(MakeRustls {
            config,
            name: ServerName::try_from(name.to_owned())?,
        })
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, _host: &str) -> Result<RustlsConnect, Self::Error> {
        Ok(RustlsConnect {
            name: self.name.clone(),
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
        })
    }
}

/// One connection's handshake.
pub struct RustlsConnect {
    name: ServerName<'static>,
    connector: tokio_rustls::TlsConnector,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let stream = self.connector.connect(self.name, stream).await?;
            Ok(RustlsStream(Box::new(stream)))
        })
    }
}

/// The encrypted stream.
pub struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
