//! Serving: the Services route where the roles say. A database is not Ready
//! while `-rw` does not lead to the primary alone, or `-ro` misses a replica,
//! or the kubelet has not marked an instance pod ready (its endpoints follow
//! that mark, not the instance manager's word).

use super::context::Context;
use super::shape::Topology;
use super::verdict::Verdict;

pub(super) fn plan(ctx: &Context, topology: &Topology) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    let Some((primary, _)) = topology.reporting_primary else {
        return verdicts;
    };
    if !topology.serving {
        return verdicts;
    }
    let observed = ctx.observed;
    let unready: Vec<String> = std::iter::once(primary)
        .chain(topology.keep.iter().copied())
        .filter(|s| {
            observed
                .instances
                .get(s)
                .and_then(|i| i.pod.as_ref())
                .is_some_and(|p| !p.ready)
        })
        .map(|s| ctx.name(s))
        .collect();
    if !unready.is_empty() {
        verdicts.push(Verdict::progress(
            "WaitingForPods",
            format!(
                "the kubelet has not marked {} ready yet",
                unready.join(", ")
            ),
        ));
    }
    let primary_name = ctx.name(primary);
    if observed.routing.rw != [primary_name.clone()] {
        verdicts.push(Verdict::progress(
            "WaitingForRouting",
            format!(
                "the -rw Service routes to [{}], not to primary {primary_name} alone",
                observed.routing.rw.join(", ")
            ),
        ));
    }
    let missing: Vec<String> = topology
        .keep
        .iter()
        .filter(|s| {
            observed
                .instances
                .get(s)
                .is_some_and(|i| i.healthy_replica())
        })
        .map(|s| ctx.name(*s))
        .filter(|name| !observed.routing.ro.contains(name))
        .collect();
    if !missing.is_empty() {
        verdicts.push(Verdict::progress(
            "WaitingForRouting",
            format!(
                "the -ro Service does not route to {} yet",
                missing.join(", ")
            ),
        ));
    }
    verdicts
}
