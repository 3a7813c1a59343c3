//! Backups as the Database's conditions see them: `BackupHealthy` says
//! whether WAL reaches the object store, from the primary's
//! `pg_stat_archiver` and the last error `tusk wal-archive` reported. It
//! does not weigh on Ready: the database serves whatever the store does, and
//! PostgreSQL keeps WAL it could not archive until it can.

use jiff::Timestamp;

use crate::lifecycle::context::Context;
use crate::lifecycle::verdict::{Desired, Verdict};

pub const BACKUP_HEALTHY: &str = "BackupHealthy";

const FAILING: &str = "ArchivingFailing";
const ARCHIVING: &str = "Archiving";
const STARTED: &str = "ArchivingStarted";

/// `None` when the Database has no object store: nothing to be healthy
/// about. While no primary answers, the last word stays.
pub(in crate::lifecycle) fn condition(ctx: &Context) -> Option<Desired> {
    let store = ctx.spec.backup.as_ref()?.object_store.as_ref()?;
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
        Desired::new(
            BACKUP_HEALTHY,
            false,
            FAILING,
            format!(
                "WAL archiving to bucket {} fails since {} ({} failures, last {}): {cause}; \
                 PostgreSQL keeps the WAL until it is archived",
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

/// A store whose credentials Secret is missing: the pods cannot start (the
/// kubelet waits for it), which the Ready condition says by name.
pub(in crate::lifecycle) fn verdicts(ctx: &Context) -> Vec<Verdict> {
    let Some(secret) = &ctx.observed.missing_store_credentials else {
        return Vec::new();
    };
    vec![Verdict::blocked(
        "CredentialsSecretMissing",
        format!(
            "spec.backup.objectStore.credentialsSecret: Secret {secret} does not exist in this \
             namespace; the instances cannot start until it does (keys AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY)"
        ),
    )]
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
