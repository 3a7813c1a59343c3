//! The sockets: the instance API on every simulated pod address (HTTPS with
//! the instance's own `api.crt` when its pod serves TLS), and PostgreSQL's
//! port as far as a TLS probe goes (SSLRequest or direct TLS, then the
//! instance's `tls.crt`). An address is told apart by the connection's
//! local address: the pod IP it was sent to.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use super::pods::{Found, Pods};
use super::sim::{self, Sim};

/// PostgreSQL's SSLRequest, and the first byte of a TLS ClientHello.
const SSL_REQUEST: [u8; 8] = tusk::tls::probe::SSL_REQUEST;
const TLS_HANDSHAKE: u8 = 0x16;

#[derive(Clone)]
pub struct Shared {
    pub pods: Arc<Pods>,
    pub sim: Arc<Mutex<Sim>>,
}

/// Accepts instance API connections until the process ends.
pub async fn api(listener: TcpListener, shared: Shared) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Err(why) = api_connection(socket, shared).await {
                tracing::debug!(%why, "instance API connection");
            }
        });
    }
}

async fn api_connection(socket: TcpStream, shared: Shared) -> Result<(), String> {
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    let found = shared
        .pods
        .find(local.ip())
        .ok_or_else(|| format!("no instance pod at {}", local.ip()))?;
    if !found.tls {
        return http(socket, found, shared).await;
    }
    let material = shared
        .pods
        .material(&found.namespace, &found.name)
        .ok_or_else(|| format!("no TLS Secret for {}", found.name))?;
    let stream = TlsAcceptor::from(material.api.clone())
        .accept(socket)
        .await
        .map_err(|e| e.to_string())?;
    http(stream, found, shared).await
}

async fn http<S>(stream: S, found: Found, shared: Shared) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let found = Arc::new(found);
    let service = service_fn(move |request: Request<Incoming>| {
        let found = found.clone();
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(answer(request, &found, &shared).await) }
    });
    hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
        .map_err(|e| e.to_string())
}

async fn answer(
    request: Request<Incoming>,
    found: &Found,
    shared: &Shared,
) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let bearer = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer "));
    let tls = found
        .tls
        .then(|| shared.pods.material(&found.namespace, &found.name))
        .flatten()
        .map(|m| m.report.clone());
    let reply = shared
        .sim
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .handle(
            &found.namespace,
            &found.name,
            || found.seed.clone(),
            tls,
            &sim::Request {
                method: &parts.method,
                path: parts.uri.path(),
                bearer,
                body: &body,
            },
        );
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() = reply.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Accepts PostgreSQL connections: enough to present the instance's server
/// certificate to a TLS probe, then close.
pub async fn postgres(listener: TcpListener, pods: Arc<Pods>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let pods = pods.clone();
        tokio::spawn(async move {
            if let Err(why) = postgres_connection(socket, &pods).await {
                tracing::debug!(%why, "PostgreSQL connection");
            }
        });
    }
}

async fn postgres_connection(mut socket: TcpStream, pods: &Pods) -> Result<(), String> {
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    let found = pods
        .find(local.ip())
        .ok_or_else(|| format!("no instance pod at {}", local.ip()))?;
    let material = pods
        .material(&found.namespace, &found.name)
        .ok_or_else(|| format!("no TLS Secret for {}", found.name))?;
    let mut first = [0u8; 8];
    let peeked = socket.peek(&mut first).await.map_err(|e| e.to_string())?;
    let config = if peeked >= 1 && first[0] == TLS_HANDSHAKE {
        material.postgres_direct.clone()
    } else {
        let mut request = [0u8; 8];
        tokio::io::AsyncReadExt::read_exact(&mut socket, &mut request)
            .await
            .map_err(|e| e.to_string())?;
        if request != SSL_REQUEST {
            return Err("not an SSLRequest: the simulator speaks TLS only".to_owned());
        }
        socket.write_all(b"S").await.map_err(|e| e.to_string())?;
        material.postgres.clone()
    };
    let mut stream = TlsAcceptor::from(config)
        .accept(socket)
        .await
        .map_err(|e| e.to_string())?;
    let _ = stream.shutdown().await;
    Ok(())
}
