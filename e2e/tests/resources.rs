//! `spec.resources` on the cluster (issue #26), under a writer that records
//! every acknowledged commit, in one walk on a 2-instance Database:
//!
//! 1. requests equal to limits (cpu 100m, memory 256Mi): every instance pod
//!    is `Guaranteed`, `status.resources` says so, and `SHOW shared_buffers`
//!    on the primary and the replica is the derived 48MB
//!    ((256Mi − 64Mi for the manager) / 4), as `status.resources.derived`
//!    says;
//! 2. a CPU change (100m → 150m, requests and limits): applied in place,
//!    every pod keeps its uid, its container id and its restart count, and
//!    the kubelet reports the new CPU as running
//!    (`status.containerStatuses[].resources`) once Ready;
//! 3. a memory change (256Mi → 320Mi): rolled (every pod replaced), after
//!    which `SHOW shared_buffers` is 64MB; no acknowledged write lost.
//!
//! The write pause of each change is printed (`resize: …`), never asserted:
//! `bench/resize` runs this test and reports them.
//!   cargo test --manifest-path e2e/Cargo.toml --test resources -- --nocapture

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;
use tusk::resources::POSTGRES_CONTAINER;
use tusk_e2e::store::sql_on;
use tusk_e2e::writer::{instance_pods, longest_pause, nothing_lost, start_writing, unix_now};
use tusk_e2e::{
    MANAGER, Result, apply_value, database, in_namespace, install_operator, wait_ready,
};

const DB: &str = "pg";
const INSTANCES: usize = 2;
/// How long a change may take to be in effect before the test gives up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(600);

fn resources(cpu: &str, memory: &str) -> Value {
    json!({
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu, "memory": memory}
    })
}

/// One instance pod as the test compares it across a change.
#[derive(Clone, Debug, PartialEq)]
struct Running {
    uid: String,
    container_id: Option<String>,
    restarts: i32,
    qos: Option<String>,
    /// The CPU limit and memory limit of its postgres container's spec.
    spec: (Option<String>, Option<String>),
    /// The CPU limit the kubelet reports the container runs with.
    running_cpu: Option<String>,
}

fn running(pod: &Pod) -> Running {
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == POSTGRES_CONTAINER));
    let limit = |name: &str| {
        container
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(name))
            .map(|q| q.0.clone())
    };
    let status = pod.status.as_ref();
    let container_status = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| c.name == POSTGRES_CONTAINER));
    Running {
        uid: pod.uid().unwrap_or_default(),
        container_id: container_status.and_then(|c| c.container_id.clone()),
        restarts: container_status.map_or(-1, |c| c.restart_count),
        qos: status.and_then(|s| s.qos_class.clone()),
        spec: (limit("cpu"), limit("memory")),
        running_cpu: container_status
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("cpu"))
            .map(|q| q.0.clone()),
    }
}

async fn pods(client: &Client, ns: &str) -> Result<BTreeMap<String, Running>> {
    Ok(instance_pods(client, ns, DB)
        .await?
        .iter()
        .map(|p| (p.name_any(), running(p)))
        .collect())
}

async fn patch_resources(client: &Client, ns: &str, resources: Value) -> Result<i64> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let patched = dbs
        .patch(
            DB,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"resources": resources}})),
        )
        .await?;
    patched
        .metadata
        .generation
        .ok_or_else(|| "the patched Database has no generation".into())
}

/// Waits until the Database is Ready at `generation` and every instance
/// pod satisfies `done`; returns the pods then.
async fn in_effect(
    client: &Client,
    ns: &str,
    generation: i64,
    done: impl Fn(&Running) -> bool,
) -> Result<(Database, BTreeMap<String, Running>)> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    loop {
        let db = dbs.get(DB).await?;
        // While a pod is replaced there is one fewer: not yet.
        let now = pods(client, ns).await.unwrap_or_default();
        let ready = db.status.as_ref().is_some_and(|s| {
            s.phase == Some(DatabasePhase::Ready)
                && s.observed_generation == Some(generation)
                && s.ready_instances == Some(INSTANCES as i32)
        });
        if ready && now.len() == INSTANCES && now.values().all(&done) {
            return Ok((db, now));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "generation {generation} not in effect within {CHANGE_TIMEOUT:?}: {:?}; pods {now:?}",
                tusk_e2e::ready_condition(&db)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `shared_buffers` in bytes through Service `<db>-<service>`.
async fn shared_buffers(client: &Client, ns: &str, service: &str) -> Result<i64> {
    let out = sql_on(
        client,
        ns,
        DB,
        service,
        "SELECT pg_size_bytes(current_setting('shared_buffers'))",
    )
    .await?;
    Ok(out.trim().parse()?)
}

fn derived(db: &Database, name: &str) -> Option<String> {
    db.status
        .as_ref()?
        .resources
        .as_ref()?
        .derived
        .get(name)
        .cloned()
}

#[tokio::test]
async fn guaranteed_instances_resize_cpu_in_place_and_roll_memory() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("e2e-resources", Duration::from_secs(1500), |client, ns| async move {
        let spec = json!({
            "version": "17", "instances": INSTANCES,
            "storage": {"size": "1Gi"},
            "resources": resources("100m", "256Mi")
        });
        apply_value(&client, Some(&ns), database(DB, spec), &PatchParams::apply(MANAGER)).await?;
        let db = wait_ready(&client, &ns, DB, INSTANCES as i32).await?;

        // 1. Guaranteed, with the derived shared_buffers in effect.
        let before = pods(&client, &ns).await?;
        for (name, pod) in &before {
            assert_eq!(pod.qos.as_deref(), Some("Guaranteed"), "{name}: {pod:?}");
        }
        let status = db.status.as_ref().and_then(|s| s.resources.clone());
        assert_eq!(
            status.as_ref().and_then(|r| r.qos_class.as_deref()),
            Some("Guaranteed"),
            "status.resources: {status:?}"
        );
        assert_eq!(derived(&db, "shared_buffers").as_deref(), Some("48MB"));
        for service in ["rw", "ro"] {
            assert_eq!(
                shared_buffers(&client, &ns, service).await?,
                48 << 20,
                "SHOW shared_buffers through {DB}-{service}"
            );
        }
        start_writing(&client, &ns, DB).await?;

        // 2. CPU: in place, the same containers.
        let asked = unix_now();
        let generation = patch_resources(&client, &ns, resources("150m", "256Mi")).await?;
        let (_, resized) = in_effect(&client, &ns, generation, |p| {
            p.spec.0.as_deref() == Some("150m") && p.running_cpu.as_deref() == Some("150m")
        })
        .await?;
        let cpu_done = unix_now();
        for (name, pod) in &before {
            let after = resized.get(name).ok_or_else(|| format!("{name} is gone after a CPU change"))?;
            assert_eq!(after.uid, pod.uid, "{name} was replaced for a CPU change");
            assert_eq!(after.container_id, pod.container_id, "{name}'s container changed");
            assert_eq!(after.restarts, pod.restarts, "{name}'s container restarted");
            assert_eq!(after.qos.as_deref(), Some("Guaranteed"), "{name}");
        }
        let cpu_pause = longest_pause(&client, &ns, asked, cpu_done).await?;
        println!(
            "resize: cpu 100m → 150m in place: in effect after {:.1} s, longest write pause {cpu_pause:.2} s",
            cpu_done - asked
        );

        // 3. Memory: rolled, shared_buffers follows.
        let asked = unix_now();
        let generation = patch_resources(&client, &ns, resources("150m", "320Mi")).await?;
        let (db, rolled) = in_effect(&client, &ns, generation, |p| {
            p.spec.1.as_deref() == Some("320Mi")
        })
        .await?;
        let memory_done = unix_now();
        for (name, pod) in &rolled {
            assert!(
                resized.values().all(|old| old.uid != pod.uid),
                "{name} was not replaced for a memory change"
            );
            assert_eq!(pod.qos.as_deref(), Some("Guaranteed"), "{name}");
        }
        assert_eq!(derived(&db, "shared_buffers").as_deref(), Some("64MB"));
        for service in ["rw", "ro"] {
            assert_eq!(
                shared_buffers(&client, &ns, service).await?,
                64 << 20,
                "SHOW shared_buffers through {DB}-{service} after the memory change"
            );
        }
        let memory_pause = longest_pause(&client, &ns, asked, memory_done).await?;
        println!(
            "resize: memory 256Mi → 320Mi rolled: in effect after {:.1} s, longest write pause {memory_pause:.2} s",
            memory_done - asked
        );
        let acked = nothing_lost(&client, &ns, DB).await?;
        println!("resize: {acked} acknowledged writes, none lost");
        Ok(())
    })
    .await;
}
