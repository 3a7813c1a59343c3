//! `spec.expose` and `status.endpoints`: a Database published to applications
//! outside Kubernetes, through Services of type `LoadBalancer` or `NodePort`
//! that Tusk owns beside the in-cluster `-rw`/`-ro`/`-r`.
//!
//! One Service per entry, named `<db>-<target>-lb` or `<db>-<target>-nodeport`
//! ([`service_name`]): an entry is identified by its target and type, so two
//! entries with the same pair are refused, and changing anything else of an
//! entry (source ranges, annotations, hostname, traffic policy) patches that
//! Service in place and keeps its address. Changing an entry's type or target
//! is a different Service: the old one is removed with its address.
//!
//! An endpoint counts as published only once Tusk reached PostgreSQL through
//! it (a TLS handshake on the published address and port, verifying the
//! server certificate): `status.endpoints` says per entry what Kubernetes
//! assigned and what the probe found, and condition `Exposed` sums it up.

//!
//! The rules beyond the schema (CIDRs, DNS names, annotation keys, the
//! cluster's node-port range, duplicates) are in [`rules`]; the CEL rules on
//! [`ExposeSpec`] say which fields each type takes, with the same messages.

mod rules;

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

pub use rules::{
    BadNodePortRange, EXTERNAL_DNS_HOSTNAME, NodePortRange, ONE_PER_TARGET_AND_TYPE, errors,
    node_port_errors, warnings,
};
use rules::{
    CLASS_ONLY_ON_LOAD_BALANCER, LOAD_BALANCER_NEEDS_RANGES, NO_RANGES_ON_NODE_PORT, NODE_PORT_ONLY,
};

/// One published endpoint: a Service of type `LoadBalancer` or `NodePort`
/// routing to the primary (`rw`), the replicas (`ro`) or any instance (`r`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type != 'LoadBalancer' || (has(self.allowedSourceRanges) && size(self.allowedSourceRanges) > 0)").message(LOAD_BALANCER_NEEDS_RANGES).field_path(".allowedSourceRanges"))]
#[x_kube(validation = Rule::new("self.type != 'NodePort' || !has(self.allowedSourceRanges) || size(self.allowedSourceRanges) == 0").message(NO_RANGES_ON_NODE_PORT).field_path(".allowedSourceRanges"))]
#[x_kube(validation = Rule::new("!has(self.nodePort) || self.type == 'NodePort'").message(NODE_PORT_ONLY).field_path(".nodePort"))]
#[x_kube(validation = Rule::new("!has(self.loadBalancerClass) || self.type == 'LoadBalancer'").message(CLASS_ONLY_ON_LOAD_BALANCER).field_path(".loadBalancerClass"))]
pub struct ExposeSpec {
    /// What the endpoint routes to: `rw` (the primary; follows failovers and
    /// switchovers), `ro` (the replicas) or `r` (any instance).
    pub target: ExposeTarget,

    /// `LoadBalancer` (an address from the cluster's load-balancer
    /// implementation) or `NodePort` (a port on every node's address).
    #[serde(rename = "type")]
    pub type_: ExposeType,

    /// Who may connect, as CIDRs (`203.0.113.0/24`, `2001:db8::/32`; a
    /// network, so no bits beyond the prefix: one address is `/32` or
    /// `/128`): the Service's `loadBalancerSourceRanges`. Required for `LoadBalancer` (`0.0.0.0/0`
    /// opens it to everyone and is accepted with a warning); not accepted for
    /// `NodePort`, whose ports Kubernetes does not filter by source. Changes
    /// apply in place: the address is kept. Tusk verifies an endpoint from the
    /// operator's pod, so include the pods' network to see `Exposed=True`
    /// (in-cluster clients reach `<db>-rw` anyway).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub allowed_source_ranges: Vec<String>,

    /// Annotations of the Service: cloud load-balancer settings, ExternalDNS.
    /// Tusk sets `external-dns.alpha.kubernetes.io/hostname` itself from
    /// `hostname`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// The DNS name clients outside use (`orders.db.example.com`: lowercase,
    /// no wildcard). It becomes
    /// the ExternalDNS hostname annotation and a name on the server
    /// certificate, so `sslmode=verify-full` works from outside. Tusk does not
    /// create the DNS record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub hostname: Option<String>,

    /// `spec.loadBalancerClass` of the Service (`LoadBalancer` only). Set
    /// when the Service is created; a change replaces the Service (and its
    /// address), as Kubernetes does not allow it in place. Unset, whatever
    /// class the cluster gives the Service stands (to go back from a class
    /// to the default, remove the entry, then add it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_class: Option<String>,

    /// `Cluster` (default: any node forwards, the client's address is not
    /// preserved) or `Local` (only nodes running a target instance answer,
    /// and PostgreSQL sees the client's address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,

    /// The node port (`NodePort` only), within the cluster's node-port range
    /// (30000-32767 by default). Unset, Kubernetes picks one and keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
}

/// What a published endpoint routes to.
#[derive(
    schemars::JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
)]
pub enum ExposeTarget {
    /// The primary, like `<db>-rw`.
    #[serde(rename = "rw")]
    Rw,
    /// The replicas, like `<db>-ro`.
    #[serde(rename = "ro")]
    Ro,
    /// Any instance, like `<db>-r`.
    #[serde(rename = "r")]
    R,
}

impl ExposeTarget {
    /// As written in the spec and in Service names.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rw => "rw",
            Self::Ro => "ro",
            Self::R => "r",
        }
    }
}

/// The kind of Service publishing an endpoint.
#[derive(
    schemars::JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
)]
pub enum ExposeType {
    /// An address from the cluster's load-balancer implementation.
    LoadBalancer,
    /// A port on every node's address.
    NodePort,
}

impl ExposeType {
    /// The Service `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LoadBalancer => "LoadBalancer",
            Self::NodePort => "NodePort",
        }
    }

    /// The suffix of the Service name.
    fn suffix(self) -> &'static str {
        match self {
            Self::LoadBalancer => "lb",
            Self::NodePort => "nodeport",
        }
    }
}

/// A Service's `externalTrafficPolicy`.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum TrafficPolicy {
    /// Any node forwards to any target instance (the client's address is
    /// replaced by the node's).
    #[default]
    Cluster,
    /// Only nodes running a target instance answer; the client's address is
    /// preserved.
    Local,
}

impl TrafficPolicy {
    /// The Service field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "Cluster",
            Self::Local => "Local",
        }
    }
}

/// The Service publishing `target` as `type_` for Database `db`.
pub fn service_name(db: &str, target: ExposeTarget, type_: ExposeType) -> String {
    format!("{db}-{}-{}", target.as_str(), type_.suffix())
}

/// The Secret an application outside Kubernetes connects with.
pub fn external_secret_name(db: &str) -> String {
    format!("{db}-app-external")
}

/// One entry of `status.endpoints`: what Kubernetes assigned to a published
/// Service, and whether Tusk reached PostgreSQL through it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointStatus {
    /// The Service.
    pub service: String,
    /// What it routes to.
    pub target: ExposeTarget,
    /// `LoadBalancer` or `NodePort`.
    #[serde(rename = "type")]
    pub type_: ExposeType,
    /// `spec.expose[].hostname`, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub hostname: Option<String>,
    /// The addresses clients use: the load balancer's (IP or hostname), or
    /// for a `NodePort` the addresses of the nodes running the target
    /// instances. Empty until Kubernetes assigned one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The port clients use: 5432 on a load balancer, the node port otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Whether Tusk's last probe completed a TLS handshake with PostgreSQL
    /// through the first address and `port`, verifying the certificate.
    pub reached: bool,
    /// Why the endpoint is not (yet) reached: no address assigned, or what
    /// the probe found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_carry_target_and_type() {
        assert_eq!(
            service_name("orders", ExposeTarget::Rw, ExposeType::LoadBalancer),
            "orders-rw-lb"
        );
        assert_eq!(
            service_name("orders", ExposeTarget::R, ExposeType::NodePort),
            "orders-r-nodeport"
        );
        assert_eq!(external_secret_name("orders"), "orders-app-external");
    }

    #[test]
    fn spellings_round_trip_through_serde() {
        let entry: ExposeSpec = serde_json::from_value(serde_json::json!({
            "target": "ro", "type": "NodePort", "externalTrafficPolicy": "Local"
        }))
        .expect("parses");
        assert_eq!(entry.target, ExposeTarget::Ro);
        assert_eq!(entry.type_, ExposeType::NodePort);
        assert_eq!(entry.external_traffic_policy, Some(TrafficPolicy::Local));
        let back = serde_json::to_value(&entry).expect("serializes");
        assert_eq!(back["type"], "NodePort");
        assert_eq!(back["target"], "ro");
    }
}
