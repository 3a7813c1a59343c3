//! config/monitoring/: the PrometheusRule passes `promtool check rules` and its
//! unit tests (`promtool test rules`), the dashboard's queries are valid PromQL,
//! every metric the rules and the dashboard use is one Tusk exposes, the
//! monitors select what Tusk creates, and the operator's exposition passes
//! `promtool check metrics`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod promtool_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use prometheus_client::registry::Registry;
use serde::Deserialize;
use serde_yaml::Value;
use tusk::api::status::{DatabasePhase, InstanceRole};
use tusk::api::v1::Database;
use tusk::contract::{Bootstrap, Role};
use tusk::instance::metrics::{self as instance_metrics, Archiver, ReplicaLag, Sample, Standby};
use tusk::resources::{BuildConfig, PlannedInstance, instance_pod, labels};
use tusk::telemetry::metrics::{
    BackupResult, CertificateKind, DatabaseLabels, Metrics, exposition,
};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("parse {path}: {e}"))
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tusk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        TempDir(dir)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).expect("write a temporary file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The PrometheusRule's `spec` (its `groups`) as a Prometheus rules file.
fn rules_file() -> String {
    let rule = yaml("config/monitoring/prometheusrule.yaml");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["kind"], "PrometheusRule");
    serde_yaml::to_string(&rule["spec"]).expect("serialise the rules")
}

fn promtool_in(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(promtool_support::promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool")
}

#[test]
fn the_prometheus_rule_passes_promtool_check_rules() {
    let dir = TempDir::new("rules-check");
    dir.write("rules.yaml", &rules_file());
    let output = promtool_in(&dir.0, &["check", "rules", "rules.yaml"]);
    let printed = promtool_support::printed(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("SUCCESS: 13 rules found"), "{printed}");
}

#[test]
fn the_alerts_pass_their_unit_tests() {
    let dir = TempDir::new("rules-test");
    dir.write("rules.yaml", &rules_file());
    let tests = read("config/monitoring/tests/rules-test.yaml");
    dir.write("rules-test.yaml", &tests);
    let output = promtool_in(&dir.0, &["test", "rules", "rules-test.yaml"]);
    let printed = promtool_support::printed(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("SUCCESS"), "{printed}");

    // The unit tests prove these fire, not merely that they parse.
    let tested: BTreeSet<&str> = tests
        .lines()
        .filter_map(|line| line.trim().strip_prefix("alertname: "))
        .collect();
    for alert in [
        "TuskInstanceDown",
        "TuskInstanceUnreachable",
        "TuskReplicationLagHigh",
        "TuskBackupVerificationFailed",
        "TuskBackupVerificationTooOld",
        "TuskDrillFailed",
        "TuskDrillOverdue",
    ] {
        assert!(tested.contains(alert), "no unit test for {alert}");
    }
}

#[test]
fn every_alert_has_a_severity_a_summary_and_a_description() {
    let rule = yaml("config/monitoring/prometheusrule.yaml");
    let mut alerts = BTreeSet::new();
    for group in rule["spec"]["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("only alerting rules");
            assert!(
                matches!(
                    rule["labels"]["severity"].as_str(),
                    Some("critical" | "warning" | "info")
                ),
                "{name}: severity"
            );
            for annotation in ["summary", "description"] {
                assert!(
                    rule["annotations"][annotation]
                        .as_str()
                        .is_some_and(|text| !text.is_empty()),
                    "{name}: {annotation}"
                );
            }
            alerts.insert(name.to_owned());
        }
    }
    let expected: BTreeSet<String> = [
        "TuskInstanceDown",
        "TuskInstanceUnreachable",
        "TuskReplicationLagHigh",
        "TuskWALArchivingFailing",
        "TuskBackupTooOld",
        "TuskBackupVerificationFailed",
        "TuskBackupVerificationTooOld",
        "TuskCertificateExpiringSoon",
        "TuskCertificateExpired",
        "TuskFailoverHappened",
        "TuskDrillFailed",
        "TuskDrillOverdue",
        "TuskOperatorReconcileErrors",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(alerts, expected);
}

/// Every operator metric family, each with at least one series.
fn operator_exposition() -> String {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    drop(metrics.reconcile_started("database"));
    metrics.reconcile_failed("database", tusk::error::Category::Internal);
    metrics.set_leader(true);
    metrics.set_queue_depth("database", 2);
    metrics.set_databases([Some(DatabasePhase::Ready), None]);
    metrics.track_database("shop", "orders");
    metrics.failover("shop", "orders");
    metrics.backup_finished(BackupResult::Failed);
    metrics.set_last_backups([(
        DatabaseLabels {
            namespace: "shop".into(),
            database: "orders".into(),
        },
        1_700_000_000.0,
    )]);
    let orders = || DatabaseLabels {
        namespace: "shop".into(),
        database: "orders".into(),
    };
    metrics.set_verifications([(orders(), 1_700_000_100.0)], [(orders(), 1.0)]);
    metrics.set_schedule_periods([(orders(), 86_400.0)]);
    metrics
        .drills
        .finished(&tusk::telemetry::drill_metrics::FinishedRun {
            namespace: "shop",
            database: "orders",
            drill: "weekly",
            scenario: "switchover",
            verdict: "Succeeded",
            write_outage_seconds: Some(2.0),
            lost_writes: Some(0),
            seconds_to_ready: Some(6.0),
            finished_at: 1_700_000_000.0,
        });
    metrics.set_certificates(
        "shop",
        "orders",
        [("orders-1-tls", CertificateKind::Server, 1_700_600_000)],
    );
    exposition(&registry, None).expect("encode").body
}

/// The instance manager's exposition of a primary with a standby and of a
/// replica: between them, every instance series.
fn instance_expositions() -> Vec<String> {
    let primary = Sample {
        role: Some(Role::Primary),
        max_connections: Some(100),
        connections: BTreeMap::from([("active".into(), 1), ("idle in transaction".into(), 0)]),
        xid_age: Some(700),
        database_sizes: BTreeMap::from([("app".into(), 8_000_000)]),
        archiver: Some(Archiver {
            archived: 3,
            failed: 1,
            last_archived: Some(1_700_000_000.0),
            last_failed: Some(1_600_000_000.0),
        }),
        replica_lag: None,
        standbys: vec![Standby {
            name: "orders-2".into(),
            lag_bytes: Some(128),
            lag_seconds: Some(0.25),
        }],
    };
    let replica = Sample {
        role: Some(Role::Replica),
        replica_lag: Some(ReplicaLag {
            bytes: Some(0),
            seconds: Some(0.0),
        }),
        standbys: Vec::new(),
        ..primary.clone()
    };
    [primary, replica, Sample::default()]
        .iter()
        .map(|sample| instance_metrics::encode(sample, None).expect("encode").body)
        .collect()
}

#[test]
fn the_operator_and_instance_expositions_pass_promtool_check_metrics() {
    promtool_support::check_metrics(&operator_exposition());
    for exposition in instance_expositions() {
        promtool_support::check_metrics(&exposition);
    }
}

/// Names of the `tusk_…` metrics a PromQL expression uses (string literals,
/// such as label matchers' values, skipped).
/// Tusk's own series, and `up`, which Prometheus records for every target it
/// scrapes (the alerts use it for instances that cannot be scraped at all).
fn is_series_name(word: &str) -> bool {
    word.starts_with("tusk_") || word == "up"
}

fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.chars().peekable();
    let mut word = String::new();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            while let Some(inner) = chars.next() {
                if inner == '\\' {
                    chars.next();
                } else if inner == c {
                    break;
                }
            }
        } else if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if is_series_name(&word) {
            names.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    if is_series_name(&word) {
        names.insert(word);
    }
    names
}

/// Every PromQL expression in the dashboard: panel targets and variable queries.
fn dashboard_exprs() -> Vec<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("config/monitoring/grafana-dashboard.json"))
            .expect("the dashboard is JSON");
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string());
    let mut exprs = Vec::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for panel in panels {
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for target in targets {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if variable["type"] == "query" {
            let query = variable["query"]["query"]
                .as_str()
                .expect("a query variable's query");
            exprs.push(query.to_owned());
        }
    }
    exprs
}

fn rule_exprs() -> Vec<String> {
    let rule = yaml("config/monitoring/prometheusrule.yaml");
    rule["spec"]["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_sequence().expect("rules").iter())
        .map(|rule| rule["expr"].as_str().expect("expr").to_owned())
        .collect()
}

#[test]
fn rules_and_dashboard_use_only_metrics_tusk_exposes() {
    let mut exposed = promtool_support::series_names(&operator_exposition());
    for exposition in instance_expositions() {
        exposed.extend(promtool_support::series_names(&exposition));
    }
    exposed.insert("up".to_owned());
    // A sanity check of the collection itself.
    for name in [
        "tusk_reconcile_total",
        "tusk_pg_up",
        "tusk_reconcile_duration_seconds_bucket",
    ] {
        assert!(exposed.contains(name), "{name} not in {exposed:?}");
    }
    for (source, exprs) in [
        ("prometheusrule.yaml", rule_exprs()),
        ("grafana-dashboard.json", dashboard_exprs()),
    ] {
        for expr in exprs {
            let used = metric_names(&expr);
            assert!(!used.is_empty(), "{source}: {expr:?} uses no Tusk metric");
            let unknown: Vec<&String> = used.difference(&exposed).collect();
            assert!(
                unknown.is_empty(),
                "{source}: {expr:?} uses {unknown:?}, which Tusk does not expose (it exposes {exposed:?})"
            );
        }
    }
}

#[test]
fn metric_names_are_found_outside_strings_only() {
    assert_eq!(
        metric_names(r#"sum by (le) (rate(tusk_x_bucket{job="tusk_not_a_metric"}[5m])) > tusk_y"#),
        BTreeSet::from(["tusk_x_bucket".to_owned(), "tusk_y".to_owned()])
    );
}

/// Grafana's variables replaced by what a query could get, so that promtool
/// can parse the dashboard's queries.
fn as_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$namespace", ".*")
        .replace("$database", ".*")
}

#[test]
fn the_dashboard_queries_are_valid_promql() {
    let rules: Vec<serde_yaml::Value> = dashboard_exprs()
        .iter()
        .filter(|expr| !expr.starts_with("label_values("))
        .enumerate()
        .map(|(i, expr)| {
            let mut rule = serde_yaml::Mapping::new();
            rule.insert("record".into(), format!("dashboard:query_{i}").into());
            rule.insert("expr".into(), as_promql(expr).into());
            serde_yaml::Value::Mapping(rule)
        })
        .collect();
    let count = rules.len();
    let mut group = serde_yaml::Mapping::new();
    group.insert("name".into(), "dashboard".into());
    group.insert("rules".into(), serde_yaml::Value::Sequence(rules));
    let mut file = serde_yaml::Mapping::new();
    file.insert(
        "groups".into(),
        serde_yaml::Value::Sequence(vec![serde_yaml::Value::Mapping(group)]),
    );
    let dir = TempDir::new("dashboard-check");
    dir.write(
        "dashboard.yaml",
        &serde_yaml::to_string(&file).expect("serialise"),
    );
    let output = promtool_in(&dir.0, &["check", "rules", "dashboard.yaml"]);
    let printed = promtool_support::printed(&output);
    assert!(output.status.success(), "{printed}");
    assert!(
        printed.contains(&format!("SUCCESS: {count} rules found")),
        "{printed}"
    );
}

fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    selector["matchLabels"]
        .as_mapping()
        .expect("matchLabels")
        .iter()
        .all(|(k, v)| labels.get(k.as_str().expect("key")).map(String::as_str) == v.as_str())
}

#[test]
fn the_pod_monitor_scrapes_the_instance_managers_port() {
    let mut db: Database =
        serde_yaml::from_str(&read("config/samples/database.yaml")).expect("sample Database");
    db.metadata.namespace = Some("shop".into());
    let build = BuildConfig {
        postgres_repository: "postgres".into(),
        tusk_image: "tusk".into(),
        image_pull_policy: None,
        instance_env: Vec::new(),
        default_store: None,
        instance_self_label: false,
        node_ports: Default::default(),
    };
    let monitor = yaml("config/monitoring/podmonitor.yaml");
    assert_eq!(monitor["kind"], "PodMonitor");
    assert_eq!(monitor["spec"]["namespaceSelector"]["any"], true);
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let model = tusk::api::validate::validated(&db, &build.defaults()).expect("a valid sample");
    for (role, bootstrap) in [
        (InstanceRole::Primary, Bootstrap::Initdb),
        (InstanceRole::Replica, Bootstrap::Clone),
    ] {
        let planned = PlannedInstance {
            serial: 1,
            role,
            bootstrap,
            image: &model.image,
        };
        let pod = instance_pod(&model, &planned, &build);
        let pod_labels = pod.metadata.labels.clone().expect("labels");
        assert!(
            selector_matches(&monitor["spec"]["selector"], &pod_labels),
            "{pod_labels:?}"
        );
        let ports: Vec<_> = pod
            .spec
            .expect("spec")
            .containers
            .iter()
            .flat_map(|c| c.ports.clone().unwrap_or_default())
            .collect();
        let port = ports
            .iter()
            .find(|p| p.name.as_deref() == endpoint["port"].as_str())
            .unwrap_or_else(|| panic!("no container port {:?} in {ports:?}", endpoint["port"]));
        assert_eq!(port.container_port, tusk::resources::HEALTH_PORT);
        // The `database` target label comes from the pod's Database label.
        let source = format!(
            "__meta_kubernetes_pod_label_{}",
            labels::DATABASE.replace(['.', '/', '-'], "_")
        );
        let relabel = &endpoint["relabelings"][0];
        assert_eq!(relabel["sourceLabels"][0].as_str(), Some(source.as_str()));
        assert_eq!(relabel["targetLabel"], "database");
        assert_eq!(pod_labels[labels::DATABASE], "orders");
    }
    assert_eq!(endpoint["path"], "/metrics");
    // The manager serves TLS; its certificate names the instance, not the
    // address scraped, and /metrics is open: encrypted, not verified.
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);
}

#[test]
fn the_service_monitor_scrapes_the_operators_metrics_service() {
    let monitor = yaml("config/monitoring/servicemonitor.yaml");
    assert_eq!(monitor["kind"], "ServiceMonitor");
    let manifests = read("config/manager/manager.yaml");
    let service = serde_yaml::Deserializer::from_str(&manifests)
        .map(|doc| Value::deserialize(doc).expect("a YAML document"))
        .find(|doc| doc["kind"] == "Service" && doc["metadata"]["name"] == "tusk-metrics")
        .expect("the tusk-metrics Service in config/manager/manager.yaml");
    let service_labels: BTreeMap<String, String> =
        serde_yaml::from_value(service["metadata"]["labels"].clone()).expect("labels");
    assert!(selector_matches(
        &monitor["spec"]["selector"],
        &service_labels
    ));
    let namespace = service["metadata"]["namespace"]
        .as_str()
        .expect("namespace");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"][0].as_str(),
        Some(namespace)
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert!(
        service["spec"]["ports"]
            .as_sequence()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == endpoint["port"]),
        "no Service port {:?}",
        endpoint["port"]
    );
    assert_eq!(endpoint["honorLabels"], true);
}
