//! `spec.backup.schedule`: the Backup of the run that is due. The schedule
//! resumes from its newest Backup (else from the Database's creation), and
//! [`Schedule::due`] gives only the latest missed run: after downtime, one
//! backup, not a burst. While a scheduled Backup still waits or runs, none
//! is added behind it.

use jiff::Timestamp;

use crate::lifecycle::action::{Action, BackupPurpose};
use crate::lifecycle::context::Context;
use crate::lifecycle::observed::BackupState;
use crate::resources::names::backup_name;
use crate::schedule::Schedule;

pub(super) struct Scheduled {
    /// The Backup to create for the run that is due.
    pub create: Option<Action>,
    /// The next run after now: when to look again.
    pub next: Option<Timestamp>,
}

pub(super) fn plan(ctx: &Context) -> Scheduled {
    let none = Scheduled {
        create: None,
        next: None,
    };
    let Some(expr) = ctx.spec.backup.as_ref().and_then(|b| b.schedule.as_deref()) else {
        return none;
    };
    let Ok(schedule) = Schedule::parse(expr) else {
        return none;
    };
    let now = ctx.observed.now;
    let mine: Vec<_> = ctx
        .observed
        .backups
        .values()
        .filter(|b| b.scheduled_at.is_some())
        .collect();
    let since = mine
        .iter()
        .filter_map(|b| b.scheduled_at)
        .max()
        .or(ctx.observed.created)
        .unwrap_or(now);
    let busy = mine.iter().any(|b| b.state == BackupState::Running);
    let create = if busy {
        None
    } else {
        schedule.due(since, now).map(|at| Action::TakeBackup {
            name: backup_name(&ctx.observed.database, at),
            purpose: BackupPurpose::Scheduled { at },
        })
    };
    Scheduled {
        create,
        next: schedule.next_after(now),
    }
}
