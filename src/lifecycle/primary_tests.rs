//! Failover and switchover decisions: who is promoted, when nobody is, what
//! happens to the old primary's label, and `spec.primary`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::status::DatabasePhase as P;
use crate::api::status::InstanceRole::{Primary, Replica};
use crate::contract::Member;
use crate::failover::quorum::Report;

use super::action::{Action, Bootstrap};
use super::observed::{HaView, Instance, LeaseState, Observed};
use super::plan::plan;
use super::tests::{
    async_spec, condition, healthy_three, manager, name, observed, replica, routed, running, status,
};
use super::verdict::READY;

/// A replica whose manager last heard from `orders-1` `silent` seconds ago.
fn replica_hearing(lsn: u64, silent: u64) -> Instance {
    let mut instance = running(Replica, Some(manager(Replica, true, lsn)));
    if let Some(pod) = instance.pod.as_mut() {
        pod.ha = Some(HaView {
            peers: BTreeMap::from([(
                name(1),
                Report {
                    silent_for: Duration::from_secs(silent),
                    fenced: false,
                },
            )]),
            ..HaView::default()
        });
    }
    instance
}

fn lost_primary(lease: LeaseState, silent: u64) -> Observed {
    let mut observed = observed(vec![
        (1, super::tests::survivor_for_failover()),
        (2, replica_hearing(90, silent)),
        (3, replica_hearing(95, silent)),
    ]);
    observed.lease = lease;
    observed
}

fn expired() -> LeaseState {
    LeaseState::Expired {
        holder: name(1),
        overdue: Duration::from_secs(1),
    }
}

fn promotions(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Promote { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lost_primary_is_replaced_by_the_most_advanced_replica_once_the_lease_expired_and_peers_confirm()
 {
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &lost_primary(expired(), 5),
    );
    assert_eq!(decided.phase, P::FailingOver);
    assert_eq!(promotions(&decided.actions), [name(3)]);
    // Status shows who is being promoted while the old primary is still
    // recorded.
    assert_eq!(decided.target_primary.as_deref(), Some(name(3).as_str()));
    assert_eq!(decided.current_primary.as_deref(), Some(name(1).as_str()));
    // The old primary's pod is not recreated while it is replaced.
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod { serial: 1, .. })),
        "{:?}",
        decided.actions
    );
}

#[test]
fn a_deleted_primary_is_not_restarted_before_the_lease_is_read() {
    // An operator that has just started (a new leader) has not read the Lease
    // yet: recreating the primary's pod now would beat the failover (seen in
    // e2e: a force-deleted primary back on timeline 1, never replaced).
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &lost_primary(LeaseState::Unobserved, 5),
    );
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod { serial: 1, .. })),
        "{:?}",
        decided.actions
    );
    assert_eq!(decided.phase, P::FailingOver);
    let ready = condition(&decided, READY);
    assert!(
        ready.message.contains("before the primary lease is read"),
        "{}",
        ready.message
    );
    // Once read, the failover goes ahead.
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &lost_primary(expired(), 5),
    );
    assert_eq!(promotions(&decided.actions), [name(3)]);
}

#[test]
fn no_failover_under_a_live_lease_or_without_confirmations() {
    let held = LeaseState::Held {
        holder: name(1),
        remaining: Duration::from_secs(3),
    };
    for (observed, why) in [
        (lost_primary(held, 5), "its lease runs out in 3.0 s"),
        (lost_primary(expired(), 1), "confirm that orders-1 is gone"),
        (lost_primary(LeaseState::Unobserved, 5), ""),
    ] {
        let decided = plan(
            &async_spec(3),
            status(P::Ready, Some(1)).as_ref(),
            &observed,
        );
        assert_eq!(promotions(&decided.actions), Vec::<String>::new(), "{why}");
        if !why.is_empty() {
            let ready = condition(&decided, READY);
            assert!(ready.message.contains(why), "{}", ready.message);
        }
    }
}

#[test]
fn failover_waits_out_spec_failover_delay_seconds_after_the_lease_expired() {
    let mut spec = async_spec(3);
    spec.failover.delay_seconds = 10;
    let decided = plan(
        &spec,
        status(P::Ready, Some(1)).as_ref(),
        &lost_primary(expired(), 5),
    );
    assert_eq!(promotions(&decided.actions), Vec::<String>::new());
    let ready = condition(&decided, READY);
    assert!(
        ready.message.contains("failover.delaySeconds")
            && ready.message.contains("waits 9.0 s more"),
        "{}",
        ready.message
    );
    // The primary is still the one recorded; nobody is targeted yet.
    assert_eq!(decided.target_primary.as_deref(), Some(name(1).as_str()));
    let late = LeaseState::Expired {
        holder: name(1),
        overdue: Duration::from_secs(10),
    };
    let decided = plan(
        &spec,
        status(P::Ready, Some(1)).as_ref(),
        &lost_primary(late, 5),
    );
    assert_eq!(promotions(&decided.actions), [name(3)]);
}

#[test]
fn a_switchover_asked_for_during_a_failover_waits_for_it() {
    let mut spec = async_spec(3);
    spec.primary = Some(name(2));
    // The lease is still live: nobody is promoted yet.
    let held = LeaseState::Held {
        holder: name(1),
        remaining: Duration::from_secs(3),
    };
    let decided = plan(
        &spec,
        status(P::Ready, Some(1)).as_ref(),
        &lost_primary(held, 5),
    );
    assert!(
        !decided
            .actions
            .iter()
            .any(|a| matches!(a, Action::Switchover { .. } | Action::Promote { .. })),
        "{:?}",
        decided.actions
    );
    assert!(
        decided.verdicts.iter().any(|v| matches!(
            v,
            super::verdict::Verdict::Progress {
                reason: "SwitchoverWaiting",
                ..
            }
        )),
        "{:?}",
        decided.verdicts
    );
}

#[test]
fn a_released_lease_needs_no_confirmations() {
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &lost_primary(LeaseState::Released, 0),
    );
    assert_eq!(promotions(&decided.actions), [name(3)]);
}

#[test]
fn a_lease_handed_to_a_replica_is_completed_by_promoting_it() {
    let mut observed = routed(observed(vec![
        (1, replica(true)),
        (2, replica(true)),
        (3, replica(true)),
    ]));
    observed.lease = LeaseState::Held {
        holder: name(2),
        remaining: Duration::from_secs(4),
    };
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(promotions(&decided.actions), [name(2)]);
}

#[test]
fn without_leader_selection_a_down_primary_is_restarted_in_place() {
    let mut observed = lost_primary(expired(), 5);
    observed.lease_access = false;
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert!(promotions(&decided.actions).is_empty());
    assert!(decided.actions.iter().any(|a| matches!(
        a,
        Action::CreatePod {
            serial: 1,
            bootstrap: Bootstrap::Initdb,
            role: Primary,
            ..
        }
    )));
}

#[test]
fn after_a_failover_the_old_primarys_label_goes_before_the_new_one_is_set() {
    // orders-2 promoted and holds the lease; orders-1's pod still says primary
    // and its manager does not answer (fenced, or cut off).
    let mut observed = routed(observed(vec![
        (1, running(Primary, None)),
        (2, running(Replica, Some(manager(Primary, true, 120)))),
        (3, replica(true)),
    ]));
    observed.lease = LeaseState::Held {
        holder: name(2),
        remaining: Duration::from_secs(4),
    };
    let decided = plan(
        &async_spec(3),
        status(P::FailingOver, Some(1)).as_ref(),
        &observed,
    );
    let labels: Vec<(String, _)> = decided
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::LabelRole { name, role } => Some((name.clone(), *role)),
            _ => None,
        })
        .collect();
    assert_eq!(labels[..2], [(name(1), Replica), (name(2), Primary)]);
    assert_eq!(decided.current_primary.as_deref(), Some("orders-2"));
}

#[test]
fn members_are_pushed_to_managers_that_know_others() {
    let mut observed = healthy_three();
    for (serial, instance) in &mut observed.instances {
        if let Some(pod) = instance.pod.as_mut() {
            pod.address = Some(format!("198.18.0.{serial}"));
            pod.ha = Some(HaView::default());
        }
    }
    if let Some(pod) = observed.instances.get_mut(&2).and_then(|i| i.pod.as_mut()) {
        pod.ha = Some(HaView {
            members: (1..=3)
                .map(|s| Member {
                    name: name(s),
                    address: format!("198.18.0.{s}"),
                    tls: false,
                })
                .collect(),
            ..HaView::default()
        });
    }
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    let pushed: Vec<&str> = decided
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::SetMembers { name, members } => {
                assert_eq!(members.len(), 3);
                Some(name.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(pushed, ["orders-1", "orders-3"]);
}

#[test]
fn spec_primary_switches_over_to_a_healthy_replica_and_refuses_others_by_name() {
    let mut observed = healthy_three();
    observed.lease = LeaseState::Held {
        holder: name(1),
        remaining: Duration::from_secs(4),
    };
    let mut asked = async_spec(3);
    asked.primary = Some(name(2));
    let decided = plan(&asked, status(P::Ready, Some(1)).as_ref(), &observed);
    assert!(
        decided.actions.iter().any(|a| matches!(
            a,
            Action::Switchover { from, to, .. } if *from == name(1) && *to == name(2)
        )),
        "{:?}",
        decided.actions
    );
    assert_eq!(condition(&decided, READY).reason, "SwitchingOver");
    assert_eq!(decided.target_primary.as_deref(), Some(name(2).as_str()));

    asked.primary = Some("orders-9".into());
    let decided = plan(&asked, status(P::Ready, Some(1)).as_ref(), &observed);
    assert!(decided.actions.is_empty(), "{:?}", decided.actions);
    let ready = condition(&decided, READY);
    assert_eq!(ready.reason, "SwitchoverRefused");
    assert!(
        ready.message.starts_with("spec.primary: "),
        "{}",
        ready.message
    );

    // Asking for the primary there is is no change at all.
    asked.primary = Some(name(1));
    let decided = plan(&asked, status(P::Ready, Some(1)).as_ref(), &observed);
    assert_eq!(decided.phase, P::Ready);
    assert!(condition(&decided, READY).status);
    assert_eq!(decided.target_primary, decided.current_primary);
}

#[test]
fn a_switchover_records_its_target_before_it_starts() {
    let mut spec = async_spec(3);
    spec.primary = Some("orders-2".into());
    let mut observed = healthy_three();
    observed.lease = LeaseState::Held {
        holder: name(1),
        remaining: Duration::from_secs(4),
    };
    let decided = plan(&spec, status(P::Ready, Some(1)).as_ref(), &observed);
    let at = decided
        .actions
        .iter()
        .position(|a| matches!(a, Action::Switchover { .. }))
        .expect("a switchover");
    assert!(at > 0, "{:?}", decided.actions);
    assert_eq!(
        decided.actions[at - 1],
        Action::RecordTargetPrimary {
            name: "orders-2".into()
        }
    );
    // Recorded already (a pass after the record): not written again.
    let mut recorded = status(P::Ready, Some(1));
    if let Some(s) = recorded.as_mut() {
        s.target_primary = Some("orders-2".into());
    }
    let again = plan(&spec, recorded.as_ref(), &observed);
    assert!(
        !again
            .actions
            .iter()
            .any(|a| matches!(a, Action::RecordTargetPrimary { .. })),
        "{:?}",
        again.actions
    );
}

#[test]
fn a_replica_whose_volume_is_full_is_not_promoted() {
    use crate::contract::{VolumeKind, VolumeUsage};
    use crate::lifecycle::volume::{Kind, Volume};
    let mut observed = lost_primary(expired(), 5);
    // orders-3 is the most advanced, and just as full as the primary was.
    if let Some(instance) = observed.instances.get_mut(&3) {
        instance.volumes = vec![Volume {
            kind: Kind(VolumeKind::Data),
            pvc: name(3),
            requested: 1 << 30,
            capacity: Some(1 << 30),
            usage: Some(VolumeUsage {
                volume: VolumeKind::Data,
                total_bytes: 1 << 30,
                available_bytes: 0,
            }),
            ..Volume::default()
        }];
    }
    let decided = plan(
        &async_spec(3),
        status(P::Ready, Some(1)).as_ref(),
        &observed,
    );
    assert_eq!(promotions(&decided.actions), [name(2)]);
}

#[test]
fn a_vanished_lease_holder_stays_a_member_at_its_last_address() {
    let mut observed = lost_primary(expired(), 0);
    // orders-1's pod is gone; the replicas last knew it at 198.18.0.1.
    if let Some(instance) = observed.instances.get_mut(&1) {
        instance.pod = None;
    }
    for serial in [2, 3] {
        if let Some(ha) = observed
            .instances
            .get_mut(&serial)
            .and_then(|i| i.pod.as_mut())
            .and_then(|p| p.ha.as_mut())
        {
            ha.members = (1..=3)
                .map(|s| Member {
                    name: name(s),
                    address: format!("198.18.0.{s}"),
                    tls: false,
                })
                .collect();
        }
    }
    let pushed = |observed: &Observed| -> Vec<Vec<String>> {
        plan(&async_spec(3), status(P::Ready, Some(1)).as_ref(), observed)
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::SetMembers { members, .. } => {
                    Some(members.iter().map(|m| m.name.clone()).collect())
                }
                _ => None,
            })
            .collect()
    };
    // The lease still names orders-1: nothing to push, it stays a member.
    assert!(
        pushed(&observed).iter().all(|m| m.contains(&name(1))),
        "{:?}",
        pushed(&observed)
    );
    // Once another instance holds the lease, orders-1 leaves the members.
    observed.lease = LeaseState::Held {
        holder: name(2),
        remaining: Duration::from_secs(4),
    };
    let after = pushed(&observed);
    assert!(!after.is_empty(), "the members must be pushed again");
    assert!(after.iter().all(|m| !m.contains(&name(1))), "{after:?}");
}
