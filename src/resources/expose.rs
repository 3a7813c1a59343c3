//! The Services of `spec.expose`: one per entry, of type `LoadBalancer` or
//! `NodePort`, selecting the same pods as the in-cluster Service of its
//! target ([`super::services`]), so `rw` follows failovers and switchovers
//! with nothing more to do.
//!
//! An entry's Service is named after its target and type alone
//! ([`service_name`]): changing anything else of the entry (source ranges,
//! annotations, hostname, traffic policy) builds the same Service with other
//! field values, which server-side apply patches in place, keeping the
//! address. The controller applies them whatever changed (drift included) and
//! removes those of entries no longer listed (see `lifecycle::exposure`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};

use super::{inherited, labels, object_meta};
use crate::api::expose::{EXTERNAL_DNS_HOSTNAME, ExposeSpec, ExposeTarget, service_name};
use crate::api::model::ValidatedDatabase;

/// One Service per `spec.expose` entry, in the spec's order.
pub fn exposure_services(db: &ValidatedDatabase) -> Vec<Service> {
    db.expose.iter().map(|entry| service(db, entry)).collect()
}

/// The labels of the Service publishing `target`: the common ones and
/// [`labels::EXPOSED`].
pub fn exposure_labels(db: &str, target: ExposeTarget) -> BTreeMap<String, String> {
    let mut all = labels::common(db);
    all.insert(labels::EXPOSED.to_owned(), target.as_str().to_owned());
    all
}

fn service(db: &ValidatedDatabase, entry: &ExposeSpec) -> Service {
    let name = service_name(&db.name, entry.target, entry.type_);
    let mut metadata = object_meta(db, name, exposure_labels(&db.name, entry.target));
    // The entry's annotations over the inherited ones: they are the cloud
    // load balancer's settings for this Service in particular.
    let mut own = entry.annotations.clone();
    if let Some(hostname) = &entry.hostname {
        own.insert(EXTERNAL_DNS_HOSTNAME.to_owned(), hostname.clone());
    }
    if !own.is_empty() {
        inherited::annotate(&mut metadata.annotations, own);
    }
    let selector = match entry.target {
        ExposeTarget::Rw => labels::rw_selector(&db.name),
        ExposeTarget::Ro => labels::ro_selector(&db.name),
        ExposeTarget::R => labels::r_selector(&db.name),
    };
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(entry.type_.as_str().to_owned()),
            selector: Some(selector),
            ports: Some(vec![super::service::postgresql_port(entry.node_port)]),
            publish_not_ready_addresses: Some(false),
            load_balancer_source_ranges: (!entry.allowed_source_ranges.is_empty())
                .then(|| entry.allowed_source_ranges.clone()),
            load_balancer_class: entry.load_balancer_class.clone(),
            external_traffic_policy: Some(
                entry
                    .external_traffic_policy
                    .unwrap_or_default()
                    .as_str()
                    .to_owned(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
#[path = "expose_tests.rs"]
mod tests;
