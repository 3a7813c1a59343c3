//! The safety invariants, over random observations, specs and previous
//! statuses, and that an instance starting for the first time is no alarm.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::tests::spec;
use super::*;
use crate::api::status::{DatabasePhase, DatabaseStatus, InstanceRole};
use crate::api::v1::{DatabaseSpec, ReplicationMode};
use crate::postgres::params::Change;

fn role() -> impl Strategy<Value = InstanceRole> {
    prop_oneof![Just(InstanceRole::Primary), Just(InstanceRole::Replica)]
}

fn manager() -> impl Strategy<Value = ManagerStatus> {
    // Small ranges so that ties and equal timelines are common.
    (
        role(),
        any::<bool>(),
        1u32..3,
        0u64..4,
        0u64..4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(role, ready, timeline, received_lsn, replayed_lsn, streaming, pending_restart)| {
                ManagerStatus {
                    role,
                    ready,
                    timeline,
                    received_lsn,
                    replayed_lsn,
                    streaming,
                    pending_restart,
                    server_version: None,
                }
            },
        )
}

fn pod() -> impl Strategy<Value = Pod> {
    (
        prop_oneof![
            Just(PodPhase::Pending),
            Just(PodPhase::Running),
            Just(PodPhase::Failed),
            Just(PodPhase::Terminating)
        ],
        proptest::option::of(role()),
        proptest::option::of(manager()),
        any::<bool>(),
    )
        .prop_map(|(phase, role_label, manager, ready)| Pod {
            phase,
            role_label,
            manager,
            ready,
            ..Pod::default()
        })
}

fn instance() -> impl Strategy<Value = Instance> {
    (
        proptest::option::of(prop_oneof![Just(PvcState::Pending), Just(PvcState::Bound)]),
        proptest::option::weighted(0.8, pod()),
    )
        .prop_map(|(pvc, pod)| Instance {
            pvc,
            pod,
            ..Instance::default()
        })
}

fn observed() -> impl Strategy<Value = Observed> {
    (
        proptest::collection::btree_map(1u32..8, instance(), 0..6),
        proptest::bool::weighted(0.05),
        any::<(bool, bool, bool)>(),
        prop_oneof![
            Just(Change::Nothing),
            Just(Change::Reload),
            Just(Change::Restart)
        ],
        // Slots of serials 1..8, and one a user made that must never be dropped.
        proptest::collection::btree_set(
            prop_oneof![
                (1u32..8).prop_map(|s| format!("orders_{s}")),
                Just("orders_logical".to_owned())
            ],
            0..4,
        ),
    )
        .prop_map(
            |(instances, deleting, (secrets, services, pdbs), parameter_change, slots)| Observed {
                database: "orders".into(),
                deleting,
                secrets,
                services,
                pod_disruption_budgets: pdbs,
                instances,
                sync: SyncStandbys::default(),
                parameter_change,
                inactive_slots: slots.into_iter().collect(),
                ..Observed::default()
            },
        )
}

fn database_spec() -> impl Strategy<Value = DatabaseSpec> {
    (
        1i32..6,
        prop_oneof![Just(ReplicationMode::Async), Just(ReplicationMode::Sync)],
        1i32..4,
    )
        .prop_map(|(instances, mode, min)| spec(instances, mode, min))
}

fn previous() -> impl Strategy<Value = Option<DatabaseStatus>> {
    proptest::option::of(
        (
            proptest::sample::select(DatabasePhase::ALL.to_vec()),
            proptest::option::of(1u32..8),
        )
            .prop_map(|(phase, primary)| DatabaseStatus {
                phase: Some(phase),
                current_primary: primary.map(|s| format!("orders-{s}")),
                ..Default::default()
            }),
    )
}

/// A healthy three-instance Database asked to switch over (or not), with
/// replicas more or less caught up and a target recorded or not: promotions
/// are common here, unlike in random observations.
fn switchover() -> impl Strategy<Value = (DatabaseSpec, Option<DatabaseStatus>, Observed)> {
    (
        proptest::option::of(1u32..4),
        proptest::option::of(1u32..4),
        proptest::collection::vec((any::<bool>(), 0u64..4), 2),
    )
        .prop_map(|(wanted, recorded, replicas)| {
            let mut spec = super::tests::async_spec(3);
            spec.primary = wanted.map(|s| format!("orders-{s}"));
            let mut previous = super::tests::status(DatabasePhase::Ready, Some(1));
            if let Some(status) = previous.as_mut() {
                status.target_primary = recorded.map(|s| format!("orders-{s}"));
            }
            let mut observed = super::tests::healthy_three();
            observed.lease = LeaseState::Held {
                holder: "orders-1".into(),
                remaining: std::time::Duration::from_secs(4),
            };
            for (serial, (ready, lsn)) in (2u32..).zip(replicas) {
                if let Some(manager) = observed
                    .instances
                    .get_mut(&serial)
                    .and_then(|i| i.pod.as_mut())
                    .and_then(|p| p.manager.as_mut())
                {
                    manager.ready = ready;
                    manager.received_lsn = lsn;
                    manager.replayed_lsn = lsn;
                }
            }
            (spec, previous, observed)
        })
}

fn serial_of(observed: &Observed, action: &Action) -> Option<u32> {
    action
        .target(|s| observed.name(s))
        .and_then(|name| observed.serial_of(&name))
}

fn exists(instance: &Instance) -> bool {
    instance.pvc.is_some() || instance.pod.is_some()
}

/// A first creation: the previous phase on the way to the first `Ready`
/// (or none), no instance ever recorded, and every pod fresh (created at the
/// pass's time, never restarted, not failed).
fn first_creation() -> impl Strategy<Value = (Option<DatabaseStatus>, Observed)> {
    (
        proptest::option::of((
            proptest::sample::select(vec![
                DatabasePhase::Pending,
                DatabasePhase::Provisioning,
                DatabasePhase::InitializingPrimary,
                DatabasePhase::CreatingReplicas,
            ]),
            proptest::option::of(1u32..8),
        )),
        observed(),
    )
        .prop_map(|(previous, mut observed)| {
            observed.deleting = false;
            for pod in observed
                .instances
                .values_mut()
                .filter_map(|i| i.pod.as_mut())
            {
                if pod.phase == PodPhase::Failed {
                    pod.phase = PodPhase::Pending;
                }
                pod.created = Some(observed.now);
                pod.restarts = 0;
            }
            let previous = previous.map(|(phase, primary)| DatabaseStatus {
                phase: Some(phase),
                current_primary: primary.map(|s| format!("orders-{s}")),
                ..Default::default()
            });
            (previous, observed)
        })
}

proptest! {
    // No regression files: the module owns no directory outside `src/lifecycle`;
    // a failure prints its minimal input, which becomes a table row.
    #![proptest_config(ProptestConfig {
        cases: 4000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn never_two_primaries(spec in database_spec(), previous in previous(), observed in observed()) {
        let plan = plan(&spec, previous.as_ref(), &observed);
        let mut created = Vec::new();
        for action in &plan.actions {
            let serial = match action {
                Action::CreatePod { serial, role: InstanceRole::Primary, .. } => *serial,
                Action::LabelRole { role: InstanceRole::Primary, .. } => {
                    let serial = serial_of(&observed, action).unwrap_or(0);
                    // Only the instance whose manager says it is primary gets the label.
                    prop_assert!(observed.instances.get(&serial).is_some_and(Instance::reports_primary));
                    serial
                }
                _ => continue,
            };
            created.push(serial);
            for (other, instance) in &observed.instances {
                if *other != serial && exists(instance) {
                    prop_assert!(!instance.reports_primary(), "{action:?} while {other} is primary");
                    prop_assert!(!instance.may_be_primary(), "{action:?} while {other} may be primary");
                }
            }
        }
        created.dedup();
        prop_assert!(created.len() <= 1, "{created:?}");
    }

    #[test]
    fn data_is_only_deleted_below_a_ready_primary_that_holds_it(
        spec in database_spec(), previous in previous(), observed in observed()
    ) {
        let plan = plan(&spec, previous.as_ref(), &observed);
        let primaries: Vec<(u32, ManagerStatus)> = observed.instances.iter()
            .filter(|(_, i)| exists(i))
            .filter_map(|(s, i)| i.status().filter(|m| m.role == InstanceRole::Primary).map(|m| (*s, m)))
            .collect();
        let recorded = previous.as_ref()
            .and_then(|p| p.current_primary.as_deref())
            .and_then(|n| observed.serial_of(n));
        for action in &plan.actions {
            let Action::DeletePvc { name } = action else { continue };
            let serial = observed.serial_of(name);
            prop_assert!(serial.is_some());
            let serial = serial.unwrap_or_default();
            // One known, ready primary, and it is not this instance.
            prop_assert_eq!(primaries.len(), 1);
            let (primary, primary_status) = primaries[0];
            prop_assert!(primary_status.ready);
            prop_assert_ne!(serial, primary);
            // The recorded primary's data goes only once another primary answers.
            if recorded == Some(serial) {
                prop_assert!(observed.instances.get(&serial).is_some_and(|i| !i.reports_primary()));
            }
            // The most advanced replica only goes when the primary holds all its WAL.
            if let Some(replica) = observed.instances.get(&serial).and_then(Instance::status) {
                prop_assert!(replica.timeline <= primary_status.timeline);
                if replica.timeline == primary_status.timeline {
                    prop_assert!(replica.replayed_lsn <= primary_status.replayed_lsn);
                }
            }
            // Only when scaling below this serial: it is among the highest
            // `members - instances` serials other than the primary.
            let members: Vec<u32> = observed.instances.iter()
                .filter(|(_, i)| exists(i)).map(|(s, _)| *s).collect();
            let desired = usize::try_from(spec.instances).unwrap_or(1);
            prop_assert!(members.len() > desired);
            let higher = members.iter().filter(|s| **s > serial && **s != primary).count();
            prop_assert!(higher < members.len() - desired);
        }
    }

    #[test]
    fn never_acts_on_an_unknown_instance(spec in database_spec(), previous in previous(), observed in observed()) {
        let plan = plan(&spec, previous.as_ref(), &observed);
        for action in plan.actions.iter().filter(|a| a.acts_on_existing()) {
            let serial = serial_of(&observed, action);
            let instance = serial.and_then(|s| observed.instances.get(&s));
            // A pending pod never started its containers (the kubelet's word):
            // the rolling update may replace one that is outdated.
            let never_started = matches!(action, Action::RollPod { .. })
                && instance.and_then(|i| i.pod.as_ref()).is_some_and(|p| p.phase == PodPhase::Pending);
            if never_started {
                continue;
            }
            let state = instance.map(Instance::state);
            prop_assert_ne!(state, Some(InstanceState::Unknown), "{:?}", action);
        }
    }

    #[test]
    fn creations_are_consistent(spec in database_spec(), previous in previous(), observed in observed()) {
        let plan = plan(&spec, previous.as_ref(), &observed);
        let max = observed.instances.iter()
            .filter(|(_, i)| exists(i)).map(|(s, _)| *s).max().unwrap_or(0);
        for action in &plan.actions {
            match action {
                Action::CreatePvc { serial } => {
                    // Serials only grow.
                    prop_assert!(*serial > max, "{action:?} with serials up to {max}");
                }
                Action::CreatePod { serial, .. } => {
                    // Never over an existing pod; always onto a PVC that exists or
                    // is created earlier in this plan.
                    let instance = observed.instances.get(serial);
                    prop_assert!(instance.and_then(|i| i.pod.as_ref()).is_none());
                    let pvc = instance.is_some_and(|i| i.pvc.is_some())
                        || plan.actions.contains(&Action::CreatePvc { serial: *serial });
                    prop_assert!(pvc, "{action:?} without a PVC");
                }
                _ => {}
            }
        }
        let mut sorted = plan.actions.clone();
        sorted.sort_by_key(|a| format!("{a:?}"));
        sorted.dedup();
        prop_assert_eq!(sorted.len(), plan.actions.len(), "duplicate actions");
    }

    #[test]
    fn only_slots_of_instances_that_are_gone_are_dropped(
        spec in database_spec(), previous in previous(), observed in observed()
    ) {
        let plan = plan(&spec, previous.as_ref(), &observed);
        for action in &plan.actions {
            let Action::DropSlot { slot, .. } = action else { continue };
            prop_assert!(observed.inactive_slots.contains(slot));
            let serial: Option<u32> = slot.strip_prefix("orders_").and_then(|s| s.parse().ok());
            prop_assert!(serial.is_some(), "dropped {slot}, not an instance's slot");
            let member = serial.and_then(|s| observed.instances.get(&s)).is_some_and(exists);
            prop_assert!(!member, "dropped the slot of existing instance {slot}");
        }
    }

    #[test]
    fn deleting_does_nothing_else(spec in database_spec(), previous in previous(), mut observed in observed()) {
        observed.deleting = true;
        let plan = plan(&spec, previous.as_ref(), &observed);
        prop_assert_eq!(plan.phase, DatabasePhase::Deleting);
        // Without a store, nothing at all (the final backup's properties are
        // in `backups_tests`).
        prop_assert!(plan.actions.is_empty());
        prop_assert!(plan.release);
    }

    #[test]
    fn a_new_target_is_recorded_before_its_promotion(
        (spec, previous, observed) in switchover()
    ) {
        let plan = plan(&spec, previous.as_ref(), &observed);
        let recorded = previous.as_ref().and_then(|p| p.target_primary.as_deref());
        let promoting = plan.actions.iter().position(|a| a.new_primary().is_some());
        let record = plan.actions.iter()
            .position(|a| matches!(a, Action::RecordTargetPrimary { .. }));
        if let Some(at) = promoting {
            let target = plan.actions[at].new_primary();
            if target != recorded {
                prop_assert_eq!(record, Some(at.saturating_sub(1)), "{:?}", plan.actions);
                prop_assert_eq!(
                    &plan.actions[at - 1],
                    &Action::RecordTargetPrimary { name: target.unwrap_or_default().to_owned() }
                );
            }
        } else {
            prop_assert_eq!(record, None, "a record without a promotion: {:?}", plan.actions);
        }
    }

    #[test]
    fn plan_is_deterministic(spec in database_spec(), previous in previous(), observed in observed()) {
        let first = plan(&spec, previous.as_ref(), &observed);
        let copy: BTreeMap<_, _> = observed.instances.clone().into_iter().rev().collect();
        let again = plan(&spec.clone(), previous.clone().as_ref(), &Observed { instances: copy, ..observed.clone() });
        prop_assert_eq!(first, again);
    }

    #[test]
    fn a_fresh_instance_is_never_an_alarm(
        spec in database_spec(),
        (previous, observed) in first_creation(),
    ) {
        // Only what no startup explains may raise Degraded on the way to
        // the first Ready: several primaries, a primary's data gone.
        let plan = plan(&spec, previous.as_ref(), &observed);
        let degraded = plan.conditions.iter().find(|c| c.type_ == DEGRADED);
        prop_assert!(degraded.is_some());
        if let Some(degraded) = degraded.filter(|c| c.status) {
            prop_assert!(
                matches!(degraded.reason, "MultiplePrimaries" | "PrimaryDataLost" | "FailoverRequired"),
                "{} in phase {:?}: {}", degraded.reason, plan.phase, degraded.message
            );
        }
    }
}
