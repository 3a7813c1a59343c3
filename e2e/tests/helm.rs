//! The Helm chart installs Tusk for real: the release is deployed, every object
//! the chart renders is in the cluster and owned by the release, both operator
//! replicas run under Pod Security "restricted", one holds the leader Lease, and
//! the webhook certificate is Tusk's own. (Every other e2e test runs against this
//! same install, so a Database reaching Ready under it is proven there too.)

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Secret};
use kube::api::{Api, ListParams};
use serde_json::Value;
use tusk_e2e::{ClusterAccess, OPERATOR_NAMESPACE, install_operator, lock_cluster, run_helm};

#[tokio::test]
async fn the_chart_release_runs_two_restricted_replicas_with_one_leader() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    // Reads the install other tests may change (the certificate, the replicas).
    let _cluster = lock_cluster(ClusterAccess::Shared).await;

    let status: Value = serde_json::from_str(&run_helm(&[
        "status",
        "tusk",
        "--namespace",
        OPERATOR_NAMESPACE,
        "--output",
        "json",
    ]))
    .expect("helm status JSON");
    assert_eq!(status["info"]["status"], "deployed", "{status}");

    // Everything the release says it installed is there and labelled as its own.
    let manifest = run_helm(&["get", "manifest", "tusk", "--namespace", OPERATOR_NAMESPACE]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let deployment = deployments
        .get("tusk-operator")
        .await
        .expect("the Deployment");
    assert!(manifest.contains("kind: Deployment"));
    let annotations = deployment.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get("meta.helm.sh/release-name")
            .map(String::as_str),
        Some("tusk")
    );
    let spec = deployment.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));

    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let running = pods
        .list(
            &ListParams::default()
                .labels("app.kubernetes.io/name=tusk,app.kubernetes.io/component=operator"),
        )
        .await
        .expect("operator pods");
    let names: Vec<String> = running
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && tusk_e2e::pod_ready(p))
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names.len(), 2, "ready operator pods: {names:?}");
    for pod in &running.items {
        let spec = pod.spec.as_ref().expect("pod spec");
        let security = spec.security_context.as_ref().expect("pod securityContext");
        assert_eq!(security.run_as_non_root, Some(true));
        let container = &spec.containers[0];
        let context = container
            .security_context
            .as_ref()
            .expect("container securityContext");
        assert_eq!(context.allow_privilege_escalation, Some(false));
        assert_eq!(context.read_only_root_filesystem, Some(true));
    }

    // Right after a rollout the Lease may still name a replica that is gone
    // until its term runs out; one of the two running replicas then takes it.
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let mut holder = String::new();
    for _ in 0..60 {
        holder = leases
            .get("tusk-operator")
            .await
            .expect("the leader Lease")
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        if names.contains(&holder) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(
        names.contains(&holder),
        "leader {holder:?} is not one of {names:?}"
    );

    // Both replicas serve metrics and webhooks, leader or not.
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    for service in ["tusk-metrics", "tusk-webhook"] {
        let ready = endpoints
            .get(service)
            .await
            .expect("endpoints")
            .subsets
            .unwrap_or_default()
            .iter()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum::<usize>();
        assert_eq!(ready, 2, "{service} endpoints");
    }

    // Self-managed certificates by default: Tusk's Secret, holding its CA.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let cert = secrets
        .get("tusk-webhook-cert")
        .await
        .expect("the webhook certificate");
    let data = cert.data.unwrap_or_default();
    let ca = data.get("ca.crt").expect("a CA in the Secret").0.clone();
    // ...published by Tusk itself into the chart's webhook configuration
    // (within one certificate check).
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut published = Vec::new();
    for _ in 0..60 {
        let configuration = configurations
            .get("tusk-validating")
            .await
            .expect("the webhooks");
        published = configuration.webhooks.unwrap_or_default()[0]
            .client_config
            .ca_bundle
            .clone()
            .map(|b| b.0)
            .unwrap_or_default();
        if published == ca {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(
        published == ca,
        "the webhook's caBundle is not the CA in tusk-webhook-cert"
    );
}
