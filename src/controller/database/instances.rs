//! The operator's side of the instance API ([`crate::contract`]): `GET
//! /status` to observe, and the token-protected `POST`s that carry out an
//! action. The controllers reach the managers through the [`Instances`]
//! trait held in their context, so the reconcile shell can be tested with
//! fake managers; [`HttpInstances`] is the real one: HTTP to the pod IP, the
//! bearer token (a per-Database Secret) keeping anyone else from mutating.
//!
//! Each call names its [`Target`]: the pod IP and, for a pod that serves TLS,
//! the instance name its certificate must carry and the Database's
//! [`ClientTls`] (the operator's identity and the CAs that issue instance API
//! certificates). Such a call goes over HTTPS presenting the operator's
//! certificate; the rustls configuration is cached by the content of the
//! material, so a renewed identity or a rotated bundle takes effect on the
//! next call. A pod built before TLS is called in plaintext.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use tracing::{Instrument, Span, field, info_span};

use super::client_pool::ClientPool;
use crate::contract::drill::{self, FaultRequest, FaultResponse};
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

/// How the operator proves itself to, and verifies, the instances of one
/// Database over TLS. Read by observe from the operator-only Secret `<db>-ca`
/// (`operator.crt`/`operator.key`) and from the CAs that issue the instance
/// API certificates.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// PEM of every CA that may have issued an instance's `api.crt`: the
    /// current CA, during a CA rotation the old and the new one (the
    /// user's CA in user-CA mode).
    pub trust_pem: String,
    /// The operator's client certificate (`operator.crt`, common name
    /// [`crate::contract::tls::OPERATOR_COMMON_NAME`]).
    pub cert_pem: String,
    /// Its key (`operator.key`).
    pub key_pem: String,
}

impl std::fmt::Debug for ClientTls {
    /// The key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("digest", &hex(&self.digest()))
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Identifies the material: equal digests, the same rustls configuration.
    fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        for part in [&self.trust_pem, &self.cert_pem, &self.key_pem] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        hasher.finalize().into()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where an instance manager is, and how to reach it.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The pod IP.
    pub ip: &'a str,
    /// Set for a pod that serves TLS: HTTPS, the operator's certificate, and
    /// a server certificate that must name `instance`.
    pub tls: Option<TlsTarget<'a>>,
}

/// The TLS half of a [`Target`].
#[derive(Clone, Copy, Debug)]
pub struct TlsTarget<'a> {
    /// The instance name the server's certificate must carry.
    pub instance: &'a str,
    pub client: &'a ClientTls,
}

impl<'a> Target<'a> {
    /// A pod built without TLS (or whose Database's material is not known):
    /// plain HTTP, as before #27.
    pub fn plain(ip: &'a str) -> Self {
        Target { ip, tls: None }
    }

    /// The target of `instance` at `ip`: over TLS when its pod serves TLS
    /// (`lifecycle::observed::Pod.tls`, from the pod as built) and the
    /// Database's client material is known, else plain.
    pub fn of(
        ip: &'a str,
        instance: &'a str,
        pod_tls: bool,
        client: Option<&'a ClientTls>,
    ) -> Self {
        let tls = client
            .filter(|_| pod_tls)
            .map(|client| TlsTarget { instance, client });
        Target { ip, tls }
    }
}

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
    // Drill faults (`controller::drill`), each undone by the manager at its
    // deadline; `seconds: 0` undoes at once.
    Freeze(FaultRequest),
    KillPostgres,
    StoreOutage(FaultRequest),
    Partition(FaultRequest),
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
            Call::Freeze(_) => drill::path::FREEZE,
            Call::KillPostgres => drill::path::KILL_POSTGRES,
            Call::StoreOutage(_) => drill::path::STORE_OUTAGE,
            Call::Partition(_) => drill::path::PARTITION,
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
            Call::Freeze(request) | Call::StoreOutage(request) | Call::Partition(request) => {
                serde_json::to_vec(request)?
            }
            Call::Restart | Call::WalSwitch | Call::KillPostgres => b"{}".to_vec(),
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
    /// A drill fault's state after the call.
    Fault(FaultResponse),
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
    /// The Database's TLS material does not make a client (a key that does
    /// not match the operator's certificate, a bundle without a CA).
    #[error("{url}: the operator's TLS material for {instance}: {source}")]
    Tls {
        url: String,
        instance: String,
        #[source]
        source: Box<crate::tls::Error>,
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
            CallError::Decode { .. } | CallError::Tls { .. } => Category::Internal,
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
    /// `GET /status` of the manager at `to`.
    fn status<'a>(&'a self, to: Target<'a>) -> BoxFuture<'a, Result<Status, CallError>>;

    /// `GET /backups`: the base backup runs the manager at `to` knows.
    fn backups<'a>(&'a self, to: Target<'a>) -> BoxFuture<'a, Result<Backups, CallError>>;

    /// `GET /restore`: where the restore bootstrap at `to` stands.
    fn restore<'a>(&'a self, to: Target<'a>) -> BoxFuture<'a, Result<RestoreProgress, CallError>>;

    /// `GET /volumes`: how full the volumes of the manager at `to` are.
    fn volumes<'a>(&'a self, to: Target<'a>) -> BoxFuture<'a, Result<Volumes, CallError>>;

    /// A mutating `call` with the bearer `token`.
    fn call<'a>(
        &'a self,
        to: Target<'a>,
        token: &'a str,
        call: Call,
    ) -> BoxFuture<'a, Result<Answer, CallError>>;
}

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The instance API over HTTP/1.1 or HTTPS, pooled.
#[derive(Clone)]
pub struct HttpInstances {
    client: Client<HttpConnector, Full<Bytes>>,
    tls: Arc<Mutex<ClientPool<HttpsClient>>>,
    /// Pod addresses whose last read failed to arrive in time.
    unanswered: Arc<Mutex<HashSet<String>>>,
}

/// How long a connection to a manager stays open unused: shorter than the
/// steady requeue (60 s), so a stable Database's instances hold no open
/// connection between its passes (each holds its buffers and TLS state in
/// the operator, thousands of them at scale), while the calls of one pass,
/// and of passes seconds apart, share one.
const IDLE_CONNECTION: Duration = Duration::from_secs(20);

/// A pooled client over `connector` whose idle connections close after
/// [`IDLE_CONNECTION`] (hyper's pool closes none without a timer).
fn pooled<C>(connector: C) -> Client<C, Full<Bytes>>
where
    C: hyper_util::client::legacy::connect::Connect + Clone,
{
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE_CONNECTION)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

fn connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    // The HTTPS connector wraps this one: it must let `https://` through.
    connector.enforce_http(false);
    connector
}

impl Default for HttpInstances {
    fn default() -> Self {
        Self {
            client: pooled(connector()),
            tls: Arc::default(),
            unanswered: Arc::default(),
        }
    }
}

/// The connection a call goes over.
enum Channel {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(HttpsClient),
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
    fn status<'a>(&'a self, to: Target<'a>) -> BoxFuture<'a, Result<Status, CallError>> {
        Box::pin(self.read("status", to, path::STATUS))
    }

    fn backups<'a>(&'a self, to: Target<'a>) -> BoxFuture<'a, Result<Backups, CallError>> {
        Box::pin(self.read("backups", to, path::BACKUPS))
    }

    fn restore<'a>(&'a self, to: Target<'a>) -> BoxFuture<'a, Result<RestoreProgress, CallError>> {
        Box::pin(self.read("restore", to, path::RESTORE))
    }

    fn volumes<'a>(&'a self, to: Target<'a>) -> BoxFuture<'a, Result<Volumes, CallError>> {
        Box::pin(self.read("volumes", to, path::VOLUMES))
    }

    fn call<'a>(
        &'a self,
        to: Target<'a>,
        token: &'a str,
        call: Call,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        let span = call_span(call.path().trim_start_matches('/'), to.ip);
        Box::pin(
            async move {
                let url = url(to, call.path());
                let answer = async {
                    let body = call.body().map_err(|source| CallError::Decode {
                        url: url.clone(),
                        source,
                    })?;
                    let timeout = call.timeout();
                    let reply = self
                        .send(to, Method::POST, &url, Some(token), body, timeout)
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
                        Call::Freeze(_)
                        | Call::KillPostgres
                        | Call::StoreOutage(_)
                        | Call::Partition(_) => Answer::Fault(decode(&url, &reply)?),
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

    /// The channel to `to`: the shared plain client, or the pooled HTTPS
    /// client for its address, name and material.
    fn channel(&self, to: Target<'_>, url: &str) -> Result<Channel, CallError> {
        let Some(tls) = to.tls else {
            return Ok(Channel::Plain(self.client.clone()));
        };
        let digest = tls.client.digest();
        let key = (to.ip.to_owned(), tls.instance.to_owned());
        let mut clients = self
            .tls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if let Some(client) = clients.get(&key, &digest, now) {
            return Ok(Channel::Tls(client));
        }
        let config = crate::tls::rustls_config::client_config(
            &tls.client.trust_pem,
            Some((&tls.client.cert_pem, &tls.client.key_pem)),
            tls.instance,
        )
        .map_err(|source| CallError::Tls {
            url: url.to_owned(),
            instance: tls.instance.to_owned(),
            source: Box::new(source),
        })?;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(Arc::unwrap_or_clone(config))
            .https_only()
            .enable_http1()
            .wrap_connector(connector());
        let client = pooled(https);
        clients.insert(key, digest, client.clone(), now);
        Ok(Channel::Tls(client))
    }

    /// An open `GET` of `path`, bounded like a status poll.
    async fn read<T: DeserializeOwned>(
        &self,
        op: &str,
        to: Target<'_>,
        path: &str,
    ) -> Result<T, CallError> {
        let pod_ip = to.ip;
        let url = url(to, path);
        let timeout = if self.lock_unanswered().contains(pod_ip) {
            UNANSWERED_TIMEOUT
        } else {
            STATUS_TIMEOUT
        };
        async {
            let answer = async {
                let sent = self
                    .send(to, Method::GET, &url, None, Bytes::new(), timeout)
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
        to: Target<'_>,
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
        let channel = self.channel(to, url)?;
        let exchange = async {
            let response = match &channel {
                Channel::Plain(client) => client.request(request).await,
                Channel::Tls(client) => client.request(request).await,
            }
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

fn url(to: Target<'_>, path: &str) -> String {
    let scheme = if to.tls.is_some() { "https" } else { "http" };
    let ip = to.ip;
    // An IPv6 pod IP needs brackets in a URL.
    if ip.contains(':') {
        format!("{scheme}://[{ip}]:{PORT}{path}")
    } else {
        format!("{scheme}://{ip}:{PORT}{path}")
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
        let first = instances.status(Target::plain(ip)).await;
        let Err(CallError::Timeout { timeout: first, .. }) = first else {
            panic!("the first read did not time out: {first:?}");
        };
        assert_eq!(first, STATUS_TIMEOUT);
        let second = instances.status(Target::plain(ip)).await;
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
        let plain = |ip| url(Target::plain(ip), "/status");
        assert_eq!(plain("10.0.0.5"), "http://10.0.0.5:8000/status");
        assert_eq!(plain("fd00::5"), "http://[fd00::5]:8000/status");
        let client = ClientTls {
            trust_pem: String::new(),
            cert_pem: String::new(),
            key_pem: String::new(),
        };
        let tls = |ip| url(Target::of(ip, "pg-1", true, Some(&client)), "/status");
        assert_eq!(tls("10.0.0.5"), "https://10.0.0.5:8000/status");
        assert_eq!(tls("fd00::5"), "https://[fd00::5]:8000/status");
    }

    #[test]
    fn a_pod_is_called_over_tls_only_when_it_serves_tls_and_the_material_is_known() {
        let client = ClientTls {
            trust_pem: "ca".into(),
            cert_pem: "cert".into(),
            key_pem: "key".into(),
        };
        let of = |pod_tls, client| Target::of("10.0.0.5", "pg-1", pod_tls, client).tls;
        let tls = of(true, Some(&client)).expect("TLS");
        assert_eq!(tls.instance, "pg-1");
        assert!(of(false, Some(&client)).is_none(), "a pod built before TLS");
        assert!(of(true, None).is_none(), "no material");
        assert!(!format!("{client:?}").contains("key"), "{client:?}");
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
