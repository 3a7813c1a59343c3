//! Topology: who the primary is, the first primary of a new cluster, a primary
//! to restart on its volume, and the replica set converging on
//! `spec.instances` (scaling both ways, failed replicas recreated on their
//! volumes, slots of removed instances dropped).
//!
//! Safety comes before progress: when an instance's state is Unknown the plan
//! waits rather than guesses, a primary is only ever created when no other
//! instance is or may be one, and data (a PVC) is only deleted below a ready
//! primary that holds everything that data holds.

use crate::api::status::{DatabasePhase, InstanceRole};
use crate::contract::RestoreStage;
use crate::postgres::identifiers::slot_name;

use super::action::{Action, Bootstrap, DeleteReason};
use super::alarm;
use super::context::Context;
use super::observed::{Instance, InstanceState, ManagerStatus};
use super::shape::Topology;

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

/// The topology for this pass. `hold_bootstrap`: a new cluster must not be
/// created (the spec asks for a bootstrap this build cannot do); `image`: the
/// image for every pod created.
pub(super) fn plan(ctx: &Context, hold_bootstrap: bool, image: &str) -> Topology {
    let mut topology = match find_primary(ctx) {
        PrimaryView::One(serial, status) => converge(ctx, serial, status, image),
        PrimaryView::Many => Topology::wait(
            DatabasePhase::Failed,
            "MultiplePrimaries",
            "more than one instance reports itself primary; Tusk changes nothing until one steps down",
        ),
        // A restoring first primary's manager answers /restore, not /status
        // (nothing at all while its pod is pending): not a Degraded primary.
        PrimaryView::Unreachable(serial) if ctx.restore_pending() => {
            restore_progress(ctx, &ctx.name(serial)).primary(serial)
        }
        PrimaryView::Unreachable(serial) => {
            super::primary::replace(ctx, serial, false).unwrap_or_else(|| unreachable(ctx, serial))
        }
        PrimaryView::Down(serial) => super::primary::replace(ctx, serial, true)
            .unwrap_or_else(|| recover_primary(ctx, serial, image)),
        PrimaryView::Gone(serial) => {
            super::primary::replace(ctx, serial, false).unwrap_or_else(|| primary_gone(ctx, serial))
        }
        PrimaryView::None if hold_bootstrap => Topology::wait(
            DatabasePhase::Failed,
            "RestoreSourceInvalid",
            ctx.observed
                .restore
                .unresolved
                .clone()
                .unwrap_or_else(|| "spec.bootstrap.recovery cannot be carried out".to_owned()),
        ),
        PrimaryView::None => bootstrap(ctx, image),
    };
    if topology.primary.is_none() {
        topology.primary = ctx.recorded_primary();
    }
    if alarm::switchover_wake(ctx) {
        switching_over(ctx, &mut topology);
    }
    topology
}

/// The primary's pod exists and its manager does not answer: starting for the
/// first time (progress), or unreachable (an alarm).
fn unreachable(ctx: &Context, serial: u32) -> Topology {
    let name = ctx.name(serial);
    let (reason, message) = if alarm::starting(ctx, serial) {
        (
            "PrimaryStarting",
            format!("waiting for the instance manager of primary {name} to start"),
        )
    } else {
        (
            "PrimaryUnreachable",
            format!(
                "the instance manager of primary {name} does not answer; waiting before acting"
            ),
        )
    };
    let mut topology = Topology::wait(ctx.keep_phase(), reason, message).primary(serial);
    topology.alarm = reason == "PrimaryUnreachable";
    topology
}

/// In a switchover's wake, the old primary stopping and rejoining and the
/// new one promoting are the switchover under way, not a failure.
fn switching_over(ctx: &Context, topology: &mut Topology) {
    let settling = matches!(
        topology.phase,
        DatabasePhase::Degraded
            | DatabasePhase::FailingOver
            | DatabasePhase::InitializingPrimary
            | DatabasePhase::CreatingReplicas
    ) || matches!(
        topology.reason,
        "PrimaryUnreachable" | "PrimaryStarting" | "PrimaryNotReady"
    );
    if !settling {
        return;
    }
    let wanted = ctx.spec.primary.as_deref().unwrap_or_default();
    topology.alarm = false;
    topology.phase = DatabasePhase::SwitchingOver;
    topology.reason = "SwitchingOver";
    topology.message = format!("switching over to {wanted}: {}", topology.message);
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

/// A new cluster: volume first, then the first primary with `initdb`.
fn bootstrap(ctx: &Context, image: &str) -> Topology {
    let Some(&first) = ctx.members.first() else {
        let mut topology = Topology::wait(
            DatabasePhase::Provisioning,
            "Provisioning",
            "creating secrets, services and the first volume",
        );
        topology.first.push(Action::CreatePvc { serial: 1 });
        return topology;
    };
    let name = ctx.name(first);
    let Some(instance) = ctx.instance(first) else {
        return Topology::wait(
            DatabasePhase::InitializingPrimary,
            "InitializingPrimary",
            "waiting for the first instance",
        );
    };
    let restoring = ctx.restore_pending();
    let (mode, how) = if restoring {
        (Bootstrap::Restore, "by restoring from a backup")
    } else {
        (Bootstrap::Initdb, "with initdb")
    };
    match instance.state() {
        InstanceState::NoPod => {
            let mut topology = Topology::wait(
                if restoring {
                    DatabasePhase::Restoring
                } else {
                    DatabasePhase::InitializingPrimary
                },
                "InitializingPrimary",
                format!("creating the first primary {name} {how}"),
            );
            // With a `WaitForFirstConsumer` storage class the PVC only binds once a
            // pod uses it, so the pod does not wait for `Bound`.
            if ctx.no_other_primary(first) {
                topology.first.push(Action::CreatePod {
                    serial: first,
                    bootstrap: mode,
                    role: InstanceRole::Primary,
                    image: image.to_owned(),
                });
            }
            topology
        }
        InstanceState::Failed => {
            let mut topology = Topology::wait(
                DatabasePhase::InitializingPrimary,
                "InitializingPrimary",
                format!("the pod of {name} failed during initialisation; recreating it"),
            );
            // initdb works in a staging directory, so starting over is safe.
            topology.first.push(Action::DeletePod {
                name,
                reason: DeleteReason::PodFailed,
            });
            topology
        }
        InstanceState::Terminating | InstanceState::Unknown => Topology::wait(
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
            Topology::wait(
                phase,
                "NoPrimary",
                format!("{name} runs as a replica and no instance is primary"),
            )
        }
    }
}

/// The first primary restores: its progress, or why its last attempt failed.
fn restore_progress(ctx: &Context, name: &str) -> Topology {
    let Some(progress) = &ctx.observed.restore.progress else {
        return Topology::wait(
            DatabasePhase::Restoring,
            "Restoring",
            format!("waiting for the instance manager of {name} to start restoring"),
        );
    };
    let from = progress.source.as_deref().unwrap_or("the object store");
    let backup = progress.backup.as_deref().unwrap_or("a backup");
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    match progress.stage {
        RestoreStage::Failed => Topology::wait(
            DatabasePhase::Failed,
            "RestoreFailed",
            format!(
                "{name}: {} (attempt {}; retried with backoff, nothing of the source is changed)",
                progress.error.as_deref().unwrap_or("the restore failed"),
                progress.attempts
            ),
        ),
        RestoreStage::Choosing => Topology::wait(
            DatabasePhase::Restoring,
            "Restoring",
            format!(
                "{name}: choosing the backup to restore for {}",
                progress.target
            ),
        ),
        // A reason per stage: each change of stage is an Event.
        RestoreStage::Downloading => Topology::wait(
            DatabasePhase::Restoring,
            "RestoreDownloading",
            format!(
                "{name}: downloading backup {backup} from {from}: {:.1} of {:.1} MiB",
                mib(progress.downloaded_bytes),
                mib(progress.total_bytes)
            ),
        ),
        RestoreStage::Replaying | RestoreStage::Done => Topology::wait(
            DatabasePhase::Restoring,
            "RestoreReplaying",
            format!(
                "{name}: replaying WAL from {from} towards the {}; replayed up to {}",
                progress.target,
                progress
                    .replayed_lsn
                    .map_or_else(|| "the backup's start".to_owned(), |l| l.to_string())
            ),
        ),
    }
}

/// The phase while primary `serial` is not serving, and whether that is an
/// alarm: initialising while it starts for the first time, still
/// initialising on the way to the first Ready (but an alarm) once its pod
/// failed or its grace ran out, degraded once it has served (see `alarm`).
fn primary_waiting_phase(ctx: &Context, serial: u32) -> (DatabasePhase, bool) {
    if alarm::starting(ctx, serial) {
        (DatabasePhase::InitializingPrimary, false)
    } else if ctx.bootstrapping && !alarm::served_as_primary(ctx, serial) {
        (DatabasePhase::InitializingPrimary, true)
    } else {
        (DatabasePhase::Degraded, true)
    }
}

/// The recorded primary's pod is absent, failed or terminating; its PVC remains.
fn recover_primary(ctx: &Context, serial: u32, image: &str) -> Topology {
    let name = ctx.name(serial);
    let (phase, alarm) = primary_waiting_phase(ctx, serial);
    let mut topology = Topology::wait(
        phase,
        "PrimaryDown",
        format!("primary {name} is not running; restarting it on its volume"),
    )
    .primary(serial);
    topology.alarm = alarm;
    match ctx.instance(serial).map(Instance::state) {
        Some(InstanceState::NoPod) if ctx.no_other_primary(serial) => {
            // The primary's own data: `Initdb` keeps an existing data directory and
            // never clones (there is nobody to clone from); a restore that never
            // finished starts over rather than initialising an empty cluster.
            let bootstrap = if ctx.restore_pending() {
                Bootstrap::Restore
            } else {
                Bootstrap::Initdb
            };
            topology.first.push(Action::CreatePod {
                serial,
                bootstrap,
                role: InstanceRole::Primary,
                image: image.to_owned(),
            });
        }
        Some(InstanceState::Failed) => topology.first.push(Action::DeletePod {
            name,
            reason: DeleteReason::PodFailed,
        }),
        _ => {}
    }
    topology
}

/// The recorded primary's data is gone or no longer a primary's.
fn primary_gone(ctx: &Context, serial: u32) -> Topology {
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
        Topology::wait(
            DatabasePhase::FailingOver,
            "FailoverRequired",
            format!("primary {name} is gone; a replica must be promoted"),
        )
        .primary(serial)
    } else {
        Topology::wait(
            DatabasePhase::Failed,
            "PrimaryDataLost",
            format!("the volume of primary {name} is gone and no replica answers"),
        )
        .primary(serial)
    }
}

/// A single primary answers; once it is ready, converge the replicas on the spec.
fn converge(ctx: &Context, primary: u32, status: ManagerStatus, image: &str) -> Topology {
    let observed = ctx.observed;
    let primary_name = ctx.name(primary);
    if !status.ready {
        let (phase, alarm) = primary_waiting_phase(ctx, primary);
        let mut topology = Topology::wait(
            phase,
            "PrimaryNotReady",
            format!("waiting for primary {primary_name} to become ready"),
        )
        .primary(primary);
        topology.alarm = alarm;
        topology.reporting_primary = Some((primary, status));
        return topology;
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

    let mut topology = Topology::wait(DatabasePhase::Ready, "", "").primary(primary);
    topology.serving = true;
    topology.reporting_primary = Some((primary, status));

    if !observed.pod_disruption_budgets || !remove.is_empty() || !new.is_empty() {
        topology.budgets.push(Action::EnsurePodDisruptionBudgets);
    }
    for name in &observed.surplus_budgets {
        topology
            .budgets
            .push(Action::DeletePodDisruptionBudget { name: name.clone() });
    }

    let blocked = remove_instances(ctx, &remove, &status, &mut topology);
    drop_orphan_slots(ctx, &primary_name, &mut topology);
    add_replicas(&new, image, &mut topology);
    let unhealthy = repair_replicas(ctx, &keep, image, &mut topology);
    let (phase, reason, message) = verdict(ctx, &remove, &new, &unhealthy, blocked, &primary_name);
    topology.phase = phase;
    topology.reason = reason;
    topology.message = message;
    topology.keep = keep;
    topology.new = new;
    topology
}

/// Deletes the pods and PVCs of the instances a scale-down removes, highest
/// serial first; stops at one that may hold what the primary lacks, and
/// says why.
fn remove_instances(
    ctx: &Context,
    remove: &[u32],
    status: &ManagerStatus,
    topology: &mut Topology,
) -> Option<String> {
    let observed = ctx.observed;
    for &serial in remove {
        let Some(instance) = observed.instances.get(&serial) else {
            continue;
        };
        let name = ctx.name(serial);
        match instance.state() {
            InstanceState::Unknown => {
                // Stop rather than skip: the highest serials go first, and an
                // instance nobody can see might hold anything.
                return Some(format!("{name} does not answer; scale-down waits"));
            }
            InstanceState::Known(replica) if ahead_of(&replica, status) => {
                return Some(format!(
                    "{name} has WAL the primary lacks; scale-down waits"
                ));
            }
            _ => {}
        }
        if instance.pod.is_some() && !instance.terminating() {
            topology.removals.push(Action::DeletePod {
                name: name.clone(),
                reason: DeleteReason::ScaleDown,
            });
        }
        if instance.pvc.is_some() {
            topology.removals.push(Action::DeletePvc { name });
        }
    }

    None
}

fn drop_orphan_slots(ctx: &Context, primary_name: &str, topology: &mut Topology) {
    // Slots of instances that are gone (PVC and pod) keep WAL on the primary for
    // nobody. A member's slot is never dropped, even while its pod is away.
    for slot in &ctx.observed.inactive_slots {
        let owner = slot
            .rsplit_once('_')
            .and_then(|(_, serial)| serial.parse::<u32>().ok())
            .filter(|serial| slot_name(&ctx.name(*serial)) == *slot);
        if let Some(serial) = owner
            && !ctx.members.contains(&serial)
        {
            topology.slots.push(Action::DropSlot {
                primary: primary_name.to_owned(),
                slot: slot.clone(),
            });
        }
    }
}

fn add_replicas(new: &[u32], image: &str, topology: &mut Topology) {
    // All missing replicas at once: they clone in parallel.
    for &serial in new {
        topology.additions.push(Action::CreatePvc { serial });
    }
    for &serial in new {
        topology.additions.push(Action::CreatePod {
            serial,
            bootstrap: Bootstrap::Clone,
            role: InstanceRole::Replica,
            image: image.to_owned(),
        });
    }
}

/// Recreates the pods of kept replicas that lost theirs (or failed); returns
/// the replicas that are not ready and streaming.
fn repair_replicas(ctx: &Context, keep: &[u32], image: &str, topology: &mut Topology) -> Vec<u32> {
    let mut unhealthy = Vec::new();
    for &serial in keep {
        let Some(instance) = ctx.observed.instances.get(&serial) else {
            continue;
        };
        match instance.state() {
            InstanceState::NoPod => topology.repairs.push(Action::CreatePod {
                serial,
                bootstrap: Bootstrap::Clone,
                role: InstanceRole::Replica,
                image: image.to_owned(),
            }),
            InstanceState::Failed => topology.repairs.push(Action::DeletePod {
                name: ctx.name(serial),
                reason: DeleteReason::PodFailed,
            }),
            _ => {}
        }
        if !instance.healthy_replica() {
            unhealthy.push(serial);
        }
    }

    unhealthy
}

/// The topology's phase, reason and message once the primary serves.
fn verdict(
    ctx: &Context,
    remove: &[u32],
    new: &[u32],
    unhealthy: &[u32],
    blocked: Option<String>,
    primary_name: &str,
) -> (DatabasePhase, &'static str, String) {
    let desired = ctx.desired_instances();
    let previous_phase = ctx.previous.and_then(|s| s.phase);
    if !remove.is_empty() || (!new.is_empty() && !ctx.bootstrapping) {
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
        // Replicas starting for the first time are progress; any other is
        // an alarm (see `alarm`).
        let (starting, broken): (Vec<u32>, Vec<u32>) =
            unhealthy.iter().partition(|s| alarm::starting(ctx, **s));
        let names = |serials: &[u32]| {
            serials
                .iter()
                .map(|s| ctx.name(*s))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !broken.is_empty() {
            (
                DatabasePhase::Degraded,
                "ReplicaNotStreaming",
                format!("not ready or not streaming: {}", names(&broken)),
            )
        } else {
            let message = format!("not streaming yet: {}", names(&starting));
            if previous_phase == Some(DatabasePhase::Scaling) {
                (DatabasePhase::Scaling, "Scaling", message)
            } else {
                (DatabasePhase::CreatingReplicas, "CreatingReplicas", message)
            }
        }
    } else {
        (
            DatabasePhase::Ready,
            "AllInstancesReady",
            format!("{desired} instances ready, primary {primary_name}"),
        )
    }
}

/// Whether `replica` holds WAL that `primary` does not: a later timeline, or
/// further on the same one. Deleting its volume could lose commits.
fn ahead_of(replica: &ManagerStatus, primary: &ManagerStatus) -> bool {
    replica.timeline > primary.timeline
        || (replica.timeline == primary.timeline
            && replica.replayed_lsn.max(replica.received_lsn) > primary.replayed_lsn)
}
