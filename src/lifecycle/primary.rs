//! Failover and switchover: which instance should be primary when the one
//! recorded is not serving, and `spec.primary`. The decision itself is
//! [`crate::failover::candidate::elect`], the same function the model checker
//! runs; this module gathers its inputs from what was observed and turns the
//! outcome into actions.
//!
//! - Members: every answering manager is told who the instances are and
//!   where, so that they can call each other.
//! - Failover: the recorded primary is down, unreachable or gone; the lease
//!   (as the operator observes it) has expired or was released, enough other
//!   instances confirm they no longer hear from it, and the most advanced
//!   eligible replica is told to promote (it takes the lease first). A lease
//!   that already names a replica (a handover half done, or an operator
//!   restarted mid-way) is completed by promoting that replica.
//! - Switchover: `spec.primary` names a healthy replica; the primary hands
//!   over after a clean stop, then the replica promotes.

use crate::api::status::{DatabasePhase, InstanceRole};
use crate::api::v1::ReplicationMode;
use crate::contract::Member;
use crate::failover::candidate::{self, Candidate, Decision, Situation, SyncQuorum};
use crate::failover::quorum::Report;
use crate::failover::{Rules, Timing};

use super::action::Action;
use super::context::Context;
use super::observed::{InstanceState, LeaseState};
use super::roles::desired_sync;
use super::shape::Topology;
use super::verdict::Verdict;

/// The members as the managers should know them: every instance with a pod
/// address, by name; and the lease holder while the lease names it, at the
/// address the managers last had for it, when its pod is gone. A primary
/// that vanished without releasing its lease can only be failed over once
/// the replicas confirm it silent, which they judge only of members.
fn members(ctx: &Context) -> Vec<Member> {
    let mut members: Vec<Member> = ctx
        .members
        .iter()
        .filter_map(|s| {
            let pod = ctx.observed.instances.get(s)?.pod.as_ref()?;
            Some(Member {
                name: ctx.name(*s),
                address: pod.address.clone()?,
                tls: pod.tls,
            })
        })
        .collect();
    if let Some(holder) = ctx.observed.lease.holder()
        && !members.iter().any(|m| m.name == holder)
        && ctx.members.iter().any(|s| ctx.name(*s) == holder)
        && let Some(known) = ctx
            .observed
            .instances
            .values()
            .filter_map(|i| i.pod.as_ref()?.ha.as_ref())
            .flat_map(|ha| &ha.members)
            .find(|m| m.name == holder)
    {
        members.push(known.clone());
    }
    members.sort();
    members
}

/// Push the member list to every answering manager that has another one.
pub(super) fn members_actions(ctx: &Context) -> Vec<Action> {
    let want = members(ctx);
    ctx.members
        .iter()
        .filter_map(|s| {
            let pod = ctx.observed.instances.get(s)?.pod.as_ref()?;
            let ha = pod.ha.as_ref()?;
            (ha.members != want).then(|| Action::SetMembers {
                name: ctx.name(*s),
                members: want.clone(),
            })
        })
        .collect()
}

/// Leader selection runs: the Lease and the managers' access to it exist.
pub(super) fn enabled(ctx: &Context) -> bool {
    ctx.observed.lease_access && ctx.observed.lease != LeaseState::Unobserved
}

/// The synchronous settings for a new primary `serial`: the quorum over the
/// other members, as the spec asks.
pub(super) fn sync_for(ctx: &Context, serial: u32) -> (Vec<String>, i32) {
    let quorum = desired_sync(
        ctx.spec,
        ctx.members
            .iter()
            .filter(|s| **s != serial)
            .map(|s| ctx.name(*s)),
    );
    (quorum.standbys, quorum.min)
}

fn promote(ctx: &Context, serial: u32, from: u32) -> Action {
    let (standbys, min) = sync_for(ctx, serial);
    Action::Promote {
        name: ctx.name(serial),
        from: ctx.name(from),
        standbys,
        min,
    }
}

/// The recorded primary `primary` is not serving (`down`: its pod is gone,
/// failed or terminating). A failover topology, or `None` to let the
/// topology restart it in place.
pub(super) fn replace(ctx: &Context, primary: u32, down: bool) -> Option<Topology> {
    if ctx.members.len() < 2 {
        return None;
    }
    if down && ctx.observed.lease_access && ctx.observed.lease == LeaseState::Unobserved {
        return Some(lease_unread(ctx, primary));
    }
    if !enabled(ctx) {
        return None;
    }
    if let Some(topology) = finish_handover(ctx, primary) {
        return Some(topology);
    }
    if let Some(alive) = alive(ctx, primary, down) {
        return alive;
    }
    let primary_name = ctx.name(primary);
    let observed = ctx.observed;
    let (reports, candidates) = electorate(ctx, primary);
    let sync = (ctx.spec.replication.mode == ReplicationMode::Sync).then(|| {
        let (standbys, min) = sync_for(ctx, primary);
        SyncQuorum {
            standbys,
            min: usize::try_from(min).unwrap_or(0),
        }
    });
    let situation = Situation {
        lease: &observed.lease,
        primary: &primary_name,
        members: ctx.members.len(),
        reports: &reports,
        candidates: &candidates,
        sync: sync.as_ref().filter(|s| s.min > 0),
        delay: std::time::Duration::from_secs(
            u64::try_from(ctx.spec.failover.delay_seconds).unwrap_or(0),
        ),
    };
    match candidate::elect(&situation, &Timing::DEFAULT, &Rules::ALL) {
        Decision::Promote(name) => {
            let serial = observed.serial_of(&name)?;
            let mut topology = Topology::wait(
                DatabasePhase::FailingOver,
                "FailingOver",
                format!("primary {primary_name} is gone; promoting {name}"),
            )
            .primary(primary);
            topology.first.push(promote(ctx, serial, primary));
            Some(topology)
        }
        Decision::Wait(why) => not_yet(ctx, primary, down, &why, &reports, &candidates),
    }
}

/// Leader selection runs but this operator has not read the Lease yet (it
/// has just started: a new leader, or a restart in the middle of a
/// failover). Restarting the primary on its volume now would race, and
/// usually beat, the failover the Lease allows a moment later; the first read
/// comes with the watch's initial list.
fn lease_unread(ctx: &Context, primary: u32) -> Topology {
    unavailable(
        ctx,
        primary,
        "not deciding before the primary lease is read",
    )
}

/// The primary does not serve and no failover is decided yet: why.
fn unavailable(ctx: &Context, primary: u32, why: &str) -> Topology {
    Topology::wait(
        if super::alarm::starting(ctx, primary) {
            DatabasePhase::InitializingPrimary
        } else {
            DatabasePhase::FailingOver
        },
        "PrimaryUnavailable",
        format!("primary {} does not serve; {why}", ctx.name(primary)),
    )
    .primary(primary)
}

/// A lease already handed to a replica: finish that promotion.
fn finish_handover(ctx: &Context, primary: u32) -> Option<Topology> {
    let observed = ctx.observed;
    let primary_name = ctx.name(primary);
    if let LeaseState::Held { holder, .. } = &observed.lease
        && *holder != primary_name
        && let Some(serial) = observed.serial_of(holder)
        && ctx
            .instance(serial)
            .and_then(|i| i.status())
            .is_some_and(|s| s.role == InstanceRole::Replica)
    {
        let mut topology = Topology::wait(
            DatabasePhase::FailingOver,
            "Promoting",
            format!("promoting {holder}, which holds the primary lease"),
        )
        .primary(primary);
        topology.first.push(promote(ctx, serial, primary));
        return Some(topology);
    }
    None
}

/// A primary that renews its lease is alive: unreachable for a moment (a
/// restart), or its pod just deleted while it shuts down (it releases the
/// lease when it has stopped). Not recreated meanwhile: the failover that
/// follows would only race the restart. `Some(decision)` when it holds the
/// lease.
fn alive(ctx: &Context, primary: u32, down: bool) -> Option<Option<Topology>> {
    let observed = ctx.observed;
    let primary_name = ctx.name(primary);
    if let LeaseState::Held { holder, remaining } = &observed.lease
        && *holder == primary_name
    {
        if !down {
            return Some(None);
        }
        return Some(Some(
            Topology::wait(
                if super::alarm::starting(ctx, primary) {
                    DatabasePhase::InitializingPrimary
                } else {
                    DatabasePhase::Degraded
                },
                "PrimaryDown",
                format!(
                    "primary {primary_name} is not running; its lease runs out in {:.1} s unless it is released first",
                    remaining.as_secs_f64()
                ),
            )
            .primary(primary),
        ));
    }
    None
}

/// What the other instances say of the primary, and the replicas that could
/// replace it.
fn electorate(ctx: &Context, primary: u32) -> (Vec<Report>, Vec<Candidate>) {
    let observed = ctx.observed;
    let primary_name = ctx.name(primary);
    let others: Vec<u32> = ctx
        .members
        .iter()
        .copied()
        .filter(|s| *s != primary)
        .collect();
    let reports: Vec<_> = others
        .iter()
        .filter_map(|s| {
            let pod = observed.instances.get(s)?.pod.as_ref()?;
            pod.manager?;
            pod.ha.as_ref()?.peers.get(&primary_name).copied()
        })
        .collect();
    let candidates: Vec<Candidate> = others
        .iter()
        .filter_map(|s| {
            let instance = ctx.instance(*s)?;
            match instance.state() {
                InstanceState::Known(status) if status.role == InstanceRole::Replica => {
                    Some(Candidate {
                        name: ctx.name(*s),
                        timeline: status.timeline,
                        received: status.received_lsn,
                        replayed: status.replayed_lsn,
                        healthy: status.ready,
                        full: instance.volumes.iter().any(|v| v.full()),
                    })
                }
                _ => None,
            }
        })
        .collect();
    (reports, candidates)
}

/// No promotion yet: say why, unless restarting the primary on its volume
/// is the way (nobody to promote, or nobody takes part in the heartbeat).
fn not_yet(
    ctx: &Context,
    primary: u32,
    down: bool,
    why: &str,
    reports: &[Report],
    candidates: &[Candidate],
) -> Option<Topology> {
    let observed = ctx.observed;

    let settled = matches!(
        observed.lease,
        LeaseState::Expired { .. } | LeaseState::Released
    );
    let nobody = candidates.iter().all(|c| !c.healthy);
    if down && (nobody || (settled && reports.is_empty())) {
        // Nobody to promote, or no instance takes part in the
        // heartbeat: restarting it on its volume is safe, since its
        // manager starts PostgreSQL only under the lease.
        return None;
    }
    Some(unavailable(
        ctx,
        primary,
        &format!("not failing over yet: {why}"),
    ))
}

/// `spec.primary`: hand the primary role to the named replica.
pub(super) fn switchover(ctx: &Context, topology: &Topology) -> (Vec<Action>, Vec<Verdict>) {
    let Some(wanted) = ctx.spec.primary.as_deref() else {
        return (Vec::new(), Vec::new());
    };
    let Some((primary, _)) = topology.reporting_primary else {
        // No primary to hand over from (a failover, or a restart, runs):
        // the request stands and is taken up once one serves.
        if topology.primary.is_some_and(|p| ctx.name(p) != wanted) {
            return (
                Vec::new(),
                vec![Verdict::progress(
                    "SwitchoverWaiting",
                    format!(
                        "spec.primary: switching over to {wanted} waits until a primary serves"
                    ),
                )],
            );
        }
        return (Vec::new(), Vec::new());
    };
    if ctx.name(primary) == wanted {
        return (Vec::new(), Vec::new());
    }
    let refuse = |message: String| {
        (
            Vec::new(),
            vec![Verdict::blocked("SwitchoverRefused", message)],
        )
    };
    if !enabled(ctx) {
        return refuse(format!(
            "spec.primary: {wanted} cannot take over yet: the instances do not hold the primary lease"
        ));
    }
    let Some(serial) = ctx
        .observed
        .serial_of(wanted)
        .filter(|s| ctx.members.contains(s))
    else {
        return refuse(format!(
            "spec.primary: {wanted} is not an instance of this Database"
        ));
    };
    if !topology.serving {
        return (
            Vec::new(),
            vec![Verdict::progress(
                "SwitchoverWaiting",
                format!("spec.primary: switching over to {wanted} waits for the primary to serve"),
            )],
        );
    }
    let healthy = ctx
        .instance(serial)
        .is_some_and(super::observed::Instance::healthy_replica);
    if !healthy {
        return refuse(format!(
            "spec.primary: {wanted} is not a ready, streaming replica; switchover waits"
        ));
    }
    let (standbys, min) = sync_for(ctx, serial);
    (
        vec![Action::Switchover {
            from: ctx.name(primary),
            to: wanted.to_owned(),
            standbys,
            min,
        }],
        vec![Verdict::progress(
            "SwitchingOver",
            format!(
                "handing the primary role from {} to {wanted}",
                ctx.name(primary)
            ),
        )],
    )
}
