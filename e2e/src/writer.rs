//! The writer: a pod inserting 1, 2, 3, ... into table `acked` through
//! `<db>-rw`, one connection per row, logging every commit the server
//! acknowledged with its time; and what the tests read from its log (write
//! pauses, outages) and check against the database afterwards (no
//! acknowledged row lost, exactly one writable instance).
//!
//! One writer per test namespace (pod [`WRITER`]), against one Database.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tusk::api::v1::Database;

use crate::store::{sql_on, superuser_password};
use crate::{Result, restricted, sql, wait_for};

/// The writer pod's name.
pub const WRITER: &str = "writer";

/// Starts a pod inserting 1, 2, 3, ... into `acked` through `<db>-rw`, one
/// connection per row, and printing `ok N <unix time>` for each commit the
/// server acknowledged. A row whose commit failed or whose outcome is unknown
/// prints `fail`: only `ok` rows must survive. The TCP keepalives and user
/// timeout bound how long a connection to a primary that vanished behind a
/// dropped network hangs (otherwise TCP's retransmissions, a minute or more),
/// which would be measured as the failover's time. No statement timeout: a
/// commit cancelled while it waits for a synchronous standby reports success
/// with a warning.
pub async fn start_writer(client: &Client, ns: &str, db: &str) -> Result<()> {
    let password = superuser_password(client, ns, db).await?;
    let url = format!(
        "postgresql://postgres:{password}@{db}-rw.{ns}.svc:5432/postgres?connect_timeout=2\
         &keepalives_idle=1&keepalives_interval=1&keepalives_count=3&tcp_user_timeout=3000"
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

/// Creates table `acked` on Database `db` (Ready), starts the writer and
/// waits until it has written a first row.
pub async fn start_writing(client: &Client, ns: &str, db: &str) -> Result<()> {
    sql_on(
        client,
        ns,
        db,
        "rw",
        "CREATE TABLE acked (id bigint PRIMARY KEY)",
    )
    .await?;
    start_writer(client, ns, db).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(&pods, WRITER, Duration::from_secs(120), |p| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Running")
    })
    .await?;
    first_write_after(client, ns, unix_now()).await?;
    Ok(())
}

/// The writer's log: acknowledged ids, and the Unix time of each.
pub async fn acknowledged(client: &Client, ns: &str) -> Result<Vec<(i64, f64)>> {
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
pub async fn first_write_after(client: &Client, ns: &str, after: f64) -> Result<f64> {
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

/// The longest stretch without an acknowledged write between Unix times
/// `from` and `to`, both ends counting as writes: the write pause of a
/// switchover or a rolling update (which begin a moment after they are
/// asked), or the longest a control-plane outage held writes up.
pub async fn longest_pause(client: &Client, ns: &str, from: f64, to: f64) -> Result<f64> {
    let times: Vec<f64> = acknowledged(client, ns)
        .await?
        .into_iter()
        .map(|(_, at)| at)
        .collect();
    Ok(longest_gap(&times, from, to))
}

/// [`longest_pause`] over the acknowledgement times `times`.
pub fn longest_gap(times: &[f64], from: f64, to: f64) -> f64 {
    let mut within: Vec<f64> = times
        .iter()
        .copied()
        .filter(|at| (from..=to).contains(at))
        .collect();
    within.insert(0, from);
    within.push(to);
    within
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .fold(0.0, f64::max)
}

/// The longest stretch without an acknowledged write that ends after Unix
/// time `fault`: when writes stopped and when they resumed, in seconds after
/// the fault (the start may precede it). Unlike the first write after the
/// fault, not fooled by writes the old primary still acknowledged between
/// the fault's request and its effect (a deleted pod's containers are
/// stopped a moment after the API forgot the pod).
pub async fn outage(client: &Client, ns: &str, fault: f64) -> Result<(f64, f64)> {
    let times: Vec<f64> = acknowledged(client, ns)
        .await?
        .into_iter()
        .map(|(_, at)| at)
        .collect();
    times
        .windows(2)
        .filter(|pair| pair[1] > fault)
        .map(|pair| (pair[0] - fault, pair[1] - fault))
        .max_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
        .ok_or_else(|| "no write acknowledged after the fault".into())
}

/// Now, in seconds since 1970 (the writer's clock: the same node's).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// `status.currentPrimary` of Database `db`.
pub async fn current_primary(client: &Client, ns: &str, db: &str) -> Result<String> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    dbs.get(db)
        .await?
        .status
        .and_then(|s| s.current_primary)
        .ok_or_else(|| "no current primary".into())
}

/// The acknowledged ids, and those of them missing on the primary.
pub async fn lost_rows(client: &Client, ns: &str, db: &str) -> Result<(BTreeSet<i64>, Vec<i64>)> {
    let acked: BTreeSet<i64> = acknowledged(client, ns)
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let stored: BTreeSet<i64> = sql_on(client, ns, db, "rw", "SELECT id FROM acked")
        .await?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let lost = acked.difference(&stored).copied().collect();
    Ok((acked, lost))
}

/// The instance pods of Database `db` (not being deleted), by name; as many
/// as `spec.instances` asks for, or an error.
pub async fn instance_pods(client: &Client, ns: &str, db: &str) -> Result<Vec<Pod>> {
    let wanted = Api::<Database>::namespaced(client.clone(), ns)
        .get(db)
        .await?
        .spec
        .instances;
    let selector = format!("tusk.dev/database={db},app.kubernetes.io/component=database");
    let mut pods: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by_key(ResourceExt::name_any);
    if pods.len() != usize::try_from(wanted).unwrap_or(0) {
        let names: Vec<String> = pods.iter().map(ResourceExt::name_any).collect();
        return Err(format!("{db} asks for {wanted} instances, its pods are {names:?}").into());
    }
    Ok(pods)
}

/// Exactly one instance is out of recovery, and it is the recorded primary.
/// Asked of each pod's own address, not through a Service.
pub async fn one_writable(client: &Client, ns: &str, db: &str) -> Result<String> {
    let password = superuser_password(client, ns, db).await?;
    let asks = instance_pods(client, ns, db).await?.into_iter().map(|pod| {
        let password = password.clone();
        async move {
            let name = pod.name_any();
            let ip = pod
                .status
                .and_then(|s| s.pod_ip)
                .ok_or_else(|| format!("{name} has no IP"))?;
            let answer = sql(
                client,
                ns,
                &ip,
                &password,
                "postgres",
                "SELECT pg_is_in_recovery()",
            )
            .await?;
            Ok::<_, crate::Error>((name, answer == "f"))
        }
    });
    let mut writable = Vec::new();
    for answer in futures::future::join_all(asks).await {
        let (name, primary) = answer?;
        if primary {
            writable.push(name);
        }
    }
    let primary = current_primary(client, ns, db).await?;
    if writable != [primary.clone()] {
        return Err(format!("writable instances {writable:?}, recorded primary {primary}").into());
    }
    Ok(primary)
}

/// Every acknowledged id (there is at least one) is on the primary, and
/// exactly one instance (the recorded primary) is writable. Returns how many
/// rows were acknowledged.
pub async fn nothing_lost(client: &Client, ns: &str, db: &str) -> Result<usize> {
    let (acked, lost) = lost_rows(client, ns, db).await?;
    if acked.is_empty() {
        // Nothing can be lost of nothing: that would pass without proof.
        return Err("the writer acknowledged no row, so none can be checked".into());
    }
    if !lost.is_empty() {
        return Err(format!("acknowledged rows lost: {lost:?}").into());
    }
    one_writable(client, ns, db).await?;
    Ok(acked.len())
}

#[cfg(test)]
mod tests {
    use super::longest_gap;

    #[test]
    fn the_longest_gap_counts_both_ends_as_writes() {
        let times = [10.0, 10.5, 11.0, 14.0, 14.2, 20.0];
        assert!((longest_gap(&times, 10.2, 15.0) - 3.0).abs() < 1e-9);
        // Nothing written in the window: all of it.
        assert!((longest_gap(&times, 15.0, 19.0) - 4.0).abs() < 1e-9);
        // The gap from the window's start to the first write counts.
        assert!((longest_gap(&times, 4.0, 10.6) - 6.0).abs() < 1e-9);
    }
}
