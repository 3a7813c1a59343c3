//! A former primary becomes a replica of the lease holder: its WAL that the
//! archive lacks is archived first, then `pg_rewind` winds its data back to
//! where the histories diverged (nothing when they did not), and it starts
//! as a standby. When the rewind fails for any reason but an unreachable
//! primary, it is cloned again: never left diverged. The diverged copy is
//! kept beside PGDATA (`<PGDATA>.tusk-diverged`, the last one only) for a
//! person to look at; on a WAL volume its WAL is kept beside the WAL
//! directory (`<TUSK_WALDIR>.tusk-diverged`). pg_rewind follows a symlinked
//! `pg_wal` like PostgreSQL.
//!
//! These steps run while the supervisor's reaper collects every child, so
//! their programs run through [`Reaped`], which takes exit statuses from it.

use std::path::{Path, PathBuf};

use crate::contract::{Credential, Lsn};
use crate::postgres::SUPERUSER;
use crate::upgrade::child;

use super::reaper::Reaped;
use super::tls::upstream::{ClientFiles, Upstream, libpq_pairs};
use super::{Error, Shared, bootstrap, files, lockfile, waldir};

/// Make PGDATA a standby of the current primary.
pub async fn rejoin(shared: &Shared, reaped: &mut Reaped<'_>) -> Result<(), Error> {
    let pgdata = &shared.config.pgdata;
    archive_ready(shared, reaped).await;
    let upstream = shared
        .upstream()
        .ok_or(Error::MissingPrimary("rejoining"))?;
    // An unreachable primary is a reason to wait, not to clone.
    super::sql::connect_primary(shared).await?;
    // pg_rewind finishes an unclean stop's crash recovery with a single-user
    // postgres, which a stale lock file would refuse.
    lockfile::clear_stale(pgdata)?;
    let mut command = child::command(shared.bindir.join("pg_rewind"));
    command
        .arg("--target-pgdata")
        .arg(pgdata)
        .arg("--source-server")
        .arg(source_server(shared, &upstream))
        .env(
            "PGPASSWORD",
            shared
                .password(Credential::Superuser)
                .unwrap_or_default()
                .expose(),
        );
    match reaped.run(command, "pg_rewind").await {
        Ok(output) => {
            tracing::info!(output = %output.trim(), "rewound onto the new primary");
        }
        Err(error) => {
            tracing::error!(%error, "pg_rewind failed: cloning the primary again");
            reclone(shared, reaped).await?;
            return Ok(());
        }
    }
    files::mark_standby(pgdata)?;
    Ok(())
}

/// pg_rewind's connection to the primary, as the superuser (it reads files
/// through functions only a superuser may call). To a TLS primary it
/// verifies the primary's certificate and name like a standby, and its
/// SCRAM password goes over that verified TLS; no client certificate (the
/// replication role's would name another role).
fn source_server(shared: &Shared, upstream: &Upstream) -> String {
    source_conninfo(
        upstream,
        shared.config.primary_port,
        shared.tls_client_files().as_ref(),
    )
}

fn source_conninfo(upstream: &Upstream, port: u16, client_files: Option<&ClientFiles>) -> String {
    let mut pairs = libpq_pairs(upstream, port, SUPERUSER, client_files);
    pairs.retain(|(key, _)| !matches!(*key, "sslcert" | "sslkey"));
    pairs.push(("dbname", "postgres".to_owned()));
    pairs.push(("connect_timeout", "5".to_owned()));
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    crate::postgres::config::conninfo(&pairs)
}

/// Upload the WAL segments PostgreSQL had not archived yet: after the rewind
/// the old timeline's tail is gone from PGDATA. Best effort: the archive
/// keeps what it got, and a failure here must not keep the instance down.
async fn archive_ready(shared: &Shared, reaped: &mut Reaped<'_>) {
    if shared.config.objectstore_bucket.is_none() {
        return;
    }
    let status = shared.config.pgdata.join("pg_wal/archive_status");
    let Ok(entries) = std::fs::read_dir(&status) else {
        return;
    };
    let Ok(program) = files::tusk_program() else {
        return;
    };
    let mut ready: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter_map(|name| name.strip_suffix(".ready").map(str::to_owned))
        .collect();
    ready.sort();
    for segment in ready {
        let mut command = child::command(&program);
        command
            .arg("wal-archive")
            .arg(format!("pg_wal/{segment}"))
            .current_dir(&shared.config.pgdata);
        match reaped.run(command, "tusk wal-archive").await {
            Ok(_) => {
                let _ = std::fs::rename(
                    status.join(format!("{segment}.ready")),
                    status.join(format!("{segment}.done")),
                );
                tracing::info!(%segment, "archived before rejoining");
            }
            Err(error) => tracing::warn!(%segment, %error, "cannot archive before rejoining"),
        }
    }
}

/// The suffix of the diverged copy (and of its WAL directory on a WAL volume).
const DIVERGED: &str = ".tusk-diverged";

fn diverged_dir(pgdata: &Path) -> PathBuf {
    crate::wal::dir::suffixed(pgdata, DIVERGED)
}

/// Set the diverged data aside and clone the primary afresh.
async fn reclone(shared: &Shared, reaped: &mut Reaped<'_>) -> Result<(), Error> {
    let pgdata = &shared.config.pgdata;
    let aside = diverged_dir(pgdata);
    waldir::remove_cluster(&aside)?;
    std::fs::rename(pgdata, &aside).map_err(Error::io("set aside", pgdata))?;
    // The diverged copy keeps its WAL, beside the WAL directory the clone takes.
    waldir::set_aside(shared, &aside, DIVERGED)?;
    let staging = bootstrap::staging_dir(pgdata);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(Error::io("remove", &staging))?;
    }
    waldir::clear(shared, false)?;
    let command = bootstrap::basebackup_command(shared, &staging).await?;
    reaped.run(command, "pg_basebackup").await?;
    files::mark_standby(&staging)?;
    waldir::put_in_place(shared, &staging)?;
    tracing::info!(diverged = %aside.display(), "cloned the primary; the diverged data is kept aside");
    Ok(())
}

/// Where a cleanly stopped cluster's WAL ends: its last checkpoint, as
/// `pg_controldata` prints it.
pub async fn final_lsn(shared: &Shared, reaped: &mut Reaped<'_>) -> Result<Lsn, Error> {
    let mut command = child::command(shared.bindir.join("pg_controldata"));
    command.arg(&shared.config.pgdata);
    let output = reaped.run(command, "pg_controldata").await?;
    output
        .lines()
        .find_map(|line| line.strip_prefix("Latest checkpoint location:"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| Error::Command {
            program: "pg_controldata".into(),
            status: "ok".into(),
            stderr: "no \"Latest checkpoint location\" in its output".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_rewind_verifies_a_tls_primary_by_name_and_logs_in_as_the_superuser() {
        let files = ClientFiles {
            root: "/run/tls/ca.crt".to_owned(),
            cert: "/run/tls/replication.crt".to_owned(),
            key: "/run/tls/replication.key".to_owned(),
        };
        let tls = Upstream {
            host: "orders-1".to_owned(),
            hostaddr: Some("10.0.0.8".to_owned()),
            tls: true,
            holder: Some("orders-1".to_owned()),
        };
        assert_eq!(
            source_conninfo(&tls, 5432, Some(&files)),
            "host='orders-1' hostaddr='10.0.0.8' port='5432' user='postgres' \
             sslmode='verify-full' sslrootcert='/run/tls/ca.crt' dbname='postgres' \
             connect_timeout='5'"
        );
        let plain = Upstream {
            host: "10.0.0.8".to_owned(),
            hostaddr: None,
            tls: false,
            holder: Some("orders-1".to_owned()),
        };
        assert_eq!(
            source_conninfo(&plain, 5432, Some(&files)),
            "host='10.0.0.8' port='5432' user='postgres' sslmode='prefer' dbname='postgres' \
             connect_timeout='5'"
        );
    }
}
