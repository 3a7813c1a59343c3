//! The pure transition function: `(spec, previous status, observed) -> Plan`.
//!
//! Safety comes before progress everywhere: when an instance's state is Unknown
//! the plan waits rather than guesses, a primary is only ever created or labelled
//! when no other instance is or may be one, and data (a PVC) is only deleted
//! below a ready primary that holds everything that data holds.

use std::collections::BTreeSet;

use crate::api::status::{DatabasePhase, DatabaseStatus, InstanceRole};
use crate::api::v1::{DatabaseSpec, ReplicationMode};
use crate::controller::conditions::{DEGRADED, Desired, PROGRESSING, READY};
use crate::postgres::identifiers::slot_name;
use crate::postgres::params::Change;

use super::action::{Action, Bootstrap, DeleteReason};
use super::observed::{Instance, InstanceState, ManagerStatus, Observed, SyncStandbys};

/// Requeue delay while something is under way or unclear: instance managers are
/// polled, not watched, so only a requeue notices their changes.
pub const REQUEUE_SOON_SECONDS: u64 = 5;
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
    /// Ready, Progressing and Degraded, always all three.
    pub conditions: Vec<Desired>,
    /// What to record as `status.currentPrimary`: the next pass relies on it to
    /// recognise the primary's data when its pod is gone.
    pub current_primary: Option<String>,
}

/// Decides phase, actions and conditions for one pass. Pure and deterministic.
///
/// `spec` is assumed valid (the controller validates first and does not plan for
/// an invalid spec; that is where `Pending` stays).
pub fn plan(spec: &DatabaseSpec, previous: Option<&DatabaseStatus>, observed: &Observed) -> Plan {
    if observed.deleting {
        return Plan {
            phase: DatabasePhase::Deleting,
            actions: Vec::new(),
            requeue_after_seconds: None,
            conditions: conditions(
                false,
                true,
                false,
                "Deleting",
                "the Database is being deleted",
            ),
            current_primary: previous.and_then(|s| s.current_primary.clone()),
        };
    }
    let ctx = Context::new(spec, previous, observed);
    let mut actions = Vec::new();
    // Secrets and Services are idempotent applies that endanger nothing, so they
    // are (re)created whatever else is going on.
    if !observed.secrets {
        actions.push(Action::EnsureSecrets);
    }
    if !observed.services {
        actions.push(Action::EnsureServices);
    }
    let mut decision = match find_primary(&ctx) {
        PrimaryView::One(serial, status) => with_primary(&ctx, serial, status, &mut actions),
        PrimaryView::Many => Decision::wait(
            DatabasePhase::Failed,
            "MultiplePrimaries",
            "more than one instance reports itself primary; Tusk changes nothing until one steps down",
        ),
        PrimaryView::Unreachable(serial) => Decision::wait(
            ctx.keep_phase(),
            "PrimaryUnreachable",
            format!(
                "the instance manager of primary {} does not answer; waiting before acting",
                observed.name(serial)
            ),
        )
        .primary(serial),
        PrimaryView::Down(serial) => recover_primary(&ctx, serial, &mut actions),
        PrimaryView::Gone(serial) => primary_gone(&ctx, serial),
        PrimaryView::None => bootstrap(&ctx, &mut actions),
    };
    if decision.primary.is_none() {
        decision.primary = ctx.recorded_primary();
    }
    let phase = decision.phase;
    let progressing = !actions.is_empty() || !matches!(phase, DatabasePhase::Ready);
    // A kept `Ready` while the primary does not answer is no steady state.
    let steady = phase == DatabasePhase::Ready && decision.serving && actions.is_empty();
    let requeue = if steady {
        REQUEUE_STEADY_SECONDS
    } else {
        REQUEUE_SOON_SECONDS
    };
    let degraded = matches!(
        phase,
        DatabasePhase::Degraded | DatabasePhase::Failed | DatabasePhase::FailingOver
    ) || decision.reason == "PrimaryUnreachable";
    Plan {
        phase,
        actions,
        requeue_after_seconds: Some(requeue),
        conditions: conditions(
            decision.serving,
            progressing,
            degraded,
            decision.reason,
            decision.message,
        ),
        current_primary: decision.primary.map(|s| observed.name(s)),
    }
}

/// The inputs, with what every branch needs derived once.
struct Context<'a> {
    spec: &'a DatabaseSpec,
    previous: Option<&'a DatabaseStatus>,
    observed: &'a Observed,
    /// Serials with a PVC or a Pod (an entry with neither does not exist).
    members: BTreeSet<u32>,
    /// Still on the way to the first Ready.
    bootstrapping: bool,
}

impl<'a> Context<'a> {
    fn new(
        spec: &'a DatabaseSpec,
        previous: Option<&'a DatabaseStatus>,
        observed: &'a Observed,
    ) -> Self {
        let members = observed
            .instances
            .iter()
            .filter(|(_, i)| i.pvc.is_some() || i.pod.is_some())
            .map(|(serial, _)| *serial)
            .collect();
        let bootstrapping = matches!(
            previous.and_then(|s| s.phase),
            None | Some(
                DatabasePhase::Pending
                    | DatabasePhase::Provisioning
                    | DatabasePhase::InitializingPrimary
                    | DatabasePhase::CreatingReplicas
            )
        );
        Self {
            spec,
            previous,
            observed,
            members,
            bootstrapping,
        }
    }

    fn instance(&self, serial: u32) -> Option<&'a Instance> {
        if self.members.contains(&serial) {
            self.observed.instances.get(&serial)
        } else {
            None
        }
    }

    fn name(&self, serial: u32) -> String {
        self.observed.name(serial)
    }

    /// The phase to keep while waiting for information.
    fn keep_phase(&self) -> DatabasePhase {
        match self.previous.and_then(|s| s.phase) {
            None | Some(DatabasePhase::Pending | DatabasePhase::Provisioning) => {
                DatabasePhase::InitializingPrimary
            }
            Some(phase) => phase,
        }
    }

    /// The recorded primary, by serial.
    fn recorded_primary(&self) -> Option<u32> {
        self.previous
            .and_then(|s| s.current_primary.as_deref())
            .and_then(|name| self.observed.serial_of(name))
    }

    /// Whether a primary may be created or labelled at `serial`: no other
    /// instance is, or may be, a primary.
    fn no_other_primary(&self, serial: u32) -> bool {
        self.members
            .iter()
            .filter(|s| **s != serial)
            .filter_map(|s| self.observed.instances.get(s))
            .all(|i| !i.reports_primary() && !i.may_be_primary())
    }

    fn desired_instances(&self) -> usize {
        usize::try_from(self.spec.instances.max(1)).unwrap_or(1)
    }
}

/// Who the primary is, as far as this pass can tell.
enum PrimaryView {
    /// Exactly one instance's manager reports primary.
    One(u32, ManagerStatus),
    /// Several do.
    Many,
    /// None reports primary; the recorded (or labelled) primary's pod exists but
    /// its manager does not answer.
    Unreachable(u32),
    /// None reports primary; the recorded (or labelled) primary's pod is absent,
    /// failed or terminating while its PVC remains.
    Down(u32),
    /// None reports primary; the recorded primary has neither PVC nor pod, or now
    /// runs as a replica: its data cannot simply be restarted as primary.
    Gone(u32),
    /// No primary ever recorded or labelled: a new cluster.
    None,
}

fn find_primary(ctx: &Context) -> PrimaryView {
    let mut reporting = ctx.members.iter().filter_map(|s| {
        let status = ctx.observed.instances.get(s)?.status()?;
        (status.role == InstanceRole::Primary).then_some((*s, status))
    });
    match (reporting.next(), reporting.next()) {
        (Some((serial, status)), None) => return PrimaryView::One(serial, status),
        (Some(_), Some(_)) => return PrimaryView::Many,
        _ => {}
    }
    // No manager reports a primary. The recorded primary comes first; without
    // one (a new cluster, or a lost status) the pod labelled primary stands in.
    let labelled = || {
        ctx.members.iter().copied().find(|s| {
            ctx.observed.instances.get(s).is_some_and(|i| {
                i.pod.as_ref().is_some_and(|p| {
                    p.role_label == Some(InstanceRole::Primary) && p.manager.is_none()
                })
            })
        })
    };
    let Some(serial) = ctx.recorded_primary().or_else(labelled) else {
        return PrimaryView::None;
    };
    match ctx.instance(serial).map(Instance::state) {
        None | Some(InstanceState::Known(_)) => PrimaryView::Gone(serial),
        Some(InstanceState::Unknown) => PrimaryView::Unreachable(serial),
        Some(InstanceState::NoPod | InstanceState::Failed | InstanceState::Terminating) => {
            PrimaryView::Down(serial)
        }
    }
}

/// The phase and condition details one branch decided.
struct Decision {
    phase: DatabasePhase,
    /// The primary accepts connections.
    serving: bool,
    reason: &'static str,
    message: String,
    primary: Option<u32>,
}

impl Decision {
    fn wait(phase: DatabasePhase, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            phase,
            serving: false,
            reason,
            message: message.into(),
            primary: None,
        }
    }

    fn primary(mut self, serial: u32) -> Self {
        self.primary = Some(serial);
        self
    }
}

/// A new cluster: volume first, then the first primary with `initdb`.
fn bootstrap(ctx: &Context, actions: &mut Vec<Action>) -> Decision {
    let Some(&first) = ctx.members.first() else {
        actions.push(Action::CreatePvc { serial: 1 });
        return Decision::wait(
            DatabasePhase::Provisioning,
            "Provisioning",
            "creating secrets, services and the first volume",
        );
    };
    let name = ctx.name(first);
    let Some(instance) = ctx.instance(first) else {
        return Decision::wait(
            DatabasePhase::InitializingPrimary,
            "InitializingPrimary",
            "waiting for the first instance",
        );
    };
    match instance.state() {
        InstanceState::NoPod => {
            // With a `WaitForFirstConsumer` storage class the PVC only binds once a
            // pod uses it, so the pod does not wait for `Bound`.
            if ctx.no_other_primary(first) {
                actions.push(Action::CreatePod {
                    serial: first,
                    bootstrap: Bootstrap::Initdb,
                    role: InstanceRole::Primary,
                });
            }
            Decision::wait(
                DatabasePhase::InitializingPrimary,
                "InitializingPrimary",
                format!("creating the first primary {name} with initdb"),
            )
        }
        InstanceState::Failed => {
            // initdb works in a staging directory, so starting over is safe.
            actions.push(Action::DeletePod {
                name: name.clone(),
                reason: DeleteReason::PodFailed,
            });
            Decision::wait(
                DatabasePhase::InitializingPrimary,
                "InitializingPrimary",
                format!("the pod of {name} failed during initialisation; recreating it"),
            )
        }
        InstanceState::Terminating | InstanceState::Unknown => Decision::wait(
            DatabasePhase::InitializingPrimary,
            "InitializingPrimary",
            format!("waiting for the instance manager of {name}"),
        ),
        InstanceState::Known(_) => {
            // A replica with no primary anywhere: data from elsewhere, or a lost
            // status. Promoting is failover's decision, not provisioning's.
            let phase = if ctx.bootstrapping {
                DatabasePhase::InitializingPrimary
            } else {
                DatabasePhase::FailingOver
            };
            Decision::wait(
                phase,
                "NoPrimary",
                format!("{name} runs as a replica and no instance is primary"),
            )
        }
    }
}

/// The recorded primary's pod is absent, failed or terminating; its PVC remains.
fn recover_primary(ctx: &Context, serial: u32, actions: &mut Vec<Action>) -> Decision {
    let name = ctx.name(serial);
    let phase = if ctx.bootstrapping {
        DatabasePhase::InitializingPrimary
    } else {
        DatabasePhase::Degraded
    };
    match ctx.instance(serial).map(Instance::state) {
        Some(InstanceState::NoPod) if ctx.no_other_primary(serial) => {
            // The primary's own data: `Initdb` keeps an existing data directory and
            // never clones (there is nobody to clone from).
            actions.push(Action::CreatePod {
                serial,
                bootstrap: Bootstrap::Initdb,
                role: InstanceRole::Primary,
            });
        }
        Some(InstanceState::Failed) => actions.push(Action::DeletePod {
            name: name.clone(),
            reason: DeleteReason::PodFailed,
        }),
        _ => {}
    }
    Decision::wait(
        phase,
        "PrimaryDown",
        format!("primary {name} is not running; restarting it on its volume"),
    )
    .primary(serial)
}

/// The recorded primary's data is gone or no longer a primary's.
fn primary_gone(ctx: &Context, serial: u32) -> Decision {
    let name = ctx.name(serial);
    let replicas = ctx.members.iter().any(|s| {
        *s != serial
            && ctx
                .observed
                .instances
                .get(s)
                .is_some_and(|i| i.status().is_some())
    });
    if replicas {
        Decision::wait(
            DatabasePhase::FailingOver,
            "FailoverRequired",
            format!("primary {name} is gone; a replica must be promoted"),
        )
        .primary(serial)
    } else {
        Decision::wait(
            DatabasePhase::Failed,
            "PrimaryDataLost",
            format!("the volume of primary {name} is gone and no replica answers"),
        )
        .primary(serial)
    }
}

/// A single primary answers: label it, and once it is ready, converge the
/// replicas to the spec.
fn with_primary(
    ctx: &Context,
    primary: u32,
    status: ManagerStatus,
    actions: &mut Vec<Action>,
) -> Decision {
    let observed = ctx.observed;
    let primary_name = ctx.name(primary);
    let label = |serial: u32| {
        observed
            .instances
            .get(&serial)
            .and_then(|i| i.pod.as_ref())
            .and_then(|p| p.role_label)
    };
    if label(primary) != Some(InstanceRole::Primary) && ctx.no_other_primary(primary) {
        actions.push(Action::LabelRole {
            name: primary_name.clone(),
            role: InstanceRole::Primary,
        });
    }
    if !status.ready {
        let phase = if ctx.bootstrapping {
            DatabasePhase::InitializingPrimary
        } else {
            DatabasePhase::Degraded
        };
        return Decision::wait(
            phase,
            "PrimaryNotReady",
            format!("waiting for primary {primary_name} to become ready"),
        )
        .primary(primary);
    }

    let desired = ctx.desired_instances();
    let replicas: Vec<u32> = ctx
        .members
        .iter()
        .copied()
        .filter(|s| *s != primary)
        .collect();
    // Scale down removes the highest serials first; the primary is never among
    // them since it is not in `replicas`.
    let excess = ctx.members.len().saturating_sub(desired);
    let remove: Vec<u32> = replicas.iter().rev().take(excess).copied().collect();
    let keep: Vec<u32> = replicas
        .iter()
        .copied()
        .filter(|s| !remove.contains(s))
        .collect();
    // New serials continue after the highest serial that still has a pod or a
    // PVC (survivors included), so a name never comes back while anything of
    // its earlier instance remains.
    let missing = desired.saturating_sub(ctx.members.len());
    let next = ctx.members.last().copied().unwrap_or(0);
    let new: Vec<u32> = (1..=missing)
        .filter_map(|i| u32::try_from(i).ok().and_then(|i| next.checked_add(i)))
        .collect();

    if !observed.pod_disruption_budgets || !remove.is_empty() || !new.is_empty() {
        actions.push(Action::EnsurePodDisruptionBudgets);
    }
    for &serial in &keep {
        let Some(instance) = observed.instances.get(&serial) else {
            continue;
        };
        if instance.status().map(|s| s.role) == Some(InstanceRole::Replica)
            && label(serial) != Some(InstanceRole::Replica)
        {
            actions.push(Action::LabelRole {
                name: ctx.name(serial),
                role: InstanceRole::Replica,
            });
        }
    }
    // The quorum changes before any standby goes, so the primary never waits for
    // an instance that is being deleted.
    let want_sync = desired_sync(ctx.spec, keep.iter().chain(&new).map(|s| ctx.name(*s)));
    if observed.sync != want_sync {
        actions.push(Action::ConfigureSync {
            standbys: want_sync.standbys,
            min: want_sync.min,
        });
    }

    let mut blocked = None;
    for &serial in &remove {
        let Some(instance) = observed.instances.get(&serial) else {
            continue;
        };
        let name = ctx.name(serial);
        match instance.state() {
            InstanceState::Unknown => {
                // Stop rather than skip: the highest serials go first, and an
                // instance nobody can see might hold anything.
                blocked = Some(format!("{name} does not answer; scale-down waits"));
                break;
            }
            InstanceState::Known(replica) if ahead_of(&replica, &status) => {
                blocked = Some(format!(
                    "{name} has WAL the primary lacks; scale-down waits"
                ));
                break;
            }
            _ => {}
        }
        if instance.pod.is_some() && !instance.terminating() {
            actions.push(Action::DeletePod {
                name: name.clone(),
                reason: DeleteReason::ScaleDown,
            });
        }
        if instance.pvc.is_some() {
            actions.push(Action::DeletePvc { name });
        }
    }

    // Slots of instances that are gone (PVC and pod) keep WAL on the primary for
    // nobody. A member's slot is never dropped, even while its pod is away.
    for slot in &observed.inactive_slots {
        let owner = slot
            .rsplit_once('_')
            .and_then(|(_, serial)| serial.parse::<u32>().ok())
            .filter(|serial| slot_name(&ctx.name(*serial)) == *slot);
        if let Some(serial) = owner
            && !ctx.members.contains(&serial)
        {
            actions.push(Action::DropSlot { slot: slot.clone() });
        }
    }

    // All missing replicas at once: they clone in parallel.
    for &serial in &new {
        actions.push(Action::CreatePvc { serial });
    }
    for &serial in &new {
        actions.push(Action::CreatePod {
            serial,
            bootstrap: Bootstrap::Clone,
            role: InstanceRole::Replica,
        });
    }

    let mut unhealthy = Vec::new();
    for &serial in &keep {
        let Some(instance) = observed.instances.get(&serial) else {
            continue;
        };
        match instance.state() {
            InstanceState::NoPod => actions.push(Action::CreatePod {
                serial,
                bootstrap: Bootstrap::Clone,
                role: InstanceRole::Replica,
            }),
            InstanceState::Failed => actions.push(Action::DeletePod {
                name: ctx.name(serial),
                reason: DeleteReason::PodFailed,
            }),
            _ => {}
        }
        if !instance.healthy_replica() {
            unhealthy.push(ctx.name(serial));
        }
    }

    let previous_phase = ctx.previous.and_then(|s| s.phase);
    let (phase, reason, message) = if !remove.is_empty() || (!new.is_empty() && !ctx.bootstrapping)
    {
        let message = blocked.unwrap_or_else(|| {
            format!(
                "scaling to {desired} instances (removing {}, adding {})",
                remove.len(),
                new.len()
            )
        });
        (DatabasePhase::Scaling, "Scaling", message)
    } else if !new.is_empty() {
        (
            DatabasePhase::CreatingReplicas,
            "CreatingReplicas",
            format!("creating {} replicas", new.len()),
        )
    } else if !unhealthy.is_empty() {
        let message = format!("not ready or not streaming: {}", unhealthy.join(", "));
        if ctx.bootstrapping {
            (DatabasePhase::CreatingReplicas, "CreatingReplicas", message)
        } else if previous_phase == Some(DatabasePhase::Scaling) {
            (DatabasePhase::Scaling, "Scaling", message)
        } else {
            (DatabasePhase::Degraded, "ReplicaNotStreaming", message)
        }
    } else {
        (
            DatabasePhase::Ready,
            "AllInstancesReady",
            format!("{desired} instances ready, primary {primary_name}"),
        )
    };

    if matches!(phase, DatabasePhase::Ready | DatabasePhase::Degraded) {
        parameters(ctx, primary, &keep, phase, actions);
    }
    Decision {
        phase,
        serving: true,
        reason,
        message,
        primary: Some(primary),
    }
}

/// Whether `replica` holds WAL that `primary` does not: a later timeline, or
/// further on the same one. Deleting its volume could lose commits.
fn ahead_of(replica: &ManagerStatus, primary: &ManagerStatus) -> bool {
    replica.timeline > primary.timeline
        || (replica.timeline == primary.timeline
            && replica.replayed_lsn.max(replica.received_lsn) > primary.replayed_lsn)
}

/// `synchronous_standby_names` for `standbys` under `spec`: off in async mode;
/// in sync mode a quorum of `minSyncReplicas`, never more than there are
/// standbys (a larger quorum would block every commit).
fn desired_sync(spec: &DatabaseSpec, standbys: impl Iterator<Item = String>) -> SyncStandbys {
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

/// Parameter changes, only in a serving steady state: reload every instance that
/// answers; then restart one instance reporting `pending_restart` at a time,
/// replicas first, the primary last, and only while everything else is ready
/// (the restarted instance is not ready until it is back, which holds the next).
fn parameters(
    ctx: &Context,
    primary: u32,
    keep: &[u32],
    phase: DatabasePhase,
    actions: &mut Vec<Action>,
) {
    let observed = ctx.observed;
    let serving: Vec<(u32, ManagerStatus)> = std::iter::once(primary)
        .chain(keep.iter().copied())
        .filter_map(|s| {
            let instance = observed.instances.get(&s)?;
            if instance.terminating() {
                return None;
            }
            Some((s, instance.status()?))
        })
        .collect();
    if observed.parameter_change != Change::Nothing {
        for (serial, _) in &serving {
            actions.push(Action::Reload {
                name: ctx.name(*serial),
            });
        }
    }
    if phase != DatabasePhase::Ready {
        return;
    }
    let replica = serving
        .iter()
        .find(|(s, status)| *s != primary && status.pending_restart);
    let target = replica.or_else(|| {
        serving
            .iter()
            .find(|(s, status)| *s == primary && status.pending_restart)
    });
    if let Some((serial, _)) = target {
        actions.push(Action::RestartInstance {
            name: ctx.name(*serial),
        });
    }
}

fn conditions(
    serving: bool,
    progressing: bool,
    degraded: bool,
    reason: &'static str,
    message: impl Into<String>,
) -> Vec<Desired> {
    let message = message.into();
    vec![
        Desired::new(READY, serving, reason, message.clone()),
        Desired::new(PROGRESSING, progressing, reason, message.clone()),
        Desired::new(DEGRADED, degraded, reason, message),
    ]
}
