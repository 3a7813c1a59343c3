//! The OLM bundle in `bundle/`, installed by a real Operator Lifecycle Manager:
//! OLM's `olm` and `catalog` operators (v0.42.0, built by scripts/install-tools)
//! run as host processes against the cluster, a file-based catalog made from the
//! bundle is served by `opm serve`, and a Subscription installs Tusk from it. The
//! bundle is unpacked from its image by OLM's own unpack Job, the CSV must reach
//! Succeeded, and the operator OLM deployed must then turn a Database Ready, answer
//! through the validating webhook OLM registered, and convert to v1alpha1 through
//! the CRDs' conversion webhook OLM rewired with its own certificates.
//!
//! The suite stands alone, on a fresh cluster as on one where Tusk already
//! runs (the other suites' Helm install, or `make demo` with its Database
//! `orders` in namespace `demo`). It holds the cluster lock exclusive: OLM
//! takes the CRDs' conversion over, and an operator installed before (Helm's,
//! in tusk-system) is scaled to zero and its webhook configuration removed for
//! the duration. Everything it changed outside its own namespaces is put back
//! as it was afterwards: the CRDs (or removed, when OLM brought them), the
//! webhook configuration, the replicas, the OLMConfig.
//!
//! Databases it did not create are left alone: the operator OLM deploys
//! watches only the suite's namespace (the Subscription's `config.env`, and
//! preset in the suite's copy of the bundle, see `bundle_watching`). It
//! would otherwise adopt them, and as it names its images as the bundle does
//! (`ghcr.io/tusk-dev/tusk:0.1.0`, `postgres`) where the Helm install names the
//! local ones, rebuild their pods, and the Helm install would rebuild them
//! again afterwards (today's build, which cannot roll pods yet, marks them
//! Blocked instead until the Helm install returns). So they go unreconciled
//! for a few minutes, as during an operator upgrade, and the suite fails if
//! any of their pods was replaced or a Ready one stopped being Ready.
//!   cargo test --manifest-path e2e/Cargo.toml --test olm

use std::collections::BTreeMap;
use std::io::Read;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;
use tusk_e2e::{
    ClusterAccess, MANAGER, OPERATOR_NAMESPACE, Result, apply_value, database, dump, lock_cluster,
    panic_message, pod_finished, repo_path, wait_for, wait_ready,
};

const CSV: &str = "tusk.v0.1.0";
const CRDS: [&str; 3] = tusk::api::crd::NAMES;
/// The operator an earlier install runs (Helm's, or `config/`'s).
const OPERATOR: &str = "tusk-operator";
/// Its validating webhooks.
const VALIDATING: &str = "tusk-validating";
const CSV_TIMEOUT: Duration = Duration::from_secs(480);

// ---------------------------------------------------------------------------
// Host processes: killed (and reaped) when dropped, pass or fail.

struct HostProcess {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl HostProcess {
    fn start(name: &'static str, logs: &Path, program: &str, args: &[&str]) -> Result<Self> {
        let log = logs.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("cannot start {name} ({program}): {e}"))?;
        eprintln!(
            "[olm] started {name} (pid {}), log {}",
            child.id(),
            log.display()
        );
        Ok(Self { name, child, log })
    }

    /// Fails when the process already exited (with the end of its log).
    fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            return Err(format!("{} exited ({status}):\n{}", self.name, self.tail(40)).into());
        }
        Ok(())
    }

    fn tail(&self, lines: usize) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut text);
        }
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        // our own child, by its pid
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("[olm] stopped {} (log {})", self.name, self.log.display());
    }
}

// ---------------------------------------------------------------------------
// Helpers

fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn csv_resource() -> ApiResource {
    api_resource(
        "operators.coreos.com",
        "v1alpha1",
        "ClusterServiceVersion",
        "clusterserviceversions",
    )
}

/// Writes into `dir` the bundle as generated, with one change: the operator's
/// `TUSK_WATCH_NAMESPACES` preset to `namespace`. A Subscription's `config.env`
/// does not reach the Deployment's first revision (OLM adds it in a second one,
/// operator-lifecycle-manager#2100), and for those seconds an operator watching
/// every namespace would reconcile Databases that are not the suite's with the
/// bundle's default images.
fn bundle_watching(namespace: &str, dir: &Path) -> Result<()> {
    const UNSET: &str = "- name: TUSK_WATCH_NAMESPACES\n                  value: ''\n";
    let source = repo_path("bundle");
    for sub in ["", "manifests", "metadata"] {
        std::fs::create_dir_all(dir.join(sub))?;
        for entry in std::fs::read_dir(source.join(sub))? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::copy(entry.path(), dir.join(sub).join(entry.file_name()))?;
            }
        }
    }
    let csv = dir.join("manifests/tusk.clusterserviceversion.yaml");
    let text = std::fs::read_to_string(&csv)?;
    if text.matches(UNSET).count() != 1 {
        return Err(format!(
            "{} does not set TUSK_WATCH_NAMESPACES to '' exactly once",
            csv.display()
        )
        .into());
    }
    let preset = UNSET.replace("''", namespace);
    std::fs::write(&csv, text.replace(UNSET, &preset))?;
    Ok(())
}

/// Runs e2e/olm/prepare (images, catalog, OLM CRDs) on `bundle` and returns
/// its KEY=VALUE output.
fn prepare(bundle: &Path) -> Result<BTreeMap<String, String>> {
    let output = Command::new(repo_path("e2e/olm/prepare"))
        .env("TUSK_OLM_BUNDLE", bundle)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run e2e/olm/prepare: {e}"))?;
    if !output.status.success() {
        return Err(format!("e2e/olm/prepare failed ({})", output.status).into());
    }
    Ok(String::from_utf8(output.stdout)?
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn wait_port(port: u16, process: &mut HostProcess) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        process.check_running()?;
        if Instant::now() > deadline {
            return Err(
                format!("nothing listens on 127.0.0.1:{port}:\n{}", process.tail(20)).into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn conditions_of(object: &DynamicObject) -> String {
    let status = object.data.get("status").cloned().unwrap_or(Value::Null);
    format!(
        "phase={} reason={} message={} conditions={}",
        status["phase"],
        status["reason"],
        status["message"],
        serde_json::to_string_pretty(&status["conditions"]).unwrap_or_default()
    )
}

// ---------------------------------------------------------------------------
// The test

struct Setup {
    operator_ns: String,
    db_ns: String,
    /// OLM labels every namespace an OperatorGroup targets with the group's uid.
    operator_group_uid: OnceLock<String>,
}

#[tokio::test]
async fn olm_installs_the_bundle_and_its_operator_runs_a_database() {
    let started = Instant::now();
    // OLM rewires the CRDs' conversion and the operator installed before steps
    // aside: no other test may use the cluster meanwhile.
    let _cluster = lock_cluster(ClusterAccess::Exclusive).await;
    let client = tusk_e2e::client().await;
    let suffix = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let setup = Setup {
        operator_ns: format!("e2e-olm-{suffix}"),
        db_ns: format!("e2e-olm-db-{suffix}"),
        operator_group_uid: OnceLock::new(),
    };

    // The operator installed before is about to stop: deletions under way
    // (the suites before this one delete their namespaces in the background)
    // need it for their finalizers, so they finish first.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let installed = deployments
        .get_opt(OPERATOR)
        .await
        .unwrap_or_else(|e| panic!("cannot read {OPERATOR_NAMESPACE}/{OPERATOR}: {e}"));
    if installed.is_some()
        && let Err(error) = wait_for_deletions(&client).await
    {
        panic!("the OLM suite cannot stop the installed operator yet: {error}");
    }
    let before = Before::take(&client)
        .await
        .unwrap_or_else(|e| panic!("cannot read what the cluster runs before the OLM suite: {e}"));
    eprintln!("[olm] before: {}", before.summary());

    let bundle = std::env::temp_dir().join(format!("tusk-olm-bundle-{suffix}"));
    bundle_watching(&setup.db_ns, &bundle).expect("the suite's bundle");
    let prepared = bundle.clone();
    let env = tokio::task::spawn_blocking(move || prepare(&prepared))
        .await
        .expect("prepare")
        .expect("e2e/olm/prepare");
    let _ = std::fs::remove_dir_all(&bundle);
    let get = |key: &str| {
        env.get(key)
            .cloned()
            .unwrap_or_else(|| panic!("prepare printed no {key}"))
    };
    let logs = std::env::temp_dir().join(format!("tusk-olm-{suffix}"));
    std::fs::create_dir_all(&logs).expect("log dir");
    eprintln!("[olm] logs in {}", logs.display());

    let mut processes: Vec<HostProcess> = Vec::new();
    // A panic in the test (an `expect`, a failed assertion) must not skip the
    // clean-up and the restore below.
    let outcome = AssertUnwindSafe(run(&client, &setup, &before, &get, &logs, &mut processes))
        .catch_unwind()
        .await;
    let failure = match &outcome {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(payload) => Some(format!("panicked: {}", panic_message(payload.as_ref()))),
    };
    if let Some(failure) = &failure {
        eprintln!("=== OLM e2e failure: {failure}");
        report(&client, &setup).await;
        for p in &processes {
            eprintln!(
                "--- last lines of {} ({}):\n{}",
                p.name,
                p.log.display(),
                p.tail(60)
            );
        }
    }
    cleanup(&client, &setup).await;
    drop(processes); // stops catalog, olm and opm serve
    leftovers(&client, &setup).await;
    let restored = before.restore(&client).await;
    let untouched = before.bystanders_untouched(&client).await;
    eprintln!("[olm] done in {:.0?}", started.elapsed());
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => panic!("{error}"),
        Err(payload) => std::panic::resume_unwind(payload),
    }
    if let Err(error) = restored {
        panic!("the cluster was not put back as it was: {error}");
    }
    if let Err(error) = untouched {
        panic!("{error}");
    }
}

fn database_resource() -> ApiResource {
    api_resource("tusk.dev", "v1", "Database", "databases")
}

fn backup_resource() -> ApiResource {
    api_resource("tusk.dev", "v1", "Backup", "backups")
}

/// Every Database or Backup, in all namespaces; none when the CRDs are not
/// installed.
async fn tusk_objects(client: &Client) -> Result<Vec<DynamicObject>> {
    let mut objects = Vec::new();
    for resource in [database_resource(), backup_resource()] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.list(&ListParams::default()).await {
            Ok(list) => objects.extend(list.items),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(objects)
}

/// Waits (up to 5 min) until no Database or Backup is being deleted, in any
/// namespace (itself, or with its namespace). Those that stay are not this
/// suite's business.
async fn wait_for_deletions(client: &Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut announced = false;
    loop {
        let terminating: Vec<String> = namespaces
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| n.metadata.deletion_timestamp.is_some())
            .map(|n| n.name_any())
            .collect();
        let going: Vec<String> = tusk_objects(client)
            .await?
            .into_iter()
            .filter(|o| {
                o.metadata.deletion_timestamp.is_some()
                    || o.namespace().is_some_and(|ns| terminating.contains(&ns))
            })
            .map(|o| {
                let kind = o
                    .types
                    .as_ref()
                    .map(|t| t.kind.as_str())
                    .unwrap_or_default();
                format!(
                    "{kind} {}/{}",
                    o.namespace().unwrap_or_default(),
                    o.name_any()
                )
            })
            .collect();
        if going.is_empty() {
            return Ok(());
        }
        if !announced {
            eprintln!("[olm] waiting for deletions under way: {going:?}");
            announced = true;
        }
        if Instant::now() > deadline {
            return Err(format!("still being deleted after 5 min: {going:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The label selector of a Deployment's pods.
fn pod_selector(deployment: &Deployment) -> String {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// A stored object's metadata reduced to what a create may carry.
fn recreatable(meta: &kube::core::ObjectMeta) -> kube::core::ObjectMeta {
    kube::core::ObjectMeta {
        name: meta.name.clone(),
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        ..kube::core::ObjectMeta::default()
    }
}

/// What the cluster had before the suite that the suite changes, to put back
/// afterwards, and the pods of Databases it did not create, to check that
/// they were left alone.
struct Before {
    /// The Tusk CRDs, as they were (`None`: not installed).
    crds: Vec<(&'static str, Option<CustomResourceDefinition>)>,
    /// The installed operator's Deployment (`None`: no operator).
    operator: Option<Deployment>,
    webhooks: Option<ValidatingWebhookConfiguration>,
    olm_config: Option<DynamicObject>,
    /// Namespace, name and uid of every PostgreSQL pod Tusk runs.
    bystanders: Vec<(String, String, Option<String>)>,
    /// Every Database that was Ready: namespace, name, uid, and since when.
    ready: Vec<(String, String, Option<String>, Time)>,
}

/// The Ready condition of a Database that is Ready, at its generation.
fn ready_condition(db: &Database) -> Option<&Condition> {
    let status = db.status.as_ref()?;
    if status.phase != Some(DatabasePhase::Ready)
        || status.observed_generation != db.metadata.generation
    {
        return None;
    }
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
}

fn olm_config_api(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &api_resource("operators.coreos.com", "v1", "OLMConfig", "olmconfigs"),
    )
}

impl Before {
    async fn take(client: &Client) -> Result<Self> {
        let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mut crds = Vec::new();
        for name in CRDS {
            crds.push((name, crd_api.get_opt(name).await?));
        }
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
        let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        // Before prepare, OLM's CRDs may not be installed yet.
        let olm_config = match olm_config_api(client).get_opt("cluster").await {
            Ok(config) => config,
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(e) => return Err(e.into()),
        };
        let pods: Api<Pod> = Api::all(client.clone());
        let bystanders = pods
            .list(&ListParams::default().labels("tusk.dev/database"))
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                (
                    p.namespace().unwrap_or_default(),
                    p.name_any(),
                    p.metadata.uid,
                )
            })
            .collect();
        let databases: Api<Database> = Api::all(client.clone());
        let ready = match databases.list(&ListParams::default()).await {
            Ok(list) => list.items,
            // No CRD yet: a fresh cluster.
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(e) => return Err(e.into()),
        }
        .iter()
        .filter(|db| db.metadata.deletion_timestamp.is_none())
        .filter_map(|db| {
            let since = ready_condition(db)?.last_transition_time.clone();
            Some((
                db.namespace().unwrap_or_default(),
                db.name_any(),
                db.metadata.uid.clone(),
                since,
            ))
        })
        .collect();
        Ok(Self {
            crds,
            operator: deployments.get_opt(OPERATOR).await?,
            webhooks: vwcs.get_opt(VALIDATING).await?,
            olm_config,
            bystanders,
            ready,
        })
    }

    fn summary(&self) -> String {
        let crds: Vec<&str> = self
            .crds
            .iter()
            .filter(|(_, crd)| crd.is_some())
            .map(|(name, _)| *name)
            .collect();
        let operator = self.operator.as_ref().map(|d| {
            let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            format!("{OPERATOR_NAMESPACE}/{OPERATOR} with {replicas} replicas")
        });
        format!(
            "CRDs {crds:?}, operator {operator:?}, webhooks {VALIDATING}: {}, OLMConfig: {}, {} Ready Databases, {} PostgreSQL pods",
            self.webhooks.is_some(),
            self.olm_config.is_some(),
            self.ready.len(),
            self.bystanders.len()
        )
    }

    /// Puts back what the suite changed; tries every step and reports all
    /// that failed.
    async fn restore(&self, client: &Client) -> Result<()> {
        let mut problems = Vec::new();
        for (name, saved) in &self.crds {
            let restored = match saved {
                Some(saved) => restore_crd(client, name, saved).await,
                None => remove_crd(client, name).await,
            };
            if let Err(e) = restored {
                problems.push(format!("CRD {name}: {e}"));
            }
        }
        if let Some(saved) = &self.webhooks {
            let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            let recreated = ValidatingWebhookConfiguration {
                metadata: recreatable(&saved.metadata),
                webhooks: saved.webhooks.clone(),
            };
            match vwcs.get_opt(VALIDATING).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    if let Err(e) = vwcs.create(&PostParams::default(), &recreated).await {
                        problems.push(format!("{VALIDATING}: {e}"));
                    }
                }
                Err(e) => problems.push(format!("{VALIDATING}: {e}")),
            }
        }
        match &self.olm_config {
            Some(saved) => {
                if let Err(e) = restore_olm_config(client, saved).await {
                    problems.push(format!("OLMConfig: {e}"));
                }
            }
            None => {
                let _ = olm_config_api(client)
                    .delete("cluster", &DeleteParams::default())
                    .await;
            }
        }
        if let Some(operator) = &self.operator
            && let Err(e) = restore_operator(client, operator).await
        {
            problems.push(format!("{OPERATOR_NAMESPACE}/{OPERATOR}: {e}"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; ").into())
        }
    }

    /// Fails when a Database the suite did not create was disturbed: one of
    /// its PostgreSQL pods replaced or removed, or, for one that was Ready, its
    /// Ready condition no longer the one it had (it turned not Ready, perhaps
    /// and back). The operator OLM deployed ran long enough to turn the
    /// suite's own Database Ready, well after its first pass over every
    /// Database it watches: one that adopted other namespaces' Databases would
    /// have acted on them by then.
    async fn bystanders_untouched(&self, client: &Client) -> Result<()> {
        let mut disturbed = Vec::new();
        for (ns, name, uid) in &self.bystanders {
            let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
            match pods.get_opt(name).await? {
                Some(pod) if pod.metadata.uid == *uid => {}
                Some(_) => disturbed.push(format!("pod {ns}/{name} was replaced")),
                None => disturbed.push(format!("pod {ns}/{name} is gone")),
            }
        }
        for (ns, name, uid, since) in &self.ready {
            let databases: Api<Database> = Api::namespaced(client.clone(), ns);
            let Some(db) = databases.get_opt(name).await? else {
                disturbed.push(format!("Database {ns}/{name} is gone"));
                continue;
            };
            if db.metadata.uid != *uid {
                disturbed.push(format!("Database {ns}/{name} was replaced"));
                continue;
            }
            match ready_condition(&db) {
                Some(ready) if ready.last_transition_time == *since => {}
                Some(ready) => disturbed.push(format!(
                    "Database {ns}/{name} was Ready since {}, now since {}: it was not Ready meanwhile",
                    since.0, ready.last_transition_time.0
                )),
                None => {
                    let status = db.status.as_ref();
                    let phase = status.and_then(|s| s.phase.as_ref());
                    let ready = status
                        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                        .map(|c| format!("{} {}: {}", c.status, c.reason, c.message));
                    disturbed.push(format!(
                        "Database {ns}/{name} is no longer Ready: phase {phase:?}, Ready {ready:?}"
                    ));
                }
            }
        }
        eprintln!(
            "[olm] other Databases checked: {} Ready, {} PostgreSQL pods",
            self.ready.len(),
            self.bystanders.len()
        );
        if disturbed.is_empty() {
            Ok(())
        } else {
            Err(
                format!("the OLM suite disturbed Databases it did not create: {disturbed:?}")
                    .into(),
            )
        }
    }
}

/// Gives the OLMConfig back the spec it had (a merge patch would keep the
/// suite's `disableCopiedCSVs`).
async fn restore_olm_config(client: &Client, saved: &DynamicObject) -> Result<()> {
    let api = olm_config_api(client);
    let Some(mut current) = api.get_opt("cluster").await? else {
        return Ok(());
    };
    current.data["spec"] = saved.data.get("spec").cloned().unwrap_or(json!({}));
    api.replace("cluster", &PostParams::default(), &current)
        .await?;
    Ok(())
}

/// Gives the CRD back its spec (conversion included), labels and annotations.
async fn restore_crd(client: &Client, name: &str, saved: &CustomResourceDefinition) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for _ in 0..5 {
        let Some(mut current) = crds.get_opt(name).await? else {
            let recreated = CustomResourceDefinition {
                metadata: recreatable(&saved.metadata),
                spec: saved.spec.clone(),
                status: None,
            };
            crds.create(&PostParams::default(), &recreated).await?;
            return Ok(());
        };
        current.metadata.labels = saved.metadata.labels.clone();
        current.metadata.annotations = saved.metadata.annotations.clone();
        current.spec = saved.spec.clone();
        match crds.replace(name, &PostParams::default(), &current).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err("5 conflicting writes".into())
}

/// Removes a CRD that only OLM brought, unless someone stored objects in it
/// meanwhile (deleting it would delete them).
async fn remove_crd(client: &Client, name: &str) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(name).await?.is_none() {
        return Ok(());
    }
    let resource = if name == "backups.tusk.dev" {
        backup_resource()
    } else {
        database_resource()
    };
    let objects: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let left = objects.list(&ListParams::default()).await?.items;
    if !left.is_empty() {
        let names: Vec<String> = left
            .iter()
            .map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()))
            .collect();
        return Err(format!("OLM installed it and it now holds {names:?}; left in place").into());
    }
    crds.delete(name, &DeleteParams::default()).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while crds.get_opt(name).await?.is_some() {
        if Instant::now() > deadline {
            return Err("still there 60 s after its deletion".into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// Scales the installed operator back and waits until it answers as both the
/// validating and the conversion webhook again.
async fn restore_operator(client: &Client, saved: &Deployment) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let replicas = saved.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    deployments
        .patch(
            OPERATOR,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await?;
    wait_for(&deployments, OPERATOR, Duration::from_secs(240), |d| {
        d.status.as_ref().is_some_and(|s| {
            s.observed_generation == d.metadata.generation
                && s.updated_replicas == Some(replicas)
                && s.available_replicas == Some(replicas)
        })
    })
    .await?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let v1: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), OPERATOR_NAMESPACE, &database_resource());
    let v1alpha1: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        OPERATOR_NAMESPACE,
        &api_resource("tusk.dev", "v1alpha1", "Database", "databases"),
    );
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "tusk.dev/v1", "kind": "Database", "metadata": {"name": "webhook-probe"},
        "spec": {"version": "17", "instances": 1, "storage": {"size": "1Gi"}}}))?;
    // A v1alpha1 create is stored as v1: it goes through the conversion webhook.
    let old_probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "tusk.dev/v1alpha1", "kind": "Database", "metadata": {"name": "conversion-probe"},
        "spec": {"version": "17", "replicas": 1, "storageSize": "1Gi"}}))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let a = v1.create(&dry_run, &probe).await;
        let b = v1alpha1.create(&dry_run, &old_probe).await;
        match (a, b) {
            (Ok(_), Ok(_)) => return Ok(()),
            (a, b) if Instant::now() > deadline => {
                return Err(format!(
                    "the restored operator does not answer: v1 {:?}, v1alpha1 {:?}",
                    a.err(),
                    b.err()
                )
                .into());
            }
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

async fn run(
    client: &Client,
    setup: &Setup,
    before: &Before,
    get: &dyn Fn(&str) -> String,
    logs: &Path,
    processes: &mut Vec<HostProcess>,
) -> Result<()> {
    let Setup {
        operator_ns, db_ns, ..
    } = setup;
    let apply = PatchParams::apply(MANAGER).force();
    let kubeconfig = std::env::var("KUBECONFIG")?;

    for ns in [operator_ns, db_ns] {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"tusk.dev/e2e": "true"}}});
        apply_value(client, None, namespace, &apply).await?;
    }
    // No copied CSVs in every namespace of the cluster.
    apply_value(
        client,
        None,
        json!({
            "apiVersion": "operators.coreos.com/v1", "kind": "OLMConfig",
            "metadata": {"name": "cluster"},
            "spec": {"features": {"disableCopiedCSVs": true}}
        }),
        &apply,
    )
    .await?;

    // The catalog, served from the host; the catalog operator (also on the host)
    // dials it directly, so no registry pod is involved.
    let port = free_port()?;
    let port_s = port.to_string();
    let catalog_dir = get("CATALOG_DIR");
    let opm = get("OPM");
    let mut serve = HostProcess::start(
        "opm-serve",
        logs,
        &opm,
        &["serve", &catalog_dir, "-p", &port_s],
    )?;
    wait_port(port, &mut serve).await?;
    processes.push(serve);

    // OLM's two operators. Both bind their health/metrics port :8080 (plain
    // HTTP without --tls-cert); only `olm` gets it, the catalog operator logs the
    // bind error and carries on (it is not fatal in v0.42.0).
    let olm_bin = get("OLM");
    // (olm reads $KUBECONFIG through controller-runtime; it has no --kubeconfig)
    processes.push(HostProcess::start(
        "olm",
        logs,
        &olm_bin,
        &["--namespace", operator_ns],
    )?);
    let util_image = get("UTIL_IMAGE");
    let opm_image = get("OPM_IMAGE");
    processes.push(HostProcess::start(
        "catalog",
        logs,
        &get("CATALOG"),
        &[
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            operator_ns,
            "--util-image",
            &util_image,
            "--opmImage",
            &opm_image,
            "--configmapServerImage",
            &opm_image,
        ],
    )?);

    // The operator installed before (if any) steps aside: no replicas, no
    // webhook configuration (pointing at a Service without endpoints, it would
    // refuse every Database), and its pods gone, so that no two operators
    // reconcile the suite's Database.
    if let Some(operator) = &before.operator {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
        deployments
            .patch(
                OPERATOR,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 0}})),
            )
            .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
        let selector = ListParams::default().labels(&pod_selector(operator));
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            // A finished pod (an evicted one, one the node's restart ended)
            // runs nothing; the ReplicaSet leaves it to garbage collection.
            let left: Vec<String> = pods
                .list(&selector)
                .await?
                .items
                .iter()
                .filter(|p| !pod_finished(p))
                .map(ResourceExt::name_any)
                .collect();
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("the installed operator's pods stay: {left:?}").into());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if before.webhooks.is_some() {
        vwcs.delete(VALIDATING, &DeleteParams::default()).await?;
    }

    // What a user applies: a CatalogSource, an OperatorGroup for all namespaces
    // (the only install mode the CSV supports) and a Subscription.
    let user_objects = [
        json!({
            "apiVersion": "operators.coreos.com/v1alpha1", "kind": "CatalogSource",
            "metadata": {"name": "tusk-catalog"},
            "spec": {"sourceType": "grpc", "address": format!("127.0.0.1:{port}"),
                     "displayName": "Tusk (e2e)", "publisher": "tusk e2e"}
        }),
        json!({
            "apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
            "metadata": {"name": "tusk"}, "spec": {}
        }),
        // The operator watches the suite's namespace only: other Databases
        // are not its to rebuild (see the top of this file).
        json!({
            "apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "tusk"},
            "spec": {"name": "tusk", "channel": "alpha", "source": "tusk-catalog",
                     "sourceNamespace": operator_ns, "installPlanApproval": "Automatic",
                     "config": {"env": [{"name": "TUSK_WATCH_NAMESPACES", "value": db_ns}]}}
        }),
    ];
    for object in user_objects {
        let applied = apply_value(client, Some(operator_ns), object, &apply).await?;
        if applied
            .types
            .as_ref()
            .is_some_and(|t| t.kind == "OperatorGroup")
            && let Some(uid) = applied.uid()
        {
            let _ = setup.operator_group_uid.set(uid);
        }
    }

    // The install settles: the InstallPlan Complete, the CSV Succeeded, and both
    // CRDs converting through OLM's Service. The first Succeeded can come while
    // the InstallPlan still re-applies the bundle's CRDs (with the bundle's own
    // conversion Service); OLM then finds its install "bad" and redoes it, so
    // only the three together count.
    let t0 = Instant::now();
    let csvs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), operator_ns, &csv_resource());
    let plans: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        operator_ns,
        &api_resource(
            "operators.coreos.com",
            "v1alpha1",
            "InstallPlan",
            "installplans",
        ),
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = Instant::now() + CSV_TIMEOUT;
    loop {
        for p in processes.iter_mut() {
            p.check_running()?;
        }
        let mut waiting = Vec::new();
        match csvs.get_opt(CSV).await? {
            Some(csv) if csv.data["status"]["phase"] == "Succeeded" => {}
            Some(csv) => waiting.push(format!("CSV {CSV}: {}", conditions_of(&csv))),
            None => waiting.push(format!("no CSV {CSV}")),
        }
        let plan_list = plans.list(&ListParams::default()).await?.items;
        if plan_list.is_empty() {
            waiting.push("no InstallPlan".to_owned());
        }
        for plan in plan_list {
            let phase = &plan.data["status"]["phase"];
            if phase != "Complete" {
                waiting.push(format!("InstallPlan {} is {phase}", plan.name_any()));
            }
        }
        for name in CRDS {
            // On a fresh cluster the CRDs come with the install.
            let Some(crd) = crds.get_opt(name).await? else {
                waiting.push(format!("no CRD {name}"));
                continue;
            };
            let service = crd
                .spec
                .conversion
                .as_ref()
                .and_then(|c| c.webhook.as_ref())
                .and_then(|w| w.client_config.as_ref())
                .and_then(|c| c.service.as_ref());
            match service {
                Some(service) if &service.namespace == operator_ns => {}
                Some(service) => waiting.push(format!(
                    "{name} converts through {}/{}, not OLM's namespace",
                    service.namespace, service.name
                )),
                None => waiting.push(format!("{name} has no conversion service")),
            }
        }
        if waiting.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the OLM install did not settle in {CSV_TIMEOUT:?}:\n{}",
                waiting.join("\n")
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "[olm] CSV {CSV} Succeeded, InstallPlan Complete, CRDs converting through OLM's Service {:.0?} after the Subscription",
        t0.elapsed()
    );

    // OLM, not Helm, runs it: its Deployment in the operator namespace, on the
    // image the bundle names.
    let olm_deployments: Api<Deployment> = Api::namespaced(client.clone(), operator_ns);
    let deployment = olm_deployments.get("tusk-operator").await?;
    let image = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone());
    if image.as_deref() != Some("ghcr.io/tusk-dev/tusk:0.1.0") {
        return Err(format!("the OLM Deployment runs {image:?}").into());
    }
    let watched = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.as_ref())
        .and_then(|env| env.iter().find(|e| e.name == "TUSK_WATCH_NAMESPACES"))
        .and_then(|e| e.value.clone());
    if watched.as_deref() != Some(db_ns.as_str()) {
        return Err(format!(
            "the OLM Deployment watches {watched:?}, not the Subscription's {db_ns}"
        )
        .into());
    }
    let olm_webhooks: Vec<String> = vwcs
        .list(&ListParams::default().labels(&format!(
            "olm.owner={CSV},olm.owner.namespace={operator_ns}"
        )))
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    eprintln!("[olm] OLM's validating webhook configurations: {olm_webhooks:?}");
    // One per kind the bundle validates: generateName `<kind>.tusk.dev`.
    let mut kinds: Vec<&str> = olm_webhooks
        .iter()
        .filter_map(|name| name.split_once(".tusk.dev-").map(|(kind, _)| kind))
        .collect();
    kinds.sort_unstable();
    if kinds != ["backup", "database", "drill"] || olm_webhooks.len() != 3 {
        return Err(format!("expected OLM's 3 validating webhook configurations (backup, database, drill), found {olm_webhooks:?}").into());
    }

    // Admission through OLM's webhook: a valid dry run passes (once the Service
    // routes), an invalid one is refused by the webhook, naming the field.
    let dbs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        db_ns,
        &api_resource("tusk.dev", "v1", "Database", "databases"),
    );
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let spec = json!({"version": "17", "instances": 1, "storage": {"size": "1Gi"}});
    let probe: DynamicObject = serde_json::from_value(database("pg", spec.clone()))?;
    let mut last = String::new();
    let mut answered = false;
    for _ in 0..120 {
        match dbs.create(&dry_run, &probe).await {
            Ok(_) => {
                answered = true;
                break;
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if !answered {
        return Err(format!("a valid Database is refused through OLM's webhook: {last}").into());
    }
    let mut bad_spec = spec.clone();
    bad_spec["primary"] = json!("someone-else-1");
    let bad: DynamicObject = serde_json::from_value(database("pg", bad_spec))?;
    let refused = match dbs.create(&dry_run, &bad).await {
        Ok(_) => {
            return Err(
                "an invalid Database (spec.primary of another database) was accepted".into(),
            );
        }
        Err(e) => e.to_string(),
    };
    if !(refused.contains("admission webhook \"database.tusk.dev\"")
        && refused.contains("denied the request: spec.primary"))
    {
        return Err(format!(
            "the invalid Database was refused, but not by Tusk's webhook: {refused}"
        )
        .into());
    }
    eprintln!("[olm] refused by OLM's webhook: {refused}");

    // A Database reconciled to Ready by the operator OLM deployed.
    let t1 = Instant::now();
    apply_value(
        client,
        Some(db_ns),
        database("pg", spec),
        &PatchParams::apply(MANAGER),
    )
    .await?;
    let ready = wait_ready(client, db_ns, "pg", 1).await?;
    eprintln!(
        "[olm] Database {db_ns}/pg Ready {:.0?} after creation (primary {:?})",
        t1.elapsed(),
        ready.status.and_then(|s| s.current_primary)
    );

    // Read back as v1alpha1: the API server converts through OLM's Service with
    // OLM's CA.
    let old: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        db_ns,
        &api_resource("tusk.dev", "v1alpha1", "Database", "databases"),
    );
    let converted = old.get("pg").await?;
    let old_spec = &converted.data["spec"];
    if old_spec["replicas"] != json!(1)
        || old_spec["version"] != json!("17")
        || old_spec["storageSize"] != json!("1Gi")
    {
        return Err(
            format!("the v1alpha1 read is not the flat form of the Database: {old_spec}").into(),
        );
    }
    eprintln!("[olm] v1alpha1 read through the conversion webhook: {old_spec}");
    Ok(())
}

/// What OLM saw, on failure: the CSV, InstallPlans, Subscription, CatalogSource,
/// and the events, pods and logs of both namespaces.
async fn report(client: &Client, setup: &Setup) {
    let ns = &setup.operator_ns;
    let kinds = [
        (
            "v1alpha1",
            "ClusterServiceVersion",
            "clusterserviceversions",
        ),
        ("v1alpha1", "InstallPlan", "installplans"),
        ("v1alpha1", "Subscription", "subscriptions"),
        ("v1alpha1", "CatalogSource", "catalogsources"),
        ("v1", "OperatorGroup", "operatorgroups"),
    ];
    for (version, kind, plural) in kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            ns,
            &api_resource("operators.coreos.com", version, kind, plural),
        );
        if let Ok(list) = api.list(&ListParams::default()).await {
            for o in list.items {
                eprintln!("--- {kind} {ns}/{}: {}", o.name_any(), conditions_of(&o));
                if kind == "InstallPlan" || kind == "Subscription" {
                    let status = o.data.get("status").cloned().unwrap_or(Value::Null);
                    eprintln!("    bundleLookups={}", status["bundleLookups"]);
                }
            }
        }
    }
    dump(client, ns).await;
    dump(client, &setup.db_ns).await;
}

/// Removes what the test and OLM made, while OLM still runs (it garbage-collects
/// the cluster-scoped objects of a deleted CSV).
async fn cleanup(client: &Client, setup: &Setup) {
    let Setup {
        operator_ns, db_ns, ..
    } = setup;
    // The Database first, while its operator still runs to release the finalizer.
    let typed: Api<Database> = Api::namespaced(client.clone(), db_ns);
    if typed.get_opt("pg").await.ok().flatten().is_some() {
        let _ = typed.delete("pg", &DeleteParams::default()).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline && typed.get_opt("pg").await.ok().flatten().is_some() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(db_ns, &DeleteParams::background()).await;

    for (version, kind, plural, name) in [
        ("v1alpha1", "Subscription", "subscriptions", "tusk"),
        (
            "v1alpha1",
            "ClusterServiceVersion",
            "clusterserviceversions",
            CSV,
        ),
        ("v1", "OperatorGroup", "operatorgroups", "tusk"),
        (
            "v1alpha1",
            "CatalogSource",
            "catalogsources",
            "tusk-catalog",
        ),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            operator_ns,
            &api_resource("operators.coreos.com", version, kind, plural),
        );
        let _ = api.delete(name, &DeleteParams::foreground()).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && api.get_opt(name).await.ok().flatten().is_some() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    // OLM's garbage collection of the CSV's cluster-scoped objects is
    // asynchronous: give it a moment before it stops.
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let selector = format!("olm.owner.namespace={operator_ns}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match vwcs.list(&ListParams::default().labels(&selector)).await {
            Ok(list) if list.items.is_empty() => break,
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// After OLM stopped: deletes whatever OLM left for the operator namespace
/// (webhook configurations, cluster roles and bindings, the CRDs' aggregated
/// roles, the Operator object), its marks on the Tusk CRDs and on namespaces,
/// and the operator namespace. OLM's own CRDs stay (cluster-scoped, inert
/// without OLM).
async fn leftovers(client: &Client, setup: &Setup) {
    let operator_ns = &setup.operator_ns;
    let selector = format!("olm.owner.namespace={operator_ns}");
    let lp = ListParams::default().labels(&selector);
    let dp = DeleteParams::default();
    for ar in [
        api_resource(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
        api_resource(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
        api_resource(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
        ),
        api_resource(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
        ),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        if let Ok(list) = api.list(&lp).await {
            for o in list.items {
                eprintln!("[olm] deleting leftover {} {}", ar.kind, o.name_any());
                let _ = api.delete(&o.name_any(), &dp).await;
            }
        }
    }
    // The aggregated admin/edit/view roles OLM made for the CRDs' versions
    // (owned by the CRDs, which stay, so nothing would collect them).
    let cluster_roles: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &api_resource(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
        ),
    );
    if let Ok(list) = cluster_roles
        .list(&ListParams::default().labels("olm.managed=true"))
        .await
    {
        for role in list.items {
            let name = role.name_any();
            if name.starts_with("databases.tusk.dev-") || name.starts_with("backups.tusk.dev-") {
                let _ = cluster_roles.delete(&name, &dp).await;
            }
        }
    }
    let operators: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &api_resource("operators.coreos.com", "v1", "Operator", "operators"),
    );
    let _ = operators.delete(&format!("tusk.{operator_ns}"), &dp).await;

    // OLM's labels and annotations on the Tusk CRDs (CRDs that were there
    // before get all of theirs back from `Before::restore`).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in CRDS {
        let Ok(crd) = crds.get(name).await else {
            continue;
        };
        let mut labels = serde_json::Map::new();
        for key in crd.labels().keys() {
            if key == "olm.managed" || key.starts_with("operators.coreos.com/") {
                labels.insert(key.clone(), Value::Null);
            }
        }
        let mut annotations = serde_json::Map::new();
        for key in crd.annotations().keys() {
            if key.starts_with("operatorframework.io/installed-alongside-") {
                annotations.insert(key.clone(), Value::Null);
            }
        }
        let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
        let _ = crds
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
    // OLM labels every namespace the suite's OperatorGroup targets (all of
    // them) with the group's uid; other groups' labels are not the suite's.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Some(uid) = setup.operator_group_uid.get() {
        let own = format!("olm.operatorgroup.uid/{uid}");
        if let Ok(list) = namespaces.list(&ListParams::default().labels(&own)).await {
            for ns in list.items {
                let patch = json!({"metadata": {"labels": {own.as_str(): null}}});
                let _ = namespaces
                    .patch(
                        &ns.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await;
            }
        }
    }
    let _ = namespaces
        .delete(operator_ns, &DeleteParams::background())
        .await;
}
