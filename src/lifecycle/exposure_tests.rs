//! One row per decision: the spec's entries, the Services observed, the
//! actions planned; and through the whole plan, that a settled exposure
//! keeps a Ready Database Ready with nothing to do.

use super::*;
use crate::api::expose::{ExposeSpec, ExposeTarget, ExposeType};
use crate::api::status::DatabasePhase;
use crate::api::v1::DatabaseSpec;
use crate::lifecycle::observed::{ExposedService, Observed};
use crate::lifecycle::tests::{async_spec, healthy_three, status};

fn lb(target: ExposeTarget, class: Option<&str>) -> ExposeSpec {
    ExposeSpec {
        target,
        type_: ExposeType::LoadBalancer,
        allowed_source_ranges: vec!["192.0.2.0/24".into()],
        annotations: Default::default(),
        hostname: None,
        load_balancer_class: class.map(str::to_owned),
        external_traffic_policy: None,
        node_port: None,
    }
}

fn node_port(target: ExposeTarget) -> ExposeSpec {
    ExposeSpec {
        type_: ExposeType::NodePort,
        allowed_source_ranges: Vec::new(),
        ..lb(target, None)
    }
}

fn seen(name: &str, class: Option<&str>, as_built: bool) -> ExposedService {
    ExposedService {
        name: name.into(),
        load_balancer_class: class.map(str::to_owned),
        as_built,
        terminating: false,
    }
}

fn spec_with(expose: Vec<ExposeSpec>) -> DatabaseSpec {
    DatabaseSpec {
        expose,
        ..async_spec(3)
    }
}

fn decide(expose: Vec<ExposeSpec>, services: Vec<ExposedService>) -> Vec<Action> {
    let spec = spec_with(expose);
    let observed = Observed {
        database: "orders".into(),
        exposure: services,
        ..Observed::default()
    };
    plan(&Context::new(&spec, None, &observed))
}

fn apply(names: &[&str]) -> Action {
    Action::ApplyExposure {
        services: names.iter().map(|n| (*n).to_owned()).collect(),
    }
}

fn delete(name: &str, reason: ExposureRemoval) -> Action {
    Action::DeleteExposure {
        name: name.into(),
        reason,
    }
}

#[test]
fn nothing_listed_nothing_observed_nothing_to_do() {
    assert_eq!(decide(Vec::new(), Vec::new()), []);
}

#[test]
fn missing_services_are_applied_in_the_spec_s_order() {
    assert_eq!(
        decide(
            vec![lb(ExposeTarget::Rw, None), node_port(ExposeTarget::Ro)],
            Vec::new()
        ),
        [apply(&["orders-rw-lb", "orders-ro-nodeport"])]
    );
}

#[test]
fn only_the_drifted_one_is_applied_and_an_as_built_one_is_left_alone() {
    let entries = || vec![lb(ExposeTarget::Rw, None), node_port(ExposeTarget::Ro)];
    assert_eq!(
        decide(
            entries(),
            vec![
                seen("orders-rw-lb", None, true),
                seen("orders-ro-nodeport", None, false)
            ]
        ),
        [apply(&["orders-ro-nodeport"])]
    );
    assert_eq!(
        decide(
            entries(),
            vec![
                seen("orders-rw-lb", None, true),
                seen("orders-ro-nodeport", None, true)
            ]
        ),
        []
    );
}

#[test]
fn a_service_whose_entry_is_gone_is_deleted() {
    assert_eq!(
        decide(
            vec![lb(ExposeTarget::Rw, None)],
            vec![
                seen("orders-rw-lb", None, true),
                seen("orders-rw-nodeport", None, false)
            ]
        ),
        [delete("orders-rw-nodeport", ExposureRemoval::Unlisted)]
    );
    assert_eq!(
        decide(Vec::new(), vec![seen("orders-r-lb", None, false)]),
        [delete("orders-r-lb", ExposureRemoval::Unlisted)],
        "the last entry removed"
    );
}

/// Kubernetes refuses a new `loadBalancerClass` in place: the Service is
/// deleted, not applied, and the next pass (it is gone) creates it.
#[test]
fn a_changed_class_deletes_the_service_and_the_next_pass_creates_it() {
    let entries = || vec![lb(ExposeTarget::Rw, Some("example.com/b"))];
    assert_eq!(
        decide(
            entries(),
            vec![seen("orders-rw-lb", Some("example.com/a"), false)]
        ),
        [delete("orders-rw-lb", ExposureRemoval::ClassChanged)]
    );
    assert_eq!(
        decide(entries(), vec![seen("orders-rw-lb", None, false)]),
        [delete("orders-rw-lb", ExposureRemoval::ClassChanged)],
        "from the default class too"
    );
    let mut going = seen("orders-rw-lb", Some("example.com/a"), false);
    going.terminating = true;
    assert_eq!(
        decide(entries(), vec![going]),
        [],
        "while it goes: not deleted again, not applied onto"
    );
    assert_eq!(decide(entries(), Vec::new()), [apply(&["orders-rw-lb"])]);
}

#[test]
fn a_class_the_cluster_filled_in_is_left_alone() {
    // No class in the spec; an admission webhook defaulted one: as built
    // otherwise, nothing to do (deleting would recreate it with the same
    // default, forever).
    assert_eq!(
        decide(
            vec![lb(ExposeTarget::Rw, None)],
            vec![seen("orders-rw-lb", Some("example.com/default"), true)]
        ),
        []
    );
}

#[test]
fn a_terminating_unlisted_service_is_not_deleted_again() {
    let mut going = seen("orders-rw-lb", None, false);
    going.terminating = true;
    assert_eq!(decide(Vec::new(), vec![going]), []);
}

/// Through the whole plan: a Ready Database whose published Services are as
/// built stays Ready with no action; a drifted one is applied and the
/// Database says it is progressing while that happens.
#[test]
fn a_settled_exposure_keeps_a_ready_database_ready() {
    let spec = spec_with(vec![lb(ExposeTarget::Rw, None)]);
    let previous = status(DatabasePhase::Ready, Some(1));
    let mut observed = healthy_three();
    observed.exposure = vec![seen("orders-rw-lb", None, true)];
    let settled = crate::lifecycle::plan(&spec, previous.as_ref(), &observed);
    assert_eq!(settled.actions, []);
    assert_eq!(settled.phase, DatabasePhase::Ready);
    observed.exposure = vec![seen("orders-rw-lb", None, false)];
    let drifted = crate::lifecycle::plan(&spec, previous.as_ref(), &observed);
    assert_eq!(drifted.actions, [apply(&["orders-rw-lb"])]);
}
