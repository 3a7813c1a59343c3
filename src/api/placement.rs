//! Placement (`spec.affinity`, `spec.topologySpreadConstraints`,
//! `spec.priorityClassName`) and inherited metadata (`spec.inheritedMetadata`):
//! the rules beyond the schema, and the resolved form the builders take.
//!
//! The syntax rules are the API server's own (qualified names, label values,
//! DNS subdomains): a spec that passes here never makes a pod or PVC that the
//! API server refuses half-way through a pass.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeAffinity, Toleration, TopologySpreadConstraint};

use super::field::FieldError;
use super::v1::{self, PodAntiAffinityType};

/// Topology of the instances' anti-affinity when `spec.affinity.topologyKey`
/// is unset: one instance per node.
pub const DEFAULT_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

/// The prefix of Tusk's own labels and annotations, which inherited metadata
/// may not use.
pub const RESERVED_PREFIX: &str = "tusk.dev/";

/// Where the instance pods may run, resolved from the spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    /// `spec.affinity.podAntiAffinity`.
    pub anti_affinity: PodAntiAffinityType,
    /// `spec.affinity.topologyKey`, or [`DEFAULT_TOPOLOGY_KEY`].
    pub topology_key: String,
    /// `spec.affinity.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `spec.affinity.nodeAffinity`.
    pub node_affinity: Option<NodeAffinity>,
    /// `spec.affinity.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// `spec.topologySpreadConstraints`, as written (the builder fills in a
    /// missing label selector).
    pub topology_spread: Vec<TopologySpreadConstraint>,
    /// `spec.priorityClassName`.
    pub priority_class_name: Option<String>,
}

impl Placement {
    /// The placement `spec` asks for.
    pub fn of(spec: &v1::DatabaseSpec) -> Self {
        let affinity = &spec.affinity;
        Self {
            anti_affinity: affinity.pod_anti_affinity,
            topology_key: affinity
                .topology_key
                .clone()
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| DEFAULT_TOPOLOGY_KEY.to_owned()),
            node_selector: affinity.node_selector.clone(),
            node_affinity: affinity.node_affinity.clone(),
            tolerations: affinity.tolerations.clone(),
            topology_spread: spec.topology_spread_constraints.clone(),
            priority_class_name: spec.priority_class_name.clone(),
        }
    }
}

/// Everything wrong with the placement and inherited metadata of `spec`, each
/// naming its field.
pub fn errors(spec: &v1::DatabaseSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let affinity = &spec.affinity;
    if let Some(key) = &affinity.topology_key
        && let Err(e) = qualified_name(key)
    {
        errors.push(FieldError::new("spec.affinity.topologyKey", e));
    }
    for (key, value) in &affinity.node_selector {
        let path = format!("spec.affinity.nodeSelector.{key}");
        errors.extend(qualified_name(key).err().map(|e| FieldError::new(&path, e)));
        errors.extend(label_value(value).err().map(|e| FieldError::new(&path, e)));
    }
    for (i, toleration) in affinity.tolerations.iter().enumerate() {
        errors.extend(
            toleration_error(toleration)
                .map(|e| FieldError::new(format!("spec.affinity.tolerations[{i}]"), e)),
        );
    }
    for (i, constraint) in spec.topology_spread_constraints.iter().enumerate() {
        let path = format!("spec.topologySpreadConstraints[{i}]");
        errors.extend(
            spread_errors(constraint)
                .map(|(field, e)| FieldError::new(format!("{path}.{field}"), e)),
        );
    }
    if let Some(class) = &spec.priority_class_name
        && let Err(e) = dns_subdomain(class)
    {
        errors.push(FieldError::new("spec.priorityClassName", e));
    }
    errors.extend(inherited_errors(&spec.inherited_metadata));
    errors
}

/// `spec.inheritedMetadata`: keys that are valid and not Tusk's, label values
/// that are valid.
fn inherited_errors(inherited: &v1::InheritedMetadata) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let sets = [
        ("labels", &inherited.labels, true),
        ("annotations", &inherited.annotations, false),
    ];
    for (field, map, is_label) in sets {
        for (key, value) in map {
            let path = format!("spec.inheritedMetadata.{field}.{key}");
            if key.starts_with(RESERVED_PREFIX) {
                errors.push(FieldError::new(
                    &path,
                    format!("keys under {RESERVED_PREFIX} are Tusk's own and cannot be inherited"),
                ));
                continue;
            }
            errors.extend(qualified_name(key).err().map(|e| FieldError::new(&path, e)));
            if is_label {
                errors.extend(label_value(value).err().map(|e| FieldError::new(&path, e)));
            }
        }
    }
    errors
}

fn toleration_error(toleration: &Toleration) -> Option<String> {
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    let value = toleration.value.as_deref().unwrap_or_default();
    let key = toleration.key.as_deref().unwrap_or_default();
    match operator {
        "Equal" | "Exists" => {}
        other => return Some(format!("operator {other:?} is not Equal or Exists")),
    }
    if operator == "Exists" && !value.is_empty() {
        return Some("value must be empty when operator is Exists".to_owned());
    }
    if key.is_empty() && operator != "Exists" {
        return Some("an empty key needs operator Exists".to_owned());
    }
    if !key.is_empty()
        && let Err(e) = qualified_name(key)
    {
        return Some(format!("key: {e}"));
    }
    match toleration.effect.as_deref().unwrap_or_default() {
        "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute" => None,
        other => Some(format!(
            "effect {other:?} is not NoSchedule, PreferNoSchedule or NoExecute"
        )),
    }
}

fn spread_errors(
    constraint: &TopologySpreadConstraint,
) -> impl Iterator<Item = (&'static str, String)> {
    let mut errors = Vec::new();
    if constraint.max_skew < 1 {
        errors.push(("maxSkew", "must be at least 1".to_owned()));
    }
    if let Err(e) = qualified_name(&constraint.topology_key) {
        errors.push(("topologyKey", e));
    }
    if !matches!(
        constraint.when_unsatisfiable.as_str(),
        "DoNotSchedule" | "ScheduleAnyway"
    ) {
        errors.push((
            "whenUnsatisfiable",
            "must be DoNotSchedule or ScheduleAnyway".to_owned(),
        ));
    }
    errors.into_iter()
}

/// A Kubernetes qualified name: an optional DNS-subdomain prefix and `/`,
/// then 1 to 63 alphanumerics, `-`, `_` or `.`, alphanumeric at both ends.
pub fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        dns_subdomain(prefix).map_err(|e| format!("{key:?}: the prefix {e}"))?;
    }
    if name.is_empty() || name.len() > 63 || !label_chars(name) {
        return Err(format!(
            "{key:?} is not a valid key: the name part must be 1 to 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A label value: empty, or up to 63 alphanumerics, `-`, `_` or `.`,
/// alphanumeric at both ends.
pub fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && label_chars(value)) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a valid label value: at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
        ))
    }
}

fn label_chars(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    edge(bytes.first())
        && edge(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A DNS subdomain (RFC 1123): at most 253 characters, lowercase
/// alphanumerics, `-` and `.`, alphanumeric at both ends of each label.
pub fn dns_subdomain(s: &str) -> Result<(), String> {
    let valid = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let bytes = part.as_bytes();
            let edge =
                |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
            edge(bytes.first())
                && edge(bytes.last())
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a DNS subdomain: lowercase letters, digits, '-' and '.', at most 253 characters"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;

    fn paths(spec: &v1::DatabaseSpec) -> Vec<String> {
        errors(spec).into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn defaults_resolve_to_today_s_placement() {
        let placement = Placement::of(&sample_database().spec);
        assert_eq!(placement.anti_affinity, PodAntiAffinityType::Preferred);
        assert_eq!(placement.topology_key, "kubernetes.io/hostname");
        assert!(placement.node_selector.is_empty());
        assert!(placement.tolerations.is_empty());
        assert_eq!(placement.priority_class_name, None);
        assert!(errors(&sample_database().spec).is_empty());
    }

    #[test]
    fn inherited_keys_under_tusk_dev_are_refused_naming_the_field() {
        let mut spec = sample_database().spec;
        spec.inherited_metadata
            .labels
            .insert("tusk.dev/role".into(), "primary".into());
        spec.inherited_metadata
            .annotations
            .insert("tusk.dev/spec-hash".into(), "x".into());
        spec.inherited_metadata
            .labels
            .insert("team".into(), "payments".into());
        spec.inherited_metadata.annotations.insert(
            "example.com/cost-center".into(),
            "any value / at all".into(),
        );
        let all = errors(&spec);
        let paths: Vec<&str> = all.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.inheritedMetadata.labels.tusk.dev/role",
                "spec.inheritedMetadata.annotations.tusk.dev/spec-hash"
            ]
        );
        assert!(all[0].message.contains("tusk.dev/"), "{}", all[0].message);
    }

    #[test]
    fn invalid_keys_and_values_name_their_field() {
        let mut spec = sample_database().spec;
        spec.inherited_metadata
            .labels
            .insert("team".into(), "not a value".into());
        spec.inherited_metadata
            .annotations
            .insert("-bad".into(), String::new());
        spec.affinity.topology_key = Some("Not/Valid/Key".into());
        spec.affinity
            .node_selector
            .insert("disk".into(), "x".repeat(64));
        spec.affinity.tolerations.push(Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            value: Some("db".into()),
            ..Toleration::default()
        });
        spec.topology_spread_constraints
            .push(TopologySpreadConstraint {
                max_skew: 0,
                topology_key: "zone".into(),
                when_unsatisfiable: "Sometimes".into(),
                ..TopologySpreadConstraint::default()
            });
        spec.priority_class_name = Some("High".into());
        assert_eq!(
            paths(&spec),
            [
                "spec.affinity.topologyKey",
                "spec.affinity.nodeSelector.disk",
                "spec.affinity.tolerations[0]",
                "spec.topologySpreadConstraints[0].maxSkew",
                "spec.topologySpreadConstraints[0].whenUnsatisfiable",
                "spec.priorityClassName",
                "spec.inheritedMetadata.labels.team",
                "spec.inheritedMetadata.annotations.-bad",
            ]
        );
    }

    #[test]
    fn names_as_the_api_server_reads_them() {
        assert!(qualified_name("kubernetes.io/hostname").is_ok());
        assert!(qualified_name("team").is_ok());
        assert!(qualified_name("example.com/a_b.c-d").is_ok());
        assert!(qualified_name("").is_err());
        assert!(qualified_name("Example.com/x").is_err());
        assert!(qualified_name(&"a".repeat(64)).is_err());
        assert!(label_value("").is_ok());
        assert!(label_value("v1.2_3-x").is_ok());
        assert!(label_value("-x").is_err());
        assert!(dns_subdomain("system-cluster-critical").is_ok());
        assert!(dns_subdomain("a..b").is_err());
    }
}
