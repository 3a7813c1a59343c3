//! The Backup controller: observe the Backup, its Database, the Database's
//! other Backups and instances → pure decision ([`next`], [`from_run`]) →
//! act (start the run on the chosen instance's manager, or read where it
//! is) → status. The instance manager takes the backup
//! ([`crate::backup::take`]); this controller chooses where, keeps one
//! running per Database, and reports.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
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

use super::conditions::{self, Desired, READY};
use super::database::instances::{Answer, Call};
use super::verification;
use super::{Change, Context, FIELD_MANAGER, FINALIZER, key_of, namespace_of, reconciled};
use crate::api::status::{BackupPhase, BackupStatus};
use crate::api::store;
use crate::api::v1::{Backup, BackupTarget, Database};
use crate::api::validate::{self, FieldError};
use crate::contract::{BackupRequest, BackupRun, BackupStage, BackupState, Role};
use crate::controller::Error;
use crate::resources::{self, PASSWORD_KEY, labels, names};
use crate::telemetry;
use crate::telemetry::metrics::BackupResult;

pub const CONTROLLER: &str = "backup";

/// Reason of the Ready condition of a Backup with an invalid spec.
const INVALID_SPEC: &str = "InvalidSpec";
/// Waiting for the Database's running backup (one at a time).
const QUEUED: &str = "Queued";
/// No instance of the Database can take it now.
const NO_INSTANCE: &str = "NoInstance";
const RUNNING: &str = "Running";
const COMPLETED: &str = "Completed";
const FAILED: &str = "BackupFailed";
/// The instance that ran it restarted or went away mid-way.
const INSTANCE_LOST: &str = "InstanceLost";

/// How often a running backup is looked at, and a waiting one retried.
const POLL: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_secs(5);

/// Validation's part of the status: an invalid spec keeps the Backup
/// Pending and says which field; a valid one keeps what it had.
pub fn plan(backup: &Backup, errors: &[FieldError], now: &Time) -> BackupStatus {
    let previous = backup.status.clone().unwrap_or_default();
    let generation = backup.metadata.generation;
    let mut conditions = previous.conditions.clone();
    if !errors.is_empty() {
        let ready = Desired::new(READY, false, INVALID_SPEC, validate::summary(errors));
        conditions = conditions::merge(&previous.conditions, &[ready], generation, now);
    }
    BackupStatus {
        phase: Some(previous.phase.unwrap_or(BackupPhase::Pending)),
        observed_generation: generation,
        conditions,
        ..previous
    }
}

/// An instance of the Database, as the Backup controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub ip: Option<String>,
    pub role: Option<Role>,
    pub ready: bool,
    /// Its PostgreSQL image.
    pub image: String,
}

/// What to do with a valid Backup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Finished: nothing more.
    Done,
    /// Stay Pending, saying why.
    Wait {
        reason: &'static str,
        message: String,
    },
    /// Ask this instance's manager to take it.
    Start { instance: String },
    /// Read where the run on this instance is.
    Poll { instance: String },
}

/// The pure decision for a valid Backup: `others` are the other Backups of
/// the same Database; `candidates` its instances.
pub fn next(backup: &Backup, others: &[&Backup], candidates: &[Candidate]) -> Next {
    let status = backup.status.clone().unwrap_or_default();
    match status.phase {
        Some(BackupPhase::Completed | BackupPhase::Failed) => return Next::Done,
        Some(BackupPhase::Running) => {
            if let Some(instance) = status.instance {
                return Next::Poll { instance };
            }
        }
        Some(BackupPhase::Pending) | None => {}
    }
    let database = &backup.spec.database;
    if let Some(running) = others
        .iter()
        .find(|o| phase_of(o) == Some(BackupPhase::Running))
    {
        return Next::Wait {
            reason: QUEUED,
            message: format!(
                "backup {} of {database} is running; one at a time",
                running.name_any()
            ),
        };
    }
    // First come, first served: the oldest waiting Backup starts first.
    let order = |b: &Backup| (b.creation_timestamp().map(|t| t.0), b.name_any());
    if let Some(ahead) = others
        .iter()
        .filter(|o| matches!(phase_of(o), None | Some(BackupPhase::Pending)))
        .find(|o| order(o) < order(backup))
    {
        return Next::Wait {
            reason: QUEUED,
            message: format!(
                "backup {} of {database} is ahead in the queue",
                ahead.name_any()
            ),
        };
    }
    let ready = |role: Role| {
        let mut ready: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| c.ready && c.ip.is_some() && c.role == Some(role))
            .collect();
        ready.sort_by(|a, b| a.name.cmp(&b.name));
        ready.first().map(|c| c.name.clone())
    };
    let chosen = match backup.spec.target {
        BackupTarget::PreferStandby => ready(Role::Replica).or_else(|| ready(Role::Primary)),
        BackupTarget::Primary => ready(Role::Primary),
    };
    match chosen {
        Some(instance) => Next::Start { instance },
        None => Next::Wait {
            reason: NO_INSTANCE,
            message: format!(
                "no ready instance of {database} to take it on (spec.target: {})",
                match backup.spec.target {
                    BackupTarget::PreferStandby => "prefer-standby",
                    BackupTarget::Primary => "primary",
                }
            ),
        },
    }
}

fn phase_of(backup: &Backup) -> Option<BackupPhase> {
    backup.status.as_ref().and_then(|s| s.phase)
}

/// The status for what the instance says about the run (`None`: it does not
/// know it, so the manager restarted and the run died with it).
pub fn from_run(
    previous: &BackupStatus,
    instance: &str,
    run: Option<&BackupState>,
    generation: Option<i64>,
    now: &Time,
) -> BackupStatus {
    let mut next = BackupStatus {
        instance: Some(instance.to_owned()),
        observed_generation: generation,
        ..previous.clone()
    };
    let ready = match run {
        None => {
            next.phase = Some(BackupPhase::Failed);
            next.progress = None;
            Desired::new(
                READY,
                false,
                INSTANCE_LOST,
                format!(
                    "{instance} restarted or went away during the backup; nothing was kept as a backup"
                ),
            )
        }
        Some(run) => {
            next.started_at = parse_time(&run.started_at).or(next.started_at);
            next.begin_lsn = run.begin_lsn.map(|l| l.to_string()).or(next.begin_lsn);
            next.end_lsn = run.end_lsn.map(|l| l.to_string()).or(next.end_lsn);
            next.location = run.location.clone().or(next.location);
            next.bytes = i64::try_from(run.stored_bytes).ok();
            match run.run {
                BackupRun::Running => {
                    next.phase = Some(BackupPhase::Running);
                    next.progress = Some(progress(run));
                    Desired::new(READY, false, RUNNING, running_message(instance, run))
                }
                BackupRun::Completed => {
                    next.phase = Some(BackupPhase::Completed);
                    next.completed_at = run.completed_at.as_deref().and_then(parse_time);
                    next.progress = Some("100%".into());
                    Desired::new(
                        READY,
                        true,
                        COMPLETED,
                        format!(
                            "stored by {instance}: {} bytes at {}",
                            run.stored_bytes,
                            run.location.as_deref().unwrap_or("the object store")
                        ),
                    )
                }
                BackupRun::Failed => {
                    next.phase = Some(BackupPhase::Failed);
                    next.progress = None;
                    Desired::new(
                        READY,
                        false,
                        FAILED,
                        format!(
                            "on {instance}: {}",
                            run.error.as_deref().unwrap_or("the backup failed")
                        ),
                    )
                }
            }
        }
    };
    next.conditions = conditions::merge(&previous.conditions, &[ready], generation, now);
    next
}

fn parse_time(text: &str) -> Option<Time> {
    text.parse::<Timestamp>().ok().map(Time)
}

/// Read bytes over the data directory's size, capped below 100% until done.
fn progress(run: &BackupState) -> String {
    if run.stage == BackupStage::WaitingForWal {
        return "99%".into();
    }
    if run.estimated_bytes == 0 {
        return "0%".into();
    }
    let percent = (run.raw_bytes.saturating_mul(100) / run.estimated_bytes).min(98);
    format!("{percent}%")
}

fn running_message(instance: &str, run: &BackupState) -> String {
    match run.stage {
        BackupStage::Starting => format!("{instance} is starting the backup (checkpoint)"),
        BackupStage::Streaming => format!(
            "{instance} is streaming the data directory: {} of about {} bytes read, {} stored",
            run.raw_bytes, run.estimated_bytes, run.stored_bytes
        ),
        BackupStage::WaitingForWal | BackupStage::Done => format!(
            "the data is stored; waiting for the WAL it ends in to be archived ({} bytes)",
            run.stored_bytes
        ),
    }
}

/// A Pending status that says why it waits.
fn waiting(
    previous: &BackupStatus,
    reason: &'static str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> BackupStatus {
    let ready = Desired::new(READY, false, reason, message);
    BackupStatus {
        phase: Some(BackupPhase::Pending),
        observed_generation: generation,
        conditions: conditions::merge(&previous.conditions, &[ready], generation, now),
        ..previous.clone()
    }
}

/// Where the Backup controller took a Backup, as `status` says: the phase when it
/// ended, else why it was not started. `None` while it may still start.
pub fn outcome(status: &BackupStatus) -> Option<BackupResult> {
    match status.phase {
        Some(BackupPhase::Completed) => return Some(BackupResult::Completed),
        Some(BackupPhase::Failed) => return Some(BackupResult::Failed),
        Some(BackupPhase::Pending | BackupPhase::Running) | None => {}
    }
    let ready = status.conditions.iter().find(|c| c.type_ == READY)?;
    match ready.reason.as_str() {
        INVALID_SPEC => Some(BackupResult::Invalid),
        _ => None,
    }
}

/// Keeps the work-queue depth of the Backup cache current (the last successful
/// backup of each Database comes from the Databases' `status.lastBackup`). `stores` are the caches of
/// every Backup controller (one per watched namespace).
pub async fn sample(
    stores: Vec<Store<Backup>>,
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    super::sample_every(stores, shutdown, |backups| {
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
    let generation = backup.metadata.generation;
    let mut next_status = plan(backup, &errors, &now);
    let mut requeue = None;
    if errors.is_empty() {
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
        let candidates = candidates(ctx, &namespace, &backup.spec.database).await?;
        let others: Vec<&Backup> = others.iter().collect();
        match next(backup, &others, &candidates) {
            Next::Done => {
                if let Some(db) = database
                    .as_ref()
                    .filter(|db| verification::wanted(backup, Some(db)))
                {
                    let (status, again) =
                        verification::step(ctx, backup, db, &next_status, &now).await?;
                    next_status = status;
                    requeue = again;
                }
            }
            Next::Wait { reason, message } => {
                next_status = waiting(&next_status, reason, &message, generation, &now);
                requeue = Some(RETRY);
            }
            Next::Start { instance } => {
                let ip = ip_of(&candidates, &instance);
                let token = instance_token(ctx, &namespace, &backup.spec.database).await?;
                let call = Call::Backup(BackupRequest {
                    backup: backup.name_any(),
                });
                match ctx.instances.call(&ip, &token, call).await {
                    Ok(Answer::Backup(run)) => {
                        info!(%instance, "backup started");
                        next_status =
                            from_run(&next_status, &instance, Some(&run), generation, &now);
                        next_status.image = candidates
                            .iter()
                            .find(|c| c.name == instance)
                            .map(|c| c.image.clone())
                            .filter(|image| !image.is_empty());
                    }
                    Ok(_) => {}
                    Err(error) => {
                        warn!(%instance, %error, "the instance did not start the backup");
                        let message = format!("{instance} did not start it: {error}");
                        next_status =
                            waiting(&next_status, NO_INSTANCE, &message, generation, &now);
                    }
                }
                requeue = Some(POLL);
            }
            Next::Poll { instance } => {
                match candidates.iter().find(|c| c.name == instance) {
                    None => {
                        next_status = from_run(&next_status, &instance, None, generation, &now);
                    }
                    Some(candidate) => {
                        let ip = candidate.ip.clone().unwrap_or_default();
                        match ctx.instances.backups(&ip).await {
                            Ok(runs) => {
                                let run =
                                    runs.backups.iter().find(|r| r.backup == backup.name_any());
                                if run.is_some_and(|r| r.stage == BackupStage::WaitingForWal)
                                    && candidate.role == Some(Role::Replica)
                                {
                                    switch_primary_wal(
                                        ctx,
                                        &namespace,
                                        &backup.spec.database,
                                        &candidates,
                                    )
                                    .await;
                                }
                                next_status =
                                    from_run(&next_status, &instance, run, generation, &now);
                            }
                            // Not answering is not yet lost: the pod is still there.
                            Err(error) => {
                                warn!(%instance, %error, "cannot read the backup's progress")
                            }
                        }
                    }
                }
                requeue = Some(POLL);
            }
        }
    }
    let body = json!({ "apiVersion": "tusk.dev/v1", "kind": "Backup", "status": next_status });
    api.patch_status(
        &backup.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(Error::kube("writing the Backup status"))?;
    let before = backup.status.clone().unwrap_or_default();
    // Counted once the status says so, once per Backup and outcome.
    if let Some(result) = outcome(&next_status) {
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
    reconciled(backup, ctx);
    info!(valid = errors.is_empty(), phase = ?next_status.phase, "reconciled");
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

fn ip_of(candidates: &[Candidate], instance: &str) -> String {
    candidates
        .iter()
        .find(|c| c.name == instance)
        .and_then(|c| c.ip.clone())
        .unwrap_or_default()
}

/// The Database's instance pods, by their labels and readiness.
async fn candidates(
    ctx: &Context,
    namespace: &str,
    database: &str,
) -> Result<Vec<Candidate>, Error> {
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
            Candidate {
                role: p.labels().get(labels::ROLE).and_then(|r| Role::parse(r)),
                image: resources::postgres_image(&p),
                name: p.name_any(),
                ip: status.pod_ip,
                ready,
            }
        })
        .collect())
}

/// The token the managers of `database` take for their `POST`s.
pub(crate) async fn instance_token(
    ctx: &Context,
    namespace: &str,
    database: &str,
) -> Result<String, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = secrets
        .get(&names::instance_token_secret(database))
        .await
        .map_err(Error::kube("reading the instance token Secret"))?;
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(PASSWORD_KEY))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .ok_or(Error::MissingField("password in the instance token Secret"))
}

/// A standby's backup ends in WAL only the primary archives: close that
/// segment now rather than at `archive_timeout`.
async fn switch_primary_wal(
    ctx: &Context,
    namespace: &str,
    database: &str,
    candidates: &[Candidate],
) {
    let Some(primary) = candidates.iter().find(|c| c.role == Some(Role::Primary)) else {
        return;
    };
    let Some(ip) = &primary.ip else {
        return;
    };
    let token = match instance_token(ctx, namespace, database).await {
        Ok(token) => token,
        Err(error) => {
            warn!(%error, "cannot switch the primary's WAL");
            return;
        }
    };
    if let Err(error) = ctx.instances.call(ip, &token, Call::WalSwitch).await {
        warn!(primary = %primary.name, %error, "cannot switch the primary's WAL");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup() -> Backup {
        let mut backup = Backup::new(
            "nightly",
            crate::api::v1::BackupSpec {
                database: "orders".into(),
                target: Default::default(),
            },
        );
        backup.metadata.generation = Some(1);
        backup
    }

    #[test]
    fn a_backup_of_a_missing_database_says_which_field() {
        let b = backup();
        let errors = validate::backup(&b, None);
        let status = plan(&b, &errors, &Time(Timestamp::UNIX_EPOCH));
        assert_eq!(status.phase, Some(BackupPhase::Pending));
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.conditions[0].reason, "InvalidSpec");
        assert!(
            status.conditions[0]
                .message
                .starts_with("spec.database: no Database \"orders\"")
        );
        assert_eq!(outcome(&status), Some(BackupResult::Invalid));
    }

    #[test]
    fn outcomes_follow_the_phase() {
        assert_eq!(outcome(&BackupStatus::default()), None);
        let running = BackupStatus {
            phase: Some(BackupPhase::Running),
            ..BackupStatus::default()
        };
        assert_eq!(outcome(&running), None);
        let failed = BackupStatus {
            phase: Some(BackupPhase::Failed),
            ..BackupStatus::default()
        };
        assert_eq!(outcome(&failed), Some(BackupResult::Failed));
    }

    fn candidate(name: &str, role: Role, ready: bool) -> Candidate {
        Candidate {
            name: name.into(),
            ip: Some(format!("10.0.0.{}", name.len())),
            role: Some(role),
            ready,
            image: "postgres:17".into(),
        }
    }

    fn named(name: &str, second: i64, phase: Option<BackupPhase>) -> Backup {
        let mut b = backup();
        b.metadata.name = Some(name.into());
        b.metadata.creation_timestamp = Some(Time(
            Timestamp::from_second(second).expect("a valid timestamp"),
        ));
        b.status = phase.map(|phase| BackupStatus {
            phase: Some(phase),
            ..BackupStatus::default()
        });
        b
    }

    #[test]
    fn a_standby_is_preferred_and_the_primary_taken_when_asked_or_alone() {
        let b = backup();
        let all = [
            candidate("orders-1", Role::Primary, true),
            candidate("orders-3", Role::Replica, true),
            candidate("orders-2", Role::Replica, false),
        ];
        assert_eq!(
            next(&b, &[], &all),
            Next::Start {
                instance: "orders-3".into()
            },
            "the ready standby, not the unready one"
        );
        assert_eq!(
            next(&b, &[], &all[..1]),
            Next::Start {
                instance: "orders-1".into()
            }
        );
        let mut primary = backup();
        primary.spec.target = BackupTarget::Primary;
        assert_eq!(
            next(&primary, &[], &all),
            Next::Start {
                instance: "orders-1".into()
            }
        );
        let none = next(&b, &[], &[candidate("orders-1", Role::Primary, false)]);
        assert!(
            matches!(&none, Next::Wait { reason: NO_INSTANCE, message } if message.contains("prefer-standby")),
            "{none:?}"
        );
    }

    #[test]
    fn one_backup_runs_at_a_time_and_the_oldest_waiting_goes_first() {
        let all = [candidate("orders-1", Role::Primary, true)];
        let mine = named("b", 200, None);
        let running = named("a", 300, Some(BackupPhase::Running));
        let decided = next(&mine, &[&running], &all);
        assert!(
            matches!(&decided, Next::Wait { reason: QUEUED, message } if message.contains("a of orders is running")),
            "{decided:?}"
        );
        let older = named("a", 100, Some(BackupPhase::Pending));
        let decided = next(&mine, &[&older], &all);
        assert!(
            matches!(&decided, Next::Wait { reason: QUEUED, message } if message.contains("ahead")),
            "{decided:?}"
        );
        let finished = named("a", 100, Some(BackupPhase::Completed));
        let younger = named("c", 300, None);
        assert_eq!(
            next(&mine, &[&finished, &younger], &all),
            Next::Start {
                instance: "orders-1".into()
            }
        );
        // Finished ones are done; a running one is polled where it runs.
        assert_eq!(next(&finished, &[], &all), Next::Done);
        let mut polled = named("d", 1, Some(BackupPhase::Running));
        if let Some(status) = polled.status.as_mut() {
            status.instance = Some("orders-2".into());
        }
        assert_eq!(
            next(&polled, &[], &all),
            Next::Poll {
                instance: "orders-2".into()
            }
        );
    }

    fn run(run: BackupRun, stage: BackupStage) -> BackupState {
        BackupState {
            backup: "nightly".into(),
            run,
            stage,
            started_at: "2026-11-24T10:00:00Z".into(),
            completed_at: (run == BackupRun::Completed).then(|| "2026-11-24T10:01:00Z".into()),
            begin_lsn: Some(crate::contract::Lsn(0x3000028)),
            end_lsn: (run == BackupRun::Completed).then_some(crate::contract::Lsn(0x3000120)),
            estimated_bytes: 1000,
            raw_bytes: 420,
            stored_bytes: 100,
            location: Some("s3://backups/orders/1/base/20261124T100000Z/".into()),
            error: (run == BackupRun::Failed).then(|| "the store refused: AccessDenied".into()),
        }
    }

    #[test]
    fn the_status_follows_the_run() {
        let now = Time(Timestamp::UNIX_EPOCH);
        let previous = BackupStatus::default();
        let streaming = from_run(
            &previous,
            "orders-2",
            Some(&run(BackupRun::Running, BackupStage::Streaming)),
            Some(1),
            &now,
        );
        assert_eq!(streaming.phase, Some(BackupPhase::Running));
        assert_eq!(streaming.progress.as_deref(), Some("42%"));
        assert_eq!(streaming.instance.as_deref(), Some("orders-2"));
        assert_eq!(streaming.conditions[0].reason, RUNNING);
        assert!(streaming.started_at.is_some());

        let done = from_run(
            &streaming,
            "orders-2",
            Some(&run(BackupRun::Completed, BackupStage::Done)),
            Some(1),
            &now,
        );
        assert_eq!(done.phase, Some(BackupPhase::Completed));
        assert_eq!(done.end_lsn.as_deref(), Some("0/3000120"));
        assert_eq!(done.bytes, Some(100));
        assert!(done.completed_at.is_some());
        assert_eq!(done.conditions[0].status, "True");
        assert_eq!(outcome(&done), Some(BackupResult::Completed));

        let failed = from_run(
            &streaming,
            "orders-2",
            Some(&run(BackupRun::Failed, BackupStage::Streaming)),
            Some(1),
            &now,
        );
        assert_eq!(failed.phase, Some(BackupPhase::Failed));
        assert!(failed.conditions[0].message.contains("AccessDenied"));

        let lost = from_run(&streaming, "orders-2", None, Some(1), &now);
        assert_eq!(lost.phase, Some(BackupPhase::Failed));
        assert_eq!(lost.conditions[0].reason, INSTANCE_LOST);
        assert!(lost.conditions[0].message.starts_with("orders-2 "));
    }
}
