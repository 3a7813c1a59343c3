//! The published endpoints' planner: status rows, `Exposed`, what is
//! probed, the certificate names and the `<db>-app-external` actions.

use std::net::IpAddr;

use crate::api::expose::{ExposeTarget, ExposeType, service_name};
use crate::api::status::DatabasePhase as P;

use super::endpoints::*;
use super::tests::{async_spec, condition, healthy_three, status};
use super::{Action, Observed, READY, plan};

use ExposeTarget::{R, Ro, Rw};
use ExposeType::{LoadBalancer as Lb, NodePort as Np};

fn entry(target: ExposeTarget, type_: ExposeType) -> EntryObserved {
    EntryObserved {
        target,
        type_,
        hostname: None,
        allowed_source_ranges: match type_ {
            Lb => vec!["192.0.2.0/24".into()],
            Np => Vec::new(),
        },
        service: service_name("orders", target, type_),
        seen: Some(ServiceSeen::default()),
        probe: EndpointProbe::NotProbed,
    }
}

fn with_ingress(mut entry: EntryObserved, ip: &str) -> EntryObserved {
    entry.seen = Some(ServiceSeen {
        ingress: vec![ip.into()],
        node_port: Some(31111),
    });
    entry
}

fn with_node_port(mut entry: EntryObserved, port: i32) -> EntryObserved {
    entry.seen = Some(ServiceSeen {
        ingress: Vec::new(),
        node_port: Some(port),
    });
    entry
}

fn reached(mut entry: EntryObserved) -> EntryObserved {
    entry.probe = EndpointProbe::Reached;
    entry
}

fn failed(mut entry: EntryObserved, why: &str) -> EntryObserved {
    entry.probe = EndpointProbe::Failed(why.into());
    entry
}

/// A healthy primary and two replicas on nodes 10.0.0.1-3, publishing `entries`.
fn exposing(entries: Vec<EntryObserved>) -> Observed {
    let mut observed = healthy_three();
    for (serial, instance) in &mut observed.instances {
        if let Some(pod) = instance.pod.as_mut() {
            pod.host_ip = Some(format!("10.0.0.{serial}"));
        }
    }
    observed.published = Some(ExposureObserved {
        entries,
        operator_address: Some("198.18.0.7".into()),
        external_secret: ExternalSecret::Absent,
    });
    observed
}

fn decided(observed: &Observed) -> ExposurePlan {
    super::endpoints::plan(observed).expect("exposure observed")
}

#[test]
fn each_row_says_what_kubernetes_assigned_and_what_the_probe_found() {
    let mut missing_service = entry(R, Lb);
    missing_service.seen = None;
    let mut named = reached(with_ingress(entry(Rw, Lb), "192.0.2.64"));
    named.hostname = Some("orders.db.example.com".into());
    // (entry, addresses, port, reached, message)
    type Row = (
        EntryObserved,
        Vec<&'static str>,
        Option<i32>,
        bool,
        &'static str,
    );
    let table: Vec<Row> = vec![
        (named, vec!["192.0.2.64"], Some(5432), true, ""),
        (
            entry(Ro, Lb),
            vec![],
            Some(5432),
            false,
            "no address assigned yet: the Service orders-ro-lb waits for the cluster's load balancer",
        ),
        (
            missing_service,
            vec![],
            None,
            false,
            "the Service orders-r-lb does not exist yet",
        ),
        (
            reached(with_node_port(entry(Rw, Np), 30432)),
            vec!["10.0.0.1"],
            Some(30432),
            true,
            "",
        ),
        (
            failed(with_node_port(entry(Ro, Np), 30433), "connection refused"),
            vec!["10.0.0.2", "10.0.0.3"],
            Some(30433),
            false,
            "the TLS handshake through 10.0.0.2:30433 failed: connection refused",
        ),
        (
            entry(R, Np),
            vec![],
            None,
            false,
            "no node port assigned yet to the Service orders-r-nodeport",
        ),
    ];
    for (entry, addresses, port, reached, message) in table {
        let service = entry.service.clone();
        let rows = super::endpoints::endpoints(&exposing(vec![entry]));
        let row = &rows[0];
        assert_eq!(row.service, service);
        assert_eq!(row.addresses, addresses, "{service}");
        assert_eq!(row.port, port, "{service}");
        assert_eq!(row.reached, reached, "{service}");
        assert_eq!(
            row.message.as_deref().unwrap_or_default(),
            message,
            "{service}"
        );
    }
}

#[test]
fn a_node_port_publishes_the_nodes_that_run_the_target() {
    let mut observed = exposing(vec![
        with_node_port(entry(Rw, Np), 30432),
        with_node_port(entry(Ro, Np), 30433),
        with_node_port(entry(R, Np), 30434),
    ]);
    // Two replicas on one node: the address once. Not ready: not published.
    observed
        .instances
        .get_mut(&3)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .host_ip = Some("10.0.0.2".into());
    let rows = super::endpoints::endpoints(&observed);
    assert_eq!(rows[0].addresses, ["10.0.0.1"]);
    assert_eq!(rows[1].addresses, ["10.0.0.2"]);
    assert_eq!(rows[2].addresses, ["10.0.0.1", "10.0.0.2"]);
    observed
        .instances
        .get_mut(&1)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .ready = false;
    let rows = super::endpoints::endpoints(&observed);
    assert!(rows[0].addresses.is_empty());
    assert_eq!(
        rows[0].message.as_deref(),
        Some(
            "no address yet: no ready instance runs the primary (the node of one would be the address)"
        )
    );
}

#[test]
fn exposed_is_true_only_when_every_entry_was_reached() {
    let all = decided(&exposing(vec![
        reached(with_ingress(entry(Rw, Lb), "192.0.2.64")),
        reached(with_node_port(entry(Rw, Np), 30432)),
    ]));
    let exposed = all.condition.expect("Exposed");
    assert!(exposed.status);
    assert_eq!(exposed.reason, "Reached");
    assert_eq!(
        exposed.message,
        "PostgreSQL answered a verified TLS handshake through orders-rw-lb at 192.0.2.64:5432, \
         orders-rw-nodeport at 10.0.0.1:30432"
    );
    assert_eq!(all.requeue_seconds, None);

    let pending = decided(&exposing(vec![
        reached(with_ingress(entry(Rw, Lb), "192.0.2.64")),
        entry(Ro, Lb),
    ]));
    let exposed = pending.condition.expect("Exposed");
    assert!(!exposed.status);
    assert_eq!(exposed.reason, "AddressPending");
    assert_eq!(
        exposed.message,
        "spec.expose[1] (Service orders-ro-lb): no address assigned yet: the Service \
         orders-ro-lb waits for the cluster's load balancer"
    );

    let refused = decided(&exposing(vec![failed(
        with_ingress(entry(Rw, Lb), "192.0.2.64"),
        "192.0.2.64:5432: connect: Connection refused",
    )]));
    let exposed = refused.condition.expect("Exposed");
    assert_eq!(exposed.reason, "ProbeFailed");
    assert!(
        exposed.message.starts_with(
            "spec.expose[0] (Service orders-rw-lb): the TLS handshake through 192.0.2.64:5432 \
             failed: 192.0.2.64:5432: connect: Connection refused"
        ),
        "{}",
        exposed.message
    );
    assert_eq!(refused.requeue_seconds, Some(REQUEUE_UNREACHED_SECONDS));
}

#[test]
fn a_failed_probe_names_the_operator_address_outside_the_source_ranges() {
    let probe = |ranges: &[&str], operator: Option<&str>| {
        let mut lb = failed(with_ingress(entry(Rw, Lb), "192.0.2.64"), "timed out");
        lb.allowed_source_ranges = ranges.iter().map(|r| (*r).to_owned()).collect();
        let mut observed = exposing(vec![lb]);
        if let Some(exposure) = observed.published.as_mut() {
            exposure.operator_address = operator.map(str::to_owned);
        }
        decided(&observed).endpoints[0]
            .message
            .clone()
            .unwrap_or_default()
    };
    let outside = probe(&["192.0.2.0/24"], Some("198.18.0.7"));
    assert!(
        outside.ends_with(
            "; the probe comes from the operator's address 198.18.0.7, which is outside every \
             allowedSourceRanges entry: add it (or the pods' network) to see Exposed=True"
        ),
        "{outside}"
    );
    assert_eq!(
        probe(&["192.0.2.0/24", "198.18.0.0/16"], Some("198.18.0.7")),
        "the TLS handshake through 192.0.2.64:5432 failed: timed out"
    );
    assert!(probe(&["192.0.2.0/24"], None).ends_with(
        "the probe comes from the operator's address, which must be inside \
             allowedSourceRanges to pass"
    ));
}

#[test]
fn nothing_published_means_no_exposed_condition_and_no_rows() {
    let observed = exposing(Vec::new());
    let decided = decided(&observed);
    assert_eq!(decided.condition, None);
    assert!(decided.endpoints.is_empty());
    // Through the whole planner: the rows are cleared, Exposed is absent.
    let whole = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(whole.endpoints, Some(Vec::new()));
    assert!(whole.conditions.iter().all(|c| c.type_ != EXPOSED));
    // Not observed (tests of other concerns): the recorded rows are kept.
    let whole = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &healthy_three(),
    );
    assert_eq!(whole.endpoints, None);
}

#[test]
fn exposed_false_does_not_gate_ready() {
    let observed = exposing(vec![entry(Rw, Lb)]);
    let whole = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert!(condition(&whole, READY).status, "{:?}", whole.conditions);
    assert_eq!(whole.phase, P::Ready);
    let exposed = condition(&whole, EXPOSED);
    assert!(!exposed.status);
    assert_eq!(whole.endpoints.as_ref().map(Vec::len), Some(1));
}

#[test]
fn the_external_secret_follows_the_addresses_and_the_spec() {
    use ExternalSecret::*;
    let addressed = || vec![with_ingress(entry(Rw, Lb), "192.0.2.64")];
    // (entries, secret state, actions)
    let table: Vec<(Vec<EntryObserved>, ExternalSecret, Vec<Action>)> = vec![
        (addressed(), Absent, vec![Action::ApplyExternalSecret]),
        (addressed(), Differs, vec![Action::ApplyExternalSecret]),
        (addressed(), AsBuilt, vec![]),
        (addressed(), Unbuildable("no app Secret".into()), vec![]),
        // No address yet: nothing to write, and an existing one is kept.
        (vec![entry(Rw, Lb)], Absent, vec![]),
        (vec![entry(Rw, Lb)], Differs, vec![]),
        // Nothing published any more: deleted.
        (vec![], Differs, vec![Action::DeleteExternalSecret]),
        (vec![], AsBuilt, vec![Action::DeleteExternalSecret]),
        (vec![], Absent, vec![]),
    ];
    for (entries, state, actions) in table {
        let mut observed = exposing(entries);
        if let Some(exposure) = observed.published.as_mut() {
            exposure.external_secret = state.clone();
        }
        assert_eq!(decided(&observed).actions, actions, "{state:?}");
    }
}

#[test]
fn only_endpoints_with_an_address_and_a_ready_target_are_probed() {
    let mut named = with_ingress(entry(Ro, Lb), "192.0.2.65");
    named.hostname = Some("orders-ro.db.example.com".into());
    let mut observed = exposing(vec![
        with_ingress(entry(Rw, Lb), "192.0.2.64"),
        named,
        entry(R, Lb),
    ]);
    assert_eq!(
        probe_targets(&observed),
        vec![
            Some(ProbeTarget {
                address: "192.0.2.64".into(),
                port: 5432,
                name: "192.0.2.64".into()
            }),
            Some(ProbeTarget {
                address: "192.0.2.65".into(),
                port: 5432,
                name: "orders-ro.db.example.com".into()
            }),
            None,
        ]
    );
    // The primary's manager does not answer (cut off from the network, yet
    // still marked ready): its endpoint is not probed, so a failover pass
    // does not wait on it, and the row says why.
    let primary = observed
        .instances
        .get_mut(&1)
        .unwrap()
        .pod
        .as_mut()
        .unwrap();
    let manager = primary.manager.take();
    assert_eq!(probe_targets(&observed)[0], None);
    assert!(probe_targets(&observed)[1].is_some());
    assert_eq!(
        super::endpoints::endpoints(&observed)[0].message.as_deref(),
        Some("192.0.2.64:5432 not probed: the instance manager of the primary did not answer")
    );
    observed
        .instances
        .get_mut(&1)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .manager = manager;
    // The primary is down (a failover is under way): its endpoint is not
    // probed, so the pass does not wait on it, and the row says why.
    observed
        .instances
        .get_mut(&1)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .ready = false;
    assert_eq!(probe_targets(&observed)[0], None);
    assert_eq!(
        super::endpoints::endpoints(&observed)[0].message.as_deref(),
        Some("192.0.2.64:5432 not probed: no ready instance runs the primary")
    );
}

#[test]
fn certificates_name_hostnames_load_balancers_and_every_instance_node() {
    let mut named = with_ingress(entry(Rw, Lb), "2001:db8:0::1");
    named.hostname = Some("Orders.DB.example.com".into());
    let mut observed = exposing(vec![
        named,
        with_node_port(entry(Rw, Np), 30432),
        with_ingress(entry(Ro, Lb), "lb-1.elb.example.com"),
        entry(R, Lb),
    ]);
    // Not ready: a failover may make it primary, so its node is named too.
    observed
        .instances
        .get_mut(&3)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .ready = false;
    assert_eq!(
        certificate_names(&observed),
        [
            "orders.db.example.com",
            "2001:db8::1",
            "10.0.0.1",
            "10.0.0.2",
            "10.0.0.3",
            "lb-1.elb.example.com",
        ]
    );
    assert!(certificate_names(&healthy_three()).is_empty());
}

#[test]
fn source_ranges_hold_what_their_prefix_covers() {
    let table: &[(&str, &str, bool)] = &[
        ("192.0.2.0/24", "192.0.2.200", true),
        ("192.0.2.0/24", "192.0.3.1", false),
        ("0.0.0.0/0", "198.18.0.7", true),
        ("198.18.0.7/32", "198.18.0.7", true),
        ("198.18.0.7", "198.18.0.7", true),
        ("198.18.0.6/32", "198.18.0.7", false),
        ("10.0.0.0/8", "2001:db8::1", false),
        ("2001:db8::/32", "2001:db8::1", true),
        ("::/0", "2001:db8::1", true),
        ("2001:db9::/32", "2001:db8::1", false),
        ("192.0.2.0/33", "192.0.2.1", false),
        ("not a cidr", "192.0.2.1", false),
    ];
    for (range, ip, holds) in table {
        let ip: IpAddr = ip.parse().unwrap();
        assert_eq!(in_range(range, ip), *holds, "{range} holds {ip}");
    }
}
