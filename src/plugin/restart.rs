//! `kubectl tusk restart <db> [--wait]`: sets the Database's
//! `tusk.dev/restartedAt` annotation to now, like `kubectl rollout restart`;
//! the operator then replaces every instance pod (replicas first, then the
//! primary after a switchover). With `--wait`, watches until the operator
//! records the restart in `status.history` (every pod carries the value and
//! the Database is Ready), and prints how long it took.

use k8s_openapi::jiff::{Timestamp, Unit};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::act::{self, Step};
use super::term::{Progress, Terminal};
use super::{Error, Session, Wait};
use crate::api::model::RESTARTED_AT_ANNOTATION;
use crate::api::status::HistoryKind;
use crate::api::v1::Database;

pub async fn run(session: &Session, database: &str, wait: Wait) -> Result<(), Error> {
    session.database(database).await?;
    let asked = asked_at(Timestamp::now());
    let api: Api<Database> = Api::namespaced(session.client.clone(), &session.namespace);
    api.patch(
        database,
        &PatchParams::default(),
        &Patch::Merge(patch(&asked)),
    )
    .await
    .map_err(Error::kube(format!("annotating {database}")))?;
    if !wait.wait {
        println!("asked {database} to restart ({RESTARTED_AT_ANNOTATION}={asked})");
        return Ok(());
    }
    let mut progress = Progress::start(Terminal::detect(), None);
    let what = format!("the restart of {database}");
    let result = act::watch_until(&api, database, wait.timeout, &what, &mut progress, |db| {
        judge(db, &asked)
    })
    .await;
    progress.finish();
    println!("{}", report(database, result?));
    Ok(())
}

/// The annotation's value: now, to the millisecond (two restarts in the
/// same second are still two).
pub fn asked_at(now: Timestamp) -> String {
    now.round(Unit::Millisecond).unwrap_or(now).to_string()
}

/// The merge patch that asks for the restart.
pub fn patch(asked: &str) -> serde_json::Value {
    json!({"metadata": {"annotations": {RESTARTED_AT_ANNOTATION: asked}}})
}

/// Done once the operator recorded the restart asked at `asked`.
fn judge(db: &Database, asked: &str) -> Step<Option<i64>> {
    let status = db.status.clone().unwrap_or_default();
    match status
        .history
        .iter()
        .find(|e| e.kind == HistoryKind::Restart && e.name.as_deref() == Some(asked))
    {
        Some(entry) => Step::Done(entry.duration_milliseconds),
        None => Step::Waiting(act::phase_line(db), None),
    }
}

/// The final line.
pub fn report(database: &str, took: Option<i64>) -> String {
    match took {
        Some(ms) => format!(
            "{database} restarted: every instance replaced in {}",
            act::human_duration(ms)
        ),
        None => format!("{database} restarted: every instance replaced"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::{DatabaseStatus, HistoryEntry};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn the_annotation_is_an_rfc_3339_time() {
        let now: Timestamp = "2026-11-26T10:00:00.123456Z".parse().expect("time");
        let asked = asked_at(now);
        assert_eq!(asked, "2026-11-26T10:00:00.123Z");
        assert!(asked.parse::<Timestamp>().is_ok());
        assert_eq!(
            patch(&asked),
            json!({"metadata": {"annotations": {"tusk.dev/restartedAt": "2026-11-26T10:00:00.123Z"}}})
        );
    }

    #[test]
    fn the_wait_ends_with_the_entry_for_this_restart() {
        let mut db = Database::new("pg", crate::api::arbitrary::sample_database().spec);
        let entry = |name: &str| HistoryEntry {
            kind: HistoryKind::Restart,
            time: Time(Timestamp::UNIX_EPOCH),
            from: None,
            to: None,
            name: Some(name.into()),
            duration_milliseconds: Some(61_000),
            wal_gap_bytes: None,
            bytes: None,
            succeeded: true,
            message: None,
        };
        db.status = Some(DatabaseStatus {
            history: vec![entry("2026-11-26T09:00:00Z")],
            ..DatabaseStatus::default()
        });
        assert!(matches!(
            judge(&db, "2026-11-26T10:00:00Z"),
            Step::Waiting(..)
        ));
        if let Some(status) = db.status.as_mut() {
            status.history.push(entry("2026-11-26T10:00:00Z"));
        }
        assert!(matches!(
            judge(&db, "2026-11-26T10:00:00Z"),
            Step::Done(Some(61_000))
        ));
        assert_eq!(
            report("pg", Some(61_000)),
            "pg restarted: every instance replaced in 1 min 1 s"
        );
    }
}
