//! A separate WAL volume (`spec.walStorage`, issue #26 item 5) on the
//! cluster: a 2-instance Database whose instances each have a WAL PVC, with
//! `pg_wal` on it (the link, the mount `df` resolves it to, the current
//! segment there); replication and a switchover through it; a verified
//! backup (the verification Job keeps its WAL in its emptyDir) restored
//! into a new Database with a WAL volume, whose replica clones onto its own
//! WAL volume and whose scale-down deletes both PVCs of the removed
//! instance. Admission refuses adding or removing `spec.walStorage` on an
//! existing Database and a WAL volume too small for `max_wal_size`, each
//! naming the field.
//!   e2e-run wal_volume

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use tusk::api::status::BackupPhase;
use tusk::api::v1::{Backup, Database};
use tusk::resources::{PGDATA, POSTGRES_CONTAINER};
use tusk_e2e::faults::{exec, psql_local};
use tusk_e2e::store::{archive_all, spec_with_store, sql_on as on, store_up};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, wait_for, wait_ready,
};

const WAL_MOUNT: &str = "/var/lib/postgresql/wal";
const DATA_MOUNT: &str = "/var/lib/postgresql/data";
const TIMEOUT: Duration = Duration::from_secs(300);

fn with_wal(mut spec: serde_json::Value) -> serde_json::Value {
    spec["walStorage"] = json!({"size": "2Gi"});
    spec
}

/// Runs `script` with `sh -c` in instance `pod`'s container; its stdout, or
/// an error with its stderr.
async fn shell(client: &Client, ns: &str, pod: &str, script: &str) -> Result<String> {
    let out = exec(client, ns, pod, POSTGRES_CONTAINER, &["sh", "-c", script]).await?;
    if !out.success {
        return Err(format!("{pod}: `{script}` failed: {}{}", out.stdout, out.stderr).into());
    }
    Ok(out.stdout.trim().to_owned())
}

/// Instance `pod` has its WAL PVC (owned like its data PVC), mounted at
/// the WAL mount, and `$PGDATA/pg_wal` lives there: a link to it, which `df`
/// resolves to the WAL volume's mount, not the data volume's; and WAL
/// segments are in it.
async fn wal_on_its_volume(client: &Client, ns: &str, pod: &str) -> Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let data = claims.get(pod).await?;
    let wal = claims
        .get_opt(&format!("{pod}-wal"))
        .await?
        .ok_or_else(|| format!("{pod} has no WAL PVC {pod}-wal"))?;
    assert_eq!(
        wal.metadata.owner_references, data.metadata.owner_references,
        "{pod}-wal is owned like its data PVC"
    );
    assert_eq!(wal.metadata.labels, data.metadata.labels);
    let requested = wal
        .spec
        .and_then(|s| s.resources)
        .and_then(|r| r.requests)
        .and_then(|r| r.get("storage").cloned())
        .map(|q| q.0);
    assert_eq!(requested.as_deref(), Some("2Gi"), "{pod}-wal's size");

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let spec = pods.get(pod).await?.spec.unwrap_or_default();
    let claim = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "wal")
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone());
    assert_eq!(claim, Some(format!("{pod}-wal")), "{pod}'s wal volume");

    let link = shell(client, ns, pod, &format!("readlink {PGDATA}/pg_wal")).await?;
    assert_eq!(link, format!("{WAL_MOUNT}/pg_wal"), "{pod}: $PGDATA/pg_wal");
    let mounted_on = |path: String| {
        let ns = ns.to_owned();
        let pod = pod.to_owned();
        async move {
            shell(
                client,
                &ns,
                &pod,
                &format!("df -P {path}/ | tail -n 1 | awk '{{print $NF}}'"),
            )
            .await
        }
    };
    assert_eq!(
        mounted_on(format!("{PGDATA}/pg_wal")).await?,
        WAL_MOUNT,
        "{pod}: df of $PGDATA/pg_wal"
    );
    assert_eq!(
        mounted_on(PGDATA.to_owned()).await?,
        DATA_MOUNT,
        "{pod}: df of $PGDATA"
    );
    let segments = shell(
        client,
        ns,
        pod,
        &format!("ls {WAL_MOUNT}/pg_wal | grep -c '^[0-9A-F]\\{{24\\}}$' || true"),
    )
    .await?;
    let segments: u32 = segments.parse().unwrap_or(0);
    assert!(segments >= 1, "{pod}: no WAL segment in {WAL_MOUNT}/pg_wal");
    Ok(())
}

/// The primary's current WAL file is a file on its WAL volume. A write
/// first: on an idle server the insert position can sit on a segment
/// boundary, where `pg_walfile_name` names the finished segment, which a
/// checkpoint may already have recycled.
async fn current_segment_on_wal_volume(client: &Client, ns: &str, primary: &str) -> Result<()> {
    let out = psql_local(
        client,
        ns,
        primary,
        &[
            "CREATE TABLE IF NOT EXISTS wal_probe (at timestamptz)",
            "INSERT INTO wal_probe VALUES (now())",
            "SELECT pg_walfile_name(pg_current_wal_insert_lsn())",
        ],
    )
    .await?;
    let segment = out.stdout.trim().lines().last().unwrap_or_default().trim();
    assert!(
        !segment.is_empty(),
        "{primary}: no current WAL file: {}",
        out.stderr
    );
    shell(
        client,
        ns,
        primary,
        &format!("test -f {WAL_MOUNT}/pg_wal/{segment} && test -L {PGDATA}/pg_wal"),
    )
    .await
    .map_err(|e| format!("{primary}'s current segment {segment} is not on the WAL volume: {e}"))?;
    Ok(())
}

/// Polls `query` on the replicas (`<db>-ro`) until it returns `expected`.
async fn replicas_read(
    client: &Client,
    ns: &str,
    db: &str,
    query: &str,
    expected: &str,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let seen = on(client, ns, db, "ro", query).await;
        match &seen {
            Ok(value) if value.trim() == expected => return Ok(()),
            _ if tokio::time::Instant::now() > deadline => {
                return Err(
                    format!("{db}-ro answers {seen:?} to {query:?}, not {expected}").into(),
                );
            }
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Runs the idempotent `write` on `<db>-rw` until it succeeds: right after
/// a switchover the Service may still lead to the old primary for a moment.
async fn write_patiently(client: &Client, ns: &str, db: &str, write: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match on(client, ns, db, "rw", write).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() > deadline => {
                return Err(format!("{db}-rw refuses {write:?}: {e}").into());
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Waits until `wanted` is the primary of a Ready `db` of `instances`.
async fn primary_is(
    client: &Client,
    ns: &str,
    db: &str,
    wanted: &str,
    instances: i32,
) -> Result<()> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    wait_for(&dbs, db, TIMEOUT, |d| {
        d.status
            .as_ref()
            .is_some_and(|s| s.current_primary.as_deref() == Some(wanted))
    })
    .await?;
    wait_ready(client, ns, db, instances).await?;
    Ok(())
}

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
    let done = wait_for(&backups, name, TIMEOUT, |b| {
        let status = b.status.as_ref();
        status.and_then(|s| s.phase) == Some(BackupPhase::Failed)
            || status.is_some_and(|s| s.verified.is_some())
    })
    .await?;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(status.phase, Some(BackupPhase::Completed), "{status:?}");
    assert_eq!(
        status.verified,
        Some(true),
        "the verification of {name} (WAL in its own emptyDir): {:?}",
        status.conditions
    );
    Ok(done)
}

#[tokio::test]
async fn wal_lives_on_its_own_volume_through_replication_switchover_backup_and_restore() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-wal-volume",
        Duration::from_secs(1500),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let (endpoint, bucket) = store_up(&ns).await?;
            let mut spec = with_wal(spec_with_store(2, &endpoint, &bucket));
            spec["backup"]["verify"] = json!(true);
            apply_value(&client, Some(&ns), database("pg", spec), &apply).await?;
            wait_ready(&client, &ns, "pg", 2).await?;

            // Both instances: their own WAL PVC, pg_wal on it.
            for pod in ["pg-1", "pg-2"] {
                wal_on_its_volume(&client, &ns, pod).await?;
            }
            current_segment_on_wal_volume(&client, &ns, "pg-1").await?;

            // Replication through the WAL volumes.
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "CREATE TABLE t (i int); INSERT INTO t SELECT generate_series(1, 1000)",
            )
            .await?;
            replicas_read(&client, &ns, "pg", "SELECT count(*) FROM t", "1000").await?;
            println!("a row written on pg-1 reads on pg-2");

            // A switchover: pg-2 promotes, pg-1 follows it.
            let dbs: Api<Database> = Api::namespaced(client.clone(), &ns);
            let patch = json!({"spec": {"primary": "pg-2"}});
            dbs.patch("pg", &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            primary_is(&client, &ns, "pg", "pg-2", 2).await?;
            write_patiently(
                &client,
                &ns,
                "pg",
                "INSERT INTO t SELECT generate_series(1001, 2000) \
                 WHERE NOT EXISTS (SELECT 1 FROM t WHERE i = 1001)",
            )
            .await?;
            replicas_read(&client, &ns, "pg", "SELECT count(*) FROM t", "2000").await?;
            current_segment_on_wal_volume(&client, &ns, "pg-2").await?;
            wal_on_its_volume(&client, &ns, "pg-1").await?;
            println!("switched over to pg-2; pg-1 follows it, WAL on its own volume");

            // Adding or removing spec.walStorage is refused, naming the field;
            // so is a WAL volume too small for max_wal_size.
            let removed = dbs
                .patch(
                    "pg",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"walStorage": null}})),
                )
                .await
                .expect_err("removing spec.walStorage was accepted")
                .to_string();
            assert!(removed.contains("spec.walStorage"), "{removed}");
            assert!(
                removed.contains("cannot be added to or removed"),
                "{removed}"
            );
            let plain = json!({"version": "17", "instances": 1, "storage": {"size": "1Gi"}});
            apply_value(&client, Some(&ns), database("plain", plain), &apply).await?;
            let added = dbs
                .patch(
                    "plain",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"walStorage": {"size": "2Gi"}}})),
                )
                .await
                .expect_err("adding spec.walStorage was accepted")
                .to_string();
            assert!(added.contains("spec.walStorage"), "{added}");
            assert!(added.contains("cannot be added to or removed"), "{added}");
            println!("adding walStorage refused: {added}");
            dbs.delete("plain", &DeleteParams::default()).await?;
            let small = json!({
                "version": "17", "instances": 1, "storage": {"size": "1Gi"},
                "walStorage": {"size": "1Gi"}
            });
            let refused = apply_value(&client, Some(&ns), database("small", small), &apply)
                .await
                .expect_err("a 1Gi WAL volume for the default max_wal_size was accepted")
                .to_string();
            assert!(refused.contains("spec.walStorage.size"), "{refused}");
            assert!(refused.contains("max_wal_size"), "{refused}");
            println!("too small a WAL volume refused: {refused}");

            // A verified backup, more rows, then a restore into a new
            // Database with a WAL volume, its replica cloned onto its own.
            take_backup(&client, &ns, "pg", "b1").await?;
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "INSERT INTO t SELECT generate_series(2001, 3000)",
            )
            .await?;
            archive_all(&client, &ns, "pg").await?;
            let mut copy = with_wal(spec_with_store(2, &endpoint, &bucket));
            copy["bootstrap"] = json!({"recovery": {
                "source": "pg",
            }});
            apply_value(&client, Some(&ns), database("copy", copy), &apply).await?;
            wait_ready(&client, &ns, "copy", 2).await?;
            let rows = on(&client, &ns, "copy", "rw", "SELECT count(*) FROM t").await?;
            assert_eq!(rows.trim(), "3000", "rows in the restored Database");
            for pod in ["copy-1", "copy-2"] {
                wal_on_its_volume(&client, &ns, pod).await?;
            }
            current_segment_on_wal_volume(&client, &ns, "copy-1").await?;
            replicas_read(&client, &ns, "copy", "SELECT count(*) FROM t", "3000").await?;
            println!("restored into copy with every row; both instances' WAL on their volumes");

            // Scale-down removes the removed instance's two PVCs, and only those.
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
            dbs.patch(
                "copy",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"instances": 1}})),
            )
            .await?;
            wait_ready(&client, &ns, "copy", 1).await?;
            let deadline = tokio::time::Instant::now() + TIMEOUT;
            loop {
                let left: Vec<bool> = [
                    claims.get_opt("copy-2").await?.is_some(),
                    claims.get_opt("copy-2-wal").await?.is_some(),
                ]
                .to_vec();
                if left == [false, false] {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!("copy-2's PVCs (data, WAL) still there: {left:?}").into());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            for kept in [
                "copy-1",
                "copy-1-wal",
                "pg-1",
                "pg-1-wal",
                "pg-2",
                "pg-2-wal",
            ] {
                assert!(claims.get_opt(kept).await?.is_some(), "{kept} was deleted");
            }
            println!("scale-down deleted copy-2 and copy-2-wal, nothing else");
            Ok(())
        },
    )
    .await;
}
