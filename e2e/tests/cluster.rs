//! The local cluster is a real Kubernetes: nodes, pods from the locally built
//! images, volumes, services, DNS.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use tusk_e2e::{
    ClusterAccess, client, in_namespace, lock_cluster, pod_ready, restricted, run_pod, sql,
    wait_for,
};

#[tokio::test]
async fn every_node_is_ready() {
    let _cluster = lock_cluster(ClusterAccess::Shared).await;
    let nodes: Api<Node> = Api::all(client().await);
    let list = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes");
    assert!(!list.items.is_empty(), "the cluster has no node");
    for node in list.items {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        assert!(
            ready,
            "node {:?} is not Ready: {:?}",
            node.metadata.name, node.status
        );
    }
}

/// A postgres pod from the local image passes its `pg_isready` probe, a Service
/// routes to it, and another pod reaches it by its cluster DNS name and runs SQL.
#[tokio::test]
async fn postgres_serves_sql_through_a_service_and_dns() {
    in_namespace("e2e-pg", Duration::from_secs(300), |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let server: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pg", "labels": {"app": "pg"}},
            "spec": {
                "securityContext": {"fsGroup": 999},
                "volumes": [{"name": "data", "emptyDir": {}}, {"name": "run", "emptyDir": {}}],
                "containers": [{
                    "name": "postgres", "image": "localhost/postgres:15", "imagePullPolicy": "IfNotPresent",
                    "env": [{"name": "POSTGRES_PASSWORD", "value": "e2e-secret"},
                            {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"},
                                     {"name": "run", "mountPath": "/var/run/postgresql"}],
                    "readinessProbe": {"exec": {"command": ["pg_isready", "-U", "postgres", "-h", "127.0.0.1"]},
                                       "periodSeconds": 2},
                    "securityContext": restricted(999)
                }]
            }
        }))?;
        pods.create(&PostParams::default(), &server).await?;
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "pg"},
            "spec": {"selector": {"app": "pg"}, "ports": [{"port": 5432, "targetPort": 5432}]}
        }))?;
        services.create(&PostParams::default(), &service).await?;
        wait_for(&pods, "pg", Duration::from_secs(120), pod_ready).await?;

        let host = format!("pg.{ns}.svc.cluster.local");
        let version = sql(&client, &ns, &host, "e2e-secret", "postgres", "select current_setting('server_version_num')::int / 10000").await?;
        assert_eq!(version, "15", "server major version through the Service");
        let answer = sql(&client, &ns, &host, "e2e-secret", "postgres", "create table t(x int); insert into t values (41), (1); select sum(x) from t").await?;
        assert_eq!(answer.lines().last(), Some("42"), "psql printed: {answer}");
        Ok(())
    })
    .await;
}

/// A dynamically provisioned volume binds, and what one pod writes another reads
/// after the first is gone.
#[tokio::test]
async fn a_volume_binds_and_keeps_data_across_pods() {
    in_namespace("e2e-pvc", Duration::from_secs(300), |client, ns| async move {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}
        }))?;
        claims.create(&PostParams::default(), &claim).await?;
        let volumes = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
        let mounts = json!([{"name": "data", "mountPath": "/data"}]);
        let token = format!("written-{}", rand::random::<u32>());
        let write = format!("echo {token} > /data/proof && cat /data/proof");
        let (phase, logs) = run_pod(&client, &ns, "writer", "localhost/busybox:latest", &["sh", "-c", &write], volumes.clone(), mounts.clone()).await?;
        assert_eq!((phase.as_str(), logs.trim()), ("Succeeded", token.as_str()));
        let bound = wait_for(&claims, "data", Duration::from_secs(30), |c| {
            c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        })
        .await?;
        assert!(bound.spec.and_then(|s| s.volume_name).is_some());
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.delete("writer", &DeleteParams::default()).await?;
        let (phase, logs) = run_pod(&client, &ns, "reader", "localhost/busybox:latest", &["cat", "/data/proof"], volumes, mounts).await?;
        assert_eq!((phase.as_str(), logs.trim()), ("Succeeded", token.as_str()));
        Ok(())
    })
    .await;
}

/// Pod Security admission is on: a privileged pod is refused in a restricted namespace.
#[tokio::test]
async fn pod_security_admission_refuses_privileged_pods() {
    in_namespace("e2e-psa", Duration::from_secs(60), |client, ns| async move {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let label = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
        namespaces
            .patch(&ns, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&label))
            .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"},
            "spec": {"containers": [{"name": "c", "image": "localhost/busybox:latest",
                     "securityContext": {"privileged": true}}]}
        }))?;
        let error = pods.create(&PostParams::default(), &pod).await.expect_err("a privileged pod was admitted");
        let message = error.to_string();
        assert!(message.contains("violates PodSecurity \"restricted"), "{message}");
        assert!(message.contains("privileged"), "{message}");
        Ok(())
    })
    .await;
}
