//! No false alarm, one row per case: an instance starting for the first
//! time and a switchover are progress; an instance that served and stopped,
//! one whose pod failed, and one that never serves within its grace raise
//! `Degraded`.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::status::DatabasePhase as P;
use crate::api::status::InstanceRole::{Primary, Replica};
use crate::api::status::{DatabaseStatus, InstanceStatus};
use crate::api::v1::DatabaseSpec;

use super::action::Action;
use super::alarm::{STARTUP_GRACE_SECONDS, SWITCHOVER_GRACE_SECONDS};
use super::observed::{Instance, LeaseState, Observed, Pod, PodPhase, PvcState};
use super::plan::plan;
use super::tests::{async_spec, condition, manager, name, observed, routed, running, status};
use super::verdict::{DEGRADED, PROGRESSING};

/// The pass's clock: pods and conditions are dated against it.
fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn ago(seconds: i64) -> Timestamp {
    now() - SignedDuration::from_secs(seconds)
}

/// `instance` with a pod created `age` seconds ago and restarted `restarts` times.
fn aged(mut instance: Instance, age: i64, restarts: u32) -> Instance {
    if let Some(pod) = instance.pod.as_mut() {
        pod.created = Some(ago(age));
        pod.restarts = restarts;
    }
    instance
}

/// A primary whose manager answers ready, its pod `age` seconds old.
fn primary(age: i64) -> Instance {
    aged(running(Primary, Some(manager(Primary, true, 100))), age, 0)
}

/// A replica that streams, its pod `age` seconds old.
fn streaming(age: i64) -> Instance {
    aged(running(Replica, Some(manager(Replica, true, 90))), age, 0)
}

/// A replica whose manager answers, not ready nor streaming yet.
fn cloning(age: i64, restarts: u32) -> Instance {
    aged(
        running(Replica, Some(manager(Replica, false, 0))),
        age,
        restarts,
    )
}

/// A pod whose manager does not answer.
fn silent(role: crate::api::status::InstanceRole, age: i64, restarts: u32) -> Instance {
    aged(running(role, None), age, restarts)
}

fn at_now(mut observed: Observed) -> Observed {
    observed.now = now();
    routed(observed)
}

/// The previous status: `phase`, orders-1 recorded as primary, ready or not.
fn before(phase: P, primary_served: bool) -> Option<DatabaseStatus> {
    status(phase, Some(1)).map(|s| DatabaseStatus {
        instances: vec![InstanceStatus {
            name: name(1),
            role: Some(Primary),
            ready: primary_served,
            ..InstanceStatus::default()
        }],
        ..s
    })
}

fn with_condition(
    previous: Option<DatabaseStatus>,
    type_: &str,
    status: &str,
    since: Timestamp,
) -> Option<DatabaseStatus> {
    previous.map(|mut s| {
        s.conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: "Test".to_owned(),
            message: String::new(),
            last_transition_time: Time(since),
            observed_generation: None,
        });
        s
    })
}

/// A switchover to orders-2 under way since `since` (seconds ago).
fn switching_since(seconds: i64) -> Option<DatabaseStatus> {
    with_condition(
        before(P::SwitchingOver, true),
        PROGRESSING,
        "True",
        ago(seconds),
    )
}

fn to_second() -> DatabaseSpec {
    DatabaseSpec {
        primary: Some(name(2)),
        ..async_spec(3)
    }
}

fn leased(mut observed: Observed, holder: u32) -> Observed {
    observed.lease = LeaseState::Held {
        holder: name(holder),
        remaining: Duration::from_secs(4),
    };
    observed
}

struct Row {
    name: &'static str,
    spec: DatabaseSpec,
    previous: Option<DatabaseStatus>,
    observed: Observed,
    phase: P,
    degraded: Option<&'static str>,
}

fn rows() -> Vec<Row> {
    let grace = STARTUP_GRACE_SECONDS;
    vec![
        Row {
            name: "first primary's manager starting -> InitializingPrimary, no alarm",
            spec: async_spec(3),
            previous: status(P::InitializingPrimary, None),
            observed: at_now(observed(vec![(1, silent(Primary, 5, 0))])),
            phase: P::InitializingPrimary,
            degraded: None,
        },
        Row {
            name: "first primary served, then its manager stopped answering -> alarm",
            spec: async_spec(3),
            previous: before(P::CreatingReplicas, true),
            observed: at_now(observed(vec![
                (1, silent(Primary, 60, 0)),
                (2, cloning(5, 0)),
                (3, cloning(5, 0)),
            ])),
            phase: P::CreatingReplicas,
            degraded: Some("PrimaryUnreachable"),
        },
        Row {
            name: "first primary never answers within the grace -> alarm",
            spec: async_spec(3),
            previous: status(P::InitializingPrimary, None),
            observed: at_now(observed(vec![(1, silent(Primary, grace + 1, 0))])),
            phase: P::InitializingPrimary,
            degraded: Some("PrimaryUnreachable"),
        },
        Row {
            name: "first primary's container restarted -> alarm",
            spec: async_spec(3),
            previous: status(P::InitializingPrimary, None),
            observed: at_now(observed(vec![(1, silent(Primary, 30, 1))])),
            phase: P::InitializingPrimary,
            degraded: Some("PrimaryUnreachable"),
        },
        Row {
            name: "first primary's pod failed -> still InitializingPrimary, but an alarm",
            spec: async_spec(3),
            previous: status(P::InitializingPrimary, None),
            observed: at_now(observed(vec![(
                1,
                Instance {
                    pvc: Some(PvcState::Bound),
                    pod: Some(Pod {
                        phase: PodPhase::Failed,
                        role_label: Some(Primary),
                        created: Some(ago(30)),
                        ..Pod::default()
                    }),
                    ..Instance::default()
                },
            )])),
            phase: P::InitializingPrimary,
            degraded: Some("PrimaryDown"),
        },
        Row {
            name: "replicas cloning on the way to the first Ready -> CreatingReplicas, no alarm",
            spec: async_spec(3),
            previous: before(P::CreatingReplicas, true),
            observed: at_now(observed(vec![
                (1, primary(60)),
                (2, silent(Replica, 5, 0)),
                (3, cloning(5, 0)),
            ])),
            phase: P::CreatingReplicas,
            degraded: None,
        },
        Row {
            name: "replicas cloning after a routing pass showed Configuring -> still no alarm",
            spec: async_spec(3),
            previous: before(P::Configuring, true),
            observed: at_now(observed(vec![
                (1, primary(60)),
                (2, streaming(30)),
                (3, cloning(30, 0)),
            ])),
            phase: P::CreatingReplicas,
            degraded: None,
        },
        Row {
            name: "a new replica that never streams within the grace -> alarm",
            spec: async_spec(3),
            previous: before(P::CreatingReplicas, true),
            observed: at_now(observed(vec![
                (1, primary(grace + 60)),
                (2, streaming(grace + 1)),
                (3, cloning(grace + 1, 0)),
            ])),
            phase: P::Degraded,
            degraded: Some("ReplicaNotStreaming"),
        },
        Row {
            name: "a new replica whose container restarted -> alarm",
            spec: async_spec(3),
            previous: before(P::CreatingReplicas, true),
            observed: at_now(observed(vec![
                (1, primary(60)),
                (2, streaming(30)),
                (3, silent(Replica, 30, 2)),
            ])),
            phase: P::Degraded,
            degraded: Some("ReplicaNotStreaming"),
        },
        Row {
            name: "a replica that streamed (the Database was Ready) and stopped -> alarm",
            spec: async_spec(3),
            previous: before(P::Ready, true),
            observed: at_now(observed(vec![
                (1, primary(60)),
                (2, streaming(30)),
                (3, cloning(30, 0)),
            ])),
            phase: P::Degraded,
            degraded: Some("ReplicaNotStreaming"),
        },
        Row {
            name: "an alarm holds while a recreated replica clones",
            spec: async_spec(3),
            previous: with_condition(before(P::CreatingReplicas, true), DEGRADED, "True", ago(5)),
            observed: at_now(observed(vec![
                (1, primary(60)),
                (2, streaming(30)),
                (3, cloning(5, 0)),
            ])),
            phase: P::Degraded,
            degraded: Some("ReplicaNotStreaming"),
        },
        Row {
            name: "a switchover asked for -> SwitchingOver, no alarm",
            spec: to_second(),
            previous: before(P::Ready, true),
            observed: at_now(leased(
                observed(vec![
                    (1, primary(60)),
                    (2, streaming(60)),
                    (3, streaming(60)),
                ]),
                1,
            )),
            phase: P::SwitchingOver,
            degraded: None,
        },
        Row {
            name: "after the handover the old primary rejoins -> SwitchingOver, no alarm",
            spec: to_second(),
            previous: switching_since(10),
            observed: at_now(leased(
                observed(vec![
                    (1, cloning(60, 0)),
                    (2, primary(60)),
                    (3, streaming(60)),
                ]),
                2,
            )),
            phase: P::SwitchingOver,
            degraded: None,
        },
        Row {
            name: "after the handover the new primary is not ready yet -> SwitchingOver, no alarm",
            spec: to_second(),
            previous: switching_since(10),
            observed: at_now(leased(
                observed(vec![
                    (1, silent(Primary, 60, 0)),
                    (
                        2,
                        aged(running(Primary, Some(manager(Primary, false, 100))), 60, 0),
                    ),
                    (3, streaming(60)),
                ]),
                2,
            )),
            phase: P::SwitchingOver,
            degraded: None,
        },
        Row {
            name: "the old primary rejoining, recorded as a replica since -> still SwitchingOver",
            spec: to_second(),
            previous: switching_since(20).map(|s| DatabaseStatus {
                instances: vec![InstanceStatus {
                    name: name(1),
                    role: Some(Replica),
                    ..InstanceStatus::default()
                }],
                ..s
            }),
            observed: at_now(leased(
                observed(vec![
                    (1, cloning(60, 0)),
                    (2, primary(60)),
                    (3, streaming(60)),
                ]),
                2,
            )),
            phase: P::SwitchingOver,
            degraded: None,
        },
        Row {
            name: "the old primary still not streaming past the switchover's grace -> alarm",
            spec: to_second(),
            previous: switching_since(SWITCHOVER_GRACE_SECONDS + 1),
            observed: at_now(leased(
                observed(vec![
                    (1, cloning(600, 0)),
                    (2, primary(600)),
                    (3, streaming(600)),
                ]),
                2,
            )),
            phase: P::Degraded,
            degraded: Some("ReplicaNotStreaming"),
        },
        Row {
            name: "the switchover settled -> Ready",
            spec: to_second(),
            previous: switching_since(10),
            observed: at_now(leased(
                observed(vec![
                    (1, streaming(60)),
                    (2, primary(60)),
                    (3, streaming(60)),
                ]),
                2,
            )),
            phase: P::Ready,
            degraded: None,
        },
    ]
}

#[test]
fn progress_is_not_an_alarm_and_damage_is() {
    let mut failures = Vec::new();
    for row in rows() {
        let decided = plan(&row.spec, row.previous.as_ref(), &row.observed);
        let degraded = condition(&decided, DEGRADED);
        let got = degraded.status.then_some(degraded.reason);
        if decided.phase != row.phase || got != row.degraded {
            failures.push(format!(
                "{}: phase {:?}, Degraded {got:?} ({}); expected phase {:?}, Degraded {:?}",
                row.name, decided.phase, degraded.message, row.phase, row.degraded
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn a_switchover_asked_for_is_shown_and_acted_on() {
    let decided = plan(
        &to_second(),
        before(P::Ready, true).as_ref(),
        &at_now(leased(
            observed(vec![
                (1, primary(60)),
                (2, streaming(60)),
                (3, streaming(60)),
            ]),
            1,
        )),
    );
    assert!(
        decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::Switchover { to, .. } if *to == name(2))),
        "{:?}",
        decided.actions
    );
    let progressing = condition(&decided, PROGRESSING);
    assert!(progressing.status);
    assert_eq!(progressing.reason, "SwitchingOver");
}
