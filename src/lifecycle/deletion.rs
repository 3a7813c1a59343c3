//! A Database being deleted: with an object store, it is released only after
//! a final base backup (which also archives the WAL it ends in). Until then
//! the finalizer holds it, with phase Deleting and a Ready condition saying
//! where the final backup is, or why it failed and how to go on. A namespace
//! being deleted takes everything with it (pods, volumes, the store's
//! Secret): no backup can be taken there any more, and holding on would keep
//! the namespace from going.

use crate::resources::names;

use super::action::{Action, BackupPurpose};
use super::context::Context;
use super::note::Note;
use super::observed::BackupState;
use super::verdict::{DEGRADED, Desired, PROGRESSING, READY};

/// Requeue while the final backup runs.
const POLL_SECONDS: u64 = 5;
/// Requeue after it failed: a human has to act, the pass only looks again.
const FAILED_RETRY_SECONDS: u64 = 60;
/// On a Database: `"true"` lets a deletion go ahead without a final backup.
pub const SKIP_FINAL_BACKUP: &str = "tusk.dev/skip-final-backup";

const RUNNING: &str = "FinalBackupRunning";
const FAILED: &str = "FinalBackupFailed";

/// What a deletion decided.
pub(super) struct DeletionStep {
    /// Start the final backup.
    pub actions: Vec<Action>,
    /// Ready, Progressing and Degraded while the deletion is held; `None`
    /// when it may go.
    pub hold: Option<Vec<Desired>>,
    pub notes: Vec<Note>,
    /// When to look again while held; `None`: released.
    pub wait_seconds: Option<u64>,
    /// Held for a human (the final backup failed): Ready's Event warns.
    pub alarm: bool,
}

impl DeletionStep {
    fn release(notes: Vec<Note>) -> Self {
        Self {
            actions: Vec::new(),
            hold: None,
            notes,
            wait_seconds: None,
            alarm: false,
        }
    }
}

/// The decision of a pass over a Database being deleted.
pub(super) fn plan(ctx: &Context) -> DeletionStep {
    let observed = ctx.observed;
    let deletion = &observed.deletion;
    let wanted = observed.backups_possible && !deletion.skip_final_backup;
    let (Some(uid), Some(at), true) = (&deletion.uid, deletion.requested_at, wanted) else {
        return DeletionStep::release(Vec::new());
    };
    let name = names::final_backup(&observed.database, at);
    let existing = observed
        .backups
        .get(&name)
        .filter(|b| b.final_for.as_deref() == Some(uid.as_str()));
    if existing.is_some_and(|b| b.state == BackupState::Completed) {
        return DeletionStep::release(vec![Note::normal(
            "FinalBackupCompleted",
            format!("final backup {name} completed; releasing the Database"),
        )]);
    }
    if deletion.namespace_terminating {
        return DeletionStep::release(vec![Note::warning(
            "FinalBackupSkipped",
            "the namespace is being deleted: releasing the Database without a final backup"
                .to_owned(),
        )]);
    }
    let (reason, message, wait, actions, notes) = match existing {
        None => (
            RUNNING,
            format!("taking the final backup {name} before the Database goes"),
            POLL_SECONDS,
            vec![Action::TakeBackup {
                name: name.clone(),
                purpose: BackupPurpose::Final,
            }],
            Vec::new(),
        ),
        Some(backup) => match &backup.state {
            BackupState::Failed(_) => (
                FAILED,
                format!(
                    "the final backup {name} failed: {}; the Database stays until it succeeds: \
                     fix the cause and delete Backup {name} to take it again, or annotate the \
                     Database {SKIP_FINAL_BACKUP}=true to delete it without a final backup",
                    backup.ready_message
                ),
                FAILED_RETRY_SECONDS,
                Vec::new(),
                Vec::new(),
            ),
            _ => (
                RUNNING,
                format!(
                    "taking the final backup {name} before the Database goes: {}",
                    if backup.ready_message.is_empty() {
                        "waiting to start"
                    } else {
                        &backup.ready_message
                    }
                ),
                POLL_SECONDS,
                Vec::new(),
                Vec::new(),
            ),
        },
    };
    let conditions = vec![
        Desired::new(READY, false, reason, message.clone()),
        Desired::new(PROGRESSING, reason == RUNNING, reason, message),
        Desired::new(DEGRADED, false, "Deleting", "the Database is being deleted"),
    ];
    DeletionStep {
        actions,
        hold: Some(conditions),
        notes,
        wait_seconds: Some(wait),
        alarm: reason == FAILED,
    }
}
