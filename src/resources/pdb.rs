//! PodDisruptionBudgets: voluntary disruptions (node drains, cluster upgrades) take
//! the primary only after a switchover, and replicas one at a time.
//!
//! Budgets use integer `minAvailable` only: `maxUnavailable` and percentages make
//! the disruption controller look up the pods' controller's scale, and a Database
//! has no `/scale` subresource, so such a budget would block every eviction.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{labels, names, object_meta};
use crate::api::model::ValidatedDatabase;
use crate::api::status::InstanceRole;

/// The budgets of `db`:
///
/// - `<db>-primary` (always): `minAvailable: 1` over the pod labelled primary, so
///   a drain cannot evict it. The operator is expected to notice the cordoned
///   node and switch over; the old primary then carries the replica label and
///   falls under the replicas budget. With a single instance this blocks drains
///   until the user scales up or deletes the pod: the alternative is silent
///   downtime.
/// - `<db>-replicas` (only with more than two instances): `minAvailable` of
///   replicas − 1, so a drain evicts one replica at a time and waits until it is
///   back and ready before the next. With a single replica there is none: a budget
///   of 1 would block drains for good, and one of 0 protects nothing.
///
/// With `sync` replication and `minSyncReplicas` equal to the number of replicas,
/// evicting a replica makes commits wait until it is back. The budget still lets
/// the drain proceed: such a setting already has no tolerance for a single replica
/// failure, and refusing drains would block cluster maintenance indefinitely.
///
/// `unhealthyPodEvictionPolicy: AlwaysAllow` lets a drain evict a pod that is not
/// ready anyway (crash-looping, fenced), which the default policy would refuse
/// whenever the budget is already unmet.
pub fn pod_disruption_budgets(db: &ValidatedDatabase) -> Vec<PodDisruptionBudget> {
    let db_name = db.name.clone();
    let mut budgets = vec![budget(
        db,
        &db_name,
        names::primary_pdb(&db_name),
        InstanceRole::Primary,
        1,
    )];
    let replicas = db.instances - 1;
    if replicas >= 2 {
        budgets.push(budget(
            db,
            &db_name,
            names::replicas_pdb(&db_name),
            InstanceRole::Replica,
            replicas - 1,
        ));
    }
    budgets
}

fn budget(
    db: &ValidatedDatabase,
    db_name: &str,
    name: String,
    role: InstanceRole,
    min_available: i32,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: object_meta(db, name, labels::common(db_name)),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available)),
            selector: Some(LabelSelector {
                match_labels: Some(labels::role_selector(db_name, role)),
                match_expressions: None,
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::resources::tests::model;

    fn summary(instances: i32) -> Vec<(String, IntOrString, String)> {
        let mut db = sample_database();
        db.spec.instances = instances;
        pod_disruption_budgets(&model(&db))
            .into_iter()
            .map(|b| {
                let spec = b.spec.unwrap_or_default();
                let role = spec
                    .selector
                    .and_then(|s| s.match_labels)
                    .and_then(|l| l.get(labels::ROLE).cloned())
                    .unwrap_or_default();
                (
                    b.metadata.name.unwrap_or_default(),
                    spec.min_available.unwrap_or(IntOrString::Int(-1)),
                    role,
                )
            })
            .collect()
    }

    fn primary() -> (String, IntOrString, String) {
        (
            "orders-primary".into(),
            IntOrString::Int(1),
            "primary".into(),
        )
    }

    #[test]
    fn primary_only_up_to_two_instances() {
        assert_eq!(summary(1), [primary()]);
        assert_eq!(summary(2), [primary()]);
    }

    #[test]
    fn replicas_leave_one_at_a_time() {
        for (instances, min) in [(3, 1), (4, 2), (5, 3), (16, 14)] {
            assert_eq!(
                summary(instances),
                [
                    primary(),
                    (
                        "orders-replicas".into(),
                        IntOrString::Int(min),
                        "replica".into()
                    )
                ],
                "{instances} instances"
            );
        }
    }

    #[test]
    fn metadata_and_policy() {
        let db = sample_database();
        for b in pod_disruption_budgets(&model(&db)) {
            assert_eq!(b.metadata.namespace.as_deref(), Some("shop"));
            assert_eq!(
                b.metadata.labels.clone().unwrap_or_default(),
                labels::common("orders")
            );
            assert_eq!(
                b.metadata.owner_references,
                super::super::owner_reference(&db).map(|o| vec![o])
            );
            let spec = b.spec.unwrap_or_default();
            assert_eq!(spec.max_unavailable, None);
            assert_eq!(
                spec.unhealthy_pod_eviction_policy.as_deref(),
                Some("AlwaysAllow")
            );
            let selector = spec
                .selector
                .and_then(|s| s.match_labels)
                .unwrap_or_default();
            assert_eq!(selector[labels::DATABASE], "orders");
            assert_eq!(selector[labels::COMPONENT], "database");
        }
    }
}
