//! TLS checks made from this host, outside the cluster's DNS: which
//! certificate each instance's PostgreSQL presents (a verified handshake to
//! the pod's address, naming the instance), and the CA a Database's clients
//! are told to trust.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use tusk::tls::probe::{Negotiation, Presented, postgres_handshake};

use crate::Result;
use crate::writer::instance_pods;

/// A key of Secret `name` as text.
pub async fn secret_text(client: &Client, ns: &str, name: &str, key: &str) -> Result<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .ok_or_else(|| format!("Secret {ns}/{name} has no {key}").into())
}

/// The CA bundle the `-app` Secret gives applications.
pub async fn app_ca(client: &Client, ns: &str, db: &str) -> Result<String> {
    secret_text(client, ns, &format!("{db}-app"), "ca.crt").await
}

/// What each instance pod of `db` presents on PostgreSQL's port, verified
/// against `trust` and required to name `expected` (else the instance
/// itself), by instance name.
pub async fn presented(
    client: &Client,
    ns: &str,
    db: &str,
    trust: &str,
    expected: Option<&str>,
) -> Result<BTreeMap<String, Presented>> {
    let mut seen = BTreeMap::new();
    for pod in instance_pods(client, ns, db).await? {
        let name = pod.name_any();
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .ok_or_else(|| format!("pod {name} has no IP"))?;
        let addr: SocketAddr = format!("{ip}:5432").parse()?;
        let cert = postgres_handshake(
            addr,
            expected.unwrap_or(&name),
            trust,
            Negotiation::SslRequest,
        )
        .await
        .map_err(|e| format!("handshake with {name} ({addr}): {e}"))?;
        seen.insert(name, cert);
    }
    Ok(seen)
}
