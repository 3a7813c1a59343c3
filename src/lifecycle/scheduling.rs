//! Instances the scheduler cannot place: a pod the scheduler marked
//! `PodScheduled=False` (reason `Unschedulable`) is not a silent Pending but
//! a `Progress` verdict (reason [`UNSCHEDULABLE`]) naming each such
//! instance, the spec fields the scheduler's message points at
//! (`spec.affinity.podAntiAffinity`, `nodeSelector`, `nodeAffinity`,
//! `tolerations`, `spec.topologySpreadConstraints`, resources) and the
//! scheduler's own words. It comes first among the topology's verdicts, so
//! it is the Ready condition's reason; it is progress, not blocked, because
//! a node added or freed places the pod with no change to the spec. While
//! it waits for a node, an instance that never served is starting, not
//! degraded (see `alarm`).

use crate::api::placement::DEFAULT_TOPOLOGY_KEY;
use crate::api::v1::{DatabaseSpec, PodAntiAffinityType};

use super::context::Context;
use super::observed::PodPhase;
use super::verdict::Verdict;

/// Reason of the verdict.
pub const UNSCHEDULABLE: &str = "Unschedulable";

/// One verdict for every pending instance the scheduler cannot place, or
/// none.
pub(super) fn verdicts(ctx: &Context) -> Vec<Verdict> {
    let stuck: Vec<String> = ctx
        .observed
        .instances
        .iter()
        .filter_map(|(serial, instance)| {
            let pod = instance.pod.as_ref()?;
            let why = pod.unschedulable.as_deref()?;
            (pod.phase == PodPhase::Pending).then(|| {
                format!(
                    "instance {} cannot be scheduled: {}",
                    ctx.name(*serial),
                    explain(ctx.spec, why)
                )
            })
        })
        .collect();
    if stuck.is_empty() {
        return Vec::new();
    }
    vec![Verdict::progress(UNSCHEDULABLE, stuck.join("; "))]
}

/// The spec fields the scheduler's `message` points at, then the message.
pub(super) fn explain(spec: &DatabaseSpec, message: &str) -> String {
    let causes = causes(spec, message);
    let scheduler = format!("the scheduler says: {}", message.trim());
    if causes.is_empty() {
        scheduler
    } else {
        format!("{} ({scheduler})", causes.join(" and "))
    }
}

/// What of the spec each of the scheduler's per-node reasons (as
/// kube-scheduler words them) comes from.
fn causes(spec: &DatabaseSpec, message: &str) -> Vec<String> {
    let affinity = &spec.affinity;
    let mut causes = Vec::new();
    if message.contains("existing pods anti-affinity") {
        // The running instances' own rule, symmetric: they were made under a
        // `required` spec.affinity.podAntiAffinity (now or before a change).
        causes.push(
            "running instances made with spec.affinity.podAntiAffinity required keep it off every node they share a topology with".to_owned(),
        );
    } else if message.contains("anti-affinity")
        && affinity.pod_anti_affinity == PodAntiAffinityType::Required
    {
        let key = affinity
            .topology_key
            .as_deref()
            .filter(|k| !k.is_empty())
            .unwrap_or(DEFAULT_TOPOLOGY_KEY);
        causes.push(format!(
            "spec.affinity.podAntiAffinity is required on {key} and every {key} with room already runs an instance"
        ));
    }
    if message.contains("node affinity/selector") {
        if !affinity.node_selector.is_empty() {
            causes.push("no node matches spec.affinity.nodeSelector".to_owned());
        }
        if affinity.node_affinity.is_some() {
            causes.push("no node matches spec.affinity.nodeAffinity".to_owned());
        }
    }
    if message.contains("untolerated taint") {
        causes.push(if affinity.tolerations.is_empty() {
            "the nodes have taints and spec.affinity.tolerations is empty".to_owned()
        } else {
            "spec.affinity.tolerations tolerate no node's taints".to_owned()
        });
    }
    if message.contains("topology spread constraints") || message.contains("PodTopologySpread") {
        causes.push("spec.topologySpreadConstraints cannot be met".to_owned());
    }
    if message.contains("Insufficient") {
        causes.push("no node has room for the instance's resource requests".to_owned());
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;

    const ANTI: &str = "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
    const SELECTOR: &str = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";
    const TAINT: &str = "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: db}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";

    #[test]
    fn required_anti_affinity_is_named_with_its_topology() {
        let mut spec = sample_database().spec;
        spec.affinity.pod_anti_affinity = PodAntiAffinityType::Required;
        let text = explain(&spec, ANTI);
        assert!(
            text.starts_with("spec.affinity.podAntiAffinity is required on kubernetes.io/hostname"),
            "{text}"
        );
        assert!(text.contains(ANTI), "the scheduler's words stay: {text}");
        spec.affinity.topology_key = Some("topology.kubernetes.io/zone".into());
        assert!(explain(&spec, ANTI).contains("required on topology.kubernetes.io/zone"));
    }

    #[test]
    fn node_selection_and_taints_are_named() {
        let mut spec = sample_database().spec;
        spec.affinity
            .node_selector
            .insert("disk".into(), "ssd".into());
        assert!(explain(&spec, SELECTOR).starts_with("no node matches spec.affinity.nodeSelector"));
        assert!(
            explain(&spec, TAINT)
                .starts_with("the nodes have taints and spec.affinity.tolerations is empty")
        );
    }

    #[test]
    fn the_running_instances_required_rule_is_named_after_a_change_to_preferred() {
        // Seen on a one-node cluster: back to `preferred`, the replaced
        // replica is still kept off by the primary made under `required`.
        const EXISTING: &str = "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules. no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
        let spec = sample_database().spec;
        assert!(
            explain(&spec, EXISTING).starts_with(
                "running instances made with spec.affinity.podAntiAffinity required keep it off"
            ),
            "{}",
            explain(&spec, EXISTING)
        );
    }

    #[test]
    fn a_reason_the_spec_does_not_explain_is_the_scheduler_s() {
        // A preferred anti-affinity never keeps a pod off a node.
        let spec = sample_database().spec;
        assert_eq!(explain(&spec, ANTI), format!("the scheduler says: {ANTI}"));
    }
}
