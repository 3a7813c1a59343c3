//! SQL the manager runs, over the Unix socket as `postgres` (peer
//! authentication), or over TCP to the primary as the replication role
//! (over verified TLS with its certificate when both sides have TLS).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use crate::contract::{Archiver, Credential, Lsn, PgStatus, Role};
use crate::postgres::identifiers::{quote_ident, quote_literal};
use crate::postgres::{REPLICATION_USER, SUPERUSER};

use super::{Error, Shared};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connect to the local PostgreSQL through its Unix socket.
pub async fn connect_local(socket_dir: &Path, port: u16) -> Result<Client, tokio_postgres::Error> {
    connect_local_to(socket_dir, port, "postgres").await
}

/// [`connect_local`] to `database`.
pub async fn connect_local_to(
    socket_dir: &Path,
    port: u16,
    database: &str,
) -> Result<Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host_path(socket_dir)
        .port(port)
        .user(SUPERUSER)
        .dbname(database)
        .application_name("tusk-instance")
        .connect_timeout(CONNECT_TIMEOUT);
    connect(config).await
}

/// Connect to the primary over TCP as the replication role (it may open
/// ordinary connections too, which slot management needs): to a TLS
/// primary over verified TLS with the replication certificate (see
/// [`super::tls::upstream`]), else with the password.
pub async fn connect_primary(shared: &Shared) -> Result<Client, Error> {
    let config = &shared.config;
    let upstream = shared.upstream().ok_or(Error::MissingPrimary("cloning"))?;
    let mut pg = tokio_postgres::Config::new();
    pg.host(&upstream.host)
        .port(config.primary_port)
        .user(REPLICATION_USER)
        .dbname("postgres")
        .application_name(&config.instance)
        .connect_timeout(CONNECT_TIMEOUT);
    if let Some(hostaddr) = &upstream.hostaddr {
        let ip = hostaddr
            .parse()
            .map_err(|_| Error::Tls(format!("the primary's address {hostaddr} is not an IP")))?;
        pg.hostaddr(ip);
    }
    let tls = match shared.tls_client_files().filter(|_| upstream.tls) {
        Some(files) => Some(tls_connector(&files, &upstream.host)?),
        None => None,
    };
    let connected = match tls {
        Some(tls) => {
            pg.ssl_mode(tokio_postgres::config::SslMode::Require);
            connect_with(pg, tls).await
        }
        None => {
            let password = shared.password(Credential::Replication).unwrap_or_default();
            pg.password(password.expose());
            connect(pg).await
        }
    };
    connected.map_err(Error::sql("connecting to the primary"))
}

/// A connector from the private copies that accepts only a server whose
/// certificate names `name`: read per connection, so a renewed certificate
/// is used from the next connection on.
fn tls_connector(
    files: &super::tls::upstream::ClientFiles,
    name: &str,
) -> Result<super::tls::MakeRustls, Error> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|source| Error::Io {
            action: "read the private TLS copy",
            path: path.into(),
            source,
        })
    };
    let (cert, key) = (read(&files.cert)?, read(&files.key)?);
    let config =
        crate::tls::rustls_config::client_config(&read(&files.root)?, Some((&cert, &key)), name)
            .map_err(|error| Error::Tls(format!("the replication client's TLS: {error}")))?;
    super::tls::MakeRustls::new(config, name)
        .map_err(|_| Error::Tls(format!("{name:?} is not a server name")))
}

async fn connect(config: tokio_postgres::Config) -> Result<Client, tokio_postgres::Error> {
    connect_with(config, NoTls).await
}

async fn connect_with<T>(
    config: tokio_postgres::Config,
    tls: T,
) -> Result<Client, tokio_postgres::Error>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Send,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
{
    let (client, connection) = config.connect(tls).await?;
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(error = %err, "PostgreSQL connection closed");
        }
    });
    Ok(client)
}

/// Create this instance's physical replication slot on the primary unless it
/// exists. `immediately_reserve` makes the primary keep WAL from now on, so the
/// clone that follows never misses a segment.
pub async fn ensure_slot(primary: &Client, slot: &str) -> Result<bool, Error> {
    let exists = primary
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(Error::sql("looking up the replication slot"))?
        .is_some();
    if exists {
        return Ok(false);
    }
    match primary
        .execute(
            "SELECT pg_create_physical_replication_slot($1, true)",
            &[&slot],
        )
        .await
    {
        Ok(_) => Ok(true),
        // Another attempt won the race: the slot exists, which is all we want.
        Err(err) if err.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => {
            Ok(false)
        }
        Err(err) => Err(Error::sql("creating the replication slot")(err)),
    }
}

/// Roles, passwords and the application database on a primary. Idempotent, and
/// run at every start, so a crash halfway through bootstrap heals and rotated
/// Secrets reach the database.
///
/// Passwords go in as literals because `CREATE/ALTER ROLE` takes no parameters;
/// `password_encryption = scram-sha-256` stores only the SCRAM verifier.
pub async fn setup_primary(client: &Client, shared: &Shared) -> Result<(), Error> {
    let config = &shared.config;
    let password = |credential| shared.password(credential).unwrap_or_default();
    // In sync mode no standby exists yet when the first primary sets itself up;
    // a session-local commit level keeps the setup from waiting for one.
    client
        .batch_execute("SET synchronous_commit = local")
        .await
        .map_err(Error::sql("setting synchronous_commit for the setup"))?;
    ensure_role(
        client,
        REPLICATION_USER,
        "LOGIN REPLICATION",
        password(Credential::Replication).expose(),
    )
    .await?;
    ensure_role(
        client,
        SUPERUSER,
        "LOGIN SUPERUSER",
        password(Credential::Superuser).expose(),
    )
    .await?;
    if let (Some(owner), Some(password)) = (&config.app_owner, shared.password(Credential::App)) {
        ensure_role(client, owner, "LOGIN", password.expose()).await?;
        if let Some(database) = &config.app_database {
            let exists = client
                .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[database])
                .await
                .map_err(Error::sql("looking up the application database"))?
                .is_some();
            if !exists {
                client
                    .batch_execute(&format!(
                        "CREATE DATABASE {} OWNER {}",
                        quote_ident(database),
                        quote_ident(owner)
                    ))
                    .await
                    .map_err(Error::sql("creating the application database"))?;
                tracing::info!(%database, %owner, "created the application database");
            }
        }
    }
    Ok(())
}

/// Sets `role`'s password (a primary only: a replica is read-only).
pub async fn set_password(client: &Client, role: &str, password: &str) -> Result<(), Error> {
    client
        .batch_execute(&format!(
            "SET synchronous_commit = local; ALTER ROLE {} WITH PASSWORD {}",
            quote_ident(role),
            quote_literal(password)
        ))
        .await
        .map_err(Error::sql("setting a role's password"))
}

async fn ensure_role(
    client: &Client,
    name: &str,
    attributes: &str,
    password: &str,
) -> Result<(), Error> {
    let exists = client
        .query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&name])
        .await
        .map_err(Error::sql("looking up a role"))?
        .is_some();
    let verb = if exists { "ALTER" } else { "CREATE" };
    client
        .batch_execute(&format!(
            "{verb} ROLE {} WITH {attributes} PASSWORD {}",
            quote_ident(name),
            quote_literal(password)
        ))
        .await
        .map_err(Error::sql("creating or updating a role"))?;
    if !exists {
        tracing::info!(role = %name, "created role");
    }
    Ok(())
}

pub async fn status(client: &Client) -> Result<PgStatus, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT pg_is_in_recovery(), \
                    current_setting('server_version'), \
                    current_setting('server_version_num')::int, \
                    (SELECT system_identifier::text FROM pg_control_system()), \
                    EXISTS (SELECT 1 FROM pg_settings WHERE pending_restart)",
            &[],
        )
        .await?;
    let in_recovery: bool = row.try_get(0)?;
    let mut status = PgStatus {
        role: if in_recovery {
            Role::Replica
        } else {
            Role::Primary
        },
        timeline: None,
        current_lsn: None,
        received_lsn: None,
        replayed_lsn: None,
        streaming: None,
        system_identifier: row.try_get(3)?,
        version: row.try_get(1)?,
        version_num: row.try_get(2)?,
        pending_restart: row.try_get(4)?,
        inactive_slots: Vec::new(),
        archiver: None,
        replay_lag_milliseconds: BTreeMap::new(),
    };
    if in_recovery {
        let row = client
            .query_one(
                "SELECT pg_last_wal_receive_lsn()::text, \
                        pg_last_wal_replay_lsn()::text, \
                        (SELECT status = 'streaming' FROM pg_stat_wal_receiver), \
                        COALESCE((SELECT received_tli FROM pg_stat_wal_receiver), \
                                 (SELECT timeline_id FROM pg_control_checkpoint()))::bigint",
                &[],
            )
            .await?;
        status.received_lsn = lsn(row.try_get(0)?);
        status.replayed_lsn = lsn(row.try_get(1)?);
        status.streaming = Some(row.try_get::<_, Option<bool>>(2)?.unwrap_or(false));
        status.timeline = row
            .try_get::<_, Option<i64>>(3)?
            .and_then(|tli| u32::try_from(tli).ok());
    } else {
        // The timeline is the first 8 hex digits of the current WAL file name;
        // pg_control_checkpoint() would lag behind a promotion until the next
        // checkpoint.
        let row = client
            .query_one(
                "SELECT pg_current_wal_lsn()::text, pg_walfile_name(pg_current_wal_lsn())",
                &[],
            )
            .await?;
        status.current_lsn = lsn(row.try_get(0)?);
        let walfile: String = row.try_get(1)?;
        status.timeline = walfile
            .get(..8)
            .and_then(|tli| u32::from_str_radix(tli, 16).ok());
        status.inactive_slots = client
            .query(
                "SELECT slot_name::text FROM pg_replication_slots \
                 WHERE slot_type = 'physical' AND NOT active ORDER BY 1",
                &[],
            )
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?;
        status.archiver = archiver(client).await?;
        status.replay_lag_milliseconds = replay_lags(client).await?;
    }
    Ok(status)
}

/// Each standby's replay lag in time, by `application_name` (its instance
/// name). `replay_lag` turns NULL once a standby has caught up and the
/// primary is idle: that is a lag of 0 when its replay position says so, and
/// unknown otherwise. pg_basebackup's walsenders (state `backup`) are not
/// standbys.
async fn replay_lags(client: &Client) -> Result<BTreeMap<String, i64>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT application_name, \
                    CASE WHEN replay_lag IS NOT NULL \
                              THEN (EXTRACT(EPOCH FROM replay_lag) * 1000)::bigint \
                         WHEN replay_lsn = pg_current_wal_lsn() THEN 0 \
                    END \
             FROM pg_stat_replication WHERE state <> 'backup'",
            &[],
        )
        .await?;
    let mut lags = BTreeMap::new();
    for row in rows {
        let name: Option<String> = row.try_get(0)?;
        let lag: Option<i64> = row.try_get(1)?;
        if let (Some(name), Some(lag)) = (name, lag) {
            lags.insert(name, lag);
        }
    }
    Ok(lags)
}

/// `pg_stat_archiver` when `archive_mode` is on.
async fn archiver(client: &Client) -> Result<Option<Archiver>, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT current_setting('archive_mode') <> 'off', archived_count, failed_count, \
                    last_archived_wal, EXTRACT(EPOCH FROM last_archived_time)::bigint, \
                    last_failed_wal, EXTRACT(EPOCH FROM last_failed_time)::bigint \
             FROM pg_stat_archiver",
            &[],
        )
        .await?;
    if !row.try_get::<_, bool>(0)? {
        return Ok(None);
    }
    Ok(Some(Archiver {
        archived_count: row.try_get(1)?,
        failed_count: row.try_get(2)?,
        last_archived_wal: row.try_get(3)?,
        last_archived_at: row.try_get(4)?,
        last_failed_wal: row.try_get(5)?,
        last_failed_at: row.try_get(6)?,
        last_error: None,
    }))
}

/// A WAL position as PostgreSQL prints it; `None` for NULL (nothing received
/// yet) or, never in practice, text PostgreSQL would not print.
fn lsn(text: Option<String>) -> Option<Lsn> {
    text.and_then(|t| t.parse().ok())
}

/// Promote a replica and wait (up to a minute) for it to accept writes.
pub async fn promote(client: &Client) -> Result<bool, tokio_postgres::Error> {
    client
        .query_one("SELECT pg_promote(true, 60)", &[])
        .await?
        .try_get(0)
}

/// Drop the physical replication slot `slot` on this primary when it exists and
/// no walsender uses it; `true` when it was dropped.
pub async fn drop_slot(client: &Client, slot: &str) -> Result<bool, tokio_postgres::Error> {
    let dropped = client
        .query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name = $1 AND NOT active",
            &[&slot],
        )
        .await?;
    Ok(!dropped.is_empty())
}

/// `pg_switch_wal()` on a primary: where the WAL switched; `None` on a standby.
pub async fn switch_wal(client: &Client) -> Result<Option<Lsn>, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_switch_wal()::text END",
            &[],
        )
        .await?;
    let lsn: Option<String> = row.try_get(0)?;
    Ok(lsn.and_then(|l| l.parse().ok()))
}

pub async fn reload(client: &Client) -> Result<(), tokio_postgres::Error> {
    client.execute("SELECT pg_reload_conf()", &[]).await?;
    Ok(())
}

pub async fn pending_restart(client: &Client) -> Result<bool, tokio_postgres::Error> {
    client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_settings WHERE pending_restart)",
            &[],
        )
        .await?
        .try_get(0)
}

pub async fn in_recovery(client: &Client) -> Result<bool, tokio_postgres::Error> {
    client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .try_get(0)
}

/// A replica's view of its primary's WAL end: what the primary last reported
/// to the streaming WAL receiver. `None` when not streaming, or PostgreSQL
/// does not answer in time (the caller asks again a period later).
pub async fn primary_end_lsn(shared: &Shared) -> Option<Lsn> {
    let query = async {
        let client = connect_local(&shared.config.socket_dir, shared.config.port)
            .await
            .ok()?;
        let row = client
            .query_opt(
                "SELECT latest_end_lsn::text FROM pg_stat_wal_receiver WHERE status = 'streaming'",
                &[],
            )
            .await
            .ok()??;
        lsn(row.try_get(0).ok()?)
    };
    tokio::time::timeout(PRIMARY_END_TIMEOUT, query)
        .await
        .ok()
        .flatten()
}

/// Whether this replica's WAL receiver streams from the primary
/// [`connect_primary`] reaches (the lease holder): it streams here, and the
/// holder runs a walsender for this instance's `application_name`.
/// `pg_stat_activity`, not `pg_stat_replication`: the latter hides a
/// walsender's state from a role without `pg_read_all_stats`, while the
/// former shows a role its own sessions.
/// `false` when either cannot be told in time.
pub async fn streams_from_primary(shared: &Shared) -> bool {
    let check = async {
        let local = connect_local(&shared.config.socket_dir, shared.config.port)
            .await
            .ok()?;
        let streaming: Option<bool> = local
            .query_one(
                "SELECT (SELECT status = 'streaming' FROM pg_stat_wal_receiver)",
                &[],
            )
            .await
            .ok()?
            .try_get(0)
            .ok()?;
        if streaming != Some(true) {
            return Some(false);
        }
        let primary = connect_primary(shared).await.ok()?;
        primary
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
                                 WHERE backend_type = 'walsender' AND application_name = $1 \
                                   AND usename = current_user)",
                &[&shared.config.instance],
            )
            .await
            .ok()?
            .try_get(0)
            .ok()
    };
    tokio::time::timeout(STREAMS_FROM_PRIMARY_TIMEOUT, check)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// How long [`streams_from_primary`] waits: once per start, inside a lease
/// loop period; past it the replica reloads as it would without the check.
const STREAMS_FROM_PRIMARY_TIMEOUT: Duration = Duration::from_millis(800);

/// How long [`primary_end_lsn`] waits: well inside the lease loop's period.
const PRIMARY_END_TIMEOUT: Duration = Duration::from_millis(400);

/// Create, on this new primary, the slots of the other members, so that
/// their WAL receivers find them when they reconnect.
pub async fn ensure_slots(client: &Client, slots: &[String]) {
    for slot in slots {
        match ensure_slot(client, slot).await {
            Ok(true) => tracing::info!(%slot, "created a replica's slot"),
            Ok(false) => {}
            Err(err) => tracing::warn!(%slot, error = %err, "cannot create a replica's slot"),
        }
    }
}
