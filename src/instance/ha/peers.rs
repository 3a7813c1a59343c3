//! Calling the other instances' API: the heartbeat (`GET /peer`) and, for a
//! switchover, the target's `GET /status`. Each call names the caller and is
//! bounded by the protocol's request timeout.
//!
//! With TLS material ([`PeerClient::use_tls`]) a peer whose pod serves TLS
//! (`Member.tls`) is called over HTTPS: this instance presents its `api.crt`,
//! and the peer's certificate must chain to `client-ca.crt` (the CAs that
//! issue every instance's API certificate, old and new during a rotation) and
//! name the member meant, whatever pod IP is dialled. A member whose pod was
//! built before TLS is called in plaintext, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::contract::{Member, PEER_HEADER, PeerStatus, Status, path};
use crate::failover::Timing;
use crate::instance::api::MaterialRx;
use crate::instance::tls::Material;
use crate::tls::rustls_config;

type HttpsClient = HttpClient<HttpsConnector<HttpConnector>, Empty<Bytes>>;
/// A peer's HTTPS client with the material and connection epoch it was
/// built from.
type BuiltClient = (Arc<Material>, u64, HttpsClient);

/// An HTTP client for the peers, as `me`.
pub struct PeerClient {
    me: String,
    /// The plaintext client and the connection epoch it was built in: a
    /// partition drill's cut ([`crate::instance::partition`]) rebuilds every
    /// client, so no connection made before the cut is used again.
    http: Mutex<(u64, HttpClient<HttpConnector, Empty<Bytes>>)>,
    timeout: std::time::Duration,
    /// The instance's TLS material, once the manager has it.
    material: OnceLock<MaterialRx>,
    /// One pooled HTTPS client per peer (its name is pinned in the client's
    /// verifier), with the material and epoch it was built from: a renewal
    /// or a cut rebuilds it.
    https: Mutex<HashMap<String, BuiltClient>>,
}

impl PeerClient {
    pub fn new(me: String, timing: &Timing) -> Self {
        PeerClient {
            me,
            http: Mutex::new((
                crate::instance::partition::epoch(),
                HttpClient::builder(TokioExecutor::new())
                    .build(connector_for(timing.request_timeout)),
            )),
            timeout: timing.request_timeout,
            material: OnceLock::new(),
            https: Mutex::new(HashMap::new()),
        }
    }

    /// Call the peers whose pods serve TLS over HTTPS with `material`; the
    /// first call wins (the manager makes one).
    pub fn use_tls(&self, material: MaterialRx) {
        let _ = self.material.set(material);
    }

    /// One peer's `GET /peer`.
    pub async fn heartbeat(&self, member: &Member, token: &str) -> Result<PeerStatus, String> {
        self.get(member, path::PEER, Some(token)).await
    }

    /// One peer's `GET /status`.
    pub async fn status(&self, member: &Member) -> Result<Status, String> {
        self.get(member, path::STATUS, None).await
    }

    /// The pooled HTTPS client for `member`, built for the newest material.
    fn https(&self, material: &MaterialRx, member: &Member) -> Result<HttpsClient, String> {
        let newest = material.borrow().clone();
        let epoch = crate::instance::partition::epoch();
        let mut clients = self.https.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((built_from, built_in, client)) = clients.get(&member.name)
            && Arc::ptr_eq(built_from, &newest)
            && *built_in == epoch
        {
            return Ok(client.clone());
        }
        let config = rustls_config::client_config(
            &newest.client_ca_bundle,
            Some((&newest.api_cert, &newest.api_key)),
            &member.name,
        )
        .map_err(|e| format!("TLS client for {}: {e}", member.name))?;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(Arc::unwrap_or_clone(config))
            .https_only()
            .enable_http1()
            .wrap_connector(connector_for(self.timeout));
        let client = HttpClient::builder(TokioExecutor::new()).build(https);
        clients.insert(member.name.clone(), (newest, epoch, client.clone()));
        Ok(client)
    }

    /// The plaintext client of the current connection epoch.
    fn plain(&self) -> HttpClient<HttpConnector, Empty<Bytes>> {
        let epoch = crate::instance::partition::epoch();
        let mut http = self.http.lock().unwrap_or_else(PoisonError::into_inner);
        if http.0 != epoch {
            *http = (
                epoch,
                HttpClient::builder(TokioExecutor::new()).build(connector_for(self.timeout)),
            );
        }
        http.1.clone()
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
        let tls = match self.material.get() {
            Some(material) if member.tls => Some(self.https(material, member)?),
            _ => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{host}:{}{path}", crate::contract::PORT);
        let mut request = http::Request::get(&url).header(PEER_HEADER, &self.me);
        if let Some(token) = token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Empty::new()).map_err(|e| e.to_string())?;
        let exchange = async {
            let response = match &tls {
                Some(client) => client.request(request).await,
                None => self.plain().request(request).await,
            }
            .map_err(|e| error_chain(&e))?;
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

fn connector_for(timeout: std::time::Duration) -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(timeout));
    // The HTTPS connector wraps this one: it must let `https://` through.
    connector.enforce_http(false);
    connector
}

/// An error with its sources: hyper's own message ("client error
/// (Connect)") hides the TLS reason (a certificate naming someone else).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
