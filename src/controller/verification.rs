//! Backup verification: once a Backup completes and its Database verifies
//! (`spec.backup.verify`, on by default with a schedule), a Job restores it in
//! a throwaway pod ([`crate::resources::verify_job`]); its outcome becomes the
//! Backup's `verified` status and `Verified` condition (with an Event), and the
//! Job goes. The decisions are pure; [`step`] is the shell.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};

use super::Context;
use super::conditions::{self, Desired};
use super::database::restore::location_parts;
use crate::api::status::{BackupPhase, BackupStatus};
use crate::api::v1::{Backup, Database};
use crate::api::{store, validate};
use crate::contract::Verification;
use crate::controller::Error;
use crate::resources::{POSTGRES_CONTAINER, RestoreSource, verify_job, verify_job_name};
use crate::telemetry::metrics::DatabaseLabels;

/// The condition a verification sets on its Backup.
pub const VERIFIED: &str = "Verified";
pub const VERIFYING: &str = "Verifying";
pub const VERIFICATION_FAILED: &str = "VerificationFailed";
const PROVEN: &str = "Verified";

/// How often a running verification is looked at.
const POLL: Duration = Duration::from_secs(5);

/// Whether `backup` is to be verified: completed, not verified yet, and its
/// Database (with the default store filled in) verifies.
pub fn wanted(backup: &Backup, db: Option<&Database>) -> bool {
    let status = backup.status.clone().unwrap_or_default();
    status.phase == Some(BackupPhase::Completed)
        && status.verified.is_none()
        && db
            .and_then(|d| d.spec.backup.as_ref())
            .is_some_and(|b| b.verifies() && b.object_store.is_some())
}

/// What the verification restores: the backup itself, to its end LSN, from
/// the Database's store. `None` when the status lacks the location or LSN.
pub fn source(backup: &Backup, db: &Database) -> Option<RestoreSource> {
    let status = backup.status.as_ref()?;
    let (system, id) = location_parts(status.location.as_deref()?)?;
    Some(RestoreSource {
        store: db.spec.backup.as_ref()?.object_store.clone()?,
        database: backup.spec.database.clone(),
        system: Some(system),
        backup: Some(id),
        target_time: None,
        target_lsn: Some(status.end_lsn.clone()?),
    })
}

/// `status` with the `Verified` condition set to `desired`, the others kept.
fn with_condition(
    status: &BackupStatus,
    desired: Desired,
    generation: Option<i64>,
    now: &Time,
) -> BackupStatus {
    let mut merged: Vec<Condition> =
        conditions::merge(&status.conditions, &[desired], generation, now);
    let mut all: Vec<Condition> = status
        .conditions
        .iter()
        .filter(|c| c.type_ != VERIFIED)
        .cloned()
        .collect();
    all.append(&mut merged);
    BackupStatus {
        conditions: all,
        ..status.clone()
    }
}

/// While the Job runs.
pub fn running(
    status: &BackupStatus,
    job: &str,
    generation: Option<i64>,
    now: &Time,
) -> BackupStatus {
    let desired = Desired::new(
        VERIFIED,
        false,
        VERIFYING,
        format!("Job {job} restores the backup in a throwaway pod to prove it"),
    );
    with_condition(status, desired, generation, now)
}

/// The outcome: what the Job's pod reported, or why there is no report.
pub fn finished(
    status: &BackupStatus,
    outcome: Result<Verification, String>,
    generation: Option<i64>,
    now: &Time,
) -> BackupStatus {
    let (verified, seconds, desired) = match outcome {
        Ok(v) if v.verified => (
            true,
            Some(v.seconds),
            Desired::new(VERIFIED, true, PROVEN, v.message),
        ),
        Ok(v) => (
            false,
            Some(v.seconds),
            Desired::new(VERIFIED, false, VERIFICATION_FAILED, v.message),
        ),
        Err(why) => (
            false,
            None,
            Desired::new(VERIFIED, false, VERIFICATION_FAILED, why),
        ),
    };
    let mut next = with_condition(status, desired, generation, now);
    next.verified = Some(verified);
    next.verified_at = Some(now.clone());
    // Whole seconds suffice for people; rounding never gives 0 for a real run.
    next.verification_seconds = seconds.map(|s| s.ceil() as i64);
    next
}

/// `tusk_backup_last_verified_timestamp_seconds` and
/// `tusk_backup_last_verification_success` from the Backups: per Database,
/// when its newest proven backup was verified, and whether its newest
/// verification proved its backup.
pub fn last_verifications(
    backups: &[std::sync::Arc<Backup>],
) -> (BTreeMap<DatabaseLabels, f64>, BTreeMap<DatabaseLabels, f64>) {
    let mut proven: BTreeMap<DatabaseLabels, f64> = BTreeMap::new();
    let mut newest: BTreeMap<DatabaseLabels, (f64, f64)> = BTreeMap::new();
    for backup in backups {
        let Some(namespace) = backup.namespace() else {
            continue;
        };
        let Some(status) = &backup.status else {
            continue;
        };
        let (Some(verified), Some(at)) = (status.verified, &status.verified_at) else {
            continue;
        };
        let labels = DatabaseLabels {
            namespace,
            database: backup.spec.database.clone(),
        };
        let seconds = at.0.as_millisecond() as f64 / 1000.0;
        if verified {
            let entry = proven.entry(labels.clone()).or_insert(seconds);
            *entry = entry.max(seconds);
        }
        let outcome = if verified { 1.0 } else { 0.0 };
        let entry = newest.entry(labels).or_insert((seconds, outcome));
        if seconds >= entry.0 {
            *entry = (seconds, outcome);
        }
    }
    let success = newest.into_iter().map(|(k, (_, v))| (k, v)).collect();
    (proven, success)
}

/// One verification step for a completed Backup: create the Job, or read its
/// outcome once it ended (then delete it). Returns the status and when to
/// look again.
pub async fn step(
    ctx: &Context,
    backup: &Backup,
    db: &Database,
    status: &BackupStatus,
    now: &Time,
) -> Result<(BackupStatus, Option<Duration>), Error> {
    let namespace = backup.namespace().unwrap_or_default();
    let generation = backup.metadata.generation;
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = verify_job_name(&backup.name_any());
    let Some(job) = jobs
        .get_opt(&name)
        .await
        .map_err(Error::kube("reading the verification Job"))?
    else {
        let db = store::with_default(db, ctx.build.default_store.as_ref());
        let Some(source) = source(backup, &db) else {
            let why = "the Backup's status has no location or end LSN to verify".to_owned();
            return Ok((finished(status, Err(why), generation, now), None));
        };
        // A Database whose spec is invalid builds nothing, this Job included:
        // the verification waits for the spec to be corrected.
        let Ok(model) = validate::validated(&db, &ctx.build.defaults()) else {
            return Ok((status.clone(), Some(POLL)));
        };
        let job = verify_job(&model, backup, &source, &ctx.build);
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(Error::kube("creating the verification Job")(e)),
        }
        return Ok((running(status, &name, generation, now), Some(POLL)));
    };
    let job_status = job.status.clone().unwrap_or_default();
    let ended = job_status.succeeded.unwrap_or(0) > 0 || job_status.failed.unwrap_or(0) > 0;
    if !ended {
        return Ok((running(status, &name, generation, now), Some(POLL)));
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed = pods
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .map_err(Error::kube("listing the verification Job's pod"))?;
    let outcome = outcome_of(&listed.items, &name);
    let next = finished(status, outcome, generation, now);
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match jobs.delete(&name, &background).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(Error::kube("deleting the verification Job")(e)),
    }
    Ok((next, None))
}

/// The verification's report in its pod's termination message.
fn outcome_of(pods: &[Pod], job: &str) -> Result<Verification, String> {
    let Some(terminated) = crate::resources::terminated(pods, POSTGRES_CONTAINER) else {
        return Err(format!(
            "Job {job} ended without a verification report (its pod is gone, or never started)"
        ));
    };
    let message = terminated.message.unwrap_or_default();
    serde_json::from_str::<Verification>(message.trim()).map_err(|_| {
        format!(
            "Job {job} ended ({}, exit code {}) without a verification report: {}",
            terminated.reason.unwrap_or_default(),
            terminated.exit_code,
            message.trim()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::{BackupConfig, BackupSpec, ObjectStore};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::jiff::Timestamp;

    fn completed() -> Backup {
        let mut backup = Backup::new(
            "orders-20261124020000",
            BackupSpec {
                database: "orders".into(),
                target: Default::default(),
            },
        );
        backup.metadata.namespace = Some("shop".into());
        backup.status = Some(BackupStatus {
            phase: Some(BackupPhase::Completed),
            location: Some("s3://b/team/orders/7441/base/20261124T020000Z/".into()),
            end_lsn: Some("0/3000120".into()),
            ..Default::default()
        });
        backup
    }

    fn database(schedule: Option<&str>, verify: Option<bool>) -> Database {
        let mut db = sample_database();
        db.spec.backup = Some(BackupConfig {
            schedule: schedule.map(str::to_owned),
            retention: None,
            object_store: Some(ObjectStore {
                bucket: "b".into(),
                path: Some("team".into()),
                ..Default::default()
            }),
            verify,
        });
        db
    }

    fn now() -> Time {
        Time(Timestamp::from_second(1_800_000_000).expect("a time"))
    }

    #[test]
    fn scheduled_backups_are_verified_by_default_and_once() {
        let backup = completed();
        assert!(wanted(&backup, Some(&database(Some("@daily"), None))));
        assert!(!wanted(&backup, Some(&database(None, None))));
        assert!(wanted(&backup, Some(&database(None, Some(true)))));
        assert!(!wanted(
            &backup,
            Some(&database(Some("@daily"), Some(false)))
        ));
        assert!(!wanted(&backup, None));
        let mut done = backup.clone();
        if let Some(s) = done.status.as_mut() {
            s.verified = Some(false);
        }
        assert!(!wanted(&done, Some(&database(Some("@daily"), None))));
        let source = source(&backup, &database(None, Some(true))).expect("a source");
        assert_eq!(source.database, "orders");
        assert_eq!(source.system.as_deref(), Some("7441"));
        assert_eq!(source.backup.as_deref(), Some("20261124T020000Z"));
        assert_eq!(source.target_lsn.as_deref(), Some("0/3000120"));
    }

    #[test]
    fn the_outcome_sets_verified_and_its_condition_beside_ready() {
        let mut status = completed().status.expect("status");
        status.conditions = conditions::merge(
            &[],
            &[Desired::new("Ready", true, "Completed", "stored")],
            Some(1),
            &now(),
        );
        let running = running(&status, "j", Some(1), &now());
        let types: Vec<&str> = running
            .conditions
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, ["Ready", VERIFIED]);
        assert_eq!(running.verified, None);

        let proven = finished(
            &running,
            Ok(Verification {
                verified: true,
                seconds: 41.2,
                message: "restored".into(),
                ..Default::default()
            }),
            Some(1),
            &now(),
        );
        assert_eq!(proven.verified, Some(true));
        assert_eq!(proven.verification_seconds, Some(42));
        let verified = proven
            .conditions
            .iter()
            .find(|c| c.type_ == VERIFIED)
            .expect("Verified");
        assert_eq!(
            (verified.status.as_str(), verified.reason.as_str()),
            ("True", PROVEN)
        );

        let failed = finished(&running, Err("no report".into()), Some(1), &now());
        assert_eq!(failed.verified, Some(false));
        let verified = failed
            .conditions
            .iter()
            .find(|c| c.type_ == VERIFIED)
            .expect("Verified");
        assert_eq!(verified.reason, VERIFICATION_FAILED);
        assert_eq!(verified.message, "no report");
    }

    #[test]
    fn the_report_is_read_from_the_termination_message() {
        let pod = |message: &str, exit_code: i32| Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: POSTGRES_CONTAINER.into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code,
                            message: Some(message.into()),
                            reason: Some("Error".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let report = r#"{"verified":false,"message":"data.tar.zst does not match its manifest"}"#;
        let outcome = outcome_of(&[pod(report, 1)], "j").expect("a report");
        assert!(!outcome.verified);
        assert!(outcome.message.contains("does not match"));
        let garbled = outcome_of(&[pod("OOMKilled", 137)], "j").expect_err("no report");
        assert!(garbled.contains("exit code 137"), "{garbled}");
        assert!(outcome_of(&[], "j").is_err());
    }

    #[test]
    fn the_newest_verification_decides_success_and_proven_ones_the_time() {
        let at = |seconds: i64, verified: bool| {
            let mut backup = completed();
            if let Some(s) = backup.status.as_mut() {
                s.verified = Some(verified);
                s.verified_at = Some(Time(Timestamp::from_second(seconds).expect("time")));
            }
            std::sync::Arc::new(backup)
        };
        let (proven, success) = last_verifications(&[at(100, true), at(200, false)]);
        let labels = DatabaseLabels {
            namespace: "shop".into(),
            database: "orders".into(),
        };
        assert_eq!(proven.get(&labels), Some(&100.0));
        assert_eq!(success.get(&labels), Some(&0.0));
        let (_, success) = last_verifications(&[at(300, true), at(200, false)]);
        assert_eq!(success.get(&labels), Some(&1.0));
    }
}
