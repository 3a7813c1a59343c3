//! Tusk's CRDs on a real API server, and the operator running in the cluster as a
//! user would run it.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::json;
use tokio_rustls::TlsConnector;
use tusk::api::v1::{Database, DatabasePhase};
use tusk_e2e::{
    MANAGER, OPERATOR_NAMESPACE, Result, apply_value, apply_yaml, client, database, in_namespace,
    in_namespace_exclusive, install_operator, repo_path, wait_for,
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

        // One case per rule (the kinds of refusal the API server makes for
        // Tusk), each with the field its message must name. The admission
        // order is schema, then CEL, then the validating webhook: each spec
        // breaks one rule only, so the refusal seen is that rule's.
        let v1 = |spec: serde_json::Value| database("", spec);
        let cases = [
            // OpenAPI schema: type, range, pattern, unknown field.
            (v1(json!({"version": "17", "instances": "three", "storage": {"size": "1Gi"}})), "spec.instances"),
            (v1(json!({"version": "17", "instances": 0, "storage": {"size": "1Gi"}})), "spec.instances"),
            (v1(json!({"version": "12", "storage": {"size": "1Gi"}})), "spec.version"),
            (v1(json!({"version": "17", "storage": {"size": "a lot"}})), "spec.storage.size"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"}, "replicaz": 3})), "spec.replicaz"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"},
                       "bootstrap": {"initdb": {"database": "App-DB", "owner": "app"}}})), "spec.bootstrap.initdb.database"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"}, "failover": {"delaySeconds": 7200}})), "spec.failover.delaySeconds"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"},
                       "backup": {"objectStore": {"bucket": "Not_A_Bucket", "endpoint": "http://s3.local"}}})), "spec.backup.objectStore.bucket"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"},
                       "backup": {"objectStore": {"bucket": "tusk", "endpoint": "s3.local:9000"}}})), "spec.backup.objectStore.endpoint"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"},
                       "migrations": {"version": "1", "image": ""}})), "spec.migrations.image"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"},
                       "migrations": {"version": "v".repeat(64), "image": "localhost/app:1"}})), "spec.migrations.version"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"}, "backup": {"schedule": "0 2 * *"}})), "spec.backup.schedule"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"}, "backup": {"retention": "7y"}})), "spec.backup.retention"),
            // The v1alpha1 schema, for objects written in the old version.
            (json!({"apiVersion": "tusk.dev/v1alpha1", "kind": "Database", "metadata": {},
                    "spec": {"version": "17", "replicas": 17, "storageSize": "1Gi"}}), "spec.replicas"),
            // CEL rules.
            (json!({"apiVersion": "tusk.dev/v1", "kind": "Database", "metadata": {"name": "n".repeat(51)},
                    "spec": {"version": "17", "storage": {"size": "1Gi"}}}), "metadata.name"),
            (v1(json!({"version": "17", "instances": 2, "storage": {"size": "1Gi"},
                       "replication": {"mode": "sync", "minSyncReplicas": 2}})), "spec.replication.minSyncReplicas"),
            (v1(json!({"version": "17", "storage": {"size": "1Gi"},
                       "bootstrap": {"initdb": {"database": "app", "owner": "app"},
                                     "recovery": {"backup": "b1"}}})), "spec.bootstrap must set exactly one of initdb or recovery"),
            // The parameters rule (CEL generated from the one validator): a
            // parameter Tusk owns. (Directives, control characters and units:
            // e2e/tests/status.rs.)
            (v1(json!({"version": "17", "storage": {"size": "1Gi"},
                       "postgresql": {"parameters": {"archive_command": "/bin/true"}}})), "spec.postgresql.parameters.archive_command"),
            // The validating webhook: what the schema lets through.
            (v1(json!({"version": "17", "storage": {"size": "1Gi"},
                       "postgresql": {"parameters": {"work mem": "8MB"}}})), "spec.postgresql.parameters.work mem: is not a PostgreSQL parameter name"),
            (v1(json!({"version": "17", "storage": {"size": "0"}})), "spec.storage.size: must be greater than zero"),
        ];
        for (i, (mut manifest, field)) in cases.into_iter().enumerate() {
            if manifest["metadata"]["name"].as_str().is_none_or(str::is_empty) {
                manifest["metadata"]["name"] = json!(format!("bad-{i}"));
            }
            let result = apply_value(&client, Some(&ns), manifest.clone(), &strict).await;
            let message = match result {
                Ok(_) => return Err(format!("{manifest} was accepted").into()),
                Err(e) => e.to_string(),
            };
            assert!(message.contains(field), "the refusal of {manifest} does not name {field}: {message}");
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
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
            // Watched from before it exists, so the first status Tusk writes
            // is seen, whatever the pace of the passes after it.
            let from = databases
                .list_metadata(&ListParams::default())
                .await?
                .metadata
                .resource_version
                .unwrap_or_default();
            let watch = WatchParams::default()
                .fields("metadata.name=orders")
                .timeout(90);
            let mut events = databases.watch(&watch, &from).await?.boxed();
            let sample = std::fs::read_to_string(repo_path("config/samples/database.yaml"))?;
            apply_yaml(&client, Some(&ns), &sample).await?;
            let seen = loop {
                match events.try_next().await? {
                    Some(WatchEvent::Added(db) | WatchEvent::Modified(db))
                        if db.status.as_ref().and_then(|s| s.observed_generation)
                            == db.metadata.generation =>
                    {
                        break db;
                    }
                    Some(WatchEvent::Error(e)) => return Err(format!("watch: {e}").into()),
                    Some(_) => {}
                    None => return Err("no status written within 90 s of the create".into()),
                }
            };
            drop(events);
            assert!(seen.finalizers().iter().any(|f| f == "tusk.dev/cleanup"));
            // The first pass creates the Secrets, Services and first volume,
            // and says so.
            let status = seen.status.as_ref().ok_or("no status")?;
            assert_eq!(
                status.phase,
                Some(DatabasePhase::Provisioning),
                "{status:?}"
            );
            let ready = condition(&seen, "Ready").ok_or("no Ready condition")?;
            assert_eq!(
                (ready.status.as_str(), ready.reason.as_str()),
                ("False", "Provisioning"),
                "{}",
                ready.message
            );
            assert_eq!(ready.observed_generation, seen.metadata.generation);
            let progressing = condition(&seen, "Progressing").ok_or("no Progressing condition")?;
            assert_eq!(
                (progressing.status.as_str(), progressing.reason.as_str()),
                ("True", "Provisioning"),
                "{}",
                progressing.message
            );

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
            (json!({"spec": {"storage": {"storageClassName": "elsewhere"}}}), "spec.storage.storageClassName: is immutable"),
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

/// The Secret holding the operator's self-managed webhook CA and serving
/// certificate.
const CERT_SECRET: &str = "tusk-webhook-cert";
/// The container port the operator serves its webhooks on (helm/tusk's
/// Deployment names it `webhook`).
const WEBHOOK_PORT: u16 = 9443;
/// How long every replica has to serve a renewed certificate: a replica
/// reloads on its next certificate check, 30 s apart with
/// e2e/values-local.yaml's certCheckSeconds.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(120);

fn secret_field(secret: &Secret, key: &str) -> Vec<u8> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

/// The first certificate of a PEM bundle, as DER.
fn leaf_der(pem: &[u8]) -> Result<Vec<u8>> {
    let first = CertificateDer::pem_slice_iter(pem)
        .next()
        .ok_or("no certificate in the PEM")??;
    Ok(first.to_vec())
}

/// The running replicas of the operator's Deployment, and how many it wants.
async fn operator_replicas(client: &Client) -> Result<(Vec<String>, usize)> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let deployment = deployments.get("tusk-operator").await?;
    let spec = deployment.spec.ok_or("a Deployment without spec")?;
    let selector = spec
        .selector
        .match_labels
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let names = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && tusk_e2e::pod_ready(p))
        .map(|p| p.name_any())
        .collect();
    let wanted = usize::try_from(spec.replicas.unwrap_or(1))?;
    Ok((names, wanted))
}

/// The leaf certificate (DER) `pod` serves on its webhook port, read from a
/// TLS handshake through a port-forward that trusts only `ca` and expects
/// `server_name`, as the API server does.
async fn served_certificate(
    client: &Client,
    pod: &str,
    ca: &[u8],
    server_name: &str,
) -> Result<Vec<u8>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots.add(cert?)?;
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let mut forwarder = pods.portforward(pod, &[WEBHOOK_PORT]).await?;
    let stream = forwarder
        .take_stream(WEBHOOK_PORT)
        .ok_or("the port-forward has no stream")?;
    let name = ServerName::try_from(server_name.to_owned())?;
    let handshake = TlsConnector::from(Arc::new(config)).connect(name, stream);
    let outcome = match tokio::time::timeout(Duration::from_secs(10), handshake).await {
        Ok(Ok(tls)) => tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.to_vec())
            .ok_or_else(|| "the handshake presented no certificate".into()),
        Ok(Err(e)) => Err(format!("TLS handshake with {pod}: {e}").into()),
        Err(_) => Err(format!("TLS handshake with {pod} timed out").into()),
    };
    forwarder.abort();
    outcome
}

/// Waits until every replica the Deployment wants serves `leaf` (DER), each
/// read from its own handshake; fails naming the replicas that do not.
async fn every_replica_serves(
    client: &Client,
    leaf: &[u8],
    ca: &[u8],
    server_name: &str,
) -> Result<Vec<String>> {
    let deadline = tokio::time::Instant::now() + RELOAD_TIMEOUT;
    loop {
        let (replicas, wanted) = operator_replicas(client).await?;
        let mut behind = Vec::new();
        for pod in &replicas {
            match served_certificate(client, pod, ca, server_name).await {
                Ok(served) if served == leaf => {}
                Ok(_) => behind.push(format!("{pod} serves another certificate")),
                Err(e) => behind.push(format!("{pod}: {e}")),
            }
        }
        if replicas.len() != wanted {
            behind.push(format!(
                "{} ready replicas of {wanted}: {replicas:?}",
                replicas.len()
            ));
        }
        if behind.is_empty() {
            return Ok(replicas);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "not every replica serves the certificate after {RELOAD_TIMEOUT:?}: {behind:?}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Renewing the serving certificate (forced by marking it as expiring) keeps the
/// CA, every replica serves the new certificate (read from a TLS handshake with
/// each one), and the webhooks keep answering. It rewrites the certificate
/// every other test's webhook calls depend on, so it runs alone.
#[tokio::test]
async fn certificate_rotation_keeps_the_webhooks_working() {
    let client = client().await;
    install_operator(&client).await;
    in_namespace_exclusive("e2e-rot", Duration::from_secs(300), |client, ns| async move {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
        let before = secrets.get(CERT_SECRET).await?;
        let ca = secret_field(&before, "ca.crt");
        // The name the API server checks the certificate against: the
        // conversion webhook's Service.
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let service = crds
            .get("databases.tusk.dev")
            .await?
            .spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config)
            .and_then(|c| c.service)
            .ok_or("the CRD converts through no Service")?;
        let server_name = format!("{}.{}.svc", service.name, service.namespace);
        // Every replica serves the current certificate, so the probe itself
        // tells certificates apart.
        let old_leaf = leaf_der(&secret_field(&before, "tls.crt"))?;
        every_replica_serves(&client, &old_leaf, &ca, &server_name).await?;

        let expiring = json!({"metadata": {"annotations": {"tusk.dev/serving-not-after": "2000-01-01T00:00:00Z"}}});
        secrets
            .patch(CERT_SECRET, &PatchParams::default(), &Patch::Merge(&expiring))
            .await?;
        let after = wait_for(&secrets, CERT_SECRET, Duration::from_secs(120), |s| {
            secret_field(s, "tls.crt") != secret_field(&before, "tls.crt")
        })
        .await?;
        assert_eq!(secret_field(&after, "ca.crt"), ca, "renewal must keep the CA");
        let bundle = crds
            .get("databases.tusk.dev")
            .await?
            .spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config)
            .and_then(|c| c.ca_bundle);
        assert_eq!(bundle.map(|b| b.0), Some(ca.clone()));

        let new_leaf = leaf_der(&secret_field(&after, "tls.crt"))?;
        assert_ne!(new_leaf, old_leaf);
        let renewed = tokio::time::Instant::now();
        let replicas = every_replica_serves(&client, &new_leaf, &ca, &server_name).await?;
        eprintln!(
            "every replica serves the renewed certificate {:.0?} after the Secret changed: {replicas:?}",
            renewed.elapsed()
        );

        // Both webhooks answer with it: a v1alpha1 object passes admission and
        // is stored (converted) as v1.
        let legacy = std::fs::read_to_string(repo_path("config/samples/database-v1alpha1.yaml"))?;
        apply_yaml(&client, Some(&ns), &legacy).await?;
        let v1: Api<Database> = Api::namespaced(client.clone(), &ns);
        assert_eq!(v1.get("legacy").await?.spec.version, "15");
        Ok(())
    })
    .await;
}
