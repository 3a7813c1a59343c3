//! The pure transition function: `(spec, previous status, observed) -> Plan`.
//! Each concern is a sub-planner contributing actions and verdicts
//! (`requests`, `growth`, `objects`, `metadata`, `scheduling`, `rollout`,
//! `upgrade`, `topology`, `roles`, `configuration`, `resize`, `serving`,
//! `primary`, `backups`, `migrations`, `exposure` (the Services of
//! `spec.expose`), `tls` (certificates, whose Secrets
//! come before the pods that mount them), `endpoints` (the published
//! endpoints' status rows, `Exposed` and the `<db>-app-external` Secret;
//! never a gate on `Ready`), and `deletion` for a Database
//! being deleted); this module puts their actions
//! in a safe order and turns the verdicts into the phase and the conditions.
//! Every decision of a pass is made here: the controller only carries the
//! plan out and writes the status it names.

use crate::api::status::{DatabasePhase, DatabaseStatus, LastBackup, MigrationsStatus};
use crate::api::v1::DatabaseSpec;

use super::action::Action;
use super::context::Context;
pub use super::note::Note;
use super::observed::Observed;
use super::verdict::{self, Desired, Verdict};
use super::{
    alarm, backups, configuration, deletion, endpoints, growth, metadata, migrations, objects,
    primary, requests, roles, rollout, scheduling, serving, tls, topology, upgrade,
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
#[derive(Clone, Debug, PartialEq)]
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
    /// What to record as `status.lastBackup`; `None` keeps the recorded one.
    pub last_backup: Option<LastBackup>,
    /// What to record as `status.migrations`; `None` keeps the recorded one.
    pub migrations: Option<MigrationsStatus>,
    /// Events to publish once the status is written: what a decision found
    /// that no action or condition says (a migration's outcome, the final
    /// backup's).
    pub notes: Vec<Note>,
    /// A Database being deleted may go: the finalizer releases it.
    pub release: bool,
    /// The deletion waits for a human (its final backup failed): the Ready
    /// condition's Event is a warning.
    pub alarm: bool,
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
    /// A switchover is asked for in this pass, or still settling: phase
    /// `SwitchingOver` until the topology is `Ready` with nothing else under
    /// way.
    switching: bool,
    ready_message: String,
    /// The TLS part: stage, `Certificates`, `status.tls`; `None` where TLS
    /// is not observed.
    pub tls: Option<tls::TlsPlan>,
    /// What to record as `status.endpoints`; `None` keeps the recorded
    /// ones (the published endpoints were not observed).
    pub endpoints: Option<Vec<crate::api::expose::EndpointStatus>>,
    /// `Exposed`, beside the others; `None` while `spec.expose` is empty.
    exposed: Option<Desired>,
}

impl Plan {
    /// The plan of a Database being deleted: released, or held with the
    /// deletion's own conditions while its final backup runs or failed.
    fn deleting(previous: Option<&DatabaseStatus>, deletion: deletion::DeletionStep) -> Self {
        let verdicts = vec![Verdict::progress(
            "Deleting",
            "the Database is being deleted",
        )];
        let conditions = match deletion.hold {
            Some(hold) => hold,
            None => verdict::conditions(DatabasePhase::Deleting, &verdicts, false, ""),
        };
        Plan {
            phase: DatabasePhase::Deleting,
            release: deletion.wait_seconds.is_none(),
            requeue_after_seconds: deletion.wait_seconds,
            actions: deletion.actions,
            conditions,
            verdicts,
            current_primary: previous.and_then(|s| s.current_primary.clone()),
            target_primary: previous.and_then(|s| s.target_primary.clone()),
            upgrade: previous.and_then(|s| s.upgrade.clone()),
            last_backup: None,
            migrations: None,
            notes: deletion.notes,
            alarm: deletion.alarm,
            backup: None,
            topology_phase: DatabasePhase::Deleting,
            upgrading: false,
            held: false,
            switching: false,
            ready_message: String::new(),
            tls: None,
            endpoints: None,
            exposed: None,
        }
    }

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
            DatabasePhase::Ready if progress && self.switching => DatabasePhase::SwitchingOver,
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
        self.conditions
            .extend(self.tls.as_ref().map(|t| t.certificates.clone()));
        self.conditions.extend(self.exposed.clone());
    }
}

/// Decides phase, actions and conditions for one pass. Pure and deterministic.
///
/// `spec` is assumed valid (the controller validates first and does not plan for
/// an invalid spec).
pub fn plan(spec: &DatabaseSpec, previous: Option<&DatabaseStatus>, observed: &Observed) -> Plan {
    let ctx = Context::new(spec, previous, observed);
    if observed.deleting {
        return Plan::deleting(previous, deletion::plan(&ctx));
    }
    let requests = requests::plan(&ctx);
    let mut objects = objects::plan(&ctx);
    let rollout = rollout::plan(&ctx);
    let upgrade = upgrade::plan(&ctx, rollout.major, &rollout.image);
    let image = upgrade
        .image
        .clone()
        .unwrap_or_else(|| rollout.image.clone());
    let mut topology = topology::plan(&ctx, requests.hold_bootstrap, &image);
    // TLS Secrets are written before the pods that mount them.
    let tls = super::tls_pass::for_pass(&ctx, &topology.additions);
    let (additions, tls_hold) =
        super::tls_pass::hold_pods(&ctx, tls.as_ref(), std::mem::take(&mut topology.additions));
    topology.additions = additions;
    let (first, unserved) =
        super::tls_pass::hold_unserved(&ctx, std::mem::take(&mut topology.first));
    topology.first = first;
    let (repairs, unserved_repairs) =
        super::tls_pass::hold_unserved(&ctx, std::mem::take(&mut topology.repairs));
    topology.repairs = repairs;
    let backups = backups::plan(&ctx);
    if upgrade.hold {
        return held(&ctx, requests.verdicts, objects, upgrade, topology, backups);
    }
    let roles = roles::plan(&ctx, &topology);
    let configuration = configuration::plan(&ctx, &topology);
    let resize = super::resize::plan(&ctx);
    objects::credentials(&ctx, &topology, &mut objects);

    // What the spec asks for and cannot have comes first: it names the field.
    // A full volume next: it is why an instance stopped, which the topology
    // only sees the effect of; then instances the scheduler cannot place,
    // named with the fields why.
    let growth = growth::plan(&ctx);
    let mut verdicts = requests.verdicts;
    verdicts.extend(growth.verdicts);
    verdicts.extend(scheduling::verdicts(&ctx));
    // A rolling update's word comes before the topology's: an instance it
    // took away is expected, and what it waits for is the news.
    let step = rollout::steps(&ctx, &topology, rollout.rolling);
    verdicts.extend(step.verdicts);
    verdicts.extend(topology_verdicts(&topology));
    verdicts.extend(rollout.verdicts);
    verdicts.extend(upgrade.verdicts);
    verdicts.extend(roles.verdicts.iter().cloned());
    verdicts.extend(configuration.verdicts.iter().cloned());
    verdicts.extend(resize.verdicts);
    verdicts.extend(objects.verdicts.iter().cloned());
    verdicts.extend(serving::plan(&ctx, &topology));
    let (switchover, switchover_verdicts) =
        switchover(&ctx, &topology, rollout.rolling, !step.actions.is_empty());
    verdicts.extend(switchover_verdicts);
    let switching = switchover
        .iter()
        .any(|a| matches!(a, Action::Switchover { .. }))
        || alarm::switchover_wake(&ctx);
    let members = primary::members_actions(&ctx);
    verdicts.extend(backups.verdicts);
    verdicts.extend(tls_hold);
    verdicts.extend(unserved);
    verdicts.extend(unserved_repairs);
    verdicts.extend(tls.iter().flat_map(|t| t.verdicts.iter().cloned()));

    // The order that keeps every step safe: credentials and Services first;
    // the primary's label before anything routes; budgets before pods come or
    // go; the quorum before a standby goes; removals before additions; the
    // configuration once the set is complete.
    let tls_actions: Vec<Action> = tls
        .iter()
        .flat_map(|t| t.actions.iter().cloned().map(Action::Tls))
        .collect();
    let actions: Vec<Action> = [
        objects.first,
        super::exposure::plan(&ctx),
        tls_actions,
        metadata::plan(&ctx),
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
        resize.actions,
        objects.credentials,
        switchover,
        step.actions,
        upgrade.actions,
        backups.actions,
        // Last: a storage driver that refuses must not hold up the rest.
        growth.actions,
    ]
    .into_iter()
    .flatten()
    .collect();

    let requeue = requeue_seconds(
        &ctx,
        (topology.phase, topology.reason, topology.serving),
        &verdicts,
        &actions,
        rollout.rolling,
    );
    let current_primary = topology.primary.map(|s| observed.name(s));
    let target_primary = actions
        .iter()
        .find_map(Action::new_primary)
        .map(str::to_owned)
        .or_else(|| current_primary.clone());
    let mut plan = Plan {
        phase: topology.phase,
        actions,
        requeue_after_seconds: [
            Some(requeue),
            growth.poll_seconds,
            tls.as_ref().and_then(|t| t.requeue_seconds),
        ]
        .into_iter()
        .flatten()
        .min(),
        verdicts,
        conditions: Vec::new(),
        current_primary,
        target_primary,
        upgrade: upgrade.status,
        last_backup: backups.last_backup,
        migrations: None,
        notes: Vec::new(),
        release: false,
        alarm: false,
        backup: backups.condition,
        topology_phase: topology.phase,
        upgrading: rollout.rolling || upgrade.active,
        held: false,
        switching,
        ready_message: topology.message,
        tls,
        endpoints: None,
        exposed: None,
    };
    plan.settle();
    plan.finish(&ctx, backups.next_run_seconds);
    plan
}

/// What the topology's phase says in the conditions.
fn topology_verdicts(topology: &super::shape::Topology) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
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
    ) || topology.alarm
    {
        verdicts.push(Verdict::degraded(topology.reason, topology.message.clone()));
    }
    verdicts
}

/// `spec.primary`'s switchover, unless a rolling update is under way that
/// it would race, or that is about to replace the instance it names: then
/// the request waits for it.
fn switchover(
    ctx: &Context,
    topology: &super::shape::Topology,
    rolling: bool,
    rolling_now: bool,
) -> (Vec<Action>, Vec<Verdict>) {
    let reporting = topology.reporting_primary.map(|(s, _)| ctx.name(s));
    match ctx.spec.primary.as_deref() {
        Some(wanted)
            if rolling
                && reporting.as_deref() != Some(wanted)
                && (rolling_now || rollout::outdated(ctx, wanted)) =>
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
        _ => primary::switchover(ctx, topology),
    }
}

/// When to look again: soon while something is under way (at once while the
/// primary does not serve, quickly while rolling), rarely when steady.
fn requeue_seconds(
    ctx: &Context,
    (phase, reason, serving): (DatabasePhase, &str, bool),
    verdicts: &[Verdict],
    actions: &[Action],
    rolling: bool,
) -> u64 {
    let only_blocked = verdicts
        .iter()
        .all(|v| matches!(v, Verdict::Blocked { .. }));
    let steady = phase == DatabasePhase::Ready && serving && actions.is_empty() && only_blocked;
    let watching_primary = ctx.observed.lease != super::observed::LeaseState::Unobserved
        && (matches!(
            phase,
            DatabasePhase::FailingOver | DatabasePhase::SwitchingOver
        ) || matches!(
            reason,
            "PrimaryUnreachable" | "PrimaryDown" | "PrimaryUnavailable"
        ));
    if steady {
        REQUEUE_STEADY_SECONDS
    } else if watching_primary {
        REQUEUE_FAILOVER_SECONDS
    } else if rolling {
        REQUEUE_ROLLOUT_SECONDS
    } else {
        REQUEUE_SOON_SECONDS
    }
}

/// A pass while a major upgrade holds the instances stopped: the Secrets,
/// Services and Lease are kept, and only the upgrade acts on instances.
fn held(
    ctx: &Context,
    mut verdicts: Vec<Verdict>,
    objects: objects::Objects,
    upgrade: upgrade::Upgrade,
    topology: super::shape::Topology,
    backups: backups::Backups,
) -> Plan {
    verdicts.extend(upgrade.verdicts);
    verdicts.extend(objects.verdicts.iter().cloned());
    let actions: Vec<Action> = objects
        .first
        .into_iter()
        .chain(upgrade.actions)
        .chain(backups.actions)
        .collect();
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
        last_backup: backups.last_backup,
        migrations: None,
        notes: Vec::new(),
        release: false,
        alarm: false,
        backup: backups.condition,
        topology_phase: topology.phase,
        upgrading: true,
        held: true,
        switching: false,
        ready_message: String::new(),
        tls: None,
        endpoints: None,
        exposed: None,
    };
    plan.settle();
    plan.finish(ctx, backups.next_run_seconds);
    plan
}

impl Plan {
    /// What is decided once the phase is: schema migrations (they start only
    /// on a settled Database), when to look again, and the record of a new
    /// target before the promotion that makes it primary.
    fn finish(&mut self, ctx: &Context, next_run_seconds: Option<u64>) {
        let exposure = endpoints::plan(ctx.observed);
        let exposure_requeue = exposure.as_ref().and_then(|e| e.requeue_seconds);
        if let Some(exposure) = exposure {
            self.actions.extend(exposure.actions);
            self.endpoints = Some(exposure.endpoints);
            self.exposed = exposure.condition;
            self.settle();
        }
        let migration = migrations::plan(ctx, self.phase == DatabasePhase::Ready);
        self.actions.extend(migration.actions());
        self.migrations = migration.status;
        self.notes = migration.notes;
        if let Some(verdict) = migration.verdict {
            self.add(verdict);
        }
        let watch = migration.watch.then_some(migrations::POLL_SECONDS);
        self.requeue_after_seconds = [
            self.requeue_after_seconds,
            next_run_seconds,
            watch,
            exposure_requeue,
        ]
        .into_iter()
        .flatten()
        .min();
        let recorded = ctx.previous.and_then(|s| s.target_primary.as_deref());
        if let Some(at) = self.actions.iter().position(|a| a.new_primary().is_some())
            && self.target_primary.as_deref() != recorded
            && let Some(name) = self.target_primary.clone()
        {
            self.actions
                .insert(at, Action::RecordTargetPrimary { name });
        }
    }
}
