//! The read-only `kubectl tusk` commands against real Databases, through the
//! real kubectl: `status` of a healthy and of a degraded Database (with the
//! node, QoS class and replay lag the operator now publishes), `why`,
//! `history`, `connect`, `logs`, `status` run by a ServiceAccount that may
//! only get/list/watch Databases, Backups and Events, and a `report` bundle
//! holding no secret value.

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::{Api, ListParams, PatchParams, PostParams};
use kube::config::Kubeconfig;
use serde_json::{Value, json};
use tusk::api::v1::Database;
use tusk_e2e::plugin::{kubectl_command, run, tusk};
use tusk_e2e::{
    Result, apply_value, database, in_namespace, install_operator, wait_for, wait_ready,
};

/// How long the operator may take to publish a progress figure (it writes
/// those at most every 30 s).
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn read_only_commands_show_healthy_and_degraded_databases() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-view",
        Duration::from_secs(900),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let healthy = json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"}});
            apply_value(&client, Some(&ns), database("pg", healthy), &apply).await?;
            // One node: the second instance has nowhere to go.
            let apart = json!({
                "version": "17", "instances": 2, "storage": {"size": "1Gi"},
                "affinity": {"podAntiAffinity": "required"}
            });
            apply_value(&client, Some(&ns), database("apart", apart), &apply).await?;
            wait_ready(&client, &ns, "pg", 2).await?;

            healthy_status(&client, &ns).await?;
            degraded_status(&client, &ns).await?;

            let history = tusk(&["history", "pg", "-n", &ns]).await.ok("history pg")?;
            assert!(!history.is_empty(), "history prints a table or says none");
            let logs = tusk(&["logs", "pg", "-n", &ns]).await.ok("logs pg")?;
            assert!(
                logs.lines().any(|l| l.contains(" pg-1 "))
                    && logs.lines().any(|l| l.contains(" pg-2 ")),
                "both instances' lines, each after its name:\n{logs}"
            );
            connect(&client, &ns).await?;
            read_only_status(&client, &ns).await?;
            report_holds_no_secret(&client, &ns).await?;
            Ok(())
        },
    )
    .await;
}

async fn healthy_status(client: &kube::Client, ns: &str) -> Result<()> {
    let text = tusk(&["status", "pg", "-n", ns]).await.ok("status pg")?;
    assert!(
        text.contains(&format!("Database {ns}/pg: Ready, 2/2 instances ready")),
        "{text}"
    );
    for word in [
        "pg-1",
        "pg-2",
        "primary",
        "replica",
        "Replication: asynchronous",
    ] {
        assert!(text.contains(word), "status lacks {word}:\n{text}");
    }
    let why = tusk(&["why", "pg", "-n", ns]).await;
    assert_eq!(why.code, 0, "{why:?}");
    assert_eq!(why.stdout.lines().count(), 1, "{why:?}");
    assert!(why.stdout.contains("is Ready"), "{why:?}");

    // The operator publishes node, QoS class and replay lag in time.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    let report = loop {
        let json = tusk(&["status", "pg", "-n", ns, "-o", "json"])
            .await
            .ok("status pg -o json")?;
        let report: Value = serde_json::from_str(&json)?;
        let instances = report["status"]["instances"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let complete = instances.len() == 2
            && instances.iter().all(|i| {
                i["node"].is_string() && i["qosClass"].is_string() && i["lagMilliseconds"].is_i64()
            });
        if complete {
            break report;
        }
        if started.elapsed() > PROGRESS_TIMEOUT {
            return Err(format!(
                "no node, QoS and lag in time after {PROGRESS_TIMEOUT:?}:\n{json}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    assert_eq!(report["summary"]["ready"], true, "{report}");
    for instance in report["status"]["instances"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = instance["name"].as_str().unwrap_or_default();
        let pod = pods.get(name).await?;
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let qos = pod.status.as_ref().and_then(|s| s.qos_class.clone());
        assert_eq!(
            instance["node"].as_str(),
            node.as_deref(),
            "{name}: {instance}"
        );
        assert_eq!(
            instance["qosClass"].as_str(),
            qos.as_deref(),
            "{name}: {instance}"
        );
        assert!(
            instance["lagMilliseconds"]
                .as_i64()
                .is_some_and(|ms| ms >= 0),
            "{name}: {instance}"
        );
    }
    let yaml = tusk(&["status", "pg", "-n", ns, "-o", "yaml"])
        .await
        .ok("status pg -o yaml")?;
    let from_yaml: Value = serde_yaml::from_str(&yaml)?;
    assert_eq!(from_yaml["name"], "pg");
    Ok(())
}

async fn degraded_status(client: &kube::Client, ns: &str) -> Result<()> {
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    wait_for(&databases, "apart", tusk_e2e::READY_TIMEOUT, |db| {
        db.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.reason == "Unschedulable")
        })
    })
    .await?;
    let status = tusk(&["status", "apart", "-n", ns])
        .await
        .ok("status apart")?;
    assert!(status.contains("(not Ready)"), "{status}");
    assert!(status.contains("apart-2"), "{status}");
    assert!(status.contains("cannot be scheduled"), "{status}");
    assert!(status.contains("Needs attention"), "{status}");
    let why = tusk(&["why", "apart", "-n", ns]).await;
    assert_eq!(why.code, 1, "not Ready is exit code 1: {why:?}");
    assert!(
        why.stderr.contains("Database apart is not Ready"),
        "{why:?}"
    );
    assert!(why.stdout.contains("1. Ready is Unschedulable"), "{why:?}");
    assert!(
        why.stdout.contains("spec.affinity"),
        "names what to look at: {why:?}"
    );
    let missing = tusk(&["status", "nothere", "-n", ns]).await;
    assert_eq!(missing.code, 3, "{missing:?}");
    assert_eq!(missing.stderr.lines().count(), 1, "{missing:?}");
    Ok(())
}

async fn connect(client: &kube::Client, ns: &str) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let app = secrets.get("pg-app").await?;
    let password = app
        .data
        .as_ref()
        .and_then(|d| d.get("password"))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .ok_or("pg-app has no password")?;
    let hidden = tusk(&["connect", "pg", "-n", ns]).await.ok("connect pg")?;
    assert!(
        !hidden.contains(&password),
        "the password is shown:\n{hidden}"
    );
    assert!(
        hidden.contains("<from Secret pg-app, key password>"),
        "{hidden}"
    );
    let shown = tusk(&["connect", "pg", "-n", ns, "--show-secrets"])
        .await
        .ok("connect pg --show-secrets")?;
    assert!(
        shown.contains(&password),
        "--show-secrets shows it:\n{shown}"
    );
    Ok(())
}

/// A ServiceAccount that may only get/list/watch Databases, Backups and
/// Events runs `status` and `why`, and cannot read Secrets or pods.
async fn read_only_status(client: &kube::Client, ns: &str) -> Result<()> {
    let post = PostParams::default();
    let apply = PatchParams::apply(tusk_e2e::MANAGER);
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "tusk-viewer"},
        "rules": [
            {"apiGroups": ["tusk.dev"], "resources": ["databases", "backups"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]}
        ]
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "tusk-viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tusk-viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "tusk-viewer", "namespace": ns}]
    });
    let account =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tusk-viewer"}});
    for object in [account, role, binding] {
        apply_value(client, Some(ns), object, &apply).await?;
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let answer: TokenRequest = accounts
        .create_subresource("token", "tusk-viewer", &post, &request)
        .await?;
    let token = answer
        .status
        .map(|s| s.token)
        .ok_or("no token in the TokenRequest")?;
    let path = std::env::temp_dir().join(format!("tusk-viewer-{ns}.kubeconfig"));
    std::fs::write(&path, viewer_kubeconfig(&token, ns)?)?;
    let as_viewer = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let path = path.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut command = kubectl_command(&args).await;
            command.env("KUBECONFIG", &path);
            run(command).await
        }
    };
    // The account is as narrow as claimed.
    let secrets = as_viewer(&["get", "secrets", "-n", ns]).await;
    assert_ne!(secrets.code, 0, "the viewer can read Secrets: {secrets:?}");
    let pods = as_viewer(&["get", "pods", "-n", ns]).await;
    assert_ne!(pods.code, 0, "the viewer can list pods: {pods:?}");
    let status = as_viewer(&["tusk", "status", "pg", "-n", ns])
        .await
        .ok("status pg (as the viewer)")?;
    assert!(status.contains("Ready, 2/2 instances ready"), "{status}");
    assert!(status.contains("pg-2"), "{status}");
    let why = as_viewer(&["tusk", "why", "apart", "-n", ns]).await;
    assert_eq!(why.code, 1, "{why:?}");
    assert!(why.stdout.contains("Unschedulable"), "{why:?}");
    let history = as_viewer(&["tusk", "history", "pg", "-n", ns]).await;
    assert_eq!(history.code, 0, "{history:?}");
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// A kubeconfig for the viewer's token on the tests' cluster.
fn viewer_kubeconfig(token: &str, ns: &str) -> Result<String> {
    let config = Kubeconfig::read()?;
    let context_name = config.current_context.clone().ok_or("no current context")?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or("the current context is not in the kubeconfig")?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or("the current context's cluster is not in the kubeconfig")?;
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": serde_json::to_value(&cluster)?}],
        "users": [{"name": "tusk-viewer", "user": {"token": token}}],
        "contexts": [{"name": "viewer", "context": {"cluster": "e2e", "user": "tusk-viewer", "namespace": ns}}],
        "current-context": "viewer"
    });
    Ok(serde_yaml::to_string(&kubeconfig)?)
}

/// `report` writes a bundle in which no Secret value of the namespace
/// appears: each value under a secret key, each value of 16 bytes or more,
/// and each such line of a multi-line value (a PEM key).
async fn report_holds_no_secret(client: &kube::Client, ns: &str) -> Result<()> {
    let path = std::env::temp_dir().join(format!("tusk-report-{ns}.tar.zst"));
    let path_text = path.display().to_string();
    let out = tusk(&["report", "pg", "-n", ns, "--output", &path_text])
        .await
        .ok("report pg")?;
    assert!(out.contains(&path_text), "{out}");
    let files = tusk::plugin::report::read(&path)?;
    let _ = std::fs::remove_file(&path);
    for name in [
        "report/database.yaml",
        "report/pods.yaml",
        "report/secrets.yaml",
        "report/logs/pg-1.log",
    ] {
        assert!(
            files.contains_key(name),
            "{name} missing; the bundle holds {:?}",
            files.keys()
        );
    }
    assert!(
        files["report/secrets.yaml"].contains("<redacted, "),
        "{}",
        files["report/secrets.yaml"]
    );
    assert!(!files["report/logs/pg-1.log"].is_empty());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut checked = 0;
    for secret in secrets.list(&ListParams::default()).await?.items {
        for (key, value) in secret.data.clone().unwrap_or_default() {
            let text = String::from_utf8_lossy(&value.0).into_owned();
            let secret_key = ["password", "token", "key", "uri", "secret"]
                .iter()
                .any(|w| key.to_lowercase().contains(w));
            let mut values = vec![text.trim().to_owned()];
            values.extend(text.lines().map(|l| l.trim().to_owned()));
            for value in values {
                let fence = value.starts_with("-----") && value.ends_with("-----");
                if fence || value.is_empty() || !(secret_key || value.len() >= 16) {
                    continue;
                }
                checked += 1;
                for (file, content) in &files {
                    assert!(
                        !content.contains(&value),
                        "{file} holds the value of key {key} of Secret {}",
                        secret.metadata.name.as_deref().unwrap_or_default()
                    );
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} secret values were checked");
    Ok(())
}
