//! Tracing on a real cluster: the operator and the instance managers export
//! their spans over OTLP to a real Jaeger (v2, built by
//! `scripts/install-tools jaeger`) that the test runs on the node's address,
//! and one trace joins the operator's reconcile and the instance operation it
//! called: the W3C `traceparent` the operator's instance client sends makes
//! the manager's span a child of the operator's call.
//!
//! The operator install is shared, so the test turns tracing on for its own
//! run only: it holds the cluster lock exclusive, sets the chart's
//! `tracing.otlpEndpoint` (`helm upgrade --reuse-values`), and sets it back
//! afterwards, whatever the outcome. The operator passes the setting on to
//! the instance pods it builds, so every Database that exists meanwhile
//! (another namespace's too) is rolled onto it and back.
//!
//! Jaeger is `$JAEGER`, else `scripts/install-tools --path jaeger`.

use std::collections::BTreeMap;
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tusk::api::v1::Database;
use tusk_e2e::{
    OPERATOR_NAMESPACE, Result, apply_value, database, helm, in_namespace_exclusive,
    install_operator, repo_path, wait_ready,
};

const OPERATOR_SERVICE: &str = "tusk-operator";
const INSTANCE_SERVICE: &str = "tusk-instance";
/// The manager's span of a switchover, and the operator's spans above it.
const INSTANCE_SPAN: &str = "instance.switchover";
const CALL_SPAN: &str = "instance_call";
const RECONCILE_SPAN: &str = "reconcile";
/// How long both processes have to export their spans (batches leave every
/// 5 s) and Jaeger to answer with the joined trace.
const TRACE_TIMEOUT: Duration = Duration::from_secs(60);

/// A Jaeger on the node's address (the pods reach the node there), in a
/// temporary directory; killed, and the directory removed, on drop.
struct Jaeger {
    child: Child,
    dir: PathBuf,
    /// The OTLP/HTTP endpoint, as the pods are told it.
    otlp: String,
    /// The query API's port on loopback.
    query_port: u16,
}

/// A port nobody listens on now on `ip`; Jaeger takes it a moment later.
fn free_port(ip: IpAddr) -> Result<u16> {
    Ok(TcpListener::bind((ip, 0))?.local_addr()?.port())
}

fn jaeger_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("JAEGER").filter(|p| !p.is_empty()) {
        return Ok(path.into());
    }
    let output = Command::new(repo_path("scripts/install-tools"))
        .args(["--path", "jaeger"])
        .stdin(Stdio::null())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "scripts/install-tools --path jaeger failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

impl Jaeger {
    /// Memory storage, the OTLP/HTTP receiver on `node_ip`, the query API on
    /// loopback, and nothing else (no fixed ports: other tests run beside).
    fn start(node_ip: IpAddr) -> Result<Jaeger> {
        let binary = jaeger_binary()?;
        let loopback = IpAddr::from([127, 0, 0, 1]);
        let (otlp_port, query_port, grpc_port) = (
            free_port(node_ip)?,
            free_port(loopback)?,
            free_port(loopback)?,
        );
        let config = json!({
            "service": {
                "extensions": ["jaeger_storage", "jaeger_query"],
                "pipelines": {"traces": {
                    "receivers": ["otlp"], "exporters": ["jaeger_storage_exporter"]
                }},
                "telemetry": {"metrics": {"level": "none"}},
            },
            "extensions": {
                "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
                "jaeger_query": {
                    "storage": {"traces": "memstore"},
                    "http": {"endpoint": format!("127.0.0.1:{query_port}")},
                    "grpc": {"endpoint": format!("127.0.0.1:{grpc_port}")},
                },
            },
            "receivers": {"otlp": {"protocols": {
                "http": {"endpoint": format!("{node_ip}:{otlp_port}")}
            }}},
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
        });
        let dir = std::env::temp_dir().join(format!(
            "tusk-e2e-jaeger-{}-{:06x}",
            std::process::id(),
            rand::random::<u32>() & 0xff_ffff
        ));
        std::fs::create_dir_all(&dir)?;
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, serde_yaml::to_string(&config)?)?;
        let log = std::fs::File::create(dir.join("jaeger.log"))?;
        let spawned = Command::new(&binary)
            .arg(format!("--config={}", config_path.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn();
        match spawned {
            Ok(child) => Ok(Jaeger {
                child,
                dir,
                otlp: format!("http://{node_ip}:{otlp_port}"),
                query_port,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(format!("cannot start {}: {e}", binary.display()).into())
            }
        }
    }

    /// Waits until the query API answers; fails with Jaeger's log when it
    /// exits instead.
    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("Jaeger exited ({status}):\n{}", self.log_tail()).into());
            }
            let answer = self.get("/api/services").await;
            if answer.is_ok() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("Jaeger not ready after 60s: {answer:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn get(&self, path: &str) -> Result<Value> {
        let (port, path) = (self.query_port, path.to_owned());
        let body =
            tokio::task::spawn_blocking(move || tusk_e2e::loopback::get(port, &path)).await??;
        serde_json::from_str(&body).map_err(|e| format!("not JSON ({e}): {body}").into())
    }

    /// The traces holding an `operation` span of `service`, as the query API
    /// (Jaeger's JSON model) returns them.
    async fn traces(&self, service: &str, operation: &str) -> Result<Vec<Value>> {
        let answer = self
            .get(&format!(
                "/api/traces?service={service}&operation={operation}&lookback=1h&limit=50"
            ))
            .await?;
        Ok(answer["data"].as_array().cloned().unwrap_or_default())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("jaeger.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One span of a trace in Jaeger's JSON model, flattened.
#[derive(Debug, Clone)]
struct Span {
    id: String,
    /// The span's `CHILD_OF` reference within the trace.
    parent: Option<String>,
    name: String,
    service: String,
    tags: BTreeMap<String, String>,
}

fn spans_of(trace: &Value) -> Vec<Span> {
    let services: BTreeMap<&str, &str> = trace["processes"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(id, process)| (id.as_str(), process["serviceName"].as_str().unwrap_or("")))
        .collect();
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    trace["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|span| Span {
            id: text(&span["spanID"]),
            parent: span["references"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["refType"] == "CHILD_OF" && r["traceID"] == span["traceID"])
                .map(|r| text(&r["spanID"])),
            name: text(&span["operationName"]),
            service: services
                .get(span["processID"].as_str().unwrap_or(""))
                .copied()
                .unwrap_or("")
                .to_owned(),
            tags: span["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|tag| (text(&tag["key"]), text(&tag["value"])))
                .collect(),
        })
        .collect()
}

/// In one trace: an [`INSTANCE_SPAN`] of the instance service whose parent is
/// the operator's [`CALL_SPAN`] for that operation, itself inside the
/// operator's [`RECONCILE_SPAN`] of Database `ns`/`database`. The chain from
/// the instance span up to the reconcile, or why there is none.
fn joined(trace: &Value, ns: &str, database: &str) -> std::result::Result<Vec<Span>, String> {
    let spans = spans_of(trace);
    let by_id: BTreeMap<&str, &Span> = spans.iter().map(|s| (s.id.as_str(), s)).collect();
    let summary = || {
        spans
            .iter()
            .map(|s| format!("{}/{} parent {:?}", s.service, s.name, s.parent))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let instance = spans
        .iter()
        .find(|s| s.name == INSTANCE_SPAN && s.service == INSTANCE_SERVICE)
        .ok_or_else(|| format!("no {INSTANCE_SERVICE}/{INSTANCE_SPAN}: {}", summary()))?;
    let mut chain = vec![instance.clone()];
    let mut current = instance;
    // A span's ancestors are few; the bound only guards against a cycle.
    for _ in 0..spans.len() {
        let Some(parent) = current.parent.as_deref() else {
            break;
        };
        let Some(next) = by_id.get(parent) else {
            return Err(format!(
                "{} has parent {parent}, which is not in the trace (yet): {}",
                current.name,
                summary()
            ));
        };
        chain.push((*next).clone());
        current = next;
        if current.name == RECONCILE_SPAN {
            break;
        }
    }
    let names: Vec<String> = chain
        .iter()
        .map(|s| format!("{}/{}", s.service, s.name))
        .collect();
    let call = chain.get(1).ok_or_else(|| {
        format!(
            "{INSTANCE_SPAN} is a root: no trace context reached the manager ({})",
            summary()
        )
    })?;
    if call.service != OPERATOR_SERVICE || call.name != CALL_SPAN {
        return Err(format!(
            "{INSTANCE_SPAN}'s parent is not the operator's call: {names:?}"
        ));
    }
    if call.tags.get("op").map(String::as_str) != Some("switchover") {
        return Err(format!("the call above {INSTANCE_SPAN} is {:?}", call.tags));
    }
    let top = chain.last().ok_or("an empty chain")?;
    if top.name != RECONCILE_SPAN || top.service != OPERATOR_SERVICE {
        return Err(format!(
            "no operator reconcile above {INSTANCE_SPAN}: {names:?}"
        ));
    }
    let tag = |key: &str| top.tags.get(key).map(String::as_str);
    if tag("database") != Some(database) || tag("namespace") != Some(ns) {
        return Err(format!(
            "the reconcile is not Database {database}'s: {:?}",
            top.tags
        ));
    }
    Ok(chain)
}

/// The node's InternalIP: where the pods reach the host.
async fn node_ip(client: &Client) -> Result<IpAddr> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await?;
    list.items
        .iter()
        .flat_map(|n| n.status.iter().flat_map(|s| s.addresses.iter().flatten()))
        .find(|a| a.type_ == "InternalIP")
        .ok_or("no node has an InternalIP")?
        .address
        .parse()
        .map_err(|e| format!("the node's InternalIP: {e}").into())
}

/// Runs helm, failing (not panicking: the operator must still be restored)
/// with its output.
async fn helm_run(args: Vec<String>) -> Result<String> {
    tokio::task::spawn_blocking(move || {
        let output = Command::new(helm())
            .args(&args)
            .current_dir(repo_path(""))
            .output()?;
        if !output.status.success() {
            return Err(format!(
                "helm {} failed:\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    })
    .await?
}

/// The release's `tracing.otlpEndpoint` as set now ("" when unset).
async fn traced_endpoint() -> Result<String> {
    let values = helm_run(
        [
            "get",
            "values",
            "tusk",
            "--all",
            "--output",
            "json",
            "--namespace",
            OPERATOR_NAMESPACE,
        ]
        .map(str::to_owned)
        .to_vec(),
    )
    .await?;
    let values: Value = serde_json::from_str(&values)?;
    Ok(values["tracing"]["otlpEndpoint"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Sets the chart's `tracing.otlpEndpoint` on the installed release, other
/// values kept, and waits until every operator replica runs with it.
async fn set_tracing(client: &Client, endpoint: &str) -> Result<()> {
    helm_run(vec![
        "upgrade".into(),
        "tusk".into(),
        "helm/tusk".into(),
        "--namespace".into(),
        OPERATOR_NAMESPACE.into(),
        "--reuse-values".into(),
        "--set-string".into(),
        format!("tracing.otlpEndpoint={endpoint}"),
        "--wait".into(),
        "--timeout".into(),
        "5m".into(),
    ])
    .await?;
    tusk_e2e::operator_rolled_out(client).await?;
    Ok(())
}

/// The value of `name` in the environment of pod `pod`'s first container.
fn pod_env(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// A 2-instance Database created while tracing is on, switched over to its
/// replica; the trace of that switchover in Jaeger.
async fn switchover_is_one_trace(client: &Client, ns: &str, jaeger: &Jaeger) -> Result<()> {
    let apply = PatchParams::apply(tusk_e2e::MANAGER);
    let spec = json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"}});
    apply_value(client, Some(ns), database("pg", spec), &apply).await?;
    let db = wait_ready(client, ns, "pg", 2).await?;
    let status = db.status.clone().ok_or("no status")?;
    let primary = status.current_primary.clone().ok_or("no currentPrimary")?;
    let replica = status
        .instances
        .iter()
        .map(|i| i.name.clone())
        .find(|name| *name != primary)
        .ok_or("no replica in status.instances")?;
    // The instances export where the operator does: it passes the setting on.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pods.get(&primary).await?;
    let endpoint = pod_env(&pod, "OTEL_EXPORTER_OTLP_ENDPOINT");
    if endpoint.as_deref() != Some(jaeger.otlp.as_str()) {
        return Err(format!("{primary} exports to {endpoint:?}, not {}", jaeger.otlp).into());
    }

    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    let patch = json!({"spec": {"primary": replica}});
    databases
        .patch("pg", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_ready(client, ns, "pg", 2).await?;
    let switched = databases.get("pg").await?;
    let now_primary = switched.status.and_then(|s| s.current_primary);
    if now_primary.as_deref() != Some(replica.as_str()) {
        return Err(format!("after the switchover the primary is {now_primary:?}").into());
    }
    println!("switched over {primary} → {replica}");

    let deadline = tokio::time::Instant::now() + TRACE_TIMEOUT;
    loop {
        let traces = jaeger.traces(INSTANCE_SERVICE, INSTANCE_SPAN).await?;
        let outcomes: Vec<_> = traces.iter().map(|t| (t, joined(t, ns, "pg"))).collect();
        if let Some((trace, Ok(chain))) = outcomes.iter().find(|(_, o)| o.is_ok()) {
            let names: Vec<String> = chain
                .iter()
                .rev()
                .map(|s| format!("{}/{}", s.service, s.name))
                .collect();
            println!("trace {}: {}", trace["traceID"], names.join(" → "));
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let why: Vec<String> = outcomes
                .into_iter()
                .filter_map(|(t, o)| o.err().map(|e| format!("trace {}: {e}", t["traceID"])))
                .collect();
            return Err(format!(
                "no trace joins the reconcile and {INSTANCE_SPAN} after {TRACE_TIMEOUT:?}; \
                 {} trace(s) hold {INSTANCE_SPAN}: {why:?}",
                why.len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// A switchover is one trace in a real Jaeger: the operator's reconcile, its
/// call to the instance manager, and the manager's switchover beneath it.
#[tokio::test]
async fn a_switchover_is_one_trace_from_the_reconcile_to_the_instance() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace_exclusive(
        "e2e-trace",
        Duration::from_secs(900),
        |client, ns| async move {
            let mut jaeger = Jaeger::start(node_ip(&client).await?)?;
            jaeger.wait_ready().await?;
            let before = traced_endpoint().await?;
            let outcome = async {
                set_tracing(&client, &jaeger.otlp).await?;
                println!("operator exporting to {}", jaeger.otlp);
                switchover_is_one_trace(&client, &ns, &jaeger).await
            }
            .await;
            if outcome.is_err() {
                eprintln!("--- Jaeger log\n{}", jaeger.log_tail());
            }
            // Whatever happened, the shared install goes back to how it was.
            let restored = set_tracing(&client, &before).await;
            outcome?;
            restored.map_err(|e| format!("tracing not turned back off: {e}").into())
        },
    )
    .await;
}

#[cfg(test)]
mod model {
    use super::*;

    fn span(id: &str, parent: Option<&str>, name: &str, process: &str, tags: Value) -> Value {
        let references = parent.map_or_else(Vec::new, |p| {
            vec![json!({"refType": "CHILD_OF", "traceID": "t", "spanID": p})]
        });
        json!({"traceID": "t", "spanID": id, "operationName": name, "processID": process,
               "references": references, "tags": tags})
    }

    fn trace(spans: Vec<Value>) -> Value {
        json!({"traceID": "t", "spans": spans, "processes": {
            "p1": {"serviceName": OPERATOR_SERVICE}, "p2": {"serviceName": INSTANCE_SERVICE}}})
    }

    fn reconcile() -> Value {
        let tags = json!([{"key": "database", "value": "pg"}, {"key": "namespace", "value": "ns"}]);
        span("a", None, RECONCILE_SPAN, "p1", tags)
    }

    fn call() -> Value {
        span(
            "b",
            Some("a"),
            CALL_SPAN,
            "p1",
            json!([{"key": "op", "value": "switchover"}]),
        )
    }

    #[test]
    fn the_chain_runs_from_the_instance_to_the_reconcile() {
        let whole = trace(vec![
            reconcile(),
            call(),
            span("c", Some("b"), INSTANCE_SPAN, "p2", json!([])),
        ]);
        let chain = joined(&whole, "ns", "pg").unwrap();
        let names: Vec<&str> = chain.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [INSTANCE_SPAN, CALL_SPAN, RECONCILE_SPAN]);
        // An instance span of its own trace, or one under another parent, is no join.
        let alone = trace(vec![span("c", None, INSTANCE_SPAN, "p2", json!([]))]);
        assert!(
            joined(&alone, "ns", "pg")
                .unwrap_err()
                .contains("is a root")
        );
        let elsewhere = trace(vec![
            reconcile(),
            span("c", Some("a"), INSTANCE_SPAN, "p2", json!([])),
        ]);
        assert!(joined(&elsewhere, "ns", "pg").is_err());
        assert!(joined(&whole, "ns", "other").is_err());
        assert!(joined(&whole, "other-ns", "pg").is_err());
    }
}
