//! The OLM bundle in `bundle/`, installed by a real Operator Lifecycle Manager:
//! OLM's `olm` and `catalog` operators (v0.42.0, built by scripts/install-tools)
//! run as host processes against the cluster, a file-based catalog made from the
//! bundle is served by `opm serve`, and a Subscription installs Tusk from it. The
//! bundle is unpacked from its image by OLM's own unpack Job, the CSV must reach
//! Succeeded, and the operator OLM deployed must then turn a Database Ready, answer
//! through the validating webhook OLM registered, and convert to v1alpha1 through
//! the CRDs' conversion webhook OLM rewired with its own certificates.
//!
//! The Helm-installed Tusk (release `tusk` in tusk-system, which the other suites
//! use) must not run alongside: it is scaled to zero and its webhook configuration
//! removed for the duration, and restored afterwards with `e2e/install-tusk`.
//! Cargo runs the test binaries one after another, so within `make e2e` this
//! suite only waits for the Databases of the suites before it to be gone. Alone:
//!   cargo test --manifest-path e2e/Cargo.toml --test olm

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::v1::Database;
use tusk_e2e::{
    MANAGER, OPERATOR_NAMESPACE, Result, apply_value, database, dump, repo_path, wait_for,
    wait_ready,
};

const CSV: &str = "tusk.v0.1.0";
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

/// Runs e2e/olm/prepare (images, catalog, OLM CRDs) and returns its KEY=VALUE output.
fn prepare() -> Result<BTreeMap<String, String>> {
    let output = Command::new(repo_path("e2e/olm/prepare"))
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
}

#[tokio::test]
async fn olm_installs_the_bundle_and_its_operator_runs_a_database() {
    let started = Instant::now();
    let client = tusk_e2e::client().await;
    let suffix = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let setup = Setup {
        operator_ns: format!("e2e-olm-{suffix}"),
        db_ns: format!("e2e-olm-db-{suffix}"),
    };

    // The CRDs' conversion is unavailable while OLM takes them over, and the
    // Helm-installed operator is stopped for the duration: start only once the
    // suites before this one have finished deleting their Databases and Backups
    // (their finalizers need that operator).
    if let Err(error) = wait_for_no_tusk_objects(&client).await {
        panic!("the OLM suite needs a cluster without Databases or Backups: {error}");
    }

    let env = tokio::task::spawn_blocking(prepare)
        .await
        .expect("prepare")
        .expect("e2e/olm/prepare");
    let get = |key: &str| {
        env.get(key)
            .cloned()
            .unwrap_or_else(|| panic!("prepare printed no {key}"))
    };
    let logs = std::env::temp_dir().join(format!("tusk-olm-{suffix}"));
    std::fs::create_dir_all(&logs).expect("log dir");
    eprintln!("[olm] logs in {}", logs.display());

    let mut processes: Vec<HostProcess> = Vec::new();
    let outcome = run(&client, &setup, &get, &logs, &mut processes).await;

    if let Err(error) = &outcome {
        eprintln!("=== OLM e2e failure: {error}");
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
    let restored = restore_helm_install(&client).await;
    eprintln!("[olm] done in {:.0?}", started.elapsed());
    if let Err(error) = outcome {
        panic!("{error}");
    }
    if let Err(error) = restored {
        panic!("the Helm install was not restored: {error}");
    }
}

/// Waits (up to 5 min) until no Database or Backup exists in any namespace.
async fn wait_for_no_tusk_objects(client: &Client) -> Result<()> {
    let databases: Api<Database> = Api::all(client.clone());
    let backups: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &api_resource("tusk.dev", "v1", "Backup", "backups"),
    );
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut left: Vec<String> = Vec::new();
        for d in databases.list(&ListParams::default()).await?.items {
            left.push(format!(
                "Database {}/{}",
                d.namespace().unwrap_or_default(),
                d.name_any()
            ));
        }
        for b in backups.list(&ListParams::default()).await?.items {
            left.push(format!(
                "Backup {}/{}",
                b.namespace().unwrap_or_default(),
                b.name_any()
            ));
        }
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("still present after 5 min: {left:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn run(
    client: &Client,
    setup: &Setup,
    get: &dyn Fn(&str) -> String,
    logs: &Path,
    processes: &mut Vec<HostProcess>,
) -> Result<()> {
    let Setup { operator_ns, db_ns } = setup;
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

    // The Helm install steps aside: no replicas, no webhook configuration
    // (pointing at a Service without endpoints, it would refuse every Database).
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    deployments
        .patch(
            "tusk-operator",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await?;
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if vwcs.get_opt("tusk-validating").await?.is_some() {
        vwcs.delete("tusk-validating", &DeleteParams::default())
            .await?;
    }
    wait_for(
        &deployments,
        "tusk-operator",
        Duration::from_secs(120),
        |d| {
            d.status
                .as_ref()
                .is_none_or(|s| s.replicas.unwrap_or(0) == 0)
        },
    )
    .await?;

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
        json!({
            "apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "tusk"},
            "spec": {"name": "tusk", "channel": "alpha", "source": "tusk-catalog",
                     "sourceNamespace": operator_ns, "installPlanApproval": "Automatic"}
        }),
    ];
    for object in user_objects {
        apply_value(client, Some(operator_ns), object, &apply).await?;
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
        for name in ["databases.tusk.dev", "backups.tusk.dev"] {
            let crd = crds.get(name).await?;
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
    if olm_webhooks.len() != 2 {
        return Err(format!("expected OLM's 2 validating webhook configurations (database, backup), found {olm_webhooks:?}").into());
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
    let Setup { operator_ns, db_ns } = setup;
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
/// roles, the Operator object),
/// its marks on the Tusk CRDs and on namespaces, the OLMConfig, and the
/// operator namespace. OLM's own CRDs stay (cluster-scoped, inert without OLM).
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
    let olmconfigs: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &api_resource("operators.coreos.com", "v1", "OLMConfig", "olmconfigs"),
    );
    let _ = olmconfigs.delete("cluster", &dp).await;

    // OLM's labels and annotations on the Tusk CRDs (Helm's are restored by
    // `helm upgrade`).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in ["databases.tusk.dev", "backups.tusk.dev"] {
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
    // OLM labels the namespaces an OperatorGroup targets.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Ok(list) = namespaces.list(&ListParams::default()).await {
        for ns in list.items {
            let mut labels = serde_json::Map::new();
            for key in ns.labels().keys() {
                if key.starts_with("olm.operatorgroup.uid/") {
                    labels.insert(key.clone(), Value::Null);
                }
            }
            if !labels.is_empty() {
                let patch = json!({"metadata": {"labels": labels}});
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

/// Puts the Helm install back (`e2e/install-tusk`: replicas, webhook
/// configuration, the CRDs' conversion Service) and waits until Tusk answers as
/// both the validating and the conversion webhook again.
async fn restore_helm_install(client: &Client) -> Result<()> {
    let status =
        tokio::task::spawn_blocking(|| Command::new(repo_path("e2e/install-tusk")).status())
            .await??;
    if !status.success() {
        return Err(format!("e2e/install-tusk failed ({status})").into());
    }
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let v1: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        OPERATOR_NAMESPACE,
        &api_resource("tusk.dev", "v1", "Database", "databases"),
    );
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
                    "after e2e/install-tusk: v1 {:?}, v1alpha1 {:?}",
                    a.err(),
                    b.err()
                )
                .into());
            }
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}
