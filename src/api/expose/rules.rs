//! The rules of `spec.expose` beyond the schema: what the CEL rules say
//! (again, so that the reconciler refuses a spec stored before they existed),
//! plus what CEL cannot say well: CIDR syntax, DNS names, annotation keys,
//! the node-port range of the cluster (an operator setting) and the length of
//! the Service names. Every message names the field.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use super::{ExposeSpec, ExposeType, service_name};
use crate::api::field::FieldError;

/// The annotation ExternalDNS reads; Tusk sets it from `hostname`.
pub const EXTERNAL_DNS_HOSTNAME: &str = "external-dns.alpha.kubernetes.io/hostname";

/// Kubernetes' limit on a Service name (a DNS-1035 label).
const MAX_SERVICE_NAME: usize = 63;

/// The node ports a cluster hands out (kube-apiserver's
/// `--service-node-port-range`); an operator setting, 30000-32767 unless the
/// operator is told otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePortRange {
    pub first: i32,
    pub last: i32,
}

impl Default for NodePortRange {
    fn default() -> Self {
        Self {
            first: 30_000,
            last: 32_767,
        }
    }
}

impl NodePortRange {
    pub fn contains(self, port: i32) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl fmt::Display for NodePortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// A range that does not parse as `<first>-<last>`.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a node-port range such as \"30000-32767\" (two ports from 1 to 65535, the first not above the last)"
)]
pub struct BadNodePortRange(String);

impl FromStr for NodePortRange {
    type Err = BadNodePortRange;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let bad = || BadNodePortRange(value.to_owned());
        let (first, last) = value.trim().split_once('-').ok_or_else(bad)?;
        let port = |p: &str| {
            p.trim()
                .parse::<i32>()
                .ok()
                .filter(|p| (1..=65_535).contains(p))
        };
        match (port(first), port(last)) {
            (Some(first), Some(last)) if first <= last => Ok(Self { first, last }),
            _ => Err(bad()),
        }
    }
}

/// Every problem of `spec.expose` of Database `db` that does not depend on
/// the cluster (see [`node_port_errors`] for the one that does).
pub fn errors(db: &str, expose: &[ExposeSpec]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, entry) in expose.iter().enumerate() {
        let field = format!("spec.expose[{i}]");
        errors.extend(type_errors(&field, entry));
        errors.extend(range_errors(&field, &entry.allowed_source_ranges));
        errors.extend(annotation_errors(&field, entry));
        if let Some(hostname) = &entry.hostname
            && let Err(why) = dns_subdomain(hostname)
        {
            errors.push(FieldError::new(
                format!("{field}.hostname"),
                format!("{hostname:?} is not a DNS name: {why}"),
            ));
        }
        if let Some(class) = &entry.load_balancer_class
            && let Err(why) = qualified_name(class)
        {
            errors.push(FieldError::new(
                format!("{field}.loadBalancerClass"),
                format!(
                    "{class:?} is not a qualified name such as example.com/internal-vip: {why}"
                ),
            ));
        }
    }
    errors.extend(duplicate_errors(expose));
    errors.extend(name_error(db, expose));
    errors
}

/// `nodePort`s outside the cluster's node-port range.
pub fn node_port_errors(expose: &[ExposeSpec], range: NodePortRange) -> Vec<FieldError> {
    expose
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| {
            let port = entry.node_port?;
            (!range.contains(port)).then(|| {
                FieldError::new(
                    format!("spec.expose[{i}].nodePort"),
                    format!("{port} is outside the cluster's node-port range {range}"),
                )
            })
        })
        .collect()
}

/// Legal but worth a second look: a load balancer open to everyone.
pub fn warnings(db: &str, expose: &[ExposeSpec]) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, entry) in expose.iter().enumerate() {
        for (j, range) in entry.allowed_source_ranges.iter().enumerate() {
            if parse_cidr(range).is_ok_and(|(_, prefix)| prefix == 0) {
                warnings.push(format!(
                    "spec.expose[{i}].allowedSourceRanges[{j}] is {range}: Service {} accepts connections from any address; PostgreSQL's passwords and TLS are all that stand between it and the internet",
                    service_name(db, entry.target, entry.type_),
                ));
            }
        }
    }
    warnings
}

/// The combinations of fields the type allows (the same as the CEL rules on
/// [`ExposeSpec`]).
fn type_errors(field: &str, entry: &ExposeSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let ranges = !entry.allowed_source_ranges.is_empty();
    match entry.type_ {
        ExposeType::LoadBalancer => {
            if !ranges {
                errors.push(FieldError::new(
                    format!("{field}.allowedSourceRanges"),
                    LOAD_BALANCER_NEEDS_RANGES,
                ));
            }
            if entry.node_port.is_some() {
                errors.push(FieldError::new(format!("{field}.nodePort"), NODE_PORT_ONLY));
            }
        }
        ExposeType::NodePort => {
            if ranges {
                errors.push(FieldError::new(
                    format!("{field}.allowedSourceRanges"),
                    NO_RANGES_ON_NODE_PORT,
                ));
            }
            if entry.load_balancer_class.is_some() {
                errors.push(FieldError::new(
                    format!("{field}.loadBalancerClass"),
                    CLASS_ONLY_ON_LOAD_BALANCER,
                ));
            }
        }
    }
    errors
}

/// Messages shared with the CEL rules, so the schema and the webhook say the
/// same thing.
pub const LOAD_BALANCER_NEEDS_RANGES: &str = "is required for type LoadBalancer: list the CIDRs that may connect (0.0.0.0/0 allows everyone)";
pub const NODE_PORT_ONLY: &str = "is only for type NodePort";
pub const NO_RANGES_ON_NODE_PORT: &str = "is not supported for type NodePort: Kubernetes does not filter node ports by source; use type LoadBalancer or a firewall in front of the nodes";
pub const CLASS_ONLY_ON_LOAD_BALANCER: &str = "is only for type LoadBalancer";
pub const ONE_PER_TARGET_AND_TYPE: &str = "two entries publish the same target with the same type: one Service each, so at most one entry per target and type";

fn range_errors(field: &str, ranges: &[String]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen: BTreeMap<(IpAddr, u8), usize> = BTreeMap::new();
    for (j, range) in ranges.iter().enumerate() {
        let path = format!("{field}.allowedSourceRanges[{j}]");
        match parse_cidr(range) {
            Ok(cidr) => {
                if let Some(first) = seen.insert(cidr, j) {
                    errors.push(FieldError::new(
                        path,
                        format!("{range} repeats allowedSourceRanges[{first}]"),
                    ));
                }
            }
            Err(why) => errors.push(FieldError::new(path, format!("{range:?} {why}"))),
        }
    }
    errors
}

/// A CIDR (`192.0.2.0/24`, `2001:db8::/32`) with no bits set beyond its
/// prefix: Kubernetes filters by it, and a host address with a prefix
/// (`192.0.2.7/24`) is too often a typo for `/32`.
fn parse_cidr(value: &str) -> Result<(IpAddr, u8), String> {
    let (address, prefix) = value
        .split_once('/')
        .ok_or("is not a CIDR such as 203.0.113.0/24 or 2001:db8::/32 (no /prefix)")?;
    let address: IpAddr = address
        .parse()
        .map_err(|_| "is not a CIDR: the address is neither IPv4 nor IPv6".to_owned())?;
    let bits = if address.is_ipv4() { 32 } else { 128 };
    let prefix: u8 =
        prefix.parse().ok().filter(|p| *p <= bits).ok_or_else(|| {
            format!("is not a CIDR: the prefix must be a number from 0 to {bits}")
        })?;
    let network = match address {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask_v4(prefix)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask_v6(prefix)).into()),
    };
    if network != address {
        return Err(format!(
            "has bits set beyond its /{prefix} prefix: write {network}/{prefix} for the network, or {address}/{bits} for the one address"
        ));
    }
    Ok((address, prefix))
}

fn mask_v4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask_v6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

fn annotation_errors(field: &str, entry: &ExposeSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for key in entry.annotations.keys() {
        if let Err(why) = qualified_name(key) {
            errors.push(FieldError::new(
                format!("{field}.annotations"),
                format!("{key:?} is not a valid annotation key: {why}"),
            ));
        }
    }
    if entry.hostname.is_some() && entry.annotations.contains_key(EXTERNAL_DNS_HOSTNAME) {
        errors.push(FieldError::new(
            format!("{field}.annotations"),
            format!("{EXTERNAL_DNS_HOSTNAME} is set from {field}.hostname: remove the annotation or the hostname"),
        ));
    }
    errors
}

/// Two entries with the same target and type, and two with the same node
/// port (the API server would refuse the second Service).
fn duplicate_errors(expose: &[ExposeSpec]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut pairs = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for (i, entry) in expose.iter().enumerate() {
        if let Some(first) = pairs.insert((entry.target, entry.type_), i) {
            errors.push(FieldError::new(
                format!("spec.expose[{i}]"),
                format!(
                    "publishes {} as {} like spec.expose[{first}]: {ONE_PER_TARGET_AND_TYPE}",
                    entry.target.as_str(),
                    entry.type_.as_str()
                ),
            ));
        }
        if let Some(port) = entry.node_port
            && let Some(first) = ports.insert(port, i)
        {
            errors.push(FieldError::new(
                format!("spec.expose[{i}].nodePort"),
                format!("{port} is already spec.expose[{first}].nodePort: a node port serves one Service"),
            ));
        }
    }
    errors
}

/// The longest Service name the entries make must fit Kubernetes' 63
/// characters (only when there are entries: the name alone is checked
/// against the other names Tusk derives elsewhere).
fn name_error(db: &str, expose: &[ExposeSpec]) -> Option<FieldError> {
    let longest = expose
        .iter()
        .map(|e| service_name(db, e.target, e.type_))
        .max_by_key(String::len)?;
    (longest.len() > MAX_SERVICE_NAME).then(|| {
        FieldError::new(
            "metadata.name",
            format!(
                "is too long for spec.expose: Service {longest} would have {} characters, Kubernetes allows {MAX_SERVICE_NAME}",
                longest.len()
            ),
        )
    })
}

/// A DNS-1123 subdomain: lowercase labels of letters, digits and `-`, each
/// at most 63 characters and not starting or ending with `-`, at most 253 in
/// all. No wildcard: a certificate name and a DNS record are for one host.
fn dns_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".into());
    }
    if name.len() > 253 {
        return Err(format!(
            "it has {} characters, at most 253 are allowed",
            name.len()
        ));
    }
    if name.starts_with("*.") {
        return Err("wildcards are not allowed: name the one host clients use".into());
    }
    name.split('.').try_for_each(dns_label)
}

fn dns_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("it has an empty label (two dots, or a dot at an end)".into());
    }
    if label.len() > 63 {
        return Err(format!(
            "label {label:?} has {} characters, at most 63 are allowed",
            label.len()
        ));
    }
    if !label
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!(
            "label {label:?} may only hold lowercase letters, digits and '-'"
        ));
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err(format!("label {label:?} starts or ends with '-'"));
    }
    Ok(())
}

/// A Kubernetes qualified name (annotation keys, `loadBalancerClass`): an
/// optional DNS subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn qualified_name(value: &str) -> Result<(), String> {
    let name = match value.split_once('/') {
        Some((prefix, name)) => {
            dns_subdomain(prefix).map_err(|why| format!("the prefix {prefix:?}: {why}"))?;
            name
        }
        None => value,
    };
    if name.is_empty() || name.len() > 63 {
        return Err("the name (after any prefix/) must have 1 to 63 characters".into());
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge(name.chars().next())
        || !edge(name.chars().last())
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(
            "the name (after any prefix/) may only hold letters, digits, '-', '_' and '.', starting and ending with a letter or digit".into(),
        );
    }
    Ok(())
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
