//! Monitoring on a real cluster: a real Prometheus, run by the test on the host,
//! discovers the operator and the PostgreSQL instances through the API server
//! (`kubernetes_sd_configs` with `$KUBECONFIG`), scrapes them as
//! config/monitoring's ServiceMonitor and PodMonitor say, evaluates the
//! PrometheusRule's alerts, and its queries return the series Tusk promises.
//!
//! No Prometheus Operator runs here: the test translates the two monitors into
//! the scrape jobs the Prometheus Operator would generate from them (selectors,
//! namespaces, port, path, honorLabels, relabelings, target labels), so the
//! monitor files themselves are what is tested. Only their intervals are not
//! kept: everything is scraped and evaluated every 2 s.
//!
//! Two tests: the series and the quiet rules of a healthy replicated Database;
//! and an alert that fires for a real fault (the Database's object store
//! stopped, so WAL archiving fails) and resolves when the fault is undone.
//! The rules are the PrometheusRule's as shipped, but for the firing alert's
//! `for`, shortened in the rules file the test writes (see [`rules_file`]).
//!
//! The binary is `$PROMETHEUS`, else `scripts/install-tools --path prometheus`.
//! It must have Kubernetes service discovery: Debian bookworm's package does
//! not (Debian removed it), trixie's 2.53 does; the test fails at once, saying
//! so, with one that lacks it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::PatchParams;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::v1::Database;
use tusk_e2e::store::{objectstore_async, spec_with_store, store_up, superuser_password};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, repo_path, sql, wait_ready,
};

/// How long Prometheus has to discover and scrape every target.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a query has to return what the test expects once every target is
/// up (a series can trail its target's first scrape by a scrape interval).
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

const OPERATOR_JOB: &str = "tusk-operator";
const INSTANCES_JOB: &str = "tusk-instances";

/// Fails the test (with an `Err`, so the namespace is still dumped and
/// deleted) unless `$cond` holds.
macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        let holds: bool = $cond;
        if !holds {
            return Err(format!($($message)+).into());
        }
    };
}

/// `ensure!` that two values are equal, printing both.
macro_rules! ensure_eq {
    ($left:expr, $right:expr $(,)?) => {{
        let (left, right) = (&$left, &$right);
        ensure!(
            left == right,
            "{} = {left:?}, expected {right:?}",
            stringify!($left)
        );
    }};
    ($left:expr, $right:expr, $($message:tt)+) => {{
        let (left, right) = (&$left, &$right);
        ensure!(left == right, "{left:?} != {right:?}: {}", format!($($message)+));
    }};
}

fn monitoring_yaml(file: &str) -> Result<serde_yaml::Value> {
    let path = repo_path(&format!("config/monitoring/{file}"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(serde_yaml::from_str(&text)?)
}

fn as_json(value: &serde_yaml::Value) -> Result<Value> {
    Ok(serde_json::to_value(value)?)
}

/// A Kubernetes label name as Prometheus' service discovery spells it in
/// `__meta_kubernetes_*_label_<name>`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// `value` as an RE2 regex matching exactly that string.
fn regex_literal(value: &str) -> String {
    value
        .chars()
        .flat_map(|c| {
            let escape = r"\.+*?()|[]{}^$".contains(c);
            escape.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// Relabelings that keep only targets whose `kind` (service or pod) carries
/// every label of the monitor's `selector.matchLabels`.
fn selector_relabelings(kind: &str, selector: &Value) -> Result<Vec<Value>> {
    if selector.get("matchExpressions").is_some() {
        return Err(
            "the monitor's selector has matchExpressions, which this test does not translate"
                .into(),
        );
    }
    let labels = selector["matchLabels"]
        .as_object()
        .filter(|labels| !labels.is_empty())
        .ok_or("the monitor's selector has no matchLabels")?;
    labels
        .iter()
        .map(|(name, value)| {
            let value = value
                .as_str()
                .ok_or("a matchLabels value is not a string")?;
            let name = sanitize(name);
            Ok(json!({
                "source_labels": [
                    format!("__meta_kubernetes_{kind}_label_{name}"),
                    format!("__meta_kubernetes_{kind}_labelpresent_{name}"),
                ],
                "regex": format!("({});true", regex_literal(value)),
                "action": "keep",
            }))
        })
        .collect()
}

/// The monitor endpoint's `relabelings` (Prometheus Operator spelling) as
/// Prometheus `relabel_configs`.
fn translate_relabelings(endpoint: &Value) -> Result<Vec<Value>> {
    let Some(relabelings) = endpoint.get("relabelings") else {
        return Ok(Vec::new());
    };
    let relabelings = relabelings.as_array().ok_or("relabelings is no list")?;
    relabelings
        .iter()
        .map(|relabeling| {
            let fields = relabeling.as_object().ok_or("a relabeling is no mapping")?;
            let mut out = serde_json::Map::new();
            for (key, value) in fields {
                let key = match key.as_str() {
                    "sourceLabels" => "source_labels",
                    "targetLabel" => "target_label",
                    "separator" | "regex" | "modulus" | "replacement" | "action" => key,
                    other => return Err(format!("unknown relabeling field {other}").into()),
                };
                let value = match (key, value.as_str()) {
                    // The Prometheus Operator accepts any case; Prometheus wants lower.
                    ("action", Some(action)) => Value::from(action.to_lowercase()),
                    _ => value.clone(),
                };
                out.insert(key.to_owned(), value);
            }
            Ok(Value::Object(out))
        })
        .collect()
}

/// Target labels the Prometheus Operator sets on every target, the last of them
/// `endpoint` (the port's name).
fn target_labels(port: &str, with_service: bool) -> Vec<Value> {
    let mut labels = vec![
        json!({"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"}),
    ];
    if with_service {
        labels.push(
            json!({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"}),
        );
    }
    labels.extend([
        json!({"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}),
        json!({"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"}),
        json!({"target_label": "endpoint", "replacement": port}),
    ]);
    labels
}

/// The one endpoint of a monitor, its port name and its path.
fn single_endpoint<'a>(spec: &'a Value, key: &str) -> Result<(&'a Value, String, String)> {
    let endpoints = spec[key].as_array().ok_or(format!("no {key}"))?;
    let [endpoint] = endpoints.as_slice() else {
        return Err(format!(
            "{key} has {} entries; the test expects one",
            endpoints.len()
        )
        .into());
    };
    let port = endpoint["port"]
        .as_str()
        .ok_or("an endpoint without a port name")?;
    let path = endpoint["path"].as_str().unwrap_or("/metrics");
    Ok((endpoint, port.to_owned(), path.to_owned()))
}

/// The operator's job, from servicemonitor.yaml: Endpoints of the Services its
/// selector picks in the namespaces it names, on the named port.
fn operator_job(kubeconfig: &Path) -> Result<Value> {
    let monitor = as_json(&monitoring_yaml("servicemonitor.yaml")?)?;
    if monitor["kind"] != "ServiceMonitor" {
        return Err(format!("servicemonitor.yaml is a {}", monitor["kind"]).into());
    }
    let spec = &monitor["spec"];
    let namespaces = spec["namespaceSelector"]["matchNames"]
        .as_array()
        .filter(|names| !names.is_empty())
        .ok_or("the ServiceMonitor names no namespace")?;
    let (endpoint, port, path) = single_endpoint(spec, "endpoints")?;
    let mut relabel = selector_relabelings("service", &spec["selector"])?;
    relabel.push(json!({
        "source_labels": ["__meta_kubernetes_endpoint_port_name"],
        "regex": regex_literal(&port),
        "action": "keep",
    }));
    relabel.extend(target_labels(&port, true));
    relabel.extend(translate_relabelings(endpoint)?);
    Ok(json!({
        "job_name": OPERATOR_JOB,
        "honor_labels": endpoint["honorLabels"].as_bool().unwrap_or(false),
        "metrics_path": path,
        "scheme": endpoint["scheme"].as_str().unwrap_or("http"),
        "tls_config": tls_config(endpoint),
        "kubernetes_sd_configs": [{
            "role": "endpoints",
            "kubeconfig_file": kubeconfig,
            "namespaces": {"names": namespaces},
        }],
        "relabel_configs": relabel,
    }))
}

/// An endpoint's `tlsConfig` as Prometheus's `tls_config` (what the
/// monitors set: whether the server certificate is verified).
fn tls_config(endpoint: &Value) -> Value {
    json!({
        "insecure_skip_verify": endpoint["tlsConfig"]["insecureSkipVerify"].as_bool().unwrap_or(false),
    })
}

/// The instances' job, from podmonitor.yaml: pods its selector picks, on the
/// named container port. The PodMonitor watches every namespace; this job only
/// the test's, so that other tests' Databases stay out of the figures.
fn instances_job(kubeconfig: &Path, namespace: &str) -> Result<Value> {
    let monitor = as_json(&monitoring_yaml("podmonitor.yaml")?)?;
    if monitor["kind"] != "PodMonitor" {
        return Err(format!("podmonitor.yaml is a {}", monitor["kind"]).into());
    }
    let spec = &monitor["spec"];
    if spec["namespaceSelector"]["any"] != true {
        return Err("the PodMonitor no longer watches every namespace; update this test".into());
    }
    let (endpoint, port, path) = single_endpoint(spec, "podMetricsEndpoints")?;
    let mut relabel = vec![json!({
        // As the Prometheus Operator does: finished pods are no targets.
        "source_labels": ["__meta_kubernetes_pod_phase"],
        "regex": "(Failed|Succeeded)",
        "action": "drop",
    })];
    relabel.extend(selector_relabelings("pod", &spec["selector"])?);
    relabel.push(json!({
        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": regex_literal(&port),
        "action": "keep",
    }));
    relabel.extend(target_labels(&port, false));
    relabel.extend(translate_relabelings(endpoint)?);
    Ok(json!({
        "job_name": INSTANCES_JOB,
        "honor_labels": endpoint["honorLabels"].as_bool().unwrap_or(false),
        "metrics_path": path,
        "scheme": endpoint["scheme"].as_str().unwrap_or("http"),
        "tls_config": tls_config(endpoint),
        "kubernetes_sd_configs": [{
            "role": "pod",
            "kubeconfig_file": kubeconfig,
            "namespaces": {"names": [namespace]},
        }],
        "relabel_configs": relabel,
    }))
}

/// prometheus.yml: both jobs, the PrometheusRule's alerts, everything every 2 s
/// (the monitors' 30 s intervals would make the test wait minutes).
fn prometheus_config(kubeconfig: &Path, namespace: &str, rules: &Path) -> Result<String> {
    let config = json!({
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"},
        "rule_files": [rules],
        "scrape_configs": [operator_job(kubeconfig)?, instances_job(kubeconfig, namespace)?],
    });
    Ok(serde_yaml::to_string(&config)?)
}

/// The PrometheusRule's `spec` (its `groups`) as a Prometheus rules file,
/// every rule as shipped except the `for` of the alerts `shorter_for` names:
/// a test cannot wait the 10 minutes an alert may hold back. Expressions,
/// labels and annotations are never changed.
fn rules_file(shorter_for: &[(&str, &str)]) -> Result<String> {
    let rule = monitoring_yaml("prometheusrule.yaml")?;
    if rule["kind"] != "PrometheusRule" {
        return Err("prometheusrule.yaml is no PrometheusRule".into());
    }
    let mut spec = rule["spec"].clone();
    for (alert, wait) in shorter_for {
        let found = spec["groups"]
            .as_sequence_mut()
            .into_iter()
            .flatten()
            .filter_map(|group| group["rules"].as_sequence_mut())
            .flatten()
            .find(|rule| rule["alert"].as_str() == Some(alert))
            .ok_or(format!("prometheusrule.yaml has no alert {alert}"))?;
        found["for"] = serde_yaml::Value::from(*wait);
    }
    Ok(serde_yaml::to_string(&spec)?)
}

/// How many alerting rules the PrometheusRule as shipped holds: what a
/// Prometheus loading it must list.
fn shipped_alert_count() -> Result<usize> {
    let rule = monitoring_yaml("prometheusrule.yaml")?;
    Ok(rule["spec"]["groups"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|group| group["rules"].as_sequence())
        .flatten()
        .filter(|rule| rule["alert"].as_str().is_some())
        .count())
}

/// The prometheus binary: `$PROMETHEUS`, else the one `scripts/install-tools`
/// provides (Debian's package, installed on first use). It needs Kubernetes
/// service discovery, which not every build has: [`Prometheus::wait_ready`]
/// says so when it is missing.
fn prometheus_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("PROMETHEUS").filter(|p| !p.is_empty()) {
        return Ok(path.into());
    }
    let script = repo_path("scripts/install-tools");
    let output = Command::new(&script)
        .args(["--path", "prometheus"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "scripts/install-tools --path prometheus failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !path.is_file() {
        return Err(format!(
            "install-tools answered {}, which is no file",
            path.display()
        )
        .into());
    }
    Ok(path)
}

/// A Prometheus process on loopback with its own configuration and storage in a
/// temporary directory; killed, and the directory removed, on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    port: u16,
    started: tokio::time::Instant,
}

impl Prometheus {
    /// Starts Prometheus for the instances of `namespace`, evaluating `rules`
    /// (a rules file, see [`rules_file`]).
    fn start(namespace: &str, rules: &str) -> Result<Prometheus> {
        let binary = prometheus_binary()?;
        let kubeconfig = std::env::var_os("KUBECONFIG").ok_or("KUBECONFIG is not set")?;
        let kubeconfig = std::fs::canonicalize(&kubeconfig)
            .map_err(|e| format!("KUBECONFIG {kubeconfig:?}: {e}"))?;
        let dir = std::env::temp_dir().join(format!(
            "tusk-e2e-prometheus-{}-{:06x}",
            std::process::id(),
            rand::random::<u32>() & 0xff_ffff
        ));
        std::fs::create_dir_all(dir.join("data"))?;
        let rules_path = dir.join("rules.yaml");
        std::fs::write(&rules_path, rules)?;
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            prometheus_config(&kubeconfig, namespace, &rules_path)?,
        )?;
        // A port nobody listens on now; Prometheus takes it a moment later.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let spawned = Command::new(&binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn();
        match spawned {
            Ok(child) => Ok(Prometheus {
                child,
                dir,
                port,
                started: tokio::time::Instant::now(),
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(format!("cannot start {}: {e}", binary.display()).into())
            }
        }
    }

    /// Waits until Prometheus answers `/-/ready`; fails with its log when it
    /// exits instead (a configuration it refuses, such as a service discovery
    /// its build lacks).
    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                let log = self.log_tail();
                let hint = if log.contains("field kubernetes_sd_configs not found") {
                    "\nThis Prometheus is built without Kubernetes service discovery (Debian \
                     bookworm's 2.42 package has it removed; trixie's 2.53 has it): point \
                     $PROMETHEUS at one that has it."
                } else {
                    ""
                };
                return Err(format!("Prometheus exited ({status}):\n{log}{hint}").into());
            }
            let port = self.port;
            let answer =
                tokio::task::spawn_blocking(move || tusk_e2e::loopback::get(port, "/-/ready"))
                    .await?;
            if answer.is_ok() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("Prometheus not ready after 60s: {answer:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn config(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.yml")).unwrap_or_default()
    }

    /// The warnings and errors in Prometheus' own log.
    fn log_problems(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        log.lines()
            .filter(|line| line.contains("level=warn") || line.contains("level=error"))
            .map(str::to_owned)
            .collect()
    }

    /// The last lines of Prometheus' own log.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// GET `path` of the HTTP API; the `data` of a successful answer.
    async fn api(&self, path: &str) -> Result<Value> {
        let port = self.port;
        let path = path.to_owned();
        let body =
            tokio::task::spawn_blocking(move || tusk_e2e::loopback::get(port, &path)).await??;
        let answer: Value =
            serde_json::from_str(&body).map_err(|e| format!("not JSON ({e}): {body}"))?;
        if answer["status"] != "success" {
            return Err(format!("Prometheus answered {answer}").into());
        }
        Ok(answer["data"].clone())
    }

    /// An instant query's vector.
    async fn query(&self, promql: &str) -> Result<Vec<Series>> {
        let data = self
            .api(&format!("/api/v1/query?query={}", percent_encode(promql)))
            .await?;
        if data["resultType"] != "vector" {
            return Err(format!("{promql} gave a {}, not a vector", data["resultType"]).into());
        }
        data["result"]
            .as_array()
            .ok_or("no result")?
            .iter()
            .map(|series| {
                let labels = serde_json::from_value(series["metric"].clone())?;
                let value = series["value"][1]
                    .as_str()
                    .ok_or("a sample without a value")?
                    .parse()?;
                Ok(Series { labels, value })
            })
            .collect()
    }

    /// Queries `promql` until `done` holds for its answer, for up to `timeout`.
    async fn eventually(
        &self,
        promql: &str,
        timeout: Duration,
        done: impl Fn(&[Series]) -> bool,
    ) -> Result<Vec<Series>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let last = match self.query(promql).await {
                Ok(series) if done(&series) => return Ok(series),
                Ok(series) => format!("{series:?}"),
                Err(e) => format!("error: {e}"),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(
                    format!("{promql}: not as expected after {timeout:?}; last: {last}").into(),
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Prometheus' clock, as its queries see it.
    async fn now(&self) -> Result<f64> {
        self.query("vector(time())")
            .await?
            .first()
            .map(|s| s.value)
            .ok_or_else(|| "vector(time()) is empty".into())
    }

    /// The pending and firing alerts named `name` for `namespace`, as
    /// /api/v1/alerts lists them (an alert that resolved is no longer listed).
    async fn alerts(&self, name: &str, namespace: &str) -> Result<Vec<Alert>> {
        let data = self.api("/api/v1/alerts").await?;
        let alerts = data["alerts"].as_array().ok_or("no alerts list")?;
        alerts
            .iter()
            .map(|alert| {
                Ok(Alert {
                    labels: serde_json::from_value(alert["labels"].clone())?,
                    state: alert["state"].as_str().unwrap_or_default().to_owned(),
                })
            })
            .filter(|alert: &Result<Alert>| {
                alert.as_ref().map_or(true, |a| {
                    a.label("alertname") == name && a.label("namespace") == namespace
                })
            })
            .collect()
    }

    /// Waits until alerting rule `name` is loaded, healthy, and was last
    /// evaluated after `at` (Prometheus' clock), so that the absence of its
    /// alert says something about the data at `at`.
    async fn evaluated_after(&self, name: &str, at: f64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + QUERY_TIMEOUT;
        loop {
            let data = self.api("/api/v1/rules").await?;
            let rule = data["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|group| group["rules"].as_array().into_iter().flatten())
                .find(|rule| rule["name"] == name)
                .cloned()
                .ok_or(format!("rule {name} is not loaded"))?;
            let evaluated = seconds_since_epoch(rule["lastEvaluation"].as_str().unwrap_or(""));
            ensure!(
                rule["health"] == "ok",
                "rule {name} does not evaluate cleanly: {rule}"
            );
            if evaluated > at {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("rule {name} not evaluated after {at}: {rule}").into());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// What Prometheus makes of its targets, one line each.
    async fn targets(&self) -> String {
        match self.api("/api/v1/targets").await {
            Ok(data) => data["activeTargets"]
                .as_array()
                .map(|targets| {
                    targets
                        .iter()
                        .map(|t| {
                            format!(
                                "{} {} {} {}",
                                t["labels"]["job"], t["scrapeUrl"], t["health"], t["lastError"]
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
            Err(e) => format!("no targets: {e}"),
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One series of an instant query.
#[derive(Debug, Clone)]
struct Series {
    labels: BTreeMap<String, String>,
    value: f64,
}

impl Series {
    fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// One alert of /api/v1/alerts.
#[derive(Debug, Clone)]
struct Alert {
    labels: BTreeMap<String, String>,
    /// `pending` or `firing`.
    state: String,
}

impl Alert {
    fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

fn label_values(series: &[Series], name: &str) -> BTreeSet<String> {
    series.iter().map(|s| s.label(name).to_owned()).collect()
}

/// `pod=value` pairs, for printing.
fn figures(series: &[Series], label: &str) -> String {
    series
        .iter()
        .map(|s| format!("{}={}", s.label(label), s.value))
        .collect::<Vec<_>>()
        .join(" ")
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An RFC 3339 time (as the Prometheus API writes them) in seconds since the
/// epoch; 0 for anything else (Prometheus writes its zero time for a rule
/// never evaluated).
fn seconds_since_epoch(rfc3339: &str) -> f64 {
    rfc3339
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map_or(0.0, |t| t.as_millisecond() as f64 / 1000.0)
}

fn all_up(series: &[Series], count: usize) -> bool {
    series.len() == count && series.iter().all(|s| s.value == 1.0)
}

async fn scrape_and_query(prometheus: &Prometheus, ns: &str, db: &Database) -> Result<()> {
    let status = db.status.clone().ok_or("no status")?;
    let primary = status.current_primary.clone().ok_or("no currentPrimary")?;
    let instances: BTreeSet<String> = status.instances.iter().map(|i| i.name.clone()).collect();
    let replica = instances
        .iter()
        .find(|name| **name != primary)
        .cloned()
        .ok_or("no replica in status.instances")?;
    let pg = db.name_any();

    // Service discovery through the API server finds both instances and both
    // operator replicas, and every scrape succeeds.
    let started = tokio::time::Instant::now();
    let instance_targets = prometheus
        .eventually(
            &format!("up{{job=\"{INSTANCES_JOB}\"}}"),
            SCRAPE_TIMEOUT,
            |s| all_up(s, 2),
        )
        .await?;
    let operator_targets = prometheus
        .eventually(
            &format!("up{{job=\"{OPERATOR_JOB}\"}}"),
            SCRAPE_TIMEOUT.saturating_sub(started.elapsed()),
            |s| all_up(s, 2),
        )
        .await?;
    println!(
        "all 4 targets up {:.1}s after the Database was Ready ({:.1}s after Prometheus started)",
        started.elapsed().as_secs_f64(),
        prometheus.started.elapsed().as_secs_f64()
    );
    // The PodMonitor's target labels: the pod, its namespace, and the Database
    // from the pod's tusk.dev/database label (its relabeling).
    ensure_eq!(label_values(&instance_targets, "pod"), instances);
    ensure_eq!(
        label_values(&instance_targets, "namespace"),
        BTreeSet::from([ns.to_owned()])
    );
    ensure_eq!(
        label_values(&instance_targets, "database"),
        BTreeSet::from([pg.clone()])
    );
    ensure_eq!(
        label_values(&operator_targets, "service"),
        BTreeSet::from(["tusk-metrics".to_owned()])
    );
    // TuskInstanceUnreachable's selector picks the instances, not the operator.
    let selected = prometheus.query("up{database!=\"\"}").await?;
    ensure_eq!(label_values(&selected, "pod"), instances);
    println!(
        "operator targets: {}",
        label_values(&operator_targets, "pod")
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    );

    // PostgreSQL answers on both instances.
    let pg_up = prometheus
        .eventually(
            &format!("tusk_pg_up{{namespace=\"{ns}\"}}"),
            QUERY_TIMEOUT,
            |s| all_up(s, 2),
        )
        .await?;
    ensure_eq!(label_values(&pg_up, "pod"), instances);
    println!("tusk_pg_up: {}", figures(&pg_up, "pod"));
    // Prometheus' clock now: the alert check at the end waits for an
    // evaluation of the rules that saw both instances up.
    let up_at = prometheus
        .query("vector(time())")
        .await?
        .first()
        .map(|s| s.value)
        .ok_or("vector(time()) is empty")?;

    // Exactly one primary, the one status.currentPrimary names; the other a replica.
    for (role, expected) in [("primary", &primary), ("replica", &replica)] {
        let promql = format!("tusk_pg_role{{namespace=\"{ns}\",role=\"{role}\"}} == 1");
        let series = prometheus
            .eventually(&promql, QUERY_TIMEOUT, |s| s.len() == 1)
            .await?;
        ensure_eq!(series[0].label("pod"), expected, "{promql}: {series:?}");
        ensure_eq!(series[0].label("database"), pg);
        println!(
            "tusk_pg_role{{role=\"{role}\"}} == 1 on {}",
            series[0].label("pod")
        );
    }

    // The primary reports its standby by name, the replica its own lag.
    let standby = prometheus
        .eventually(
            &format!("tusk_pg_standby_replay_lag_bytes{{namespace=\"{ns}\"}}"),
            QUERY_TIMEOUT,
            |s| s.len() == 1,
        )
        .await?;
    ensure_eq!(standby[0].label("standby"), replica, "{standby:?}");
    ensure_eq!(standby[0].label("pod"), primary, "{standby:?}");
    ensure!(standby[0].value >= 0.0, "{standby:?}");
    println!(
        "tusk_pg_standby_replay_lag_bytes{{pod=\"{primary}\",standby=\"{replica}\"}} = {}",
        standby[0].value
    );
    for unit in ["bytes", "seconds"] {
        let lag = prometheus
            .eventually(
                &format!("tusk_pg_replication_lag_{unit}{{namespace=\"{ns}\"}}"),
                QUERY_TIMEOUT,
                |s| s.len() == 1,
            )
            .await?;
        ensure_eq!(lag[0].label("pod"), replica, "{lag:?}");
        ensure!(lag[0].value >= 0.0, "{lag:?}");
        println!(
            "tusk_pg_replication_lag_{unit}{{pod=\"{replica}\"}} = {}",
            lag[0].value
        );
    }

    // The application's database has a size on both instances.
    let sizes = prometheus
        .eventually(
            &format!("tusk_pg_database_size_bytes{{namespace=\"{ns}\",datname=\"app\"}} > 0"),
            QUERY_TIMEOUT,
            |s| s.len() == 2,
        )
        .await?;
    ensure_eq!(label_values(&sizes, "pod"), instances);
    println!(
        "tusk_pg_database_size_bytes{{datname=\"app\"}}: {}",
        figures(&sizes, "pod")
    );

    // One operator replica leads, and it is the one that reconciles.
    let leader = prometheus
        .eventually("sum(tusk_leader)", QUERY_TIMEOUT, |s| {
            s.len() == 1 && s[0].value == 1.0
        })
        .await?;
    let leaders = prometheus
        .eventually("tusk_leader == 1", QUERY_TIMEOUT, |s| s.len() == 1)
        .await?;
    let leader_pod = leaders[0].label("pod").to_owned();
    println!(
        "sum(tusk_leader) = {}; leader {leader_pod}",
        leader[0].value
    );
    let reconciles = prometheus
        .eventually(
            "tusk_reconcile_total{controller=\"database\"}",
            QUERY_TIMEOUT,
            |s| {
                s.iter()
                    .any(|s| s.label("pod") == leader_pod && s.value > 0.0)
            },
        )
        .await?;
    println!(
        "tusk_reconcile_total{{controller=\"database\"}}: {}",
        figures(&reconciles, "pod")
    );
    let ready = prometheus
        .eventually("tusk_databases{phase=\"Ready\"}", QUERY_TIMEOUT, |s| {
            s.iter()
                .any(|s| s.label("pod") == leader_pod && s.value >= 1.0)
        })
        .await?;
    println!(
        "tusk_databases{{phase=\"Ready\"}}: {}",
        figures(&ready, "pod")
    );
    // honorLabels: the operator's per-Database series keep the Database's own
    // namespace, so they join the instance series.
    let failovers = prometheus
        .eventually(
            &format!("tusk_failovers_total{{namespace=\"{ns}\",database=\"{pg}\"}}"),
            QUERY_TIMEOUT,
            |s| s.iter().any(|s| s.label("pod") == leader_pod),
        )
        .await?;
    println!(
        "tusk_failovers_total{{namespace=\"{ns}\",database=\"{pg}\"}}: {}",
        figures(&failovers, "pod")
    );

    // The PrometheusRule's alerts are loaded and evaluate cleanly; none is
    // pending or firing for the instances. "None" counts only once the rules
    // were evaluated on data with both instances up: an evaluation that has
    // not happened yet raises no alert either.
    let shipped = shipped_alert_count()?;
    ensure!(shipped > 0, "prometheusrule.yaml ships no alert");
    let deadline = tokio::time::Instant::now() + QUERY_TIMEOUT;
    let rules = loop {
        let data = prometheus.api("/api/v1/rules").await?;
        let rules: Vec<(String, String, String, f64)> = data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|group| group["rules"].as_array().into_iter().flatten())
            .map(|rule| {
                let text = |key: &str| rule[key].as_str().unwrap_or_default().to_owned();
                (
                    text("name"),
                    text("type"),
                    text("health"),
                    seconds_since_epoch(&text("lastEvaluation")),
                )
            })
            .collect();
        if rules.len() == shipped
            && rules.iter().all(|(_, kind, health, evaluated)| {
                kind == "alerting" && health == "ok" && *evaluated > up_at
            })
        {
            break rules;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("the rules did not all load and evaluate: {data}").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let names: BTreeSet<&str> = rules.iter().map(|(name, ..)| name.as_str()).collect();
    println!("alerting rules, all health ok, evaluated with both instances up: {names:?}");
    let alerts = prometheus
        .query("ALERTS{alertname=\"TuskInstanceDown\"}")
        .await?;
    ensure!(alerts.is_empty(), "TuskInstanceDown: {alerts:?}");
    let problems = prometheus.log_problems();
    println!("Prometheus logged {} warnings or errors", problems.len());
    for line in problems {
        println!("  {line}");
    }
    Ok(())
}

/// A real Prometheus, configured from config/monitoring, scrapes the operator
/// and a replicated Database's instances on the local cluster.
#[tokio::test]
async fn a_real_prometheus_scrapes_the_operator_and_the_instances() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-mon",
        Duration::from_secs(600),
        |client, ns| async move {
            // Prometheus first: it discovers the instances as the operator
            // creates them, and a build it cannot run fails the test at once.
            let mut prometheus = Prometheus::start(&ns, &rules_file(&[])?)?;
            prometheus.wait_ready().await?;
            let outcome = async {
                let apply = PatchParams::apply(tusk_e2e::MANAGER);
                let spec = json!({
                    "version": "17", "instances": 2, "storage": {"size": "1Gi"},
                    "bootstrap": {"initdb": {"database": "app", "owner": "app"}}
                });
                apply_value(&client, Some(&ns), database("pg", spec), &apply).await?;
                let db = wait_ready(&client, &ns, "pg", 2).await?;
                println!(
                    "Database pg Ready with 2 instances {:.1}s after Prometheus started",
                    prometheus.started.elapsed().as_secs_f64()
                );
                scrape_and_query(&prometheus, &ns, &db).await
            }
            .await;
            if outcome.is_err() {
                eprintln!("--- prometheus.yml\n{}", prometheus.config());
                eprintln!("--- Prometheus targets\n{}", prometheus.targets().await);
                eprintln!("--- Prometheus log\n{}", prometheus.log_tail());
            }
            outcome
        },
    )
    .await;
}

/// The alert the fault below raises, and its `for` as this test evaluates it:
/// the shipped 10 minutes would hold the test that long for nothing more than
/// Prometheus' own timer. Its expression is evaluated as shipped.
const ARCHIVING_ALERT: &str = "TuskWALArchivingFailing";
const ARCHIVING_ALERT_FOR: &str = "10s";
/// How long the store outage has to show as a failed archiving attempt and
/// hold for `ARCHIVING_ALERT_FOR` (archive_command tries the store before it
/// gives up), and then to clear once the store is back.
const ALERT_TIMEOUT: Duration = Duration::from_secs(240);

/// Writes a row and closes the WAL segment, so the archiver has a file to
/// archive now rather than at `archive_timeout`.
async fn close_segment(client: &Client, ns: &str, password: &str) -> Result<()> {
    let host = format!("pg-rw.{ns}.svc");
    sql(
        client,
        ns,
        &host,
        password,
        "postgres",
        "CREATE TABLE IF NOT EXISTS beat (at timestamptz DEFAULT now()); \
         INSERT INTO beat DEFAULT VALUES; SELECT pg_switch_wal()",
    )
    .await?;
    Ok(())
}

/// Polls the alert for `ns` until `done` holds for its list; returns every
/// state it was seen in, in order (a state once per run of polls that saw it).
async fn watch_alert(
    prometheus: &Prometheus,
    ns: &str,
    done: impl Fn(&[Alert]) -> bool,
) -> Result<Vec<String>> {
    let deadline = tokio::time::Instant::now() + ALERT_TIMEOUT;
    let mut seen: Vec<String> = Vec::new();
    loop {
        let alerts = prometheus.alerts(ARCHIVING_ALERT, ns).await?;
        for alert in &alerts {
            if seen.last() != Some(&alert.state) {
                seen.push(alert.state.clone());
            }
        }
        if done(&alerts) {
            return Ok(seen);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "{ARCHIVING_ALERT}: not as expected after {ALERT_TIMEOUT:?}; states seen \
                 {seen:?}, now {alerts:?}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The archiving of a single-instance Database healthy, its store stopped
/// (the fault), then started again; what Prometheus makes of it.
async fn archiving_alert_fires_and_resolves(
    client: &Client,
    ns: &str,
    prometheus: &Prometheus,
) -> Result<()> {
    let apply = PatchParams::apply(tusk_e2e::MANAGER);
    let (endpoint, bucket) = store_up(ns).await?;
    let spec = spec_with_store(1, &endpoint, &bucket);
    apply_value(client, Some(ns), database("pg", spec), &apply).await?;
    let db = wait_ready(client, ns, "pg", 1).await?;
    let pod = db
        .status
        .as_ref()
        .and_then(|s| s.current_primary.clone())
        .ok_or("no currentPrimary")?;
    let password = superuser_password(client, ns, "pg").await?;

    // Healthy first: a segment archived, seen by Prometheus, and the rule
    // evaluated on it without an alert.
    close_segment(client, ns, &password).await?;
    let archiving_works = format!(
        "tusk_pg_wal_archive_last_success_timestamp_seconds{{namespace=\"{ns}\"}} \
         > tusk_pg_wal_archive_last_failure_timestamp_seconds{{namespace=\"{ns}\"}}"
    );
    prometheus
        .eventually(&archiving_works, SCRAPE_TIMEOUT, |s| s.len() == 1)
        .await?;
    prometheus
        .evaluated_after(ARCHIVING_ALERT, prometheus.now().await?)
        .await?;
    let before = prometheus.alerts(ARCHIVING_ALERT, ns).await?;
    ensure!(before.is_empty(), "alert while archiving works: {before:?}");
    println!("{pod}: archiving works, {ARCHIVING_ALERT} inactive");

    // The fault: the store goes away, and a closed segment cannot be archived.
    objectstore_async(&["stop", ns]).await?;
    let outage = tokio::time::Instant::now();
    close_segment(client, ns, &password).await?;
    let states = watch_alert(prometheus, ns, |alerts| {
        alerts.iter().any(|a| a.state == "firing")
    })
    .await?;
    println!(
        "{ARCHIVING_ALERT} {states:?} {:.0}s into the outage",
        outage.elapsed().as_secs_f64()
    );
    // Held back for its `for` before it fired.
    ensure_eq!(states, ["pending", "firing"], "the alert's states in order");
    let alerts = prometheus.alerts(ARCHIVING_ALERT, ns).await?;
    let [alert] = alerts.as_slice() else {
        return Err(format!("one alert expected: {alerts:?}").into());
    };
    ensure_eq!(alert.label("pod"), pod, "{alert:?}");
    ensure_eq!(alert.label("database"), "pg", "{alert:?}");
    ensure_eq!(alert.label("severity"), "critical", "{alert:?}");

    // Undone: the store back, archiving catches up, the alert resolves.
    objectstore_async(&["start", ns]).await?;
    let back = tokio::time::Instant::now();
    close_segment(client, ns, &password).await?;
    prometheus
        .eventually(&archiving_works, ALERT_TIMEOUT, |s| s.len() == 1)
        .await?;
    watch_alert(prometheus, ns, <[Alert]>::is_empty).await?;
    println!(
        "{ARCHIVING_ALERT} resolved {:.0}s after the store came back",
        back.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Tusk's shipped alert for failing WAL archiving fires in a real Prometheus
/// that scrapes a real instance whose object store is down, and resolves once
/// the store is back.
#[tokio::test]
async fn the_archiving_alert_fires_while_the_store_is_down_and_resolves() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-alert",
        Duration::from_secs(900),
        |client, ns| async move {
            let rules = rules_file(&[(ARCHIVING_ALERT, ARCHIVING_ALERT_FOR)])?;
            let mut prometheus = Prometheus::start(&ns, &rules)?;
            prometheus.wait_ready().await?;
            let outcome = archiving_alert_fires_and_resolves(&client, &ns, &prometheus).await;
            if outcome.is_err() {
                eprintln!("--- Prometheus targets\n{}", prometheus.targets().await);
                eprintln!("--- Prometheus log\n{}", prometheus.log_tail());
            }
            outcome
        },
    )
    .await;
}
