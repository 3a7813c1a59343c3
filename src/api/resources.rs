//! `spec.resources`: CPU and memory of each instance's container, resolved
//! (defaults folded in, quantities parsed) into the [`InstanceResources`] the
//! builders and the planner take, and checked ([`errors`]) with messages
//! that name the field.
//!
//! One container runs both the instance manager (PID 1, `tusk instance`)
//! and PostgreSQL, so `spec.resources` covers both: the manager's share
//! (a few tens of MiB and little CPU) is inside the requests and limits,
//! and the derived memory settings set [`MANAGER_RESERVE_BYTES`] aside for
//! it (see [`crate::postgres::memory`]).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::field::FieldError;
use super::quantity;

/// CPU request of an instance whose spec names none (and no CPU limit):
/// enough to be scheduled as Burstable, never BestEffort, small enough for
/// three instances on a laptop-sized node.
pub const DEFAULT_CPU_REQUEST: &str = "50m";
/// Memory request of an instance whose spec names none (and no memory
/// limit): what a small PostgreSQL and its manager use idle.
pub const DEFAULT_MEMORY_REQUEST: &str = "256Mi";
/// The least memory (limit, else request) an instance may be given: below
/// it PostgreSQL, its manager and a checkpoint do not fit.
pub const MIN_MEMORY_BYTES: u128 = 128 << 20;
pub use crate::postgres::memory::MANAGER_RESERVE_BYTES;

/// CPU and memory of each instance's container, in the shape of a
/// container's `resources`. The container runs PostgreSQL and Tusk's
/// instance manager (which needs about 30Mi and little CPU of it). Unset
/// requests default to the limits when set, else to `cpu: 50m`,
/// `memory: 256Mi`, so instances are never BestEffort; requests equal to
/// limits for both give the Guaranteed QoS class. Unless set in
/// `spec.postgresql.parameters`, `shared_buffers`, `effective_cache_size`,
/// `maintenance_work_mem`, `work_mem` follow the memory limit (else the
/// request), and `max_wal_size` the volume (see `status.resources`). A CPU
/// change is applied in place where the cluster supports pod resize
/// (Kubernetes 1.33+) and rolls otherwise; a memory change rolls (replicas,
/// a switchover, then the old primary).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesSpec {
    /// What the scheduler reserves for each instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ComputeResources>,
    /// The most each instance may use: CPU is throttled above it, memory
    /// is OOM-killed above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ComputeResources>,
}

/// CPU and memory quantities.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ComputeResources {
    /// CPU, as a Kubernetes quantity: `500m`, `1`, `1.5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?m?$"), length(max = 16))]
    pub cpu: Option<String>,
    /// Memory, as a Kubernetes quantity: `512Mi`, `2Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"),
        length(max = 32)
    )]
    pub memory: Option<String>,
}

/// A quantity as written (what the pod spec carries) and its value
/// (millicores for CPU, bytes for memory) to compare with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    pub text: String,
    pub value: u128,
}

/// CPU and memory, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compute<T> {
    pub cpu: T,
    pub memory: T,
}

/// An instance container's resources, defaults folded in: requests are
/// always set, limits only when the spec sets them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceResources {
    pub requests: Compute<Quantity>,
    pub limits: Compute<Option<Quantity>>,
}

/// The pod QoS class Kubernetes gives a pod whose containers all have
/// these resources (`status.qosClass`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
}

impl QosClass {
    /// As Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
        }
    }
}

impl InstanceResources {
    /// Guaranteed when both limits are set and equal the requests.
    pub fn qos_class(&self) -> QosClass {
        let equal = |request: &Quantity, limit: &Option<Quantity>| {
            limit.as_ref().is_some_and(|l| l.value == request.value)
        };
        if equal(&self.requests.cpu, &self.limits.cpu)
            && equal(&self.requests.memory, &self.limits.memory)
        {
            QosClass::Guaranteed
        } else {
            QosClass::Burstable
        }
    }

    /// The memory PostgreSQL's settings are sized for: the limit, else
    /// the request.
    pub fn memory_bytes(&self) -> u128 {
        self.limits
            .memory
            .as_ref()
            .unwrap_or(&self.requests.memory)
            .value
    }

    /// The same resources with other CPU quantities: what an in-place
    /// resize patches.
    pub fn cpu(&self) -> (Quantity, Option<Quantity>) {
        (self.requests.cpu.clone(), self.limits.cpu.clone())
    }
}

/// `status.resources`: what each instance is given and what Tusk derived
/// from it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesStatus {
    /// The QoS class the instance pods get: `Guaranteed` (requests equal
    /// limits) or `Burstable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<String>,
    /// The memory the settings are sized for: the limit, else the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The PostgreSQL settings derived from the memory and the volume that
    /// `spec.postgresql.parameters` does not set, as given to PostgreSQL.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub derived: std::collections::BTreeMap<String, String>,
}

/// `status.resources` for resources `resources`, whose derived settings
/// not set by the user are `derived`.
pub fn status(
    resources: &InstanceResources,
    derived: std::collections::BTreeMap<String, String>,
) -> ResourcesStatus {
    let memory = resources
        .limits
        .memory
        .as_ref()
        .unwrap_or(&resources.requests.memory);
    ResourcesStatus {
        qos_class: Some(resources.qos_class().as_str().to_owned()),
        memory: Some(memory.text.clone()),
        derived,
    }
}

/// `spec.resources` resolved; `None` when it does not pass [`errors`].
pub fn resolve(spec: Option<&ResourcesSpec>) -> Option<InstanceResources> {
    let requests = spec.and_then(|s| s.requests.clone()).unwrap_or_default();
    let limits = spec.and_then(|s| s.limits.clone()).unwrap_or_default();
    let cpu = |text: &str| {
        Some(Quantity {
            text: text.to_owned(),
            value: quantity::parse_millicores(text).ok()?,
        })
    };
    let memory = |text: &str| {
        Some(Quantity {
            text: text.to_owned(),
            value: quantity::parse_bytes(text).ok()?,
        })
    };
    let limit_cpu = match limits.cpu.as_deref() {
        Some(text) => Some(cpu(text)?),
        None => None,
    };
    let limit_memory = match limits.memory.as_deref() {
        Some(text) => Some(memory(text)?),
        None => None,
    };
    // As Kubernetes does: an unset request is the limit, when there is one.
    let request_cpu = match (&requests.cpu, &limit_cpu) {
        (Some(text), _) => cpu(text)?,
        (None, Some(limit)) => limit.clone(),
        (None, None) => cpu(DEFAULT_CPU_REQUEST)?,
    };
    let request_memory = match (&requests.memory, &limit_memory) {
        (Some(text), _) => memory(text)?,
        (None, Some(limit)) => limit.clone(),
        (None, None) => memory(DEFAULT_MEMORY_REQUEST)?,
    };
    Some(InstanceResources {
        requests: Compute {
            cpu: request_cpu,
            memory: request_memory,
        },
        limits: Compute {
            cpu: limit_cpu,
            memory: limit_memory,
        },
    })
}

/// What is wrong with `spec.resources`, naming each field: quantities
/// that do not parse or are zero, requests above limits, too little memory.
pub fn errors(spec: Option<&ResourcesSpec>) -> Vec<FieldError> {
    let Some(spec) = spec else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    let mut parsed = |kind: &str, resource: &str, text: Option<&String>| -> Option<u128> {
        let path = format!("spec.resources.{kind}.{resource}");
        let text = text?;
        let value = if resource == "cpu" {
            quantity::parse_millicores(text)
        } else {
            quantity::parse_bytes(text)
        };
        match value {
            Ok(0) => {
                errors.push(FieldError::new(path, "must be greater than zero"));
                None
            }
            Ok(value) => Some(value),
            Err(e) => {
                errors.push(FieldError::new(path, e));
                None
            }
        }
    };
    let requests = spec.requests.clone().unwrap_or_default();
    let limits = spec.limits.clone().unwrap_or_default();
    let request_cpu = parsed("requests", "cpu", requests.cpu.as_ref());
    let request_memory = parsed("requests", "memory", requests.memory.as_ref());
    let limit_cpu = parsed("limits", "cpu", limits.cpu.as_ref());
    let limit_memory = parsed("limits", "memory", limits.memory.as_ref());
    for (resource, request, limit, text) in [
        ("cpu", request_cpu, limit_cpu, (&requests.cpu, &limits.cpu)),
        (
            "memory",
            request_memory,
            limit_memory,
            (&requests.memory, &limits.memory),
        ),
    ] {
        if let (Some(request), Some(limit)) = (request, limit)
            && request > limit
        {
            errors.push(FieldError::new(
                format!("spec.resources.requests.{resource}"),
                format!(
                    "{} is above spec.resources.limits.{resource} ({}): a request may not exceed its limit",
                    text.0.as_deref().unwrap_or_default(),
                    text.1.as_deref().unwrap_or_default()
                ),
            ));
        }
    }
    let memory = limit_memory
        .map(|v| ("limits", v))
        .or_else(|| request_memory.map(|v| ("requests", v)));
    if let Some((kind, bytes)) = memory
        && bytes < MIN_MEMORY_BYTES
    {
        errors.push(FieldError::new(
            format!("spec.resources.{kind}.memory"),
            "must be at least 128Mi: PostgreSQL and its instance manager share it",
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(
        requests: (Option<&str>, Option<&str>),
        limits: (Option<&str>, Option<&str>),
    ) -> ResourcesSpec {
        let compute = |(cpu, memory): (Option<&str>, Option<&str>)| {
            (cpu.is_some() || memory.is_some()).then(|| ComputeResources {
                cpu: cpu.map(str::to_owned),
                memory: memory.map(str::to_owned),
            })
        };
        ResourcesSpec {
            requests: compute(requests),
            limits: compute(limits),
        }
    }

    #[test]
    fn unset_resources_get_the_documented_non_zero_requests() {
        let resolved = resolve(None).expect("defaults resolve");
        assert_eq!(resolved.requests.cpu.text, DEFAULT_CPU_REQUEST);
        assert_eq!(resolved.requests.memory.text, DEFAULT_MEMORY_REQUEST);
        assert_eq!(resolved.requests.cpu.value, 50);
        assert_eq!(
            resolved.limits,
            Compute {
                cpu: None,
                memory: None
            }
        );
        assert_eq!(resolved.qos_class(), QosClass::Burstable);
        assert_eq!(resolved.memory_bytes(), 256 << 20);
    }

    #[test]
    fn qos_class_table() {
        let cases = [
            (
                (Some("1"), Some("1Gi")),
                (Some("1"), Some("1Gi")),
                QosClass::Guaranteed,
            ),
            // equal values written differently are equal
            (
                (Some("1000m"), Some("1024Mi")),
                (Some("1"), Some("1Gi")),
                QosClass::Guaranteed,
            ),
            // only limits: requests default to them
            (
                (None, None),
                (Some("500m"), Some("512Mi")),
                QosClass::Guaranteed,
            ),
            (
                (Some("250m"), Some("1Gi")),
                (Some("1"), Some("1Gi")),
                QosClass::Burstable,
            ),
            (
                (Some("1"), Some("512Mi")),
                (Some("1"), Some("1Gi")),
                QosClass::Burstable,
            ),
            ((None, None), (None, Some("1Gi")), QosClass::Burstable),
            ((Some("1"), Some("1Gi")), (None, None), QosClass::Burstable),
        ];
        for (requests, limits, want) in cases {
            let resolved = resolve(Some(&spec(requests, limits))).expect("resolves");
            assert_eq!(resolved.qos_class(), want, "{requests:?} {limits:?}");
        }
    }

    #[test]
    fn memory_follows_the_limit_else_the_request() {
        let limited = resolve(Some(&spec((None, Some("512Mi")), (None, Some("2Gi"))))).expect("ok");
        assert_eq!(limited.memory_bytes(), 2 << 30);
        let requested = resolve(Some(&spec((None, Some("512Mi")), (None, None)))).expect("ok");
        assert_eq!(requested.memory_bytes(), 512 << 20);
    }

    #[test]
    fn each_refusal_names_its_field() {
        let cases = [
            (
                spec((Some("2"), None), (Some("1"), None)),
                "spec.resources.requests.cpu",
            ),
            (
                spec((None, Some("2Gi")), (None, Some("1Gi"))),
                "spec.resources.requests.memory",
            ),
            (
                spec((Some("lots"), None), (None, None)),
                "spec.resources.requests.cpu",
            ),
            (
                spec((None, None), (None, Some("1GB"))),
                "spec.resources.limits.memory",
            ),
            (
                spec((Some("0"), None), (None, None)),
                "spec.resources.requests.cpu",
            ),
            (
                spec((None, None), (None, Some("64Mi"))),
                "spec.resources.limits.memory",
            ),
            (
                spec((None, Some("100Mi")), (None, None)),
                "spec.resources.requests.memory",
            ),
        ];
        for (spec, field) in cases {
            let errors = errors(Some(&spec));
            assert_eq!(
                errors.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
                vec![field],
                "{spec:?}: {errors:?}"
            );
        }
        assert!(
            errors(Some(&spec(
                (Some("500m"), Some("1Gi")),
                (Some("1"), Some("1Gi"))
            )))
            .is_empty()
        );
        assert!(errors(None).is_empty());
    }

    #[test]
    fn a_spec_without_errors_resolves() {
        let ok = spec((Some("0.5"), Some("512Mi")), (Some("1"), Some("1Gi")));
        assert!(errors(Some(&ok)).is_empty());
        let resolved = resolve(Some(&ok)).expect("resolves");
        assert_eq!(resolved.requests.cpu.value, 500);
        assert_eq!(resolved.limits.memory.map(|q| q.value), Some(1 << 30));
    }
}
