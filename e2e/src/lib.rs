//! The end-to-end harness: talks to whatever cluster `$KUBECONFIG` points at (the
//! local one from `e2e/cluster up`, or kind, k3d, a cloud cluster). One namespace
//! per test; on failure (an `Err`, a panicking assertion or a timeout) it prints
//! events, pod states and logs, and the operator's logs, and keeps them in a file,
//! before failing.
//!
//! Tests inside one test binary run in parallel, and several `cargo test` runs
//! may share a cluster: every test holds the [cluster lock](lock_cluster),
//! shared when it only uses the cluster, exclusive when it changes what every
//! other test relies on (the operator's install, its webhook certificate, the
//! CRDs' conversion).
//!
//! A test that cannot run where it is pointed fails and says why, unless
//! `$TUSK_E2E_ALLOW_SKIP` names its group ([`skip`]).

pub mod drills;
pub mod faults;
pub mod loopback;
pub mod outside;
pub mod plugin;
pub mod skip;
pub mod storage;
pub mod store;
pub mod tls;
pub mod writer;

use std::fmt::Write as _;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Field manager of everything the tests apply.
pub const MANAGER: &str = "tusk-e2e";
/// Namespace the operator is installed in.
pub const OPERATOR_NAMESPACE: &str = "tusk-system";

/// A client for `$KUBECONFIG`. Fails loudly when there is no cluster: the e2e tier
/// never skips silently.
pub async fn client() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        panic!(
            "KUBECONFIG is not set: run `e2e/cluster up` (or point it at a cluster) before the e2e tests"
        );
    }
    Client::try_default()
        .await
        .unwrap_or_else(|e| panic!("cannot build a client from KUBECONFIG: {e}"))
}

/// The repository root (for manifests under `config/`).
pub fn repo_path(relative: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

/// How a test uses the cluster as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterAccess {
    /// Only its own namespaces, and the operator as installed.
    Shared,
    /// Changes something every other test relies on: the operator's install,
    /// its webhook certificate, webhook configurations, the CRDs' conversion.
    Exclusive,
}

/// Held while a test uses the cluster; released on drop (the file lock with
/// the file, so a test process that dies releases it too).
#[must_use = "the cluster lock is released when the guard is dropped"]
pub struct ClusterLock {
    // All three are held only for their Drop.
    _file: std::fs::File,
    _shared: Option<RwLockReadGuard<'static, ()>>,
    _exclusive: Option<RwLockWriteGuard<'static, ()>>,
}

/// The in-process half of the cluster lock. A file lock alone would do, but
/// tokio's lock is fair: once an exclusive test queues, later shared ones wait
/// behind it instead of starving it, and waiting costs no blocking thread.
static LOCAL_LOCK: RwLock<()> = RwLock::const_new(());

tokio::task_local! {
    /// What the running test already holds, so that asking again fails at
    /// once instead of deadlocking.
    static HELD: ClusterAccess;
}

/// The file every test process locks (`flock`): one per machine, under the
/// system's temporary directory.
pub fn cluster_lock_path() -> PathBuf {
    std::env::temp_dir().join("tusk-e2e-cluster.lock")
}

/// Takes the cluster lock: shared with other tests that only use the cluster,
/// exclusive against every other test, in this process and in others.
/// [`in_namespace`] and [`install_operator`] take it themselves; a test that
/// uses neither takes it here.
pub async fn lock_cluster(access: ClusterAccess) -> ClusterLock {
    lock(&LOCAL_LOCK, cluster_lock_path(), access)
        .await
        .unwrap_or_else(|e| panic!("cannot take the cluster lock: {e}"))
}

async fn lock(
    local: &'static RwLock<()>,
    path: PathBuf,
    access: ClusterAccess,
) -> Result<ClusterLock> {
    if let Ok(held) = HELD.try_with(|held| *held) {
        panic!(
            "this test already holds the cluster lock ({held:?}); asking for it again ({access:?}) \
             would deadlock: take it once, outside in_namespace"
        );
    }
    let (shared, exclusive) = match access {
        ClusterAccess::Shared => (Some(local.read().await), None),
        ClusterAccess::Exclusive => (None, Some(local.write().await)),
    };
    let file = tokio::task::spawn_blocking(move || lock_file(&path, access)).await??;
    Ok(ClusterLock {
        _file: file,
        _shared: shared,
        _exclusive: exclusive,
    })
}

fn lock_file(path: &Path, access: ClusterAccess) -> Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let free = match access {
        ClusterAccess::Shared => file.try_lock_shared(),
        ClusterAccess::Exclusive => file.try_lock(),
    };
    match free {
        Ok(()) => return Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => eprintln!(
            "[e2e] waiting for the cluster lock ({access:?}, {}): another test process is using the cluster",
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("{}: {e}", path.display()).into());
        }
    }
    match access {
        ClusterAccess::Shared => file.lock_shared(),
        ClusterAccess::Exclusive => file.lock(),
    }
    .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(file)
}

/// Runs one test in a fresh namespace `<prefix>-<random>`, bounded by `timeout`,
/// holding the cluster lock shared. On failure (an `Err`, a panic, the timeout)
/// it dumps what the namespace (and the operator) saw, deletes the namespace,
/// and fails the same way; on success it deletes the namespace.
pub async fn in_namespace<F, Fut>(prefix: &str, timeout: Duration, test: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    run_in_namespace(ClusterAccess::Shared, prefix, timeout, test).await;
}

/// [`in_namespace`] for a test that changes cluster-wide state: no other test
/// runs beside it.
pub async fn in_namespace_exclusive<F, Fut>(prefix: &str, timeout: Duration, test: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    run_in_namespace(ClusterAccess::Exclusive, prefix, timeout, test).await;
}

/// How a test failed.
enum Failure {
    Error(Error),
    Panic(Box<dyn std::any::Any + Send>),
    Timeout(Duration),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Error(error) => write!(f, "{error}"),
            Failure::Panic(payload) => write!(f, "panicked: {}", panic_message(payload.as_ref())),
            Failure::Timeout(timeout) => write!(f, "timed out after {timeout:?}"),
        }
    }
}

/// The message a panic was raised with (what `panic!`, `assert!` and
/// `expect` carry).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)")
}

async fn run_in_namespace<F, Fut>(access: ClusterAccess, prefix: &str, timeout: Duration, test: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    // Waiting for the lock is not the test's time.
    let _cluster = lock_cluster(access).await;
    let client = client().await;
    let name = format!("{prefix}-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"tusk.dev/e2e": "true"}}
    }))
    .expect("namespace manifest");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("cannot create namespace {name}: {e}"));
    // A panicking assertion must not skip the dump and the deletion below. The
    // closure is called inside the guarded future, so a panic there counts too;
    // nothing the test touched is used after a panic but the namespace's name.
    let (test_client, test_namespace) = (client.clone(), name.clone());
    let guarded =
        AssertUnwindSafe(async move { test(test_client, test_namespace).await }).catch_unwind();
    let failure = match tokio::time::timeout(timeout, HELD.scope(access, guarded)).await {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(error))) => Some(Failure::Error(error)),
        Ok(Err(payload)) => Some(Failure::Panic(payload)),
        Err(_) => Some(Failure::Timeout(timeout)),
    };
    if let Some(failure) = &failure {
        report_failure(&client, &name, &failure.to_string()).await;
    }
    let _ = namespaces.delete(&name, &DeleteParams::background()).await;
    match failure {
        None => {}
        // The original payload, so the test fails with its own message (the
        // panic hook printed it, with its location, when it happened).
        Some(Failure::Panic(payload)) => std::panic::resume_unwind(payload),
        Some(failure) => panic!("{failure}"),
    }
}

/// Where [`in_namespace`] keeps the report of a failed test: `<dir>/<namespace>.log`.
pub fn failure_reports_dir() -> PathBuf {
    std::env::temp_dir().join("tusk-e2e-failures")
}

/// Prints what `namespace` and the operator saw, and keeps it in
/// [`failure_reports_dir`] (the terminal's scrollback is not always there
/// when someone looks).
async fn report_failure(client: &Client, namespace: &str, failure: &str) {
    let mut report = format!("=== e2e failure in namespace {namespace}: {failure}\n");
    report.push_str(&describe(client, namespace).await);
    report.push_str(&describe(client, OPERATOR_NAMESPACE).await);
    eprint!("{report}");
    let dir = failure_reports_dir();
    let path = dir.join(format!("{namespace}.log"));
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &report)) {
        Ok(()) => eprintln!("=== report kept in {}", path.display()),
        Err(e) => eprintln!("=== cannot keep the report in {}: {e}", path.display()),
    }
}

/// Prints events, pod statuses and container logs of `namespace`.
pub async fn dump(client: &Client, namespace: &str) {
    eprint!("{}", describe(client, namespace).await);
}

/// Events, pod statuses and container logs of `namespace`, as text.
pub async fn describe(client: &Client, namespace: &str) -> String {
    // Writing into a String cannot fail.
    let mut out = String::new();
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    if let Ok(list) = events.list(&ListParams::default()).await {
        let _ = writeln!(out, "--- events in {namespace}");
        for e in list.items {
            let _ = writeln!(
                out,
                "{} {} {}/{}: {}",
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.involved_object.kind.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default(),
                e.message.unwrap_or_default()
            );
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return out;
    };
    for pod in list.items {
        let name = pod.name_any();
        let _ = writeln!(
            out,
            "--- pod {namespace}/{name}: {:?}",
            pod.status.as_ref().and_then(|s| s.phase.clone())
        );
        if let Some(statuses) = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
        {
            for status in statuses {
                let _ = writeln!(
                    out,
                    "    {} ready={} state={:?}",
                    status.name, status.ready, status.state
                );
            }
        }
        for container in pod.spec.iter().flat_map(|s| s.containers.iter()) {
            let params = LogParams {
                container: Some(container.name.clone()),
                tail_lines: Some(200),
                ..LogParams::default()
            };
            let _ = match pods.logs(&name, &params).await {
                Ok(logs) => writeln!(out, "--- logs {name}/{}:\n{logs}", container.name),
                Err(e) => writeln!(out, "--- no logs for {name}/{}: {e}", container.name),
            };
        }
    }
    out
}

/// Server-side applies every document of a YAML stream; `namespace` overrides the
/// namespace of namespaced objects that do not name one.
pub async fn apply_yaml(
    client: &Client,
    namespace: Option<&str>,
    yaml: &str,
) -> Result<Vec<DynamicObject>> {
    let mut applied = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let value = <Value as serde::Deserialize>::deserialize(document)?;
        if value.is_null() {
            continue;
        }
        applied.push(
            apply_value(
                client,
                namespace,
                value,
                &PatchParams::apply(MANAGER).force(),
            )
            .await?,
        );
    }
    Ok(applied)
}

/// Server-side applies one object given as JSON, with `params` (for example
/// strict validation), retrying for a while when a webhook cannot be reached.
pub async fn apply_value(
    client: &Client,
    namespace: Option<&str>,
    value: Value,
    params: &PatchParams,
) -> Result<DynamicObject> {
    let object: DynamicObject = serde_json::from_value(value)?;
    let types = object
        .types
        .as_ref()
        .ok_or("object without apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(types)?;
    let (resource, capabilities) = discovery::pinned_kind(client, &gvk).await?;
    let name = object.name_any();
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let ns = object
                .namespace()
                .or(namespace.map(str::to_owned))
                .ok_or("namespaced object without a namespace")?;
            Api::namespaced_with(client.clone(), &ns, &resource)
        }
    };
    // A webhook that cannot be reached (the operator's pod being replaced:
    // its Service still routes to the old one for a moment) is a transient
    // failure a real client retries; a webhook's refusal is not retried.
    let deadline = Instant::now() + WEBHOOK_UNREACHABLE_FOR;
    loop {
        match api.patch(&name, params, &Patch::Apply(&object)).await {
            Err(kube::Error::Api(status))
                if status.message.contains("failed calling webhook")
                    && Instant::now() < deadline =>
            {
                eprintln!("applying {name}: {} (retrying)", status.message);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            result => return Ok(result?),
        }
    }
}

/// How long [`apply_value`] retries while a webhook cannot be reached.
const WEBHOOK_UNREACHABLE_FOR: Duration = Duration::from_secs(60);

/// Polls `name` until `ready` holds, or fails after `timeout` with the last state seen.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    ready: impl Fn(&K) -> bool,
) -> Result<K>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match api.get_opt(name).await {
            Ok(Some(object)) if ready(&object) => return Ok(object),
            Ok(other) => other.map(|o| format!("{o:?}")),
            Err(e) => Some(format!("error: {e}")),
        };
        if tokio::time::Instant::now() >= deadline {
            let last = last.unwrap_or_else(|| "absent".to_owned());
            return Err(format!("{name} not ready after {timeout:?}; last seen: {last}").into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A v1 Database manifest.
pub fn database(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "tusk.dev/v1", "kind": "Database", "metadata": {"name": name}, "spec": spec})
}

/// How long a Database may take to turn Ready in the e2e suites.
pub const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// Waits until the Database is Ready with `instances` ready instances at the
/// current generation.
pub async fn wait_ready(client: &Client, ns: &str, name: &str, instances: i32) -> Result<Database> {
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    wait_for(&databases, name, READY_TIMEOUT, |db| {
        db.status.as_ref().is_some_and(|s| {
            s.phase == Some(DatabasePhase::Ready)
                && s.observed_generation == db.metadata.generation
                && s.ready_instances == Some(instances)
                && s.instances.len() == usize::try_from(instances).unwrap_or(0)
        })
    })
    .await
}

/// A Database's Ready condition as (status, reason, message).
pub fn ready_condition(db: &Database) -> Option<(String, String, String)> {
    db.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Whether a Pod's Ready condition is true.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a Pod finished (Succeeded or Failed).
pub fn pod_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// A restricted-profile security context for test pods.
pub fn restricted(uid: i64) -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "runAsUser": uid,
        "seccompProfile": {"type": "RuntimeDefault"}
    })
}

/// Runs a one-shot pod to completion and returns its phase and logs.
pub async fn run_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    image: &str,
    command: &[&str],
    volumes: Value,
    mounts: Value,
) -> Result<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"fsGroup": 999},
            "volumes": volumes,
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": command, "volumeMounts": mounts,
                "securityContext": restricted(999)
            }]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let done = wait_for(&pods, name, Duration::from_secs(180), pod_finished).await?;
    let phase = done.status.and_then(|s| s.phase).unwrap_or_default();
    let logs = pods.logs(name, &LogParams::default()).await?;
    Ok((phase, logs))
}

/// Runs `sql` with psql from a pod in the cluster against `host` as the superuser
/// and returns psql's unaligned, tuples-only output.
pub async fn sql(
    client: &Client,
    namespace: &str,
    host: &str,
    password: &str,
    database: &str,
    sql: &str,
) -> Result<String> {
    sql_as(
        client,
        namespace,
        host,
        ("postgres", password),
        database,
        sql,
    )
    .await
}

/// [`sql`] as the role `user` with its `password`.
pub async fn sql_as(
    client: &Client,
    namespace: &str,
    host: &str,
    (user, password): (&str, &str),
    database: &str,
    sql: &str,
) -> Result<String> {
    let name = format!("psql-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let url = format!("postgresql://{user}:{password}@{host}:5432/{database}?connect_timeout=5");
    let (phase, logs) = run_pod(
        client,
        namespace,
        &name,
        "localhost/postgres:17",
        &["psql", &url, "-v", "ON_ERROR_STOP=1", "-Atc", sql],
        json!([]),
        json!([]),
    )
    .await?;
    if phase != "Succeeded" {
        return Err(format!("psql pod {name} ended {phase}: {logs}").into());
    }
    Ok(logs.trim().to_owned())
}

/// Applies Tusk's CRDs from `config/` and waits until both are established,
/// holding the cluster lock exclusive (every other test reads through them):
/// call it before [`in_namespace`], not inside.
pub async fn install_crds(client: &Client) {
    let _cluster = lock_cluster(ClusterAccess::Exclusive).await;
    let yaml = std::fs::read_to_string(repo_path("config/crd/tusk.dev.yaml"))
        .expect("config/crd/tusk.dev.yaml");
    apply_yaml(client, None, &yaml)
        .await
        .expect("apply the CRDs");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in tusk::api::crd::NAMES {
        wait_for(&crds, name, Duration::from_secs(60), |crd| {
            crd.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
        })
        .await
        .expect("CRD established");
    }
}

/// The helm binary: `$HELM`, else the one `scripts/install-tools` builds (and caches).
pub fn helm() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("HELM").filter(|p| !p.is_empty()) {
        return path.into();
    }
    let output = std::process::Command::new(repo_path("scripts/install-tools"))
        .args(["--path", "helm"])
        .output()
        .expect("run scripts/install-tools --path helm");
    assert!(
        output.status.success(),
        "scripts/install-tools --path helm failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().into()
}

/// Runs helm with `args`; panics with its output when it fails.
pub fn run_helm(args: &[&str]) -> String {
    let output = std::process::Command::new(helm())
        .args(args)
        .current_dir(repo_path(""))
        .output()
        .expect("run helm");
    assert!(
        output.status.success(),
        "helm {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// One install per test process: concurrent `helm upgrade`s of one release
/// refuse each other.
static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Installs the operator with its Helm chart (release `tusk` in `tusk-system`,
/// the local images from e2e/values-local.yaml) and waits until every replica
/// runs the current image and the validating webhook answers. The first call
/// of a test process holds the cluster lock exclusive while it installs (an
/// upgrade can roll the operator and rewrite the CRDs and webhooks), so call it
/// before [`in_namespace`], not inside.
pub async fn install_operator(client: &Client) {
    if let Ok(held) = HELD.try_with(|held| *held) {
        panic!(
            "install_operator inside in_namespace (which holds the cluster lock {held:?}) could \
             deadlock: call it before in_namespace"
        );
    }
    INSTALLED
        .get_or_init(|| async {
            let _cluster = lock_cluster(ClusterAccess::Exclusive).await;
            helm_install(client).await;
        })
        .await;
}

/// Once every replica of the operator's Deployment runs its current template
/// and is available, and its validating webhook answers (after a Helm install
/// or upgrade changed it).
pub async fn operator_rolled_out(client: &Client) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    wait_for(
        &deployments,
        "tusk-operator",
        Duration::from_secs(240),
        |d| {
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            d.status.as_ref().is_some_and(|s| {
                s.observed_generation == d.metadata.generation
                    && s.updated_replicas == Some(want)
                    && s.available_replicas == Some(want)
                    && s.replicas == Some(want)
            })
        },
    )
    .await?;
    // An available pod is not yet a reachable webhook: the Service's endpoints
    // and the node's proxy rules follow a moment later. A dry-run create passes
    // through admission without storing anything.
    let databases: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        OPERATOR_NAMESPACE,
        &kube::api::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("tusk.dev", "v1", "Database"),
            "databases",
        ),
    );
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "tusk.dev/v1", "kind": "Database",
        "metadata": {"name": "webhook-probe"},
        "spec": {"version": "17", "instances": 1, "storage": {"size": "1Gi"}}
    }))?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut last = String::new();
    for _ in 0..120 {
        match databases.create(&dry_run, &probe).await {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("the validating webhook never answered: {last}").into())
}

async fn helm_install(client: &Client) {
    // The chart's namespace needs Pod Security "restricted", which Helm's
    // --create-namespace cannot label.
    let namespace = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": OPERATOR_NAMESPACE,
                     "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}
    });
    apply_value(
        client,
        None,
        namespace,
        &PatchParams::apply(MANAGER).force(),
    )
    .await
    .expect("the operator's namespace");
    let mut args = vec![
        "upgrade",
        "--install",
        "tusk",
        "helm/tusk",
        "--namespace",
        OPERATOR_NAMESPACE,
        "--values",
        "e2e/values-local.yaml",
        // Objects an earlier `kubectl apply -f config/` created become the release's.
        "--take-ownership",
        "--timeout",
        "5m",
    ];
    // The tag stays `localhost/tusk:dev` while the image behind it changes; the
    // image's id in the pod template rolls the operator onto a rebuilt image.
    let image_id = std::env::var("TUSK_IMAGE_ID").unwrap_or_default();
    let annotation = format!("podAnnotations.tusk\\.dev/image-id={image_id}");
    if !image_id.is_empty() {
        args.extend(["--set-string", &annotation]);
    }
    let helm_args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = helm_args.iter().map(String::as_str).collect();
        run_helm(&refs)
    })
    .await
    .expect("helm upgrade --install");
    if let Err(e) = operator_rolled_out(client).await {
        dump(client, OPERATOR_NAMESPACE).await;
        panic!("the operator did not come up: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{File, TryLockError};

    use super::*;

    /// A lock file of the test's own, so that these tests neither wait for
    /// nor block a real e2e run.
    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tusk-e2e-lock-test-{name}-{}", std::process::id()))
    }

    /// What another process sees: `flock` locks belong to the open file, so a
    /// second open of the path stands in for another process.
    fn other_process(path: &Path) -> File {
        File::open(path).expect("open the lock file again")
    }

    #[tokio::test]
    async fn shared_holders_share_and_keep_an_exclusive_one_out() {
        static LOCAL: RwLock<()> = RwLock::const_new(());
        let path = scratch("shared");
        let first = lock(&LOCAL, path.clone(), ClusterAccess::Shared)
            .await
            .expect("first");
        let second = lock(&LOCAL, path.clone(), ClusterAccess::Shared)
            .await
            .expect("second");
        assert!(
            LOCAL.try_write().is_err(),
            "an exclusive holder got in beside shared ones"
        );
        let other = other_process(&path);
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        other
            .try_lock_shared()
            .expect("another process shares a shared lock");
        other.unlock().expect("unlock");
        drop((first, second));
        other
            .try_lock()
            .expect("free once every shared holder is gone");
        let _ = std::fs::remove_file(path);
    }

    #[tokio::test]
    async fn an_exclusive_holder_keeps_everyone_out_until_dropped() {
        static LOCAL: RwLock<()> = RwLock::const_new(());
        let path = scratch("exclusive");
        let held = lock(&LOCAL, path.clone(), ClusterAccess::Exclusive)
            .await
            .expect("exclusive");
        assert!(
            LOCAL.try_read().is_err(),
            "a shared holder got in beside an exclusive one"
        );
        let other = other_process(&path);
        assert!(matches!(
            other.try_lock_shared(),
            Err(TryLockError::WouldBlock)
        ));
        drop(held);
        other
            .try_lock()
            .expect("free once the exclusive holder is gone");
        other.unlock().expect("unlock");
        let again = lock(&LOCAL, path.clone(), ClusterAccess::Shared).await;
        assert!(again.is_ok(), "the lock is not reusable");
        let _ = std::fs::remove_file(path);
    }

    #[tokio::test]
    async fn asking_again_inside_a_held_lock_fails_instead_of_deadlocking() {
        static LOCAL: RwLock<()> = RwLock::const_new(());
        let path = scratch("reentrant");
        let nested = HELD.scope(ClusterAccess::Shared, async {
            AssertUnwindSafe(lock(&LOCAL, path.clone(), ClusterAccess::Exclusive))
                .catch_unwind()
                .await
        });
        let payload = nested.await.err().expect("a nested lock was granted");
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            message.contains("already holds the cluster lock"),
            "{message}"
        );
        let _ = std::fs::remove_file(path);
    }
}
