//! Instance managers label their own pod (issue #31: `-rw` must not wait for
//! the operator, nor for its next leader when it is lost mid-failover), and
//! may do nothing else with pods: on a 2-instance synchronous Database,
//!
//! 1. the managers' Role lets them patch exactly the instance pods;
//! 2. with a token bound to `pg-1` (what its manager holds), the API server
//!    admits a change of `pg-1`'s `tusk.dev/role` and refuses, naming why,
//!    the same change on `pg-2`, any other label, an annotation, a value
//!    other than `primary`/`replica`, and any pod not of this Database
//!    (server-side dry runs: nothing is changed);
//! 3. after the primary's pod is force-deleted, the promoted replica's pod
//!    carries `tusk.dev/role=primary` set by its own manager (field manager
//!    `tusk-instance`), and a writer through `-rw` lost no acknowledged
//!    write; how long the label took after the fault is printed.
//!
//! The chart installs the ValidatingAdmissionPolicy `tusk-instance-self-label`
//! that makes step 2 hold (RBAC alone cannot narrow a right to one label of
//! one's own pod).
//!   cargo test --manifest-path e2e/Cargo.toml --test self_label -- --nocapture

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::{Value, json};
use tusk_e2e::writer::{current_primary, nothing_lost, start_writing, unix_now};
use tusk_e2e::{Result, apply_value, database, in_namespace, install_operator, wait_ready};

const DB: &str = "pg";

/// A client that authenticates with `token` alone (no client certificate
/// from the kubeconfig, which is cluster-admin's).
async fn client_with_token(token: String) -> Result<Client> {
    let kubeconfig = Kubeconfig::read()?;
    let mut config =
        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.auth_info = AuthInfo {
        token: Some(token.into()),
        ..AuthInfo::default()
    };
    Ok(Client::try_from(config)?)
}

/// A token of the managers' ServiceAccount bound to `pod`: what that pod's
/// manager presents.
async fn manager_token(client: &Client, ns: &str, pod: &Pod) -> Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name_any()),
                uid: pod.uid(),
            }),
            expiration_seconds: Some(600),
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(&format!("{DB}-instance"), &PostParams::default(), &request)
        .await?;
    Ok(issued.status.ok_or("the TokenRequest has no status")?.token)
}

/// A server-side dry run of `metadata` applied to pod `name` as `client`:
/// `Ok` when admitted, else the API server's message.
async fn dry_run(
    client: &Client,
    ns: &str,
    name: &str,
    metadata: Value,
) -> std::result::Result<(), String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut metadata = metadata;
    metadata["name"] = json!(name);
    let patch = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata });
    let params = PatchParams::apply("tusk-instance").force().dry_run();
    match pods.patch(name, &params, &Patch::Apply(patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(format!("{} {}", status.code, status.message)),
        Err(other) => Err(other.to_string()),
    }
}

/// Whether `pod`'s `tusk.dev/role` label is owned by field manager `manager`.
fn role_owned_by(pod: &Pod, manager: &str) -> bool {
    pod.managed_fields().iter().any(|entry| {
        entry.manager.as_deref() == Some(manager)
            && entry.fields_v1.as_ref().is_some_and(|f| {
                f.0.pointer("/f:metadata/f:labels/f:tusk.dev~1role")
                    .is_some()
            })
    })
}

#[tokio::test]
async fn a_manager_labels_its_own_pod_and_nothing_else() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-self-label",
        Duration::from_secs(600),
        |client, ns| async move {
            apply_value(
                &client,
                Some(&ns),
                database(
                    DB,
                    json!({
                        "version": "17",
                        "instances": 2,
                        "storage": { "size": "1Gi" },
                        "replication": { "mode": "sync", "minSyncReplicas": 1 },
                    }),
                ),
                &PatchParams::apply(tusk_e2e::MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, DB, 2).await?;

            // 1. The Role.
            let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
            let role = roles.get(&format!("{DB}-instance")).await?;
            let pods_rule = role
                .rules
                .iter()
                .flatten()
                .find(|r| r.resources.as_deref() == Some(&["pods".to_owned()][..]))
                .ok_or("the managers' Role has no rule on pods")?;
            assert_eq!(pods_rule.verbs, ["patch"]);
            assert_eq!(
                pods_rule.resource_names.as_deref(),
                Some(&[format!("{DB}-1"), format!("{DB}-2")][..])
            );

            // 2. What a manager may do, as pg-1's manager.
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let own = pods.get(&format!("{DB}-1")).await?;
            let own_name = own.name_any();
            let other = format!("{DB}-2");
            let manager = client_with_token(manager_token(&client, &ns, &own).await?).await?;
            let role_label = |value: &str| json!({ "labels": { "tusk.dev/role": value } });
            dry_run(&manager, &ns, &own_name, role_label("primary"))
                .await
                .map_err(|e| format!("pg-1's manager may not label its own pod: {e}"))?;
            dry_run(&manager, &ns, &own_name, role_label("replica"))
                .await
                .map_err(|e| format!("pg-1's manager may not label its own pod: {e}"))?;
            let refusals = [
                (other.as_str(), role_label("primary"), "only its own pod"),
                (
                    own_name.as_str(),
                    json!({ "labels": { "app.kubernetes.io/component": "other" } }),
                    "only the tusk.dev/role label",
                ),
                (
                    own_name.as_str(),
                    json!({ "annotations": { "example.com/note": "x" } }),
                    "annotations",
                ),
                (
                    own_name.as_str(),
                    role_label("leader"),
                    "must be primary or replica",
                ),
            ];
            for (pod, metadata, why) in refusals {
                let shown = metadata.to_string();
                match dry_run(&manager, &ns, pod, metadata).await {
                    Ok(()) => {
                        return Err(format!("pg-1's manager was allowed {shown} on {pod}").into());
                    }
                    Err(message) => {
                        assert!(
                            message.contains(why),
                            "refusal of {shown} on {pod} does not say {why:?}: {message}"
                        );
                        println!("refused {shown} on {pod}: {message}");
                    }
                }
            }
            // Outside the Role's resourceNames: RBAC says no before the policy.
            match dry_run(&manager, &ns, "not-an-instance", role_label("primary")).await {
                Ok(()) => return Err("pg-1's manager may patch any pod".into()),
                Err(message) => assert!(message.starts_with("403"), "{message}"),
            }

            // 3. A failover: the promoted manager labels its own pod.
            let old = current_primary(&client, &ns, DB).await?;
            start_writing(&client, &ns, DB).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let fault = unix_now();
            let started = Instant::now();
            pods.delete(
                &old,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            )
            .await?;
            let new = if old == own_name {
                other.clone()
            } else {
                own_name.clone()
            };
            let labelled = loop {
                let pod = pods.get(&new).await?;
                if pod.labels().get("tusk.dev/role").map(String::as_str) == Some("primary") {
                    break pod;
                }
                if started.elapsed() > Duration::from_secs(120) {
                    return Err(format!("{new} was not labelled primary within 120 s").into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            println!(
                "self-label: {new} labelled primary {:.2} s after {old}'s pod was force-deleted",
                unix_now() - fault
            );
            assert!(
                role_owned_by(&labelled, "tusk-instance"),
                "{new}'s role label was not set by its manager (field managers: {:?})",
                labelled
                    .managed_fields()
                    .iter()
                    .map(|e| e.manager.clone())
                    .collect::<Vec<_>>()
            );
            wait_ready(&client, &ns, DB, 2).await?;
            let acked = nothing_lost(&client, &ns, DB).await?;
            println!("self-label: {acked} acknowledged writes, none lost");
            Ok(())
        },
    )
    .await;
}
