//! Apply, for the backup actions: create a Backup the plan asks for (a
//! scheduled run's, a major upgrade's, the final one), and run a retention
//! pass on the primary's manager, then delete the scheduled Backups whose
//! data it removed.

use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::events::EventType;
use tracing::{info, warn};

use super::{Applier, Done};
use crate::api::v1::{Backup, Database};
use crate::contract::RetentionRequest;
use crate::controller::database::backups;
use crate::controller::database::instances::{Answer, Call};
use crate::controller::{Context, Error, key_of};
use crate::lifecycle::{BackupPurpose, RetentionPass};
use crate::resources::{self, names};

/// Creates Backup `name` of `db` (an existing one is the same request:
/// done). Needs only the Database as stored: a deletion takes its final
/// backup whatever its spec says.
pub async fn take_backup(
    ctx: &Context,
    db: &Database,
    name: &str,
    purpose: &BackupPurpose,
) -> Result<Option<Done>, Error> {
    {
        let (built, reason, note) = match purpose {
            BackupPurpose::Scheduled { at } => (
                resources::scheduled_backup(db, name, *at),
                "BackupScheduled",
                format!("created Backup {name} for spec.backup.schedule"),
            ),
            BackupPurpose::Upgrade => (
                resources::upgrade_backup(db, name),
                "BackupBeforeUpgrade",
                format!("created Backup {name} before a major upgrade"),
            ),
            BackupPurpose::Final => (
                resources::final_backup(db, name),
                "FinalBackup",
                format!("taking final backup {name} before releasing the Database"),
            ),
        };
        // A Database never stored has no uid to own or mark a Backup with.
        let Some(backup) = built else {
            return Ok(None);
        };
        let api: kube::Api<Backup> =
            kube::Api::namespaced(ctx.client.clone(), &db.namespace().unwrap_or_default());
        match api.create(&PostParams::default(), &backup).await {
            Ok(_) => {}
            // A pass from a stale cache made it already.
            Err(kube::Error::Api(status)) if status.code == 409 => return Ok(None),
            Err(err) => return Err(Error::kube("creating a Backup")(err)),
        }
        info!(backup = %name, ?purpose, "backup requested");
        Ok(Some(Done { reason, note }))
    }
}

impl Applier<'_> {
    /// Runs a retention pass on `primary`. A failed pass is an Event and a
    /// warning, not a failed reconcile: it is tried again with the next
    /// backup or after [`crate::lifecycle::PRUNE_EVERY`].
    pub(super) async fn run_retention(
        &self,
        primary: &str,
        window_seconds: u64,
        last_backup: Option<&str>,
    ) -> Result<Option<Done>, Error> {
        let Some(target) = self.snapshot.target(primary) else {
            return Ok(None);
        };
        let token = self
            .secret_password(&names::instance_token_secret(self.name()))
            .await?;
        self.ctx.pruned(
            &key_of(self.db),
            RetentionPass {
                at: self.snapshot.now,
                last_backup: last_backup.map(str::to_owned),
            },
        );
        let call = Call::Retention(RetentionRequest { window_seconds });
        let report = match self.instances.call(target, &token, call).await {
            Ok(Answer::Retention(report)) => report,
            Ok(_) => return Ok(None),
            Err(error) => {
                warn!(%error, "retention pass failed");
                self.ctx
                    .publish(
                        self.db,
                        EventType::Warning,
                        "RetentionFailed",
                        "Retention",
                        format!("spec.backup.retention: the pass failed: {error}"),
                    )
                    .await;
                return Ok(None);
            }
        };
        info!(removed = ?report.removed, wal = report.wal_removed, "retention pass");
        let observed = backups::of_database(self.db, &self.snapshot.backups);
        for name in backups::pruned_objects(&observed, &report.removed) {
            match self
                .api::<Backup>()
                .delete(name, &DeleteParams::default())
                .await
            {
                Ok(_) => info!(backup = %name, "deleted the Backup whose data retention removed"),
                Err(kube::Error::Api(answer)) if answer.code == 404 => {}
                Err(error) => return Err(Error::kube("deleting a pruned Backup")(error)),
            }
        }
        Ok((report.deleted > 0).then(|| Done {
            reason: "Pruned",
            note: format!(
                "spec.backup.retention: removed backups {:?} ({} interrupted) and {} WAL files; kept {:?}",
                report.removed,
                report.interrupted_removed.len(),
                report.wal_removed,
                report.kept
            ),
        }))
    }

    /// Creates the Job of `spec.migrations` at `version`.
    pub(super) async fn run_migration(&self, version: &str) -> Result<Option<Done>, Error> {
        let Some(spec) = self
            .db
            .spec
            .migrations
            .as_ref()
            .filter(|m| m.version == version)
        else {
            return Ok(None);
        };
        let job = resources::migration_job(self.model, spec, self.build);
        let name = job.name_any();
        match self
            .api::<k8s_openapi::api::batch::v1::Job>()
            .create(&PostParams::default(), &job)
            .await
        {
            Ok(_) => {}
            // Created by an earlier pass whose list did not show it yet.
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(None),
            Err(e) => return Err(Error::kube("creating the migration Job")(e)),
        }
        Ok(Some(Done {
            reason: "MigrationStarted",
            note: format!("running spec.migrations version {version} in Job {name}"),
        }))
    }
}
