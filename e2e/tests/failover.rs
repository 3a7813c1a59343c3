//! Failover and switchover on the cluster, with a writer that records every
//! acknowledged commit: after each fault every acknowledged row is on the new
//! primary and exactly one instance accepts writes. The time from the fault
//! to the first acknowledged write after it is printed (measured, never
//! asserted: `bench/failover` is where the figures come from).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tusk::api::v1::Database;
use tusk_e2e::store::{sql_on as on, superuser_password};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, restricted, sql, wait_for,
    wait_ready,
};

const WRITER: &str = "writer";

/// A pod inserting 1, 2, 3, ... through `<db>-rw`, one connection per row,
/// and printing `ok N` for each commit the server acknowledged.
async fn start_writer(client: &Client, ns: &str, db: &str) -> Result<()> {
    let password = superuser_password(client, ns, db).await?;
    let url = format!(
        "postgresql://postgres:{password}@{db}-rw.{ns}.svc:5432/postgres?connect_timeout=2"
    );
    let script = format!(
        "i=0; while true; do i=$((i+1)); \
         if psql '{url}' -v ON_ERROR_STOP=1 -qAtc \"INSERT INTO acked VALUES ($i)\" >/dev/null 2>&1; \
         then echo \"ok $i $(date +%s.%N)\"; else echo \"fail $i $(date +%s.%N)\"; fi; \
         sleep 0.05; done"
    );
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": WRITER},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main", "image": "localhost/postgres:17", "imagePullPolicy": "IfNotPresent",
                "command": ["bash", "-c", script],
                "securityContext": restricted(999)
            }]
        }
    }))?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

/// The writer's log: acknowledged ids, and the Unix time of each.
async fn acknowledged(client: &Client, ns: &str) -> Result<Vec<(i64, f64)>> {
    let logs = Api::<Pod>::namespaced(client.clone(), ns)
        .logs(WRITER, &LogParams::default())
        .await?;
    Ok(logs
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "ok").then_some(())?;
            let id = words.next()?.parse().ok()?;
            let at = words.next()?.parse().ok()?;
            Some((id, at))
        })
        .collect())
}

/// Waits until the writer acknowledged a row after Unix time `after`;
/// returns how long after it.
async fn first_write_after(client: &Client, ns: &str, after: f64) -> Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some((_, at)) = acknowledged(client, ns)
            .await?
            .into_iter()
            .find(|(_, at)| *at > after)
        {
            return Ok(at - after);
        }
        if Instant::now() > deadline {
            return Err("no write was acknowledged within 180 s of the fault".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The longest stretch without an acknowledged write after Unix time `after`:
/// the write pause of a switchover, which begins a moment after it is asked.
async fn longest_pause_after(client: &Client, ns: &str, after: f64) -> Result<f64> {
    let times: Vec<f64> = acknowledged(client, ns)
        .await?
        .into_iter()
        .map(|(_, at)| at)
        .filter(|at| *at > after)
        .collect();
    Ok(times
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .fold(0.0, f64::max))
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

async fn current_primary(client: &Client, ns: &str, db: &str) -> Result<String> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    dbs.get(db)
        .await?
        .status
        .and_then(|s| s.current_primary)
        .ok_or_else(|| "no current primary".into())
}

/// Waits until `db` is Ready with `primary` as its primary, all three
/// instances back.
async fn wait_primary(client: &Client, ns: &str, db: &str, primary: &str) -> Result<()> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let wanted = primary.to_owned();
    wait_for(&dbs, db, Duration::from_secs(300), move |d| {
        d.status.as_ref().is_some_and(|s| {
            s.current_primary.as_deref() == Some(wanted.as_str())
                && s.ready_instances == Some(3)
                && s.observed_generation == d.metadata.generation
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    })
    .await?;
    Ok(())
}

/// Every acknowledged id is on the primary, and exactly one instance (the
/// recorded primary) is out of recovery.
async fn nothing_lost(client: &Client, ns: &str, db: &str) -> Result<usize> {
    let acked: BTreeSet<i64> = acknowledged(client, ns)
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let stored: BTreeSet<i64> = on(client, ns, db, "rw", "SELECT id FROM acked")
        .await?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let lost: Vec<&i64> = acked.difference(&stored).collect();
    if !lost.is_empty() {
        return Err(format!("acknowledged rows lost: {lost:?}").into());
    }
    let password = superuser_password(client, ns, db).await?;
    let mut writable = Vec::new();
    for serial in 1..=3 {
        let host = format!("{db}-{serial}.{db}-r.{ns}.svc");
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let Some(ip) = pods
            .get(&format!("{db}-{serial}"))
            .await?
            .status
            .and_then(|s| s.pod_ip)
        else {
            return Err(format!("{host} has no IP").into());
        };
        let answer = sql(
            client,
            ns,
            &ip,
            &password,
            "postgres",
            "SELECT pg_is_in_recovery()",
        )
        .await?;
        if answer == "f" {
            writable.push(format!("{db}-{serial}"));
        }
    }
    let primary = current_primary(client, ns, db).await?;
    if writable != [primary.clone()] {
        return Err(format!("writable instances {writable:?}, recorded primary {primary}").into());
    }
    Ok(acked.len())
}

#[tokio::test]
async fn a_lost_primary_is_replaced_and_a_switchover_returns_without_losing_a_commit() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-failover",
        Duration::from_secs(900),
        |client, ns| async move {
            let spec = json!({
                "version": "17", "instances": 3,
                "storage": {"size": "1Gi"},
                "replication": {"mode": "sync", "minSyncReplicas": 1}
            });
            apply_value(
                &client,
                Some(&ns),
                database("pg", spec),
                &PatchParams::apply(tusk_e2e::MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, "pg", 3).await?;
            on(
                &client,
                &ns,
                "pg",
                "rw",
                "CREATE TABLE acked (id bigint PRIMARY KEY)",
            )
            .await?;
            start_writer(&client, &ns, "pg").await?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            wait_for(&pods, WRITER, Duration::from_secs(120), |p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .is_some_and(|phase| phase == "Running")
            })
            .await?;
            first_write_after(&client, &ns, unix_now()).await?;

            // (a) The primary's pod force-deleted.
            let old = current_primary(&client, &ns, "pg").await?;
            let fault = unix_now();
            pods.delete(
                &old,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            )
            .await?;
            let pause = first_write_after(&client, &ns, fault).await?;
            println!("force-deleted primary {old}: first acknowledged write after {pause:.2} s");
            let dbs: Api<Database> = Api::namespaced(client.clone(), &ns);
            let moved = wait_for(&dbs, "pg", Duration::from_secs(300), |d| {
                d.status
                    .as_ref()
                    .and_then(|s| s.current_primary.as_deref())
                    .is_some_and(|p| p != old)
            })
            .await?;
            let new = moved
                .status
                .and_then(|s| s.current_primary)
                .ok_or("no primary")?;
            // The old primary comes back as a replica (rewound), all three ready.
            wait_primary(&client, &ns, "pg", &new).await?;
            let rows = nothing_lost(&client, &ns, "pg").await?;
            println!("after the failover to {new}: {rows} acknowledged rows, none lost");

            // (f) Switchover back to the old primary.
            let patch = json!({"spec": {"primary": old}});
            dbs.patch("pg", &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let asked = unix_now();
            wait_primary(&client, &ns, "pg", &old).await?;
            first_write_after(&client, &ns, unix_now()).await?;
            let pause = longest_pause_after(&client, &ns, asked).await?;
            println!("switchover to {old}: writes paused for {pause:.2} s at most");
            let rows = nothing_lost(&client, &ns, "pg").await?;
            println!("after the switchover: {rows} acknowledged rows, none lost");
            Ok(())
        },
    )
    .await;
}
