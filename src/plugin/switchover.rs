//! `kubectl tusk switchover <db> [--to instance] [--wait]`: sets
//! `spec.primary` to a ready replica (the least behind unless `--to` names
//! one), after checking against the status that it is one; with `--wait`,
//! watches until that instance is the primary and the Database is Ready at
//! the new generation, then prints the write pause the operator measured
//! (its `status.history` entry).

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::act::{self, Step};
use super::term::{Progress, Terminal};
use super::{Error, Session, Wait};
use crate::api::status::{DatabaseStatus, HistoryEntry, HistoryKind, InstanceRole};
use crate::api::v1::Database;

pub async fn run(
    session: &Session,
    database: &str,
    to: Option<&str>,
    wait: Wait,
) -> Result<(), Error> {
    let db = session.database(database).await?;
    let status = db.status.clone().unwrap_or_default();
    let target = target(database, &status, to)?;
    let from = status.current_primary.clone().unwrap_or_default();
    let api: Api<Database> = Api::namespaced(session.client.clone(), &session.namespace);
    let patched = api
        .patch(
            database,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"primary": target}})),
        )
        .await
        .map_err(Error::kube(format!("setting spec.primary of {database}")))?;
    if !wait.wait {
        println!(
            "asked {database} to hand the primary role from {from} to {target} (spec.primary)"
        );
        return Ok(());
    }
    let generation = patched.metadata.generation.unwrap_or(0);
    let mut progress = Progress::start(Terminal::detect(), None);
    let what = format!("the switchover of {database} to {target}");
    let result = act::watch_until(&api, database, wait.timeout, &what, &mut progress, |db| {
        judge(db, &status.history, &target, generation)
    })
    .await;
    progress.finish();
    println!("{}", report(&from, &target, &result?));
    Ok(())
}

/// The instance to promote: `to` (a name or a number), which must be a
/// ready replica per the status, else the least behind ready replica.
pub fn target(database: &str, status: &DatabaseStatus, to: Option<&str>) -> Result<String, Error> {
    let Some(to) = to else {
        return act::ready_replicas(status)
            .first()
            .map(|i| i.name.clone())
            .ok_or_else(|| {
                Error::Failed(format!("{database} has no ready replica to switch over to"))
            });
    };
    let name = act::instance_name(database, to);
    let Some(instance) = status.instances.iter().find(|i| i.name == name) else {
        return Err(Error::NotFound(format!(
            "{name} is not an instance of Database {database}"
        )));
    };
    if status.current_primary.as_deref() == Some(name.as_str())
        || instance.role == Some(InstanceRole::Primary)
    {
        return Err(Error::Failed(format!(
            "{name} is already the primary of {database}"
        )));
    }
    if !(instance.ready && instance.role == Some(InstanceRole::Replica)) {
        return Err(Error::Failed(format!(
            "{name} is not a ready, streaming replica of {database}"
        )));
    }
    Ok(name)
}

/// Done once `target` is the primary, Ready describes `generation` and the
/// operator recorded the move (an entry not in `before`).
fn judge(
    db: &Database,
    before: &[HistoryEntry],
    target: &str,
    generation: i64,
) -> Step<Option<i64>> {
    let status = db.status.clone().unwrap_or_default();
    if let Some(ready) = act::condition(&status, "Ready")
        && ready.reason == "SwitchoverRefused"
        && ready.observed_generation.unwrap_or(0) >= generation
    {
        return Step::Failed(Error::Failed(format!(
            "the operator refused: {}",
            ready.message
        )));
    }
    let recorded = status
        .history
        .iter()
        .filter(|e| !before.contains(e))
        .find(|e| {
            matches!(e.kind, HistoryKind::Switchover | HistoryKind::Failover)
                && e.to.as_deref() == Some(target)
        });
    match recorded {
        Some(entry)
            if status.current_primary.as_deref() == Some(target)
                && act::ready_at(db, generation) =>
        {
            Step::Done(entry.duration_milliseconds)
        }
        _ => Step::Waiting(act::phase_line(db), None),
    }
}

/// The final line: the new primary and the write pause.
pub fn report(from: &str, to: &str, pause: &Option<i64>) -> String {
    match pause {
        Some(ms) => format!(
            "{to} is the primary (was {from}); writes paused {}",
            act::human_duration(*ms)
        ),
        None => format!("{to} is the primary (was {from}); the operator did not measure the pause"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::InstanceStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn status() -> DatabaseStatus {
        let instance = |name: &str, role, ready, lag| InstanceStatus {
            name: name.into(),
            role: Some(role),
            ready,
            lag_bytes: lag,
            ..InstanceStatus::default()
        };
        DatabaseStatus {
            current_primary: Some("pg-1".into()),
            instances: vec![
                instance("pg-1", InstanceRole::Primary, true, None),
                instance("pg-2", InstanceRole::Replica, true, Some(50)),
                instance("pg-3", InstanceRole::Replica, true, Some(0)),
                instance("pg-4", InstanceRole::Replica, false, Some(0)),
            ],
            ..DatabaseStatus::default()
        }
    }

    #[test]
    fn the_target_is_the_least_behind_ready_replica_or_the_one_named() {
        assert_eq!(target("pg", &status(), None).expect("one"), "pg-3");
        assert_eq!(target("pg", &status(), Some("2")).expect("named"), "pg-2");
        assert_eq!(
            target("pg", &status(), Some("pg-2")).expect("named"),
            "pg-2"
        );
    }

    #[test]
    fn a_target_that_cannot_take_over_is_refused_in_one_line() {
        let refused = |to: &str| {
            let error = target("pg", &status(), Some(to)).expect_err(to);
            (error.exit_code(), error.to_string())
        };
        assert_eq!(
            refused("9"),
            (3, "pg-9 is not an instance of Database pg".into())
        );
        assert_eq!(
            refused("pg-1"),
            (1, "pg-1 is already the primary of pg".into())
        );
        assert_eq!(
            refused("4"),
            (1, "pg-4 is not a ready, streaming replica of pg".into())
        );
        let alone = DatabaseStatus {
            instances: status().instances[..1].to_vec(),
            ..status()
        };
        assert_eq!(
            target("pg", &alone, None).expect_err("none").to_string(),
            "pg has no ready replica to switch over to"
        );
    }

    fn database(primary: &str, generation: i64, history: Vec<HistoryEntry>) -> Database {
        let mut db = Database::new("pg", crate::api::arbitrary::sample_database().spec);
        db.status = Some(DatabaseStatus {
            current_primary: Some(primary.into()),
            observed_generation: Some(generation),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Ready".into(),
                message: "all instances ready".into(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                observed_generation: Some(generation),
            }],
            history,
            ..DatabaseStatus::default()
        });
        db
    }

    fn entry(to: &str, ms: i64) -> HistoryEntry {
        HistoryEntry {
            kind: HistoryKind::Switchover,
            time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            from: Some("pg-1".into()),
            to: Some(to.into()),
            name: None,
            duration_milliseconds: Some(ms),
            wal_gap_bytes: None,
            bytes: None,
            succeeded: true,
            message: None,
        }
    }

    #[test]
    fn the_wait_ends_with_the_new_primary_ready_and_its_pause_recorded() {
        let old = vec![entry("pg-2", 5)];
        // The old status, before the operator saw the new spec.
        assert!(matches!(
            judge(&database("pg-1", 1, old.clone()), &old, "pg-2", 2),
            Step::Waiting(..)
        ));
        // The primary moved but the entry is the earlier one: not yet.
        assert!(matches!(
            judge(&database("pg-2", 2, old.clone()), &old, "pg-2", 2),
            Step::Waiting(..)
        ));
        let new = vec![entry("pg-2", 5), entry("pg-2", 830)];
        match judge(&database("pg-2", 2, new), &old, "pg-2", 2) {
            Step::Done(pause) => assert_eq!(pause, Some(830)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            report("pg-1", "pg-2", &Some(830)),
            "pg-2 is the primary (was pg-1); writes paused 830 ms"
        );
    }
}
