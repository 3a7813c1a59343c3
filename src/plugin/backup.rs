//! `kubectl tusk backup <db> [--name n] [--wait]`: creates a Backup of the
//! Database. With `--wait`, shows its progress until it completes (and, when
//! the Database verifies its backups, until the throwaway restore has proved
//! it), then prints its size, how long it took and the verification; a
//! Backup that fails (or fails verification) is exit code 1 with its
//! message.

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use super::act::{self, Step};
use super::term::{Progress, Terminal};
use super::{Error, Session, Wait};
use crate::api::status::{BackupPhase, BackupStatus};
use crate::api::v1::{Backup, BackupSpec, Database};

pub async fn run(
    session: &Session,
    database: &str,
    name: Option<&str>,
    wait: Wait,
) -> Result<(), Error> {
    let db = session.database(database).await?;
    let name = name.map_or_else(|| default_name(database, Timestamp::now()), str::to_owned);
    let api: Api<Backup> = Api::namespaced(session.client.clone(), &session.namespace);
    api.create(&PostParams::default(), &manifest(&name, database))
        .await
        .map_err(|err| match err {
            kube::Error::Api(status) if status.code == 409 => {
                Error::Usage(format!("Backup {name} already exists"))
            }
            other => Error::kube(format!("creating Backup {name}"))(other),
        })?;
    if !wait.wait {
        println!("Backup {name} of {database} created");
        return Ok(());
    }
    let verifies = verifies(&db);
    let mut progress = Progress::start(Terminal::detect(), None);
    let what = format!("Backup {name}");
    let result = act::watch_until(&api, &name, wait.timeout, &what, &mut progress, |backup| {
        judge(backup, verifies)
    })
    .await;
    progress.finish();
    println!("{}", result?);
    Ok(())
}

/// `<database>-<UTC time to the second>`, as scheduled backups are named.
pub fn default_name(database: &str, now: Timestamp) -> String {
    format!("{database}-{}", now.strftime("%Y%m%d%H%M%S"))
}

/// The Backup to create.
pub fn manifest(name: &str, database: &str) -> Backup {
    Backup::new(
        name,
        BackupSpec {
            database: database.to_owned(),
            target: Default::default(),
        },
    )
}

/// Whether the operator will verify a completed backup of `db` (the
/// verification controller's rule; the store may be the operator's
/// default, which the plugin cannot see, and without one the backup fails).
fn verifies(db: &Database) -> bool {
    db.spec.backup.as_ref().is_some_and(|b| b.verifies())
}

/// Where the Backup is, and the report once it is done.
pub fn judge(backup: &Backup, verifies: bool) -> Step<String> {
    let name = backup.metadata.name.clone().unwrap_or_default();
    let status = backup.status.clone().unwrap_or_default();
    let ready_message = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    match status.phase {
        Some(BackupPhase::Failed) => Step::Failed(Error::Failed(format!(
            "Backup {name} failed: {ready_message}"
        ))),
        Some(BackupPhase::Completed) => match (verifies, status.verified) {
            (true, None) => Step::Waiting(format!("Backup {name} completed; verifying"), None),
            (_, Some(false)) => Step::Failed(Error::Failed(format!(
                "Backup {name} completed ({}) but its verification failed: {}",
                size_and_time(&status),
                verification_message(backup)
            ))),
            (_, verified) => Step::Done(report(&name, &status, verified)),
        },
        phase => {
            let phase = phase.map_or("Pending", BackupPhase::as_str);
            let mut line = format!("Backup {name}: {phase}");
            if let Some(progress) = &status.progress {
                line.push_str(&format!(" {progress}"));
            }
            if let Some(bytes) = status.bytes {
                line.push_str(&format!(" ({})", act::human_bytes(bytes)));
            }
            Step::Waiting(line, None)
        }
    }
}

fn verification_message(backup: &Backup) -> String {
    let status = backup.status.clone().unwrap_or_default();
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Verified")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

fn size_and_time(status: &BackupStatus) -> String {
    let size = status
        .bytes
        .map_or("size unknown".to_owned(), act::human_bytes);
    let took = status
        .started_at
        .as_ref()
        .zip(status.completed_at.as_ref())
        .map(|(start, end)| end.0.as_millisecond() - start.0.as_millisecond());
    match took {
        Some(ms) => format!("{size} in {}", act::human_duration(ms)),
        None => size,
    }
}

/// The final line.
fn report(name: &str, status: &BackupStatus, verified: Option<bool>) -> String {
    let mut line = format!("Backup {name} completed: {}", size_and_time(status));
    match (verified, status.verification_seconds) {
        (Some(true), Some(seconds)) => {
            line.push_str(&format!("; verified by a restore in {seconds} s"));
        }
        (Some(true), None) => line.push_str("; verified by a restore"),
        _ => line.push_str("; not verified"),
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn at(s: &str) -> Time {
        Time(s.parse().expect("time"))
    }

    fn backup(status: BackupStatus) -> Backup {
        let mut backup = manifest("pg-1", "pg");
        backup.status = Some(status);
        backup
    }

    #[test]
    fn the_manifest_names_the_database_and_a_default_name_the_time() {
        let now: Timestamp = "2026-11-26T10:02:03Z".parse().expect("time");
        assert_eq!(default_name("pg", now), "pg-20261126100203");
        let manifest = serde_json::to_value(manifest("pg-x", "pg")).expect("json");
        assert_eq!(manifest["kind"], "Backup");
        assert_eq!(manifest["apiVersion"], "tusk.dev/v1");
        assert_eq!(manifest["metadata"]["name"], "pg-x");
        assert_eq!(manifest["spec"]["database"], "pg");
    }

    #[test]
    fn progress_then_size_duration_and_verification() {
        let running = backup(BackupStatus {
            phase: Some(BackupPhase::Running),
            progress: Some("42%".into()),
            bytes: Some(3 * 1024 * 1024),
            ..BackupStatus::default()
        });
        match judge(&running, true) {
            Step::Waiting(line, _) => assert_eq!(line, "Backup pg-1: Running 42% (3.0 MiB)"),
            other => panic!("{other:?}"),
        }
        let completed = BackupStatus {
            phase: Some(BackupPhase::Completed),
            bytes: Some(1536),
            started_at: Some(at("2026-11-26T10:00:00Z")),
            completed_at: Some(at("2026-11-26T10:00:04.2Z")),
            ..BackupStatus::default()
        };
        assert!(matches!(
            judge(&backup(completed.clone()), true),
            Step::Waiting(..)
        ));
        match judge(&backup(completed.clone()), false) {
            Step::Done(line) => {
                assert_eq!(
                    line,
                    "Backup pg-1 completed: 1.5 KiB in 4.2 s; not verified"
                )
            }
            other => panic!("{other:?}"),
        }
        let verified = BackupStatus {
            verified: Some(true),
            verification_seconds: Some(20),
            ..completed.clone()
        };
        match judge(&backup(verified), true) {
            Step::Done(line) => assert_eq!(
                line,
                "Backup pg-1 completed: 1.5 KiB in 4.2 s; verified by a restore in 20 s"
            ),
            other => panic!("{other:?}"),
        }
        let unproven = BackupStatus {
            verified: Some(false),
            ..completed
        };
        assert!(matches!(
            judge(&backup(unproven), true),
            Step::Failed(Error::Failed(_))
        ));
    }

    #[test]
    fn a_failed_backup_is_exit_code_1_with_its_message() {
        let failed = backup(BackupStatus {
            phase: Some(BackupPhase::Failed),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "Failed".into(),
                message: "no space left on device".into(),
                last_transition_time: at("2026-11-26T10:00:00Z"),
                observed_generation: None,
            }],
            ..BackupStatus::default()
        });
        match judge(&failed, false) {
            Step::Failed(error) => {
                assert_eq!(error.exit_code(), 1);
                assert_eq!(
                    error.to_string(),
                    "Backup pg-1 failed: no space left on device"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
