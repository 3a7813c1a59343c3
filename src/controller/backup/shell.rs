//! The Backup controller's shell: one pass reads the Backup, its Database,
//! the Database's other Backups and instance pods, lets [`super::decide`]
//! and [`super::status`] decide, calls the chosen instance's manager (or
//! verifies a completed Backup), writes the status whole, and counts and
//! publishes what changed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio::sync::watch;
use tracing::{Span, field, info, instrument, warn};

use super::decide::{Next, Source, next};
use super::status::{
    FAILED, INSTANCE_LOST, INVALID_SPEC, NO_INSTANCE, from_run, outcome, validated, waiting,
};
use crate::api::status::BackupStatus;
use crate::api::store;
use crate::api::v1::{Backup, Database};
use crate::api::validate;
use crate::contract::{BackupRequest, BackupStage, Role};
use crate::controller::credentials::instance_token;
use crate::controller::database::instances::{Answer, Call, Target};
use crate::controller::{
    Change, Context, Error, FIELD_MANAGER, FINALIZER, conditions, key_of, namespace_of, reconciled,
    sample_every, verification,
};
use crate::resources::{self, labels, names};
use crate::telemetry;
use crate::telemetry::metrics::BackupResult;

pub const CONTROLLER: &str = "backup";

/// How often a running backup is looked at, and a waiting one retried.
const POLL: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_secs(5);

/// Keeps the work-queue depth of the Backup cache current (the last successful
/// backup of each Database comes from the Databases' `status.lastBackup`). `stores` are the caches of
/// every Backup controller (one per watched namespace).
pub async fn sample(
    stores: Vec<Store<Backup>>,
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    sample_every(stores, shutdown, |backups| {
        ctx.metrics
            .set_queue_depth(CONTROLLER, ctx.queue_depth(backups));
        let (proven, success) = verification::last_verifications(backups);
        ctx.metrics.set_verifications(proven, success);
    })
    .await;
}

/// One pass over a Backup in a `reconcile` span that carries the error when
/// the pass fails.
#[instrument(
    name = "reconcile",
    skip_all,
    fields(
        controller = CONTROLLER,
        backup = %backup.name_any(),
        namespace = backup.metadata.namespace.as_deref().unwrap_or_default(),
        error = field::Empty,
    )
)]
pub async fn reconcile(backup: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = pass(backup, ctx).await;
    if let Err(error) = &result {
        telemetry::record_error(&Span::current(), error);
    }
    result
}

async fn pass(backup: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _pass = ctx.pass(CONTROLLER, backup.as_ref());
    let namespace = namespace_of(backup.as_ref())?;
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), &namespace);
    let databases: Api<Database> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, backup, |event| async {
        match event {
            Finalizer::Apply(backup) => apply(&backup, &api, &databases, &ctx).await,
            // Deleting a Backup object keeps the data in object storage: retention,
            // not a kubectl delete, decides when stored backups go.
            Finalizer::Cleanup(_) => Ok(Action::await_change()),
        }
    })
    .await
    .map_err(|source| Error::Finalizer {
        name: format!("{namespace}/Backup"),
        source: Box::new(source),
    })
}

/// Validate, act on a valid Backup, write the status, report.
async fn apply(
    backup: &Backup,
    api: &Api<Backup>,
    databases: &Api<Database>,
    ctx: &Context,
) -> Result<Action, Error> {
    let namespace = namespace_of(backup)?;
    let database = databases
        .get_opt(&backup.spec.database)
        .await
        .map_err(Error::kube("reading the Backup's Database"))?
        .map(|db| store::with_default(&db, ctx.build.default_store.as_ref()));
    let errors = validate::backup(backup, database.as_ref());
    let now = Time(Timestamp::now());
    let mut next_status = validated(backup, &errors, &now);
    let mut requeue = None;
    if errors.is_empty() {
        let act = Act {
            ctx,
            backup,
            namespace: &namespace,
            now: &now,
        };
        (next_status, requeue) = act.run(api, database.as_ref(), next_status).await?;
    }
    let body = json!({ "apiVersion": "tusk.dev/v1", "kind": "Backup", "status": next_status });
    api.patch_status(
        &backup.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(Error::kube("writing the Backup status"))?;
    report(ctx, backup, &next_status).await;
    reconciled(backup, ctx);
    info!(valid = errors.is_empty(), phase = ?next_status.phase, "reconciled");
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Counts the outcome once per Backup and outcome, and publishes an Event
/// for each condition that changed.
async fn report(ctx: &Context, backup: &Backup, next_status: &BackupStatus) {
    let before = backup.status.clone().unwrap_or_default();
    // Counted once the status says so, once per Backup and outcome.
    if let Some(result) = outcome(next_status) {
        let stored = outcome(&before).map(BackupResult::as_str);
        if ctx.remember(&key_of(backup), stored, result.as_str()) != Change::Unchanged {
            ctx.metrics.backup_finished(result);
        }
    }
    for changed in conditions::transitions(&before.conditions, &next_status.conditions) {
        let warning = [
            INVALID_SPEC,
            FAILED,
            INSTANCE_LOST,
            verification::VERIFICATION_FAILED,
        ];
        let type_ = if warning.contains(&changed.reason.as_str()) {
            EventType::Warning
        } else {
            EventType::Normal
        };
        ctx.publish(
            backup,
            type_,
            &changed.reason,
            "Reconcile",
            changed.message.clone(),
        )
        .await;
    }
}

/// Acting on one valid Backup in one pass.
struct Act<'a> {
    ctx: &'a Context,
    backup: &'a Backup,
    namespace: &'a str,
    now: &'a Time,
}

impl Act<'_> {
    /// Decides on the Backup and carries it out; returns the status and
    /// when to look again.
    async fn run(
        &self,
        api: &Api<Backup>,
        database: Option<&Database>,
        status: BackupStatus,
    ) -> Result<(BackupStatus, Option<Duration>), Error> {
        let backup = self.backup;
        let others: Vec<Backup> = api
            .list(&ListParams::default())
            .await
            .map_err(Error::kube("listing the Database's Backups"))?
            .items
            .into_iter()
            .filter(|o| {
                o.spec.database == backup.spec.database && o.name_any() != backup.name_any()
            })
            .collect();
        let user_ca =
            database.and_then(|db| db.spec.tls.ca.as_ref().map(|r| r.secret_name.as_str()));
        let sources = sources(self.ctx, self.namespace, &backup.spec.database, user_ca).await?;
        let others: Vec<&Backup> = others.iter().collect();
        let generation = backup.metadata.generation;
        match next(backup, &others, &sources) {
            Next::Done => match database.filter(|db| verification::wanted(backup, Some(db))) {
                Some(db) => verification::step(self.ctx, backup, db, &status, self.now).await,
                None => Ok((status, None)),
            },
            Next::Wait { reason, message } => Ok((
                waiting(&status, reason, &message, generation, self.now),
                Some(RETRY),
            )),
            Next::Start { instance } => {
                let status = self.start(&sources, &instance, status).await?;
                Ok((status, Some(POLL)))
            }
            Next::Poll { instance } => {
                let status = self.poll(&sources, &instance, status).await;
                Ok((status, Some(POLL)))
            }
        }
    }

    /// Asks `instance`'s manager to take the backup.
    async fn start(
        &self,
        sources: &[Source],
        instance: &str,
        status: BackupStatus,
    ) -> Result<BackupStatus, Error> {
        let (backup, generation) = (self.backup, self.backup.metadata.generation);
        let Some(source) = sources.iter().find(|c| c.name == instance) else {
            return Ok(status);
        };
        let token = instance_token(self.ctx, self.namespace, &backup.spec.database).await?;
        let call = Call::Backup(BackupRequest {
            backup: backup.name_any(),
        });
        match self.ctx.instances.call(target(source), &token, call).await {
            Ok(Answer::Backup(run)) => {
                info!(%instance, "backup started");
                let mut next_status = from_run(&status, instance, Some(&run), generation, self.now);
                next_status.image = sources
                    .iter()
                    .find(|c| c.name == instance)
                    .map(|c| c.image.clone())
                    .filter(|image| !image.is_empty());
                Ok(next_status)
            }
            Ok(_) => Ok(status),
            Err(error) => {
                warn!(%instance, %error, "the instance did not start the backup");
                let message = format!("{instance} did not start it: {error}");
                Ok(waiting(
                    &status,
                    NO_INSTANCE,
                    &message,
                    generation,
                    self.now,
                ))
            }
        }
    }

    /// Reads where the run on `instance` is; a standby's run waiting for its
    /// last WAL gets the primary to switch segments.
    async fn poll(&self, sources: &[Source], instance: &str, status: BackupStatus) -> BackupStatus {
        let (backup, generation) = (self.backup, self.backup.metadata.generation);
        let Some(source) = sources.iter().find(|c| c.name == instance) else {
            return from_run(&status, instance, None, generation, self.now);
        };
        match self.ctx.instances.backups(target(source)).await {
            Ok(runs) => {
                let run = runs.backups.iter().find(|r| r.backup == backup.name_any());
                if run.is_some_and(|r| r.stage == BackupStage::WaitingForWal)
                    && source.role == Some(Role::Replica)
                {
                    switch_primary_wal(self.ctx, self.namespace, &backup.spec.database, sources)
                        .await;
                }
                from_run(&status, instance, run, generation, self.now)
            }
            // Not answering is not yet lost: the pod is still there.
            Err(error) => {
                warn!(%instance, %error, "cannot read the backup's progress");
                status
            }
        }
    }
}

/// How to reach `source`'s manager.
fn target(source: &Source) -> Target<'_> {
    Target::of(
        source.ip.as_deref().unwrap_or_default(),
        &source.name,
        source.tls.is_some(),
        source.tls.as_ref(),
    )
}

/// The Database's instance pods, by their labels and readiness.
async fn sources(
    ctx: &Context,
    namespace: &str,
    database: &str,
    user_ca: Option<&str>,
) -> Result<Vec<Source>, Error> {
    let client = crate::controller::database::observe::tls::client_tls(
        &ctx.client,
        namespace,
        database,
        user_ca,
        &mut Default::default(),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{}={database}", labels::DATABASE);
    let listed = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(Error::kube("listing the Database's Pods"))?;
    Ok(listed
        .items
        .into_iter()
        .filter(|p| names::serial_of(database, &p.name_any()).is_some())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            let ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            Source {
                tls: client.clone().filter(|_| resources::serves_tls(&p)),
                role: p.labels().get(labels::ROLE).and_then(|r| Role::parse(r)),
                image: resources::postgres_image(&p),
                name: p.name_any(),
                ip: status.pod_ip,
                ready,
            }
        })
        .collect())
}

/// A standby's backup ends in WAL only the primary archives: close that
/// segment now rather than at `archive_timeout`.
async fn switch_primary_wal(ctx: &Context, namespace: &str, database: &str, sources: &[Source]) {
    let Some(primary) = sources.iter().find(|c| c.role == Some(Role::Primary)) else {
        return;
    };
    if primary.ip.is_none() {
        return;
    }
    let token = match instance_token(ctx, namespace, database).await {
        Ok(token) => token,
        Err(error) => {
            warn!(%error, "cannot switch the primary's WAL");
            return;
        }
    };
    if let Err(error) = ctx
        .instances
        .call(target(primary), &token, Call::WalSwitch)
        .await
    {
        warn!(primary = %primary.name, %error, "cannot switch the primary's WAL");
    }
}
