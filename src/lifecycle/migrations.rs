//! Schema migrations (`spec.migrations`): which migration Job runs, which
//! finished one goes, what `status.migrations` records and what Ready says.
//!
//! The rules, all in [`decide`]:
//! - A Job runs when `spec.migrations.version` differs from
//!   `status.migrations.applied`, and only when the Database is settled (the
//!   pass's phase is `Ready`: no rollout, upgrade, scaling, failover or
//!   reconfiguration under way, the primary serving through `<db>-rw`). So a
//!   version change and a migration in the same edit run in that order.
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

use crate::api::status::MigrationsStatus;
use crate::api::v1::MigrationsSpec;
use crate::resources::migration_job_name;

use super::action::Action;
use super::context::Context;
use super::note::Note;
use super::observed::{JobState, MigrationJob};
use super::verdict::Verdict;

/// How often a running migration is looked at (Jobs are polled, not watched).
pub const POLL_SECONDS: u64 = 5;
/// At most this many of the container's last log lines are kept.
const TAIL_LINES: usize = 10;
/// An Event's note is limited to 1 kB by the API server.
const EVENT_BYTES: usize = 900;
/// The Events' action.
const ACTION: &str = "Migrate";

/// What one pass does about migrations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MigrationStep {
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

/// The pass's migration work once the rest of the plan is known: `settled`
/// is whether its phase is `Ready`. Nothing for a Database that never had
/// migrations.
pub(super) fn plan(ctx: &Context, settled: bool) -> MigrationStep {
    let recorded = ctx.previous.and_then(|s| s.migrations.as_ref());
    let spec = ctx.spec.migrations.as_ref();
    if spec.is_none() && recorded.is_none() {
        return MigrationStep::default();
    }
    decide(
        &ctx.observed.database,
        spec,
        recorded,
        &ctx.observed.migration_jobs,
        settled,
    )
}

impl MigrationStep {
    /// The actions that carry it out: finished Jobs go first, then the new one.
    pub(super) fn actions(&self) -> Vec<Action> {
        self.delete
            .iter()
            .map(|name| Action::DeleteJob { name: name.clone() })
            .chain(self.create.iter().map(|version| Action::RunMigration {
                version: version.clone(),
            }))
            .collect()
    }
}

/// The decision for one pass of Database `db` (pure). `spec` is `spec.migrations`,
/// `recorded` the persisted `status.migrations`, `jobs` every migration Job of
/// the Database, `settled` whether a new Job may start (see the module
/// documentation).
pub fn decide(
    db: &str,
    spec: Option<&MigrationsSpec>,
    recorded: Option<&MigrationsStatus>,
    jobs: &[MigrationJob],
    settled: bool,
) -> MigrationStep {
    let before = recorded.cloned().unwrap_or_default();
    let mut status = before.clone();
    let mut decision = MigrationStep::default();
    let desired = spec.map(|m| m.version.as_str());
    let live: Vec<&MigrationJob> = jobs.iter().filter(|j| !j.deleting).collect();

    record_outcomes(&live, &mut status, &mut decision);

    // A recorded run whose Job is gone (deleted by hand) is no longer running.
    if let Some(running) = status.running.clone()
        && !live.iter().any(|j| j.version == running)
    {
        status.running = None;
    }

    let others_busy = finished_others(&live, desired, &before, &mut decision);

    if let Some(spec) = spec {
        run_wanted(
            db,
            spec,
            &live,
            others_busy,
            settled,
            &mut status,
            &mut decision,
        );
    }

    if recorded.is_some() || status != MigrationsStatus::default() {
        decision.status = Some(status);
    }
    decision
}

/// Outcomes first: at most one Job runs at a time, so the Job seen is the
/// latest one started and its outcome is the newest news.
fn record_outcomes(
    live: &[&MigrationJob],
    status: &mut MigrationsStatus,
    decision: &mut MigrationStep,
) {
    for job in live {
        let version = job.version.as_str();
        match &job.state {
            JobState::Running => status.running = Some(version.to_owned()),
            JobState::Succeeded(_) => {
                if status.applied.as_deref() != Some(version)
                    || status.running.as_deref() == Some(version)
                {
                    status.applied = Some(version.to_owned());
                    status.failed = None;
                    status.message = None;
                    decision.notes.push(Note {
                        warning: false,
                        action: ACTION,
                        reason: "MigrationSucceeded",
                        message: format!(
                            "spec.migrations version {version} applied (Job {})",
                            job.name
                        ),
                    });
                }
                clear_running(status, version);
            }
            JobState::Failed(why) => {
                if status.failed.as_deref() != Some(version)
                    || status.running.as_deref() == Some(version)
                {
                    status.failed = Some(version.to_owned());
                    status.message = Some(why.clone());
                    decision.notes.push(Note {
                        warning: true,
                        action: ACTION,
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
                clear_running(status, version);
            }
        }
    }
}

/// Finished Jobs of other versions go once the persisted status (`before`)
/// has their outcome; returns a Job of another version that still counts
/// (running, or finished but not yet recorded).
fn finished_others<'a>(
    live: &[&'a MigrationJob],
    desired: Option<&str>,
    before: &MigrationsStatus,
    decision: &mut MigrationStep,
) -> Option<&'a MigrationJob> {
    let mut others_busy = None;
    for job in live.iter().filter(|j| Some(j.version.as_str()) != desired) {
        let recorded = match &job.state {
            JobState::Running => {
                others_busy = Some(*job);
                continue;
            }
            JobState::Succeeded(_) => before.applied.as_deref() == Some(job.version.as_str()),
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

    others_busy
}

/// The version the spec names: wait for another version's Job, report its
/// own Job, or start one on a settled Database.
fn run_wanted(
    db: &str,
    spec: &MigrationsSpec,
    live: &[&MigrationJob],
    others_busy: Option<&MigrationJob>,
    settled: bool,
    status: &mut MigrationsStatus,
    decision: &mut MigrationStep,
) {
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
