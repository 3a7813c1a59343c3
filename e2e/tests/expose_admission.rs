//! `spec.expose` at admission, against the real API server and the operator's
//! webhook: each bad input refused naming the field (the schema's enum and
//! CEL rules, the webhook's CIDR, DNS and node-port rules), nothing stored;
//! and a load balancer open to every address admitted with a warning.

use std::time::Duration;

use kube::api::{Api, PatchParams};
use serde_json::{Value, json};
use tusk::api::v1::Database;
use tusk_e2e::{apply_value, database, in_namespace, install_operator};

fn spec(expose: Value) -> Value {
    json!({
        "version": "17", "instances": 1, "storage": {"size": "1Gi"},
        "expose": expose,
    })
}

fn lb(target: &str, ranges: &[&str]) -> Value {
    json!({"target": target, "type": "LoadBalancer", "allowedSourceRanges": ranges})
}

/// Each bad `spec.expose` is refused before anything exists, the field it
/// names in the message.
#[tokio::test]
async fn bad_exposure_is_refused_naming_the_field() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-expose-adm",
        Duration::from_secs(120),
        |client, ns| async move {
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            let bad = [
                (
                    "an unknown target",
                    json!([lb("rx", &["192.0.2.0/24"])]),
                    "spec.expose[0].target",
                ),
                (
                    "a node port outside the cluster's range",
                    json!([{"target": "rw", "type": "NodePort", "nodePort": 80}]),
                    "spec.expose[0].nodePort: 80 is outside the cluster's node-port range 30000-32767",
                ),
                (
                    "a source range that is not a CIDR",
                    json!([lb("rw", &["192.0.2.0/24", "192.0.2.0/33"])]),
                    "spec.expose[0].allowedSourceRanges[1]",
                ),
                (
                    "a load balancer without source ranges",
                    json!([{"target": "rw", "type": "LoadBalancer"}]),
                    "spec.expose[0].allowedSourceRanges",
                ),
                (
                    "two entries with the same target and type",
                    json!([lb("ro", &["192.0.2.0/24"]), lb("ro", &["198.51.100.0/24"])]),
                    "at most one entry per target and type",
                ),
                (
                    "a hostname that is not a DNS name",
                    json!([{"target": "rw", "type": "NodePort", "hostname": "Orders_DB.example.com"}]),
                    "spec.expose[0].hostname",
                ),
                (
                    "source ranges on a node port",
                    json!([{"target": "r", "type": "NodePort", "allowedSourceRanges": ["192.0.2.0/24"]}]),
                    "spec.expose[0].allowedSourceRanges",
                ),
            ];
            for (what, expose, field) in bad {
                let refused = apply_value(&client, Some(&ns), database("exposed", spec(expose)), &apply)
                    .await
                    .err()
                    .ok_or_else(|| format!("{what} was admitted"))?
                    .to_string();
                assert!(refused.contains(field), "{what}: {refused}");
            }
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            assert!(databases.get_opt("exposed").await?.is_none());
            Ok(())
        },
    )
    .await;
}

/// `0.0.0.0/0` is a choice the user may make: admitted (a server-side dry
/// run, nothing stored), with a warning naming the field and the Service.
#[tokio::test]
async fn a_load_balancer_open_to_everyone_is_admitted_with_a_warning() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-expose-warn",
        Duration::from_secs(120),
        |client, ns| async move {
            let mut body = database("open", spec(json!([lb("rw", &["0.0.0.0/0"])])));
            body["metadata"]["namespace"] = json!(ns);
            let request = http::Request::post(format!(
                "/apis/tusk.dev/v1/namespaces/{ns}/databases?dryRun=All"
            ))
            .header("content-type", "application/json")
            .body(kube::client::Body::from(serde_json::to_vec(&body)?))?;
            let response = client.send(request).await?;
            let status = response.status();
            let warnings: Vec<String> = response
                .headers()
                .get_all("warning")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect();
            assert!(status.is_success(), "refused: {status}");
            assert!(
                warnings.iter().any(|w| w.contains(
                    "spec.expose[0].allowedSourceRanges[0] is 0.0.0.0/0: Service open-rw-lb accepts connections from any address"
                )),
                "{warnings:?}"
            );
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            assert!(
                databases.get_opt("open").await?.is_none(),
                "a dry run stores nothing"
            );
            Ok(())
        },
    )
    .await;
}
