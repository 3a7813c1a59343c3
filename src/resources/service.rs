//! The client Services of a database.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::container::POSTGRES_PORT;
use super::{labels, names, object_meta};
use crate::api::model::ValidatedDatabase;

/// The three ClusterIP Services of `db`, in this order: `<db>-rw` (the primary),
/// `<db>-ro` (the replicas) and `<db>-r` (any instance), each on port 5432.
///
/// They select on the `tusk.dev/role` label that the operator moves, so a
/// switchover redirects `-rw` without touching the Service. Not-ready pods are
/// never published: a primary that is fenced or still recovering must not take
/// connections.
pub fn services(db: &ValidatedDatabase) -> Vec<Service> {
    let db_name = db.name.clone();
    [
        (names::rw_service(&db_name), labels::rw_selector(&db_name)),
        (names::ro_service(&db_name), labels::ro_selector(&db_name)),
        (names::r_service(&db_name), labels::r_selector(&db_name)),
    ]
    .into_iter()
    .map(|(name, selector)| service(db, &db_name, name, selector))
    .collect()
}

fn service(
    db: &ValidatedDatabase,
    db_name: &str,
    name: String,
    selector: BTreeMap<String, String>,
) -> Service {
    Service {
        metadata: object_meta(db, name, labels::common(db_name)),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector),
            ports: Some(vec![postgresql_port(None)]),
            publish_not_ready_addresses: Some(false),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// PostgreSQL's port on a Service (`node_port` on a published one).
pub(super) fn postgresql_port(node_port: Option<i32>) -> ServicePort {
    ServicePort {
        name: Some("postgresql".to_owned()),
        port: POSTGRES_PORT,
        // The container port's name, so the Service follows the pod if the
        // port number ever changes.
        target_port: Some(IntOrString::String("postgresql".to_owned())),
        protocol: Some("TCP".to_owned()),
        node_port,
        ..ServicePort::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::status::InstanceRole;
    use crate::resources::tests::model;

    #[test]
    fn three_services_with_selectors() {
        let db = sample_database();
        let built = services(&model(&db));
        let summary: Vec<(String, BTreeMap<String, String>)> = built
            .iter()
            .map(|s| {
                (
                    s.metadata.name.clone().unwrap_or_default(),
                    s.spec
                        .as_ref()
                        .and_then(|s| s.selector.clone())
                        .unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "orders-rw".to_owned(),
                    labels::role_selector("orders", InstanceRole::Primary)
                ),
                (
                    "orders-ro".to_owned(),
                    labels::role_selector("orders", InstanceRole::Replica)
                ),
                (
                    "orders-r".to_owned(),
                    labels::any_instance_selector("orders")
                ),
            ]
        );
        assert_eq!(summary[0].1[labels::ROLE], "primary");
        assert_eq!(summary[1].1[labels::ROLE], "replica");
        assert!(!summary[2].1.contains_key(labels::ROLE));
    }

    #[test]
    fn cluster_ip_on_5432_ready_only() {
        let db = sample_database();
        for svc in services(&model(&db)) {
            assert_eq!(svc.metadata.namespace.as_deref(), Some("shop"));
            assert_eq!(
                svc.metadata.labels.clone().unwrap_or_default(),
                labels::common("orders")
            );
            assert_eq!(
                svc.metadata.owner_references,
                super::super::owner_reference(&db).map(|o| vec![o])
            );
            let spec = svc.spec.unwrap_or_default();
            assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
            assert_eq!(spec.publish_not_ready_addresses, Some(false));
            let ports = spec.ports.unwrap_or_default();
            assert_eq!(ports.len(), 1);
            assert_eq!(ports[0].port, 5432);
            assert_eq!(
                ports[0].target_port,
                Some(IntOrString::String("postgresql".into()))
            );
        }
    }

    /// As a kube-apiserver returns it: `omitempty` drops the `false`, and it
    /// fills in its defaults. Otherwise every pass re-applies the Services and
    /// a Ready Database reads as Progressing forever.
    #[test]
    fn a_service_as_served_is_as_built() {
        let db = sample_database();
        for built in services(&model(&db)) {
            let mut served = serde_json::to_value(&built).expect("a Service serialises");
            let spec = served["spec"].as_object_mut().expect("a spec");
            spec.remove("publishNotReadyAddresses");
            spec.insert("clusterIP".into(), "198.19.71.187".into());
            spec.insert("ipFamilies".into(), serde_json::json!(["IPv4"]));
            spec.insert("sessionAffinity".into(), "None".into());
            served["metadata"]["resourceVersion"] = "20228".into();
            let served: Service = serde_json::from_value(served).expect("still a Service");
            assert!(crate::resources::compare::as_built(&built, &served));
        }
    }
}
