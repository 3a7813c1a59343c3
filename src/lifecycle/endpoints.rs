//! The published endpoints (`spec.expose`), decided from what was observed
//! (pure): the rows of `status.endpoints`, condition [`EXPOSED`], the names
//! the server certificates must carry for them, and whether the
//! `<db>-app-external` Secret is to be applied or deleted.
//!
//! An endpoint is proven, not assumed: the controller observes each entry's
//! Service (the load balancer's ingress, the node port) and then completes a
//! PostgreSQL TLS handshake through the first address and the port
//! ([`EndpointProbe`]). `Exposed` is True only when every entry has an
//! address and was reached; otherwise its message names the entry
//! (`spec.expose[i]`, its Service) and what is missing. It never gates
//! `Ready`: in-cluster clients are served whatever a load balancer does.
//!
//! A `NodePort` entry's addresses are the host IPs of the nodes running a
//! ready target instance (the primary for `rw`, the replicas for `ro`, any
//! instance for `r`), as the Service routes. The certificates name the host
//! IP of every instance's node, so a failover or switchover moves `rw` to an
//! address the certificates already carry, with no reissue in its way.

use std::net::IpAddr;

use crate::api::expose::{EndpointStatus, ExposeTarget, ExposeType};
use crate::api::status::InstanceRole;
use crate::resources::POSTGRES_PORT;

use super::action::Action;
use super::observed::{Observed, Pod, PodPhase};
pub use super::published::{
    EndpointProbe, EntryObserved, ExposureObserved, ExternalSecret, ServiceSeen,
};
use super::verdict::Desired;

/// The condition type summing up the published endpoints.
pub const EXPOSED: &str = "Exposed";

/// How soon to look again while an endpoint with an address was not
/// reached: the probe's outcome is not watched, only a new pass sees it.
pub const REQUEUE_UNREACHED_SECONDS: u64 = 30;

/// Where a probe goes and what the certificate must name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    pub address: String,
    pub port: i32,
    pub name: String,
}

/// What the planner decides about the published endpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct ExposurePlan {
    /// `status.endpoints`, one row per entry (empty clears the recorded).
    pub endpoints: Vec<EndpointStatus>,
    /// `Exposed`; `None` (removed) while `spec.expose` is empty.
    pub condition: Option<Desired>,
    /// Apply or delete `<db>-app-external`.
    pub actions: Vec<Action>,
    pub requeue_seconds: Option<u64>,
}

/// The plan for the published endpoints; `None` where they are not
/// observed (tests of other concerns): the recorded rows are kept then.
pub fn plan(observed: &Observed) -> Option<ExposurePlan> {
    let exposure = observed.published.as_ref()?;
    let endpoints = endpoints(observed);
    let unreached = endpoints
        .iter()
        .any(|e| !e.addresses.is_empty() && !e.reached);
    Some(ExposurePlan {
        condition: condition(exposure, &endpoints),
        actions: secret_actions(exposure, &endpoints),
        requeue_seconds: unreached.then_some(REQUEUE_UNREACHED_SECONDS),
        endpoints,
    })
}

/// The rows of `status.endpoints`, in the spec's order.
pub fn endpoints(observed: &Observed) -> Vec<EndpointStatus> {
    let Some(exposure) = &observed.published else {
        return Vec::new();
    };
    exposure
        .entries
        .iter()
        .map(|entry| {
            let addresses = addresses(observed, entry);
            let port = entry.seen.as_ref().and_then(|seen| match entry.type_ {
                ExposeType::LoadBalancer => Some(POSTGRES_PORT),
                ExposeType::NodePort => seen.node_port,
            });
            let reached = entry.probe == EndpointProbe::Reached && !addresses.is_empty();
            let message = (!reached).then(|| missing(observed, exposure, entry, &addresses, port));
            EndpointStatus {
                service: entry.service.clone(),
                target: entry.target,
                type_: entry.type_,
                hostname: entry.hostname.clone(),
                addresses,
                port,
                reached,
                message,
            }
        })
        .collect()
}

/// The addresses clients use for `entry`.
fn addresses(observed: &Observed, entry: &EntryObserved) -> Vec<String> {
    let Some(seen) = &entry.seen else {
        return Vec::new();
    };
    match entry.type_ {
        ExposeType::LoadBalancer => seen.ingress.clone(),
        // No port, nothing published on the nodes yet.
        ExposeType::NodePort if seen.node_port.is_none() => Vec::new(),
        ExposeType::NodePort => target_host_ips(observed, entry.target),
    }
}

/// The pods of ready instances that `target` routes to (as the Service
/// selects them), in serial order.
fn ready_targets(observed: &Observed, target: ExposeTarget) -> impl Iterator<Item = &Pod> {
    observed
        .instances
        .values()
        .filter_map(|i| i.pod.as_ref())
        .filter(move |pod| {
            let routed = match target {
                ExposeTarget::Rw => pod.role_label == Some(InstanceRole::Primary),
                ExposeTarget::Ro => pod.role_label == Some(InstanceRole::Replica),
                ExposeTarget::R => true,
            };
            routed && pod.ready && pod.phase == PodPhase::Running
        })
}

/// The host IPs of the nodes running a ready instance that `target` routes
/// to, once each, in serial order.
fn target_host_ips(observed: &Observed, target: ExposeTarget) -> Vec<String> {
    let mut ips: Vec<String> = Vec::new();
    for ip in ready_targets(observed, target).filter_map(|p| p.host_ip.as_ref()) {
        if !ips.contains(ip) {
            ips.push(ip.clone());
        }
    }
    ips
}

/// What to probe for each entry, in the spec's order: its first address,
/// the port and the name the certificate must carry (the `hostname`, else
/// that address). `None` for an entry without an address, for one whose
/// target has no ready instance, and for one whose Service may route to an
/// instance whose manager did not answer this pass: nothing would answer
/// (a primary being failed over, or cut off from the network while still
/// marked ready), and a failover pass must not wait for the probe's timeout.
pub fn probe_targets(observed: &Observed) -> Vec<Option<ProbeTarget>> {
    let Some(exposure) = &observed.published else {
        return Vec::new();
    };
    endpoints(observed)
        .into_iter()
        .zip(&exposure.entries)
        .map(|(row, entry)| {
            let address = row.addresses.first()?.clone();
            ready_targets(observed, entry.target).next()?;
            if ready_targets(observed, entry.target).any(|pod| pod.manager.is_none()) {
                return None;
            }
            let name = row.hostname.clone().unwrap_or_else(|| address.clone());
            Some(ProbeTarget {
                port: row.port?,
                address,
                name,
            })
        })
        .collect()
}

/// Why `entry` is not reached, in plain words.
fn missing(
    observed: &Observed,
    exposure: &ExposureObserved,
    entry: &EntryObserved,
    addresses: &[String],
    port: Option<i32>,
) -> String {
    let Some(seen) = &entry.seen else {
        return format!("the Service {} does not exist yet", entry.service);
    };
    let (Some(first), Some(port)) = (addresses.first(), port) else {
        return match entry.type_ {
            ExposeType::LoadBalancer => format!(
                "no address assigned yet: the Service {} waits for the cluster's load balancer",
                entry.service
            ),
            ExposeType::NodePort if seen.node_port.is_none() => {
                format!("no node port assigned yet to the Service {}", entry.service)
            }
            ExposeType::NodePort => format!(
                "no address yet: no ready instance runs {} (the node of one would be the address)",
                target_words(entry.target)
            ),
        };
    };
    match &entry.probe {
        EndpointProbe::Reached => String::new(),
        EndpointProbe::NotProbed if ready_targets(observed, entry.target).next().is_none() => {
            format!(
                "{first}:{port} not probed: no ready instance runs {}",
                target_words(entry.target)
            )
        }
        EndpointProbe::NotProbed
            if ready_targets(observed, entry.target).any(|pod| pod.manager.is_none()) =>
        {
            format!(
                "{first}:{port} not probed: the instance manager of {} did not answer",
                target_words(entry.target)
            )
        }
        EndpointProbe::NotProbed => format!("{first}:{port} not probed yet"),
        EndpointProbe::Failed(why) => {
            let mut message = format!("the TLS handshake through {first}:{port} failed: {why}");
            if let Some(hint) = source_hint(exposure, entry) {
                message.push_str("; ");
                message.push_str(&hint);
            }
            message
        }
    }
}

fn target_words(target: ExposeTarget) -> &'static str {
    match target {
        ExposeTarget::Rw => "the primary",
        ExposeTarget::Ro => "a replica",
        ExposeTarget::R => "an instance",
    }
}

/// Why a failed probe may be the source ranges' doing: the probe comes
/// from the operator's pod, which `allowedSourceRanges` must let in.
fn source_hint(exposure: &ExposureObserved, entry: &EntryObserved) -> Option<String> {
    if entry.type_ != ExposeType::LoadBalancer || entry.allowed_source_ranges.is_empty() {
        return None;
    }
    match exposure
        .operator_address
        .as_deref()
        .and_then(|a| a.parse::<IpAddr>().ok())
    {
        Some(ip) if entry.allowed_source_ranges.iter().any(|r| in_range(r, ip)) => None,
        Some(ip) => Some(format!(
            "the probe comes from the operator's address {ip}, which is outside every \
             allowedSourceRanges entry: add it (or the pods' network) to see Exposed=True"
        )),
        None => Some(
            "the probe comes from the operator's address, which must be inside \
             allowedSourceRanges to pass"
                .to_owned(),
        ),
    }
}

/// Whether CIDR `range` (`a.b.c.d/n`, an IPv6 prefix, or a bare address)
/// holds `ip`. A range that does not parse holds nothing.
pub fn in_range(range: &str, ip: IpAddr) -> bool {
    let (network, bits) = match range.trim().split_once('/') {
        Some((network, bits)) => (network, bits.parse::<u32>().ok()),
        None => (range.trim(), None),
    };
    match (network.parse::<IpAddr>(), ip) {
        (Ok(IpAddr::V4(network)), IpAddr::V4(ip)) => {
            let bits = bits.unwrap_or(32);
            bits <= 32
                && masked(u128::from(u32::from(network)), bits, 32)
                    == masked(u128::from(u32::from(ip)), bits, 32)
        }
        (Ok(IpAddr::V6(network)), IpAddr::V6(ip)) => {
            let bits = bits.unwrap_or(128);
            bits <= 128
                && masked(u128::from(network), bits, 128) == masked(u128::from(ip), bits, 128)
        }
        _ => false,
    }
}

/// The top `bits` of a `width`-bit address.
fn masked(address: u128, bits: u32, width: u32) -> u128 {
    match width - bits {
        0 => address,
        shift if shift >= 128 => 0,
        shift => address >> shift,
    }
}

/// `Exposed`: True when every entry has an address and was reached; else
/// each entry that is not, with what is missing.
fn condition(exposure: &ExposureObserved, endpoints: &[EndpointStatus]) -> Option<Desired> {
    if exposure.entries.is_empty() {
        return None;
    }
    let failing: Vec<String> = endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.reached)
        .map(|(i, e)| {
            format!(
                "spec.expose[{i}] (Service {}): {}",
                e.service,
                e.message.as_deref().unwrap_or("not reached")
            )
        })
        .collect();
    if failing.is_empty() {
        let reached: Vec<String> = endpoints
            .iter()
            .map(|e| {
                let address = e.addresses.first().map(String::as_str).unwrap_or_default();
                let port = e.port.unwrap_or_default();
                format!("{} at {address}:{port}", e.service)
            })
            .collect();
        return Some(Desired::new(
            EXPOSED,
            true,
            "Reached",
            format!(
                "PostgreSQL answered a verified TLS handshake through {}",
                reached.join(", ")
            ),
        ));
    }
    let reason = if endpoints.iter().any(|e| e.addresses.is_empty()) {
        "AddressPending"
    } else {
        "ProbeFailed"
    };
    Some(Desired::new(EXPOSED, false, reason, failing.join("; ")))
}

/// `<db>-app-external`: applied while `spec.expose` has entries and one of
/// them an address (and it is not as built); deleted once `spec.expose` is
/// empty. Entries without an address keep the Secret as it was: a load
/// balancer that lost its address for a moment does not take the
/// applications' configuration with it.
fn secret_actions(exposure: &ExposureObserved, endpoints: &[EndpointStatus]) -> Vec<Action> {
    let state = &exposure.external_secret;
    if exposure.entries.is_empty() {
        return match state {
            ExternalSecret::Absent | ExternalSecret::Unbuildable(_) => Vec::new(),
            ExternalSecret::AsBuilt | ExternalSecret::Differs => {
                vec![Action::DeleteExternalSecret]
            }
        };
    }
    let addressed = endpoints.iter().any(|e| !e.addresses.is_empty());
    match state {
        ExternalSecret::Absent | ExternalSecret::Differs if addressed => {
            vec![Action::ApplyExternalSecret]
        }
        _ => Vec::new(),
    }
}

/// The names the server certificates must carry for the published
/// endpoints: every `hostname`, every load balancer address, and for
/// `NodePort` entries the host IP of every instance's node (any of them
/// may come to run the target). Addresses in their canonical form, once
/// each, in the spec's order.
pub fn certificate_names(observed: &Observed) -> Vec<String> {
    let Some(exposure) = &observed.published else {
        return Vec::new();
    };
    let mut names: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        let name = crate::tls::names::canonical(name);
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    };
    for entry in &exposure.entries {
        if let Some(hostname) = &entry.hostname {
            add(hostname);
        }
        let Some(seen) = &entry.seen else { continue };
        match entry.type_ {
            ExposeType::LoadBalancer => seen.ingress.iter().for_each(|a| add(a)),
            ExposeType::NodePort => observed
                .instances
                .values()
                .filter_map(|i| i.pod.as_ref()?.host_ip.as_deref())
                .for_each(&mut add),
        }
    }
    names
}
