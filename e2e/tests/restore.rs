//! Restores on the cluster: Databases made from another's backups and WAL in
//! the test namespace's S3 server: to a point in time, to the end of the
//! archive, from a deleted Database's final backup by name, from a source
//! that switched its primary (a second timeline, reached through its
//! `.history` file) to the end and to an LSN; backups proven by verification;
//! and the failures (a corrupt backup, for verification and restore alike, a
//! Backup that does not exist, a target past the archive, which downloads
//! nothing) that name their cause and leave the source's objects as they
//! were. The four recovery specs admission refuses are refused on the real
//! API server, each naming its field.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams};
use serde_json::json;
use tusk::api::status::{BackupPhase, DatabasePhase};
use tusk::api::v1::{Backup, Database};
use tusk::resources::POSTGRES_CONTAINER;
use tusk_e2e::store::{archive_all, in_store, spec_with_store, sql_on as on, store_up};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, wait_for, wait_ready,
};

const BACKUP_TIMEOUT: Duration = Duration::from_secs(300);

/// Takes Backup `name` of `db` and waits until it completed.
async fn take_backup(client: &Client, ns: &str, db: &str, name: &str) -> Result<Backup> {
    let manifest = json!({
        "apiVersion": "tusk.dev/v1", "kind": "Backup", "metadata": {"name": name},
        "spec": {"database": db, "target": "primary"}
    });
    apply_value(
        client,
        Some(ns),
        manifest,
        &PatchParams::apply(tusk_e2e::MANAGER),
    )
    .await?;
    let backups: Api<Backup> = Api::namespaced(client.clone(), ns);
    let done = wait_for(&backups, name, BACKUP_TIMEOUT, |b| {
        matches!(
            b.status.as_ref().and_then(|s| s.phase),
            Some(BackupPhase::Completed | BackupPhase::Failed)
        )
    })
    .await?;
    let phase = done.status.as_ref().and_then(|s| s.phase);
    if phase != Some(BackupPhase::Completed) {
        return Err(format!("Backup {name} did not complete: {:?}", done.status).into());
    }
    Ok(done)
}

async fn count(client: &Client, ns: &str, db: &str, service: &str) -> Result<i64> {
    Ok(on(client, ns, db, service, "SELECT count(*) FROM t")
        .await?
        .trim()
        .parse()?)
}

/// The source's objects: every file of its prefix in the store, with a checksum.
async fn source_objects(client: &Client, ns: &str, db: &str) -> Result<String> {
    in_store(
        client,
        ns,
        &format!("cd /data/buckets/tusk && find e2e/{db} -type f | sort | xargs md5sum"),
    )
    .await
}

fn restored(
    instances: i32,
    endpoint: &str,
    bucket: &str,
    recovery: serde_json::Value,
) -> serde_json::Value {
    let mut spec = spec_with_store(instances, endpoint, bucket);
    spec["bootstrap"] = json!({"recovery": recovery});
    spec
}

/// (a) rows, a Backup, rows, the time T, rows: a Database recovered from the
/// Backup to T has exactly the rows committed before T, and its streaming
/// replica too; (b) one recovered from the source Database to the end of
/// the archive has every row, those after the base backup included.
#[tokio::test]
async fn a_database_recovers_to_a_time_and_to_the_end_of_the_archive() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-restore",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            let mut source = spec_with_store(1, &endpoint, &bucket);
            source["backup"]["verify"] = json!(true);
            apply_value(&client, Some(&ns), database("pg", source), &apply).await?;
            wait_ready(&client, &ns, "pg", 1).await?;
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "CREATE TABLE t (i int); INSERT INTO t SELECT generate_series(1, 1000)",
            )
            .await?;
            take_backup(&client, &ns, "pg", "b1").await?;
            // Proven by a throwaway restore, whose Job then goes.
            let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
            let proven = wait_for(&backups, "b1", BACKUP_TIMEOUT, |b| {
                b.status.as_ref().is_some_and(|s| s.verified.is_some())
            })
            .await?;
            let status = proven.status.unwrap_or_default();
            let verified = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Verified")
                .cloned();
            assert_eq!(status.verified, Some(true), "{verified:?}");
            assert!(status.verified_at.is_some() && status.verification_seconds.is_some());
            let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
            assert!(
                jobs.get_opt("b1-verify").await?.is_none(),
                "the verification Job stays"
            );
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "INSERT INTO t SELECT generate_series(1001, 2000)",
            )
            .await?;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let target = on(
                &client,
                &ns,
                "pg",
                "rw",
                "SELECT to_json(clock_timestamp())#>>'{}'",
            )
            .await?;
            let target = target.trim().to_owned();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "INSERT INTO t SELECT generate_series(2001, 3000)",
            )
            .await?;
            archive_all(&client, &ns, "pg").await?;
            let before = source_objects(&client, &ns, "pg").await?;

            let to_t = restored(
                2,
                &endpoint,
                &bucket,
                json!({"backup": "b1", "targetTime": target}),
            );
            apply_value(&client, Some(&ns), database("at-t", to_t), &apply).await?;
            let to_end = restored(1, &endpoint, &bucket, json!({"source": "pg"}));
            apply_value(&client, Some(&ns), database("at-end", to_end), &apply).await?;

            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            wait_for(&databases, "at-t", Duration::from_secs(120), |db| {
                db.status
                    .as_ref()
                    .is_some_and(|s| s.phase == Some(DatabasePhase::Restoring))
            })
            .await?;
            wait_ready(&client, &ns, "at-t", 2).await?;
            assert_eq!(
                count(&client, &ns, "at-t", "rw").await?,
                2000,
                "rows at {target}"
            );
            assert_eq!(
                count(&client, &ns, "at-t", "ro").await?,
                2000,
                "rows on the replica"
            );
            let timeline = on(
                &client,
                &ns,
                "at-t",
                "rw",
                "SELECT timeline_id FROM pg_control_checkpoint()",
            )
            .await?;
            assert!(
                timeline.trim().parse::<u32>()? >= 2,
                "a new timeline: {timeline}"
            );
            on(&client, &ns, "at-t", "rw", "INSERT INTO t VALUES (-1)").await?;

            wait_ready(&client, &ns, "at-end", 1).await?;
            assert_eq!(
                count(&client, &ns, "at-end", "rw").await?,
                3000,
                "rows at the end of the archive"
            );

            // The source's objects were only read; pg itself still serves.
            assert_eq!(source_objects(&client, &ns, "pg").await?, before);
            assert_eq!(count(&client, &ns, "pg", "rw").await?, 3000);
            Ok(())
        },
    )
    .await;
}

/// (d) a Database is deleted (its final backup taken) and a new one
/// recovered from the store by its name has every committed row; (e) a
/// corrupt backup object fails the restore naming it, a Backup that does not
/// exist is named, and the source's objects stay as they were.
#[tokio::test]
async fn a_deleted_database_comes_back_by_name_and_failures_are_named() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-restore-gone",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            apply_value(
                &client,
                Some(&ns),
                database("pg", spec_with_store(1, &endpoint, &bucket)),
                &apply,
            )
            .await?;
            wait_ready(&client, &ns, "pg", 1).await?;
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "CREATE TABLE t (i int); INSERT INTO t SELECT generate_series(1, 500)",
            )
            .await?;
            let b1 = take_backup(&client, &ns, "pg", "b1").await?;
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "INSERT INTO t SELECT generate_series(501, 600)",
            )
            .await?;

            // Corrupt b1's data in the store: one byte in the middle.
            let location = b1
                .status
                .and_then(|s| s.location)
                .ok_or("b1 has no location")?;
            let key = location
                .strip_prefix(&format!("s3://{bucket}/"))
                .ok_or("a location in the bucket")?;
            in_store(
                &client,
                &ns,
                &format!(
                    "f=/data/buckets/tusk/{key}data.tar.zst; n=$(( $(wc -c < $f) / 2 )); \
             printf '\\377' | dd of=$f bs=1 seek=$n conv=notrunc 2>/dev/null"
                ),
            )
            .await?;

            // Verification, turned on now, fails on it, naming the cause.
            let verify = json!({"spec": {"backup": {"verify": true}}});
            let merge = PatchParams::default();
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            databases
                .patch("pg", &merge, &Patch::Merge(&verify))
                .await?;
            let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
            let poke = json!({"metadata": {"annotations": {"e2e/poke": "verify"}}});
            backups.patch("b1", &merge, &Patch::Merge(&poke)).await?;
            let refuted = wait_for(&backups, "b1", BACKUP_TIMEOUT, |b| {
                b.status.as_ref().is_some_and(|s| s.verified.is_some())
            })
            .await?;
            let status = refuted.status.unwrap_or_default();
            let condition = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Verified")
                .cloned()
                .ok_or("b1 has no Verified condition")?;
            assert_eq!(status.verified, Some(false), "{condition:?}");
            assert_eq!(condition.reason, "VerificationFailed");
            let named = condition.message.contains("does not match its manifest")
                || condition.message.contains("checksum");
            assert!(
                named && condition.message.contains("data.tar.zst"),
                "{}",
                condition.message
            );

            databases.delete("pg", &DeleteParams::default()).await?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
            while databases.get_opt("pg").await?.is_some() {
                if tokio::time::Instant::now() > deadline {
                    return Err("pg was not deleted (its final backup) in 300 s".into());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let before = source_objects(&client, &ns, "pg").await?;

            let by_name = restored(1, &endpoint, &bucket, json!({"sourceName": "pg"}));
            apply_value(&client, Some(&ns), database("back", by_name), &apply).await?;
            let corrupt = restored(1, &endpoint, &bucket, json!({"backup": "b1"}));
            apply_value(&client, Some(&ns), database("broken", corrupt), &apply).await?;
            let missing = restored(1, &endpoint, &bucket, json!({"backup": "nope"}));
            apply_value(&client, Some(&ns), database("missing", missing), &apply).await?;

            let failed_with = |reason: &'static str| {
                move |db: &Database| {
                    db.status.as_ref().is_some_and(|s| {
                        s.phase == Some(DatabasePhase::Failed)
                            && s.conditions
                                .iter()
                                .any(|c| c.type_ == "Ready" && c.reason == reason)
                    })
                }
            };
            let missing = wait_for(
                &databases,
                "missing",
                Duration::from_secs(120),
                failed_with("RestoreSourceInvalid"),
            )
            .await?;
            let message = ready_message(&missing);
            assert!(
                message.starts_with("spec.bootstrap.recovery.backup: Backup nope"),
                "{message}"
            );

            wait_ready(&client, &ns, "back", 1).await?;
            assert_eq!(
                count(&client, &ns, "back", "rw").await?,
                600,
                "rows of the deleted Database"
            );

            let broken = wait_for(
                &databases,
                "broken",
                Duration::from_secs(300),
                failed_with("RestoreFailed"),
            )
            .await?;
            let message = ready_message(&broken);
            // Found by the store's checksum as it streams, or by the manifest's.
            let named =
                message.contains("does not match its manifest") || message.contains("checksum");
            assert!(named && message.contains("data.tar.zst"), "{message}");

            assert_eq!(
                source_objects(&client, &ns, "pg").await?,
                before,
                "the source's objects changed"
            );
            Ok(())
        },
    )
    .await;
}

fn ready_message(db: &Database) -> String {
    db.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The timeline `db`'s primary writes on (the first 8 hex digits of its
/// current WAL file's name).
async fn timeline(client: &Client, ns: &str, db: &str) -> Result<u32> {
    let file = on(
        client,
        ns,
        db,
        "rw",
        "SELECT pg_walfile_name(pg_current_wal_lsn())",
    )
    .await?;
    let file = file.trim();
    let hex = file
        .get(..8)
        .ok_or_else(|| format!("a WAL file name: {file:?}"))?;
    Ok(u32::from_str_radix(hex, 16)?)
}

/// The source switches its primary (a promotion: timeline 2 and its
/// `.history` file, archived) after Backup b1 of timeline 1. (g) A Database
/// recovered from b1 to an LSN written on timeline 2 follows the history
/// across the switch and has exactly the rows before that LSN; (h) one
/// recovered from the source to the end of the archive has every row; (i) a
/// target past the archive is refused naming spec.bootstrap.recovery.targetLsn
/// before anything is downloaded.
#[tokio::test]
async fn a_source_that_switched_primaries_restores_along_its_history_and_to_an_lsn() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-restore-tl",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            let source = spec_with_store(2, &endpoint, &bucket);
            apply_value(&client, Some(&ns), database("pg", source), &apply).await?;
            let ready = wait_ready(&client, &ns, "pg", 2).await?;
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "CREATE TABLE t (i int); INSERT INTO t SELECT generate_series(1, 1000)",
            )
            .await?;
            take_backup(&client, &ns, "pg", "b1").await?;
            assert_eq!(
                timeline(&client, &ns, "pg").await?,
                1,
                "b1 is of timeline 1"
            );
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "INSERT INTO t SELECT generate_series(1001, 1500)",
            )
            .await?;

            // A switchover promotes the replica: timeline 2.
            let old = ready
                .status
                .as_ref()
                .and_then(|s| s.current_primary.clone())
                .ok_or("pg has no current primary")?;
            let new = if old == "pg-1" { "pg-2" } else { "pg-1" };
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            let switch = json!({"spec": {"primary": new}});
            databases
                .patch("pg", &PatchParams::default(), &Patch::Merge(&switch))
                .await?;
            wait_for(&databases, "pg", Duration::from_secs(300), |db| {
                db.status.as_ref().is_some_and(|s| {
                    s.current_primary.as_deref() == Some(new)
                        && s.phase == Some(DatabasePhase::Ready)
                        && s.observed_generation == db.metadata.generation
                        && s.ready_instances == Some(2)
                })
            })
            .await?;
            let switched = timeline(&client, &ns, "pg").await?;
            assert!(
                switched >= 2,
                "the promotion made a new timeline: {switched}"
            );
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "INSERT INTO t SELECT generate_series(1501, 2000)",
            )
            .await?;
            let lsn = on(&client, &ns, "pg", "rw", "SELECT pg_current_wal_lsn()").await?;
            let lsn = lsn.trim().to_owned();
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "INSERT INTO t SELECT generate_series(2001, 3000)",
            )
            .await?;
            archive_all(&client, &ns, "pg").await?;
            let history = format!("{switched:08X}.history");
            let stored = in_store(
                &client,
                &ns,
                &format!("find /data/buckets/tusk/e2e/pg -name '{history}*'"),
            )
            .await?;
            assert!(
                stored.contains(&history),
                "{history} is archived: {stored:?}"
            );

            let to_lsn = restored(
                1,
                &endpoint,
                &bucket,
                json!({"backup": "b1", "targetLsn": lsn}),
            );
            apply_value(&client, Some(&ns), database("at-lsn", to_lsn), &apply).await?;
            let to_end = restored(1, &endpoint, &bucket, json!({"source": "pg"}));
            apply_value(&client, Some(&ns), database("at-end", to_end), &apply).await?;
            let too_far = restored(
                1,
                &endpoint,
                &bucket,
                json!({"source": "pg", "targetLsn": "FF/0"}),
            );
            apply_value(&client, Some(&ns), database("too-far", too_far), &apply).await?;

            wait_ready(&client, &ns, "at-lsn", 1).await?;
            assert_eq!(
                count(&client, &ns, "at-lsn", "rw").await?,
                2000,
                "rows up to LSN {lsn} on timeline {switched}"
            );
            assert!(
                timeline(&client, &ns, "at-lsn").await? > switched,
                "promoted past the source's timeline"
            );
            wait_ready(&client, &ns, "at-end", 1).await?;
            assert_eq!(
                count(&client, &ns, "at-end", "rw").await?,
                3000,
                "rows at the end of timeline {switched}'s archive"
            );

            let refused = wait_for(&databases, "too-far", Duration::from_secs(180), |db| {
                db.status.as_ref().is_some_and(|s| {
                    s.phase == Some(DatabasePhase::Failed)
                        && s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.reason == "RestoreFailed")
                })
            })
            .await?;
            let message = ready_message(&refused);
            assert!(
                message.contains("spec.bootstrap.recovery.targetLsn: the target LSN FF/0")
                    && message.contains("past the end of the archive"),
                "{message}"
            );
            // Nothing downloaded: the instance manager never began a download
            // (it logs the choice before one and the unpacking after), and the
            // operator never reported one.
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let log = pods
                .logs(
                    "too-far-1",
                    &LogParams {
                        container: Some(POSTGRES_CONTAINER.to_owned()),
                        ..LogParams::default()
                    },
                )
                .await?;
            assert!(
                log.contains("past the end of the archive"),
                "the refusal is in the instance's log: {log}"
            );
            for started in ["\"restoring\"", "restoring source", "base backup unpacked"] {
                assert!(!log.contains(started), "{started:?} in the log: {log}");
            }
            let events: Api<Event> = Api::namespaced(client.clone(), &ns);
            let downloads: Vec<String> = events
                .list(&ListParams::default().fields("involvedObject.name=too-far"))
                .await?
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("RestoreDownloading"))
                .filter_map(|e| e.message)
                .collect();
            assert!(
                downloads.is_empty(),
                "a download was reported: {downloads:?}"
            );
            Ok(())
        },
    )
    .await;
}

/// The four recovery specs admission refuses, on the real API server (the
/// schema's date-time format, then the webhook): each refusal names the
/// field, and no Database is created. A well-formed recovery passes (a dry
/// run), so the refusals are not of every recovery.
#[tokio::test]
async fn the_recovery_specs_admission_refuses_name_their_field() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-restore-refused",
        Duration::from_secs(120),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let store = json!({
                "bucket": "tusk", "endpoint": "http://nowhere.invalid:7070",
                "credentialsSecret": "s3-creds"
            });
            let spec = |recovery: serde_json::Value| {
                json!({
                    "version": "17", "instances": 1, "storage": {"size": "1Gi"},
                    "bootstrap": {"recovery": recovery}
                })
            };
            let control = spec(json!({"sourceName": "orders", "objectStore": store}));
            apply_value(
                &client,
                Some(&ns),
                database("control", control),
                &apply.clone().dry_run(),
            )
            .await?;

            // (name, recovery, the field named, why in any of these words). The
            // schema's rules (CEL, the date-time format) answer before the
            // webhook, which words the same rules its own way.
            let cases: [(&str, serde_json::Value, &str, &[&str]); 6] = [
                (
                    "not-a-time",
                    json!({"sourceName": "orders", "targetTime": "yesterday"}),
                    "spec.bootstrap.recovery.targetTime",
                    &["date-time", "is not an RFC 3339 time"],
                ),
                (
                    "no-offset",
                    json!({"sourceName": "orders", "targetTime": "2026-11-22T10:00:00"}),
                    "spec.bootstrap.recovery.targetTime",
                    &["date-time", "is not an RFC 3339 time"],
                ),
                (
                    "no-source",
                    json!({"targetLsn": "0/3000000"}),
                    "spec.bootstrap.recovery",
                    &["must name exactly one of backup, source or sourceName"],
                ),
                (
                    "two-sources",
                    json!({"source": "orders", "sourceName": "orders"}),
                    "spec.bootstrap.recovery",
                    &["must name exactly one of backup, source or sourceName"],
                ),
                (
                    "store-and-source",
                    json!({"source": "orders", "objectStore": store}),
                    "spec.bootstrap.recovery.objectStore",
                    &["is not used with source"],
                ),
                (
                    "time-and-lsn",
                    json!({
                        "sourceName": "orders", "targetTime": "2026-11-22T10:00:00Z",
                        "targetLsn": "0/3000000"
                    }),
                    "spec.bootstrap.recovery",
                    &["may set targetTime or targetLsn, not both"],
                ),
            ];
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            for (name, recovery, field, why) in cases {
                let refused =
                    apply_value(&client, Some(&ns), database(name, spec(recovery)), &apply)
                        .await
                        .err()
                        .ok_or_else(|| format!("{name} was admitted"))?;
                let message = refused.to_string();
                println!("{name}: {message}");
                assert!(
                    message.contains(field) && why.iter().any(|w| message.contains(w)),
                    "{name}: {message}"
                );
                assert!(databases.get_opt(name).await?.is_none(), "{name} exists");
            }
            Ok(())
        },
    )
    .await;
}
