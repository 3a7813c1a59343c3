//! The Services of `spec.expose` as observed, reduced to what the lifecycle
//! decides on ([`ExposedService`]): whether each is as built, its
//! `loadBalancerClass`, whether it is going. Pure.
//!
//! "As built" is [`compare::as_built`] plus one more check: an annotation
//! the spec no longer gives is still on the Service until Tusk applies again
//! (server-side apply then removes what only `tusk` set), and comparing what
//! is built against what is observed cannot see an extra key. The Service's
//! `managedFields` can: a key Tusk's field manager applied that the builder
//! no longer makes is drift.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;

use crate::api::model::ValidatedDatabase;
use crate::controller::FIELD_MANAGER;
use crate::lifecycle::ExposedService;
use crate::resources::{self, compare, labels};

/// Every observed Service of `spec.expose` among `services` (the listing
/// keeps only this Database's).
pub(super) fn exposed(model: &ValidatedDatabase, services: &[Service]) -> Vec<ExposedService> {
    let built = resources::exposure_services(model);
    services
        .iter()
        .filter(|s| s.labels().contains_key(labels::EXPOSED))
        .map(|observed| {
            let name = observed.name_any();
            let as_built = built
                .iter()
                .find(|b| b.metadata.name.as_deref() == Some(name.as_str()))
                .is_some_and(|b| {
                    compare::as_built(b, observed) && stale_annotations(b, observed).is_empty()
                });
            ExposedService {
                load_balancer_class: observed
                    .spec
                    .as_ref()
                    .and_then(|s| s.load_balancer_class.clone()),
                terminating: observed.metadata.deletion_timestamp.is_some(),
                as_built,
                name,
            }
        })
        .collect()
}

/// Annotations Tusk applied to `observed` that `built` no longer has.
fn stale_annotations(built: &Service, observed: &Service) -> BTreeSet<String> {
    let wanted = built.metadata.annotations.clone().unwrap_or_default();
    applied_annotations(observed)
        .into_iter()
        .filter(|key| !wanted.contains_key(key))
        .collect()
}

/// The annotation keys `tusk` owns by server-side apply, from
/// `managedFields` (`{"f:metadata": {"f:annotations": {"f:<key>": {}}}}`).
fn applied_annotations(service: &Service) -> BTreeSet<String> {
    service
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.manager.as_deref() == Some(FIELD_MANAGER) && m.operation.as_deref() == Some("Apply")
        })
        .filter_map(|m| m.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:metadata")?.get("f:annotations")?.as_object())
        .flat_map(|keys| keys.keys())
        .filter_map(|k| k.strip_prefix("f:"))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
    use serde_json::json;

    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::expose::{ExposeSpec, ExposeTarget, ExposeType};
    use crate::api::model::Defaults;

    fn model(annotations: &[(&str, &str)], class: Option<&str>) -> ValidatedDatabase {
        let mut db = sample_database();
        db.spec.expose = vec![ExposeSpec {
            target: ExposeTarget::Rw,
            type_: ExposeType::LoadBalancer,
            allowed_source_ranges: vec!["192.0.2.0/24".into()],
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            hostname: None,
            load_balancer_class: class.map(str::to_owned),
            external_traffic_policy: None,
            node_port: None,
        }];
        crate::api::validate::validated(&db, &Defaults::default())
            .unwrap_or_else(|e| panic!("{e:?}"))
    }

    /// The Service as `model` builds it, as the API server keeps it after
    /// Tusk applied it: `tusk` owns the annotations it sent.
    fn applied(model: &ValidatedDatabase) -> Service {
        let mut service = resources::exposure_services(model).remove(0);
        let keys: serde_json::Map<String, serde_json::Value> = service
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| (format!("f:{k}"), json!({})))
            .collect();
        service.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(FIELD_MANAGER.into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(json!({"f:metadata": {"f:annotations": keys}}))),
            ..Default::default()
        }]);
        service
    }

    #[test]
    fn as_applied_is_as_built() {
        let model = model(&[("example.com/a", "1")], None);
        assert_eq!(
            exposed(&model, &[applied(&model)]),
            [ExposedService {
                name: "orders-rw-lb".into(),
                load_balancer_class: None,
                as_built: true,
                terminating: false,
            }]
        );
    }

    #[test]
    fn a_changed_field_is_drift() {
        let model_then = model(&[], None);
        let mut service = applied(&model_then);
        if let Some(spec) = service.spec.as_mut() {
            spec.load_balancer_source_ranges = Some(vec!["0.0.0.0/0".into()]);
        }
        assert!(!exposed(&model_then, &[service])[0].as_built);
    }

    /// Comparing what is built against what is observed cannot see a key
    /// that is no longer built; who applied it can.
    #[test]
    fn an_annotation_removed_from_the_spec_is_drift_and_another_manager_s_is_not() {
        let before = model(&[("example.com/a", "1"), ("example.com/b", "2")], None);
        let mut service = applied(&before);
        let after = model(&[("example.com/a", "1")], None);
        assert!(!exposed(&after, std::slice::from_ref(&service))[0].as_built);

        // Someone else's annotation (a cloud controller's) is theirs.
        service = applied(&after);
        service
            .metadata
            .annotations
            .get_or_insert_default()
            .insert("cloud.example.com/id".into(), "lb-7".into());
        assert!(exposed(&after, &[service])[0].as_built);
    }

    #[test]
    fn an_unlisted_service_is_not_as_built_and_a_deleted_one_is_going() {
        let listed = model(&[], None);
        let mut other = applied(&listed);
        other.metadata.name = Some("orders-rw-nodeport".into());
        other.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let seen = exposed(&listed, &[other]);
        assert!(!seen[0].as_built);
        assert!(seen[0].terminating);
    }

    #[test]
    fn the_class_is_reported_and_in_cluster_services_are_not_exposure() {
        let classy = model(&[], Some("example.com/vip"));
        let mut services = resources::services(&classy);
        services.push(applied(&classy));
        let seen = exposed(&classy, &services);
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].load_balancer_class.as_deref(),
            Some("example.com/vip")
        );
    }
}
