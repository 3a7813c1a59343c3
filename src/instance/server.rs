//! The manager's HTTP API. Reads are open (the operator and the other instances
//! poll them); mutations need `Authorization: Bearer $TUSK_INSTANCE_TOKEN`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{Instrument, Level, Span};

use crate::contract::{
    API_VERSION, BackupRequest, Backups, Change, Credential, DropSlotRequest, DropSlotResponse,
    ErrorBody, Members, PEER_HEADER, PasswordRequest, PasswordResponse, PromoteRequest,
    ReloadRequest, ReloadResponse, RestartResponse, RetentionRequest, Role, Status,
    SwitchoverRequest, SyncResponse, SyncSettings, WalSwitchResponse, path,
};
use crate::postgres::config::{self, SyncReplication};
use crate::postgres::params;

use super::sql;
use super::{Error, Shared, files, is_set};

type AppState = Arc<Shared>;

pub(crate) async fn serve(
    listener: TcpListener,
    shared: AppState,
    mut stop: watch::Receiver<bool>,
) -> Result<(), Error> {
    tracing::info!(addr = ?listener.local_addr().ok(), "serving the instance API");
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
        .with_state(shared)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(ErrorBody {
            error: message.into(),
        }),
    )
        .into_response()
}

fn unavailable(err: impl std::fmt::Display) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("PostgreSQL is not available: {err}"),
    )
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
async fn traced(
    span: Span,
    headers: &HeaderMap,
    operation: impl Future<Output = Response>,
) -> Response {
    crate::telemetry::continue_trace(&span, headers);
    let response = operation.instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        crate::telemetry::record_error(&span, &status);
    }
    response
}

/// Kubelet probes this every few seconds: its span is at debug level, so it
/// reaches a trace backend only when `RUST_LOG` asks for it.
async fn readyz(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    let span = operation_span!(Level::DEBUG, "instance.readyz");
    traced(span, &headers, async {
        if !is_set(&shared.running) {
            return (StatusCode::SERVICE_UNAVAILABLE, "postgres is not running").into_response();
        }
        let client = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
            Ok(client) => client,
            Err(err) => return (StatusCode::SERVICE_UNAVAILABLE, err.to_string()).into_response(),
        };
        match sql::in_recovery(&client).await {
            // A replica is ready once it accepts (read-only) connections in recovery.
            Ok(true) => (StatusCode::OK, "ok").into_response(),
            Ok(false) if is_set(&shared.setup_done) => (StatusCode::OK, "ok").into_response(),
            Ok(false) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "primary roles and database are not set up yet",
            )
                .into_response(),
            Err(err) => (StatusCode::SERVICE_UNAVAILABLE, err.to_string()).into_response(),
        }
    })
    .await
}

async fn current_status(shared: &Shared) -> Result<Status, Response> {
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(unavailable)?;
    let mut postgres = sql::status(&client).await.map_err(unavailable)?;
    if let Some(archiver) = &mut postgres.archiver
        && archiver.failing()
    {
        archiver.last_error =
            std::fs::read_to_string(crate::wal::archive_error_file(&shared.config.pgdata))
                .ok()
                .map(|text| text.trim().to_owned())
                .filter(|text| !text.is_empty());
    }
    let ready =
        is_set(&shared.running) && (postgres.role == Role::Replica || is_set(&shared.setup_done));
    Ok(Status {
        api_version: API_VERSION,
        ready,
        instance: shared.config.instance.clone(),
        pod: shared.config.pod_name.clone(),
        namespace: shared.config.pod_namespace.clone(),
        postgres,
        parameters: shared.parameters(),
        sync: shared.sync().map(|sync| SyncSettings {
            min: sync.min,
            standbys: sync.standbys,
        }),
        ha: shared.ha.status(),
    })
}

async fn status(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    let span = operation_span!(Level::INFO, "instance.status");
    traced(span, &headers, async {
        match current_status(&shared).await {
            Ok(status) => Json(status).into_response(),
            Err(response) => response,
        }
    })
    .await
}

/// Why a mutating request is refused.
enum Refusal {
    NoTokenConfigured,
    BadToken,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::NoTokenConfigured => error(
                StatusCode::FORBIDDEN,
                "mutating endpoints are disabled: TUSK_INSTANCE_TOKEN is not set",
            ),
            Refusal::BadToken => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                Json(ErrorBody {
                    error: "missing or wrong bearer token".to_owned(),
                }),
            )
                .into_response(),
        }
    }
}

/// Check the bearer token in constant time. Without a configured token nothing
/// may mutate: an unset Secret must not mean "open".
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(expected) = &shared.config.token else {
        return Err(Refusal::NoTokenConfigured);
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match presented {
        Some(token) if constant_time_eq(token.as_bytes(), expected.expose().as_bytes()) => Ok(()),
        _ => Err(Refusal::BadToken),
    }
}

/// Equal-length inputs are compared without an early exit, so the time taken does
/// not reveal how much of a guess was right. (The length is not secret.)
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `POST /reload`: re-render the configuration (optionally with new parameters)
/// and `pg_reload_conf()`.
async fn reload(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let span = operation_span!(Level::INFO, "instance.reload");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let request = if body.iter().all(u8::is_ascii_whitespace) {
            ReloadRequest::default()
        } else {
            match serde_json::from_slice::<ReloadRequest>(&body) {
                Ok(request) => request,
                Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
            }
        };
        let _guard = shared.config_lock.lock().await;
        let old = shared.parameters();
        let change = match request.parameters {
            Some(new) => {
                if let Err(err) = config::validate_parameters(&new) {
                    return error(StatusCode::BAD_REQUEST, err.to_string());
                }
                let change = params::classify(&old, &new);
                shared.set_parameters(new);
                change
            }
            None => Change::Nothing,
        };
        if let Err(err) = files::write_config(&shared) {
            shared.set_parameters(old);
            return error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string());
        }
        let client = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
            Ok(client) => client,
            Err(err) => return unavailable(err),
        };
        if let Err(err) = sql::reload(&client).await {
            return unavailable(err);
        }
        // pg_reload_conf() only signals the postmaster; give it a moment before
        // asking whether a restart is pending.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let pending_restart = sql::pending_restart(&client).await.unwrap_or(false);
        tracing::info!(?change, pending_restart, "configuration reloaded");
        Json(ReloadResponse {
            change,
            pending_restart,
        })
        .into_response()
    })
    .await
}

/// `POST /promote`: promote this replica and wait until it accepts writes, then
/// re-render its configuration as a primary. Promoting a primary is a no-op.
async fn promote(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let span = operation_span!(Level::INFO, "instance.promote");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let request = if body.iter().all(u8::is_ascii_whitespace) {
            PromoteRequest::default()
        } else {
            match serde_json::from_slice::<PromoteRequest>(&body) {
                Ok(request) => request,
                Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
            }
        };
        let _guard = shared.config_lock.lock().await;
        let client = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
            Ok(client) => client,
            Err(err) => return unavailable(err),
        };
        match sql::in_recovery(&client).await {
            Ok(true) => {}
            Ok(false) => {
                return match current_status(&shared).await {
                    Ok(status) => Json(status).into_response(),
                    Err(response) => response,
                };
            }
            Err(err) => return unavailable(err),
        }
        // The lease first: a replica promotes only once the lease write that
        // names it succeeded, so two primaries can never both hold it.
        if shared.ha.enabled()
            && let Err(why) = shared.ha.take_for_promotion().await
        {
            return error(
                StatusCode::CONFLICT,
                format!("not promoting: cannot take the primary lease: {why}"),
            );
        }
        if let Some(sync) = request.sync {
            shared.set_sync((sync.min > 0).then_some(SyncReplication {
                min: sync.min,
                standbys: sync.standbys,
            }));
        }
        tracing::info!("promoting");
        match sql::promote(&client).await {
            Ok(true) => {}
            Ok(false) => {
                return error(
                    StatusCode::GATEWAY_TIMEOUT,
                    "promotion did not finish within 60 seconds",
                );
            }
            Err(err) => return error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
        }
        // PostgreSQL removed standby.signal; drop primary_conninfo and the slot name.
        if let Err(err) = files::write_config(&shared) {
            return error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string());
        }
        if let Err(err) = sql::reload(&client).await {
            return unavailable(err);
        }
        let slots: Vec<String> = shared
            .ha
            .members()
            .iter()
            .filter(|m| m.name != shared.config.instance)
            .map(|m| crate::postgres::identifiers::slot_name(&m.name))
            .collect();
        sql::ensure_slots(&client, &slots).await;
        // The new primary runs the role setup (passwords may have rotated); readiness
        // waits for it, as after a bootstrap.
        shared.setup_done.store(false, Ordering::SeqCst);
        match current_status(&shared).await {
            Ok(status) if status.postgres.role == Role::Primary => Json(status).into_response(),
            Ok(status) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "promotion returned but the instance is still a {:?}",
                    status.postgres.role
                ),
            ),
            Err(response) => response,
        }
    })
    .await
}

/// `GET /peer`: the heartbeat between instances. The caller names itself;
/// the call counts as contact with it both ways.
async fn peer(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(refusal) = authorize(&shared, &headers) {
        return refusal.into_response();
    }
    if let Some(caller) = headers.get(PEER_HEADER).and_then(|v| v.to_str().ok()) {
        shared.ha.heard_from(caller, None);
    }
    Json(shared.ha.peer_status(super::ha::primary_data(&shared))).into_response()
}

/// `POST /members`: who the other instances are and where.
async fn members(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refusal) = authorize(&shared, &headers) {
        return refusal.into_response();
    }
    let request = match serde_json::from_slice::<Members>(&body) {
        Ok(request) => request,
        Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
    };
    let mut members = request.members;
    members.sort();
    shared.ha.set_members(members.clone());
    Json(Members { members }).into_response()
}

/// `POST /switchover`: on the primary, hand the role to a caught-up replica.
/// Answers once the old primary stopped cleanly and the lease is the
/// target's; the operator then promotes the target.
async fn switchover(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let span = operation_span!(Level::INFO, "instance.switchover");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let request = match serde_json::from_slice::<SwitchoverRequest>(&body) {
            Ok(request) => request,
            Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
        };
        if !shared.ha.enabled() {
            return error(StatusCode::CONFLICT, "switchover needs the primary lease");
        }
        if !super::ha::primary_data(&shared) || !is_set(&shared.running) {
            return error(StatusCode::CONFLICT, "not a running primary");
        }
        if !shared.ha.members().iter().any(|m| m.name == request.target) {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{} is not a member", request.target),
            );
        }
        match shared.ha.handover(request.target).await {
            Ok(response) => Json(response).into_response(),
            Err(why) => error(StatusCode::CONFLICT, why),
        }
    })
    .await
}

/// `POST /sync`: set synchronous replication (`min: 0` turns it off), re-render
/// and reload. Only meaningful on a primary; a replica keeps it for when it is
/// promoted.
async fn sync(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let span = operation_span!(Level::INFO, "instance.sync");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let request = match serde_json::from_slice::<SyncSettings>(&body) {
            Ok(request) => request,
            Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
        };
        let _guard = shared.config_lock.lock().await;
        let old = shared.sync();
        let new = (request.min > 0).then_some(SyncReplication {
            min: request.min,
            standbys: request.standbys,
        });
        shared.set_sync(new.clone());
        if let Err(err) = files::write_config(&shared) {
            shared.set_sync(old);
            return error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string());
        }
        let reloaded = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await
        {
            Ok(client) => sql::reload(&client).await,
            Err(err) => Err(err),
        };
        if let Err(err) = reloaded {
            // /status must not report a quorum PostgreSQL does not run; the file
            // goes back too, so a later start does not pick it up unasked.
            shared.set_sync(old);
            let _ = files::write_config(&shared);
            return unavailable(err);
        }
        let rendered = new.as_ref().map(config::synchronous_standby_names);
        tracing::info!(synchronous_standby_names = ?rendered, "synchronous replication set");
        Json(SyncResponse {
            synchronous_standby_names: rendered,
        })
        .into_response()
    })
    .await
}

/// `POST /restart`: restart PostgreSQL (fast shutdown, then start), for
/// parameters that only apply at server start. Answers once asked; the
/// instance is not ready again until PostgreSQL accepts connections.
async fn restart(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    let span = operation_span!(Level::INFO, "instance.restart");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        if !is_set(&shared.running) {
            return error(StatusCode::CONFLICT, "postgres is not running");
        }
        shared.restart.notify_one();
        (
            StatusCode::ACCEPTED,
            Json(RestartResponse { restarting: true }),
        )
            .into_response()
    })
    .await
}

/// `POST /slots/drop`: on a primary, drop the physical replication slot of an
/// instance that was removed, so WAL is no longer kept for it. A slot still in
/// use is kept (something still streams from it).
async fn drop_slot(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let span = operation_span!(Level::INFO, "instance.drop_slot");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let request = match serde_json::from_slice::<DropSlotRequest>(&body) {
            Ok(request) => request,
            Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
        };
        let client = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
            Ok(client) => client,
            Err(err) => return unavailable(err),
        };
        let slot = request.slot;
        match sql::drop_slot(&client, &slot).await {
            Ok(dropped) => {
                if dropped {
                    tracing::info!(%slot, "dropped the replication slot");
                }
                Json(DropSlotResponse { slot, dropped }).into_response()
            }
            Err(err) => unavailable(err),
        }
    })
    .await
}

/// `POST /roles/password`: the Secret of `credential` was recreated (the
/// Secret is the source of truth). A primary sets the role's password; every
/// instance keeps the new password for what it does itself (its replication
/// password file, the role setup after a promotion).
async fn password(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let span = operation_span!(Level::INFO, "instance.password");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let request = match serde_json::from_slice::<PasswordRequest>(&body) {
            Ok(request) => request,
            Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
        };
        if request.password.is_empty() || request.password.chars().any(char::is_control) {
            return error(
                StatusCode::BAD_REQUEST,
                "the password is empty or contains a control character",
            );
        }
        let _guard = shared.config_lock.lock().await;
        let client = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
            Ok(client) => client,
            Err(err) => return unavailable(err),
        };
        let primary = match sql::in_recovery(&client).await {
            Ok(in_recovery) => !in_recovery,
            Err(err) => return unavailable(err),
        };
        let credential = request.credential;
        let role = match credential {
            Credential::Superuser => Some(crate::postgres::SUPERUSER.to_owned()),
            Credential::Replication => Some(crate::postgres::REPLICATION_USER.to_owned()),
            Credential::App => shared.config.app_owner.clone(),
        };
        let secret = super::Secret::from(request.password);
        if primary
            && let Some(role) = &role
            && let Err(err) = sql::set_password(&client, role, secret.expose()).await
        {
            return error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string());
        }
        shared.set_password(credential, secret);
        if credential == Credential::Replication
            && let Err(err) = files::write_passfile(&shared)
        {
            return error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string());
        }
        tracing::info!(
            ?credential,
            role_updated = primary,
            "password follows its Secret"
        );
        Json(PasswordResponse {
            credential,
            role_updated: primary && role.is_some(),
        })
        .into_response()
    })
    .await
}

/// `POST /backups`: start a base backup (or answer for the one of that name).
async fn start_backup(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let span = operation_span!(Level::INFO, "instance.backup");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let request = match serde_json::from_slice::<BackupRequest>(&body) {
            Ok(request) => request,
            Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
        };
        if !is_set(&shared.running) {
            return error(StatusCode::CONFLICT, "postgres is not running");
        }
        match super::backup::start(&shared, &request.backup) {
            Ok(state) => (StatusCode::ACCEPTED, Json(state)).into_response(),
            Err(refused) => error(StatusCode::CONFLICT, refused.to_string()),
        }
    })
    .await
}

/// `GET /backups`: the running backup and the last finished ones.
/// `GET /restore`: a restore bootstrap's progress; read-only, like `/status`.
async fn restore_progress(State(shared): State<AppState>) -> Response {
    match shared.restore_progress() {
        Some(progress) => Json(progress).into_response(),
        None => error(StatusCode::NOT_FOUND, "this instance is not restoring"),
    }
}

async fn backups(State(shared): State<AppState>) -> Response {
    Json(Backups {
        backups: shared.backups.states(),
    })
    .into_response()
}

/// `POST /wal/switch`: on a primary, close the current WAL segment so that it
/// is archived now (a standby's backup ends in it).
async fn wal_switch(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    let span = operation_span!(Level::INFO, "instance.wal_switch");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let client = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
            Ok(client) => client,
            Err(err) => return unavailable(err),
        };
        match sql::switch_wal(&client).await {
            Ok(Some(lsn)) => Json(WalSwitchResponse { lsn }).into_response(),
            Ok(None) => error(StatusCode::CONFLICT, "a standby cannot switch WAL"),
            Err(err) => unavailable(err),
        }
    })
    .await
}

/// `POST /retention`: prune the object store by the recovery window.
async fn retention(State(shared): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let span = operation_span!(Level::INFO, "instance.retention");
    traced(span, &headers, async {
        if let Err(refusal) = authorize(&shared, &headers) {
            return refusal.into_response();
        }
        let request = match serde_json::from_slice::<RetentionRequest>(&body) {
            Ok(request) => request,
            Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {err}")),
        };
        let window = std::time::Duration::from_secs(request.window_seconds);
        match super::backup::prune(&shared, window).await {
            Ok(report) => {
                tracing::info!(
                    removed = ?report.removed,
                    wal_removed = report.wal_removed,
                    "retention pass"
                );
                Json(report).into_response()
            }
            Err(super::backup::Refused::Failed(message)) => {
                error(StatusCode::SERVICE_UNAVAILABLE, message)
            }
            Err(refused) => error(StatusCode::CONFLICT, refused.to_string()),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_inputs() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
