//! The manager's HTTP API. Mutations need `Authorization: Bearer
//! $TUSK_INSTANCE_TOKEN`. Without TLS reads are open (the operator and the
//! other instances poll them); with TLS ([`tls`]) only the probes and the
//! metrics are, the rest needs a client certificate of the operator or of an
//! instance of the same Database ([`access`]).
//!
//! The drill faults (`/drill/*`, [`crate::contract::drill`]) are mutations
//! like the others: token, and with TLS a member's certificate.
//!
//! This file is the routing and the tracing of each operation; the handlers
//! only take what the request holds through the [`extract`]ors, call the
//! operation in [`ops`] and answer its result, or its [`ApiError`], whose
//! category fixes the status.

mod access;
mod error;
mod extract;
mod ops;
mod tls;
#[cfg(test)]
mod tls_tests;

pub use tls::MaterialRx;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{Instrument, Level, Span};

use crate::contract::drill::{FaultRequest, path as drill_path};
use crate::contract::{
    BackupRequest, DropSlotRequest, Members, PEER_HEADER, PasswordRequest, PeerStatus,
    PromoteRequest, ReloadRequest, RetentionRequest, SwitchoverRequest, SyncSettings, path,
};

use super::{Error, Shared};

use error::ApiError;
use extract::{Authorized, JsonBody};

type AppState = Arc<Shared>;
/// A mutation's authorization, checked inside the operation's span.
type Auth = Result<Authorized, ApiError>;

/// Serves the API on `listener` until `stop`: over TLS with `material`
/// (see [`tls`]), in plaintext without.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: AppState,
    material: Option<MaterialRx>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), Error> {
    tracing::info!(
        addr = ?listener.local_addr().ok(),
        tls = material.is_some(),
        "serving the instance API"
    );
    if let Some(material) = material {
        let router = router(shared.clone()).layer(axum::middleware::from_fn_with_state(
            shared,
            access::require,
        ));
        return tls::serve(listener, router, material, stop).await;
    }
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stop| *stop).await;
        })
        .await
        .map_err(Error::Serve)
}

fn router(shared: AppState) -> Router {
    Router::new()
        .route(path::HEALTHZ, get(|| async { "ok" }))
        .route(path::READYZ, get(readyz))
        .route(path::STATUS, get(status))
        .route(path::METRICS, get(super::metrics::serve))
        .route(path::RELOAD, post(reload))
        .route(path::PROMOTE, post(promote))
        .route(path::SYNC, post(sync))
        .route(path::RESTART, post(restart))
        .route(path::DROP_SLOT, post(drop_slot))
        .route(path::PASSWORD, post(password))
        .route(path::BACKUPS, post(start_backup).get(backups))
        .route(path::WAL_SWITCH, post(wal_switch))
        .route(path::RETENTION, post(retention))
        .route(path::RESTORE, get(restore_progress))
        .route(path::PEER, get(peer))
        .route(path::MEMBERS, post(members))
        .route(path::SWITCHOVER, post(switchover))
        .route(path::VOLUMES, get(volumes))
        .route(drill_path::FREEZE, post(drill_freeze))
        .route(drill_path::KILL_POSTGRES, post(drill_kill_postgres))
        .route(drill_path::STORE_OUTAGE, post(drill_store_outage))
        .route(drill_path::PARTITION, post(drill_partition))
        .with_state(shared)
}

/// The span of one API operation, named `instance.<operation>`; [`traced`]
/// fills in its outcome.
macro_rules! operation_span {
    ($level:expr, $name:literal) => {
        tracing::span!(
            $level,
            $name,
            otel.kind = "server",
            http.response.status_code = tracing::field::Empty,
            error = tracing::field::Empty,
        )
    };
}

/// Runs one operation inside `span`, which continues the caller's trace when
/// the request carries a W3C `traceparent` (the operator's reconcile does),
/// and records the answer's status on it: a 5xx marks the span failed.
async fn traced<R: IntoResponse>(
    span: Span,
    headers: &HeaderMap,
    operation: impl Future<Output = Result<R, ApiError>>,
) -> Response {
    crate::telemetry::continue_trace(&span, headers);
    let response = operation.instrument(span.clone()).await.into_response();
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        crate::telemetry::record_error(&span, &status);
    }
    response
}

/// Runs a role change to its end even when the caller goes away. Axum drops
/// a handler whose client disconnected, and a promotion dropped between
/// taking the primary lease and `pg_promote()` leaves the lease held and no
/// primary until another operator leader asks again: with the operator
/// killed mid-failover that was its 15 s leader lease. The caller, when it
/// is still there, gets the answer.
async fn detached<T, F>(
    shared: AppState,
    operation: impl FnOnce(AppState) -> F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, ApiError>> + Send + 'static,
{
    tokio::spawn(operation(shared).in_current_span())
        .await
        .map_err(|error| ApiError::internal(format!("the operation did not finish: {error}")))?
}

/// Kubelet probes this every few seconds: its span is at debug level, so it
/// reaches a trace backend only when `RUST_LOG` asks for it.
async fn readyz(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    let span = operation_span!(Level::DEBUG, "instance.readyz");
    traced(span, &headers, async {
        Ok::<_, ApiError>(match ops::ready(&shared).await {
            Ok(()) => (StatusCode::OK, "ok".to_owned()),
            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
        })
    })
    .await
}

async fn status(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    let span = operation_span!(Level::INFO, "instance.status");
    traced(span, &headers, async {
        ops::status(&shared).await.map(Json)
    })
    .await
}

async fn reload(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<ReloadRequest>,
) -> Response {
    let span = operation_span!(Level::INFO, "instance.reload");
    traced(span, &headers, async {
        auth?;
        ops::reload(&shared, body.decode_or_default()?)
            .await
            .map(Json)
    })
    .await
}

async fn promote(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<PromoteRequest>,
) -> Response {
    let span = operation_span!(Level::INFO, "instance.promote");
    traced(span, &headers, async {
        auth?;
        let request = body.decode_or_default()?;
        detached(shared, move |shared| async move {
            ops::promote(&shared, request).await
        })
        .await
        .map(Json)
    })
    .await
}

/// The heartbeat is called every second by every peer: no span of its own.
async fn peer(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
) -> Result<Json<PeerStatus>, ApiError> {
    auth?;
    let caller = headers.get(PEER_HEADER).and_then(|v| v.to_str().ok());
    Ok(Json(ops::peer(&shared, caller)))
}

async fn members(
    State(shared): State<AppState>,
    auth: Auth,
    body: JsonBody<Members>,
) -> Result<Json<Members>, ApiError> {
    auth?;
    Ok(Json(ops::members(&shared, body.decode()?)))
}

async fn switchover(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<SwitchoverRequest>,
) -> Response {
    let span = operation_span!(Level::INFO, "instance.switchover");
    traced(span, &headers, async {
        auth?;
        let request = body.decode()?;
        detached(shared, move |shared| async move {
            ops::switchover(&shared, request).await
        })
        .await
        .map(Json)
    })
    .await
}

async fn sync(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<SyncSettings>,
) -> Response {
    let span = operation_span!(Level::INFO, "instance.sync");
    traced(span, &headers, async {
        auth?;
        ops::sync(&shared, body.decode()?).await.map(Json)
    })
    .await
}

async fn restart(State(shared): State<AppState>, headers: HeaderMap, auth: Auth) -> Response {
    let span = operation_span!(Level::INFO, "instance.restart");
    traced(span, &headers, async {
        auth?;
        ops::restart(&shared).map(|answer| (StatusCode::ACCEPTED, Json(answer)))
    })
    .await
}

async fn drop_slot(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<DropSlotRequest>,
) -> Response {
    let span = operation_span!(Level::INFO, "instance.drop_slot");
    traced(span, &headers, async {
        auth?;
        ops::drop_slot(&shared, body.decode()?).await.map(Json)
    })
    .await
}

async fn password(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<PasswordRequest>,
) -> Response {
    let span = operation_span!(Level::INFO, "instance.password");
    traced(span, &headers, async {
        auth?;
        ops::password(&shared, body.decode()?).await.map(Json)
    })
    .await
}

async fn start_backup(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<BackupRequest>,
) -> Response {
    let span = operation_span!(Level::INFO, "instance.backup");
    traced(span, &headers, async {
        auth?;
        ops::start_backup(&shared, body.decode()?).map(|state| (StatusCode::ACCEPTED, Json(state)))
    })
    .await
}

async fn backups(State(shared): State<AppState>) -> Response {
    Json(ops::backups(&shared)).into_response()
}

/// Polled by the operator every pass: no span of its own (a `statvfs`).
async fn volumes(State(shared): State<AppState>) -> Response {
    ops::volumes(&shared).map(Json).into_response()
}

async fn restore_progress(State(shared): State<AppState>) -> Response {
    ops::restore_progress(&shared).map(Json).into_response()
}

async fn wal_switch(State(shared): State<AppState>, headers: HeaderMap, auth: Auth) -> Response {
    let span = operation_span!(Level::INFO, "instance.wal_switch");
    traced(span, &headers, async {
        auth?;
        ops::wal_switch(&shared).await.map(Json)
    })
    .await
}

async fn retention(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<RetentionRequest>,
) -> Response {
    let span = operation_span!(Level::INFO, "instance.retention");
    traced(span, &headers, async {
        auth?;
        ops::retention(&shared, body.decode()?).await.map(Json)
    })
    .await
}

async fn drill_freeze(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<FaultRequest>,
) -> Response {
    let span = operation_span!(Level::WARN, "instance.drill_freeze");
    traced(span, &headers, async {
        auth?;
        ops::drill_freeze(&shared, body.decode()?).map(Json)
    })
    .await
}

async fn drill_kill_postgres(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
) -> Response {
    let span = operation_span!(Level::WARN, "instance.drill_kill_postgres");
    traced(span, &headers, async {
        auth?;
        ops::drill_kill_postgres(&shared).map(Json)
    })
    .await
}

async fn drill_partition(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<FaultRequest>,
) -> Response {
    let span = operation_span!(Level::WARN, "instance.drill_partition");
    traced(span, &headers, async {
        auth?;
        Ok::<_, ApiError>(Json(ops::drill_partition(&shared, &body.decode()?)))
    })
    .await
}

async fn drill_store_outage(
    State(shared): State<AppState>,
    headers: HeaderMap,
    auth: Auth,
    body: JsonBody<FaultRequest>,
) -> Response {
    let span = operation_span!(Level::WARN, "instance.drill_store_outage");
    traced(span, &headers, async {
        auth?;
        ops::drill_store_outage(&shared, body.decode()?).map(Json)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    use axum::body::Bytes;

    use super::*;
    use crate::instance::InstanceConfig;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        config: InstanceConfig,
    }

    /// The operator's connection dropping mid-promotion cancels the handler;
    /// the role change it started must still finish.
    #[tokio::test]
    async fn a_detached_operation_outlives_its_caller() {
        let (finished_tx, finished_rx) = tokio::sync::oneshot::channel();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let caller = tokio::spawn(detached(
            shared("/nonexistent/pgdata", None),
            move |_| async move {
                let _ = started_tx.send(());
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                let _ = finished_tx.send(());
                Ok::<_, ApiError>(())
            },
        ));
        started_rx.await.expect("the operation started");
        caller.abort();
        assert!(caller.await.is_err_and(|e| e.is_cancelled()));
        tokio::time::timeout(std::time::Duration::from_secs(5), finished_rx)
            .await
            .expect("the operation went on after its caller was cancelled")
            .expect("the operation finished");
    }

    /// An API on a loopback port for an instance with `token` (no
    /// PostgreSQL behind it: only what answers without one is asked).
    async fn api(token: Option<&str>) -> (String, watch::Sender<bool>) {
        let (listener, url) = loopback("127.0.0.1").await;
        (url, serve_on(listener, token, None))
    }

    /// A listener on `ip` (port 0: any) and its `http://` URL.
    pub(super) async fn loopback(ip: &str) -> (TcpListener, String) {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        (listener, url)
    }

    /// Serves the API of instance `pg-1` of Database `pg` on `listener`,
    /// over TLS when `material` is given.
    pub(super) fn serve_on(
        listener: TcpListener,
        token: Option<&str>,
        material: Option<MaterialRx>,
    ) -> watch::Sender<bool> {
        serve_shared(listener, shared("/nonexistent/pgdata", token), material)
    }

    /// The state of instance `pg-1` of Database `pg` on `pgdata`.
    fn shared(pgdata: &str, token: Option<&str>) -> AppState {
        let pgdata = format!("--pgdata={pgdata}");
        let mut args = vec![
            "tusk",
            "--instance=pg-1",
            "--database=pg",
            &pgdata,
            "--bootstrap=initdb",
            "--superuser-password=s",
            "--replication-password=r",
        ];
        let token = token.map(|t| format!("--token={t}"));
        args.extend(token.as_deref());
        let config = Args::try_parse_from(args).expect("arguments").config;
        Arc::new(Shared::new(
            config,
            PathBuf::from("/nonexistent/bin"),
            Default::default(),
        ))
    }

    fn serve_shared(
        listener: TcpListener,
        shared: AppState,
        material: Option<MaterialRx>,
    ) -> watch::Sender<bool> {
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(serve(listener, shared, material, stopped));
        stop
    }

    /// Status, `WWW-Authenticate` and body of one request.
    async fn call(
        method: &str,
        url: &str,
        bearer: Option<&str>,
        body: &str,
    ) -> (u16, Option<String>, String) {
        let mut request = http::Request::builder().method(method).uri(url);
        if let Some(token) = bearer {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        let client = Client::builder(TokioExecutor::new()).build_http();
        let response = client.request(request).await.expect("response");
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .map(|v| v.to_str().expect("ascii").to_owned());
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            challenge,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    #[tokio::test]
    async fn mutations_answer_as_before() {
        let (url, _stop) = api(None).await;
        assert_eq!(
            call("POST", &format!("{url}{}", path::MEMBERS), Some("t"), "{}").await,
            (
                403,
                None,
                r#"{"error":"mutating endpoints are disabled: TUSK_INSTANCE_TOKEN is not set"}"#
                    .to_owned()
            )
        );
        let (url, _stop) = api(Some("t0ken")).await;
        let members = format!("{url}{}", path::MEMBERS);
        // The token is checked before the body is read.
        assert_eq!(
            call("POST", &members, Some("wrong"), "not json").await,
            (
                401,
                Some("Bearer".to_owned()),
                r#"{"error":"missing or wrong bearer token"}"#.to_owned()
            )
        );
        let (status, challenge, body) = call("POST", &members, Some("t0ken"), "not json").await;
        assert_eq!((status, challenge), (400, None));
        assert!(body.starts_with(r#"{"error":"invalid body: "#), "{body}");
        let body = r#"{"members":[{"name":"pg-2","address":"10.0.0.2"},{"name":"pg-1","address":"10.0.0.1"}]}"#;
        assert_eq!(
            call("POST", &members, Some("t0ken"), body).await,
            (
                200,
                None,
                r#"{"members":[{"name":"pg-1","address":"10.0.0.1","tls":false},{"name":"pg-2","address":"10.0.0.2","tls":false}]}"#
                    .to_owned()
            )
        );
        let (status, _, body) = call(
            "POST",
            &format!("{url}{}", path::RESTART),
            Some("t0ken"),
            "",
        )
        .await;
        assert_eq!(
            (status, body.as_str()),
            (409, r#"{"error":"postgres is not running"}"#)
        );
    }

    #[tokio::test]
    async fn reads_answer_as_before() {
        let (url, _stop) = api(Some("t0ken")).await;
        assert_eq!(
            call("GET", &format!("{url}{}", path::RESTORE), None, "").await,
            (
                404,
                None,
                r#"{"error":"this instance is not restoring"}"#.to_owned()
            )
        );
        let (status, _, body) = call("GET", &format!("{url}{}", path::READYZ), None, "").await;
        assert_eq!((status, body.as_str()), (503, "postgres is not running"));
        let (status, _, body) = call("GET", &format!("{url}{}", path::STATUS), None, "").await;
        assert_eq!(status, 503);
        assert!(
            body.starts_with(r#"{"error":"PostgreSQL is not available: "#),
            "{body}"
        );
    }

    /// The state letter of `/proc/<pid>/stat` (`T`: stopped).
    fn proc_state(pid: u32) -> String {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        crate::instance::drill::Process::parse(&stat)
            .expect("parses")
            .state
    }

    /// Polls `what` every 50 ms for up to 20 s.
    async fn eventually(what: impl Fn() -> bool) -> bool {
        for _ in 0..400 {
            if what() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    }

    #[tokio::test]
    async fn drill_faults_are_mutations_and_need_a_running_postgres() {
        let (url, _stop) = api(Some("t0ken")).await;
        for path in [
            crate::contract::drill::path::FREEZE,
            crate::contract::drill::path::KILL_POSTGRES,
        ] {
            let at = format!("{url}{path}");
            let (status, _, _) = call("POST", &at, None, r#"{"seconds":5}"#).await;
            assert_eq!(status, 401, "{path}");
            assert_eq!(
                call("POST", &at, Some("t0ken"), r#"{"seconds":5}"#).await,
                (
                    409,
                    None,
                    r#"{"error":"PostgreSQL is not running"}"#.to_owned()
                ),
                "{path}"
            );
        }
        let (status, _, body) = call(
            "POST",
            &format!("{url}{}", crate::contract::drill::path::FREEZE),
            Some("t0ken"),
            "{}",
        )
        .await;
        assert_eq!(status, 400, "{body}");
    }

    /// A freeze stops the postmaster (here a `sleep` standing in for it)
    /// until its deadline, and the manager continues it by itself; a store
    /// outage holds until its deadline and ends early on `seconds: 0`.
    #[tokio::test]
    async fn faults_are_undone_at_their_deadline_or_on_request() {
        let dir = std::env::temp_dir().join(format!("tusk-drill-api-{}", std::process::id()));
        let pgdata = dir.join("pgdata");
        std::fs::create_dir_all(&pgdata).expect("mkdir");
        let state = shared(pgdata.to_str().expect("utf-8"), Some("t0ken"));
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        state.postmaster.store(
            i32::try_from(pid).expect("pid"),
            std::sync::atomic::Ordering::SeqCst,
        );
        state
            .running
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let (listener, url) = loopback("127.0.0.1").await;
        let _stop = serve_shared(listener, state.clone(), None);
        let freeze = format!("{url}{}", crate::contract::drill::path::FREEZE);

        let (status, _, body) = call("POST", &freeze, Some("t0ken"), r#"{"seconds":1}"#).await;
        assert_eq!(status, 200, "{body}");
        let answer: crate::contract::drill::FaultResponse =
            serde_json::from_str(&body).expect("a FaultResponse");
        assert!(answer.active && answer.until.is_some(), "{answer:?}");
        assert_eq!(answer.pids, vec![pid]);
        assert_eq!(proc_state(pid), "T", "stopped by the freeze");
        let report = state.drill.report(&pgdata, std::time::SystemTime::now());
        assert_eq!(
            report.and_then(|r| r.freeze).map(|f| f.pids),
            Some(vec![pid])
        );
        assert!(
            eventually(|| proc_state(pid) != "T").await,
            "the manager continues it at the deadline by itself"
        );
        assert_eq!(
            state.drill.report(&pgdata, std::time::SystemTime::now()),
            None
        );

        // Undone on request before its deadline.
        let (status, _, body) = call("POST", &freeze, Some("t0ken"), r#"{"seconds":600}"#).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(proc_state(pid), "T");
        let (status, _, body) = call("POST", &freeze, Some("t0ken"), r#"{"seconds":0}"#).await;
        assert_eq!((status, body.as_str()), (200, r#"{"active":false}"#));
        assert_ne!(proc_state(pid), "T", "continued at once");

        let outage = format!("{url}{}", crate::contract::drill::path::STORE_OUTAGE);
        let (status, _, body) = call("POST", &outage, Some("t0ken"), r#"{"seconds":1}"#).await;
        assert_eq!(status, 200, "{body}");
        assert!(crate::wal::outage::active(&pgdata, std::time::SystemTime::now()).is_some());
        assert!(
            state
                .drill
                .report(&pgdata, std::time::SystemTime::now())
                .is_some_and(|r| r.store_outage.is_some())
        );
        assert!(
            eventually(|| !crate::wal::outage::file(&pgdata).exists()).await,
            "the outage file is removed at the deadline"
        );
        let (status, _, _) = call("POST", &outage, Some("t0ken"), r#"{"seconds":600}"#).await;
        assert_eq!(status, 200);
        let (status, _, body) = call("POST", &outage, Some("t0ken"), r#"{"seconds":0}"#).await;
        assert_eq!((status, body.as_str()), (200, r#"{"active":false}"#));
        assert!(!crate::wal::outage::file(&pgdata).exists());

        // A partition is on record until its deadline or a clear; without
        // an API server address in the environment nothing is cut.
        let partition = format!("{url}{}", crate::contract::drill::path::PARTITION);
        let (status, _, body) = call("POST", &partition, Some("t0ken"), r#"{"seconds":600}"#).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            state
                .drill
                .report(&pgdata, std::time::SystemTime::now())
                .is_some_and(|r| r.partition.is_some())
        );
        let (status, _, body) = call("POST", &partition, Some("t0ken"), r#"{"seconds":0}"#).await;
        assert_eq!((status, body.as_str()), (200, r#"{"active":false}"#));
        assert!(
            state
                .drill
                .report(&pgdata, std::time::SystemTime::now())
                .is_none_or(|r| r.partition.is_none())
        );
        let (status, _, _) = call("POST", &partition, None, r#"{"seconds":5}"#).await;
        assert_eq!(status, 401, "a partition needs the bearer token");

        let kill = format!("{url}{}", crate::contract::drill::path::KILL_POSTGRES);
        let (status, _, body) = call("POST", &kill, Some("t0ken"), "").await;
        assert_eq!(status, 200, "{body}");
        let exit = child.wait().expect("wait");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&exit),
            Some(9),
            "SIGKILL"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
