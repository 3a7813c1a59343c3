//! The rolling update, as plan rows and as a walk: replicas one at a time,
//! then a switchover, then the old primary; never two instances away.

use std::time::Duration;

use super::tests::{
    async_spec, condition, healthy_three, manager, primary, replica, routed, status,
};
use super::*;
use crate::api::status::{DatabasePhase as P, InstanceRole};
use crate::lifecycle::verdict::READY;

const OLD: &str = "localhost/postgres:17";
const NEW: &str = "localhost/postgres:17-next";

fn leased(mut observed: Observed, holder: &str) -> Observed {
    observed.lease = LeaseState::Held {
        holder: holder.into(),
        remaining: Duration::from_secs(10),
    };
    observed
}

/// Three healthy instances (1 the primary), all on the old pod spec.
fn outdated_three() -> Observed {
    let mut observed = leased(healthy_three(), "orders-1");
    observed.desired_image = NEW.into();
    for instance in observed.instances.values_mut() {
        let pod = instance.pod.as_mut().expect("pod");
        pod.image = OLD.into();
        pod.outdated = true;
    }
    observed
}

fn update(observed: &mut Observed, serial: u32) {
    let pod = observed
        .instances
        .get_mut(&serial)
        .and_then(|i| i.pod.as_mut())
        .expect("pod");
    pod.image = NEW.into();
    pod.outdated = false;
}

fn roll(name: &str, evict: bool, updated: usize, total: usize) -> Action {
    Action::RollPod {
        name: name.into(),
        evict,
        updated,
        total,
    }
}

#[test]
fn a_changed_image_replaces_one_replica_first_and_shows_upgrading() {
    let observed = outdated_three();
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(decided.actions, [roll("orders-2", true, 0, 3)]);
    assert_eq!(decided.phase, P::Upgrading);
    let ready = condition(&decided, READY);
    assert!(!ready.status);
    assert_eq!(ready.reason, "RollingUpdate");
    assert!(
        ready.message.contains("0 of 3 instances updated"),
        "{}",
        ready.message
    );
    assert_eq!(
        decided.requeue_after_seconds,
        Some(super::plan::REQUEUE_ROLLOUT_SECONDS)
    );
}

#[test]
fn the_next_replica_goes_only_once_the_last_is_back_and_streaming() {
    let mut observed = outdated_three();
    // orders-2 was replaced: its new pod is up but not streaming yet.
    update(&mut observed, 2);
    let pod = observed
        .instances
        .get_mut(&2)
        .and_then(|i| i.pod.as_mut())
        .expect("pod");
    pod.manager = Some(ManagerStatus {
        streaming: false,
        ..manager(InstanceRole::Replica, true, 90)
    });
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(decided.actions, []);
    assert_eq!(decided.phase, P::Upgrading);
    let ready = condition(&decided, READY);
    assert!(!ready.status);
    assert_eq!(ready.reason, "RollingUpdate", "{}", ready.message);
    assert!(
        decided.verdicts.iter().any(|v| matches!(
            v,
            Verdict::Progress { reason: "RollingUpdate", message }
                if message.contains("1 of 3 instances updated; waiting for orders-2 to be ready and streaming")
        )),
        "{:?}",
        decided.verdicts
    );

    // Back and streaming: the next replica.
    let mut observed = outdated_three();
    update(&mut observed, 2);
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(decided.actions, [roll("orders-3", true, 1, 3)]);
}

#[test]
fn a_replaced_replica_is_recreated_with_the_new_image_and_nothing_else_goes() {
    let mut observed = outdated_three();
    observed.instances.get_mut(&2).expect("2").pod = None;
    let observed = routed(observed);
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(1)).as_ref(),
        &observed,
    );
    let created: Vec<(u32, &str)> = decided
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { serial, image, .. } => Some((*serial, image.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(created, [(2, NEW)]);
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::RollPod { .. })),
        "{:?}",
        decided.actions
    );
    assert_eq!(decided.phase, P::Upgrading);
}

#[test]
fn the_primary_is_never_touched_while_a_replica_is_unhealthy() {
    let mut observed = outdated_three();
    update(&mut observed, 2);
    update(&mut observed, 3);
    observed.instances.insert(3, replica(false));
    update(&mut observed, 3);
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(1)).as_ref(),
        &observed,
    );
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::Switchover { .. } | Action::RollPod { .. })),
        "{:?}",
        decided.actions
    );
}

#[test]
fn with_every_replica_updated_the_primary_hands_over_to_the_most_advanced() {
    let mut observed = outdated_three();
    update(&mut observed, 2);
    update(&mut observed, 3);
    observed.instances.insert(3, replica(true));
    update(&mut observed, 3);
    if let Some(m) = observed
        .instances
        .get_mut(&3)
        .and_then(|i| i.pod.as_mut())
        .and_then(|p| p.manager.as_mut())
    {
        m.received_lsn = 95;
    }
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(
        decided.actions,
        [
            Action::RecordTargetPrimary {
                name: "orders-3".into()
            },
            Action::Switchover {
                from: "orders-1".into(),
                to: "orders-3".into(),
                standbys: Vec::new(),
                min: 0,
            }
        ]
    );
    assert_eq!(decided.phase, P::Upgrading);
    assert_eq!(decided.target_primary.as_deref(), Some("orders-3"));
}

#[test]
fn a_single_instance_is_restarted_in_place() {
    let mut observed = leased(
        routed(super::tests::observed(vec![(1, primary(true))])),
        "orders-1",
    );
    observed.desired_image = NEW.into();
    let pod = observed
        .instances
        .get_mut(&1)
        .and_then(|i| i.pod.as_mut())
        .expect("pod");
    pod.outdated = true;
    let decided = plan(
        &async_spec(1),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(decided.actions, [roll("orders-1", false, 0, 1)]);
}

#[test]
fn a_pinned_primary_waits_for_its_update_before_taking_the_role_back() {
    let mut spec = async_spec(3);
    spec.primary = Some("orders-1".into());
    // After the rolling update's switchover: orders-2 primary, orders-1 an
    // outdated replica.
    let mut observed = leased(
        routed(super::tests::observed(vec![
            (1, replica(true)),
            (2, primary(true)),
            (3, replica(true)),
        ])),
        "orders-2",
    );
    observed.desired_image = NEW.into();
    observed
        .instances
        .get_mut(&1)
        .and_then(|i| i.pod.as_mut())
        .expect("pod")
        .outdated = true;
    let decided = plan(&spec, status(P::Upgrading, Some(2)).as_ref(), &observed);
    assert_eq!(decided.actions, [roll("orders-1", true, 2, 3)]);
    assert!(
        decided.verdicts.iter().any(|v| matches!(
            v,
            Verdict::Progress {
                reason: "SwitchoverWaiting",
                ..
            }
        )),
        "{:?}",
        decided.verdicts
    );
}

#[test]
fn a_new_major_is_not_rolled_and_new_pods_keep_what_runs() {
    let mut observed = outdated_three();
    for instance in observed.instances.values_mut() {
        if let Some(m) = instance.pod.as_mut().and_then(|p| p.manager.as_mut()) {
            m.server_version = Some((15, 8));
        }
    }
    observed.desired_image = "localhost/postgres:17".into();
    let mut spec = async_spec(4);
    spec.version = "17".into();
    let decided = plan(&spec, status(P::Ready, Some(1)).as_ref(), &observed);
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::RollPod { .. })),
        "{:?}",
        decided.actions
    );
    let images: Vec<&str> = decided
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { image, .. } => Some(image.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(images, [OLD]);
    assert!(
        decided.verdicts.iter().any(|v| matches!(
            v,
            Verdict::Progress { reason: "MajorUpgrade", message } if message.starts_with("spec.version: ")
        )),
        "{:?}",
        decided.verdicts
    );
}

/// Applies a plan's rollout actions the way the cluster would, in one step:
/// a replaced pod comes back updated and streaming, a switchover swaps roles.
fn settle(observed: &mut Observed, actions: &[Action]) -> Vec<String> {
    let mut rolled = Vec::new();
    for action in actions {
        match action {
            Action::RollPod { name, .. } => {
                let serial = observed.serial_of(name).expect("serial");
                let role = observed.instances[&serial]
                    .status()
                    .map(|s| s.role)
                    .expect("known");
                assert_ne!(
                    role,
                    InstanceRole::Primary,
                    "the primary of several is never replaced"
                );
                observed.instances.insert(serial, replica(true));
                update(observed, serial);
                rolled.push(name.clone());
            }
            Action::Switchover { from, to, .. } => {
                let from = observed.serial_of(from).expect("from");
                let to = observed.serial_of(to).expect("to");
                let outdated =
                    |o: &Observed, s: u32| o.instances[&s].pod.as_ref().expect("pod").outdated;
                let (from_outdated, to_outdated) =
                    (outdated(observed, from), outdated(observed, to));
                observed.instances.insert(from, replica(true));
                observed.instances.insert(to, primary(true));
                for (s, o) in [(from, from_outdated), (to, to_outdated)] {
                    let pod = observed
                        .instances
                        .get_mut(&s)
                        .and_then(|i| i.pod.as_mut())
                        .expect("pod");
                    pod.outdated = o;
                    pod.image = if o { OLD } else { NEW }.into();
                }
                observed.lease = LeaseState::Held {
                    holder: observed.name(to),
                    remaining: Duration::from_secs(10),
                };
                rolled.push(format!("switchover to {}", observed.name(to)));
            }
            _ => {}
        }
    }
    *observed = routed(observed.clone());
    rolled
}

#[test]
fn a_walk_rolls_replicas_then_switches_over_then_the_old_primary() {
    for instances in [2, 3, 5] {
        let members: Vec<(u32, Instance)> = (1..=instances)
            .map(|s| (s, if s == 1 { primary(true) } else { replica(true) }))
            .collect();
        let mut observed = leased(routed(super::tests::observed(members)), "orders-1");
        observed.desired_image = NEW.into();
        for instance in observed.instances.values_mut() {
            let pod = instance.pod.as_mut().expect("pod");
            pod.outdated = true;
            pod.image = OLD.into();
        }
        let spec = async_spec(i32::try_from(instances).expect("small"));
        let mut steps = Vec::new();
        let mut recorded = 1;
        for _ in 0..20 {
            let decided = plan(
                &spec,
                status(P::Upgrading, Some(recorded)).as_ref(),
                &observed,
            );
            let rollout_actions = decided
                .actions
                .iter()
                .filter(|a| matches!(a, Action::RollPod { .. } | Action::Switchover { .. }))
                .count();
            assert!(
                rollout_actions <= 1,
                "one step per pass: {:?}",
                decided.actions
            );
            steps.extend(settle(&mut observed, &decided.actions));
            recorded = observed
                .instances
                .iter()
                .find(|(_, i)| i.reports_primary())
                .map(|(s, _)| *s)
                .expect("a primary");
            if decided.phase == P::Ready {
                break;
            }
        }
        let mut want: Vec<String> = (2..=instances).map(|s| format!("orders-{s}")).collect();
        // The most advanced updated replica takes over (all equal: the lowest).
        want.push("switchover to orders-2".into());
        want.push("orders-1".into());
        assert_eq!(steps, want, "{instances} instances");
        assert!(
            observed
                .instances
                .values()
                .all(|i| !i.pod.as_ref().expect("pod").outdated)
        );
    }
}

#[test]
fn the_update_shows_upgrading_until_the_last_replaced_instance_is_back() {
    // The old primary, replaced last, is on its way back.
    let mut observed = leased(
        routed(super::tests::observed(vec![
            (1, replica(true)),
            (2, primary(true)),
            (3, replica(true)),
        ])),
        "orders-2",
    );
    observed.desired_image = NEW.into();
    observed.instances.get_mut(&1).expect("1").pod = None;
    let observed = routed(observed);
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(2)).as_ref(),
        &observed,
    );
    assert_eq!(decided.phase, P::Upgrading);
    // Once it is back, the update is over.
    let observed = leased(
        routed(super::tests::observed(vec![
            (1, replica(true)),
            (2, primary(true)),
            (3, replica(true)),
        ])),
        "orders-2",
    );
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(2)).as_ref(),
        &observed,
    );
    assert_eq!(decided.phase, P::Ready);
}

#[test]
fn a_replica_stuck_on_a_bad_image_is_replaced_when_the_spec_changes_again() {
    // orders-2 runs a pod spec that never became ready, and the spec moved on.
    let mut observed = outdated_three();
    update(&mut observed, 3);
    let stuck = observed
        .instances
        .get_mut(&2)
        .and_then(|i| i.pod.as_mut())
        .expect("pod");
    stuck.ready = false;
    stuck.manager = None;
    stuck.phase = PodPhase::Pending;
    let observed = routed(observed);
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(decided.actions, [roll("orders-2", true, 1, 3)]);
    // One that ran (its manager silent: maybe a partition) is waited for.
    let mut observed = observed;
    if let Some(pod) = observed.instances.get_mut(&2).and_then(|i| i.pod.as_mut()) {
        pod.phase = PodPhase::Running;
    }
    let decided = plan(
        &async_spec(3),
        status(P::Upgrading, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(decided.actions, []);
}
