use serde_json::{Value, json};

use super::*;
use crate::api::arbitrary::sample_database;
use crate::api::expose::{ExposeType, TrafficPolicy};
use crate::api::v1::Database;
use crate::resources::tests::model;

fn entry(target: ExposeTarget, type_: ExposeType) -> ExposeSpec {
    ExposeSpec {
        target,
        type_,
        allowed_source_ranges: match type_ {
            ExposeType::LoadBalancer => vec!["192.0.2.0/24".into()],
            ExposeType::NodePort => Vec::new(),
        },
        annotations: BTreeMap::new(),
        hostname: None,
        load_balancer_class: None,
        external_traffic_policy: None,
        node_port: None,
    }
}

fn exposing(entries: Vec<ExposeSpec>) -> Database {
    let mut db = sample_database();
    db.spec.expose = entries;
    db
}

fn built(entries: Vec<ExposeSpec>) -> Vec<Value> {
    exposure_services(&model(&exposing(entries)))
        .iter()
        .map(|s| serde_json::to_value(s).expect("a Service serialises"))
        .collect()
}

#[test]
fn no_entries_no_services() {
    assert!(exposure_services(&model(&sample_database())).is_empty());
}

/// Every field of a load balancer, as a whole object: what the API server
/// is asked to apply.
#[test]
fn a_load_balancer_with_every_field() {
    let mut lb = entry(ExposeTarget::Rw, ExposeType::LoadBalancer);
    lb.allowed_source_ranges = vec!["192.0.2.0/24".into(), "2001:db8::/32".into()];
    lb.annotations.insert(
        "service.beta.kubernetes.io/aws-load-balancer-scheme".into(),
        "internet-facing".into(),
    );
    lb.hostname = Some("orders.db.example.com".into());
    lb.load_balancer_class = Some("example.com/vip".into());
    lb.external_traffic_policy = Some(TrafficPolicy::Local);
    let services = built(vec![lb]);
    let owner = serde_json::to_value(crate::resources::owner_reference(&sample_database()))
        .expect("an owner reference");
    assert_eq!(
        services,
        [json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "orders-rw-lb",
                "namespace": "shop",
                "labels": {
                    "app.kubernetes.io/component": "database",
                    "app.kubernetes.io/instance": "orders",
                    "app.kubernetes.io/managed-by": "tusk",
                    "app.kubernetes.io/name": "postgresql",
                    "tusk.dev/database": "orders",
                    "tusk.dev/exposed": "rw",
                },
                "annotations": {
                    "external-dns.alpha.kubernetes.io/hostname": "orders.db.example.com",
                    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing",
                },
                "ownerReferences": [owner],
            },
            "spec": {
                "type": "LoadBalancer",
                "selector": labels::rw_selector("orders"),
                "ports": [{
                    "name": "postgresql",
                    "port": 5432,
                    "targetPort": "postgresql",
                    "protocol": "TCP",
                }],
                "publishNotReadyAddresses": false,
                "loadBalancerSourceRanges": ["192.0.2.0/24", "2001:db8::/32"],
                "loadBalancerClass": "example.com/vip",
                "externalTrafficPolicy": "Local",
            },
        })]
    );
}

#[test]
fn a_node_port_with_its_port_and_no_source_ranges() {
    let mut np = entry(ExposeTarget::Ro, ExposeType::NodePort);
    np.node_port = Some(30_432);
    let services = built(vec![np, entry(ExposeTarget::R, ExposeType::NodePort)]);
    assert_eq!(services[0]["metadata"]["name"], "orders-ro-nodeport");
    assert_eq!(services[0]["spec"]["type"], "NodePort");
    assert_eq!(services[0]["spec"]["ports"][0]["nodePort"], 30_432);
    assert_eq!(services[0]["spec"]["ports"][0]["port"], 5432);
    assert_eq!(services[0]["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(services[0]["spec"].get("loadBalancerSourceRanges"), None);
    assert_eq!(services[0]["spec"].get("loadBalancerClass"), None);
    assert_eq!(services[0]["metadata"].get("annotations"), None);
    assert_eq!(
        services[1]["spec"]["ports"][0].get("nodePort"),
        None,
        "unset, Kubernetes picks one (and server-side apply leaves it alone)"
    );
}

/// The same pods as the in-cluster Service of the target: `rw` follows the
/// primary label the operator moves.
#[test]
fn each_target_selects_like_its_in_cluster_service() {
    let model = model(&exposing(vec![
        entry(ExposeTarget::Rw, ExposeType::NodePort),
        entry(ExposeTarget::Ro, ExposeType::NodePort),
        entry(ExposeTarget::R, ExposeType::NodePort),
    ]));
    let selector = |s: &Service| s.spec.as_ref().and_then(|s| s.selector.clone());
    let in_cluster: Vec<_> = crate::resources::services(&model)
        .iter()
        .map(selector)
        .collect();
    let exposed: Vec<_> = exposure_services(&model).iter().map(selector).collect();
    assert_eq!(exposed, in_cluster, "rw, ro, r in both lists");
    let targets: Vec<_> = exposure_services(&model)
        .iter()
        .map(|s| s.metadata.labels.clone().unwrap_or_default()[labels::EXPOSED].clone())
        .collect();
    assert_eq!(targets, ["rw", "ro", "r"]);
}

#[test]
fn inherited_metadata_is_carried_and_the_entry_s_annotations_win() {
    let mut db = exposing(vec![entry(ExposeTarget::Rw, ExposeType::LoadBalancer)]);
    db.spec.expose[0]
        .annotations
        .insert("example.com/team".into(), "payments".into());
    db.spec
        .inherited_metadata
        .annotations
        .insert("example.com/team".into(), "platform".into());
    db.spec
        .inherited_metadata
        .annotations
        .insert("example.com/cost".into(), "42".into());
    db.spec
        .inherited_metadata
        .labels
        .insert("example.com/env".into(), "prod".into());
    let service = &exposure_services(&model(&db))[0];
    let annotations = service.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations["example.com/team"], "payments");
    assert_eq!(annotations["example.com/cost"], "42");
    let labels = service.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["example.com/env"], "prod");
    assert_eq!(labels[labels::EXPOSED], "rw");
}

/// Every JSON pointer at which two objects differ.
fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<_> = x.keys().chain(y.keys()).collect();
            for key in keys {
                differences(
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                    &format!("{at}/{key}"),
                    out,
                );
            }
        }
        _ if a != b => out.push(at.to_owned()),
        _ => {}
    }
}

/// A changed source range (or annotation, or policy) builds the same
/// Service, name and type, differing in that field alone: server-side apply
/// patches it in place and its address survives.
#[test]
fn a_changed_entry_is_the_same_service_with_one_field_changed() {
    let before = entry(ExposeTarget::Rw, ExposeType::LoadBalancer);
    let mut ranges = before.clone();
    ranges.allowed_source_ranges = vec!["198.51.100.0/24".into()];
    let mut policy = before.clone();
    policy.external_traffic_policy = Some(TrafficPolicy::Local);
    let mut annotated = before.clone();
    annotated
        .annotations
        .insert("example.com/idle-timeout".into(), "60".into());
    let old = &built(vec![before])[0];
    for (changed, field) in [
        (ranges, "/spec/loadBalancerSourceRanges"),
        (policy, "/spec/externalTrafficPolicy"),
        (annotated, "/metadata/annotations"),
    ] {
        let new = &built(vec![changed])[0];
        let mut diff = Vec::new();
        differences(old, new, "", &mut diff);
        assert_eq!(diff, [field]);
        assert_eq!(new["metadata"]["name"], "orders-rw-lb");
        assert_eq!(new["spec"]["type"], "LoadBalancer");
    }
}

#[test]
fn a_removed_entry_is_no_longer_built() {
    let both = vec![
        entry(ExposeTarget::Rw, ExposeType::LoadBalancer),
        entry(ExposeTarget::Rw, ExposeType::NodePort),
    ];
    let names = |entries: Vec<ExposeSpec>| -> Vec<String> {
        exposure_services(&model(&exposing(entries)))
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect()
    };
    assert_eq!(names(both.clone()), ["orders-rw-lb", "orders-rw-nodeport"]);
    assert_eq!(names(both[1..].to_vec()), ["orders-rw-nodeport"]);
}

/// As a kube-apiserver serves it (cluster IP, an allocated node port, its
/// defaults): as built, so a settled Database plans no re-apply.
#[test]
fn a_service_as_served_is_as_built() {
    let model = model(&exposing(vec![entry(
        ExposeTarget::Rw,
        ExposeType::LoadBalancer,
    )]));
    let built = &exposure_services(&model)[0];
    let mut served = serde_json::to_value(built).expect("a Service serialises");
    let spec = served["spec"].as_object_mut().expect("a spec");
    spec.remove("publishNotReadyAddresses");
    spec.insert("clusterIP".into(), "198.19.0.9".into());
    spec.insert("allocateLoadBalancerNodePorts".into(), true.into());
    spec.insert("internalTrafficPolicy".into(), "Cluster".into());
    served["spec"]["ports"][0]["nodePort"] = 31_777.into();
    served["status"] =
        json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.64", "ipMode": "VIP"}]}});
    let served: Service = serde_json::from_value(served).expect("still a Service");
    assert!(crate::resources::compare::as_built(built, &served));
}
