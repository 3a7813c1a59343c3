//! The CPU of an instance pod's `postgres` container as the API server and
//! the kubelet report it (pure), and whether it must roll because it cannot
//! be resized in place (see [`crate::lifecycle::cpu`]).

use k8s_openapi::api::core::v1::{Pod as KubePod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::model::ValidatedDatabase;
use crate::api::quantity;
use crate::lifecycle::cpu::{self as resize, Cpu, CpuDecision, PodCpu, ResizeCondition};
use crate::resources::POSTGRES_CONTAINER;
use crate::resources::compute::{RESIZE_REFUSED_ANNOTATION, cpu_key};

/// What `pod` says of its `postgres` container's CPU.
pub fn pod_cpu(pod: &KubePod) -> PodCpu {
    let spec = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == POSTGRES_CONTAINER))
        .and_then(|c| c.resources.as_ref())
        .map(cpu_of)
        .unwrap_or_default();
    let status = pod.status.as_ref();
    let running = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == POSTGRES_CONTAINER))
        .and_then(|c| c.resources.as_ref())
        .map(cpu_of);
    let conditions = status.and_then(|s| s.conditions.as_ref());
    let condition = conditions
        .into_iter()
        .flatten()
        .filter(|c| c.status == "True")
        .find_map(|c| {
            let why = || {
                let reason = c.reason.clone().unwrap_or_default();
                match &c.message {
                    Some(message) if !message.is_empty() => format!("{reason}: {message}"),
                    _ => reason,
                }
            };
            match (c.type_.as_str(), c.reason.as_deref()) {
                ("PodResizePending", Some("Infeasible")) => {
                    Some(ResizeCondition::Infeasible(why()))
                }
                ("PodResizePending", _) => Some(ResizeCondition::Waiting(why())),
                ("PodResizeInProgress", Some("Error")) => Some(ResizeCondition::Waiting(why())),
                ("PodResizeInProgress", _) => Some(ResizeCondition::InProgress),
                _ => None,
            }
        })
        .unwrap_or_default();
    let refused = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESIZE_REFUSED_ANNOTATION))
        .and_then(|key| parse_key(key));
    PodCpu {
        spec,
        running,
        condition,
        refused,
        qos_class: status.and_then(|s| s.qos_class.clone()),
    }
}

/// The pod cannot take the spec's CPU in place: the rolling update must
/// replace it.
pub fn must_roll(model: &ValidatedDatabase, cpu: &PodCpu) -> bool {
    let (request, limit) = model.resources.cpu();
    let want = Cpu {
        request: Some(request.value),
        limit: limit.map(|l| l.value),
    };
    matches!(
        resize::decide(want, model.resources.qos_class(), cpu),
        CpuDecision::Roll(_)
    )
}

fn cpu_of(resources: &ResourceRequirements) -> Cpu {
    let millicores = |list: &Option<std::collections::BTreeMap<String, Quantity>>| {
        list.as_ref()
            .and_then(|l| l.get("cpu"))
            .and_then(|q| quantity::parse_millicores(&q.0).ok())
    };
    Cpu {
        request: millicores(&resources.requests),
        limit: millicores(&resources.limits),
    }
}

fn parse_key(key: &str) -> Option<Cpu> {
    let (request, limit) = key.split_once('/')?;
    let value = |v: &str| (v != "-").then(|| v.parse().ok()).flatten();
    let cpu = Cpu {
        request: value(request),
        limit: value(limit),
    };
    (cpu_key(cpu.request, cpu.limit) == key).then_some(cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_key_round_trips() {
        for (request, limit) in [(Some(500), Some(1000)), (Some(250), None)] {
            let key = cpu_key(request, limit);
            assert_eq!(parse_key(&key), Some(Cpu { request, limit }), "{key}");
        }
        assert_eq!(parse_key("garbage"), None);
    }

    #[test]
    fn the_kubelet_s_resize_conditions_are_read() {
        let pod: KubePod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "db-1", "annotations": { RESIZE_REFUSED_ANNOTATION: "1000/1000" } },
            "spec": { "containers": [{ "name": POSTGRES_CONTAINER, "resources": {
                "requests": { "cpu": "500m", "memory": "256Mi" }, "limits": { "cpu": "0.5" } } }] },
            "status": {
                "qosClass": "Burstable",
                "conditions": [{ "type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "too big" }],
                "containerStatuses": [{ "name": POSTGRES_CONTAINER, "image": "", "imageID": "", "ready": true,
                    "restartCount": 0, "resources": { "requests": { "cpu": "250m" } } }]
            }
        }))
        .expect("a pod");
        let cpu = pod_cpu(&pod);
        assert_eq!(
            cpu.spec,
            Cpu {
                request: Some(500),
                limit: Some(500)
            }
        );
        assert_eq!(
            cpu.running,
            Some(Cpu {
                request: Some(250),
                limit: None
            })
        );
        assert_eq!(
            cpu.condition,
            ResizeCondition::Infeasible("Infeasible: too big".into())
        );
        assert_eq!(
            cpu.refused,
            Some(Cpu {
                request: Some(1000),
                limit: Some(1000)
            })
        );
        assert_eq!(cpu.qos_class.as_deref(), Some("Burstable"));
    }
}
