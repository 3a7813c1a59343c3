//! Where an instance pod may run, rendered from the resolved [`Placement`]:
//! the anti-affinity between the instances of one Database, node selection,
//! tolerations, topology spread and priority. Pure; the pod builder puts
//! these fields in the pod spec, so they are in the spec hash and a change
//! rolls the instances like any pod-spec change.
//!
//! The defaults render exactly the pod spec Tusk built before these fields
//! existed (a preferred anti-affinity over `kubernetes.io/hostname`, nothing
//! else), so an operator upgrade does not roll running instances.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, PodAffinityTerm, PodAntiAffinity, PodSpec, Toleration, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::labels;
use crate::api::placement::Placement;
use crate::api::v1::PodAntiAffinityType;

/// Weight of the preferred anti-affinity: the strongest preference.
const PREFERRED_WEIGHT: i32 = 100;

/// The affinity of an instance pod of `db_name`: the instances keep apart
/// over `placement.topology_key` (softly when `preferred`), and the node
/// affinity the spec gives.
pub fn affinity(db_name: &str, placement: &Placement) -> Affinity {
    let term = PodAffinityTerm {
        label_selector: Some(instances_of(db_name)),
        topology_key: placement.topology_key.clone(),
        ..PodAffinityTerm::default()
    };
    let anti = match placement.anti_affinity {
        PodAntiAffinityType::Preferred => PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: PREFERRED_WEIGHT,
                    pod_affinity_term: term,
                },
            ]),
            required_during_scheduling_ignored_during_execution: None,
        },
        PodAntiAffinityType::Required => PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: None,
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
        },
    };
    Affinity {
        pod_anti_affinity: Some(anti),
        node_affinity: placement.node_affinity.clone(),
        ..Affinity::default()
    }
}

/// `nodeSelector`; unset when empty (as built before it existed).
pub fn node_selector(placement: &Placement) -> Option<BTreeMap<String, String>> {
    (!placement.node_selector.is_empty()).then(|| placement.node_selector.clone())
}

/// `tolerations`; unset when empty.
pub fn tolerations(placement: &Placement) -> Option<Vec<Toleration>> {
    (!placement.tolerations.is_empty()).then(|| placement.tolerations.clone())
}

/// `topologySpreadConstraints`, each without a label selector counting
/// the instances of `db_name` (a constraint that selects nothing spreads
/// nothing); unset when there are none.
pub fn topology_spread(
    db_name: &str,
    placement: &Placement,
) -> Option<Vec<TopologySpreadConstraint>> {
    let constraints: Vec<TopologySpreadConstraint> = placement
        .topology_spread
        .iter()
        .map(|c| TopologySpreadConstraint {
            label_selector: c
                .label_selector
                .clone()
                .or_else(|| Some(instances_of(db_name))),
            ..c.clone()
        })
        .collect();
    (!constraints.is_empty()).then_some(constraints)
}

/// The placement of a Job that runs on an instance's volume (upgrade,
/// verification): it must tolerate what the instance tolerates to run on
/// its node, and gets its priority. Anti-affinity, node selection and
/// spreading are the instances' (an upgrade Job is pinned to its node).
pub fn place_volume_job(spec: &mut PodSpec, placement: &Placement) {
    spec.tolerations = tolerations(placement);
    spec.priority_class_name = placement.priority_class_name.clone();
}

fn instances_of(db_name: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels::any_instance_selector(db_name)),
        match_expressions: None,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSelectorRequirement;
    use k8s_openapi::api::core::v1::{NodeAffinity, NodeSelector, NodeSelectorTerm};

    use super::*;
    use crate::api::arbitrary::sample_database;

    fn placement() -> Placement {
        Placement::of(&sample_database().spec)
    }

    #[test]
    fn spreads_over_nodes_softly_by_default() {
        let affinity = affinity("orders", &placement());
        assert_eq!(affinity.node_affinity, None);
        let anti = affinity.pod_anti_affinity.unwrap_or_default();
        assert_eq!(
            anti.required_during_scheduling_ignored_during_execution,
            None
        );
        let preferred = anti
            .preferred_during_scheduling_ignored_during_execution
            .unwrap_or_default();
        assert_eq!(preferred.len(), 1);
        assert_eq!(preferred[0].weight, 100);
        let term = &preferred[0].pod_affinity_term;
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
        assert_eq!(
            term.label_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some(labels::any_instance_selector("orders"))
        );
        let placement = placement();
        assert_eq!(node_selector(&placement), None);
        assert_eq!(tolerations(&placement), None);
        assert_eq!(topology_spread("orders", &placement), None);
    }

    #[test]
    fn required_keeps_instances_apart_on_the_topology_key() {
        let mut spec = sample_database().spec;
        spec.affinity.pod_anti_affinity = PodAntiAffinityType::Required;
        spec.affinity.topology_key = Some("topology.kubernetes.io/zone".into());
        let anti = affinity("orders", &Placement::of(&spec))
            .pod_anti_affinity
            .unwrap_or_default();
        assert_eq!(
            anti.preferred_during_scheduling_ignored_during_execution,
            None
        );
        let required = anti
            .required_during_scheduling_ignored_during_execution
            .unwrap_or_default();
        assert_eq!(required.len(), 1);
        assert_eq!(required[0].topology_key, "topology.kubernetes.io/zone");
        assert_eq!(
            required[0]
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some(labels::any_instance_selector("orders"))
        );
    }

    #[test]
    fn node_selection_tolerations_and_spread_are_rendered_as_given() {
        let mut spec = sample_database().spec;
        spec.affinity
            .node_selector
            .insert("disk".into(), "ssd".into());
        let node_affinity = NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "pool".into(),
                        operator: "In".into(),
                        values: Some(vec!["db".into()]),
                    }]),
                    match_fields: None,
                }],
            }),
            ..NodeAffinity::default()
        };
        spec.affinity.node_affinity = Some(node_affinity.clone());
        let toleration = Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        };
        spec.affinity.tolerations.push(toleration.clone());
        let own_selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "x".into())])),
            match_expressions: None,
        };
        spec.topology_spread_constraints = vec![
            TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "topology.kubernetes.io/zone".into(),
                when_unsatisfiable: "DoNotSchedule".into(),
                ..TopologySpreadConstraint::default()
            },
            TopologySpreadConstraint {
                max_skew: 2,
                topology_key: "kubernetes.io/hostname".into(),
                when_unsatisfiable: "ScheduleAnyway".into(),
                label_selector: Some(own_selector.clone()),
                ..TopologySpreadConstraint::default()
            },
        ];
        spec.priority_class_name = Some("database-critical".into());
        let placement = Placement::of(&spec);
        assert_eq!(
            affinity("orders", &placement).node_affinity,
            Some(node_affinity)
        );
        assert_eq!(
            node_selector(&placement),
            Some(BTreeMap::from([("disk".into(), "ssd".into())]))
        );
        assert_eq!(tolerations(&placement), Some(vec![toleration.clone()]));
        let spread = topology_spread("orders", &placement).unwrap_or_default();
        assert_eq!(spread.len(), 2);
        assert_eq!(
            spread[0]
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some(labels::any_instance_selector("orders")),
            "a constraint without a selector counts the Database's instances"
        );
        assert_eq!(spread[1].label_selector, Some(own_selector));
        assert_eq!(spread[1].max_skew, 2);

        let mut job = PodSpec::default();
        place_volume_job(&mut job, &placement);
        assert_eq!(job.tolerations, Some(vec![toleration]));
        assert_eq!(
            job.priority_class_name.as_deref(),
            Some("database-critical")
        );
        assert_eq!(job.affinity, None);
        assert_eq!(job.node_selector, None);
    }
}
