//! The operator's side of the instance manager API: `GET /status` to observe,
//! and the token-protected `POST`s that apply an action. Plain HTTP to the pod
//! IP; the bearer token (a per-Database Secret) keeps anyone else from mutating.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tracing::{Span, field, instrument};

use crate::instance::Status;
use crate::resources::HEALTH_PORT;
use crate::telemetry;

/// A status poll must not hold the reconcile up: a manager that cannot answer
/// within this is treated as not answering (state Unknown).
const STATUS_TIMEOUT: Duration = Duration::from_secs(3);
/// Reload and sync wait for `pg_reload_conf()` and a short settle.
const MUTATE_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum InstanceApiError {
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
    #[error("{method} {url}: {status}: {body}")]
    Status {
        method: Method,
        url: String,
        status: StatusCode,
        body: String,
    },
    #[error("{url}: unreadable answer: {source}")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

/// A pooled HTTP/1.1 client for the instance managers.
#[derive(Clone)]
pub struct InstanceApi {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for InstanceApi {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }
}

impl InstanceApi {
    /// `GET /status` of the manager at `pod_ip`.
    #[instrument(
        name = "instance_call",
        skip_all,
        fields(
            op = "status",
            pod_ip = %pod_ip,
            otel.kind = "client",
            http.response.status_code = field::Empty,
            error = field::Empty,
        )
    )]
    pub async fn status(&self, pod_ip: &str) -> Result<Status, InstanceApiError> {
        let url = url(pod_ip, "/status");
        let answer = async {
            let body = self
                .send(Method::GET, &url, None, Bytes::new(), STATUS_TIMEOUT)
                .await?;
            serde_json::from_slice(&body).map_err(|source| InstanceApiError::Decode {
                url: url.clone(),
                source,
            })
        };
        recorded(answer.await)
    }

    /// `POST path` with a JSON body and the bearer `token`.
    #[instrument(
        name = "instance_call",
        skip_all,
        fields(
            op = path.trim_start_matches('/'),
            pod_ip = %pod_ip,
            otel.kind = "client",
            http.response.status_code = field::Empty,
            error = field::Empty,
        )
    )]
    pub async fn post(
        &self,
        pod_ip: &str,
        path: &str,
        token: &str,
        body: &serde_json::Value,
    ) -> Result<(), InstanceApiError> {
        let url = url(pod_ip, path);
        let body = Bytes::from(body.to_string());
        let answer = self
            .send(Method::POST, &url, Some(token), body, MUTATE_TIMEOUT)
            .await;
        recorded(answer.map(drop))
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, InstanceApiError> {
        let transport =
            |source: Box<dyn std::error::Error + Send + Sync>| InstanceApiError::Transport {
                method: method.clone(),
                url: url.to_owned(),
                source,
            };
        let mut request = Request::builder()
            .method(method.clone())
            .uri(url)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        // The manager's span of this operation joins the reconcile's trace.
        if let Some(headers) = request.headers_mut() {
            telemetry::inject_trace_context(headers);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|err| transport(Box::new(err)))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|err| transport(Box::new(err)))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|err| transport(Box::new(err)))?
                .to_bytes();
            Ok::<_, InstanceApiError>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| InstanceApiError::Timeout {
                method: method.clone(),
                url: url.to_owned(),
                timeout,
            })??;
        Span::current().record("http.response.status_code", status.as_u16());
        if !status.is_success() {
            return Err(InstanceApiError::Status {
                method,
                url: url.to_owned(),
                status,
                body: String::from_utf8_lossy(&body).chars().take(500).collect(),
            });
        }
        Ok(body)
    }
}

/// Marks the current `instance_call` span failed when the call failed.
fn recorded<T>(answer: Result<T, InstanceApiError>) -> Result<T, InstanceApiError> {
    if let Err(error) = &answer {
        telemetry::record_error(&Span::current(), error);
    }
    answer
}

fn url(pod_ip: &str, path: &str) -> String {
    // An IPv6 pod IP needs brackets in a URL.
    if pod_ip.contains(':') {
        format!("http://[{pod_ip}]:{HEALTH_PORT}{path}")
    } else {
        format!("http://{pod_ip}:{HEALTH_PORT}{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_bracket_ipv6_addresses() {
        assert_eq!(url("10.0.0.5", "/status"), "http://10.0.0.5:8000/status");
        assert_eq!(url("fd00::5", "/status"), "http://[fd00::5]:8000/status");
    }
}
