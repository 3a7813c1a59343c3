//! One row per transition: inputs, the phase expected, the exact actions.

use std::collections::BTreeMap;

use super::*;
use crate::api::status::{DatabasePhase, DatabaseStatus, InstanceRole};
use crate::api::v1::{DatabaseSpec, ReplicationMode, ReplicationSpec, StorageSpec};
use crate::lifecycle::verdict::{PROGRESSING, READY};
use crate::postgres::params::Change;

use DatabasePhase as P;
use InstanceRole::{Primary, Replica};

pub(super) fn spec(instances: i32, mode: ReplicationMode, min_sync: i32) -> DatabaseSpec {
    DatabaseSpec {
        version: "17".into(),
        image: None,
        instances,
        storage: StorageSpec {
            size: "1Gi".into(),
            storage_class_name: None,
            auto_grow: None,
        },
        wal_storage: None,
        replication: ReplicationSpec {
            mode,
            min_sync_replicas: min_sync,
        },
        postgresql: Default::default(),
        bootstrap: None,
        backup: None,
        failover: Default::default(),
        primary: None,
        migrations: None,
        upgrade: Default::default(),
        affinity: Default::default(),
        topology_spread_constraints: Vec::new(),
        priority_class_name: None,
        inherited_metadata: Default::default(),
        resources: None,
        tls: Default::default(),
        expose: Vec::new(),
    }
}

pub(super) fn async_spec(instances: i32) -> DatabaseSpec {
    spec(instances, ReplicationMode::Async, 1)
}

pub(super) fn status(phase: DatabasePhase, primary: Option<u32>) -> Option<DatabaseStatus> {
    Some(DatabaseStatus {
        phase: Some(phase),
        current_primary: primary.map(|s| format!("orders-{s}")),
        ..Default::default()
    })
}

pub(super) fn manager(role: InstanceRole, ready: bool, lsn: u64) -> ManagerStatus {
    ManagerStatus {
        role,
        ready,
        timeline: 1,
        received_lsn: lsn,
        replayed_lsn: lsn,
        streaming: role == Replica && ready,
        pending_restart: false,
        server_version: None,
    }
}

pub(super) fn running(role: InstanceRole, manager: Option<ManagerStatus>) -> Instance {
    Instance {
        pvc: Some(PvcState::Bound),
        pod: Some(Pod {
            phase: PodPhase::Running,
            role_label: Some(role),
            ready: manager.is_some_and(|m| m.ready),
            manager,
            ..Pod::default()
        }),
        ..Instance::default()
    }
}

pub(super) fn primary(ready: bool) -> Instance {
    running(Primary, Some(manager(Primary, ready, 100)))
}

pub(super) fn replica(ready: bool) -> Instance {
    running(Replica, Some(manager(Replica, ready, 90)))
}

/// A primary's volume whose pod is gone (force-deleted, say).
pub(super) fn survivor_for_failover() -> Instance {
    survivor()
}

fn survivor() -> Instance {
    Instance {
        pvc: Some(PvcState::Bound),
        pod: None,
        ..Instance::default()
    }
}

fn unknown(role: InstanceRole) -> Instance {
    running(role, None)
}

pub(super) fn observed(instances: Vec<(u32, Instance)>) -> Observed {
    Observed {
        database: "orders".into(),
        secrets: true,
        services: true,
        pod_disruption_budgets: true,
        lease_access: true,
        instances: instances.into_iter().collect::<BTreeMap<_, _>>(),
        ..Observed::default()
    }
}

/// The Lease read and released: the old primary stopped on purpose.
fn lease_read(mut observed: Observed) -> Observed {
    observed.lease = LeaseState::Released;
    observed
}

/// The Services as the endpoint controller would have them: `-rw` to the
/// ready primary, `-ro` to the ready replicas (the kubelet agreeing with the
/// managers).
pub(super) fn routed(mut observed: Observed) -> Observed {
    let ready = |role| -> Vec<String> {
        observed
            .instances
            .iter()
            .filter(|(_, i)| {
                i.pod.as_ref().is_some_and(|p| p.ready)
                    && i.status().is_some_and(|s| s.role == role && s.ready)
            })
            .map(|(serial, _)| observed.name(*serial))
            .collect()
    };
    observed.routing = Routing {
        rw: ready(Primary),
        ro: ready(Replica),
    };
    observed
}

pub(super) fn name(serial: u32) -> String {
    format!("orders-{serial}")
}

fn clone(serial: u32) -> Action {
    Action::CreatePod {
        serial,
        bootstrap: Bootstrap::Clone,
        role: Replica,
        image: String::new(),
    }
}

fn delete_pod(serial: u32, reason: DeleteReason) -> Action {
    Action::DeletePod {
        name: name(serial),
        reason,
    }
}

fn delete_pvc(serial: u32) -> Action {
    Action::DeletePvc { name: name(serial) }
}

struct Row {
    name: &'static str,
    spec: DatabaseSpec,
    previous: Option<DatabaseStatus>,
    observed: Observed,
    phase: DatabasePhase,
    actions: Vec<Action>,
    requeue: Option<u64>,
}

fn rows() -> Vec<Row> {
    let soon = Some(REQUEUE_SOON_SECONDS);
    let steady = Some(REQUEUE_STEADY_SECONDS);
    let sync2 = spec(3, ReplicationMode::Sync, 1);
    vec![
        Row {
            name: "empty -> Provisioning: secrets, services, first PVC",
            spec: async_spec(3),
            previous: None,
            observed: Observed {
                database: "orders".into(),
                ..Observed::default()
            },
            phase: P::Provisioning,
            actions: vec![
                Action::EnsureSecrets,
                Action::EnsureServices,
                Action::EnsureLeaseAccess,
                Action::CreatePvc { serial: 1 },
            ],
            requeue: soon,
        },
        Row {
            name: "Pending -> Provisioning",
            spec: async_spec(1),
            previous: status(P::Pending, None),
            observed: observed(vec![]),
            phase: P::Provisioning,
            actions: vec![Action::CreatePvc { serial: 1 }],
            requeue: soon,
        },
        Row {
            name: "PVC bound, no pod -> InitializingPrimary with initdb",
            spec: async_spec(3),
            previous: status(P::Provisioning, None),
            observed: observed(vec![(1, survivor())]),
            phase: P::InitializingPrimary,
            actions: vec![Action::CreatePod {
                serial: 1,
                bootstrap: Bootstrap::Initdb,
                role: Primary,
                image: String::new(),
            }],
            requeue: soon,
        },
        Row {
            name: "PVC still pending (WaitForFirstConsumer) -> the pod is created anyway",
            spec: async_spec(1),
            previous: status(P::Provisioning, None),
            observed: observed(vec![(
                1,
                Instance {
                    pvc: Some(PvcState::Pending),
                    pod: None,
                    ..Instance::default()
                },
            )]),
            phase: P::InitializingPrimary,
            actions: vec![Action::CreatePod {
                serial: 1,
                bootstrap: Bootstrap::Initdb,
                role: Primary,
                image: String::new(),
            }],
            requeue: soon,
        },
        Row {
            name: "first pod starting, manager silent -> wait in InitializingPrimary",
            spec: async_spec(3),
            previous: status(P::InitializingPrimary, None),
            observed: observed(vec![(1, unknown(Primary))]),
            phase: P::InitializingPrimary,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "first pod failed during initdb -> recreated",
            spec: async_spec(3),
            previous: status(P::InitializingPrimary, None),
            observed: observed(vec![(
                1,
                Instance {
                    pvc: Some(PvcState::Bound),
                    pod: Some(Pod {
                        phase: PodPhase::Failed,
                        role_label: Some(Primary),
                        manager: None,
                        ..Pod::default()
                    }),
                    ..Instance::default()
                },
            )]),
            phase: P::InitializingPrimary,
            actions: vec![delete_pod(1, DeleteReason::PodFailed)],
            requeue: soon,
        },
        Row {
            name: "primary answers but not ready -> still InitializingPrimary",
            spec: async_spec(3),
            previous: status(P::InitializingPrimary, None),
            observed: observed(vec![(1, primary(false))]),
            phase: P::InitializingPrimary,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "primary ready, 2 replicas missing -> CreatingReplicas, all at once",
            spec: async_spec(3),
            previous: status(P::InitializingPrimary, None),
            observed: Observed {
                pod_disruption_budgets: false,
                ..observed(vec![(1, primary(true))])
            },
            phase: P::CreatingReplicas,
            actions: vec![
                Action::EnsurePodDisruptionBudgets,
                Action::CreatePvc { serial: 2 },
                Action::CreatePvc { serial: 3 },
                clone(2),
                clone(3),
            ],
            requeue: soon,
        },
        Row {
            name: "replicas cloning -> CreatingReplicas, nothing to do",
            spec: async_spec(3),
            previous: status(P::CreatingReplicas, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, unknown(Replica)),
                (3, replica(false)),
            ]),
            phase: P::CreatingReplicas,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "single instance, primary ready -> Ready",
            spec: async_spec(1),
            previous: status(P::InitializingPrimary, None),
            observed: observed(vec![(1, primary(true))]),
            phase: P::Ready,
            actions: vec![],
            requeue: steady,
        },
        Row {
            name: "all ready -> Ready, no actions",
            spec: async_spec(3),
            previous: status(P::CreatingReplicas, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, replica(true)),
                (3, replica(true)),
            ]),
            phase: P::Ready,
            actions: vec![],
            requeue: steady,
        },
        Row {
            name: "all ready, sync mode, standby list differs -> Configuring + ConfigureSync",
            spec: sync2.clone(),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, replica(true)),
                (3, replica(true)),
            ]),
            phase: P::Configuring,
            actions: vec![Action::ConfigureSync {
                primary: name(1),
                standbys: vec![name(2), name(3)],
                min: 1,
            }],
            requeue: soon,
        },
        Row {
            name: "all ready, sync mode, standby list matches -> Ready, nothing",
            spec: sync2,
            previous: status(P::Ready, Some(1)),
            observed: Observed {
                sync: SyncStandbys {
                    standbys: vec![name(2), name(3)],
                    min: 1,
                },
                ..observed(vec![
                    (1, primary(true)),
                    (2, replica(true)),
                    (3, replica(true)),
                ])
            },
            phase: P::Ready,
            actions: vec![],
            requeue: steady,
        },
        Row {
            name: "async mode with a leftover sync list -> turned off",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: Observed {
                sync: SyncStandbys {
                    standbys: vec![name(2)],
                    min: 1,
                },
                ..observed(vec![(1, primary(true)), (2, replica(true))])
            },
            phase: P::Configuring,
            actions: vec![Action::ConfigureSync {
                primary: name(1),
                standbys: vec![],
                min: 0,
            }],
            requeue: soon,
        },
        Row {
            name: "instances 3 -> 1 -> Scaling, serial 3 then 2 removed with their PVCs",
            spec: async_spec(1),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, replica(true)),
                (3, replica(true)),
            ]),
            phase: P::Scaling,
            actions: vec![
                Action::EnsurePodDisruptionBudgets,
                delete_pod(3, DeleteReason::ScaleDown),
                delete_pvc(3),
                delete_pod(2, DeleteReason::ScaleDown),
                delete_pvc(2),
            ],
            requeue: soon,
        },
        Row {
            name: "scale down never removes the primary, even with the highest serial",
            spec: async_spec(2),
            previous: status(P::Ready, Some(3)),
            observed: observed(vec![
                (1, replica(true)),
                (2, replica(true)),
                (3, primary(true)),
            ]),
            phase: P::Scaling,
            actions: vec![
                Action::EnsurePodDisruptionBudgets,
                delete_pod(2, DeleteReason::ScaleDown),
                delete_pvc(2),
            ],
            requeue: soon,
        },
        Row {
            name: "scale down in sync mode drops the standby from the quorum first",
            spec: spec(2, ReplicationMode::Sync, 1),
            previous: status(P::Ready, Some(1)),
            observed: Observed {
                sync: SyncStandbys {
                    standbys: vec![name(2), name(3)],
                    min: 1,
                },
                ..observed(vec![
                    (1, primary(true)),
                    (2, replica(true)),
                    (3, replica(true)),
                ])
            },
            phase: P::Scaling,
            actions: vec![
                Action::EnsurePodDisruptionBudgets,
                Action::ConfigureSync {
                    primary: name(1),
                    standbys: vec![name(2)],
                    min: 1,
                },
                delete_pod(3, DeleteReason::ScaleDown),
                delete_pvc(3),
            ],
            requeue: soon,
        },
        Row {
            name: "scale down waits for an Unknown highest-serial replica",
            spec: async_spec(1),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, replica(true)),
                (3, unknown(Replica)),
            ]),
            phase: P::Scaling,
            actions: vec![Action::EnsurePodDisruptionBudgets],
            requeue: soon,
        },
        Row {
            name: "scale down waits for a replica ahead of the primary",
            spec: async_spec(1),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, running(Replica, Some(manager(Replica, true, 500)))),
            ]),
            phase: P::Scaling,
            actions: vec![Action::EnsurePodDisruptionBudgets],
            requeue: soon,
        },
        Row {
            name: "instances 1 -> 3 from Ready -> Scaling, next serials at once",
            spec: async_spec(3),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![(1, primary(true))]),
            phase: P::Scaling,
            actions: vec![
                Action::EnsurePodDisruptionBudgets,
                Action::CreatePvc { serial: 2 },
                Action::CreatePvc { serial: 3 },
                clone(2),
                clone(3),
            ],
            requeue: soon,
        },
        Row {
            name: "scale up continues after the highest serial, survivors included",
            spec: async_spec(4),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, replica(true)),
                (5, replica(true)),
            ]),
            phase: P::Scaling,
            actions: vec![
                Action::EnsurePodDisruptionBudgets,
                Action::CreatePvc { serial: 6 },
                clone(6),
            ],
            requeue: soon,
        },
        Row {
            name: "scaled replicas cloning -> Scaling until ready",
            spec: async_spec(2),
            previous: status(P::Scaling, Some(1)),
            observed: observed(vec![(1, primary(true)), (2, unknown(Replica))]),
            phase: P::Scaling,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "replica pod gone, PVC present -> re-attached (Clone), Degraded",
            spec: async_spec(3),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, replica(true)),
                (3, survivor()),
            ]),
            phase: P::Degraded,
            actions: vec![clone(3)],
            requeue: soon,
        },
        Row {
            name: "re-attached replica not streaming yet -> still Degraded",
            spec: async_spec(3),
            previous: status(P::Degraded, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, replica(true)),
                (3, replica(false)),
            ]),
            phase: P::Degraded,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "Degraded -> Ready once every replica streams",
            spec: async_spec(3),
            previous: status(P::Degraded, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (2, replica(true)),
                (3, replica(true)),
            ]),
            phase: P::Ready,
            actions: vec![],
            requeue: steady,
        },
        Row {
            name: "replica pod failed -> deleted for recreation, Degraded",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, primary(true)),
                (
                    2,
                    Instance {
                        pvc: Some(PvcState::Bound),
                        pod: Some(Pod {
                            phase: PodPhase::Failed,
                            role_label: Some(Replica),
                            manager: None,
                            ..Pod::default()
                        }),
                        ..Instance::default()
                    },
                ),
            ]),
            phase: P::Degraded,
            actions: vec![delete_pod(2, DeleteReason::PodFailed)],
            requeue: soon,
        },
        Row {
            name: "replica Unknown -> Degraded, nothing done to it",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![(1, primary(true)), (2, unknown(Replica))]),
            phase: P::Degraded,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "primary Unknown -> no destructive action, requeue soon, phase kept",
            spec: async_spec(1),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, unknown(Primary)),
                (2, replica(true)),
                (3, replica(true)),
            ]),
            phase: P::Ready,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "primary pod gone, PVC present -> recreated on its data (Initdb keeps it)",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: lease_read(observed(vec![(1, survivor()), (2, replica(false))])),
            phase: P::Degraded,
            actions: vec![Action::CreatePod {
                serial: 1,
                bootstrap: Bootstrap::Initdb,
                role: Primary,
                image: String::new(),
            }],
            // Leader selection runs: a failover may follow any moment.
            requeue: Some(super::plan::REQUEUE_FAILOVER_SECONDS),
        },
        Row {
            name: "primary pod gone but another pod may be primary -> no second primary",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: lease_read(observed(vec![(1, survivor()), (2, unknown(Primary))])),
            phase: P::Degraded,
            actions: vec![],
            // Leader selection runs: a failover may follow any moment.
            requeue: Some(super::plan::REQUEUE_FAILOVER_SECONDS),
        },
        Row {
            name: "primary volume gone, replicas answer -> FailingOver (promotion is failover's)",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![(2, replica(false))]),
            phase: P::FailingOver,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "primary volume gone, nothing else -> Failed",
            spec: async_spec(1),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![]),
            phase: P::Failed,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "two primaries -> Failed, hands off",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![(1, primary(true)), (2, primary(true))]),
            phase: P::Failed,
            actions: vec![],
            requeue: soon,
        },
        Row {
            name: "role labels follow the managers",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (1, running(Replica, Some(manager(Primary, true, 100)))),
                (2, running(Primary, Some(manager(Replica, true, 90)))),
            ]),
            phase: P::Configuring,
            actions: vec![
                Action::LabelRole {
                    name: name(1),
                    role: Primary,
                },
                Action::LabelRole {
                    name: name(2),
                    role: Replica,
                },
            ],
            requeue: soon,
        },
        Row {
            name: "reloadable parameter change -> Reload every instance",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: Observed {
                parameter_change: Change::Reload,
                ..observed(vec![(1, primary(true)), (2, replica(true))])
            },
            phase: P::Configuring,
            actions: vec![
                Action::Reload { name: name(1) },
                Action::Reload { name: name(2) },
            ],
            requeue: soon,
        },
        Row {
            name: "slot of a removed instance -> DropSlot; members' and users' slots stay",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: Observed {
                inactive_slots: vec![
                    "orders_2".into(),
                    "orders_3".into(),
                    "orders_logical".into(),
                ],
                ..observed(vec![(1, primary(true)), (2, replica(true))])
            },
            phase: P::Ready,
            actions: vec![Action::DropSlot {
                primary: name(1),
                slot: "orders_3".into(),
            }],
            requeue: soon,
        },
        Row {
            name: "pending restart on replica and primary -> the replica first",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (
                    1,
                    running(
                        Primary,
                        Some(ManagerStatus {
                            pending_restart: true,
                            ..manager(Primary, true, 100)
                        }),
                    ),
                ),
                (
                    2,
                    running(
                        Replica,
                        Some(ManagerStatus {
                            pending_restart: true,
                            ..manager(Replica, true, 90)
                        }),
                    ),
                ),
            ]),
            phase: P::Configuring,
            actions: vec![Action::RestartInstance { name: name(2) }],
            requeue: soon,
        },
        Row {
            name: "pending restart on the primary only -> the primary last",
            spec: async_spec(2),
            previous: status(P::Ready, Some(1)),
            observed: observed(vec![
                (
                    1,
                    running(
                        Primary,
                        Some(ManagerStatus {
                            pending_restart: true,
                            ..manager(Primary, true, 100)
                        }),
                    ),
                ),
                (2, replica(true)),
            ]),
            phase: P::Configuring,
            actions: vec![Action::RestartInstance { name: name(1) }],
            requeue: soon,
        },
        Row {
            name: "no restart while a replica is down (one at a time)",
            spec: async_spec(3),
            previous: status(P::Ready, Some(1)),
            observed: Observed {
                parameter_change: Change::Restart,
                ..observed(vec![
                    (
                        1,
                        running(
                            Primary,
                            Some(ManagerStatus {
                                pending_restart: true,
                                ..manager(Primary, true, 100)
                            }),
                        ),
                    ),
                    (2, replica(false)),
                    (3, unknown(Replica)),
                ])
            },
            phase: P::Degraded,
            actions: vec![
                Action::Reload { name: name(1) },
                Action::Reload { name: name(2) },
            ],
            requeue: soon,
        },
        Row {
            name: "deletion -> Deleting, nothing else",
            spec: async_spec(3),
            previous: status(P::Ready, Some(1)),
            observed: Observed {
                deleting: true,
                ..observed(vec![(1, primary(true))])
            },
            phase: P::Deleting,
            actions: vec![],
            requeue: None,
        },
    ]
}

#[test]
fn transitions() {
    let mut failures = Vec::new();
    for row in rows() {
        let plan = plan(
            &row.spec,
            row.previous.as_ref(),
            &routed(row.observed.clone()),
        );
        if plan.phase != row.phase
            || plan.actions != row.actions
            || plan.requeue_after_seconds != row.requeue
        {
            failures.push(format!(
                "{}\n  expected {:?} {:?} requeue {:?}\n  got      {:?} {:?} requeue {:?}",
                row.name,
                row.phase,
                row.actions,
                row.requeue,
                plan.phase,
                plan.actions,
                plan.requeue_after_seconds
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_plan_has_three_conditions_and_records_the_primary() {
    for row in rows() {
        let plan = plan(&row.spec, row.previous.as_ref(), &row.observed);
        let types: Vec<_> = plan.conditions.iter().map(|c| c.type_).collect();
        assert_eq!(types, ["Ready", "Progressing", "Degraded"], "{}", row.name);
    }
    let ready = plan(
        &async_spec(1),
        None,
        &routed(observed(vec![(1, primary(true))])),
    );
    assert_eq!(ready.current_primary.as_deref(), Some("orders-1"));
    assert!(ready.conditions[0].status, "Ready");
    assert!(!ready.conditions[1].status, "Progressing");
    assert!(!ready.conditions[2].status, "Degraded");
}

#[test]
fn survivors_are_pvcs_without_pods() {
    let observed = observed(vec![(1, primary(true)), (2, survivor()), (4, survivor())]);
    assert_eq!(observed.survivors().collect::<Vec<_>>(), [2, 4]);
}

/// The conditions of one plan, by type.
pub(super) fn condition<'a>(plan: &'a Plan, type_: &str) -> &'a Desired {
    plan.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

pub(super) fn healthy_three() -> Observed {
    routed(observed(vec![
        (1, primary(true)),
        (2, replica(true)),
        (3, replica(true)),
    ]))
}

#[test]
fn a_server_older_than_the_spec_minor_is_not_ready() {
    let mut observed = healthy_three();
    for instance in observed.instances.values_mut() {
        if let Some(manager) = instance.pod.as_mut().and_then(|p| p.manager.as_mut()) {
            manager.server_version = Some((17, 1));
        }
    }
    let mut spec = async_spec(3);
    spec.version = "17.4".into();
    let decided = plan(&spec, status(P::Ready, Some(1)).as_ref(), &observed);
    assert_eq!(condition(&decided, READY).reason, "VersionMismatch");
    assert!(
        condition(&decided, READY)
            .message
            .starts_with("spec.version: ")
    );
}

#[test]
fn not_ready_while_the_services_do_not_route() {
    let mut observed = healthy_three();
    observed.routing.ro = vec![name(2)];
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(decided.phase, P::Configuring);
    let ready = condition(&decided, READY);
    assert!(!ready.status);
    assert_eq!(ready.reason, "WaitingForRouting");
    assert!(ready.message.contains(&name(3)), "{}", ready.message);
    assert!(condition(&decided, PROGRESSING).status);

    // Ready by its manager, not yet by the kubelet: the Services skip it.
    let mut observed = healthy_three();
    if let Some(pod) = observed.instances.get_mut(&3).and_then(|i| i.pod.as_mut()) {
        pod.ready = false;
    }
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(condition(&decided, READY).reason, "WaitingForPods");
}

#[test]
fn parameters_under_way_are_not_ready() {
    let mut observed = healthy_three();
    observed.parameter_change = Change::Reload;
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(condition(&decided, READY).reason, "ApplyingParameters");
    assert!(!condition(&decided, READY).status);
}

fn with_store(mut spec: DatabaseSpec) -> DatabaseSpec {
    spec.backup = Some(crate::api::v1::BackupConfig {
        object_store: Some(crate::api::v1::ObjectStore {
            bucket: "backups".into(),
            ..Default::default()
        }),
        schedule: Some("0 2 * * *".into()),
        retention: Some("7d".into()),
        verify: None,
    });
    spec
}

fn archiver(archived_at: Option<i64>, failed_at: Option<i64>) -> crate::contract::Archiver {
    crate::contract::Archiver {
        archived_count: i64::from(archived_at.is_some()),
        failed_count: i64::from(failed_at.is_some()),
        last_archived_wal: archived_at.map(|_| "000000010000000000000003".into()),
        last_archived_at: archived_at,
        last_failed_wal: failed_at.map(|_| "000000010000000000000004".into()),
        last_failed_at: failed_at,
        last_error: failed_at.map(|_| "uploading: bucket tusk does not exist".into()),
    }
}

fn backup_healthy(decided: &Plan) -> Option<&Desired> {
    decided
        .conditions
        .iter()
        .find(|c| c.type_ == BACKUP_HEALTHY)
}

#[test]
fn schedules_and_retention_are_in_effect_and_archiving_is_reported() {
    let spec = with_store(async_spec(3));
    let mut observed = healthy_three();
    observed.archiving = Some(archiver(Some(100), None));
    let decided = plan(&spec, status(P::Ready, Some(1)).as_ref(), &observed);
    assert!(condition(&decided, READY).status, "{decided:?}");
    let healthy = backup_healthy(&decided).expect("BackupHealthy");
    assert!(healthy.status);
    assert_eq!(healthy.reason, "Archiving");
    assert!(healthy.message.contains("000000010000000000000003"));

    // Failing after the last success: False with the cause, and Ready stays.
    observed.archiving = Some(archiver(Some(100), Some(160)));
    let decided = plan(&spec, status(P::Ready, Some(1)).as_ref(), &observed);
    assert!(condition(&decided, READY).status);
    let failing = backup_healthy(&decided).expect("BackupHealthy");
    assert!(!failing.status);
    assert_eq!(failing.reason, "ArchivingFailing");
    assert!(
        failing.message.contains("bucket tusk does not exist"),
        "{}",
        failing.message
    );

    // A success since the failure: healthy again.
    observed.archiving = Some(archiver(Some(200), Some(160)));
    let decided = plan(&spec, status(P::Ready, Some(1)).as_ref(), &observed);
    assert!(backup_healthy(&decided).expect("BackupHealthy").status);
}

#[test]
fn a_missing_credentials_secret_is_named_and_blocks_nothing() {
    let spec = with_store(async_spec(3));
    let mut seen = healthy_three();
    seen.missing_store_credentials = Some("s3-creds".into());
    let decided = plan(&spec, status(P::Ready, Some(1)).as_ref(), &seen);
    // The database serves: only backups are unhealthy.
    assert_eq!(decided.phase, P::Ready);
    assert!(condition(&decided, READY).status);
    assert!(!condition(&decided, crate::lifecycle::verdict::DEGRADED).status);
    let health = backup_healthy(&decided).expect("BackupHealthy");
    assert!(!health.status);
    assert_eq!(health.reason, "CredentialsSecretMissing");
    assert!(
        health
            .message
            .starts_with("spec.backup.objectStore.credentialsSecret: Secret s3-creds "),
        "{}",
        health.message
    );
    // During the bootstrap too: the first instance is created without it.
    let mut fresh = observed(vec![]);
    fresh.missing_store_credentials = Some("s3-creds".into());
    let decided = plan(&spec, None, &fresh);
    assert_ne!(decided.phase, P::Blocked);
    assert!(
        decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePvc { .. } | Action::CreatePod { .. })),
        "no instance is created: {:?}",
        decided.actions
    );
    assert_eq!(
        backup_healthy(&decided).expect("BackupHealthy").reason,
        "CredentialsSecretMissing"
    );
}

#[test]
fn backup_health_keeps_its_last_word_while_no_primary_answers_and_needs_a_store() {
    let spec = with_store(async_spec(3));
    let mut previous = status(P::Ready, Some(1)).expect("a status");
    previous.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: BACKUP_HEALTHY.into(),
        status: "False".into(),
        reason: "ArchivingFailing".into(),
        message: "WAL archiving fails".into(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ),
        observed_generation: None,
    }];
    let decided = plan(&spec, Some(&previous), &healthy_three());
    let kept = backup_healthy(&decided).expect("the recorded word");
    assert!(!kept.status);
    assert_eq!(kept.message, "WAL archiving fails");

    let mut observed = healthy_three();
    observed.archiving = Some(archiver(Some(100), None));
    let decided = plan(&async_spec(3), Some(&previous), &observed);
    assert_eq!(backup_healthy(&decided), None, "no store, no condition");
}

fn restoring_spec() -> DatabaseSpec {
    let mut spec = async_spec(3);
    spec.bootstrap = Some(crate::api::v1::BootstrapSpec {
        initdb: None,
        recovery: Some(crate::api::v1::RecoverySpec {
            backup: Some("nightly".into()),
            ..Default::default()
        }),
    });
    spec
}

#[test]
fn a_restore_whose_source_is_unresolved_creates_nothing_and_names_the_field() {
    let mut unresolved = observed(vec![]);
    unresolved.restore.unresolved =
        Some("spec.bootstrap.recovery.backup: Backup nightly does not exist".into());
    let decided = plan(&restoring_spec(), None, &unresolved);
    assert_eq!(decided.phase, P::Failed);
    assert!(
        decided
            .actions
            .iter()
            .all(|a| !matches!(a, Action::CreatePvc { .. } | Action::CreatePod { .. })),
        "{:?}",
        decided.actions
    );
    let ready = condition(&decided, READY);
    assert_eq!(ready.reason, "RestoreSourceInvalid");
    assert!(
        ready
            .message
            .starts_with("spec.bootstrap.recovery.backup: ")
    );
}

#[test]
fn the_first_primary_of_a_restore_restores_and_reports_its_progress() {
    let decided = plan(&restoring_spec(), None, &observed(vec![(1, survivor())]));
    assert_eq!(decided.phase, P::Restoring);
    assert!(decided.actions.contains(&Action::CreatePod {
        serial: 1,
        bootstrap: Bootstrap::Restore,
        role: Primary,
        image: String::new(),
    }));

    // Its pod pending or its manager still starting: restoring, not degraded.
    let starting = plan(
        &restoring_spec(),
        None,
        &observed(vec![(1, unknown(Primary))]),
    );
    assert_eq!(starting.phase, P::Restoring);
    assert!(!condition(&starting, crate::lifecycle::verdict::DEGRADED).status);

    let mut restoring = observed(vec![(1, unknown(Primary))]);
    restoring.restore.progress = Some(crate::contract::RestoreProgress {
        stage: crate::contract::RestoreStage::Downloading,
        source: Some("s3://b/orders/7441".into()),
        backup: Some("20261124T100000Z".into()),
        downloaded_bytes: 3 << 20,
        total_bytes: 12 << 20,
        ..Default::default()
    });
    let decided = plan(&restoring_spec(), None, &restoring);
    assert_eq!(decided.phase, P::Restoring);
    assert_eq!(condition(&decided, READY).reason, "RestoreDownloading");
    let message = &condition(&decided, READY).message;
    assert!(
        message.contains(
            "downloading backup 20261124T100000Z from s3://b/orders/7441: 3.0 of 12.0 MiB"
        ),
        "{message}"
    );
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod { .. }))
    );

    // A failed attempt: phase Failed, the cause in the condition.
    let progress = restoring.restore.progress.as_mut().expect("progress");
    progress.stage = crate::contract::RestoreStage::Failed;
    progress.error = Some("data.tar.zst does not match its manifest".into());
    progress.attempts = 2;
    let decided = plan(&restoring_spec(), None, &restoring);
    assert_eq!(decided.phase, P::Failed);
    let ready = condition(&decided, READY);
    assert_eq!(ready.reason, "RestoreFailed");
    assert!(
        ready.message.contains("does not match its manifest"),
        "{}",
        ready.message
    );
}

#[test]
fn a_primary_recreated_before_its_restore_finished_restores_again() {
    // The restoring pod went before any data was seen: its volume may be
    // empty, so it restores again rather than initialising an empty cluster.
    let previous = status(P::Restoring, Some(1));
    let create = |bootstrap| Action::CreatePod {
        serial: 1,
        bootstrap,
        role: Primary,
        image: String::new(),
    };
    let decided = plan(
        &restoring_spec(),
        previous.as_ref(),
        &observed(vec![(1, survivor())]),
    );
    assert!(
        decided.actions.contains(&create(Bootstrap::Restore)),
        "{:?}",
        decided.actions
    );

    // Once an instance reported its data, the primary's volume is restarted.
    let mut seen = previous.expect("status");
    seen.instances = vec![crate::api::status::InstanceStatus {
        name: name(1),
        system_identifier: Some("7441".into()),
        ..Default::default()
    }];
    let decided = plan(
        &restoring_spec(),
        Some(&seen),
        &observed(vec![(1, survivor())]),
    );
    assert!(
        decided.actions.contains(&create(Bootstrap::Initdb)),
        "{:?}",
        decided.actions
    );
}

#[test]
fn a_recreated_secret_is_pushed_to_the_instances() {
    let mut observed = healthy_three();
    observed.credentials_to_sync = vec![
        crate::contract::Credential::App,
        crate::contract::Credential::Replication,
    ];
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(
        decided.actions,
        [
            Action::SyncPassword {
                credential: crate::contract::Credential::App,
                instances: vec![name(1)],
            },
            Action::SyncPassword {
                credential: crate::contract::Credential::Replication,
                instances: vec![name(1), name(2), name(3)],
            },
        ]
    );
    // Never before the primary is up to take it.
    let mut down = observed.clone();
    down.instances.insert(1, primary(false));
    let decided = plan_of(&down);
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::SyncPassword { .. }))
    );
}

fn plan_of(observed: &Observed) -> Plan {
    plan(&async_spec(3), status(P::Ready, Some(1)).as_ref(), observed)
}

#[test]
fn drifted_services_and_secrets_are_reapplied() {
    let mut observed = healthy_three();
    observed.services = false;
    observed.secrets = false;
    let decided = plan_of(&observed);
    assert_eq!(
        decided.actions,
        [Action::EnsureSecrets, Action::EnsureServices]
    );
    let mut observed = healthy_three();
    observed.pod_disruption_budgets = false;
    observed.surplus_budgets = vec!["orders-replicas".into()];
    let decided = plan_of(&observed);
    assert_eq!(
        decided.actions,
        [
            Action::EnsurePodDisruptionBudgets,
            Action::DeletePodDisruptionBudget {
                name: "orders-replicas".into()
            }
        ]
    );
}
