//! The operator's side of the instance API ([`crate::contract`]): `GET
//! /status` to observe, and the token-protected `POST`s that carry out an
//! action. The controllers reach the managers through the [`Instances`]
//! trait held in their context, so the reconcile shell can be tested with
//! fake managers; [`HttpInstances`] is the real one: plain HTTP to the pod IP,
//! the bearer token (a per-Database Secret) keeping anyone else from mutating.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use tracing::{Instrument, Span, field, info_span};

use crate::contract::{
    BackupRequest, BackupState, Backups, DropSlotRequest, DropSlotResponse, ErrorBody, Members,
    PORT, PasswordRequest, PasswordResponse, PromoteRequest, ReloadRequest, ReloadResponse,
    RestartResponse, RestoreProgress, RetentionReport, RetentionRequest, Status, SwitchoverRequest,
    SwitchoverResponse, SyncResponse, SyncSettings, Volumes, WalSwitchResponse, path,
};
use crate::error::Category;
use crate::telemetry;

/// A status poll must not hold the reconcile up: a manager that cannot answer
/// within this is treated as not answering (state Unknown).
const STATUS_TIMEOUT: Duration = Duration::from_secs(3);
/// For a manager that did not answer its last read: one cut off (or a node
/// gone) would otherwise hold every pass of a failover up by the full
/// timeout, and the decision rests on the other instances' reports, which go
/// stale meanwhile. A manager that answers at all answers in milliseconds;
/// the instances allow each other as long.
const UNANSWERED_TIMEOUT: Duration = crate::failover::Timing::DEFAULT.request_timeout;
/// Reload and sync wait for `pg_reload_conf()` and a short settle.
const MUTATE_TIMEOUT: Duration = Duration::from_secs(15);
const SLOW_MUTATE_TIMEOUT: Duration = Duration::from_secs(75);

/// A mutating request to an instance manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Reload(ReloadRequest),
    Sync(SyncSettings),
    Restart,
    DropSlot(DropSlotRequest),
    Password(PasswordRequest),
    Backup(BackupRequest),
    WalSwitch,
    Retention(RetentionRequest),
    Members(Members),
    Promote(PromoteRequest),
    Switchover(SwitchoverRequest),
}

impl Call {
    pub fn path(&self) -> &'static str {
        match self {
            Call::Reload(_) => path::RELOAD,
            Call::Sync(_) => path::SYNC,
            Call::Restart => path::RESTART,
            Call::DropSlot(_) => path::DROP_SLOT,
            Call::Password(_) => path::PASSWORD,
            Call::Backup(_) => path::BACKUPS,
            Call::WalSwitch => path::WAL_SWITCH,
            Call::Retention(_) => path::RETENTION,
            Call::Members(_) => path::MEMBERS,
            Call::Promote(_) => path::PROMOTE,
            Call::Switchover(_) => path::SWITCHOVER,
        }
    }

    /// How long an answer may take: a promotion may wait out the lease and
    /// a switchover the old primary's shutdown and the target's catching up.
    fn timeout(&self) -> Duration {
        match self {
            Call::Promote(_) | Call::Switchover(_) => SLOW_MUTATE_TIMEOUT,
            _ => MUTATE_TIMEOUT,
        }
    }

    fn body(&self) -> Result<Bytes, serde_json::Error> {
        let json = match self {
            Call::Reload(request) => serde_json::to_vec(request)?,
            Call::Sync(request) => serde_json::to_vec(request)?,
            Call::DropSlot(request) => serde_json::to_vec(request)?,
            Call::Password(request) => serde_json::to_vec(request)?,
            Call::Backup(request) => serde_json::to_vec(request)?,
            Call::Retention(request) => serde_json::to_vec(request)?,
            Call::Members(request) => serde_json::to_vec(request)?,
            Call::Promote(request) => serde_json::to_vec(request)?,
            Call::Switchover(request) => serde_json::to_vec(request)?,
            Call::Restart | Call::WalSwitch => b"{}".to_vec(),
        };
        Ok(Bytes::from(json))
    }
}

/// A manager's answer to a [`Call`], decoded by the contract's types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Reload(ReloadResponse),
    Sync(SyncResponse),
    Restart(RestartResponse),
    DropSlot(DropSlotResponse),
    Password(PasswordResponse),
    Backup(BackupState),
    WalSwitch(WalSwitchResponse),
    Retention(RetentionReport),
    Members(Members),
    /// The role the instance reports after the promotion.
    Promote(crate::contract::Role),
    Switchover(SwitchoverResponse),
}

/// Why a call to an instance manager failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{method} {url}: {source}")]
    Transport {
        method: Method,
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{method} {url}: no answer within {:.1}s", .timeout.as_secs_f64())]
    Timeout {
        method: Method,
        url: String,
        timeout: Duration,
    },
    /// The manager answered with an error status; `message` is its `error`.
    #[error("{method} {url}: {status}: {message}")]
    Refused {
        method: Method,
        url: String,
        status: StatusCode,
        message: String,
    },
    #[error("{url}: unreadable answer: {source}")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

impl CallError {
    /// A 4xx answer is a refusal that repeating will not change (a bad
    /// request, a wrong token): it waits for a change, as an invalid spec
    /// does. A conflict (409: not running yet) and everything else may pass.
    pub fn category(&self) -> Category {
        match self {
            CallError::Refused { status, .. }
                if status.is_client_error() && *status != StatusCode::CONFLICT =>
            {
                Category::Rejected
            }
            CallError::Decode { .. } => Category::Internal,
            _ => Category::Api,
        }
    }

    /// The manager's own words when it refused, for a condition.
    pub fn refusal(&self) -> Option<(StatusCode, &str)> {
        match self {
            CallError::Refused {
                status, message, ..
            } => Some((*status, message)),
            _ => None,
        }
    }
}

/// How the operator reaches instance managers.
pub trait Instances: Send + Sync {
    /// `GET /status` of the manager at `pod_ip`.
    fn status<'a>(&'a self, pod_ip: &'a str) -> BoxFuture<'a, Result<Status, CallError>>;

    /// `GET /backups`: the base backup runs the manager at `pod_ip` knows.
    fn backups<'a>(&'a self, pod_ip: &'a str) -> BoxFuture<'a, Result<Backups, CallError>>;

    /// `GET /restore`: where the restore bootstrap at `pod_ip` stands.
    fn restore<'a>(&'a self, pod_ip: &'a str) -> BoxFuture<'a, Result<RestoreProgress, CallError>>;

    /// `GET /volumes`: how full the volumes of the manager at `pod_ip` are.
    fn volumes<'a>(&'a self, pod_ip: &'a str) -> BoxFuture<'a, Result<Volumes, CallError>>;

    /// A mutating `call` with the bearer `token`.
    fn call<'a>(
        &'a self,
        pod_ip: &'a str,
        token: &'a str,
        call: Call,
    ) -> BoxFuture<'a, Result<Answer, CallError>>;
}

/// The instance API over HTTP/1.1, pooled.
#[derive(Clone)]
pub struct HttpInstances {
    client: Client<HttpConnector, Full<Bytes>>,
    /// Pod addresses whose last read failed to arrive in time.
    unanswered: Arc<Mutex<HashSet<String>>>,
}

impl Default for HttpInstances {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            unanswered: Arc::default(),
        }
    }
}

/// The span of one call, a child of the reconcile's; [`recorded`] fills in
/// its outcome.
fn call_span(op: &str, pod_ip: &str) -> Span {
    info_span!(
        "instance_call",
        op,
        pod_ip,
        otel.kind = "client",
        http.response.status_code = field::Empty,
        error = field::Empty,
    )
}

impl Instances for HttpInstances {
    fn status<'a>(&'a self, pod_ip: &'a str) -> BoxFuture<'a, Result<Status, CallError>> {
        Box::pin(self.read("status", pod_ip, path::STATUS))
    }

    fn backups<'a>(&'a self, pod_ip: &'a str) -> BoxFuture<'a, Result<Backups, CallError>> {
        Box::pin(self.read("backups", pod_ip, path::BACKUPS))
    }

    fn restore<'a>(&'a self, pod_ip: &'a str) -> BoxFuture<'a, Result<RestoreProgress, CallError>> {
        Box::pin(self.read("restore", pod_ip, path::RESTORE))
    }

    fn volumes<'a>(&'a self, pod_ip: &'a str) -> BoxFuture<'a, Result<Volumes, CallError>> {
        Box::pin(self.read("volumes", pod_ip, path::VOLUMES))
    }

    fn call<'a>(
        &'a self,
        pod_ip: &'a str,
        token: &'a str,
        call: Call,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        let span = call_span(call.path().trim_start_matches('/'), pod_ip);
        Box::pin(
            async move {
                let url = url(pod_ip, call.path());
                let answer = async {
                    let body = call.body().map_err(|source| CallError::Decode {
                        url: url.clone(),
                        source,
                    })?;
                    let timeout = call.timeout();
                    let reply = self
                        .send(Method::POST, &url, Some(token), body, timeout)
                        .await?;
                    Ok(match call {
                        Call::Reload(_) => Answer::Reload(decode(&url, &reply)?),
                        Call::Sync(_) => Answer::Sync(decode(&url, &reply)?),
                        Call::Restart => Answer::Restart(decode(&url, &reply)?),
                        Call::DropSlot(_) => Answer::DropSlot(decode(&url, &reply)?),
                        Call::Password(_) => Answer::Password(decode(&url, &reply)?),
                        Call::Backup(_) => Answer::Backup(decode(&url, &reply)?),
                        Call::WalSwitch => Answer::WalSwitch(decode(&url, &reply)?),
                        Call::Retention(_) => Answer::Retention(decode(&url, &reply)?),
                        Call::Members(_) => Answer::Members(decode(&url, &reply)?),
                        Call::Promote(_) => {
                            let status: Status = decode(&url, &reply)?;
                            Answer::Promote(status.postgres.role)
                        }
                        Call::Switchover(_) => Answer::Switchover(decode(&url, &reply)?),
                    })
                };
                recorded(answer.await)
            }
            .instrument(span),
        )
    }
}

impl HttpInstances {
    fn lock_unanswered(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.unanswered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An open `GET` of `path`, bounded like a status poll.
    async fn read<T: DeserializeOwned>(
        &self,
        op: &str,
        pod_ip: &str,
        path: &str,
    ) -> Result<T, CallError> {
        let url = url(pod_ip, path);
        let timeout = if self.lock_unanswered().contains(pod_ip) {
            UNANSWERED_TIMEOUT
        } else {
            STATUS_TIMEOUT
        };
        async {
            let answer = async {
                let sent = self
                    .send(Method::GET, &url, None, Bytes::new(), timeout)
                    .await;
                let mut unanswered = self.lock_unanswered();
                match &sent {
                    Err(CallError::Timeout { .. } | CallError::Transport { .. }) => {
                        unanswered.insert(pod_ip.to_owned());
                    }
                    _ => {
                        unanswered.remove(pod_ip);
                    }
                }
                drop(unanswered);
                decode(&url, &sent?)
            };
            // Inside the span: a failure marks the call's span, not the reconcile's.
            recorded(answer.await)
        }
        .instrument(call_span(op, pod_ip))
        .await
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, CallError> {
        let transport = |source: Box<dyn std::error::Error + Send + Sync>| CallError::Transport {
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
            Ok::<_, CallError>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| CallError::Timeout {
                method: method.clone(),
                url: url.to_owned(),
                timeout,
            })??;
        Span::current().record("http.response.status_code", status.as_u16());
        if !status.is_success() {
            let message = serde_json::from_slice::<ErrorBody>(&body)
                .map(|e| e.error)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
            return Err(CallError::Refused {
                method,
                url: url.to_owned(),
                status,
                message: message.chars().take(500).collect(),
            });
        }
        Ok(body)
    }
}

fn decode<T: DeserializeOwned>(url: &str, body: &[u8]) -> Result<T, CallError> {
    serde_json::from_slice(body).map_err(|source| CallError::Decode {
        url: url.to_owned(),
        source,
    })
}

/// Marks the current `instance_call` span failed when the call failed.
fn recorded<T>(answer: Result<T, CallError>) -> Result<T, CallError> {
    if let Err(error) = &answer {
        telemetry::record_error(&Span::current(), error);
    }
    answer
}

fn url(pod_ip: &str, path: &str) -> String {
    // An IPv6 pod IP needs brackets in a URL.
    if pod_ip.contains(':') {
        format!("http://[{pod_ip}]:{PORT}{path}")
    } else {
        format!("http://{pod_ip}:{PORT}{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manager that accepts the connection and never answers (cut off
    /// behind a proxy, or hung): the first read waits the full timeout, the
    /// next ones are short, and an answer restores the full one.
    #[tokio::test]
    async fn a_manager_that_did_not_answer_gets_a_short_timeout_next_time() {
        // A loopback address of its own, on the managers' fixed port.
        let ip = "127.0.0.93";
        let Ok(listener) = tokio::net::TcpListener::bind((ip, PORT)).await else {
            panic!("cannot listen on {ip}:{PORT}");
        };
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let instances = HttpInstances::default();
        // The timeout each read used is in its error: no stopwatch, which a
        // slow machine would make lie.
        let first = instances.status(ip).await;
        let Err(CallError::Timeout { timeout: first, .. }) = first else {
            panic!("the first read did not time out: {first:?}");
        };
        assert_eq!(first, STATUS_TIMEOUT);
        let second = instances.status(ip).await;
        let Err(CallError::Timeout {
            timeout: second, ..
        }) = second
        else {
            panic!("the second read did not time out: {second:?}");
        };
        assert!(second < STATUS_TIMEOUT / 2, "{second:?}");
        held.abort();
        assert!(instances.lock_unanswered().contains(ip));
    }

    #[test]
    fn urls_bracket_ipv6_addresses() {
        assert_eq!(url("10.0.0.5", "/status"), "http://10.0.0.5:8000/status");
        assert_eq!(url("fd00::5", "/status"), "http://[fd00::5]:8000/status");
    }

    fn refused(status: StatusCode) -> CallError {
        CallError::Refused {
            method: Method::POST,
            url: "http://10.0.0.5:8000/reload".into(),
            status,
            message: "no".into(),
        }
    }

    #[test]
    fn refusals_wait_for_a_change_and_the_rest_retries() {
        assert_eq!(
            refused(StatusCode::BAD_REQUEST).category(),
            Category::Rejected
        );
        assert_eq!(
            refused(StatusCode::UNAUTHORIZED).category(),
            Category::Rejected
        );
        assert_eq!(refused(StatusCode::CONFLICT).category(), Category::Api);
        assert_eq!(
            refused(StatusCode::SERVICE_UNAVAILABLE).category(),
            Category::Api
        );
    }
}
