//! Backups on the cluster: an S3 server in the test's namespace
//! (`e2e/objectstore up`), a Database archiving its WAL there, and Backup
//! objects taken by its instances: a standby's by default, the primary's
//! when asked, one at a time; schedules and retention, a store outage, the
//! final backup of a deletion, and the operator's default store.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tusk::api::status::BackupPhase;
use tusk::api::v1::{Backup, Database};
use tusk::backup::manifest::{Manifest, backup_id};
use tusk::contract::Lsn;
use tusk::lifecycle::SKIP_FINAL_BACKUP;
use tusk::objectstore::Layout;
use tusk_e2e::store::{in_store, objectstore_async, spec_with_store, store_up, superuser_password};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, sql, wait_for, wait_ready,
};

fn backup(name: &str, target: Option<&str>) -> serde_json::Value {
    let mut spec = json!({"database": "pg"});
    if let Some(target) = target {
        spec["target"] = json!(target);
    }
    json!({"apiVersion": "tusk.dev/v1", "kind": "Backup", "metadata": {"name": name}, "spec": spec})
}

fn finished(b: &Backup) -> bool {
    matches!(
        b.status.as_ref().and_then(|s| s.phase),
        Some(BackupPhase::Completed | BackupPhase::Failed)
    )
}

#[tokio::test]
async fn backups_complete_from_a_standby_and_the_primary_one_at_a_time() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("e2e-backups", Duration::from_secs(900), |client, ns| async move {
        let apply = PatchParams::apply(tusk_e2e::MANAGER);
        let (endpoint, bucket) = store_up(&ns).await?;
        let spec = spec_with_store(2, &endpoint, &bucket);
        apply_value(&client, Some(&ns), database("pg", spec), &apply).await?;
        wait_ready(&client, &ns, "pg", 2).await?;
        let password = superuser_password(&client, &ns, "pg").await?;
        let host = format!("pg-rw.{ns}.svc");
        sql(&client, &ns, &host, &password, "postgres",
            "CREATE TABLE t AS SELECT i, md5(i::text) AS h FROM generate_series(1, 100000) AS i").await?;

        // Two at once: the second waits for the first.
        let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
        apply_value(&client, Some(&ns), backup("first", None), &apply).await?;
        apply_value(&client, Some(&ns), backup("second", Some("primary")), &apply).await?;
        let first = wait_for(&backups, "first", Duration::from_secs(300), finished).await?;
        let second = wait_for(&backups, "second", Duration::from_secs(300), finished).await?;

        for (b, instance, standby) in [(&first, "pg-2", true), (&second, "pg-1", false)] {
            let status = b.status.clone().ok_or("no status")?;
            assert_eq!(status.phase, Some(BackupPhase::Completed), "{}: {status:?}", b.name_any());
            assert_eq!(status.instance.as_deref(), Some(instance), "{} ran on the wrong instance (standby: {standby})", b.name_any());
            assert!(status.bytes.unwrap_or(0) > 0, "{status:?}");
            assert!(status.begin_lsn.is_some() && status.end_lsn.is_some(), "{status:?}");
            assert!(status.started_at.is_some() && status.completed_at.is_some());
            let location = status.location.clone().unwrap_or_default();
            assert!(location.starts_with(&format!("s3://{bucket}/e2e/pg/")), "{location}");
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready").ok_or("no Ready")?;
            assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Completed"));
        }
        // One at a time: the second started only once the first had finished.
        let first_done = first.status.as_ref().and_then(|s| s.completed_at.clone()).ok_or("no completedAt")?;
        let second_start = second.status.as_ref().and_then(|s| s.started_at.clone()).ok_or("no startedAt")?;
        assert!(second_start.0 >= first_done.0, "the second started at {second_start:?}, before the first completed at {first_done:?}");

        // WAL archiving works and nothing failed.
        let archiver = sql(&client, &ns, &host, &password, "postgres",
            "SELECT archived_count > 0, failed_count FROM pg_stat_archiver").await?;
        assert_eq!(archiver, "t|0", "pg_stat_archiver: {archiver}");
        Ok(())
    })
    .await;
}

/// Writes `bytes` at `key` of bucket `tusk` in the store of `ns`.
async fn plant(client: &Client, ns: &str, key: &str, bytes: &[u8]) -> Result<()> {
    let path = format!("/data/buckets/tusk/{key}");
    let dir = path.rsplit_once('/').map(|(d, _)| d).unwrap_or("/");
    let encoded = base64_encode(bytes);
    in_store(
        client,
        ns,
        &format!("mkdir -p '{dir}' && echo '{encoded}' | base64 -d > '{path}'"),
    )
    .await?;
    Ok(())
}

fn base64_encode(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Whether `key` exists in bucket `tusk` of the store of `ns`.
async fn stored(client: &Client, ns: &str, key: &str) -> Result<bool> {
    let answer = in_store(
        client,
        ns,
        &format!("test -f '/data/buckets/tusk/{key}' && echo yes || echo no"),
    )
    .await?;
    Ok(answer.trim() == "yes")
}

/// A completed backup's manifest from long ago, for retention to judge.
fn old_manifest(id: &str, system: u64, completed: k8s_openapi::jiff::Timestamp) -> Vec<u8> {
    Manifest {
        format: tusk::backup::manifest::FORMAT,
        id: id.to_owned(),
        backup: format!("planted-{id}"),
        database: "pg".into(),
        instance: "pg-1".into(),
        from_standby: false,
        system_identifier: system,
        pg_version: 170_000,
        timeline: 1,
        begin_lsn: Lsn(0x0100_0028),
        end_lsn: Lsn(0x0100_0100),
        begin_wal: "000000010000000000000001".into(),
        end_wal: "000000010000000000000001".into(),
        started_at: completed,
        completed_at: completed,
        raw_bytes: 1,
        stored_bytes: 1,
        sha256: "0".repeat(64),
        files: 1,
    }
    .to_json()
}

fn phase(b: &Backup) -> Option<BackupPhase> {
    b.status.as_ref().and_then(|s| s.phase)
}

#[tokio::test]
async fn a_schedule_creates_backups_and_retention_prunes_only_what_it_may() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-schedule",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            let mut spec = spec_with_store(1, &endpoint, &bucket);
            spec["backup"]["schedule"] = json!("* * * * *");
            spec["backup"]["retention"] = json!("1h");
            apply_value(&client, Some(&ns), database("pg", spec), &apply).await?;
            wait_ready(&client, &ns, "pg", 1).await?;
            let password = superuser_password(&client, &ns, "pg").await?;
            let host = format!("pg-rw.{ns}.svc");
            let system: u64 = sql(
                &client,
                &ns,
                &host,
                &password,
                "postgres",
                "SELECT system_identifier FROM pg_control_system()",
            )
            .await?
            .trim()
            .parse()?;

            // Two backups from hours ago: the one of 3h falls out of the 1h
            // window; the one of 2h is the base the window's first hour replays
            // from, so it stays. Another system's backup is never touched.
            let layout = Layout::new(Some("e2e"), "pg", system);
            let now = k8s_openapi::jiff::Timestamp::now();
            let hours = |h: i64| now - k8s_openapi::jiff::SignedDuration::from_hours(h);
            let (gone_id, base_id) = (backup_id(hours(3)), backup_id(hours(2)));
            for (id, at) in [(&gone_id, hours(3)), (&base_id, hours(2))] {
                plant(
                    &client,
                    &ns,
                    &layout.backup_manifest_key(id),
                    &old_manifest(id, system, at),
                )
                .await?;
                plant(&client, &ns, &layout.backup_data_key(id), b"data").await?;
            }
            let other = Layout::new(Some("e2e"), "pg", system ^ 1);
            let other_key = other.backup_manifest_key(&gone_id);
            plant(
                &client,
                &ns,
                &other_key,
                &old_manifest(&gone_id, system ^ 1, hours(3)),
            )
            .await?;

            // The schedule makes Backups named for their run, owned by the Database.
            let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
            let completed = loop {
                let all = backups.list(&ListParams::default()).await?.items;
                let done: Vec<Backup> = all
                    .into_iter()
                    .filter(|b| {
                        phase(b) == Some(BackupPhase::Completed) && b.name_any().starts_with("pg-")
                    })
                    .collect();
                if done.len() >= 2 {
                    break done;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!(
                        "fewer than two scheduled backups completed in 5 minutes: {done:?}"
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            };
            for b in &completed {
                let name = b.name_any();
                assert_eq!(
                    name.len(),
                    "pg-".len() + 14,
                    "{name} is not <db>-<yyyymmddhhmmss>"
                );
                let owner = b.owner_references().first().ok_or("no owner")?;
                assert_eq!(
                    (owner.kind.as_str(), owner.name.as_str()),
                    ("Database", "pg")
                );
            }
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            let db = wait_for(&databases, "pg", Duration::from_secs(60), |db| {
                db.status
                    .as_ref()
                    .and_then(|s| s.last_backup.as_ref())
                    .is_some()
            })
            .await?;
            let last = db
                .status
                .and_then(|s| s.last_backup)
                .ok_or("no lastBackup")?;
            assert!(
                completed.iter().any(|b| b.name_any() == last.name),
                "lastBackup {last:?} is not one of the completed ones"
            );

            // Retention ran after the new backups: only the backup outside the
            // window and not needed as a base went.
            let gone_key = layout.backup_manifest_key(&gone_id);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
            while stored(&client, &ns, &gone_key).await? {
                if tokio::time::Instant::now() > deadline {
                    return Err(
                        format!("{gone_key} is still there 3 minutes after the backups").into(),
                    );
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            assert!(
                !stored(&client, &ns, &layout.backup_data_key(&gone_id)).await?,
                "its data went too"
            );
            assert!(
                stored(&client, &ns, &layout.backup_manifest_key(&base_id)).await?,
                "the base of the window was removed"
            );
            assert!(
                stored(&client, &ns, &other_key).await?,
                "another system's backup was touched"
            );
            for b in &completed {
                let location = b
                    .status
                    .as_ref()
                    .and_then(|s| s.location.clone())
                    .ok_or("no location")?;
                let id = location
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .ok_or("no id")?
                    .to_owned();
                assert!(
                    stored(&client, &ns, &layout.backup_manifest_key(&id)).await?,
                    "{} was pruned inside the window",
                    b.name_any()
                );
            }
            Ok(())
        },
    )
    .await;
}

/// WAL segments whose `.zst` the store holds for `system`, by name.
async fn archived_wal(client: &Client, ns: &str, layout: &Layout) -> Result<Vec<String>> {
    let dir = format!("/data/buckets/tusk/{}", layout.wal_prefix());
    let listing = in_store(client, ns, &format!("find '{dir}' -type f 2>/dev/null")).await?;
    Ok(listing
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .filter_map(|f| f.strip_suffix(".zst"))
        .filter(|f| f.len() == 24)
        .map(str::to_owned)
        .collect())
}

fn backup_healthy(db: &Database) -> Option<(String, String, String)> {
    db.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "BackupHealthy")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_store_outage_loses_no_wal_and_archiving_catches_up() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("e2e-outage", Duration::from_secs(900), |client, ns| async move {
        let apply = PatchParams::apply(tusk_e2e::MANAGER);
        let (endpoint, bucket) = store_up(&ns).await?;
        let spec = spec_with_store(1, &endpoint, &bucket);
        apply_value(&client, Some(&ns), database("pg", spec), &apply).await?;
        wait_ready(&client, &ns, "pg", 1).await?;
        let password = superuser_password(&client, &ns, "pg").await?;
        let host = format!("pg-rw.{ns}.svc");
        let system: u64 = sql(&client, &ns, &host, &password, "postgres",
            "SELECT system_identifier FROM pg_control_system()").await?.trim().parse()?;
        let layout = Layout::new(Some("e2e"), "pg", system);
        let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
        wait_for(&databases, "pg", Duration::from_secs(120), |db| {
            backup_healthy(db).is_some_and(|(status, _, _)| status == "True")
        }).await?;

        // 60 s without the store, writing and closing WAL segments meanwhile.
        objectstore_async(&["stop", &ns]).await?;
        let outage = tokio::time::Instant::now();
        let mut written = Vec::new();
        sql(&client, &ns, &host, &password, "postgres", "CREATE TABLE t (i int, at timestamptz DEFAULT now())").await?;
        for i in 0..4 {
            let segment = sql(&client, &ns, &host, &password, "postgres", &format!(
                "INSERT INTO t (i) SELECT generate_series(1, 1000) + {i} * 1000; \
                 SELECT pg_walfile_name(pg_current_wal_lsn()); SELECT pg_switch_wal()")).await?;
            let is_segment = |l: &&str| l.len() == 24 && l.bytes().all(|b| b.is_ascii_hexdigit());
            written.extend(segment.lines().find(is_segment).map(str::to_owned));
        }
        let failing = wait_for(&databases, "pg", Duration::from_secs(120), |db| {
            backup_healthy(db).is_some_and(|(status, reason, _)| status == "False" && reason == "ArchivingFailing")
        }).await?;
        let (_, _, message) = backup_healthy(&failing).ok_or("no BackupHealthy")?;
        assert!(message.contains(&bucket), "the condition does not name the store: {message}");
        let during = sql(&client, &ns, &host, &password, "postgres",
            "SELECT failed_count > 0, (SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready') > 0 FROM pg_stat_archiver").await?;
        assert_eq!(written.len(), 4, "four segments closed during the outage: {written:?}");
        assert_eq!(during.trim(), "t|t", "PostgreSQL keeps the WAL it could not archive");
        let rest = Duration::from_secs(60).saturating_sub(outage.elapsed());
        tokio::time::sleep(rest).await;
        objectstore_async(&["start", &ns]).await?;

        // Archiving catches up: every segment written during the outage
        // reaches the store, and the condition turns healthy.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            let archived = archived_wal(&client, &ns, &layout).await?;
            let missing: Vec<&String> = written.iter().filter(|w| !archived.contains(w)).collect();
            if missing.is_empty() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("not archived 3 minutes after the store came back: {missing:?}").into());
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        wait_for(&databases, "pg", Duration::from_secs(120), |db| {
            backup_healthy(db).is_some_and(|(status, _, _)| status == "True")
        }).await?;
        let rows = sql(&client, &ns, &host, &password, "postgres", "SELECT count(*) FROM t").await?;
        assert_eq!(rows.trim(), "4000");
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_database_leaves_a_final_backup_or_waits_until_told_to_skip() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-final",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            for name in ["pg", "held"] {
                let spec = spec_with_store(1, &endpoint, &bucket);
                apply_value(&client, Some(&ns), database(name, spec), &apply).await?;
            }
            wait_ready(&client, &ns, "pg", 1).await?;
            wait_ready(&client, &ns, "held", 1).await?;
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);

            // With the store up: the deletion takes a final backup, then goes.
            databases.delete("pg", &DeleteParams::default()).await?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
            while databases.get_opt("pg").await?.is_some() {
                if tokio::time::Instant::now() > deadline {
                    return Err("pg was not released within 5 minutes of its deletion".into());
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            let finals: Vec<Backup> = backups
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|b| b.spec.database == "pg" && b.name_any().starts_with("pg-final-"))
                .collect();
            assert_eq!(finals.len(), 1, "{finals:?}");
            let status = finals[0].status.clone().ok_or("no status")?;
            assert_eq!(status.phase, Some(BackupPhase::Completed), "{status:?}");
            let location = status.location.ok_or("no location")?;
            let key = location
                .strip_prefix(&format!("s3://{bucket}/"))
                .ok_or("another bucket")?;
            assert!(
                stored(&client, &ns, &format!("{key}manifest.json")).await?,
                "no manifest at {location}"
            );

            // With the store down, the deletion waits and says how to go on;
            // the annotation lets it go without a final backup. The proof
            // that Tusk has decided is its verdict on the failed backup
            // (FinalBackupFailed); until then, and then, it must still hold.
            objectstore_async(&["stop", &ns]).await?;
            databases.delete("held", &DeleteParams::default()).await?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
            let mut last = String::new();
            let held = loop {
                let Some(db) = databases.get_opt("held").await? else {
                    return Err(
                        format!("released without its final backup; last seen: {last}").into(),
                    );
                };
                let failed = db.status.as_ref().is_some_and(|s| {
                    s.phase == Some(tusk::api::status::DatabasePhase::Deleting)
                        && s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.reason == "FinalBackupFailed")
                });
                if failed {
                    break db;
                }
                last = format!("{:?}", db.status);
                if tokio::time::Instant::now() > deadline {
                    return Err(
                        format!("the failed final backup was never reported: {last}").into(),
                    );
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            };
            let message = held
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.message.clone())
                .unwrap_or_default();
            assert!(message.contains(SKIP_FINAL_BACKUP), "{message}");
            let still = databases.get_opt("held").await?;
            assert!(
                still.is_some_and(|db| db.finalizers().iter().any(|f| f == "tusk.dev/cleanup")),
                "released after its final backup failed"
            );
            let patch = json!({"metadata": {"annotations": {SKIP_FINAL_BACKUP: "true"}}});
            databases
                .patch("held", &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while databases.get_opt("held").await?.is_some() {
                if tokio::time::Instant::now() > deadline {
                    return Err("held was not released after the skip annotation".into());
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Ok(())
        },
    )
    .await;
}

/// The shared store the e2e operator is installed with as its default
/// (e2e/values-local.yaml): up in its own namespace, kept for other users.
const DEFAULT_STORE_NS: &str = "tusk-objectstore";

#[tokio::test]
async fn the_seed_style_v1alpha1_spec_is_backed_up_to_the_default_store() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("e2e-default-store", Duration::from_secs(600), |client, ns| async move {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let wanted = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEFAULT_STORE_NS}});
        namespaces.patch(DEFAULT_STORE_NS, &PatchParams::apply(tusk_e2e::MANAGER), &Patch::Apply(&wanted)).await?;
        store_up(DEFAULT_STORE_NS).await?;
        objectstore_async(&["creds", DEFAULT_STORE_NS, &ns]).await?;
        let seed = json!({
            "apiVersion": "tusk.dev/v1alpha1", "kind": "Database", "metadata": {"name": "pg"},
            "spec": {"version": "17", "replicas": 1, "storageSize": "1Gi", "backupSchedule": "* * * * *"}
        });
        apply_value(&client, Some(&ns), seed, &PatchParams::apply(tusk_e2e::MANAGER)).await?;
        wait_ready(&client, &ns, "pg", 1).await?;
        let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
        let done = loop {
            let all = backups.list(&ListParams::default()).await?.items;
            if let Some(done) = all.into_iter().find(|b| phase(b) == Some(BackupPhase::Completed)) {
                break done;
            }
            if tokio::time::Instant::now() > deadline {
                return Err("no scheduled backup completed to the default store in 4 minutes".into());
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        let location = done.status.as_ref().and_then(|s| s.location.clone()).ok_or("no location")?;
        assert!(location.starts_with(&format!("s3://tusk/{ns}/pg/")), "not under the namespace's prefix of the default store: {location}");
        let key = location.strip_prefix("s3://tusk/").ok_or("another bucket")?;
        assert!(stored(&client, DEFAULT_STORE_NS, &format!("{key}manifest.json")).await?);
        // Deleting it takes a final backup there too; skip it to keep the
        // namespace's cleanup short.
        Ok(())
    })
    .await;
}
