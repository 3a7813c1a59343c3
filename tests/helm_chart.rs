//! The Helm chart, through a real `helm` (built from its Go module by
//! scripts/install-tools): it lints, renders in every mode, and its schema and
//! checks refuse bad values naming them. Also: every generated file is current.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_yaml::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn helm() -> PathBuf {
    if let Some(path) = std::env::var_os("HELM").filter(|p| !p.is_empty()) {
        return path.into();
    }
    let output = Command::new(repo().join("scripts/install-tools"))
        .args(["--path", "helm"])
        .output()
        .expect("run scripts/install-tools");
    assert!(
        output.status.success(),
        "scripts/install-tools --path helm: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().into()
}

fn run_helm(args: &[&str]) -> Output {
    Command::new(helm())
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run helm")
}

/// `helm template` of the chart as release `tusk` in `namespace`, with `--set` values.
fn render_in(namespace: &str, set: &[&str]) -> Output {
    let mut args = vec!["template", "tusk", "helm/tusk", "--namespace", namespace];
    for value in set {
        args.extend(["--set", value]);
    }
    run_helm(&args)
}

/// `helm template` in tusk-system.
fn render(set: &[&str]) -> Output {
    render_in("tusk-system", set)
}

/// `helm template` with `--set` values; the rendered objects.
fn template(set: &[&str]) -> Vec<Value> {
    objects(render(set), set)
}

/// The objects a successful `helm template` printed.
fn objects(output: Output, set: &[&str]) -> Vec<Value> {
    assert!(
        output.status.success(),
        "helm template {set:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// `helm template` that must fail; its error output.
fn refused(set: &[&str]) -> String {
    let output = render(set);
    assert!(
        !output.status.success(),
        "helm template {set:?} was accepted"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

fn env<'a>(deployment: &'a Value, name: &str) -> Option<&'a Value> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| &e["value"])
}

fn resources_of(role: &Value) -> Vec<String> {
    role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_sequence().unwrap().clone())
        .map(|r| r.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_chart_lints_clean_in_every_mode() {
    for set in [
        "scope=cluster",
        "scope=namespaced,watchNamespaces={a,b}",
        "webhook.certificates=certManager",
        "webhook.certificates=external",
    ] {
        let output = run_helm(&["lint", "--strict", "helm/tusk", "--set", set]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "helm lint --set {set}:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(stdout.contains("0 chart(s) failed"), "{stdout}");
    }
}

#[test]
fn the_default_render_is_a_complete_restricted_install() {
    let objects = template(&[]);
    let deployment = find(&objects, "Deployment", "tusk-operator").expect("a Deployment");
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "ghcr.io/tusk-dev/tusk:0.1.0");
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["requests"]["memory"].is_string());
    assert_eq!(env(deployment, "TUSK_WATCH_NAMESPACES").unwrap(), "");
    assert!(env(deployment, "TUSK_WEBHOOK_CERT_DIR").is_none());

    for crd in tusk::api::crd::NAMES {
        let crd = find(&objects, "CustomResourceDefinition", crd).expect("every CRD");
        // Uninstalling the chart must never take every Database with it.
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
        assert_eq!(
            crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"],
            "tusk-system"
        );
    }
    let cluster_role = find(&objects, "ClusterRole", "tusk-operator").unwrap();
    assert!(resources_of(cluster_role).contains(&"databases".to_owned()));
    // Drills: run and judged, their status written; a partition cut by a
    // NetworkPolicy.
    for resource in ["drills", "drills/status", "networkpolicies"] {
        assert!(
            resources_of(cluster_role).contains(&resource.to_owned()),
            "{resource}"
        );
    }
    assert!(resources_of(cluster_role).contains(&"customresourcedefinitions".to_owned()));
    let webhook = find(
        &objects,
        "ValidatingWebhookConfiguration",
        "tusk-validating",
    )
    .unwrap();
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["service"]["namespace"],
        "tusk-system"
    );
    assert!(webhook["webhooks"][0].get("namespaceSelector").is_none());
    let paths: Vec<&str> = webhook["webhooks"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|w| w["clientConfig"]["service"]["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["/validate/database", "/validate/backup", "/validate/drill"]
    );
    for service in ["tusk-metrics", "tusk-webhook"] {
        assert!(find(&objects, "Service", service).is_some(), "{service}");
    }
    // Nothing optional is there unless asked for.
    let names = kinds(&objects);
    assert!(
        !names.iter().any(|k| k.starts_with("Certificate/")
            || k.starts_with("ServiceMonitor/")
            || k.starts_with("PodMonitor/")
            || k.starts_with("PrometheusRule/")),
        "{names:?}"
    );
}

#[test]
fn the_release_namespace_reaches_every_reference() {
    let output = render_in("db-operators", &[]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        !text.contains("tusk-system"),
        "a hard-coded namespace:\n{text}"
    );
    assert!(text.contains("namespace: db-operators"));
}

#[test]
fn namespaced_mode_grants_workload_rights_only_in_the_watched_namespaces() {
    let objects = template(&["scope=namespaced", "watchNamespaces={team-a,team-b}"]);
    let deployment = find(&objects, "Deployment", "tusk-operator").unwrap();
    assert_eq!(
        env(deployment, "TUSK_WATCH_NAMESPACES").unwrap(),
        "team-a,team-b"
    );
    for namespace in ["team-a", "team-b"] {
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == "Role"
                    && o["metadata"]["name"] == "tusk-operator"
                    && o["metadata"]["namespace"] == namespace
            })
            .unwrap_or_else(|| panic!("a Role in {namespace}"));
        assert!(resources_of(role).contains(&"pods".to_owned()));
        assert!(objects.iter().any(|o| o["kind"] == "RoleBinding"
            && o["metadata"]["namespace"] == namespace
            && o["subjects"][0]["namespace"] == "tusk-system"));
    }
    // The cluster-wide role keeps only the certificate duties, by name.
    let cluster_role = find(&objects, "ClusterRole", "tusk-operator").unwrap();
    assert_eq!(
        resources_of(cluster_role),
        [
            "customresourcedefinitions",
            "validatingwebhookconfigurations"
        ]
    );
    for rule in cluster_role["rules"].as_sequence().unwrap() {
        assert!(rule["resourceNames"].is_sequence(), "{rule:?}");
    }
    let webhook = find(
        &objects,
        "ValidatingWebhookConfiguration",
        "tusk-validating",
    )
    .unwrap();
    assert_eq!(
        webhook["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_yaml::from_str::<Value>("[team-a, team-b]").unwrap()
    );
}

#[test]
fn cert_manager_mode_issues_and_injects_instead_of_tusk() {
    let objects = template(&["webhook.certificates=certManager"]);
    let certificate = find(&objects, "Certificate", "tusk-webhook").expect("a Certificate");
    assert_eq!(certificate["spec"]["secretName"], "tusk-webhook-cert");
    assert!(
        certificate["spec"]["dnsNames"]
            .as_sequence()
            .unwrap()
            .contains(&"tusk-webhook.tusk-system.svc".into())
    );
    // Its own CA under a self-signed root: renewals keep the CA, so the
    // injected caBundles stay valid while the pod picks up the new files.
    assert!(find(&objects, "Issuer", "tusk-selfsigned").is_some());
    let ca = find(&objects, "Certificate", "tusk-webhook-ca").expect("a CA Certificate");
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(certificate["spec"]["issuerRef"]["name"], "tusk-webhook-ca");
    assert_eq!(
        find(&objects, "Issuer", "tusk-webhook-ca").unwrap()["spec"]["ca"]["secretName"],
        "tusk-webhook-ca"
    );
    for (kind, name) in [
        ("ValidatingWebhookConfiguration", "tusk-validating"),
        ("CustomResourceDefinition", "databases.tusk.dev"),
    ] {
        let object = find(&objects, kind, name).unwrap();
        assert_eq!(
            object["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "tusk-system/tusk-webhook"
        );
    }
    let deployment = find(&objects, "Deployment", "tusk-operator").unwrap();
    assert!(env(deployment, "TUSK_WEBHOOK_CERT_DIR").is_some());
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "tusk-webhook-cert"
    );
    // Tusk no longer needs to touch Secrets by name, CRDs or webhook configurations.
    let cluster_role = find(&objects, "ClusterRole", "tusk-operator").unwrap();
    assert!(!resources_of(cluster_role).contains(&"customresourcedefinitions".to_owned()));
    let leader = find(&objects, "Role", "tusk-operator-leader").unwrap();
    assert_eq!(resources_of(leader), ["leases"]);

    let with_issuer = template(&[
        "webhook.certificates=certManager",
        "webhook.certManager.issuerRef.name=corp-ca",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    assert!(find(&with_issuer, "Issuer", "tusk-selfsigned").is_none());
    assert!(find(&with_issuer, "Certificate", "tusk-webhook-ca").is_none());
    let certificate = find(&with_issuer, "Certificate", "tusk-webhook").unwrap();
    assert_eq!(certificate["spec"]["issuerRef"]["name"], "corp-ca");
}

#[test]
fn the_default_stores_credentials_are_readable_by_name_in_the_release_namespace_only() {
    let rule = |objects: &[Value]| {
        let leader = find(objects, "Role", "tusk-operator-leader").unwrap();
        leader["rules"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|r| r["resourceNames"][0] == "store-creds")
            .cloned()
    };
    let with_store = template(&[
        "scope=namespaced",
        "watchNamespaces={team-a}",
        "defaultObjectStore.bucket=fleet",
        "defaultObjectStore.credentialsSecret=store-creds",
    ]);
    let granted = rule(&with_store).expect("no rule for the default store's Secret");
    assert_eq!(granted["resources"][0], "secrets");
    assert_eq!(granted["resourceNames"].as_sequence().unwrap().len(), 1);
    assert_eq!(
        granted["verbs"],
        serde_yaml::from_str::<Value>("[get, list, watch]").unwrap()
    );
    let deployment = find(&with_store, "Deployment", "tusk-operator").unwrap();
    assert_eq!(
        env(deployment, "TUSK_DEFAULT_OBJECTSTORE_CREDENTIALS_SECRET").unwrap(),
        "store-creds"
    );
    // No default store (no bucket): no right to any Secret of that name.
    let without = template(&[
        "scope=namespaced",
        "watchNamespaces={team-a}",
        "defaultObjectStore.credentialsSecret=store-creds",
    ]);
    assert!(rule(&without).is_none());
}

#[test]
fn every_mode_that_reads_certificate_files_has_them_mounted_or_says_who_does() {
    let external = template(&[
        "webhook.certificates=external",
        "webhook.externalSecretName=corp-tls",
    ]);
    let deployment = find(&external, "Deployment", "tusk-operator").unwrap();
    let dir = env(deployment, "TUSK_WEBHOOK_CERT_DIR").unwrap().clone();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "corp-tls");
    assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], dir);
    assert!(find(&external, "Certificate", "tusk-webhook").is_none());
    // Without a Secret the installer mounts one (OLM does): nothing to mount.
    let olm = template(&["webhook.certificates=external"]);
    let deployment = find(&olm, "Deployment", "tusk-operator").unwrap();
    assert!(env(deployment, "TUSK_WEBHOOK_CERT_DIR").is_some());
    assert!(
        deployment["spec"]["template"]["spec"]
            .get("volumes")
            .is_none()
    );
}

#[test]
fn bad_values_are_refused_naming_them() {
    for (set, expected) in [
        (vec!["scope=everywhere"], "scope"),
        (vec!["replicaCount=0"], "replicaCount"),
        (vec!["webhook.certificates=vault"], "certificates"),
        (vec!["image.pullPolicy=Sometimes"], "pullPolicy"),
        (vec!["metrics.serviceMonitor.interval=soon"], "interval"),
        (vec!["unknownKey=1"], "unknownKey"),
        (vec!["scope=namespaced"], "watchNamespaces"),
        (vec!["watchNamespaces={a}"], "watchNamespaces"),
        (vec!["tracing.otlpEndpoint=collector:4318"], "otlpEndpoint"),
        (
            vec!["webhook.certManager.issuerRef.kind=ClusterIssuer"],
            "issuerRef",
        ),
    ] {
        let error = refused(&set);
        assert!(error.contains(expected), "{set:?}: {error}");
    }
}

#[test]
fn generated_files_are_current() {
    let output = Command::new(env!("CARGO_BIN_EXE_tusk-manifests"))
        .args(["--check", "--root"])
        .arg(repo())
        .env("HELM", helm())
        .output()
        .expect("run tusk-manifests");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn monitoring_objects_come_from_config_monitoring_into_the_release_namespace() {
    let set = [
        "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true,metrics.prometheusRule.enabled=true",
        "metrics.podMonitor.interval=15s,metrics.prometheusRule.labels.release=kube-prometheus",
    ];
    let objects = objects(render_in("observability", &set), &set);
    let read = |file: &str| -> Value {
        serde_yaml::from_str(
            &std::fs::read_to_string(repo().join("config/monitoring").join(file)).unwrap(),
        )
        .unwrap()
    };

    let service_monitor = find(&objects, "ServiceMonitor", "tusk-operator").unwrap();
    assert_eq!(service_monitor["metadata"]["namespace"], "observability");
    assert_eq!(
        service_monitor["spec"]["namespaceSelector"]["matchNames"][0],
        "observability"
    );
    assert_eq!(
        service_monitor["spec"]["selector"],
        read("servicemonitor.yaml")["spec"]["selector"]
    );

    let pod_monitor = find(&objects, "PodMonitor", "tusk-postgresql").unwrap();
    assert_eq!(
        pod_monitor["spec"]["podMetricsEndpoints"][0]["interval"],
        "15s"
    );
    assert_eq!(
        pod_monitor["spec"]["podMetricsEndpoints"][0]["port"],
        "tusk"
    );

    // The alerts are config/monitoring's, untouched (their {{ $labels }} too).
    let rule = find(&objects, "PrometheusRule", "tusk").unwrap();
    assert_eq!(rule["spec"], read("prometheusrule.yaml")["spec"]);
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus");
}
