//! Roles: the `tusk.dev/role` labels the Services select on, and the quorum of
//! synchronous standbys on the primary.

use crate::api::status::InstanceRole;
use crate::api::v1::{DatabaseSpec, ReplicationMode};

use super::action::Action;
use super::context::Context;
use super::observed::SyncStandbys;
use super::shape::Topology;
use super::verdict::Verdict;

#[derive(Default)]
pub(super) struct Roles {
    /// Labelling the primary comes first: the `-rw` Service follows it.
    pub primary_label: Vec<Action>,
    pub replica_labels: Vec<Action>,
    /// Before any standby goes, so the primary never waits for one being deleted.
    pub sync: Vec<Action>,
    pub verdicts: Vec<Verdict>,
}

pub(super) fn plan(ctx: &Context, topology: &Topology) -> Roles {
    let mut roles = Roles::default();
    let Some((primary, _)) = topology.reporting_primary else {
        return roles;
    };
    let observed = ctx.observed;
    let label = |serial: u32| {
        observed
            .instances
            .get(&serial)
            .and_then(|i| i.pod.as_ref())
            .and_then(|p| p.role_label)
    };
    let mut relabelled = Vec::new();
    // After a failover the old primary's pod may still carry the label (its
    // manager unreachable, fenced): the lease says it cannot write, and the
    // -rw Service must not route to it when it comes back.
    if ctx.holds_lease(primary) {
        for &serial in ctx.members.iter().filter(|s| **s != primary) {
            if label(serial) == Some(InstanceRole::Primary)
                && !observed
                    .instances
                    .get(&serial)
                    .is_some_and(super::observed::Instance::reports_primary)
            {
                roles.primary_label.push(Action::LabelRole {
                    name: ctx.name(serial),
                    role: InstanceRole::Replica,
                });
                relabelled.push(ctx.name(serial));
            }
        }
    }
    if label(primary) != Some(InstanceRole::Primary) && ctx.no_other_primary(primary) {
        roles.primary_label.push(Action::LabelRole {
            name: ctx.name(primary),
            role: InstanceRole::Primary,
        });
        relabelled.push(ctx.name(primary));
    }
    if !topology.serving {
        return roles;
    }
    for &serial in &topology.keep {
        let Some(instance) = observed.instances.get(&serial) else {
            continue;
        };
        if instance.status().map(|s| s.role) == Some(InstanceRole::Replica)
            && label(serial) != Some(InstanceRole::Replica)
        {
            roles.replica_labels.push(Action::LabelRole {
                name: ctx.name(serial),
                role: InstanceRole::Replica,
            });
            relabelled.push(ctx.name(serial));
        }
    }
    if !relabelled.is_empty() {
        roles.verdicts.push(Verdict::progress(
            "LabellingRoles",
            format!("labelling the roles of {}", relabelled.join(", ")),
        ));
    }
    let want = desired_sync(
        ctx.spec,
        topology
            .keep
            .iter()
            .chain(&topology.new)
            .map(|s| ctx.name(*s)),
    );
    if observed.sync != want {
        let message = if want.min > 0 {
            format!(
                "setting synchronous_standby_names to ANY {} ({})",
                want.min,
                want.standbys.join(", ")
            )
        } else {
            "turning synchronous replication off".to_owned()
        };
        roles.verdicts.push(Verdict::progress(
            "ConfiguringSynchronousReplication",
            message,
        ));
        roles.sync.push(Action::ConfigureSync {
            primary: ctx.name(primary),
            standbys: want.standbys,
            min: want.min,
        });
    }
    roles
}

/// `synchronous_standby_names` for `standbys` under `spec`: off in async mode;
/// in sync mode a quorum of `minSyncReplicas`, never more than there are
/// standbys (a larger quorum would block every commit).
pub(super) fn desired_sync(
    spec: &DatabaseSpec,
    standbys: impl Iterator<Item = String>,
) -> SyncStandbys {
    if spec.replication.mode != ReplicationMode::Sync {
        return SyncStandbys::default();
    }
    let standbys: Vec<String> = standbys.collect();
    let available = i32::try_from(standbys.len()).unwrap_or(i32::MAX);
    let min = spec.replication.min_sync_replicas.clamp(0, available);
    if min == 0 {
        return SyncStandbys::default();
    }
    SyncStandbys { standbys, min }
}
