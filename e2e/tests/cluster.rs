//! The local cluster is a real Kubernetes: nodes, pods from the locally built
//! images, volumes, services, DNS, and Services of type LoadBalancer that
//! clients outside Kubernetes reach.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tusk_e2e::outside::{self, HOST_ADDRESS, NetNs, POOL, client_address};
use tusk_e2e::{
    ClusterAccess, Result, client, in_namespace, lock_cluster, pod_ready, restricted, run_pod, sql,
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

/// A Service of type LoadBalancer gets an address from MetalLB's pool, and
/// clients outside Kubernetes reach the pod behind it: this host, and a
/// network namespace on the bridge (through MetalLB's ARP answer) whose
/// address `loadBalancerSourceRanges` allows, while one at another address
/// is kept out. Changing the ranges swaps who gets in and keeps the address.
#[tokio::test]
async fn a_load_balancer_serves_outside_clients_within_its_source_ranges() {
    if !outside::available("a_load_balancer_serves_outside_clients_within_its_source_ranges")
        .expect("the outside network")
    {
        return;
    }
    in_namespace("e2e-lb", Duration::from_secs(300), |client, ns| async move {
        let first = NetNs::create(client_address())?;
        let second = NetNs::create(client_address())?;
        let token = format!("outside-{:08x}", rand::random::<u32>());
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let serve = format!("mkdir -p /tmp/www && echo {token} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www");
        let web: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "httpd", "image": "localhost/busybox:latest", "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", serve],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                    "securityContext": restricted(1000)
                }]
            }
        }))?;
        pods.create(&PostParams::default(), &web).await?;
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {
                "type": "LoadBalancer", "selector": {"app": "web"},
                "ports": [{"port": 80, "targetPort": 8080}],
                "loadBalancerSourceRanges": [format!("{HOST_ADDRESS}/32"), format!("{}/32", first.address())]
            }
        }))?;
        services.create(&PostParams::default(), &service).await?;
        wait_for(&pods, "web", Duration::from_secs(120), pod_ready).await?;
        let assigned = wait_for(&services, "web", Duration::from_secs(60), |s| ingress_ip(s).is_some()).await?;
        let address = ingress_ip(&assigned).ok_or("no ingress IP")?;
        assert!(in_pool(address), "the Service got {address}, outside MetalLB's pool {POOL}");
        let target = SocketAddr::new(IpAddr::V4(address), 80);

        assert_eq!(reach(&Outside::Host, target).await?, token, "the page from this host");
        assert_eq!(reach(&Outside::Ns(&first), target).await?, token, "the page from {}", first.address());
        // The rules that let the first in are the ones that keep the second out.
        refused(&Outside::Ns(&second), target).await;

        let swap = json!({"spec": {"loadBalancerSourceRanges": [
            format!("{HOST_ADDRESS}/32"), format!("{}/32", second.address())
        ]}});
        services.patch("web", &PatchParams::default(), &Patch::Merge(&swap)).await?;
        assert_eq!(reach(&Outside::Ns(&second), target).await?, token, "the page from {} once allowed", second.address());
        refused(&Outside::Ns(&first), target).await;
        assert_eq!(reach(&Outside::Host, target).await?, token, "the page from this host after the change");
        let after = services.get("web").await?;
        assert_eq!(ingress_ip(&after), Some(address), "changing the source ranges moved the address");
        Ok(())
    })
    .await;
}

/// Who dials the LoadBalancer address.
enum Outside<'a> {
    /// This test's process: source [`HOST_ADDRESS`].
    Host,
    Ns(&'a NetNs),
}

impl Outside<'_> {
    fn address(&self) -> Ipv4Addr {
        match self {
            Outside::Host => HOST_ADDRESS,
            Outside::Ns(netns) => netns.address(),
        }
    }

    async fn connect(&self, target: SocketAddr, timeout: Duration) -> Result<TcpStream> {
        match self {
            Outside::Host => Ok(tokio::time::timeout(timeout, TcpStream::connect(target))
                .await
                .map_err(|_| format!("connect to {target}: timed out after {timeout:?}"))??),
            Outside::Ns(netns) => Ok(netns.connect(target, timeout).await?),
        }
    }

    /// The body of `GET /` (HTTP/1.0: busybox httpd closes after the body).
    async fn get(&self, target: SocketAddr, timeout: Duration) -> Result<String> {
        let mut stream = self.connect(target, timeout).await?;
        stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
        let mut response = String::new();
        tokio::time::timeout(timeout, stream.read_to_string(&mut response))
            .await
            .map_err(|_| format!("no answer from {target} within {timeout:?}"))??;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or("an HTTP answer without a body")?;
        if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
            return Err(format!("GET / from {target}: {head}").into());
        }
        Ok(body.trim().to_owned())
    }
}

/// The page through the LoadBalancer address, once `from` gets through: the
/// speaker announces, and kube-proxy programs the address and its ranges, a
/// moment after the address is assigned or the ranges change.
async fn reach(from: &Outside<'_>, target: SocketAddr) -> Result<String> {
    let mut last = String::new();
    for _ in 0..30 {
        match from.get(target, Duration::from_secs(3)).await {
            Ok(body) => return Ok(body),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!("{} never reached {target}: {last}", from.address()).into())
}

/// `from` cannot connect: kube-proxy drops what comes from outside the source
/// ranges, so the connection times out (or is refused).
async fn refused(from: &Outside<'_>, target: SocketAddr) {
    match from.get(target, Duration::from_secs(5)).await {
        Ok(body) => panic!(
            "{} got {body:?} from {target} although loadBalancerSourceRanges leave it out",
            from.address()
        ),
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains("timed out") || message.contains("refused"),
                "{} failed otherwise than by not getting a connection: {message}",
                from.address()
            );
        }
    }
}

fn ingress_ip(service: &Service) -> Option<Ipv4Addr> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .iter()
        .find_map(|i| i.ip.as_deref()?.parse().ok())
}

fn in_pool(address: Ipv4Addr) -> bool {
    let Some((base, len)) = POOL.split_once('/') else {
        return false;
    };
    let (Ok(base), Ok(len)) = (base.parse::<Ipv4Addr>(), len.parse::<u32>()) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(address) & mask == u32::from(base) & mask
}
