//! Provisioning on a real cluster: a replicated Database from `kubectl apply`,
//! Services that route by role, synchronous replication, self-healing, scaling,
//! parameter changes, and deletion that leaves nothing behind.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tusk::api::v1::Database;
use tusk_e2e::faults::psql_local;
use tusk_e2e::{
    READY_TIMEOUT, Result, apply_value, database, in_namespace, install_operator, sql, wait_for,
    wait_ready,
};

async fn superuser_password(client: &Client, ns: &str, db: &str) -> Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets.get(&format!("{db}-superuser")).await?;
    let bytes = secret
        .data
        .and_then(|d| d.get("password").cloned())
        .ok_or("no password in the superuser Secret")?;
    Ok(String::from_utf8(bytes.0)?)
}

async fn pod_names(client: &Client, ns: &str, selector: &str) -> Result<BTreeSet<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect())
}

async fn pvc_names(client: &Client, ns: &str) -> Result<BTreeSet<String>> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    Ok(pvcs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect())
}

/// When the postmaster of instance `pod` started (seconds since the epoch),
/// asked over its unix socket: which instance a restart reached first.
async fn postmaster_started(client: &Client, ns: &str, pod: &str) -> Result<f64> {
    let out = psql_local(
        client,
        ns,
        pod,
        &["SELECT extract(epoch FROM pg_postmaster_start_time())"],
    )
    .await?;
    if !out.success {
        return Err(format!("{pod}: pg_postmaster_start_time(): {}", out.stderr.trim()).into());
    }
    Ok(out.stdout.trim().parse()?)
}

/// Retries `query` until its output satisfies `done` (replication and Service
/// endpoints settle asynchronously).
async fn eventually(
    client: &Client,
    ns: &str,
    host: &str,
    password: &str,
    query: &str,
    done: impl Fn(&str) -> bool,
) -> Result<String> {
    let mut last = String::new();
    for _ in 0..20 {
        match sql(client, ns, host, password, "app", query).await {
            Ok(out) if done(&out) => return Ok(out),
            Ok(out) => last = out,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Err(format!("{query} on {host} never satisfied the test; last: {last}").into())
}

/// The whole life of a replicated Database, in one namespace so the cluster
/// (two cores) runs one at a time: every step builds on the last.
#[tokio::test]
async fn a_replicated_database_serves_heals_scales_and_goes_away_cleanly() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("e2e-prov", Duration::from_secs(1200), |client, ns| async move {
        let apply = PatchParams::apply(tusk_e2e::MANAGER);
        let spec = json!({
            "version": "17", "instances": 3, "storage": {"size": "1Gi"},
            "replication": {"mode": "sync", "minSyncReplicas": 1},
            "postgresql": {"parameters": {"work_mem": "8MB"}},
            "bootstrap": {"initdb": {"database": "app", "owner": "app"}}
        });
        apply_value(&client, Some(&ns), database("pg", spec.clone()), &apply).await?;
        let db = wait_ready(&client, &ns, "pg", 3).await?;
        let status = db.status.clone().ok_or("no status")?;
        assert_eq!(status.current_primary.as_deref(), Some("pg-1"));
        assert!(status.conditions.iter().all(|c| c.observed_generation == db.metadata.generation));
        let password = superuser_password(&client, &ns, "pg").await?;

        // The primary streams to both replicas, synchronously to a quorum of one.
        let rw = format!("pg-rw.{ns}.svc");
        let ro = format!("pg-ro.{ns}.svc");
        // Waits for two standbys to stream, then checks which and how.
        eventually(&client, &ns, &rw, &password,
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
            |out| out == "2").await?;
        let replication = sql(&client, &ns, &rw, &password, "app",
            "SELECT string_agg(application_name || ':' || state || ':' || sync_state, ',' ORDER BY application_name) FROM pg_stat_replication").await?;
        assert_eq!(replication, "pg-2:streaming:quorum,pg-3:streaming:quorum");
        let names = sql(&client, &ns, &rw, &password, "app", "SHOW synchronous_standby_names").await?;
        assert_eq!(names, r#"ANY 1 ("pg-2", "pg-3")"#);

        // A commit returns only once a standby has flushed it: right after COMMIT,
        // some standby's flush position is past the row's WAL.
        // (COMMIT inside one -c string still ends that transaction before the SELECT.)
        let acknowledged = sql(&client, &ns, &rw, &password, "app",
            "CREATE TABLE t (v text); BEGIN; INSERT INTO t VALUES ('hello'); \
             CREATE TEMP TABLE w AS SELECT pg_current_wal_insert_lsn() AS lsn; COMMIT; \
             SELECT bool_or(r.flush_lsn >= w.lsn) FROM pg_stat_replication r, w").await?;
        assert!(acknowledged.ends_with('t'), "no standby had the commit: {acknowledged}");

        // Written through -rw, read on a replica through -ro; -ro reaches only replicas.
        eventually(&client, &ns, &ro, &password,
            "SELECT count(*) FROM t WHERE v = 'hello'", |out| out == "1").await?;
        for _ in 0..3 {
            let role = sql(&client, &ns, &ro, &password, "app", "SELECT pg_is_in_recovery()").await?;
            assert_eq!(role, "t", "-ro reached the primary");
        }
        assert_eq!(pod_names(&client, &ns, "tusk.dev/database=pg,tusk.dev/role=primary").await?,
            BTreeSet::from(["pg-1".to_owned()]));

        // The objects Tusk made carry its labels and an owner reference.
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        for name in ["pg-rw", "pg-ro", "pg-r"] {
            let service = services.get(name).await?;
            assert_eq!(service.owner_references().first().map(|o| o.name.as_str()), Some("pg"));
        }
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        assert_eq!(pdbs.list(&ListParams::default()).await?.items.len(), 2);

        // A deleted replica pod comes back on its own PVC and streams again.
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
        let volume_before = pvcs.get("pg-3").await?.metadata.uid;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let old_uid = pods.get("pg-3").await?.metadata.uid;
        pods.delete("pg-3", &DeleteParams::default()).await?;
        wait_for(&pods, "pg-3", READY_TIMEOUT, |p| {
            p.metadata.uid != old_uid && tusk_e2e::pod_ready(p)
        }).await?;
        assert_eq!(pvcs.get("pg-3").await?.metadata.uid, volume_before, "the PVC was replaced");
        eventually(&client, &ns, &rw, &password,
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'pg-3' AND state = 'streaming'",
            |out| out == "1").await?;
        wait_ready(&client, &ns, "pg", 3).await?;

        // A parameter that needs a restart rolls the instances, replicas first:
        // every postmaster starts anew, the primary's last.
        let instances = ["pg-1", "pg-2", "pg-3"];
        let mut started = Vec::new();
        for pod in instances {
            started.push(postmaster_started(&client, &ns, pod).await?);
        }
        let mut tuned = spec.clone();
        tuned["postgresql"]["parameters"] = json!({"work_mem": "16MB", "max_connections": "150"});
        apply_value(&client, Some(&ns), database("pg", tuned.clone()), &apply).await?;
        eventually(&client, &ns, &rw, &password, "SHOW max_connections", |out| out == "150").await?;
        eventually(&client, &ns, &ro, &password, "SHOW work_mem", |out| out == "16MB").await?;
        let db = wait_ready(&client, &ns, "pg", 3).await?;
        assert_eq!(db.status.and_then(|s| s.current_primary).as_deref(), Some("pg-1"));
        let mut restarted = Vec::new();
        for (pod, before) in instances.into_iter().zip(started) {
            let after = postmaster_started(&client, &ns, pod).await?;
            assert!(after > before, "{pod} was not restarted for max_connections");
            restarted.push(after);
        }
        assert!(
            restarted[0] > restarted[1] && restarted[0] > restarted[2],
            "the primary pg-1 restarted before a replica: postmaster start times {restarted:?} (pg-1, pg-2, pg-3)"
        );

        // A parameter Tusk owns is refused at the door, naming it.
        let mut owned = tuned.clone();
        owned["postgresql"]["parameters"]["port"] = json!("6543");
        let refused = apply_value(&client, Some(&ns), database("pg", owned), &apply).await
            .expect_err("an owned parameter was accepted").to_string();
        assert!(refused.contains("spec.postgresql.parameters"), "{refused}");

        // Scale down to the primary alone: the highest serials go, with their PVCs
        // and their slots. (A single instance cannot be synchronous: the API
        // refuses sync with fewer instances than minSyncReplicas + 1.)
        let mut one = tuned.clone();
        one["instances"] = json!(1);
        one["replication"] = json!({"mode": "async"});
        apply_value(&client, Some(&ns), database("pg", one), &apply).await?;
        wait_ready(&client, &ns, "pg", 1).await?;
        assert_eq!(pod_names(&client, &ns, "tusk.dev/database=pg").await?, BTreeSet::from(["pg-1".to_owned()]));
        let mut left = BTreeSet::new();
        for _ in 0..30 {
            left = pvc_names(&client, &ns).await?;
            if left.len() == 1 { break; }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        assert_eq!(left, BTreeSet::from(["pg-1".to_owned()]));
        // Only the primary's budget is left: a replicas budget over nothing
        // would only get in a later drain's way.
        let budgets: Vec<String> = pdbs.list(&ListParams::default()).await?
            .items.iter().map(ResourceExt::name_any).collect();
        assert_eq!(budgets, ["pg-primary"]);
        eventually(&client, &ns, &rw, &password, "SHOW synchronous_standby_names", str::is_empty).await?;
        eventually(&client, &ns, &rw, &password, "SELECT count(*) FROM pg_replication_slots", |o| o == "0").await?;

        // And back to three: fresh replicas after the highest remaining serial,
        // cloned in parallel, streaming.
        apply_value(&client, Some(&ns), database("pg", tuned.clone()), &apply).await?;
        wait_ready(&client, &ns, "pg", 3).await?;
        assert_eq!(pod_names(&client, &ns, "tusk.dev/database=pg").await?,
            BTreeSet::from(["pg-1".to_owned(), "pg-2".to_owned(), "pg-3".to_owned()]));
        eventually(&client, &ns, &rw, &password,
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'", |o| o == "2").await?;
        let names = sql(&client, &ns, &rw, &password, "app", "SHOW synchronous_standby_names").await?;
        assert_eq!(names, r#"ANY 1 ("pg-2", "pg-3")"#);
        eventually(&client, &ns, &ro, &password, "SELECT count(*) FROM t", |o| o == "1").await?;

        // Deleting the Database removes everything it created.
        let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
        databases.delete("pg", &DeleteParams::foreground()).await?;
        let mut remaining = String::new();
        for _ in 0..90 {
            let pods = pod_names(&client, &ns, "tusk.dev/database=pg").await?;
            let volumes = pvc_names(&client, &ns).await?;
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let secrets: Vec<String> = secrets.list(&ListParams::default().labels("tusk.dev/database=pg")).await?
                .items.iter().map(ResourceExt::name_any).collect();
            let services: Vec<String> = services.list(&ListParams::default()).await?
                .items.iter().map(ResourceExt::name_any).collect();
            let gone = databases.get_opt("pg").await?.is_none();
            remaining = format!("pods {pods:?} pvcs {volumes:?} secrets {secrets:?} services {services:?} database gone {gone}");
            if gone && pods.is_empty() && volumes.is_empty() && secrets.is_empty() && services.is_empty() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        Err(format!("left behind after deletion: {remaining}").into())
    })
    .await;
}

/// The smallest Database, on the other supported major: one primary, its
/// version from `spec.version`, credentials in its Secrets.
#[tokio::test]
async fn a_single_instance_database_is_ready_with_a_primary_and_no_standbys() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-one",
        Duration::from_secs(400),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let spec = json!({"version": "15", "instances": 1, "storage": {"size": "1Gi"}});
            apply_value(&client, Some(&ns), database("solo", spec), &apply).await?;
            let db = wait_ready(&client, &ns, "solo", 1).await?;
            let status = db.status.ok_or("no status")?;
            assert_eq!(status.current_primary.as_deref(), Some("solo-1"));
            let password = superuser_password(&client, &ns, "solo").await?;
            // Ready is the instance's word; the Service routes to it a moment later.
            let version = eventually(
                &client,
                &ns,
                &format!("solo-rw.{ns}.svc"),
                &password,
                "SELECT current_setting('server_version_num')::int / 10000",
                |out| !out.is_empty(),
            )
            .await?;
            assert_eq!(version, "15");
            // The app Secret's credentials work too.
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let app = secrets.get("solo-app").await?;
            let data = app.data.ok_or("empty app Secret")?;
            let user = String::from_utf8(data.get("username").ok_or("no username")?.0.clone())?;
            assert_eq!(user, "app");
            Ok(())
        },
    )
    .await;
}
