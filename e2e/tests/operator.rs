//! Tusk's CRDs on a real API server, and the operator running in the cluster as a
//! user would run it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tusk::api::v1::Database;
use tusk_e2e::{
    MANAGER, OPERATOR_NAMESPACE, apply_value, apply_yaml, client, database, in_namespace,
    install_operator, repo_path, wait_for,
};

/// The API server itself refuses bad specs, naming the field, through the
/// generated OpenAPI schema and its CEL rules (no webhook involved).
#[tokio::test]
async fn the_api_server_accepts_the_sample_and_refuses_malformed_databases() {
    let client = client().await;
    // The validating webhook is part of the install; wait for it so that creates do not race it.
    install_operator(&client).await;
    in_namespace("e2e-crd", Duration::from_secs(120), |client, ns| async move {
        let strict = PatchParams::apply(MANAGER).validation_strict();
        let sample = std::fs::read_to_string(repo_path("config/samples/database.yaml"))?;
        let applied = apply_yaml(&client, Some(&ns), &sample).await?;
        assert_eq!(applied[0].name_any(), "orders");
        let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
        let orders = databases.get("orders").await?;
        assert_eq!(orders.spec.instances, 3);

        let cases = [
            (json!({"version": "17", "instances": "three", "storage": {"size": "1Gi"}}), "spec.instances"),
            (json!({"version": "17", "instances": 0, "storage": {"size": "1Gi"}}), "spec.instances"),
            (json!({"version": "12", "storage": {"size": "1Gi"}}), "spec.version"),
            (json!({"version": "17", "storage": {"size": "a lot"}}), "spec.storage.size"),
            (json!({"version": "17", "storage": {"size": "1Gi"}, "replicaz": 3}), "spec.replicaz"),
            (json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"},
                    "replication": {"mode": "sync", "minSyncReplicas": 2}}), "spec.replication.minSyncReplicas"),
            (json!({"version": "17", "storage": {"size": "1Gi"},
                    "postgresql": {"parameters": {"archive_command": "/bin/true"}}}), "spec.postgresql.parameters"),
            (json!({"version": "17", "storage": {"size": "1Gi"}, "backup": {"schedule": "0 2 * * *"}}), "spec.backup.objectStore"),
        ];
        for (i, (spec, field)) in cases.into_iter().enumerate() {
            let result = apply_value(&client, Some(&ns), database(&format!("bad-{i}"), spec.clone()), &strict).await;
            let message = match result {
                Ok(_) => return Err(format!("{spec} was accepted").into()),
                Err(e) => e.to_string(),
            };
            assert!(message.contains(field), "the refusal of {spec} does not name {field}: {message}");
        }
        // Immutable bootstrap, enforced on update.
        let changed = database(
            "orders",
            json!({"version": "17", "instances": 3, "storage": {"size": "1Gi"},
                   "bootstrap": {"initdb": {"database": "other", "owner": "app"}}}),
        );
        let message = apply_value(&client, Some(&ns), changed, &strict).await.expect_err("bootstrap changed").to_string();
        assert!(message.contains("spec.bootstrap is immutable"), "{message}");
        Ok(())
    })
    .await;
}

fn condition<'a>(
    db: &'a Database,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    db.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// The operator, installed from `config/` and running in-cluster with its
/// ServiceAccount, elects one leader and writes status with observedGeneration,
/// Conditions and Events.
#[tokio::test]
async fn the_operator_runs_in_cluster_and_writes_status() {
    let client = client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-op",
        Duration::from_secs(180),
        |client, ns| async move {
            let sample = std::fs::read_to_string(repo_path("config/samples/database.yaml"))?;
            apply_yaml(&client, Some(&ns), &sample).await?;
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            let seen = wait_for(&databases, "orders", Duration::from_secs(90), |db| {
                db.status.as_ref().and_then(|s| s.observed_generation) == db.metadata.generation
            })
            .await?;
            assert!(seen.finalizers().iter().any(|f| f == "tusk.dev/cleanup"));
            let ready = condition(&seen, "Ready").ok_or("no Ready condition")?;
            // Provisioning is under way (its outcome is the provisioning suite's).
            assert_ne!(ready.reason, "InvalidSpec", "{}", ready.message);
            assert_eq!(ready.observed_generation, seen.metadata.generation);

            // A spec Tusk cannot honour is refused at the door by the validating webhook,
            // with the field named (the reconciler runs the same check; see the unit tests).
            let bad = json!({"spec": {"primary": "someone-else-1"}});
            let message = databases
                .patch("orders", &PatchParams::default(), &Patch::Merge(&bad))
                .await
                .expect_err("an instance of another database was accepted as primary")
                .to_string();
            assert!(
                message.contains("denied the request: spec.primary"),
                "{message}"
            );

            // A change the reconciler sees: generation and observedGeneration move together.
            let more = json!({"spec": {"postgresql": {"parameters": {"work_mem": "8MB"}}}});
            databases
                .patch("orders", &PatchParams::default(), &Patch::Merge(&more))
                .await?;
            let seen = wait_for(&databases, "orders", Duration::from_secs(60), |db| {
                db.metadata.generation == Some(2)
                    && db.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
            })
            .await?;
            assert_eq!(
                condition(&seen, "Ready").map(|c| c.observed_generation),
                Some(Some(2))
            );

            let events: Api<Event> = Api::namespaced(client.clone(), &ns);
            let reasons: Vec<String> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("orders"))
                .filter_map(|e| e.reason)
                .collect();
            assert!(
                reasons.iter().any(|r| r == "CreatedSecrets"),
                "events: {reasons:?}"
            );

            // Exactly one replica leads: the Lease names a running operator pod.
            let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
            let lease = leases.get("tusk-operator").await?;
            let holder = lease
                .spec
                .and_then(|s| s.holder_identity)
                .ok_or("lease without holder")?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
            let names: Vec<String> = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=tusk"))
                .await?
                .items
                .iter()
                .map(|p| p.name_any())
                .collect();
            assert!(
                names.contains(&holder),
                "lease holder {holder} is not one of {names:?}"
            );

            // Deleting runs the finalizer and the object goes away.
            databases.delete("orders", &Default::default()).await?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while databases.get_opt("orders").await?.is_some() {
                if tokio::time::Instant::now() > deadline {
                    return Err("the Database was not released by its finalizer".into());
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok(())
        },
    )
    .await;
}

/// A Database written as v1alpha1 reads back as v1 and back again; updates through
/// either version keep what the other holds; lists work in both.
#[tokio::test]
async fn both_versions_convert_through_the_webhook_without_loss() {
    let client = client().await;
    install_operator(&client).await;
    in_namespace("e2e-conv", Duration::from_secs(120), |client, ns| async move {
        let legacy = std::fs::read_to_string(repo_path("config/samples/database-v1alpha1.yaml"))?;
        apply_yaml(&client, Some(&ns), &legacy).await?;
        let v1: Api<Database> = Api::namespaced(client.clone(), &ns);
        let alpha: Api<tusk::api::v1alpha1::Database> = Api::namespaced(client.clone(), &ns);
        let as_v1 = v1.get("legacy").await?;
        assert_eq!((as_v1.spec.version.as_str(), as_v1.spec.instances, as_v1.spec.storage.size.as_str()), ("15", 1, "1Gi"));

        // A field only v1 has, set through v1, survives an update made through v1alpha1.
        let tuned = json!({"spec": {"postgresql": {"parameters": {"work_mem": "16MB"}}, "failover": {"delaySeconds": 5}}});
        v1.patch("legacy", &PatchParams::default(), &Patch::Merge(&tuned)).await?;
        let as_alpha = alpha.get("legacy").await?;
        let carried = as_alpha.annotations().get(tusk::api::conversion::V1_FIELDS_ANNOTATION).cloned().unwrap_or_default();
        assert!(carried.contains("work_mem"), "v1-only fields are not carried: {carried:?}");
        alpha.patch("legacy", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 2}}))).await?;
        let after = v1.get("legacy").await?;
        assert_eq!(after.spec.instances, 2);
        assert_eq!(after.spec.postgresql.parameters.get("work_mem").map(String::as_str), Some("16MB"));
        assert_eq!(after.spec.failover.delay_seconds, 5);
        assert!(!after.annotations().contains_key(tusk::api::conversion::V1_FIELDS_ANNOTATION));

        let v1_names: Vec<String> = v1.list(&ListParams::default()).await?.items.iter().map(|d| d.name_any()).collect();
        let alpha_names: Vec<String> = alpha.list(&ListParams::default()).await?.items.iter().map(|d| d.name_any()).collect();
        assert_eq!(v1_names, ["legacy"]);
        assert_eq!(alpha_names, ["legacy"]);
        Ok(())
    })
    .await;
}

/// Changes that would lose data or cannot be carried out are refused by the
/// validating webhook, naming the field; so is a Backup of a missing Database.
#[tokio::test]
async fn the_webhook_refuses_unsafe_changes() {
    let client = client().await;
    install_operator(&client).await;
    in_namespace("e2e-guard", Duration::from_secs(120), |client, ns| async move {
        let sample = std::fs::read_to_string(repo_path("config/samples/database.yaml"))?;
        apply_yaml(&client, Some(&ns), &sample).await?;
        let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
        let cases = [
            (json!({"spec": {"version": "16"}}), "spec.version: cannot go down from major version 17 to 16"),
            (json!({"spec": {"storage": {"size": "512Mi"}}}), "spec.storage.size: cannot shrink"),
        ];
        for (patch, expected) in cases {
            let message = databases
                .patch("orders", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect_err("an unsafe change was accepted")
                .to_string();
            assert!(message.contains(expected), "{message}");
        }
        // Growing and upgrading are fine.
        let fine = json!({"spec": {"storage": {"size": "2Gi"}, "version": "17.4"}});
        databases.patch("orders", &PatchParams::default(), &Patch::Merge(&fine)).await?;

        let backup = json!({"apiVersion": "tusk.dev/v1", "kind": "Backup", "metadata": {"name": "b1"}, "spec": {"database": "missing"}});
        let message = apply_value(&client, Some(&ns), backup, &PatchParams::apply(MANAGER))
            .await
            .expect_err("a Backup of a missing Database was accepted")
            .to_string();
        assert!(message.contains("spec.database: no Database \"missing\""), "{message}");
        Ok(())
    })
    .await;
}

/// Renewing the serving certificate (forced by marking it as expiring) keeps the
/// CA, reloads every replica, and the webhooks keep answering.
#[tokio::test]
async fn certificate_rotation_keeps_the_webhooks_working() {
    use k8s_openapi::api::core::v1::Secret;
    let client = client().await;
    install_operator(&client).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let field = |s: &Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .unwrap_or_default()
    };
    let before = secrets
        .get("tusk-webhook-cert")
        .await
        .expect("the operator created its certificate Secret");
    let expiring = json!({"metadata": {"annotations": {"tusk.dev/serving-not-after": "2000-01-01T00:00:00Z"}}});
    secrets
        .patch(
            "tusk-webhook-cert",
            &PatchParams::default(),
            &Patch::Merge(&expiring),
        )
        .await
        .expect("mark the certificate as expiring");
    let after = wait_for(
        &secrets,
        "tusk-webhook-cert",
        Duration::from_secs(120),
        |s| field(s, "tls.crt") != field(&before, "tls.crt"),
    )
    .await
    .expect("the operator renewed the serving certificate");
    assert_eq!(
        field(&after, "ca.crt"),
        field(&before, "ca.crt"),
        "renewal must keep the CA"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get("databases.tusk.dev").await.expect("CRD");
    let bundle = crd
        .spec
        .conversion
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .and_then(|c| c.ca_bundle);
    assert_eq!(bundle.map(|b| b.0), Some(field(&after, "ca.crt")));
    // Give every replica one check interval to reload, then use both webhooks.
    tokio::time::sleep(Duration::from_secs(35)).await;
    in_namespace(
        "e2e-rot",
        Duration::from_secs(60),
        |client, ns| async move {
            let legacy =
                std::fs::read_to_string(repo_path("config/samples/database-v1alpha1.yaml"))?;
            apply_yaml(&client, Some(&ns), &legacy).await?;
            let v1: Api<Database> = Api::namespaced(client.clone(), &ns);
            assert_eq!(v1.get("legacy").await?.spec.version, "15");
            Ok(())
        },
    )
    .await;
}
