//! CPU changes carried out in place: the `resize` subresource (Kubernetes
//! 1.33+) gives a running pod new CPU without restarting its container.
//!
//! The spec hash leaves CPU out (`crate::resources::compute`), so a CPU
//! change alone does not make a pod outdated; [`decide`] says, per pod,
//! whether it runs the spec's CPU, needs a resize, is being resized, or
//! cannot be resized and must roll (the API server refused the resize, the
//! kubelet found it infeasible, it would change the pod's QoS class or
//! remove a limit). The controller counts a pod that must roll as outdated,
//! so the rolling update (replicas, a switchover, the old primary) takes
//! it from there. Ready stays False until every pod runs the spec's CPU as
//! the kubelet reports it (`status.containerStatuses[].resources`).

use super::action::Action;
use super::context::Context;
use super::cpu::{CpuDecision, decide, wanted};
use super::verdict::Verdict;

/// The resizes of this pass and what they say.
#[derive(Default)]
pub(super) struct Resize {
    pub actions: Vec<Action>,
    pub verdicts: Vec<Verdict>,
}

/// Resizes every live pod that is not outdated (the rolling update
/// replaces those) and whose CPU differs from the spec's; says which are
/// still being resized.
pub(super) fn plan(ctx: &Context) -> Resize {
    let mut out = Resize::default();
    let Some((want, qos, (request, limit))) = wanted(ctx.spec) else {
        return out;
    };
    let mut resizing = Vec::new();
    for serial in &ctx.members {
        let Some(instance) = ctx.instance(*serial) else {
            continue;
        };
        let Some(pod) = instance.pod.as_ref() else {
            continue;
        };
        if pod.outdated || instance.terminating() {
            continue;
        }
        let name = ctx.name(*serial);
        match decide(want, qos, &pod.cpu) {
            CpuDecision::InSync | CpuDecision::Roll(_) => {}
            CpuDecision::Resize => {
                resizing.push(format!("{name} (resizing)"));
                out.actions.push(Action::ResizeCpu {
                    name,
                    request: request.clone(),
                    limit: limit.clone(),
                });
            }
            CpuDecision::Resizing(why) => resizing.push(format!("{name} ({why})")),
        }
    }
    if !resizing.is_empty() {
        out.verdicts.push(Verdict::progress(
            "ResizingCpu",
            format!(
                "spec.resources: CPU changed in place, without a restart: {}",
                resizing.join(", ")
            ),
        ));
    }
    out
}
