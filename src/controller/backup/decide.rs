//! What to do with a valid Backup: wait in the Database's queue (one backup
//! at a time, the oldest first), start it on an instance (a ready standby
//! unless `spec.target` asks for the primary), or follow the run where it
//! is. Pure: the shell lists the Backups and the instances.

use kube::ResourceExt;

use super::status::{NO_INSTANCE, QUEUED};
use crate::api::status::BackupPhase;
use crate::api::v1::{Backup, BackupTarget};
use crate::contract::Role;

/// An instance of the Database a backup may be taken on, as the Backup
/// controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub name: String,
    pub ip: Option<String>,
    pub role: Option<Role>,
    pub ready: bool,
    /// Its PostgreSQL image.
    pub image: String,
    /// How the operator reaches its manager over TLS: set when its pod
    /// serves TLS and the Database's client material is known.
    pub tls: Option<crate::controller::database::instances::ClientTls>,
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
/// the same Database; `sources` its instances.
pub fn next(backup: &Backup, others: &[&Backup], sources: &[Source]) -> Next {
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
    if let Some(wait) = queued(backup, others) {
        return wait;
    }
    match chosen(backup.spec.target, sources) {
        Some(instance) => Next::Start { instance },
        None => Next::Wait {
            reason: NO_INSTANCE,
            message: format!(
                "no ready instance of {} to take it on (spec.target: {})",
                backup.spec.database,
                match backup.spec.target {
                    BackupTarget::PreferStandby => "prefer-standby",
                    BackupTarget::Primary => "primary",
                }
            ),
        },
    }
}

/// Why `backup` waits for one of `others`, if it does: one runs, or one that
/// waits is older (first come, first served).
fn queued(backup: &Backup, others: &[&Backup]) -> Option<Next> {
    let database = &backup.spec.database;
    if let Some(running) = others
        .iter()
        .find(|o| phase_of(o) == Some(BackupPhase::Running))
    {
        return Some(Next::Wait {
            reason: QUEUED,
            message: format!(
                "backup {} of {database} is running; one at a time",
                running.name_any()
            ),
        });
    }
    let order = |b: &Backup| (b.creation_timestamp().map(|t| t.0), b.name_any());
    let ahead = others
        .iter()
        .filter(|o| matches!(phase_of(o), None | Some(BackupPhase::Pending)))
        .find(|o| order(o) < order(backup))?;
    Some(Next::Wait {
        reason: QUEUED,
        message: format!(
            "backup {} of {database} is ahead in the queue",
            ahead.name_any()
        ),
    })
}

/// The instance `target` asks for among the ready ones with an address, by
/// name when several fit.
fn chosen(target: BackupTarget, sources: &[Source]) -> Option<String> {
    let ready = |role: Role| {
        let mut ready: Vec<&Source> = sources
            .iter()
            .filter(|c| c.ready && c.ip.is_some() && c.role == Some(role))
            .collect();
        ready.sort_by(|a, b| a.name.cmp(&b.name));
        ready.first().map(|c| c.name.clone())
    };
    match target {
        BackupTarget::PreferStandby => ready(Role::Replica).or_else(|| ready(Role::Primary)),
        BackupTarget::Primary => ready(Role::Primary),
    }
}

fn phase_of(backup: &Backup) -> Option<BackupPhase> {
    backup.status.as_ref().and_then(|s| s.phase)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::BackupStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

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

    fn source(name: &str, role: Role, ready: bool) -> Source {
        Source {
            name: name.into(),
            ip: Some(format!("10.0.0.{}", name.len())),
            role: Some(role),
            ready,
            image: "postgres:17".into(),
            tls: None,
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
            source("orders-1", Role::Primary, true),
            source("orders-3", Role::Replica, true),
            source("orders-2", Role::Replica, false),
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
        let none = next(&b, &[], &[source("orders-1", Role::Primary, false)]);
        assert!(
            matches!(&none, Next::Wait { reason: NO_INSTANCE, message } if message.contains("prefer-standby")),
            "{none:?}"
        );
    }

    #[test]
    fn one_backup_runs_at_a_time_and_the_oldest_waiting_goes_first() {
        let all = [source("orders-1", Role::Primary, true)];
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
}
