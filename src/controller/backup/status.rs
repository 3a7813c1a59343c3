//! What a Backup's status says: validation's part, the run as the instance
//! reports it, why it waits, and the outcome counted in the metrics. Pure:
//! the shell writes what these return.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::status::{BackupPhase, BackupStatus};
use crate::api::v1::Backup;
use crate::api::validate::{self, FieldError};
use crate::contract::{BackupRun, BackupStage, BackupState};
use crate::controller::conditions::{self, Desired, READY};
use crate::telemetry::metrics::BackupResult;

/// Reason of the Ready condition of a Backup with an invalid spec.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Waiting for the Database's running backup (one at a time).
pub const QUEUED: &str = "Queued";
/// No instance of the Database can take it now.
pub const NO_INSTANCE: &str = "NoInstance";
pub const RUNNING: &str = "Running";
pub const COMPLETED: &str = "Completed";
pub const FAILED: &str = "BackupFailed";
/// The instance that ran it restarted or went away mid-way.
pub const INSTANCE_LOST: &str = "InstanceLost";

/// Validation's part of the status: an invalid spec keeps the Backup
/// Pending and says which field; a valid one keeps what it had.
pub fn validated(backup: &Backup, errors: &[FieldError], now: &Time) -> BackupStatus {
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
        Some(run) => follow(&mut next, instance, run),
    };
    next.conditions = conditions::merge(&previous.conditions, &[ready], generation, now);
    next
}

/// Copies what the instance reports about `run` into `next`; returns the
/// Ready condition it means.
fn follow(next: &mut BackupStatus, instance: &str, run: &BackupState) -> Desired {
    next.started_at = parse_time(&run.started_at).or(next.started_at.take());
    next.begin_lsn = run
        .begin_lsn
        .map(|l| l.to_string())
        .or(next.begin_lsn.take());
    next.end_lsn = run.end_lsn.map(|l| l.to_string()).or(next.end_lsn.take());
    next.location = run.location.clone().or(next.location.take());
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
pub fn waiting(
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
        let status = validated(&b, &errors, &Time(Timestamp::UNIX_EPOCH));
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
