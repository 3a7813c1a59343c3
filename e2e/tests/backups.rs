//! Backups on the cluster: an S3 server in the test's namespace
//! (`e2e/objectstore up`), a Database archiving its WAL there, and Backup
//! objects taken by its instances: a standby's by default, the primary's
//! when asked, one at a time.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tusk::api::status::BackupPhase;
use tusk::api::v1::Backup;
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, repo_path, sql, wait_for,
    wait_ready,
};

/// `e2e/objectstore up <ns>`: the endpoint and bucket it prints.
fn objectstore_up(ns: &str) -> Result<(String, String)> {
    let output = Command::new(repo_path("e2e/objectstore"))
        .args(["up", ns])
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "e2e/objectstore up {ns} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let line = String::from_utf8(output.stdout)?;
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
            .ok_or_else(|| format!("e2e/objectstore printed no {key}: {line}"))
    };
    Ok((field("endpoint")?, field("bucket")?))
}

async fn superuser_password(client: &Client, ns: &str, db: &str) -> Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets.get(&format!("{db}-superuser")).await?;
    secret
        .data
        .and_then(|d| {
            d.get("password")
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        })
        .ok_or_else(|| "no password in the superuser Secret".into())
}

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
        let (endpoint, bucket) = tokio::task::spawn_blocking({
            let ns = ns.clone();
            move || objectstore_up(&ns)
        })
        .await??;
        let spec = json!({
            "version": "17", "instances": 2, "storage": {"size": "1Gi"},
            "backup": {"objectStore": {
                "bucket": bucket, "endpoint": endpoint, "path": "e2e",
                "credentialsSecret": "s3-creds"
            }}
        });
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
