//! `spec.backup.retention`: when a retention pass is due and which instance
//! runs it. The pass itself (what may go) is the primary's manager's, in
//! `backup::retention`: it keeps the newest completed backup whatever the
//! window.

use std::time::Duration;

use crate::api::status::{InstanceRole, LastBackup};
use crate::api::validate::parse_retention;
use crate::lifecycle::action::Action;
use crate::lifecycle::context::Context;
use crate::lifecycle::observed::RetentionPass;

/// How often retention runs when no new backup completed meanwhile.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// A retention pass on the primary that answers ready, when one is due.
pub(super) fn plan(ctx: &Context, last_backup: Option<&LastBackup>) -> Option<Action> {
    let window_seconds = ctx
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.retention.as_deref())
        .and_then(|r| parse_retention(r).ok())?;
    if !due(ctx.observed.last_retention.as_ref(), last_backup, ctx) {
        return None;
    }
    let primary = ctx.observed.instances.iter().find_map(|(serial, i)| {
        let status = i.status()?;
        (status.role == InstanceRole::Primary && status.ready).then(|| ctx.name(*serial))
    })?;
    Some(Action::RunRetention {
        primary,
        window_seconds,
        last_backup: last_backup.map(|b| b.name.clone()),
    })
}

/// Due: none yet by this operator, a backup completed since the last one, or
/// [`PRUNE_EVERY`] passed.
fn due(last: Option<&RetentionPass>, last_backup: Option<&LastBackup>, ctx: &Context) -> bool {
    let Some(last) = last else {
        return true;
    };
    let newest = last_backup.map(|b| &b.name);
    newest != last.last_backup.as_ref()
        || ctx
            .observed
            .now
            .duration_since(last.at)
            .try_into()
            .is_ok_and(|elapsed: Duration| elapsed >= PRUNE_EVERY)
}
