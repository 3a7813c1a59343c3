//! A Database published outside Kubernetes (issue #28): clients on this
//! host, with no kubeconfig and no cluster DNS, connect through the
//! addresses `spec.expose` publishes, exactly as `<db>-app-external` tells
//! them to (URIs with `sslmode=verify-full` and the CA).
//!
//! - A LoadBalancer and a NodePort reach the primary, a LoadBalancer with a
//!   hostname reaches a replica; a writer on the host keeps writing through
//!   the LoadBalancer while the primary's pod is force-deleted: `rw` follows
//!   the new primary, the pause is printed and no acknowledged write is lost
//!   (synchronous replication).
//! - `allowedSourceRanges`: a client in a network namespace on the outside
//!   network at an allowed address connects, one at another address is
//!   refused; changing the ranges swaps them and keeps the Service and its
//!   address; removing the entry removes the Service, the Secret and the
//!   `Exposed` condition.
//!
//! The local cluster's load balancer is MetalLB in L2 mode on the bridge
//! (`e2e/cluster`), on the outside network of `tusk_e2e::outside` (this host
//! is [`HOST_ADDRESS`] there; elsewhere the tests fail saying why, unless
//! `TUSK_E2E_ALLOW_SKIP=outside-network`). The operator probes each endpoint
//! from its pod, so the ranges include the pods' network (198.18.0.0/16).
//!   cargo test --manifest-path e2e/Cargo.toml --test exposure -- --nocapture

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_postgres::config::Host;
use tusk::api::expose::EndpointStatus;
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;
use tusk::instance::tls::MakeRustls;
use tusk::tls::rustls_config::client_config;
use tusk_e2e::outside::{self, HOST_ADDRESS, NetNs, client_address};
use tusk_e2e::writer::{current_primary, longest_gap, unix_now};
use tusk_e2e::{Result, apply_value, database, in_namespace, install_operator, wait_ready};

const DB: &str = "pg";
/// The pods' network: the operator probes from there.
const PODS: &str = "198.18.0.0/16";
/// How long a connection attempt may take before it counts as refused.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The host's own address on the outside network, as a range.
fn host_range() -> String {
    format!("{HOST_ADDRESS}/32")
}

/// Applies Database `pg` with `instances`, synchronous replication when
/// there are replicas, and `expose`.
async fn apply(client: &Client, ns: &str, instances: i32, expose: Value) -> Result<()> {
    let mut spec = json!({
        "version": "17", "instances": instances,
        "storage": {"size": "1Gi"},
        "expose": expose
    });
    if instances > 1 {
        spec["replication"] = json!({"mode": "sync", "minSyncReplicas": 1});
    }
    apply_value(
        client,
        Some(ns),
        database(DB, spec),
        &PatchParams::apply(tusk_e2e::MANAGER),
    )
    .await?;
    Ok(())
}

/// Waits until the Database reports, at its generation, condition
/// `Exposed=True` and `count` endpoints, each with an address and reached;
/// returns them by Service name.
async fn exposed(
    client: &Client,
    ns: &str,
    count: usize,
) -> Result<BTreeMap<String, EndpointStatus>> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let db = dbs.get(DB).await?;
        let status = db.status.clone().unwrap_or_default();
        let condition = status.conditions.iter().find(|c| c.type_ == "Exposed");
        let current = status.observed_generation == db.metadata.generation;
        if current
            && condition.is_some_and(|c| c.status == "True")
            && status.endpoints.len() == count
            && status
                .endpoints
                .iter()
                .all(|e| e.reached && !e.addresses.is_empty() && e.port.is_some())
        {
            return Ok(status
                .endpoints
                .into_iter()
                .map(|e| (e.service.clone(), e))
                .collect());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{DB} not exposed with {count} reached endpoints within 300 s: \
                 observed generation current: {current}, Exposed: {condition:?}, \
                 endpoints: {:?}",
                status.endpoints
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The keys of Secret `name`, as text.
async fn secret(client: &Client, ns: &str, name: &str) -> Result<BTreeMap<String, String>> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect())
}

/// A key of the outside Secret, or an error naming it.
fn key<'a>(outside: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str> {
    outside
        .get(name)
        .map(String::as_str)
        .ok_or_else(|| format!("{DB}-app-external has no {name}: keys {:?}", outside.keys()).into())
}

/// Connects as `uri` says, verifying the server certificate against `ca`
/// for the URI's host (libpq's verify-full). `hostaddr` dials another
/// address than the host names (a hostname without DNS here); `stream` is
/// an already connected socket (from a network namespace).
async fn connect(
    uri: &str,
    ca: &str,
    hostaddr: Option<IpAddr>,
    stream: Option<TcpStream>,
) -> Result<tokio_postgres::Client> {
    if !uri.contains("sslmode=verify-full") {
        return Err(format!("the URI does not ask for verify-full: {uri}").into());
    }
    // libpq's verify-full, which tokio-postgres does not parse (it knows
    // `require`): the connector below verifies the chain and the name.
    let mut config =
        tokio_postgres::Config::from_str(&uri.replace("sslmode=verify-full", "sslmode=require"))?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        other => return Err(format!("the URI names no TCP host: {other:?}").into()),
    };
    if let Some(address) = hostaddr {
        config.hostaddr(address);
    }
    config.connect_timeout(CONNECT_TIMEOUT);
    config.tcp_user_timeout(Duration::from_secs(3));
    config.keepalives_idle(Duration::from_secs(1));
    let tls = MakeRustls::new(client_config(ca, None, &host)?, &host)?;
    let client = match stream {
        None => {
            let (client, connection) = config.connect(tls).await?;
            tokio::spawn(connection);
            client
        }
        Some(stream) => {
            let mut tls = tls;
            let connect = tokio_postgres::tls::MakeTlsConnect::<TcpStream>::make_tls_connect(
                &mut tls, &host,
            )?;
            let (client, connection) = config.connect_raw(stream, connect).await?;
            tokio::spawn(connection);
            client
        }
    };
    Ok(client)
}

/// `SELECT pg_is_in_recovery()` through `uri`.
async fn in_recovery(uri: &str, ca: &str, hostaddr: Option<IpAddr>) -> Result<bool> {
    let client = connect(uri, ca, hostaddr, None).await?;
    Ok(client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .get(0))
}

/// Acknowledged writes: (id, Unix time of the acknowledgement).
type Acked = Arc<Mutex<Vec<(i64, f64)>>>;

/// A writer on this host inserting 1, 2, 3, ... into `acked` through `uri`,
/// one connection per row (as an application reconnecting would), recording
/// each commit the server acknowledged. Stops when the returned flag drops.
fn start_writer(uri: String, ca: String) -> (Acked, tokio::sync::oneshot::Sender<()>) {
    let acked: Acked = Arc::default();
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let record = acked.clone();
    tokio::spawn(async move {
        let mut id = 0_i64;
        loop {
            if stopped.try_recv().is_ok() {
                return;
            }
            id += 1;
            let written = async {
                let client = connect(&uri, &ca, None, None).await?;
                client
                    .execute("INSERT INTO acked VALUES ($1)", &[&id])
                    .await?;
                Result::<()>::Ok(())
            };
            if matches!(
                tokio::time::timeout(Duration::from_secs(10), written).await,
                Ok(Ok(()))
            ) && let Ok(mut acked) = record.lock()
            {
                acked.push((id, unix_now()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    (acked, stop)
}

/// The acknowledgement times recorded so far.
fn ack_times(acked: &Acked) -> Vec<f64> {
    acked
        .lock()
        .map(|a| a.iter().map(|(_, at)| *at).collect())
        .unwrap_or_default()
}

/// Waits until the writer has an acknowledgement after Unix time `after`.
async fn written_after(acked: &Acked, after: f64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(180);
    while !ack_times(acked).iter().any(|at| *at > after) {
        if Instant::now() > deadline {
            return Err(
                format!("no write acknowledged through the outside 180 s after {after}").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Waits until the Database is Ready at its generation with `instances`
/// ready and a primary other than `old`; returns it.
async fn settled_without(client: &Client, ns: &str, old: &str, instances: i32) -> Result<String> {
    let dbs: Api<Database> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let db = dbs.get(DB).await?;
        let status = db.status.clone().unwrap_or_default();
        let ready = status.phase == Some(DatabasePhase::Ready)
            && status.ready_instances == Some(instances)
            && status.observed_generation == db.metadata.generation;
        if let Some(primary) = status.current_primary.as_deref()
            && ready
            && primary != old
        {
            return Ok(primary.to_owned());
        }
        if Instant::now() > deadline {
            return Err(format!("{DB} did not settle on a new primary: {status:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The Service `name`: its uid and load-balancer address.
async fn service_identity(client: &Client, ns: &str, name: &str) -> Result<(String, String)> {
    let svc = Api::<Service>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let uid = svc.metadata.uid.clone().unwrap_or_default();
    let ip = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .and_then(|i| i.first().and_then(|i| i.ip.clone()))
        .ok_or_else(|| format!("Service {name} has no load-balancer address"))?;
    Ok((uid, ip))
}

fn first_address(endpoint: &EndpointStatus) -> Result<IpAddr> {
    let address = endpoint
        .addresses
        .first()
        .ok_or_else(|| format!("endpoint {} has no address", endpoint.service))?;
    Ok(address.parse()?)
}

#[tokio::test]
async fn a_load_balancer_and_a_node_port_reach_the_primary_from_outside_and_follow_a_failover() {
    let test =
        "a_load_balancer_and_a_node_port_reach_the_primary_from_outside_and_follow_a_failover";
    if !outside::available(test).expect("the outside network") {
        return;
    }
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-expose",
        Duration::from_secs(900),
        |client, ns| async move {
            let ranges = json!([host_range(), PODS]);
            let expose = json!([
                {"target": "rw", "type": "LoadBalancer", "allowedSourceRanges": ranges},
                {"target": "rw", "type": "NodePort"},
                {"target": "ro", "type": "LoadBalancer", "allowedSourceRanges": ranges,
                 "hostname": "pg-ro.example.test"}
            ]);
            apply(&client, &ns, 3, expose).await?;
            wait_ready(&client, &ns, DB, 3).await?;
            let endpoints = exposed(&client, &ns, 3).await?;
            for e in endpoints.values() {
                println!(
                    "{} ({:?} {:?}): {:?} port {:?}, reached",
                    e.service, e.target, e.type_, e.addresses, e.port
                );
            }
            let outside = secret(&client, &ns, &format!("{DB}-app-external")).await?;
            let ca = key(&outside, "ca.crt")?.to_owned();

            // The URIs work as given: the LoadBalancer's and the NodePort's reach
            // the primary, by address (the certificate names it).
            let rw = key(&outside, "uri")?.to_owned();
            if key(&outside, "rw-lb-uri")? != rw {
                return Err("uri is not the rw LoadBalancer's, the preferred endpoint".into());
            }
            if in_recovery(&rw, &ca, None).await? {
                return Err(format!("{rw} reached a replica").into());
            }
            let node_port = key(&outside, "rw-nodeport-uri")?;
            if in_recovery(node_port, &ca, None).await? {
                return Err(format!("{node_port} reached a replica").into());
            }
            // The replicas' endpoint has a hostname, which no DNS here resolves:
            // dial its address, verify the hostname.
            let ro = key(&outside, "ro-lb-uri")?;
            if !ro.contains("pg-ro.example.test") {
                return Err(format!("ro-lb-uri does not use the hostname: {ro}").into());
            }
            let ro_address = first_address(&endpoints[&format!("{DB}-ro-lb")])?;
            if !in_recovery(ro, &ca, Some(ro_address)).await? {
                return Err(format!("{ro} reached the primary").into());
            }
            println!("uri, rw-nodeport-uri reach the primary; ro-lb-uri a replica");

            // A writer outside, through the LoadBalancer; the primary's pod force-deleted.
            connect(&rw, &ca, None, None)
                .await?
                .batch_execute("CREATE TABLE acked (id bigint PRIMARY KEY)")
                .await?;
            let (acked, stop) = start_writer(rw.clone(), ca.clone());
            written_after(&acked, unix_now()).await?;
            let (uid, address) = service_identity(&client, &ns, &format!("{DB}-rw-lb")).await?;
            let old = current_primary(&client, &ns, DB).await?;
            let fault = unix_now();
            Api::<Pod>::namespaced(client.clone(), &ns)
                .delete(
                    &old,
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..DeleteParams::default()
                    },
                )
                .await?;
            written_after(&acked, fault).await?;
            let new = settled_without(&client, &ns, &old, 3).await?;
            exposed(&client, &ns, 3).await?;
            let _ = stop.send(());
            let times = ack_times(&acked);
            let pause = longest_gap(&times, fault, unix_now());
            println!(
                "primary {old} force-deleted, {new} took over: writes through the \
             LoadBalancer {address} paused {pause:.2} s at most"
            );
            if service_identity(&client, &ns, &format!("{DB}-rw-lb")).await?
                != (uid, address.clone())
            {
                return Err(
                    "the rw LoadBalancer Service or its address changed in a failover".into(),
                );
            }
            if in_recovery(&rw, &ca, None).await? {
                return Err(format!("after the failover {rw} reaches a replica").into());
            }
            let stored: std::collections::BTreeSet<i64> = connect(&rw, &ca, None, None)
                .await?
                .query("SELECT id FROM acked", &[])
                .await?
                .iter()
                .map(|row| row.get(0))
                .collect();
            let acked_ids: Vec<i64> = acked
                .lock()
                .map(|a| a.iter().map(|(id, _)| *id).collect())
                .unwrap_or_default();
            let lost: Vec<i64> = acked_ids
                .iter()
                .filter(|id| !stored.contains(id))
                .copied()
                .collect();
            if !lost.is_empty() {
                return Err(format!("acknowledged writes lost: {lost:?}").into());
            }
            println!(
                "{} writes acknowledged through the outside, none lost",
                acked_ids.len()
            );
            Ok(())
        },
    )
    .await;
}

/// Whether a TLS connection through `uri` from namespace `netns` works:
/// `Ok(())`, or the error (a refused source sees its SYN dropped: a timeout).
async fn from_netns(netns: &NetNs, uri: &str, ca: &str, to: SocketAddr) -> Result<()> {
    let stream = netns.connect(to, CONNECT_TIMEOUT).await?;
    let client = connect(uri, ca, None, Some(stream)).await?;
    client.query_one("SELECT 1", &[]).await?;
    Ok(())
}

/// Waits until `allowed` connects and `refused` does not (kube-proxy
/// applies a changed Service within seconds).
async fn admits(
    allowed: &NetNs,
    refused: &NetNs,
    uri: &str,
    ca: &str,
    to: SocketAddr,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let yes = from_netns(allowed, uri, ca, to).await;
        let no = from_netns(refused, uri, ca, to).await;
        if yes.is_ok() && no.is_err() {
            println!(
                "{} connects to {to}; {} is refused ({})",
                allowed.address(),
                refused.address(),
                no.err().map(|e| e.to_string()).unwrap_or_default()
            );
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} should connect to {to} ({yes:?}) and {} be refused ({})",
                allowed.address(),
                refused.address(),
                if no.is_ok() {
                    "it connected".to_owned()
                } else {
                    "it was".to_owned()
                }
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until Service `name` lists exactly `ranges` as its source ranges.
async fn service_ranges(client: &Client, ns: &str, name: &str, ranges: &[String]) -> Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let svc = services.get(name).await?;
        let mut have = svc
            .spec
            .and_then(|s| s.load_balancer_source_ranges)
            .unwrap_or_default();
        have.sort();
        let mut want = ranges.to_vec();
        want.sort();
        if have == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("Service {name} has ranges {have:?}, not {want:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn source_ranges_admit_who_they_name_and_change_in_place() {
    if !outside::available("source_ranges_admit_who_they_name_and_change_in_place")
        .expect("the outside network")
    {
        return;
    }
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace("e2e-expose-ranges", Duration::from_secs(600), |client, ns| async move {
        let first = NetNs::create(client_address())?;
        let second = NetNs::create(client_address())?;
        let entry = |allowed: &NetNs| {
            json!([{"target": "rw", "type": "LoadBalancer",
                    "allowedSourceRanges": [host_range(), format!("{}/32", allowed.address()), PODS]}])
        };
        apply(&client, &ns, 1, entry(&first)).await?;
        wait_ready(&client, &ns, DB, 1).await?;
        let endpoints = exposed(&client, &ns, 1).await?;
        let lb = format!("{DB}-rw-lb");
        let address = first_address(&endpoints[&lb])?;
        let to = SocketAddr::new(address, 5432);
        let outside = secret(&client, &ns, &format!("{DB}-app-external")).await?;
        let (uri, ca) = (key(&outside, "uri")?.to_owned(), key(&outside, "ca.crt")?.to_owned());
        let before = service_identity(&client, &ns, &lb).await?;
        admits(&first, &second, &uri, &ca, to).await?;

        // The ranges swap: the same Service, the same address, the other client.
        apply(&client, &ns, 1, entry(&second)).await?;
        service_ranges(
            &client,
            &ns,
            &lb,
            &[host_range(), format!("{}/32", second.address()), PODS.to_owned()],
        )
        .await?;
        admits(&second, &first, &uri, &ca, to).await?;
        let after = service_identity(&client, &ns, &lb).await?;
        if after != before {
            return Err(format!("changing the ranges replaced {lb}: {before:?} → {after:?}").into());
        }
        exposed(&client, &ns, 1).await?;
        println!("ranges changed in place: {lb} kept uid {} and address {}", after.0, after.1);

        // Published no more: the Service, the Secret and the condition go.
        let dbs: Api<Database> = Api::namespaced(client.clone(), &ns);
        dbs.patch(DB, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"expose": null}})))
            .await?;
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let db = dbs.get(DB).await?;
            let status = db.status.clone().unwrap_or_default();
            let gone = services.get_opt(&lb).await?.is_none()
                && secrets.get_opt(&format!("{DB}-app-external")).await?.is_none()
                && status.observed_generation == db.metadata.generation
                && status.endpoints.is_empty()
                && !status.conditions.iter().any(|c| c.type_ == "Exposed");
            if gone {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "spec.expose removed, yet after 120 s: Service {lb} exists: {}, \
                     status endpoints {:?}, conditions {:?}",
                    services.get_opt(&lb).await?.is_some(),
                    status.endpoints,
                    status.conditions
                )
                .into());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        println!("spec.expose removed: {lb}, {DB}-app-external and Exposed are gone");
        Ok(())
    })
    .await;
}
