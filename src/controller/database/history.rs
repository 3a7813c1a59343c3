//! `status.history` (pure): which entries a pass adds, and the list kept.
//!
//! Every entry is decided from what the pass already holds, so recording
//! costs no API call: a failover when its action completes (with the
//! figures the pass measured), a switchover when a pass sees `-rw` route to
//! the new primary (see [`super::outage`]), a Backup once it is Completed or
//! Failed, a major upgrade when its step becomes final, a restart
//! (`tusk.dev/restartedAt`) once every instance pod carries the value and
//! the Database is Ready. The list is kept in time order and trimmed to
//! [`HISTORY_LENGTH`]; an event is not recorded twice, and one whose entry
//! was trimmed away is not recorded again (see [`known`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::status::{
    BackupPhase, HISTORY_LENGTH, HistoryEntry, HistoryKind, LastFailover, UpgradeStatus,
    UpgradeStep,
};
use crate::api::v1::Backup;

use super::outage::Switched;

pub use crate::api::model::RESTARTED_AT_ANNOTATION;

/// `history` with `new` added: in time order (a stable sort, so entries of
/// the same time keep the order they came in), the last [`HISTORY_LENGTH`].
pub fn append(history: &[HistoryEntry], new: &[HistoryEntry]) -> Vec<HistoryEntry> {
    let mut all: Vec<HistoryEntry> = history.iter().chain(new).cloned().collect();
    all.sort_by_key(|e| e.time.0);
    let excess = all.len().saturating_sub(HISTORY_LENGTH);
    all.split_off(excess)
}

/// Whether an event of `kind` about `name` that began at `since` needs no
/// entry: it has one, or the history is full of later entries (its own was
/// trimmed away, and adding it again would only bring it back).
pub fn known(history: &[HistoryEntry], kind: HistoryKind, name: &str, since: Timestamp) -> bool {
    let recorded = history
        .iter()
        .any(|e| e.kind == kind && e.name.as_deref() == Some(name));
    let forgotten = history.len() >= HISTORY_LENGTH && history.iter().all(|e| e.time.0 > since);
    recorded || forgotten
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn entry(kind: HistoryKind, time: Timestamp, succeeded: bool) -> HistoryEntry {
    HistoryEntry {
        kind,
        time: Time(time),
        from: None,
        to: None,
        name: None,
        duration_milliseconds: None,
        wal_gap_bytes: None,
        bytes: None,
        succeeded,
        message: None,
    }
}

/// A failover, as `status.lastFailover` records it.
pub fn failover(record: &LastFailover) -> HistoryEntry {
    HistoryEntry {
        from: Some(record.from.clone()),
        to: Some(record.to.clone()),
        duration_milliseconds: record.duration_milliseconds,
        wal_gap_bytes: record.wal_gap_bytes,
        ..entry(HistoryKind::Failover, record.time.0, true)
    }
}

/// A switchover that completed at `now`: its pause runs from asking the old
/// primary to hand over to the `-rw` Service routing to the new one, as
/// clients see it; when that routing was not seen, to the promotion, and the
/// entry says so.
pub fn switchover(switched: &Switched, now: Timestamp) -> HistoryEntry {
    HistoryEntry {
        from: Some(switched.from.clone()),
        to: Some(switched.to.clone()),
        duration_milliseconds: Some(millis(switched.routed.unwrap_or(switched.promoted))),
        message: switched.routed.is_none().then(|| {
            format!(
                "the -rw Service did not route to {} alone within {} s; the pause shown ends at the promotion",
                switched.to,
                super::outage::ROUTED_WITHIN.as_secs()
            )
        }),
        ..entry(HistoryKind::Switchover, now, true)
    }
}

/// The Backups that ended (Completed or Failed) and have no entry yet.
pub fn backups(history: &[HistoryEntry], backups: &[Backup]) -> Vec<HistoryEntry> {
    backups
        .iter()
        .filter_map(ended_backup)
        .filter(|e| {
            let name = e.name.as_deref().unwrap_or_default();
            !known(history, HistoryKind::Backup, name, e.time.0)
        })
        .collect()
}

/// A Backup's entry once it is over: size and duration when it completed,
/// its Ready condition's message when it failed.
fn ended_backup(backup: &Backup) -> Option<HistoryEntry> {
    let status = backup.status.as_ref()?;
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    let (succeeded, time) = match status.phase? {
        BackupPhase::Completed => (true, status.completed_at.as_ref()?.0),
        BackupPhase::Failed => {
            let at = status
                .completed_at
                .as_ref()
                .or(ready.map(|c| &c.last_transition_time))?;
            (false, at.0)
        }
        BackupPhase::Pending | BackupPhase::Running => return None,
    };
    let duration = status
        .started_at
        .as_ref()
        .and_then(|start| Duration::try_from(time.duration_since(start.0)).ok())
        .map(millis);
    Some(HistoryEntry {
        name: Some(backup.name_any()),
        duration_milliseconds: duration,
        bytes: status.bytes.filter(|_| succeeded),
        message: ready
            .filter(|_| !succeeded)
            .map(|c| c.message.clone())
            .filter(|m| !m.is_empty()),
        ..entry(HistoryKind::Backup, time, succeeded)
    })
}

/// A major upgrade that reached a final step this pass (`Done`,
/// `RolledBack`, or `CheckFailed`: nothing was changed).
pub fn upgrade(
    previous: Option<&UpgradeStatus>,
    next: Option<&UpgradeStatus>,
    now: Timestamp,
) -> Option<HistoryEntry> {
    let next = next?;
    let succeeded = match next.step {
        UpgradeStep::Done => true,
        UpgradeStep::RolledBack | UpgradeStep::CheckFailed => false,
        _ => return None,
    };
    let same = previous.is_some_and(|p| p.step == next.step && p.to == next.to);
    if same {
        return None;
    }
    Some(HistoryEntry {
        from: Some(next.from.to_string()),
        to: Some(next.to.to_string()),
        message: next.message.clone(),
        ..entry(HistoryKind::Upgrade, now, succeeded)
    })
}

/// What a pass knows of a restart asked with [`RESTARTED_AT_ANNOTATION`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restart<'a> {
    /// The Database's annotation.
    pub asked: &'a str,
    /// Every instance the spec asks for has a pod carrying `asked`.
    pub replaced: bool,
    /// The status this pass writes is Ready.
    pub ready: bool,
}

/// The restart's entry once it is done, named for the annotation's value
/// (how `kubectl tusk restart --wait` finds it), its duration running from
/// that time. A value that is not an RFC 3339 time still restarts the
/// instances but gets no entry: without a start, an entry trimmed away
/// could not be told from one never written.
pub fn restart(
    history: &[HistoryEntry],
    restart: Restart<'_>,
    now: Timestamp,
) -> Option<HistoryEntry> {
    if !(restart.replaced && restart.ready) {
        return None;
    }
    let asked = restart.asked.parse::<Timestamp>().ok()?;
    if known(history, HistoryKind::Restart, restart.asked, asked) {
        return None;
    }
    let duration = Duration::try_from(now.duration_since(asked))
        .ok()
        .map(millis);
    Some(HistoryEntry {
        name: Some(restart.asked.to_owned()),
        duration_milliseconds: duration,
        ..entry(HistoryKind::Restart, now, true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::BackupStatus;
    use crate::api::v1::BackupSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    fn named(kind: HistoryKind, name: &str, time: &str) -> HistoryEntry {
        HistoryEntry {
            name: Some(name.into()),
            ..entry(kind, at(time), true)
        }
    }

    fn full(from_minute: u32) -> Vec<HistoryEntry> {
        (0..HISTORY_LENGTH)
            .map(|i| {
                let minute = from_minute as usize + i;
                named(
                    HistoryKind::Backup,
                    &format!("b{minute}"),
                    &format!("2026-11-26T10:{minute:02}:00Z"),
                )
            })
            .collect()
    }

    #[test]
    fn append_keeps_the_last_entries_in_time_order() {
        let history = full(0);
        let new = named(HistoryKind::Restart, "r", "2026-11-26T11:00:00Z");
        let kept = append(&history, std::slice::from_ref(&new));
        assert_eq!(kept.len(), HISTORY_LENGTH);
        assert_eq!(kept.first().and_then(|e| e.name.as_deref()), Some("b1"));
        assert_eq!(kept.last(), Some(&new));
        // An entry older than the rest goes where its time says.
        let early = named(HistoryKind::Backup, "early", "2026-11-26T09:00:00Z");
        let short = append(&history[..3], std::slice::from_ref(&early));
        assert_eq!(short[0], early);
        assert_eq!(short.len(), 4);
        // One older than everything kept in a full list is dropped at once.
        assert_eq!(append(&history, &[early]), history);
    }

    fn backup(name: &str, phase: BackupPhase) -> Backup {
        let mut backup = Backup::new(
            name,
            BackupSpec {
                database: "pg".into(),
                target: Default::default(),
            },
        );
        let failed = phase == BackupPhase::Failed;
        backup.status = Some(BackupStatus {
            phase: Some(phase),
            started_at: Some(Time(at("2026-11-26T10:00:00Z"))),
            completed_at: (phase == BackupPhase::Completed)
                .then(|| Time(at("2026-11-26T10:00:42.5Z"))),
            bytes: Some(1234),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: if failed { "False" } else { "True" }.into(),
                reason: "X".into(),
                message: if failed { "no space left" } else { "" }.into(),
                last_transition_time: Time(at("2026-11-26T10:01:00Z")),
                observed_generation: None,
            }],
            ..BackupStatus::default()
        });
        backup
    }

    #[test]
    fn a_backup_is_recorded_once_when_it_ends() {
        let list = [
            backup("done", BackupPhase::Completed),
            backup("broken", BackupPhase::Failed),
            backup("running", BackupPhase::Running),
        ];
        let new = backups(&[], &list);
        assert_eq!(new.len(), 2, "{new:?}");
        assert_eq!(new[0].name.as_deref(), Some("done"));
        assert!(new[0].succeeded);
        assert_eq!(new[0].bytes, Some(1234));
        assert_eq!(new[0].duration_milliseconds, Some(42_500));
        assert_eq!(new[0].time.0, at("2026-11-26T10:00:42.5Z"));
        assert!(!new[1].succeeded);
        assert_eq!(new[1].bytes, None);
        assert_eq!(new[1].message.as_deref(), Some("no space left"));
        assert_eq!(new[1].time.0, at("2026-11-26T10:01:00Z"));
        // Once recorded, never again.
        let history = append(&[], &new);
        assert!(backups(&history, &list).is_empty());
    }

    #[test]
    fn a_backup_whose_entry_was_trimmed_is_not_recorded_again() {
        // A full history, all after the backup ended.
        let history = full(10);
        let list = [backup("done", BackupPhase::Completed)];
        assert!(backups(&history, &list).is_empty());
        // Not full: it is recorded.
        assert_eq!(backups(&history[..5], &list).len(), 1);
    }

    #[test]
    fn failovers_and_switchovers_carry_their_figures() {
        let record = LastFailover {
            from: "pg-1".into(),
            to: "pg-2".into(),
            time: Time(at("2026-11-26T10:00:00Z")),
            duration_milliseconds: Some(2500),
            wal_gap_bytes: Some(0),
        };
        let failover = failover(&record);
        assert_eq!(failover.kind, HistoryKind::Failover);
        assert_eq!(failover.from.as_deref(), Some("pg-1"));
        assert_eq!(failover.to.as_deref(), Some("pg-2"));
        assert_eq!(failover.duration_milliseconds, Some(2500));
        assert_eq!(failover.wal_gap_bytes, Some(0));
        let mut switched = Switched {
            from: "pg-2".into(),
            to: "pg-1".into(),
            routed: Some(Duration::from_millis(1630)),
            promoted: Duration::from_millis(230),
        };
        let switchover_entry = switchover(&switched, at("2026-11-26T10:05:00Z"));
        assert_eq!(switchover_entry.kind, HistoryKind::Switchover);
        // The pause clients saw: until -rw routed to the new primary.
        assert_eq!(switchover_entry.duration_milliseconds, Some(1630));
        assert_eq!(switchover_entry.to.as_deref(), Some("pg-1"));
        assert!(switchover_entry.succeeded);
        assert_eq!(switchover_entry.message, None);
        switched.routed = None;
        let unrouted = switchover(&switched, at("2026-11-26T10:05:00Z"));
        assert_eq!(unrouted.duration_milliseconds, Some(230));
        assert!(
            unrouted
                .message
                .as_deref()
                .is_some_and(|m| m.contains("did not route to pg-1")),
            "{unrouted:?}"
        );
    }

    fn upgrade_at(step: UpgradeStep) -> UpgradeStatus {
        UpgradeStatus {
            from: 16,
            to: 17,
            from_image: "postgres:16".into(),
            to_image: "postgres:17".into(),
            instance: "pg-1".into(),
            node: None,
            step,
            message: Some("said".into()),
        }
    }

    #[test]
    fn an_upgrade_is_recorded_when_its_step_becomes_final() {
        let now = at("2026-11-26T10:00:00Z");
        let starting = upgrade_at(UpgradeStep::Starting);
        let done = upgrade_at(UpgradeStep::Done);
        let entry = upgrade(Some(&starting), Some(&done), now).expect("done");
        assert!(entry.succeeded);
        assert_eq!(entry.from.as_deref(), Some("16"));
        assert_eq!(entry.to.as_deref(), Some("17"));
        // The next pass still says Done: nothing new.
        assert_eq!(upgrade(Some(&done), Some(&done), now), None);
        let rolled = upgrade_at(UpgradeStep::RolledBack);
        let rolling = upgrade_at(UpgradeStep::RollingBack);
        assert!(
            !upgrade(Some(&rolling), Some(&rolled), now)
                .expect("rolled back")
                .succeeded
        );
        assert_eq!(upgrade(Some(&starting), Some(&rolling), now), None);
        assert_eq!(upgrade(Some(&done), None, now), None);
    }

    #[test]
    fn a_restart_is_recorded_once_every_pod_carries_it_and_the_database_is_ready() {
        let now = at("2026-11-26T10:02:00Z");
        let asked = "2026-11-26T10:00:00Z";
        let done = Restart {
            asked,
            replaced: true,
            ready: true,
        };
        let entry = restart(&[], done, now).expect("done");
        assert_eq!(entry.kind, HistoryKind::Restart);
        assert_eq!(entry.name.as_deref(), Some(asked));
        assert_eq!(entry.duration_milliseconds, Some(120_000));
        assert_eq!(
            restart(
                &[],
                Restart {
                    replaced: false,
                    ..done
                },
                now
            ),
            None
        );
        assert_eq!(
            restart(
                &[],
                Restart {
                    ready: false,
                    ..done
                },
                now
            ),
            None
        );
        // Recorded once, and not again after being trimmed away.
        assert_eq!(restart(&append(&[], &[entry]), done, now), None);
        assert_eq!(restart(&full(10), done, now), None);
        // A value that is no time gets no entry.
        let odd = Restart {
            asked: "now please",
            ..done
        };
        assert_eq!(restart(&[], odd, now), None);
    }
}
