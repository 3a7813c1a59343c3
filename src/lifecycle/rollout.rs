//! Rollout: whether the instances run what the spec asks for (pod spec,
//! image, PostgreSQL version, instance API). Replacing outdated pods one by
//! one belongs to the upgrades work; this build detects and reports the
//! difference, names the field, and keeps new pods on what already runs, so
//! that a change it cannot roll out never half-happens.

use crate::api::validate::PgVersion;
use crate::contract::API_VERSION;

use super::context::Context;
use super::verdict::Verdict;

pub(super) struct Rollout {
    /// The image of every pod created in this pass.
    pub image: String,
    pub verdicts: Vec<Verdict>,
}

pub(super) fn plan(ctx: &Context) -> Rollout {
    let observed = ctx.observed;
    let mut verdicts = Vec::new();
    let pods: Vec<(String, &super::observed::Pod)> = ctx
        .members
        .iter()
        .filter_map(|s| {
            let instance = observed.instances.get(s)?;
            let pod = instance.pod.as_ref()?;
            (!instance.terminating()).then(|| (ctx.name(*s), pod))
        })
        .collect();
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
    let outdated: Vec<&(String, &super::observed::Pod)> =
        pods.iter().filter(|(_, pod)| pod.outdated).collect();
    if outdated.is_empty() {
        verdicts.extend(version_verdict(ctx));
        return Rollout {
            image: observed.desired_image.clone(),
            verdicts,
        };
    }
    // What runs now: the primary's image, else any outdated pod's.
    let recorded = ctx.recorded_primary().map(|s| ctx.name(s));
    let running = pods
        .iter()
        .find(|(name, _)| Some(name) == recorded.as_ref())
        .or(outdated.first().copied())
        .map(|(_, pod)| pod.image.clone())
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| observed.desired_image.clone());
    let names: Vec<&str> = outdated.iter().map(|(name, _)| name.as_str()).collect();
    let message = if outdated
        .iter()
        .any(|(_, pod)| !pod.image.is_empty() && pod.image != observed.desired_image)
    {
        let field = if ctx.spec.image.is_some() {
            "spec.image"
        } else {
            "spec.version"
        };
        format!(
            "{field}: the spec asks for image {} but {} of {} instances ({}) run {running}; \
             rolling updates are not supported by this build, so no instance is replaced",
            observed.desired_image,
            outdated.len(),
            pods.len(),
            names.join(", ")
        )
    } else {
        format!(
            "the instance pod template changed (an operator upgrade or setting) and {} of {} instances ({}) \
             run the previous one; rolling updates are not supported by this build, so no instance is replaced",
            outdated.len(),
            pods.len(),
            names.join(", ")
        )
    };
    verdicts.push(Verdict::blocked("RolloutNotSupported", message));
    Rollout {
        image: running,
        verdicts,
    }
}

/// An instance whose server is another major than `spec.version`, or an older
/// minor than it names (a minor in the spec is a floor: the image's tag is the
/// major, which carries its latest minor).
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
