//! The operator's plain HTTP endpoints: liveness, readiness and metrics.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use super::Error;
use crate::telemetry::metrics::{Exposition, exposition};

#[derive(Clone)]
pub struct HttpState {
    pub registry: Arc<Registry>,
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    match exposition(&state.registry, accept) {
        Ok(Exposition { content_type, body }) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body)
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("cannot encode metrics: {e}"),
        ),
    }
}

/// Serves until `shutdown` turns true.
pub async fn serve(
    addr: SocketAddr,
    state: HttpState,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
        .map_err(Error::Serve)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::metrics::Metrics;

    #[tokio::test]
    async fn endpoints_answer_over_real_http() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.set_leader(true);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let (stop, shutdown) = watch::channel(false);
        let server = tokio::spawn(serve(
            addr,
            HttpState {
                registry: Arc::new(registry),
            },
            shutdown,
        ));
        let get = |path: &'static str| async move {
            for _ in 0..50 {
                if let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let request =
                        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                    stream.write_all(request.as_bytes()).await.unwrap();
                    let mut response = String::new();
                    stream.read_to_string(&mut response).await.unwrap();
                    return response;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            panic!("server did not start");
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        let metrics = get("/metrics").await;
        assert!(metrics.contains("tusk_leader 1"), "{metrics}");
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }
}
