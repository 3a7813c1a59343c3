//! Filling an empty data directory, and the idempotent upkeep that follows every
//! start (roles and database on a primary, the replication slot for a replica).
//!
//! `initdb` and `pg_basebackup` write into a sibling directory,
//! `<PGDATA>.tusk-bootstrap`, which is renamed to PGDATA only when complete. A pod
//! killed halfway leaves no half-made PGDATA that a restart would mistake for a
//! cluster; the leftover is removed and the bootstrap starts over. With a WAL
//! volume (`TUSK_WALDIR`) the new cluster's WAL is staged beside the WAL
//! directory the same way and moved into place with it ([`super::waldir`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::watch;

use crate::contract::{Credential, RestoreStage};
use crate::postgres::identifiers::slot_name;
use crate::postgres::{REPLICATION_USER, SUPERUSER};
use crate::upgrade::child;

use super::{BootstrapMode, Error, Shared, files, is_set, sql, tls, waldir};

/// Make sure PGDATA holds a cluster: keep an existing one, else create it the way
/// the operator said.
pub async fn ensure_data_directory(shared: &Shared) -> Result<(), Error> {
    let pgdata = &shared.config.pgdata;
    let staging = staging_dir(pgdata);
    if staging.exists() {
        tracing::warn!(path = %staging.display(), "removing an interrupted bootstrap");
        std::fs::remove_dir_all(&staging).map_err(Error::io("remove", &staging))?;
    }
    let fresh = !pgdata.join("PG_VERSION").is_file();
    waldir::clear(shared, fresh)?;
    if !fresh {
        if upgrade_gate(shared)? == Gate::Keep {
            tracing::info!(
                standby = files::is_standby(pgdata),
                "using the existing data directory"
            );
            return Ok(());
        }
        // A replica's data of another major: gone, cloned afresh below.
        return clone_into_place(shared, &staging).await;
    }
    if let Ok(mut entries) = std::fs::read_dir(pgdata)
        && entries.next().is_some()
    {
        return Err(Error::NotEmpty(pgdata.clone()));
    }
    match shared.config.bootstrap {
        BootstrapMode::Initdb => initdb(shared, &staging).await?,
        BootstrapMode::Clone => clone(shared, &staging).await?,
        BootstrapMode::Restore => restore_patiently(shared, &staging).await?,
    }
    // rename(2) replaces an empty directory, so an empty PGDATA (a fresh mount
    // point's subdirectory created by someone else) is fine too.
    waldir::put_in_place(shared, &staging)?;
    tracing::info!(mode = ?shared.config.bootstrap, "bootstrap complete");
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum Gate {
    Keep,
    Reclone,
}

/// What an existing data directory's major and upgrade state allow:
/// refuses a half-done upgrade or rollback and a primary's data of another
/// major (an upgrade must run first, or a rollback: never wiped); a
/// replica's data of another major (the primary was upgraded or rolled
/// back) is removed to be cloned again rather than crash-loop. Notes an
/// upgraded directory's first start.
fn upgrade_gate(shared: &Shared) -> Result<Gate, Error> {
    use crate::upgrade::{state, version};
    let pgdata = &shared.config.pgdata;
    let upgrade = |e: crate::upgrade::Error| Error::Upgrade(e.to_string());
    let current = state::read(pgdata).map_err(upgrade)?;
    match state::on_start(current.as_ref()) {
        state::OnStart::Refuse(why) => return Err(Error::Upgrade(why)),
        state::OnStart::FirstStart => {
            tracing::info!("first start after a major upgrade");
            shared.upgrade_pending.store(true, Ordering::SeqCst);
        }
        state::OnStart::Start => {}
    }
    let data = version::data_major(pgdata).map_err(upgrade)?;
    let image = version::bindir_major(&shared.bindir).map_err(upgrade)?;
    let Some(data) = data.filter(|d| *d != image) else {
        return Ok(Gate::Keep);
    };
    if !files::is_standby(pgdata) {
        let way = if data < image {
            format!("run the major upgrade (tusk upgrade run) from {data} to {image} first")
        } else {
            format!(
                "PostgreSQL cannot be downgraded; if the upgraded server never started, tusk upgrade rollback returns the data to {image}"
            )
        };
        return Err(Error::Upgrade(format!(
            "{} holds a primary's PostgreSQL {data} data but this image runs {image}: {way}",
            pgdata.display()
        )));
    }
    tracing::warn!(
        data,
        image,
        "this replica's data is of another major than its image: cloning the primary to replace it"
    );
    Ok(Gate::Reclone)
}

/// Clones the primary, then replaces PGDATA with the clone: the stale data
/// goes only once the clone is complete, so an unreachable primary leaves
/// the pod as it was (and an empty PGDATA never meets an `initdb` bootstrap).
async fn clone_into_place(shared: &Shared, staging: &Path) -> Result<(), Error> {
    let pgdata = &shared.config.pgdata;
    clone(shared, staging).await?;
    waldir::remove_cluster(pgdata)?;
    waldir::put_in_place(shared, staging)?;
    tracing::info!("cloned the primary in place of data of another major");
    Ok(())
}

/// A restore, tried again after a pause when it fails: a store that was
/// unreachable, or a target past what the archive held, may come right. Each
/// failure is in `GET /restore` for the operator to show; nothing of the
/// source is ever written.
async fn restore_patiently(shared: &Shared, staging: &Path) -> Result<(), Error> {
    let source = super::restore::Source::from_env(|name| std::env::var(name).ok())
        .map_err(|error| error.to_string());
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        shared.update_restore(|p| p.attempts = attempts);
        let result = match &source {
            Ok(source) => match super::restore::restore(shared, source, staging).await {
                Ok(promoted) => {
                    tracing::info!("stopping the restore postmaster");
                    promoted.stop().await;
                    Ok(())
                }
                Err(error) => Err(error),
            },
            Err(message) => Err(Error::Restore(message.clone())),
        };
        let error = match result {
            Ok(()) => {
                shared.update_restore(|p| {
                    p.stage = RestoreStage::Done;
                    p.error = None;
                });
                let spool = crate::wal::source_spool(&shared.config.pgdata);
                let _ = std::fs::remove_dir_all(&spool);
                return Ok(());
            }
            Err(error) => error,
        };
        let delay = super::restore::retry_delay(attempts);
        tracing::error!(error = %error, retry_in = ?delay, "restore failed");
        shared.update_restore(|p| {
            p.stage = RestoreStage::Failed;
            p.error = Some(error.to_string());
        });
        if staging.exists() {
            std::fs::remove_dir_all(staging).map_err(Error::io("remove", staging))?;
        }
        tokio::time::sleep(delay).await;
    }
}

pub(super) fn staging_dir(pgdata: &Path) -> PathBuf {
    let mut name = pgdata.as_os_str().to_owned();
    name.push(".tusk-bootstrap");
    PathBuf::from(name)
}

/// `initdb` for the first primary.
///
/// - `--auth-local=peer`: until Tusk's pg_hba.conf replaces it, only the OS user
///   running PostgreSQL gets in over the socket; `--auth-host=scram-sha-256`
///   needs the superuser password, given through a 0600 file, not argv.
/// - `--data-checksums`: corruption is detected, and pg_rewind works without
///   `wal_log_hints`.
/// - `--locale=C` with UTF8: byte-order collation cannot change under an index
///   when the image's glibc changes, and it exists in every image.
async fn initdb(shared: &Shared, staging: &Path) -> Result<(), Error> {
    let config = &shared.config;
    let pwfile = config.socket_dir.join(".tusk-initdb-pwfile");
    files::write_if_changed(
        &pwfile,
        &format!("{}\n", config.superuser_password.expose()),
    )?;
    let mut command = child::async_command(shared.bindir.join("initdb"));
    command
        .arg("--pgdata")
        .arg(staging)
        .args([
            "--username",
            SUPERUSER,
            "--auth-local=peer",
            "--auth-host=scram-sha-256",
            "--data-checksums",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ])
        .args(waldir::waldir_args(shared))
        .arg("--pwfile")
        .arg(&pwfile);
    let result = run(command, "initdb").await;
    let _ = std::fs::remove_file(&pwfile);
    result
}

/// Clone the primary: first its replication slot for this instance (so the
/// primary keeps every WAL segment from the backup's start on), then
/// `pg_basebackup` streaming WAL through that slot. To a TLS primary it
/// verifies the primary's name and authenticates with the replication
/// certificate ([`tls::upstream`]); else the password reaches the child
/// through `PGPASSWORD`, never argv. No `-R`: it would write `primary_conninfo`,
/// password included, to `postgresql.auto.conf`, where it would override Tusk's;
/// the manager writes `standby.signal` and its own settings instead.
async fn clone(shared: &Shared, staging: &Path) -> Result<(), Error> {
    let command = basebackup_command(shared, staging).await?;
    run(Command::from(command), "pg_basebackup").await?;
    files::mark_standby(staging)?;
    Ok(())
}

/// The `pg_basebackup` of the primary into `staging`, once this instance's
/// slot exists on the primary.
pub(super) async fn basebackup_command(
    shared: &Shared,
    staging: &Path,
) -> Result<std::process::Command, Error> {
    let config = &shared.config;
    let upstream = shared
        .upstream()
        .ok_or(Error::MissingPrimary("TUSK_BOOTSTRAP=clone"))?;
    let slot = slot_name(&config.instance);
    let primary = connect_primary_patiently(shared).await?;
    if sql::ensure_slot(&primary, &slot).await? {
        tracing::info!(%slot, "created the replication slot on the primary");
    }
    drop(primary);

    // A connection string rather than --host: it carries hostaddr and the
    // TLS files; pg_basebackup adds `replication=true` itself.
    let client_files = shared.tls_client_files();
    let tls = upstream.tls && client_files.is_some();
    let pairs = tls::upstream::libpq_pairs(
        &upstream,
        config.primary_port,
        REPLICATION_USER,
        client_files.as_ref(),
    );
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut command = child::command(shared.bindir.join("pg_basebackup"));
    command
        .arg("--pgdata")
        .arg(staging)
        .arg("--dbname")
        .arg(crate::postgres::config::conninfo(&pairs))
        .args([
            "--no-password",
            "--wal-method=stream",
            "--checkpoint=fast",
            "--slot",
            &slot,
        ])
        .args(waldir::waldir_args(shared))
        .env("PGAPPNAME", &config.instance);
    if !tls {
        // The certificate authenticates a TLS clone: no password then.
        command.env(
            "PGPASSWORD",
            shared
                .password(Credential::Replication)
                .unwrap_or_default()
                .expose(),
        );
    }
    Ok(command)
}

/// How long a new replica waits for the primary to accept connections before
/// it gives up (and the kubelet restarts it). The primary's Service only gets
/// its endpoint once the primary is ready, a few seconds after the operator saw
/// it ready; failing at once would cost a container restart backoff instead.
const PRIMARY_WAIT: Duration = Duration::from_secs(300);

async fn connect_primary_patiently(shared: &Shared) -> Result<tokio_postgres::Client, Error> {
    let deadline = tokio::time::Instant::now() + PRIMARY_WAIT;
    let mut delay = Duration::from_millis(250);
    loop {
        match sql::connect_primary(shared).await {
            Ok(client) => return Ok(client),
            Err(err) if tokio::time::Instant::now() + delay < deadline => {
                tracing::info!(error = %err, retry_in = ?delay, "the primary is not reachable yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(err) => return Err(err),
        }
    }
}

/// Run a bootstrap program to completion, its output captured for the error.
async fn run(mut command: Command, program: &str) -> Result<(), Error> {
    tracing::info!(%program, "running");
    let output = command
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| Error::Spawn {
            program: program.to_owned(),
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        program: program.to_owned(),
        status: output.status.to_string(),
        stderr: stderr_tail(&String::from_utf8_lossy(&output.stderr)).to_owned(),
    })
}

/// The last 2000 characters of a failed program's standard error: where its
/// reason is, without flooding an error message.
pub(super) fn stderr_tail(stderr: &str) -> &str {
    let stderr = stderr.trim();
    stderr
        .char_indices()
        .rev()
        .nth(2000)
        .map_or(stderr, |(i, _)| &stderr[i..])
}

/// After the postmaster starts: on a primary, create or update roles and the
/// application database once (then `/readyz` turns true); on a replica, keep its
/// replication slot present on whichever instance is primary, so that after a
/// failover the new primary keeps WAL for it too.
pub async fn maintain(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    let mut last_slot_check: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        if !is_set(&shared.running) {
            continue;
        }
        let client = match sql::connect_local(&shared.config.socket_dir, shared.config.port).await {
            Ok(client) => client,
            Err(_) => continue, // still starting, or restarting
        };
        let Ok(in_recovery) = sql::in_recovery(&client).await else {
            continue;
        };
        if is_set(&shared.upgrade_pending) {
            // Before anything else (the primary's setup, and with it
            // readiness): from now on a rollback refuses.
            match crate::upgrade::state::finish_first_start(&shared.config.pgdata) {
                Ok(state) => {
                    shared.upgrade_pending.store(false, Ordering::SeqCst);
                    tracing::info!(
                        ?state,
                        "the upgraded server answered: the old data directory is removed"
                    );
                    if !in_recovery {
                        tokio::spawn(analyze_in_stages(shared.clone()));
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot finish the upgrade's first start; retrying")
                }
            }
            continue;
        }
        if !in_recovery {
            if !is_set(&shared.setup_done) {
                match sql::setup_primary(&client, &shared).await {
                    Ok(()) => {
                        shared.setup_done.store(true, Ordering::SeqCst);
                        tracing::info!("primary roles and database are in place");
                    }
                    Err(err) => tracing::warn!(error = %err, "primary setup failed; retrying"),
                }
            }
            continue;
        }
        if last_slot_check.is_some_and(|at| at.elapsed() < SLOT_CHECK_INTERVAL) {
            continue;
        }
        last_slot_check = Some(tokio::time::Instant::now());
        let slot = slot_name(&shared.config.instance);
        match sql::connect_primary(&shared).await {
            Ok(primary) => match sql::ensure_slot(&primary, &slot).await {
                Ok(true) => tracing::info!(%slot, "re-created the replication slot on the primary"),
                Ok(false) => {}
                Err(err) => tracing::debug!(error = %err, "cannot check the replication slot"),
            },
            Err(err) => tracing::debug!(error = %err, "cannot reach the primary"),
        }
    }
}

const SLOT_CHECK_INTERVAL: Duration = Duration::from_secs(15);

/// `vacuumdb --all --analyze-in-stages`, as SQL: pg_upgrade does not carry
/// the planner's statistics over, so every database is analysed at
/// statistics targets 1, 10 and then the configured one, each stage over
/// all databases before the next, so usable plans come soon. In SQL rather
/// than the program because the manager, PID 1, reaps every child. Runs in
/// the background and never holds readiness; the outcome is logged.
async fn analyze_in_stages(shared: Arc<Shared>) {
    let config = &shared.config;
    let stages = [
        "SET default_statistics_target = 1; SET vacuum_cost_delay = 0",
        "SET default_statistics_target = 10; RESET vacuum_cost_delay",
        "RESET default_statistics_target",
    ];
    let result: Result<usize, Error> = async {
        let client = sql::connect_local(&config.socket_dir, config.port)
            .await
            .map_err(Error::sql("connecting to analyze"))?;
        let databases: Vec<String> = client
            .query(
                "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname",
                &[],
            )
            .await
            .map_err(Error::sql("listing the databases to analyze"))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        drop(client);
        for (stage, settings) in stages.iter().enumerate() {
            for database in &databases {
                let client = sql::connect_local_to(&config.socket_dir, config.port, database)
                    .await
                    .map_err(Error::sql("connecting to analyze a database"))?;
                client
                    .batch_execute(&format!("{settings}; ANALYZE"))
                    .await
                    .map_err(Error::sql("analyzing after the upgrade"))?;
                tracing::info!(%database, stage = stage + 1, "analyzed after the upgrade");
            }
        }
        Ok(databases.len())
    }
    .await;
    match result {
        Ok(n) => tracing::info!(databases = n, "statistics rebuilt after the upgrade"),
        Err(error) => tracing::warn!(%error, "rebuilding statistics after the upgrade failed"),
    }
}
