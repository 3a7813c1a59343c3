//! The probe's HTTP API as the Drill controller calls it: `GET /report` and
//! `POST /finish` on the probe pod's IP, port
//! [`PROBE_PORT`](crate::contract::drill::PROBE_PORT), plain HTTP (the probe
//! holds no secret worth a TLS channel: ids and times).

use std::sync::LazyLock;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::contract::drill::{PROBE_PORT, ProbeReport, probe_path};

/// A report is read every pass: a probe that cannot answer this fast is
/// treated as not answering this time.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Finishing reads every acknowledged id back through `-rw`, retrying for
/// up to 30 s while the Database settles.
const FINISH_TIMEOUT: Duration = Duration::from_secs(40);

/// Why the probe did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{method} {url}: {source}")]
    Transport {
        method: Method,
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{method} {url}: no answer within {}s", .timeout.as_secs())]
    Timeout {
        method: Method,
        url: String,
        timeout: Duration,
    },
    #[error("{method} {url}: {status}")]
    Status {
        method: Method,
        url: String,
        status: http::StatusCode,
    },
    #[error("{url}: the report does not decode: {source}")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

static CLIENT: LazyLock<Client<HttpConnector, Full<Bytes>>> = LazyLock::new(|| {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    // A fresh connection each time: the NetworkPolicy canary must cut the
    // operator off the probe, and implementations let a connection that was
    // already established go on.
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector)
});

/// `GET /report`.
pub async fn report(ip: &str) -> Result<ProbeReport, ProbeError> {
    send(ip, Method::GET, probe_path::REPORT, TIMEOUT).await
}

/// `POST /finish`: the probe stops and checks its writes.
pub async fn finish(ip: &str) -> Result<ProbeReport, ProbeError> {
    send(ip, Method::POST, probe_path::FINISH, FINISH_TIMEOUT).await
}

async fn send(
    ip: &str,
    method: Method,
    path: &str,
    timeout: Duration,
) -> Result<ProbeReport, ProbeError> {
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    let url = format!("http://{host}:{PROBE_PORT}{path}");
    let transport = |source: Box<dyn std::error::Error + Send + Sync>| ProbeError::Transport {
        method: method.clone(),
        url: url.clone(),
        source,
    };
    let request = Request::builder()
        .method(method.clone())
        .uri(&url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| transport(Box::new(e)))?;
    let exchange = async {
        let response = CLIENT
            .request(request)
            .await
            .map_err(|e| transport(Box::new(e)))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| transport(Box::new(e)))?
            .to_bytes();
        Ok::<_, ProbeError>((status, body))
    };
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ProbeError::Timeout {
            method: method.clone(),
            url: url.clone(),
            timeout,
        })??;
    if !status.is_success() {
        return Err(ProbeError::Status {
            method,
            url,
            status,
        });
    }
    serde_json::from_slice(&body).map_err(|source| ProbeError::Decode { url, source })
}
