//! Backups as one pass decides them: whether WAL reaches the store
//! ([`health`]), the Backup a schedule has due ([`schedule`]), when and where
//! a retention pass runs ([`retention`]), and `status.lastBackup`. The final
//! backup of a deletion is [`super::deletion`]'s.

mod health;
mod retention;
mod schedule;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::status::LastBackup;

use super::action::Action;
use super::context::Context;
use super::observed::BackupState;
use super::verdict::{Desired, Verdict};

pub use health::BACKUP_HEALTHY;
pub use retention::PRUNE_EVERY;

/// What backups add to a pass.
pub(super) struct Backups {
    /// A scheduled Backup to create, then a retention pass to run.
    pub actions: Vec<Action>,
    pub verdicts: Vec<Verdict>,
    /// `BackupHealthy`, when the Database has an object store.
    pub condition: Option<Desired>,
    /// `status.lastBackup`.
    pub last_backup: Option<LastBackup>,
    /// Seconds until the schedule's next run: the pass must look again then.
    pub next_run_seconds: Option<u64>,
}

pub(super) fn plan(ctx: &Context) -> Backups {
    let last_backup = last_backup(ctx);
    let scheduled = schedule::plan(ctx);
    let actions = scheduled
        .create
        .into_iter()
        .chain(retention::plan(ctx, last_backup.as_ref()))
        .collect();
    Backups {
        actions,
        verdicts: Vec::new(),
        condition: health::condition(ctx),
        last_backup,
        next_run_seconds: scheduled
            .next
            .and_then(|next| seconds_until(ctx.observed.now, next)),
    }
}

/// `status.lastBackup`: the Completed Backup that completed last.
pub(super) fn last_backup(ctx: &Context) -> Option<LastBackup> {
    ctx.observed
        .backups
        .iter()
        .filter(|(_, b)| b.state == BackupState::Completed)
        .filter_map(|(name, b)| Some((b.completed_at?, name)))
        .max_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)))
        .map(|(completed_at, name)| LastBackup {
            name: name.clone(),
            completed_at: Some(Time(completed_at)),
        })
}

/// Whole seconds from `now` to `then`, rounded up, plus one: a pass that
/// wakes at the scheduled second itself would find the run not yet due.
fn seconds_until(now: Timestamp, then: Timestamp) -> Option<u64> {
    let wait = std::time::Duration::try_from(then.duration_since(now)).ok()?;
    Some(
        wait.as_millis()
            .div_ceil(1000)
            .try_into()
            .unwrap_or(u64::MAX)
            + 1,
    )
}
