//! Calling the other instances' API: the heartbeat (`GET /peer`) and, for a
//! switchover, the target's `GET /status`. Each call names the caller and is
//! bounded by the protocol's request timeout.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::contract::{Member, PEER_HEADER, PeerStatus, Status, path};
use crate::failover::Timing;

/// An HTTP client for the peers, as `me`.
pub struct PeerClient {
    me: String,
    http: HttpClient<HttpConnector, Empty<Bytes>>,
    timeout: std::time::Duration,
}

impl PeerClient {
    pub fn new(me: String, timing: &Timing) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timing.request_timeout));
        PeerClient {
            me,
            http: HttpClient::builder(TokioExecutor::new()).build(connector),
            timeout: timing.request_timeout,
        }
    }

    /// One peer's `GET /peer`.
    pub async fn heartbeat(&self, member: &Member, token: &str) -> Result<PeerStatus, String> {
        self.get(member, path::PEER, Some(token)).await
    }

    /// One peer's `GET /status`.
    pub async fn status(&self, member: &Member) -> Result<Status, String> {
        self.get(member, path::STATUS, None).await
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        member: &Member,
        path: &str,
        token: Option<&str>,
    ) -> Result<T, String> {
        let host = if member.address.contains(':') {
            format!("[{}]", member.address)
        } else {
            member.address.clone()
        };
        let url = format!("http://{host}:{}{path}", crate::contract::PORT);
        let mut request = http::Request::get(&url).header(PEER_HEADER, &self.me);
        if let Some(token) = token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Empty::new()).map_err(|e| e.to_string())?;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if !status.is_success() {
                return Err(format!("{status}"));
            }
            serde_json::from_slice::<T>(&body).map_err(|e| e.to_string())
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| "timed out".to_owned())?
    }
}
