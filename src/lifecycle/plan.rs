//! The pure transition function: `(spec, previous status, observed) -> Plan`.
//! Each concern is a sub-planner contributing actions and verdicts
//! (`requests`, `objects`, `rollout`, `topology`, `roles`, `configuration`,
//! `serving`, `failover`, `backup`); this module puts their actions in a safe
//! order and turns the verdicts into the phase and the conditions.

use crate::api::status::{DatabasePhase, DatabaseStatus};
use crate::api::v1::DatabaseSpec;

use super::action::Action;
use super::context::Context;
use super::observed::Observed;
use super::verdict::{self, Desired, Verdict};
use super::{
    backup, configuration, failover, objects, requests, roles, rollout, serving, topology, upgrade,
};

/// Requeue delay while something is under way or unclear: instance managers are
/// polled, not watched, so only a requeue notices their changes.
pub const REQUEUE_SOON_SECONDS: u64 = 5;
/// Requeue delay while the primary does not serve: a failover is decided on
/// the lease's and the instances' word, which only a new pass reads.
pub const REQUEUE_FAILOVER_SECONDS: u64 = 1;
/// Requeue delay while a rolling update runs: the next instance goes as soon
/// as a pass sees the last one back, which only polling its manager tells.
pub const REQUEUE_ROLLOUT_SECONDS: u64 = 2;
/// Requeue delay in a steady state, to keep polling the instance managers.
pub const REQUEUE_STEADY_SECONDS: u64 = 60;

/// The decision for one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub phase: DatabasePhase,
    /// To apply in this order, stopping at the first failure.
    pub actions: Vec<Action>,
    /// `None` only while deleting, where the finalizer drives the work.
    pub requeue_after_seconds: Option<u64>,
    /// What the sub-planners found; the conditions come from them.
    pub verdicts: Vec<Verdict>,
    /// Ready, Progressing and Degraded, always all three; BackupHealthy when
    /// the Database has an object store.
    pub conditions: Vec<Desired>,
    /// What to record as `status.currentPrimary`: the next pass relies on it to
    /// recognise the primary's data when its pod is gone.
    pub current_primary: Option<String>,
    /// What to record as `status.targetPrimary`: the instance being promoted
    /// while a failover or switchover runs, else the current primary.
    pub target_primary: Option<String>,
    /// What to record as `status.upgrade`.
    pub upgrade: Option<crate::api::status::UpgradeStatus>,
    /// `BackupHealthy`, beside the three the verdicts make.
    backup: Option<Desired>,
    /// The phase the topology alone would show, before verdicts weigh in.
    topology_phase: DatabasePhase,
    /// A rolling update or a major upgrade is under way: phase `Upgrading`
    /// while the topology shows nothing more pressing.
    upgrading: bool,
    /// A major upgrade holds every instance stopped: phase `Upgrading`
    /// whatever the topology shows.
    held: bool,
    ready_message: String,
}

impl Plan {
    /// Adds a verdict found while applying (an instance refused an action),
    /// and recomputes the phase and conditions.
    pub fn add(&mut self, verdict: Verdict) {
        self.verdicts.push(verdict);
        self.settle();
    }

    fn settle(&mut self) {
        let blocked = self
            .verdicts
            .iter()
            .any(|v| matches!(v, Verdict::Blocked { .. }));
        let progress = self
            .verdicts
            .iter()
            .any(|v| matches!(v, Verdict::Progress { .. }));
        self.phase = match self.topology_phase {
            _ if self.held => DatabasePhase::Upgrading,
            DatabasePhase::Ready if blocked => DatabasePhase::Blocked,
            DatabasePhase::Ready
            | DatabasePhase::Configuring
            | DatabasePhase::CreatingReplicas
            | DatabasePhase::Degraded
            | DatabasePhase::SwitchingOver
                if self.upgrading =>
            {
                DatabasePhase::Upgrading
            }
            DatabasePhase::Ready if progress => DatabasePhase::Configuring,
            phase => phase,
        };
        self.conditions = verdict::conditions(
            self.phase,
            &self.verdicts,
            !self.actions.is_empty(),
            &self.ready_message,
        );
        self.conditions.extend(self.backup.clone());
    }
}

/// Decides phase, actions and conditions for one pass. Pure and deterministic.
///
/// `spec` is assumed valid (the controller validates first and does not plan for
/// an invalid spec).
pub fn plan(spec: &DatabaseSpec, previous: Option<&DatabaseStatus>, observed: &Observed) -> Plan {
    if observed.deleting {
        let verdicts = vec![Verdict::progress(
            "Deleting",
            "the Database is being deleted",
        )];
        return Plan {
            phase: DatabasePhase::Deleting,
            actions: Vec::new(),
            requeue_after_seconds: None,
            conditions: verdict::conditions(DatabasePhase::Deleting, &verdicts, false, ""),
            verdicts,
            current_primary: previous.and_then(|s| s.current_primary.clone()),
            target_primary: previous.and_then(|s| s.target_primary.clone()),
            upgrade: previous.and_then(|s| s.upgrade.clone()),
            backup: None,
            topology_phase: DatabasePhase::Deleting,
            upgrading: false,
            held: false,
            ready_message: String::new(),
        };
    }
    let ctx = Context::new(spec, previous, observed);
    let requests = requests::plan(&ctx);
    let mut objects = objects::plan(&ctx);
    let rollout = rollout::plan(&ctx);
    let upgrade = upgrade::plan(&ctx, rollout.major, &rollout.image);
    let image = upgrade
        .image
        .clone()
        .unwrap_or_else(|| rollout.image.clone());
    let topology = topology::plan(&ctx, requests.hold_bootstrap, &image);
    if upgrade.hold {
        return held(&ctx, requests.verdicts, objects, upgrade, topology);
    }
    let roles = roles::plan(&ctx, &topology);
    let configuration = configuration::plan(&ctx, &topology);
    objects::credentials(&ctx, &topology, &mut objects);

    // What the spec asks for and cannot have comes first: it names the field.
    let mut verdicts = requests.verdicts;
    // A rolling update's word comes before the topology's: an instance it
    // took away is expected, and what it waits for is the news.
    let step = rollout::steps(&ctx, &topology, rollout.rolling);
    verdicts.extend(step.verdicts);
    match topology.phase {
        DatabasePhase::Ready => {}
        DatabasePhase::Failed | DatabasePhase::FailingOver | DatabasePhase::Blocked => {
            verdicts.push(Verdict::blocked(topology.reason, topology.message.clone()));
        }
        _ => verdicts.push(Verdict::progress(topology.reason, topology.message.clone())),
    }
    if matches!(
        topology.phase,
        DatabasePhase::Degraded | DatabasePhase::Failed | DatabasePhase::FailingOver
    ) || topology.reason == "PrimaryUnreachable"
    {
        verdicts.push(Verdict::degraded(topology.reason, topology.message.clone()));
    }
    verdicts.extend(rollout.verdicts);
    verdicts.extend(upgrade.verdicts);
    verdicts.extend(roles.verdicts.iter().cloned());
    verdicts.extend(configuration.verdicts.iter().cloned());
    verdicts.extend(objects.verdicts.iter().cloned());
    verdicts.extend(serving::plan(&ctx, &topology));
    let reporting = topology.reporting_primary.map(|(s, _)| ctx.name(s));
    let (switchover, switchover_verdicts) = match spec.primary.as_deref() {
        // A switchover of its own would race the rolling update's, or go to
        // an instance it is about to replace: the request waits for it.
        Some(wanted)
            if rollout.rolling
                && reporting.as_deref() != Some(wanted)
                && (!step.actions.is_empty() || rollout::outdated(&ctx, wanted)) =>
        {
            (
                Vec::new(),
                vec![Verdict::progress(
                    "SwitchoverWaiting",
                    format!(
                        "spec.primary: switching over to {wanted} waits for the rolling update"
                    ),
                )],
            )
        }
        _ => failover::switchover(&ctx, &topology),
    };
    verdicts.extend(switchover_verdicts);
    let members = failover::members_actions(&ctx);
    verdicts.extend(backup::verdicts(&ctx));

    // The order that keeps every step safe: credentials and Services first;
    // the primary's label before anything routes; budgets before pods come or
    // go; the quorum before a standby goes; removals before additions; the
    // configuration once the set is complete.
    let actions: Vec<Action> = [
        objects.first,
        topology.first,
        roles.primary_label,
        topology.budgets,
        roles.replica_labels,
        roles.sync,
        topology.removals,
        topology.slots,
        topology.additions,
        topology.repairs,
        members,
        configuration.actions,
        objects.credentials,
        switchover,
        step.actions,
        upgrade.actions,
    ]
    .into_iter()
    .flatten()
    .collect();

    let only_blocked = verdicts
        .iter()
        .all(|v| matches!(v, Verdict::Blocked { .. }));
    let steady = topology.phase == DatabasePhase::Ready
        && topology.serving
        && actions.is_empty()
        && only_blocked;
    let watching_primary = observed.lease != super::observed::LeaseState::Unobserved
        && (matches!(
            topology.phase,
            DatabasePhase::FailingOver | DatabasePhase::SwitchingOver
        ) || matches!(
            topology.reason,
            "PrimaryUnreachable" | "PrimaryDown" | "PrimaryUnavailable"
        ));
    let requeue = if steady {
        REQUEUE_STEADY_SECONDS
    } else if watching_primary {
        REQUEUE_FAILOVER_SECONDS
    } else if rollout.rolling {
        REQUEUE_ROLLOUT_SECONDS
    } else {
        REQUEUE_SOON_SECONDS
    };
    let current_primary = topology.primary.map(|s| observed.name(s));
    let target_primary = actions
        .iter()
        .find_map(Action::new_primary)
        .map(str::to_owned)
        .or_else(|| current_primary.clone());
    let mut plan = Plan {
        phase: topology.phase,
        actions,
        requeue_after_seconds: Some(requeue),
        verdicts,
        conditions: Vec::new(),
        current_primary,
        target_primary,
        upgrade: upgrade.status,
        backup: backup::condition(&ctx),
        topology_phase: topology.phase,
        upgrading: rollout.rolling || upgrade.active,
        held: false,
        ready_message: topology.message,
    };
    plan.settle();
    plan
}

/// A pass while a major upgrade holds the instances stopped: the Secrets,
/// Services and Lease are kept, and only the upgrade acts on instances.
fn held(
    ctx: &Context,
    mut verdicts: Vec<Verdict>,
    objects: objects::Objects,
    upgrade: upgrade::Upgrade,
    topology: topology::Topology,
) -> Plan {
    verdicts.extend(upgrade.verdicts);
    verdicts.extend(objects.verdicts.iter().cloned());
    let actions: Vec<Action> = objects.first.into_iter().chain(upgrade.actions).collect();
    let primary = topology.primary.map(|s| ctx.name(s));
    let mut plan = Plan {
        phase: DatabasePhase::Upgrading,
        actions,
        requeue_after_seconds: Some(REQUEUE_SOON_SECONDS),
        verdicts,
        conditions: Vec::new(),
        current_primary: primary.clone(),
        target_primary: primary,
        upgrade: upgrade.status,
        backup: backup::condition(ctx),
        topology_phase: topology.phase,
        upgrading: true,
        held: true,
        ready_message: String::new(),
    };
    plan.settle();
    plan
}
