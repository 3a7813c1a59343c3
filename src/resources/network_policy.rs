//! The NetworkPolicies of a drill: the partition that cuts one instance from
//! everything (`partition-primary`), and the canary that proves the cluster
//! enforces NetworkPolicy before a partition is trusted to cut anything
//! (a cluster without an implementation accepts policies and ignores them,
//! which would make a partition drill measure nothing). Both are owned by the
//! Drill, so deleting it removes them even if Tusk never undid them.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::{Resource, ResourceExt};

use crate::api::v1::Drill;

use super::labels;
use super::probe::DRILL_LABEL;

/// What a drill's NetworkPolicy is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrillPolicy {
    /// Every packet in and out of one instance's pod dropped.
    Partition,
    /// Every packet into the drill's probe pod dropped: the probe stops
    /// answering its report where policies are enforced.
    Canary,
}

impl DrillPolicy {
    fn suffix(self) -> &'static str {
        match self {
            DrillPolicy::Partition => "partition",
            DrillPolicy::Canary => "canary",
        }
    }
}

/// The name of `drill`'s policy of `kind`.
pub fn drill_policy_name(drill: &str, kind: DrillPolicy) -> String {
    let suffix = kind.suffix();
    let name = format!("{drill}-{suffix}");
    if name.len() <= 253 {
        return name;
    }
    format!("{}-{suffix}", &drill[..252 - suffix.len()])
}

/// The partition of `instance` (a pod of the drill's Database): no ingress,
/// no egress, so it reaches neither its peers, nor the API server, nor its
/// clients, and none reach it. `None` when the Drill was never stored.
pub fn partition_policy(drill: &Drill, instance: &str) -> Option<NetworkPolicy> {
    let selector = BTreeMap::from([
        (labels::DATABASE.to_owned(), drill.spec.database.clone()),
        (labels::TUSK_INSTANCE.to_owned(), instance.to_owned()),
    ]);
    policy(
        drill,
        DrillPolicy::Partition,
        selector,
        &["Ingress", "Egress"],
    )
}

/// The canary: no ingress to the drill's probe pod. `None` when the Drill
/// was never stored.
pub fn canary_policy(drill: &Drill) -> Option<NetworkPolicy> {
    let selector = BTreeMap::from([(DRILL_LABEL.to_owned(), drill.name_any())]);
    policy(drill, DrillPolicy::Canary, selector, &["Ingress"])
}

fn policy(
    drill: &Drill,
    kind: DrillPolicy,
    selector: BTreeMap<String, String>,
    types: &[&str],
) -> Option<NetworkPolicy> {
    let owner = drill.controller_owner_ref(&())?;
    Some(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(drill_policy_name(&drill.name_any(), kind)),
            namespace: drill.namespace(),
            labels: Some(BTreeMap::from([
                (
                    labels::MANAGED_BY.to_owned(),
                    labels::MANAGED_BY_VALUE.to_owned(),
                ),
                (DRILL_LABEL.to_owned(), drill.name_any()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            }),
            policy_types: Some(types.iter().map(|t| (*t).to_owned()).collect()),
            // No rules: nothing allowed in the directions above.
            ingress: None,
            egress: None,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1::Scenario;

    fn drill() -> Drill {
        crate::api::arbitrary::stored_drill("orders-cut", Scenario::PartitionPrimary)
    }

    #[test]
    fn the_partition_denies_everything_in_and_out_of_that_instance_only() {
        let policy = partition_policy(&drill(), "orders-2").unwrap();
        assert_eq!(
            policy.metadata.name.as_deref(),
            Some("orders-cut-partition")
        );
        assert_eq!(policy.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            policy.metadata.owner_references.unwrap()[0].uid,
            "u-1".to_owned()
        );
        let spec = policy.spec.unwrap();
        let selector = spec.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(
            selector.get(labels::TUSK_INSTANCE).map(String::as_str),
            Some("orders-2")
        );
        assert_eq!(
            selector.get(labels::DATABASE).map(String::as_str),
            Some("orders")
        );
        assert_eq!(spec.policy_types.unwrap(), ["Ingress", "Egress"]);
        assert!(spec.ingress.is_none() && spec.egress.is_none());
    }

    #[test]
    fn the_canary_denies_ingress_to_the_probe_only() {
        let policy = canary_policy(&drill()).unwrap();
        assert_eq!(policy.metadata.name.as_deref(), Some("orders-cut-canary"));
        let spec = policy.spec.unwrap();
        let selector = spec.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(
            selector,
            BTreeMap::from([(DRILL_LABEL.to_owned(), "orders-cut".to_owned())])
        );
        assert_eq!(spec.policy_types.unwrap(), ["Ingress"]);
    }

    #[test]
    fn an_unstored_drill_gets_no_policy() {
        let mut unstored = drill();
        unstored.metadata.uid = None;
        assert!(partition_policy(&unstored, "orders-2").is_none());
        assert!(canary_policy(&unstored).is_none());
    }
}
