//! Instances the scheduler cannot place, through the whole planner: the
//! Ready condition names the instance and the field, `Progressing` says
//! Tusk waits for a node, and an instance that never served is not
//! `Degraded` however long it waits — while one that served still is.

use jiff::{SignedDuration, Timestamp};

use crate::api::status::DatabasePhase as P;
use crate::api::status::InstanceRole::{Primary, Replica};
use crate::api::v1::{DatabaseSpec, PodAntiAffinityType};

use super::alarm::STARTUP_GRACE_SECONDS;
use super::observed::{Instance, Observed, Pod, PodPhase, PvcState};
use super::plan::plan;
use super::scheduling::UNSCHEDULABLE;
use super::tests::{async_spec, condition, manager, observed, routed, running, status};
use super::verdict::{DEGRADED, PROGRESSING, READY};

const ANTI: &str = "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
const SELECTOR: &str =
    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.";

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A pod created `age` seconds ago that the scheduler cannot place
/// (`why`), or merely Pending when `why` is `None`.
fn pending(role: crate::api::status::InstanceRole, age: i64, why: Option<&str>) -> Instance {
    Instance {
        pvc: Some(PvcState::Pending),
        pod: Some(Pod {
            phase: PodPhase::Pending,
            role_label: Some(role),
            created: Some(now() - SignedDuration::from_secs(age)),
            unschedulable: why.map(str::to_owned),
            ..Pod::default()
        }),
        volumes: Vec::new(),
    }
}

fn at_now(mut observed: Observed) -> Observed {
    observed.now = now();
    routed(observed)
}

fn required(instances: i32) -> DatabaseSpec {
    let mut spec = async_spec(instances);
    spec.affinity.pod_anti_affinity = PodAntiAffinityType::Required;
    spec
}

fn primary_ready() -> Instance {
    running(Primary, Some(manager(Primary, true, 100)))
}

#[test]
fn a_replica_kept_off_the_only_node_is_named_with_the_field_and_is_not_degraded() {
    let late = STARTUP_GRACE_SECONDS + 60;
    let decided = plan(
        &required(2),
        status(P::CreatingReplicas, Some(1)).as_ref(),
        &at_now(observed(vec![
            (1, primary_ready()),
            (2, pending(Replica, late, Some(ANTI))),
        ])),
    );
    let ready = condition(&decided, READY);
    assert!(!ready.status);
    assert_eq!(ready.reason, UNSCHEDULABLE);
    assert!(
        ready.message.starts_with(
            "instance orders-2 cannot be scheduled: spec.affinity.podAntiAffinity is required on kubernetes.io/hostname"
        ),
        "{}",
        ready.message
    );
    assert!(ready.message.contains(ANTI), "{}", ready.message);
    let progressing = condition(&decided, PROGRESSING);
    assert!(progressing.status);
    assert_eq!(progressing.reason, UNSCHEDULABLE);
    assert!(
        !condition(&decided, DEGRADED).status,
        "it never served: waiting for a node is not a failure"
    );
    assert_ne!(decided.phase, P::Degraded);
}

#[test]
fn the_same_replica_merely_pending_past_its_grace_is_degraded() {
    // The contrast: without the scheduler's word, the grace rule holds.
    let late = STARTUP_GRACE_SECONDS + 60;
    let decided = plan(
        &required(2),
        status(P::CreatingReplicas, Some(1)).as_ref(),
        &at_now(observed(vec![
            (1, primary_ready()),
            (2, pending(Replica, late, None)),
        ])),
    );
    assert!(condition(&decided, DEGRADED).status);
    assert_ne!(condition(&decided, READY).reason, UNSCHEDULABLE);
}

#[test]
fn a_first_primary_no_node_selects_is_named() {
    let mut spec = async_spec(1);
    spec.affinity
        .node_selector
        .insert("example.com/pool".into(), "none".into());
    let decided = plan(
        &spec,
        status(P::InitializingPrimary, None).as_ref(),
        &at_now(observed(vec![(
            1,
            pending(Primary, STARTUP_GRACE_SECONDS + 60, Some(SELECTOR)),
        )])),
    );
    let ready = condition(&decided, READY);
    assert_eq!(ready.reason, UNSCHEDULABLE);
    assert!(
        ready.message.starts_with(
            "instance orders-1 cannot be scheduled: no node matches spec.affinity.nodeSelector"
        ),
        "{}",
        ready.message
    );
    assert!(!condition(&decided, DEGRADED).status);
}

#[test]
fn an_instance_that_served_and_cannot_come_back_is_still_degraded() {
    let decided = plan(
        &required(2),
        status(P::Ready, Some(1)).as_ref(),
        &at_now(observed(vec![
            (1, primary_ready()),
            (2, pending(Replica, 30, Some(ANTI))),
        ])),
    );
    assert!(condition(&decided, DEGRADED).status);
    assert_eq!(condition(&decided, READY).reason, UNSCHEDULABLE);
}
