//! The CPU of an instance pod as observed, and the decision per pod that
//! the resize planner (`super::resize`) and the controller (which counts a
//! pod that must roll as outdated) both take from [`decide`]: in sync,
//! resize in place, being resized, or roll.

use crate::api::resources::{self, QosClass};

/// CPU of a container in millicores: its request and limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cpu {
    pub request: Option<u128>,
    pub limit: Option<u128>,
}

/// The kubelet's word on a resize (the pod's `PodResizePending` and
/// `PodResizeInProgress` conditions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ResizeCondition {
    #[default]
    None,
    /// Being applied.
    InProgress,
    /// Waiting for the node to have room (`Deferred`), or failed (`Error`):
    /// the kubelet retries.
    Waiting(String),
    /// The node can never give it (`Infeasible`).
    Infeasible(String),
}

/// The CPU of an instance pod's `postgres` container as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodCpu {
    /// What the pod's spec asks for.
    pub spec: Cpu,
    /// What the container runs, as the kubelet reports it; `None` when it
    /// does not (not started, or a kubelet that does not report it).
    pub running: Option<Cpu>,
    pub condition: ResizeCondition,
    /// The CPU a resize to was refused by the API server (recorded on the
    /// pod by the controller, `tusk.dev/resize-refused`).
    pub refused: Option<Cpu>,
    /// `status.qosClass`.
    pub qos_class: Option<String>,
}

/// What a pod's CPU calls for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuDecision {
    /// It runs the spec's CPU.
    InSync,
    /// Resize it in place.
    Resize,
    /// Its spec has the CPU asked for; the kubelet has not applied it yet.
    Resizing(String),
    /// It cannot be resized in place: replace it (why).
    Roll(String),
}

/// The decision for `pod` when the spec asks for `want` in a pod of class
/// `qos`.
pub fn decide(want: Cpu, qos: QosClass, pod: &PodCpu) -> CpuDecision {
    if pod.spec == want {
        return match &pod.condition {
            ResizeCondition::Infeasible(why) => {
                CpuDecision::Roll(format!("the node cannot give it ({why})"))
            }
            ResizeCondition::Waiting(why) => CpuDecision::Resizing(why.clone()),
            ResizeCondition::InProgress => CpuDecision::Resizing("in progress".to_owned()),
            ResizeCondition::None if pod.running.is_some_and(|r| r != want) => {
                CpuDecision::Resizing("not yet applied by the kubelet".to_owned())
            }
            ResizeCondition::None => CpuDecision::InSync,
        };
    }
    if pod.spec == Cpu::default() {
        // Built before `spec.resources` (its spec hash marks it outdated
        // too): a resize cannot add a request to a BestEffort pod.
        return CpuDecision::Roll(
            "its spec has no CPU; adding one changes its QoS class".to_owned(),
        );
    }
    if pod.refused == Some(want) {
        return CpuDecision::Roll("the API server refused to resize it in place".to_owned());
    }
    if pod.qos_class.as_deref().is_some_and(|q| q != qos.as_str()) {
        return CpuDecision::Roll(format!(
            "its QoS class would change to {}, which a resize cannot do",
            qos.as_str()
        ));
    }
    if want.limit.is_none() && pod.spec.limit.is_some() {
        return CpuDecision::Roll("a CPU limit cannot be removed in place".to_owned());
    }
    CpuDecision::Resize
}

/// The spec's CPU and QoS class; `None` when `spec.resources` does not
/// resolve (the controller does not plan for an invalid spec).
pub fn wanted(
    spec: &crate::api::v1::DatabaseSpec,
) -> Option<(Cpu, QosClass, (String, Option<String>))> {
    let resolved = resources::resolve(spec.resources.as_ref())?;
    let (request, limit) = resolved.cpu();
    Some((
        Cpu {
            request: Some(request.value),
            limit: limit.as_ref().map(|l| l.value),
        },
        resolved.qos_class(),
        (request.text, limit.map(|l| l.text)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(request: u128, limit: Option<u128>) -> Cpu {
        Cpu {
            request: Some(request),
            limit,
        }
    }

    fn pod(spec: Cpu, running: Option<Cpu>, qos: &str) -> PodCpu {
        PodCpu {
            spec,
            running,
            qos_class: Some(qos.to_owned()),
            ..PodCpu::default()
        }
    }

    #[test]
    fn resize_or_roll_table() {
        use CpuDecision::*;
        let g = QosClass::Guaranteed;
        let b = QosClass::Burstable;
        let one = cpu(1000, Some(1000));
        let half = cpu(500, Some(500));
        let refused = PodCpu {
            refused: Some(one),
            ..pod(half, Some(half), "Guaranteed")
        };
        let infeasible = PodCpu {
            condition: ResizeCondition::Infeasible("Node didn't have enough capacity".into()),
            ..pod(one, Some(half), "Guaranteed")
        };
        let deferred = PodCpu {
            condition: ResizeCondition::Waiting("Deferred".into()),
            ..pod(one, Some(half), "Guaranteed")
        };
        let cases: Vec<(&str, Cpu, QosClass, PodCpu, CpuDecision)> = vec![
            ("in sync", one, g, pod(one, Some(one), "Guaranteed"), InSync),
            (
                "kubelet silent",
                one,
                g,
                pod(one, None, "Guaranteed"),
                InSync,
            ),
            (
                "Guaranteed to Guaranteed",
                one,
                g,
                pod(half, Some(half), "Guaranteed"),
                Resize,
            ),
            (
                "Burstable request",
                cpu(200, None),
                b,
                pod(cpu(100, None), None, "Burstable"),
                Resize,
            ),
            (
                "patched, not applied",
                one,
                g,
                pod(one, Some(half), "Guaranteed"),
                Resizing("not yet applied by the kubelet".into()),
            ),
            ("deferred", one, g, deferred, Resizing("Deferred".into())),
            (
                "infeasible",
                one,
                g,
                infeasible,
                Roll("the node cannot give it (Node didn't have enough capacity)".into()),
            ),
            (
                "refused",
                one,
                g,
                refused,
                Roll("the API server refused to resize it in place".into()),
            ),
            (
                "QoS change",
                cpu(250, Some(1000)),
                b,
                pod(one, Some(one), "Guaranteed"),
                Roll("its QoS class would change to Burstable, which a resize cannot do".into()),
            ),
            (
                "no CPU yet",
                one,
                g,
                pod(Cpu::default(), None, "BestEffort"),
                Roll("its spec has no CPU; adding one changes its QoS class".into()),
            ),
            (
                "limit removed",
                cpu(500, None),
                b,
                pod(cpu(500, Some(1000)), None, "Burstable"),
                Roll("a CPU limit cannot be removed in place".into()),
            ),
        ];
        for (case, want, qos, pod, decision) in cases {
            assert_eq!(decide(want, qos, &pod), decision, "{case}");
        }
    }
}
