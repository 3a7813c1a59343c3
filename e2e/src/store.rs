//! The in-cluster S3 server of a test namespace (`e2e/objectstore`) and what
//! the backup and restore suites do with it.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, AttachParams, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::{Result, repo_path};

/// `e2e/objectstore up <ns>`: the endpoint and bucket it prints.
pub fn objectstore_up(ns: &str) -> Result<(String, String)> {
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

/// The `postgres` password of Database `db`.
pub async fn superuser_password(client: &Client, ns: &str, db: &str) -> Result<String> {
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

/// Runs `query` through Service `<db>-<service>` (`rw`, `ro`, `r`) as the
/// superuser.
pub async fn sql_on(
    client: &Client,
    ns: &str,
    db: &str,
    service: &str,
    query: &str,
) -> Result<String> {
    let password = superuser_password(client, ns, db).await?;
    crate::sql(
        client,
        ns,
        &format!("{db}-{service}.{ns}.svc"),
        &password,
        "postgres",
        query,
    )
    .await
}

/// Closes the primary's WAL segment and waits until the archive holds it:
/// what a recovery can reach.
pub async fn archive_all(client: &Client, ns: &str, db: &str) -> Result<()> {
    // The segment just closed, not the one at the insert position: anything
    // written after the switch (autovacuum's analyze of the fresh rows, a
    // standby snapshot) opens a segment only archive_timeout closes.
    let closed = sql_on(
        client,
        ns,
        db,
        "rw",
        "SELECT pg_walfile_name(pg_switch_wal())",
    )
    .await?;
    let closed = closed.trim();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let archived = sql_on(
            client,
            ns,
            db,
            "rw",
            &format!("SELECT last_archived_wal >= '{closed}' FROM pg_stat_archiver"),
        )
        .await?;
        if archived.trim() == "t" {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{db}'s segment {closed} is not archived").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `e2e/objectstore <args>`, failing with its stderr.
pub fn objectstore(args: &[&str]) -> Result<()> {
    let output = Command::new(repo_path("e2e/objectstore"))
        .args(args)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "e2e/objectstore {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(())
}

/// [`objectstore`] off the async runtime.
pub async fn objectstore_async(args: &[&str]) -> Result<()> {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        objectstore(&args)
    })
    .await?
}

/// [`objectstore_up`] off the async runtime.
pub async fn store_up(ns: &str) -> Result<(String, String)> {
    let ns = ns.to_owned();
    tokio::task::spawn_blocking(move || objectstore_up(&ns)).await?
}

/// A Database spec of `instances` whose backups go to the test's store,
/// under prefix `e2e`.
pub fn spec_with_store(instances: i32, endpoint: &str, bucket: &str) -> serde_json::Value {
    json!({
        "version": "17", "instances": instances, "storage": {"size": "1Gi"},
        "backup": {"objectStore": {
            "bucket": bucket, "endpoint": endpoint, "path": "e2e",
            "credentialsSecret": "s3-creds"
        }}
    })
}

/// Runs `script` in the object store's pod of `ns` (busybox `sh`), whose
/// posix backend keeps bucket `tusk` as files under `/data/buckets/tusk`.
pub async fn in_store(client: &Client, ns: &str, script: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let listed = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=tusk-objectstore"))
        .await?;
    let pod = listed
        .items
        .iter()
        .find(|p| crate::pod_ready(p))
        .ok_or("no ready object store pod")?;
    let mut attached = pods
        .exec(
            &pod.name_any(),
            vec!["sh", "-c", script],
            &AttachParams::default().stderr(false),
        )
        .await?;
    let mut out = String::new();
    if let Some(mut stdout) = attached.stdout() {
        stdout.read_to_string(&mut out).await?;
    }
    attached.join().await?;
    Ok(out)
}
