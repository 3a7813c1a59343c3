//! Schema migrations (`spec.migrations`): observe the Database's migration
//! Jobs → [`decide`] (pure) → create or delete Jobs, publish Events; the
//! status and the verdict go into the pass's plan.
//!
//! The rules, all in [`decide`]:
//! - A Job runs when `spec.migrations.version` differs from
//!   `status.migrations.applied`, and only when the Database is settled (the
//!   pass's lifecycle phase is `Ready`: no rollout, upgrade, scaling,
//!   failover or reconfiguration under way, the primary serving through
//!   `<db>-rw`). So a version change and a migration in the same edit run in
//!   that order.
//! - One Job at a time. A Job of another version that still runs (the
//!   version changed meanwhile) is waited for, never killed: stopping a
//!   migration half-way is worse than letting it end. Its outcome is
//!   recorded, then the next version runs.
//! - A success sets `applied` (and clears `failed`); a failure sets
//!   `failed` and `message` (the container's last log lines) and leaves
//!   `applied`. A failed version is not run again until the version changes:
//!   the Job's own `backoffLimit` is the only retry.
//! - The Job of the version the spec names is kept (its pods hold the logs);
//!   a finished Job of another version is deleted once the persisted status
//!   records its outcome.
//!
//! Jobs are created, not server-side applied: a Job's pod template is
//! immutable and a Job runs once, so the name (per version) is the identity
//! and "already exists" means done; re-applying a template an operator
//! upgrade changed would only fail against a running Job.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::warn;

use crate::api::model::ValidatedDatabase;
use crate::api::status::MigrationsStatus;
use crate::api::v1::{Database, MigrationsSpec};
use crate::controller::{Context, Error};
use crate::lifecycle::{self, Verdict};
use crate::resources::{
    MIGRATION_CONTAINER, MIGRATION_DEADLINE_SECONDS, MIGRATION_VERSION_ANNOTATION, migration_job,
    migration_job_name, migration_selector,
};

/// How often a running migration is looked at (Jobs are polled, not watched).
pub const POLL_SECONDS: u64 = 5;
/// At most this many of the container's last log lines are kept.
const TAIL_LINES: usize = 10;
/// ... and at most this many bytes of them in the status.
const TAIL_BYTES: usize = 1024;
/// An Event's note is limited to 1 kB by the API server.
const EVENT_BYTES: usize = 900;

/// How a migration Job is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    Succeeded,
    /// Why, as the operator can tell: the container's last lines, or the
    /// Job's own reason; empty when not read (the status already has it).
    Failed(String),
}

/// One migration Job of the Database, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedJob {
    pub name: String,
    /// The `spec.migrations.version` it runs.
    pub version: String,
    pub state: JobState,
    /// Being deleted: its outcome was recorded, it no longer counts.
    pub deleting: bool,
}

/// An Event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What one pass does about migrations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// `status.migrations` to write; `None` keeps the recorded one.
    pub status: Option<MigrationsStatus>,
    /// The version to start a Job for.
    pub create: Option<String>,
    /// Finished Jobs of other versions whose outcome is recorded.
    pub delete: Vec<String>,
    pub notes: Vec<Note>,
    pub verdict: Option<Verdict>,
    /// A Job runs or is about to: look again soon.
    pub watch: bool,
}

/// The decision for one pass of Database `db` (pure). `spec` is `spec.migrations`,
/// `recorded` the persisted `status.migrations`, `jobs` every migration Job of
/// the Database, `settled` whether a new Job may start (see the module
/// documentation).
pub fn decide(
    db: &str,
    spec: Option<&MigrationsSpec>,
    recorded: Option<&MigrationsStatus>,
    jobs: &[ObservedJob],
    settled: bool,
) -> Decision {
    let before = recorded.cloned().unwrap_or_default();
    let mut status = before.clone();
    let mut decision = Decision::default();
    let desired = spec.map(|m| m.version.as_str());
    let live: Vec<&ObservedJob> = jobs.iter().filter(|j| !j.deleting).collect();

    // Outcomes first: at most one Job runs at a time, so the Job seen is the
    // latest one started and its outcome is the newest news.
    for job in &live {
        let version = job.version.as_str();
        match &job.state {
            JobState::Running => status.running = Some(version.to_owned()),
            JobState::Succeeded => {
                if status.applied.as_deref() != Some(version)
                    || status.running.as_deref() == Some(version)
                {
                    status.applied = Some(version.to_owned());
                    status.failed = None;
                    status.message = None;
                    decision.notes.push(Note {
                        warning: false,
                        reason: "MigrationSucceeded",
                        message: format!(
                            "spec.migrations version {version} applied (Job {})",
                            job.name
                        ),
                    });
                }
                clear_running(&mut status, version);
            }
            JobState::Failed(why) => {
                if status.failed.as_deref() != Some(version)
                    || status.running.as_deref() == Some(version)
                {
                    status.failed = Some(version.to_owned());
                    status.message = Some(why.clone());
                    decision.notes.push(Note {
                        warning: true,
                        reason: "MigrationFailed",
                        message: tail(
                            &format!(
                                "spec.migrations version {version} failed (Job {}): {why}",
                                job.name
                            ),
                            EVENT_BYTES,
                        ),
                    });
                }
                clear_running(&mut status, version);
            }
        }
    }
    // A recorded run whose Job is gone (deleted by hand) is no longer running.
    if let Some(running) = status.running.clone()
        && !live.iter().any(|j| j.version == running)
    {
        status.running = None;
    }

    // Finished Jobs of other versions go once the persisted status has them.
    let mut others_busy = None;
    for job in live.iter().filter(|j| Some(j.version.as_str()) != desired) {
        let recorded = match &job.state {
            JobState::Running => {
                others_busy = Some(*job);
                continue;
            }
            JobState::Succeeded => before.applied.as_deref() == Some(job.version.as_str()),
            JobState::Failed(_) => before.failed.as_deref() == Some(job.version.as_str()),
        } && before.running.as_deref() != Some(job.version.as_str());
        if recorded {
            decision.delete.push(job.name.clone());
        } else {
            // Recorded in this pass's status; deleted on the next one.
            decision.watch = true;
            others_busy.get_or_insert(*job);
        }
    }

    if let Some(spec) = spec {
        let version = spec.version.as_str();
        let own = live.iter().find(|j| j.version == version);
        let job_name = migration_job_name(db, version);
        match others_busy {
            Some(other) if other.state == JobState::Running => {
                decision.watch = true;
                decision.verdict = Some(Verdict::progress(
                    "Migrating",
                    format!(
                        "spec.migrations: version {} is still running (Job {}); version {version} runs once it ends",
                        other.version, other.name
                    ),
                ));
            }
            _ if own.is_some_and(|j| j.state == JobState::Running) => {
                decision.watch = true;
                decision.verdict = Some(running_verdict(version, &job_name));
            }
            _ if status.applied.as_deref() == Some(version) => {}
            _ if status.failed.as_deref() == Some(version) => {
                decision.verdict = Some(failed_verdict(version, status.message.as_deref()));
            }
            Some(other) => {
                decision.verdict = Some(Verdict::progress(
                    "Migrating",
                    format!(
                        "spec.migrations: version {version} runs once the outcome of version {} (Job {}) is recorded",
                        other.version, other.name
                    ),
                ));
            }
            None if settled && own.is_none() => {
                decision.create = Some(version.to_owned());
                decision.watch = true;
                status.running = Some(version.to_owned());
                decision.verdict = Some(running_verdict(version, &job_name));
            }
            // Not settled: the Database's phase is not Ready, and its Ready
            // condition already says what is under way; the Job starts after.
            None => {}
        }
    }

    if recorded.is_some() || status != MigrationsStatus::default() {
        decision.status = Some(status);
    }
    decision
}

fn clear_running(status: &mut MigrationsStatus, version: &str) {
    if status.running.as_deref() == Some(version) {
        status.running = None;
    }
}

fn running_verdict(version: &str, job: &str) -> Verdict {
    Verdict::progress(
        "Migrating",
        format!("spec.migrations: version {version} is running (Job {job})"),
    )
}

fn failed_verdict(version: &str, message: Option<&str>) -> Verdict {
    Verdict::blocked(
        "MigrationFailed",
        format!(
            "spec.migrations: version {version} failed: {}; it is not run again until spec.migrations.version changes",
            message.unwrap_or("no message")
        ),
    )
}

/// The verdict from the recorded status alone, for a pass that could not
/// look at the Jobs: Ready must not claim a running or failed migration is
/// in effect because a list call failed.
pub fn from_record(
    db: &str,
    spec: Option<&MigrationsSpec>,
    recorded: Option<&MigrationsStatus>,
) -> Option<Verdict> {
    let recorded = recorded.cloned().unwrap_or_default();
    if let Some(running) = &recorded.running {
        return Some(running_verdict(running, &migration_job_name(db, running)));
    }
    let version = spec?.version.as_str();
    if recorded.applied.as_deref() == Some(version) {
        None
    } else if recorded.failed.as_deref() == Some(version) {
        Some(failed_verdict(version, recorded.message.as_deref()))
    } else {
        Some(Verdict::progress(
            "Migrating",
            format!("spec.migrations: version {version} is not applied yet"),
        ))
    }
}

/// The last [`TAIL_LINES`] non-empty lines of `text`, within `bytes`
/// (cut at a character boundary, from the end: the end says what failed).
pub fn tail(text: &str, bytes: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let kept = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    if kept.len() <= bytes {
        return kept;
    }
    let mut start = kept.len() - bytes + "…".len();
    while !kept.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &kept[start..])
}

/// The state of a Job from its conditions (`Complete` or `Failed`, set once
/// its pods have ended), with `why` for a failure.
pub fn state_of(job: &Job, why: impl FnOnce() -> String) -> JobState {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let is = |type_: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    if is("Complete") {
        JobState::Succeeded
    } else if is("Failed") {
        JobState::Failed(why())
    } else {
        JobState::Running
    }
}

/// Why a failed Job failed: the last lines its newest ended pod's container
/// logged (its termination message), else the Job's own reason.
pub fn failure_of(job: &Job, pods: &[Pod]) -> String {
    let condition = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Failed"));
    let deadline = condition.and_then(|c| c.reason.as_deref()) == Some("DeadlineExceeded");
    let mut ended: Vec<_> = pods
        .iter()
        .filter_map(|pod| {
            let terminated = pod
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.name == MIGRATION_CONTAINER)?
                .state
                .as_ref()?
                .terminated
                .clone()?;
            Some((terminated.finished_at.clone(), terminated))
        })
        .collect();
    ended.sort_by(|a, b| a.0.as_ref().map(|t| t.0).cmp(&b.0.as_ref().map(|t| t.0)));
    let last = ended.pop().map(|(_, t)| {
        let lines = tail(t.message.as_deref().unwrap_or_default(), TAIL_BYTES);
        if lines.is_empty() {
            format!(
                "exit code {} ({})",
                t.exit_code,
                t.reason.unwrap_or_default()
            )
        } else {
            format!("exit code {}: {lines}", t.exit_code)
        }
    });
    match (deadline, last) {
        (true, last) => format!(
            "ran longer than {MIGRATION_DEADLINE_SECONDS} s{}",
            last.map(|l| format!("; {l}")).unwrap_or_default()
        ),
        (false, Some(last)) => last,
        (false, None) => condition
            .map(|c| {
                format!(
                    "{}: {}",
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "the Job failed without a message".to_owned()),
    }
}

/// What the pass needs from this module: the status to record, the verdict
/// to add, whether to look again soon, and what went wrong.
#[derive(Debug, Default)]
pub struct Step {
    /// `status.migrations`; `None` keeps the recorded one.
    pub status: Option<MigrationsStatus>,
    pub verdict: Option<Verdict>,
    pub watch: bool,
    /// A failed API call: the pass fails with it, after writing the status.
    pub error: Option<Error>,
}

impl Step {
    /// Adds this step's verdict to the pass's plan (with a blocking one when
    /// the API server refused a Job for good) and polls a running Job.
    pub fn weigh(&self, plan: &mut lifecycle::Plan) {
        if let Some(verdict) = &self.verdict {
            plan.add(verdict.clone());
        }
        if let Some(error) = &self.error
            && !error.category().is_transient()
        {
            plan.add(Verdict::blocked(
                "MigrationRefused",
                format!("spec.migrations: {error}"),
            ));
        }
        if self.watch {
            plan.requeue_after_seconds = Some(
                plan.requeue_after_seconds
                    .map_or(POLL_SECONDS, |s| s.min(POLL_SECONDS)),
            );
        }
    }
}

/// One pass: observe the Jobs, decide, create or delete, publish Events.
/// Nothing is listed for a Database that never had migrations. A failed call
/// leaves the recorded status and the verdict it implies.
pub async fn step(
    ctx: &Context,
    db: &Database,
    model: &ValidatedDatabase,
    namespace: &str,
    settled: bool,
) -> Step {
    let recorded = db.status.as_ref().and_then(|s| s.migrations.as_ref());
    let spec = db.spec.migrations.as_ref();
    if spec.is_none() && recorded.is_none() {
        return Step::default();
    }
    match run(ctx, db, model, namespace, settled).await {
        Ok(step) => step,
        Err(error) => {
            warn!(%error, "migrations");
            Step {
                status: None,
                verdict: from_record(&db.name_any(), spec, recorded),
                watch: true,
                error: Some(error),
            }
        }
    }
}

async fn run(
    ctx: &Context,
    db: &Database,
    model: &ValidatedDatabase,
    namespace: &str,
    settled: bool,
) -> Result<Step, Error> {
    let recorded = db.status.as_ref().and_then(|s| s.migrations.as_ref());
    let spec = db.spec.migrations.as_ref();
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), namespace);
    let jobs = observe(ctx, db, namespace, &jobs_api, recorded).await?;
    let decision = decide(&db.name_any(), spec, recorded, &jobs, settled);
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    for name in &decision.delete {
        match jobs_api.delete(name, &background).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::kube("deleting a finished migration Job")(e)),
        }
    }
    if let (Some(version), Some(spec)) = (&decision.create, spec) {
        let job = migration_job(model, spec, &ctx.build);
        match jobs_api.create(&PostParams::default(), &job).await {
            Ok(_) => {
                ctx.publish(
                    db,
                    EventType::Normal,
                    "MigrationStarted",
                    "Migrate",
                    format!(
                        "running spec.migrations version {version} in Job {}",
                        job.name_any()
                    ),
                )
                .await;
            }
            // Created by an earlier pass whose list did not show it yet.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(Error::kube("creating the migration Job")(e)),
        }
    }
    for note in &decision.notes {
        let type_ = if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        ctx.publish(db, type_, note.reason, "Migrate", note.message.clone())
            .await;
    }
    Ok(Step {
        status: decision.status,
        verdict: decision.verdict,
        watch: decision.watch,
        error: None,
    })
}

/// The Database's migration Jobs (owned by it), with the failure of each
/// failed one whose failure the status does not hold yet.
async fn observe(
    ctx: &Context,
    db: &Database,
    namespace: &str,
    jobs: &Api<Job>,
    recorded: Option<&MigrationsStatus>,
) -> Result<Vec<ObservedJob>, Error> {
    let uid = db.meta().uid.clone();
    let listed = jobs
        .list(&ListParams::default().labels(&migration_selector(&db.name_any())))
        .await
        .map_err(Error::kube("listing the migration Jobs"))?
        .items;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let mut observed = Vec::new();
    for job in listed {
        let owned = uid.is_some()
            && job
                .owner_references()
                .iter()
                .any(|r| Some(&r.uid) == uid.as_ref());
        let Some(version) = job.annotations().get(MIGRATION_VERSION_ANNOTATION).cloned() else {
            continue;
        };
        if !owned {
            continue;
        }
        let name = job.name_any();
        let known = recorded.and_then(|r| r.failed.as_deref()) == Some(version.as_str())
            && recorded.and_then(|r| r.running.as_deref()) != Some(version.as_str());
        let state = match state_of(&job, String::new) {
            JobState::Failed(_) if !known => {
                let selector = format!("job-name={name}");
                let listed = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(Error::kube("listing the migration Job's pods"))?;
                JobState::Failed(failure_of(&job, &listed.items))
            }
            state => state,
        };
        observed.push(ObservedJob {
            name,
            version,
            state,
            deleting: job.metadata.deletion_timestamp.is_some(),
        });
    }
    Ok(observed)
}

#[cfg(test)]
mod tests;
