//! The API over TLS: an accept loop of its own (rather than `axum::serve`) so
//! that each connection is handshaken with the newest material of the watch
//! channel (a renewed `api.crt` is served from the next connection on,
//! without a restart) and so that the client certificate's common name
//! reaches the handlers, as the request extension [`Caller`].
//!
//! Client certificates are verified against `client-ca.crt` but optional at
//! the TLS layer: the kubelet probes present none. Which paths need one is
//! [`super::access`]'s decision.

use std::sync::Arc;
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::instance::tls::Material;
use crate::tls::rustls_config;

use super::super::Error;

/// The TLS material as the API serves it: the newest reading of the mounted
/// Secret. INTERIM (#27): built from one `Material::read` at the start until
/// the `pgtls` watcher's channel (`Shared`) replaces it at merge.
pub type MaterialRx = watch::Receiver<Arc<Material>>;

/// A client that does not finish its handshake within this is dropped: the
/// handshake runs in the connection's own task, so it holds nobody else up.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Who is calling, as the TLS handshake proved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// No client certificate was presented (a kubelet probe, a scraper).
    Anonymous,
    /// A client certificate that `client-ca.crt` verifies, by its common name
    /// (empty when it has none).
    Verified(String),
}

/// The acceptor for the newest material, rebuilt only when the material
/// changed; material that does not make a configuration keeps the last good
/// one in service.
struct Acceptors {
    material: MaterialRx,
    current: Option<(Arc<Material>, TlsAcceptor)>,
}

impl Acceptors {
    fn acceptor(&mut self) -> Option<TlsAcceptor> {
        let newest = self.material.borrow_and_update().clone();
        let fresh = self
            .current
            .as_ref()
            .is_some_and(|(material, _)| Arc::ptr_eq(material, &newest));
        if !fresh {
            match rustls_config::server_config(
                &newest.api_cert,
                &newest.api_key,
                Some(&newest.client_ca_bundle),
                &[],
            ) {
                Ok(config) => {
                    tracing::info!("instance API: serving the TLS material loaded last");
                    self.current = Some((newest, TlsAcceptor::from(config)));
                }
                Err(error) => {
                    tracing::warn!(%error, "instance API: new TLS material refused, keeping the previous");
                    // Do not retry the same material on every connection.
                    if let Some((material, _)) = &mut self.current {
                        *material = newest;
                    }
                }
            }
        }
        self.current.as_ref().map(|(_, acceptor)| acceptor.clone())
    }
}

/// Serves `router` over TLS on `listener` until `stop`.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    material: MaterialRx,
    mut stop: watch::Receiver<bool>,
) -> Result<(), Error> {
    let mut acceptors = Acceptors {
        material,
        current: None,
    };
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // A connection that failed before it was accepted (reset, out
                // of descriptors for a moment): the next one may do.
                Err(error) => {
                    tracing::debug!(%error, "instance API: accept failed");
                    continue;
                }
            },
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
        };
        let Some(acceptor) = acceptors.acceptor() else {
            tracing::warn!(%remote, "instance API: no usable TLS material, connection dropped");
            continue;
        };
        let router = router.clone();
        let mut cuts = crate::instance::partition::cuts();
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
            let tls = match handshake {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%remote, %error, "instance API: TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "instance API: TLS handshake timed out");
                    return;
                }
            };
            let caller = match tls.get_ref().1.peer_certificates() {
                Some(chain) if !chain.is_empty() => {
                    Caller::Verified(rustls_config::peer_common_name(chain).unwrap_or_default())
                }
                _ => Caller::Anonymous,
            };
            let service = TowerToHyperService::new(router.layer(Extension(caller)));
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service);
            // A partition drill's cut ends this connection: a NetworkPolicy
            // would let it live on.
            let served = tokio::select! {
                served = connection => served,
                _ = cuts.changed() => {
                    tracing::warn!(%remote, "instance API: connection ended by a partition drill");
                    return;
                }
            };
            if let Err(error) = served {
                tracing::debug!(%remote, %error, "instance API: connection ended with an error");
            }
        });
    }
}
