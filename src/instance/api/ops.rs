//! The operations behind the API, one function each: what the instance does
//! when asked, its answer as a contract type, or an [`ApiError`] saying what
//! kind of refusal or failure it met. No HTTP here beyond that category.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::contract::{
    API_VERSION, BackupRequest, BackupState, Backups, Change, Credential, DropSlotRequest,
    DropSlotResponse, Members, PasswordRequest, PasswordResponse, PeerStatus, PromoteRequest,
    ReloadRequest, ReloadResponse, RestartResponse, RestoreProgress, RetentionReport,
    RetentionRequest, Role, Status, SwitchoverRequest, SwitchoverResponse, SyncResponse,
    SyncSettings, WalSwitchResponse,
};
use crate::postgres::config::{self, SyncReplication};
use crate::postgres::params;

use crate::contract::drill::{FaultRequest, FaultResponse};

use super::super::{Secret, Shared, backup, drill, files, ha, is_set, sql};
use super::error::{ApiError, Category};

/// `GET /readyz`: `Err` says why the instance is not ready.
pub async fn ready(shared: &Shared) -> Result<(), String> {
    if !is_set(&shared.running) {
        return Err("postgres is not running".to_owned());
    }
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(|err| err.to_string())?;
    match sql::in_recovery(&client).await {
        // A replica is ready once it accepts (read-only) connections in recovery.
        Ok(true) => Ok(()),
        Ok(false) if is_set(&shared.setup_done) => Ok(()),
        Ok(false) => Err("primary roles and database are not set up yet".to_owned()),
        Err(err) => Err(err.to_string()),
    }
}

/// `GET /status`.
pub async fn status(shared: &Shared) -> Result<Status, ApiError> {
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(ApiError::postgres)?;
    let mut postgres = sql::status(&client).await.map_err(ApiError::postgres)?;
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
        tls: shared.tls_report(),
        faults: shared
            .drill
            .report(&shared.config.pgdata, std::time::SystemTime::now()),
    })
}

/// `GET /volumes`: how full the instance's volumes are.
pub fn volumes(shared: &Shared) -> Result<crate::contract::Volumes, ApiError> {
    super::super::volumes::usage(&shared.config.pgdata).map_err(ApiError::internal)
}

/// `POST /reload`: re-render the configuration (optionally with new
/// parameters) and `pg_reload_conf()`.
pub async fn reload(shared: &Shared, request: ReloadRequest) -> Result<ReloadResponse, ApiError> {
    let _guard = shared.config_lock.lock().await;
    let old = shared.parameters();
    let change = match request.parameters {
        Some(new) => {
            config::validate_parameters(&new).map_err(|err| ApiError::invalid(err.to_string()))?;
            let change = params::classify(&old, &new);
            shared.set_parameters(new);
            change
        }
        None => Change::Nothing,
    };
    if let Err(err) = files::write_config(shared) {
        shared.set_parameters(old);
        return Err(ApiError::internal(err));
    }
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(ApiError::postgres)?;
    sql::reload(&client).await.map_err(ApiError::postgres)?;
    // pg_reload_conf() only signals the postmaster; give it a moment before
    // asking whether a restart is pending.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let pending_restart = sql::pending_restart(&client).await.unwrap_or(false);
    tracing::info!(?change, pending_restart, "configuration reloaded");
    Ok(ReloadResponse {
        change,
        pending_restart,
    })
}

/// `POST /promote`: promote this replica and wait until it accepts writes,
/// then re-render its configuration as a primary. Promoting a primary is a
/// no-op.
pub async fn promote(shared: &Shared, request: PromoteRequest) -> Result<Status, ApiError> {
    let _guard = shared.config_lock.lock().await;
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(ApiError::postgres)?;
    if !sql::in_recovery(&client)
        .await
        .map_err(ApiError::postgres)?
    {
        return status(shared).await;
    }
    // The lease first: a replica promotes only once the lease write that
    // names it succeeded, so two primaries can never both hold it.
    if shared.ha.enabled()
        && let Err(why) = shared.ha.take_for_promotion().await
    {
        return Err(ApiError::conflict(format!(
            "not promoting: cannot take the primary lease: {why}"
        )));
    }
    if let Some(sync) = request.sync {
        shared.set_sync((sync.min > 0).then_some(SyncReplication {
            min: sync.min,
            standbys: sync.standbys,
        }));
    }
    tracing::info!("promoting");
    if !sql::promote(&client).await.map_err(ApiError::internal)? {
        return Err(ApiError::new(
            Category::Timeout,
            "promotion did not finish within 60 seconds",
        ));
    }
    // PostgreSQL removed standby.signal; drop primary_conninfo and the slot name.
    files::write_config(shared).map_err(ApiError::internal)?;
    sql::reload(&client).await.map_err(ApiError::postgres)?;
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
    let status = status(shared).await?;
    if status.postgres.role != Role::Primary {
        return Err(ApiError::internal(format!(
            "promotion returned but the instance is still a {:?}",
            status.postgres.role
        )));
    }
    // -rw follows now, not on the operator's next pass (nor, with the
    // operator lost mid-failover, its next leader's).
    shared.ha.label_self(Role::Primary).await;
    Ok(status)
}

/// `GET /peer`: the heartbeat between instances. The caller names itself;
/// the call counts as contact with it both ways.
pub fn peer(shared: &Shared, caller: Option<&str>) -> PeerStatus {
    if let Some(caller) = caller {
        shared.ha.heard_from(caller, None);
    }
    shared.ha.peer_status(ha::primary_data(shared))
}

/// `POST /members`: who the other instances are and where.
pub fn members(shared: &Shared, request: Members) -> Members {
    let mut members = request.members;
    members.sort();
    shared.ha.set_members(members.clone());
    Members { members }
}

/// `POST /switchover`: on the primary, hand the role to a caught-up replica.
/// Answers once the old primary stopped cleanly and the lease is the
/// target's; the operator then promotes the target.
pub async fn switchover(
    shared: &Shared,
    request: SwitchoverRequest,
) -> Result<SwitchoverResponse, ApiError> {
    if !shared.ha.enabled() {
        return Err(ApiError::conflict("switchover needs the primary lease"));
    }
    if !ha::primary_data(shared) || !is_set(&shared.running) {
        return Err(ApiError::conflict("not a running primary"));
    }
    if !shared.ha.members().iter().any(|m| m.name == request.target) {
        return Err(ApiError::invalid(format!(
            "{} is not a member",
            request.target
        )));
    }
    shared
        .ha
        .handover(request.target)
        .await
        .map_err(ApiError::conflict)
}

/// `POST /sync`: set synchronous replication (`min: 0` turns it off),
/// re-render and reload. Only meaningful on a primary; a replica keeps it for
/// when it is promoted.
pub async fn sync(shared: &Shared, request: SyncSettings) -> Result<SyncResponse, ApiError> {
    let _guard = shared.config_lock.lock().await;
    let old = shared.sync();
    let new = (request.min > 0).then_some(SyncReplication {
        min: request.min,
        standbys: request.standbys,
    });
    shared.set_sync(new.clone());
    if let Err(err) = files::write_config(shared) {
        shared.set_sync(old);
        return Err(ApiError::internal(err));
    }
    let reloaded = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
        Ok(client) => sql::reload(&client).await,
        Err(err) => Err(err),
    };
    if let Err(err) = reloaded {
        // /status must not report a quorum PostgreSQL does not run; the file
        // goes back too, so a later start does not pick it up unasked.
        shared.set_sync(old);
        let _ = files::write_config(shared);
        return Err(ApiError::postgres(err));
    }
    let rendered = new.as_ref().map(config::synchronous_standby_names);
    tracing::info!(synchronous_standby_names = ?rendered, "synchronous replication set");
    Ok(SyncResponse {
        synchronous_standby_names: rendered,
    })
}

/// `POST /restart`: restart PostgreSQL (fast shutdown, then start), for
/// parameters that only apply at server start. Answers once asked; the
/// instance is not ready again until PostgreSQL accepts connections.
pub fn restart(shared: &Shared) -> Result<RestartResponse, ApiError> {
    if !is_set(&shared.running) {
        return Err(ApiError::conflict("postgres is not running"));
    }
    shared.restart.notify_one();
    Ok(RestartResponse { restarting: true })
}

/// `POST /slots/drop`: on a primary, drop the physical replication slot of an
/// instance that was removed, so WAL is no longer kept for it. A slot still in
/// use is kept (something still streams from it).
pub async fn drop_slot(
    shared: &Shared,
    request: DropSlotRequest,
) -> Result<DropSlotResponse, ApiError> {
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(ApiError::postgres)?;
    let slot = request.slot;
    let dropped = sql::drop_slot(&client, &slot)
        .await
        .map_err(ApiError::postgres)?;
    if dropped {
        tracing::info!(%slot, "dropped the replication slot");
    }
    Ok(DropSlotResponse { slot, dropped })
}

/// `POST /roles/password`: the Secret of `credential` was recreated (the
/// Secret is the source of truth). A primary sets the role's password; every
/// instance keeps the new password for what it does itself (its replication
/// password file, the role setup after a promotion).
pub async fn password(
    shared: &Shared,
    request: PasswordRequest,
) -> Result<PasswordResponse, ApiError> {
    if request.password.is_empty() || request.password.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "the password is empty or contains a control character",
        ));
    }
    let _guard = shared.config_lock.lock().await;
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(ApiError::postgres)?;
    let primary = !sql::in_recovery(&client)
        .await
        .map_err(ApiError::postgres)?;
    let credential = request.credential;
    let role = match credential {
        Credential::Superuser => Some(crate::postgres::SUPERUSER.to_owned()),
        Credential::Replication => Some(crate::postgres::REPLICATION_USER.to_owned()),
        Credential::App => shared.config.app_owner.clone(),
    };
    let secret = Secret::from(request.password);
    if primary && let Some(role) = &role {
        sql::set_password(&client, role, secret.expose())
            .await
            .map_err(ApiError::internal)?;
    }
    shared.set_password(credential, secret);
    if credential == Credential::Replication {
        files::write_passfile(shared).map_err(ApiError::internal)?;
    }
    tracing::info!(
        ?credential,
        role_updated = primary,
        "password follows its Secret"
    );
    Ok(PasswordResponse {
        credential,
        role_updated: primary && role.is_some(),
    })
}

/// `POST /backups`: start a base backup (or answer for the one of that name).
pub fn start_backup(shared: &Arc<Shared>, request: BackupRequest) -> Result<BackupState, ApiError> {
    if !is_set(&shared.running) {
        return Err(ApiError::conflict("postgres is not running"));
    }
    backup::start(shared, &request.backup)
        .map_err(|refused| ApiError::conflict(refused.to_string()))
}

/// `GET /backups`: the running backup and the last finished ones.
pub fn backups(shared: &Shared) -> Backups {
    Backups {
        backups: shared.backups.states(),
    }
}

/// `GET /restore`: a restore bootstrap's progress; read-only, like `/status`.
pub fn restore_progress(shared: &Shared) -> Result<RestoreProgress, ApiError> {
    shared
        .restore_progress()
        .ok_or_else(|| ApiError::new(Category::NotFound, "this instance is not restoring"))
}

/// `POST /wal/switch`: on a primary, close the current WAL segment so that it
/// is archived now (a standby's backup ends in it).
pub async fn wal_switch(shared: &Shared) -> Result<WalSwitchResponse, ApiError> {
    let client = sql::connect_local(&shared.config.socket_dir, shared.config.port)
        .await
        .map_err(ApiError::postgres)?;
    match sql::switch_wal(&client).await.map_err(ApiError::postgres)? {
        Some(lsn) => Ok(WalSwitchResponse { lsn }),
        None => Err(ApiError::conflict("a standby cannot switch WAL")),
    }
}

/// `POST /retention`: prune the object store by the recovery window.
pub async fn retention(
    shared: &Shared,
    request: RetentionRequest,
) -> Result<RetentionReport, ApiError> {
    let window = std::time::Duration::from_secs(request.window_seconds);
    match backup::prune(shared, window).await {
        Ok(report) => {
            tracing::info!(
                removed = ?report.removed,
                wal_removed = report.wal_removed,
                "retention pass"
            );
            Ok(report)
        }
        Err(backup::Refused::Failed(message)) => Err(ApiError::new(Category::Unavailable, message)),
        Err(refused) => Err(ApiError::conflict(refused.to_string())),
    }
}

/// `POST /drill/freeze`: stop PostgreSQL's processes until the deadline.
pub fn drill_freeze(
    shared: &Arc<Shared>,
    request: FaultRequest,
) -> Result<FaultResponse, ApiError> {
    drill::freeze(shared, &request).map_err(fault_error)
}

/// `POST /drill/kill-postgres`: SIGKILL the postmaster.
pub fn drill_kill_postgres(shared: &Shared) -> Result<FaultResponse, ApiError> {
    drill::kill_postgres(shared).map_err(fault_error)
}

/// `POST /drill/store-outage`: archive to an unreachable store until the
/// deadline.
pub fn drill_store_outage(
    shared: &Arc<Shared>,
    request: FaultRequest,
) -> Result<FaultResponse, ApiError> {
    drill::store_outage(shared, &request).map_err(fault_error)
}

/// `POST /drill/partition`: end the connections that outlive the drill's
/// NetworkPolicy once it holds.
pub fn drill_partition(shared: &Arc<Shared>, request: &FaultRequest) -> FaultResponse {
    let until = crate::instance::partition::partition(shared, request);
    FaultResponse {
        active: until.is_some(),
        until: until.map(drill::rfc3339),
        pids: Vec::new(),
    }
}

fn fault_error(error: drill::FaultError) -> ApiError {
    match error {
        drill::FaultError::NotRunning => ApiError::conflict(error.to_string()),
        _ => ApiError::internal(error),
    }
}
