//! Rollout: whether the instances run what the spec asks for (pod spec,
//! image, PostgreSQL version, instance API), and the rolling update that
//! brings them there.
//!
//! A change a restart can carry (an image or minor version, resources, a
//! parameter that needs a restart, a new operator build) rolls out one
//! instance at a time: replicas first, each replaced and back (ready and
//! streaming) before the next; then a switchover to an updated replica; then
//! the old primary, now a replica, like the others. Nothing is taken away
//! while any instance is away or unhealthy, so at most one instance is ever
//! missing and the primary is never touched while a replica is unwell.
//!
//! A change of PostgreSQL major cannot be carried by a restart (the data
//! directory must be upgraded first): it is not rolled, new pods keep what
//! runs, and the upgrade planner takes over.

use crate::api::status::{DatabasePhase, InstanceRole};
use crate::api::validate::PgVersion;
use crate::contract::API_VERSION;

use super::action::Action;
use super::context::Context;
use super::observed::{Instance, Pod, PodPhase};
use super::shape::Topology;
use super::verdict::Verdict;

/// What the rollout decided before the topology: the image of new pods and
/// what it found.
pub(super) struct Rollout {
    /// The image of every pod created in this pass.
    pub image: String,
    pub verdicts: Vec<Verdict>,
    /// The outdated instances can be rolled: a rolling update is under way.
    pub rolling: bool,
    /// A change of PostgreSQL major: `(running, wanted)`.
    pub major: Option<(u32, u32)>,
}

pub(super) fn plan(ctx: &Context) -> Rollout {
    let observed = ctx.observed;
    let mut verdicts = Vec::new();
    let pods = live_pods(ctx);
    for (name, pod) in &pods {
        if let Some(version) = pod.api_mismatch {
            verdicts.push(Verdict::blocked(
                "InstanceApiMismatch",
                format!(
                    "{name}: its instance manager speaks instance API v{version}, this operator v{API_VERSION}; \
                     Tusk leaves it alone until its pod runs this build's manager"
                ),
            ));
        }
    }
    let outdated = pods.iter().filter(|(_, pod)| pod.outdated).count();
    let major = major_change(ctx);
    if let Some((running, wanted)) = major {
        // New pods keep the major that runs: the data directory is that major's.
        let image = running_image(ctx, &pods);

        return Rollout {
            image,
            verdicts,
            rolling: false,
            major: Some((running, wanted)),
        };
    }
    if outdated == 0 {
        verdicts.extend(version_verdict(ctx));
    }
    Rollout {
        image: observed.desired_image.clone(),
        verdicts,
        rolling: outdated > 0 || settling(ctx),
        major: None,
    }
}

/// The last outdated pod is gone but the update is not over until every
/// instance is back: an instance replaced last (or re-cloned after a major
/// upgrade) is still on its way.
fn settling(ctx: &Context) -> bool {
    let upgrading = ctx.previous.and_then(|s| s.phase) == Some(DatabasePhase::Upgrading);
    upgrading
        && ctx.members.iter().any(|s| {
            ctx.instance(*s)
                .is_none_or(|i| !(i.reports_primary() || back(i)))
        })
}

/// The members' pods that are not being deleted, by name.
fn live_pods<'a>(ctx: &Context<'a>) -> Vec<(String, &'a Pod)> {
    ctx.members
        .iter()
        .filter_map(|s| {
            let instance = ctx.observed.instances.get(s)?;
            let pod = instance.pod.as_ref()?;
            (!instance.terminating()).then(|| (ctx.name(*s), pod))
        })
        .collect()
}

/// What runs now: the recorded primary's image, else any outdated pod's.
fn running_image(ctx: &Context, pods: &[(String, &Pod)]) -> String {
    let recorded = ctx.recorded_primary().map(|s| ctx.name(s));
    pods.iter()
        .find(|(name, _)| Some(name) == recorded.as_ref())
        .or_else(|| pods.iter().find(|(_, pod)| pod.outdated))
        .map(|(_, pod)| pod.image.clone())
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| ctx.observed.desired_image.clone())
}

/// The major the instances run, when it is not the spec's: from what the
/// servers report, else from what was last recorded as applied.
fn major_change(ctx: &Context) -> Option<(u32, u32)> {
    let wanted = ctx.spec.version.parse::<PgVersion>().ok()?.major;
    let reported = ctx
        .recorded_primary()
        .into_iter()
        .chain(ctx.members.iter().copied())
        .find_map(|s| ctx.instance(s)?.status()?.server_version)
        .map(|(major, _)| major);
    let running = reported.or_else(|| {
        let applied = ctx.previous?.applied.as_ref()?;
        Some(applied.version.parse::<PgVersion>().ok()?.major)
    })?;
    (running != wanted).then_some((running, wanted))
}

/// The rolling update's step for this pass, once the topology is known: at
/// most one instance replaced (or one switchover), and only when every
/// member is in place and healthy.
pub(super) fn steps(ctx: &Context, topology: &Topology, rolling: bool) -> Step {
    if !rolling {
        return Step::default();
    }
    let total = ctx.members.len();
    let outdated: Vec<u32> = ctx
        .members
        .iter()
        .copied()
        .filter(|s| pod_of(ctx, *s).is_some_and(|p| p.outdated))
        .collect();
    let updated = ctx
        .members
        .iter()
        .filter(|s| pod_of(ctx, **s).is_some_and(|p| !p.outdated))
        .count();
    let progress = format!("{updated} of {total} instances updated");
    let waiting = |message: String| Step {
        actions: Vec::new(),
        verdicts: vec![Verdict::progress("RollingUpdate", message)],
    };
    let Some((primary, _)) = topology.reporting_primary.filter(|_| topology.serving) else {
        return waiting(format!(
            "rolling update: {progress}; waiting for the primary to serve"
        ));
    };
    let topology_busy = [
        &topology.first,
        &topology.removals,
        &topology.additions,
        &topology.repairs,
    ]
    .iter()
    .any(|actions| !actions.is_empty());
    if let Some(away) = ctx
        .members
        .iter()
        .copied()
        .find(|s| *s != primary && !ctx.instance(*s).is_some_and(back))
    {
        // Away already, on an old pod spec, and never started (a replica whose
        // new image could not be pulled, then the spec was set back): no
        // PostgreSQL can run in a pending pod, and replacing it takes nothing
        // more away.
        let stale = ctx.instance(away).is_some_and(|i| {
            i.pod
                .as_ref()
                .is_some_and(|p| p.outdated && p.phase == PodPhase::Pending && p.manager.is_none())
        });
        if stale && !topology_busy {
            return replace(ctx, away, true, updated, total);
        }
        return waiting(format!(
            "rolling update: {progress}; waiting for {} to be ready and streaming before the next",
            ctx.name(away)
        ));
    }
    if topology_busy {
        return waiting(format!(
            "rolling update: {progress}; waiting for the instances to settle"
        ));
    }
    if let Some(&replica) = outdated.iter().find(|s| **s != primary) {
        return replace(ctx, replica, true, updated, total);
    }
    if !outdated.contains(&primary) {
        return Step::default();
    }
    if total == 1 {
        // Nothing to hand over to: a restart in place is the only way, and the
        // primary's budget would refuse an eviction for good.
        return replace(ctx, primary, false, updated, total);
    }
    if !super::primary::enabled(ctx) {
        return waiting(format!(
            "rolling update: {progress}; the primary {} is replaced after a switchover, which waits \
             until the instances hold the primary lease",
            ctx.name(primary)
        ));
    }
    match handover_target(ctx, primary) {
        Some((to, standbys, min)) => Step {
            actions: vec![Action::Switchover {
                from: ctx.name(primary),
                to: ctx.name(to),
                standbys,
                min,
            }],
            verdicts: vec![Verdict::progress(
                "RollingUpdate",
                format!(
                    "rolling update: {progress}; switching over from {} to updated replica {} before replacing it",
                    ctx.name(primary),
                    ctx.name(to)
                ),
            )],
        },
        None => waiting(format!(
            "rolling update: {progress}; the primary {} is replaced after a switchover, which waits for \
             an updated replica that is ready and streaming",
            ctx.name(primary)
        )),
    }
}

/// The actions and verdicts of a rolling-update step.
#[derive(Default)]
pub(super) struct Step {
    pub actions: Vec<Action>,
    pub verdicts: Vec<Verdict>,
}

fn pod_of<'a>(ctx: &Context<'a>, serial: u32) -> Option<&'a Pod> {
    ctx.instance(serial)?.pod.as_ref()
}

/// An instance other than the primary is back: its pod is ready (so the
/// Services route to it) and its manager says it is a ready, streaming replica.
fn back(instance: &Instance) -> bool {
    instance
        .pod
        .as_ref()
        .is_some_and(|pod| pod.ready && !instance.terminating())
        && instance.healthy_replica()
}

fn replace(ctx: &Context, serial: u32, evict: bool, updated: usize, total: usize) -> Step {
    let name = ctx.name(serial);
    let message = if evict {
        format!("rolling update: {updated} of {total} instances updated; replacing {name}")
    } else {
        format!(
            "rolling update: {updated} of {total} instances updated; restarting the only instance {name} \
             on the new pod spec (writes pause until it is back)"
        )
    };
    Step {
        actions: vec![Action::RollPod {
            name,
            evict,
            updated,
            total,
        }],
        verdicts: vec![Verdict::progress("RollingUpdate", message)],
    }
}

/// The updated replica to hand the primary role to: `spec.primary` when it
/// names one, else the one that has received the most WAL (the shortest
/// wait for the handover).
fn handover_target(ctx: &Context, primary: u32) -> Option<(u32, Vec<String>, i32)> {
    let candidates: Vec<(u32, u64)> = ctx
        .members
        .iter()
        .copied()
        .filter(|s| *s != primary)
        .filter_map(|s| {
            let instance = ctx.instance(s)?;
            let pod = instance.pod.as_ref()?;
            let status = instance.status()?;
            (!pod.outdated && instance.healthy_replica() && status.role == InstanceRole::Replica)
                .then_some((s, status.received_lsn))
        })
        .collect();
    let wanted = ctx.spec.primary.as_deref();
    let to = candidates
        .iter()
        .find(|(s, _)| Some(ctx.name(*s).as_str()) == wanted)
        .or_else(|| {
            candidates
                .iter()
                .max_by_key(|(s, lsn)| (*lsn, std::cmp::Reverse(*s)))
        })
        .map(|(s, _)| *s)?;
    let (standbys, min) = super::primary::sync_for(ctx, to);
    Some((to, standbys, min))
}

/// Whether `name` still runs an outdated pod: a switchover to it would only
/// have to be undone by the rolling update.
pub(super) fn outdated(ctx: &Context, name: &str) -> bool {
    ctx.observed
        .serial_of(name)
        .and_then(|s| pod_of(ctx, s))
        .is_some_and(|p| p.outdated)
}

/// An instance whose server is another major than `spec.version`, or an older
/// minor than it names (a custom `spec.image` may carry another minor than
/// the one named; an older one is not what the spec asks for).
fn version_verdict(ctx: &Context) -> Option<Verdict> {
    let want: PgVersion = ctx.spec.version.parse().ok()?;
    ctx.members.iter().find_map(|serial| {
        let status = ctx.observed.instances.get(serial)?.status()?;
        let (major, minor) = status.server_version?;
        let behind = major != want.major || want.minor.is_some_and(|m| minor < m);
        behind.then(|| {
            Verdict::blocked(
                "VersionMismatch",
                format!(
                    "spec.version: asks for {} but {} runs PostgreSQL {major}.{minor} (image {}); \
                     set spec.image to an image of that version",
                    ctx.spec.version,
                    ctx.name(*serial),
                    ctx.observed.desired_image
                ),
            )
        })
    })
}
