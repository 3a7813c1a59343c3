//! Backups as the Database's conditions see them: `BackupHealthy` says
//! whether WAL reaches the object store, from the primary's
//! `pg_stat_archiver` and the last error `tusk wal-archive` reported, or
//! that the store's credentials Secret does not exist. It does not weigh on
//! Ready: the database serves whatever the store does (the instances start
//! without the credentials, which they read when they use the store), and
//! PostgreSQL keeps WAL it could not archive until it can.

use jiff::Timestamp;

use crate::contract::env;
use crate::lifecycle::context::Context;
use crate::lifecycle::verdict::Desired;

pub const BACKUP_HEALTHY: &str = "BackupHealthy";

const FAILING: &str = "ArchivingFailing";
const CREDENTIALS_MISSING: &str = "CredentialsSecretMissing";
const ARCHIVING: &str = "Archiving";
const STARTED: &str = "ArchivingStarted";

/// `None` when the Database has no object store: nothing to be healthy
/// about. While no primary answers, the last word stays.
pub(in crate::lifecycle) fn condition(ctx: &Context) -> Option<Desired> {
    let store = ctx.spec.backup.as_ref()?.object_store.as_ref()?;
    if let Some(secret) = &ctx.observed.missing_store_credentials {
        return Some(credentials_missing(secret, &store.bucket));
    }
    let Some(archiver) = ctx.observed.archiving.as_ref() else {
        return previous(ctx);
    };
    let at = |seconds: Option<i64>| {
        seconds
            .and_then(|s| Timestamp::from_second(s).ok())
            .map_or_else(|| "an unknown time".to_owned(), |t| t.to_string())
    };
    Some(if archiver.failing() {
        let cause = archiver
            .last_error
            .as_deref()
            .unwrap_or("see the postgres log of the primary");
        // Refused credentials look like any other store error: say where
        // they come from.
        let credentials = store
            .credentials_secret
            .as_deref()
            .map(|secret| format!(" (credentials from Secret {secret})"))
            .unwrap_or_default();
        Desired::new(
            BACKUP_HEALTHY,
            false,
            FAILING,
            format!(
                "WAL archiving to bucket {}{credentials} fails since {} ({} failures, last {}): \
                 {cause}; PostgreSQL keeps the WAL until it is archived",
                store.bucket,
                at(archiver.last_failed_at),
                archiver.failed_count,
                archiver.last_failed_wal.as_deref().unwrap_or("unknown"),
            ),
        )
    } else {
        match &archiver.last_archived_wal {
            Some(wal) => Desired::new(
                BACKUP_HEALTHY,
                true,
                ARCHIVING,
                format!(
                    "WAL is archived to bucket {}: last {wal} at {}",
                    store.bucket,
                    at(archiver.last_archived_at)
                ),
            ),
            None => Desired::new(
                BACKUP_HEALTHY,
                true,
                STARTED,
                format!(
                    "WAL archiving to bucket {} is on; no segment has completed yet",
                    store.bucket
                ),
            ),
        }
    })
}

/// A store whose credentials Secret does not exist: the instances serve
/// without it, and nothing reaches the store until it does.
fn credentials_missing(secret: &str, bucket: &str) -> Desired {
    Desired::new(
        BACKUP_HEALTHY,
        false,
        CREDENTIALS_MISSING,
        format!(
            "spec.backup.objectStore.credentialsSecret: Secret {secret} does not exist in this \
             namespace (keys {} and {}): nothing reaches bucket {bucket} until it does; the \
             instances serve meanwhile and PostgreSQL keeps the WAL until it is archived",
            env::ACCESS_KEY_ID,
            env::SECRET_ACCESS_KEY
        ),
    )
}

/// The recorded `BackupHealthy`, when it is one this module wrote.
fn previous(ctx: &Context) -> Option<Desired> {
    let recorded = ctx
        .previous?
        .conditions
        .iter()
        .find(|c| c.type_ == BACKUP_HEALTHY)?;
    let reason = [FAILING, ARCHIVING, STARTED]
        .into_iter()
        .find(|r| *r == recorded.reason)?;
    Some(Desired::new(
        BACKUP_HEALTHY,
        recorded.status == "True",
        reason,
        recorded.message.clone(),
    ))
}
