//! `tusk verify-backup`: a throwaway restore of one base backup that proves it.
//!
//! Run by the operator as a Job after each completed backup (when
//! `spec.backup.verify` is on): the backup is streamed into the Job's own
//! volume and checked against its manifest, WAL is replayed from the archive
//! to the backup's end LSN, PostgreSQL promotes (reaching consistency) and
//! then every database must answer a query; where `amcheck` is available the
//! largest B-tree indexes (a bounded sample) are verified too. Nothing is
//! archived (the Job's pod has no store of its own), so the Database's archive
//! is only read. The outcome goes to the termination log as JSON.

use std::path::Path;
use std::time::Instant;

use crate::contract::Verification;

use super::restore::{Promoted, Source, restore};
use super::{Error, InstanceConfig, Shared, find_bindir, sql};

/// Where Kubernetes reads a container's termination message.
pub const TERMINATION_LOG: &str = "/dev/termination-log";

/// B-tree indexes `amcheck` verifies per run, largest first: a sample that
/// bounds the Job's time on a large database.
const INDEX_SAMPLE: i64 = 20;

/// Runs the verification with `config` (the pod's environment, restore
/// variables included) and writes the outcome to `termination_log`; an error
/// only when the outcome says the backup is not proven.
pub async fn verify_backup(config: InstanceConfig, termination_log: &Path) -> Result<(), Error> {
    if let Err(err) = crate::telemetry::init_logging() {
        eprintln!("tusk verify-backup: {err}");
    }
    let started = Instant::now();
    let result = run(config).await;
    let outcome = match &result {
        Ok(outcome) => outcome.clone(),
        Err(error) => Verification {
            verified: false,
            message: error.to_string(),
            ..Verification::default()
        },
    };
    let outcome = Verification {
        seconds: started.elapsed().as_secs_f64(),
        ..outcome
    };
    tracing::info!(verified = outcome.verified, message = %outcome.message, "verification done");
    let json = serde_json::to_string(&outcome).unwrap_or_default();
    if let Err(error) = std::fs::write(termination_log, &json) {
        tracing::warn!(%error, path = %termination_log.display(), "cannot write the termination log");
    }
    println!("{json}");
    result.map(|_| ())
}

async fn run(config: InstanceConfig) -> Result<Verification, Error> {
    let bindir = find_bindir(config.bindir.as_deref())?;
    let source = Source::from_env(|name| std::env::var(name).ok())?;
    let pgdata = config.pgdata.clone();
    if pgdata.exists() {
        std::fs::remove_dir_all(&pgdata).map_err(Error::io("remove", &pgdata))?;
    }
    let parameters = super::parse_parameters(&config.parameters)?;
    let shared = Shared::new(config, bindir, parameters);
    let promoted = restore(&shared, &source, &pgdata).await?;
    let checked = check(&shared, &promoted).await;
    promoted.stop().await;
    checked
}

/// Every database answers; a bounded sample of B-tree indexes passes amcheck.
async fn check(shared: &Shared, promoted: &Promoted) -> Result<Verification, Error> {
    let config = &shared.config;
    let client = sql::connect_local(&config.socket_dir, config.port)
        .await
        .map_err(Error::sql("connecting to the restored server"))?;
    let databases: Vec<String> = client
        .query(
            "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname",
            &[],
        )
        .await
        .map_err(Error::sql("listing the databases"))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    drop(client);
    let mut indexes = 0u32;
    let mut amcheck = false;
    for database in &databases {
        let client = sql::connect_local_to(&config.socket_dir, config.port, database)
            .await
            .map_err(Error::sql("connecting to a restored database"))?;
        client
            .query_one("SELECT count(*) FROM pg_class", &[])
            .await
            .map_err(Error::sql("querying a restored database"))?;
        let available = client
            .query_opt(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'amcheck'",
                &[],
            )
            .await
            .map_err(Error::sql("looking for amcheck"))?
            .is_some();
        if !available {
            continue;
        }
        amcheck = true;
        // Only this throwaway copy gets the extension.
        client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
            .await
            .map_err(Error::sql("creating amcheck"))?;
        let sample = INDEX_SAMPLE - i64::from(indexes);
        if sample <= 0 {
            continue;
        }
        let rows = client
            .query(
                "SELECT c.oid::regclass::text, bt_index_check(c.oid)::text \
                 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                 JOIN pg_am a ON a.oid = c.relam \
                 WHERE a.amname = 'btree' AND c.relpersistence <> 't' \
                   AND i.indisvalid AND i.indisready \
                 ORDER BY c.relpages DESC LIMIT $1",
                &[&sample],
            )
            .await
            .map_err(|source| {
                Error::Restore(format!(
                    "amcheck found a problem in database {database}: {source}"
                ))
            })?;
        indexes += u32::try_from(rows.len()).unwrap_or(u32::MAX);
    }
    let checks = if amcheck {
        format!("{indexes} B-tree indexes passed amcheck")
    } else {
        "amcheck is not available in the image".to_owned()
    };
    Ok(Verification {
        verified: true,
        backup: promoted.manifest.id.clone(),
        seconds: 0.0,
        databases: u32::try_from(databases.len()).unwrap_or(u32::MAX),
        indexes_checked: indexes,
        message: format!(
            "restored backup {} to its end {}, consistent and promoted; {} databases answered; {checks}",
            promoted.manifest.id,
            promoted.manifest.end_lsn,
            databases.len()
        ),
    })
}
