//! Major upgrades: a state machine over `status.upgrade`, driven by what the
//! Jobs and the Backup report.
//!
//! `Checking` (`pg_upgrade --check` in a Job while the old major serves) →
//! `BackingUp` (when an object store is configured and `spec.upgrade.backupFirst`)
//! → `Stopping` (every instance pod deleted: a clean stop) → `Upgrading`
//! (`pg_upgrade --link` in a Job on the primary's volume; the old data
//! directory is kept) → `Starting` (the new major on the upgraded data) →
//! `Done` once it answered. A failed check ends in `CheckFailed` with nothing
//! changed; a failed link, or `spec.version` set back before the new server
//! answered, goes through `RollingBack` (a Job puts the old data directory
//! back) to `RolledBack`.
//!
//! From `Stopping` to the end of `RollingBack` the topology is held: nothing
//! is started, restarted or promoted, so no instance can serve while the data
//! is being changed; only the upgraded primary is started in `Starting`, and
//! the replicas after it (their managers re-clone a data directory of the old
//! major).

use crate::api::status::{UpgradeStatus, UpgradeStep};
use crate::api::validate::PgVersion;
use crate::contract::UpgradeJob;
use crate::resources::names;
use crate::resources::upgrade::upgrade_job_name;

use super::action::{Action, BackupPurpose, DeleteReason};
use super::context::Context;
use super::observed::{BackupState, JobState};
use super::verdict::Verdict;

/// What the upgrade decided for this pass.
#[derive(Default)]
pub(super) struct Upgrade {
    /// `status.upgrade` to record.
    pub status: Option<UpgradeStatus>,
    pub actions: Vec<Action>,
    pub verdicts: Vec<Verdict>,
    /// The topology must not start, restart, relabel or promote anything.
    pub hold: bool,
    /// The image of pods created in this pass, when the upgrade decides it.
    pub image: Option<String>,
    /// An upgrade is under way: phase `Upgrading`.
    pub active: bool,
}

/// `major`: the major the instances run and the one the spec asks for, when
/// they differ; `running_image`: what the instances run.
pub(super) fn plan(ctx: &Context, major: Option<(u32, u32)>, running_image: &str) -> Upgrade {
    let previous = ctx.previous.and_then(|s| s.upgrade.clone());
    let wanted = ctx.spec.version.parse::<PgVersion>().ok().map(|v| v.major);
    if let Some(upgrade) = previous.clone().filter(|u| in_flight(u.step)) {
        return advance(ctx, upgrade, wanted);
    }
    let Some((from, to)) = major else {
        return Upgrade {
            status: previous,
            ..Upgrade::default()
        };
    };
    if to < from {
        return Upgrade {
            status: previous,
            verdicts: vec![Verdict::blocked(
                "DowngradeRefused",
                format!(
                    "spec.version: asks for PostgreSQL {to} but the instances run {from}; \
                     a major version never goes down"
                ),
            )],
            image: Some(running_image.to_owned()),
            ..Upgrade::default()
        };
    }
    // A check that failed, or an upgrade that was undone, stays so until its
    // Job is deleted: repeating it unchanged would fail the same way.
    if let Some(upgrade) = previous.filter(|u| u.from == from && u.to == to) {
        let stays = match upgrade.step {
            UpgradeStep::CheckFailed => Some(UpgradeJob::Check),
            UpgradeStep::RolledBack => Some(UpgradeJob::Upgrade),
            _ => None,
        };
        if let Some(job) = stays
            && ctx
                .observed
                .jobs
                .contains_key(&job_name(ctx, job, &upgrade))
        {
            return stopped(ctx, upgrade, job);
        }
    }
    let Some(primary) = ctx
        .recorded_primary()
        .filter(|s| ctx.instance(*s).is_some_and(|i| i.reports_primary()))
    else {
        return Upgrade {
            verdicts: vec![Verdict::progress(
                "MajorUpgrade",
                format!(
                    "spec.version: the upgrade from {from} to {to} waits for the primary to serve"
                ),
            )],
            image: Some(running_image.to_owned()),
            active: true,
            ..Upgrade::default()
        };
    };
    // Jobs of an earlier attempt would pass for this one's: they go first.
    let stale: Vec<String> = [UpgradeJob::Check, UpgradeJob::Upgrade, UpgradeJob::Rollback]
        .into_iter()
        .map(|job| job_name_of(&ctx.observed.database, job, from, to))
        .filter(|name| ctx.observed.jobs.contains_key(name))
        .collect();
    if !stale.is_empty() {
        return Upgrade {
            actions: stale
                .iter()
                .map(|name| Action::DeleteJob { name: name.clone() })
                .collect(),
            verdicts: vec![Verdict::progress(
                "MajorUpgrade",
                format!(
                    "spec.version: removing the Jobs of an earlier upgrade from {from} to {to} ({}) before starting anew",
                    stale.join(", ")
                ),
            )],
            image: Some(running_image.to_owned()),
            active: true,
            ..Upgrade::default()
        };
    }
    let upgrade = UpgradeStatus {
        from,
        to,
        from_image: running_image.to_owned(),
        to_image: ctx.observed.desired_image.clone(),
        instance: ctx.name(primary),
        node: ctx
            .instance(primary)
            .and_then(|i| i.pod.as_ref()?.node.clone()),
        step: UpgradeStep::Checking,
        message: Some(format!(
            "checking the upgrade from {from} to {to} with pg_upgrade --check"
        )),
    };
    advance(ctx, upgrade, wanted)
}

/// The steps that are under way (the others are where an upgrade ended).
fn in_flight(step: UpgradeStep) -> bool {
    !matches!(
        step,
        UpgradeStep::CheckFailed | UpgradeStep::Done | UpgradeStep::RolledBack
    )
}

fn job_name(ctx: &Context, job: UpgradeJob, upgrade: &UpgradeStatus) -> String {
    job_name_of(&ctx.observed.database, job, upgrade.from, upgrade.to)
}

pub(super) fn job_name_of(db: &str, job: UpgradeJob, from: u32, to: u32) -> String {
    upgrade_job_name(db, job, from, to)
}

fn job<'a>(ctx: &'a Context, job: UpgradeJob, upgrade: &UpgradeStatus) -> Option<&'a JobState> {
    ctx.observed.jobs.get(&job_name(ctx, job, upgrade))
}

fn run(job: UpgradeJob, upgrade: &UpgradeStatus) -> Action {
    Action::RunUpgradeJob {
        job,
        from: upgrade.from,
        to: upgrade.to,
        instance: upgrade.instance.clone(),
        node: upgrade.node.clone(),
        from_image: upgrade.from_image.clone(),
        to_image: upgrade.to_image.clone(),
    }
}

/// An ended upgrade that stays ended until the user acts.
fn stopped(ctx: &Context, upgrade: UpgradeStatus, job: UpgradeJob) -> Upgrade {
    let name = job_name(ctx, job, &upgrade);
    let what = upgrade.message.clone().unwrap_or_default();
    let (reason, message) = match upgrade.step {
        UpgradeStep::CheckFailed => (
            "UpgradeCheckFailed",
            format!(
                "spec.version: the upgrade from {} to {} was not started, {} runs on unchanged. {what}; \
                 fix the cause, then delete Job {name} to check again",
                upgrade.from, upgrade.to, upgrade.from
            ),
        ),
        _ => (
            "UpgradeRolledBack",
            format!(
                "spec.version: the upgrade from {} to {} failed and was undone, {} runs on its own data: {what}; \
                 delete Job {name} to try again",
                upgrade.from, upgrade.to, upgrade.from
            ),
        ),
    };
    Upgrade {
        image: Some(upgrade.from_image.clone()),
        status: Some(upgrade),
        verdicts: vec![Verdict::blocked(reason, message)],
        ..Upgrade::default()
    }
}

/// What a step found: wait for the next pass, go on to the step it moved
/// to, or the upgrade's whole outcome.
enum Next {
    Wait,
    Again,
    Finish(Box<Upgrade>),
}

fn progress(message: String) -> Verdict {
    Verdict::progress("MajorUpgrade", message)
}

/// One pass of an upgrade under way. `wanted`: the spec's major.
fn advance(ctx: &Context, mut upgrade: UpgradeStatus, wanted: Option<u32>) -> Upgrade {
    let back = wanted != Some(upgrade.to);
    let mut out = Upgrade {
        active: true,
        image: Some(upgrade.from_image.clone()),
        ..Upgrade::default()
    };
    loop {
        let next = match upgrade.step {
            UpgradeStep::Checking | UpgradeStep::BackingUp | UpgradeStep::Stopping if back => {
                // Nothing has been changed yet: the instances come back on
                // the old major as they were.
                upgrade.step = UpgradeStep::RolledBack;
                upgrade.message = Some(format!(
                    "spec.version went back to {} before the data was upgraded; nothing was changed",
                    upgrade.from
                ));
                out.active = false;
                Next::Wait
            }
            UpgradeStep::Checking => checking(ctx, &mut upgrade, &mut out),
            UpgradeStep::BackingUp => backing_up(ctx, &mut upgrade, &mut out),
            UpgradeStep::Stopping => stopping(ctx, &mut upgrade, &mut out),
            UpgradeStep::Upgrading => upgrading(ctx, &mut upgrade, &mut out, back),
            UpgradeStep::Starting => starting(ctx, &mut upgrade, &mut out, back),
            UpgradeStep::RollingBack => rolling_back(ctx, &mut upgrade, &mut out, back),
            UpgradeStep::CheckFailed | UpgradeStep::Done | UpgradeStep::RolledBack => Next::Wait,
        };
        match next {
            Next::Again => {}
            Next::Wait => break,
            Next::Finish(upgrade) => return *upgrade,
        }
    }
    out.status = Some(upgrade);
    out
}

/// `pg_upgrade --check` in a Job while the old major serves.
fn checking(ctx: &Context, upgrade: &mut UpgradeStatus, out: &mut Upgrade) -> Next {
    let (from, to) = (upgrade.from, upgrade.to);
    match job(ctx, UpgradeJob::Check, upgrade) {
        None => {
            out.actions.push(run(UpgradeJob::Check, upgrade));
            out.verdicts.push(progress(format!(
                "spec.version: checking the upgrade from {from} to {to} with pg_upgrade --check"
            )));
        }
        Some(JobState::Running) => out.verdicts.push(progress(format!(
            "spec.version: pg_upgrade --check from {from} to {to} runs in Job {}",
            job_name(ctx, UpgradeJob::Check, upgrade)
        ))),
        Some(JobState::Failed(report)) => {
            upgrade.step = UpgradeStep::CheckFailed;
            upgrade.message = Some(report.clone());
            let status = Some(upgrade.clone());
            return Next::Finish(Box::new(Upgrade {
                status,
                ..stopped(ctx, upgrade.clone(), UpgradeJob::Check)
            }));
        }
        Some(JobState::Succeeded(_)) => {
            upgrade.step = if ctx.observed.backups_possible && ctx.spec.upgrade.backup_first {
                UpgradeStep::BackingUp
            } else {
                UpgradeStep::Stopping
            };
            upgrade.message = Some(format!("pg_upgrade --check from {from} to {to} passed"));
            return Next::Again;
        }
    }
    Next::Wait
}

/// A base backup first, when a store is configured.
fn backing_up(ctx: &Context, upgrade: &mut UpgradeStatus, out: &mut Upgrade) -> Next {
    let (from, to) = (upgrade.from, upgrade.to);
    let name = names::upgrade_backup(&ctx.observed.database, from, to);
    match ctx.observed.backups.get(&name).map(|b| &b.state) {
            None => {
                out.actions.push(Action::TakeBackup {
                    name: name.clone(),
                    purpose: BackupPurpose::Upgrade,
                });
                out.verdicts.push(progress(format!(
                    "spec.version: taking Backup {name} before the upgrade from {from} to {to} stops anything"
                )));
            }
            Some(BackupState::Running) => out.verdicts.push(progress(format!(
                "spec.version: Backup {name} runs; the upgrade from {from} to {to} waits for it"
            ))),
            Some(BackupState::Failed(why)) => out.verdicts.push(Verdict::blocked(
                "UpgradeBackupFailed",
                format!(
                    "spec.version: Backup {name}, taken before the upgrade from {from} to {to}, failed: {why}; \
                     nothing was stopped. Delete it to try again, or set spec.upgrade.backupFirst to false"
                ),
            )),
            Some(BackupState::Completed) => {
                upgrade.step = UpgradeStep::Stopping;
                upgrade.message = Some(format!("Backup {name} completed"));
                return Next::Again;
            }
        }
    Next::Wait
}

/// Every instance stops; the topology holds them down.
fn stopping(ctx: &Context, upgrade: &mut UpgradeStatus, out: &mut Upgrade) -> Next {
    let (from, to) = (upgrade.from, upgrade.to);
    out.hold = true;
    let running: Vec<String> = ctx
        .members
        .iter()
        .filter_map(|s| ctx.instance(*s)?.pod.as_ref().map(|_| *s))
        .map(|s| ctx.name(s))
        .collect();
    if running.is_empty() {
        upgrade.step = UpgradeStep::Upgrading;
        upgrade.message = Some(format!(
            "pg_upgrade --link from {from} to {to} runs on the data of {}",
            upgrade.instance
        ));
        return Next::Again;
    }
    for serial in &ctx.members {
        let Some(instance) = ctx.instance(*serial) else {
            return Next::Again;
        };
        if instance.pod.is_some() && !instance.terminating() {
            out.actions.push(Action::DeletePod {
                name: ctx.name(*serial),
                reason: DeleteReason::MajorUpgrade,
            });
        }
    }
    out.verdicts.push(progress(format!(
        "spec.version: stopping every instance ({}) for the upgrade from {from} to {to}",
        running.join(", ")
    )));
    Next::Wait
}

/// `pg_upgrade --link` in a Job on the primary's volume.
fn upgrading(ctx: &Context, upgrade: &mut UpgradeStatus, out: &mut Upgrade, back: bool) -> Next {
    let (from, to) = (upgrade.from, upgrade.to);
    out.hold = true;
    match job(ctx, UpgradeJob::Upgrade, upgrade) {
        None => {
            out.actions.push(run(UpgradeJob::Upgrade, upgrade));
            out.verdicts.push(progress(format!(
                "spec.version: upgrading the data of {} from {from} to {to} with pg_upgrade --link",
                upgrade.instance
            )));
        }
        Some(JobState::Running) => out.verdicts.push(progress(format!(
            "spec.version: pg_upgrade --link from {from} to {to} runs in Job {}",
            job_name(ctx, UpgradeJob::Upgrade, upgrade)
        ))),
        Some(JobState::Failed(report)) => {
            upgrade.step = UpgradeStep::RollingBack;
            upgrade.message = Some(format!("pg_upgrade --link failed: {report}"));
            return Next::Again;
        }
        Some(JobState::Succeeded(_)) if back => {
            upgrade.step = UpgradeStep::RollingBack;
            upgrade.message = Some(format!(
                "spec.version went back to {from} before PostgreSQL {to} started"
            ));
            return Next::Again;
        }
        Some(JobState::Succeeded(_)) => {
            upgrade.step = UpgradeStep::Starting;
            upgrade.message = Some(format!(
                "PostgreSQL {to} starts on the upgraded data of {}",
                upgrade.instance
            ));
            return Next::Again;
        }
    }
    Next::Wait
}

/// The new major starts on the upgraded data; until it answers, going back undoes it.
fn starting(ctx: &Context, upgrade: &mut UpgradeStatus, out: &mut Upgrade, back: bool) -> Next {
    let (from, to) = (upgrade.from, upgrade.to);
    let serial = ctx.observed.serial_of(&upgrade.instance);
    let answered = serial
        .and_then(|s| ctx.instance(s)?.status())
        .is_some_and(|s| s.ready && s.server_version.is_some_and(|(major, _)| major == to));
    if answered {
        // The point of no return: PostgreSQL {to} wrote to the
        // shared files, the old directory is gone.
        out.hold = false;
        upgrade.step = UpgradeStep::Done;
        upgrade.message = Some(format!(
            "PostgreSQL {to} answered on the upgraded data of {}; the replicas are cloned from it",
            upgrade.instance
        ));
        out.active = false;
        out.image = Some(upgrade.to_image.clone());
        // The new system identifier starts a new WAL history: the
        // old base backups do not restore with it.
        if ctx.observed.backups_possible {
            out.actions.push(Action::TakeBackup {
                name: names::upgraded_backup(&ctx.observed.database, from, to),
                purpose: BackupPurpose::Upgrade,
            });
        }
    } else if back {
        out.hold = true;
        let pods: Vec<String> = ctx
            .members
            .iter()
            .filter(|s| ctx.instance(**s).is_some_and(|i| i.pod.is_some()))
            .map(|s| ctx.name(*s))
            .collect();
        if pods.is_empty() {
            upgrade.step = UpgradeStep::RollingBack;
            upgrade.message = Some(format!(
                "spec.version went back to {from} before PostgreSQL {to} answered"
            ));
            return Next::Again;
        }
        for serial in &ctx.members {
            if ctx
                .instance(*serial)
                .is_some_and(|i| i.pod.is_some() && !i.terminating())
            {
                out.actions.push(Action::DeletePod {
                    name: ctx.name(*serial),
                    reason: DeleteReason::MajorUpgrade,
                });
            }
        }
        out.verdicts.push(progress(format!(
            "spec.version: stopping {} to put the data of {from} back",
            pods.join(", ")
        )));
    } else {
        // The upgraded primary starts (the topology restarts it on
        // its volume), then the replicas.
        out.hold = false;
        out.image = Some(upgrade.to_image.clone());
        out.verdicts.push(progress(format!(
            "spec.version: starting PostgreSQL {to} on the upgraded data of {}; \
                 until it answers, setting spec.version back to {from} undoes the upgrade",
            upgrade.instance
        )));
    }
    Next::Wait
}

/// The old data directory is put back by a Job.
fn rolling_back(ctx: &Context, upgrade: &mut UpgradeStatus, out: &mut Upgrade, back: bool) -> Next {
    let from = upgrade.from;
    out.hold = true;
    match job(ctx, UpgradeJob::Rollback, upgrade) {
        None => {
            out.actions.push(run(UpgradeJob::Rollback, upgrade));
            out.verdicts.push(progress(format!(
                "spec.version: putting the data directory of {from} back on {}",
                upgrade.instance
            )));
        }
        Some(JobState::Running) => out.verdicts.push(progress(format!(
            "spec.version: Job {} puts the data directory of {from} back",
            job_name(ctx, UpgradeJob::Rollback, upgrade)
        ))),
        Some(JobState::Failed(report)) => out.verdicts.push(Verdict::blocked(
            "UpgradeRollbackFailed",
            format!(
                "spec.version: putting the data directory of {from} back on {} failed: {report}; \
                     no instance is started. {}",
                upgrade.instance,
                upgrade.message.clone().unwrap_or_default()
            ),
        )),
        Some(JobState::Succeeded(_)) => {
            upgrade.step = UpgradeStep::RolledBack;
            out.hold = false;
            out.active = false;
            if !back {
                let status = Some(upgrade.clone());
                return Next::Finish(Box::new(Upgrade {
                    status,
                    ..stopped(ctx, upgrade.clone(), UpgradeJob::Upgrade)
                }));
            }
        }
    }
    Next::Wait
}
