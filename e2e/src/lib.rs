//! The end-to-end harness: talks to whatever cluster `$KUBECONFIG` points at (the
//! local one from `e2e/cluster up`, or kind, k3d, a cloud cluster). One namespace
//! per test; on failure it prints events, pod states and logs, and the operator's
//! logs, before failing.

use std::future::Future;
use std::time::Duration;

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

/// Runs one test in a fresh namespace `<prefix>-<random>`, bounded by `timeout`.
/// On failure it dumps what the namespace (and the operator) saw, then panics; the
/// namespace is deleted either way.
pub async fn in_namespace<F, Fut>(prefix: &str, timeout: Duration, test: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
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
    let outcome = match tokio::time::timeout(timeout, test(client.clone(), name.clone())).await {
        Ok(result) => result,
        Err(_) => Err(format!("timed out after {timeout:?}").into()),
    };
    if let Err(error) = &outcome {
        eprintln!("=== e2e failure in namespace {name}: {error}");
        dump(&client, &name).await;
        dump(&client, OPERATOR_NAMESPACE).await;
    }
    let _ = namespaces.delete(&name, &DeleteParams::background()).await;
    if let Err(error) = outcome {
        panic!("{error}");
    }
}

/// Prints events, pod statuses and container logs of `namespace`.
pub async fn dump(client: &Client, namespace: &str) {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    if let Ok(list) = events.list(&ListParams::default()).await {
        eprintln!("--- events in {namespace}");
        for e in list.items {
            eprintln!(
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
        return;
    };
    for pod in list.items {
        let name = pod.name_any();
        eprintln!(
            "--- pod {namespace}/{name}: {:?}",
            pod.status.as_ref().and_then(|s| s.phase.clone())
        );
        if let Some(statuses) = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
        {
            for status in statuses {
                eprintln!(
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
            match pods.logs(&name, &params).await {
                Ok(logs) => eprintln!("--- logs {name}/{}:\n{logs}", container.name),
                Err(e) => eprintln!("--- no logs for {name}/{}: {e}", container.name),
            }
        }
    }
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

/// Server-side applies one object given as JSON, with `params` (for example strict validation).
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
    Ok(api.patch(&name, params, &Patch::Apply(&object)).await?)
}

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

/// Runs `sql` with psql from a pod in the cluster against `host` and returns psql's
/// unaligned, tuples-only output.
pub async fn sql(
    client: &Client,
    namespace: &str,
    host: &str,
    password: &str,
    database: &str,
    sql: &str,
) -> Result<String> {
    let name = format!("psql-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let url = format!("postgresql://postgres:{password}@{host}:5432/{database}?connect_timeout=5");
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

/// Applies Tusk's CRDs from `config/` and waits until both are established.
pub async fn install_crds(client: &Client) {
    let yaml = std::fs::read_to_string(repo_path("config/crd/tusk.dev.yaml"))
        .expect("config/crd/tusk.dev.yaml");
    apply_yaml(client, None, &yaml)
        .await
        .expect("apply the CRDs");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in ["databases.tusk.dev", "backups.tusk.dev"] {
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
/// runs the current image and the validating webhook answers.
pub async fn install_operator(client: &Client) {
    INSTALLED.get_or_init(|| helm_install(client)).await;
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
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let ready = wait_for(
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
    .await;
    if let Err(e) = ready {
        dump(client, OPERATOR_NAMESPACE).await;
        panic!("the operator did not become available: {e}");
    }
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
    }))
    .expect("probe manifest");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut last = String::new();
    for _ in 0..120 {
        match databases.create(&dry_run, &probe).await {
            Ok(_) => return,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    dump(client, OPERATOR_NAMESPACE).await;
    panic!("the validating webhook never answered: {last}");
}
