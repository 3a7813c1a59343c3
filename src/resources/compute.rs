//! CPU and memory of the containers Tusk runs.
//!
//! An instance's container (the manager and PostgreSQL) gets
//! `spec.resources` with its defaults ([`instance`]); the copy-binary init
//! container of an instance pod gets the same, so that it never lowers the
//! pod's QoS class (Kubernetes counts init containers too). CPU is kept out
//! of the pod spec hash ([`without_cpu`]): a CPU change is resized in place
//! where the cluster allows it, and only rolls when it does not.
//!
//! Jobs get their own, fixed, documented resources ([`job`]): requests
//! so they are never BestEffort, and memory limits no lower than the
//! instance's memory where the Job runs PostgreSQL on the instance's
//! configuration (its derived `shared_buffers` must fit).
//!
//! | Job | requests | limits |
//! |---|---|---|
//! | upgrade (check, upgrade, rollback) | cpu 100m, memory 256Mi | memory max(2Gi, instance memory) |
//! | backup verification | cpu 100m, memory 256Mi | cpu 1, memory max(1Gi, instance memory) |
//! | schema migration | cpu 50m, memory 128Mi | none (the application's image) |
//! | copying `tusk` into a Job's pod | cpu 10m, memory 32Mi | memory 32Mi |

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::resources::InstanceResources;

/// Annotation on an instance pod: the CPU (`<request>/<limit>` in
/// millicores, `-` for none) a resize to was refused by the API server, so
/// the planner rolls the pod instead of trying again.
pub const RESIZE_REFUSED_ANNOTATION: &str = "tusk.dev/resize-refused";

/// The [`RESIZE_REFUSED_ANNOTATION`] value of a CPU request and limit.
pub fn cpu_key(request: Option<u128>, limit: Option<u128>) -> String {
    let text = |v: Option<u128>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    format!("{}/{}", text(request), text(limit))
}

/// A Job Tusk runs, as far as its resources go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    Upgrade,
    Verification,
    Migration,
    /// The init container that copies `tusk` into a Job's pod.
    CopyBinary,
}

/// The instance container's requests and limits.
pub fn instance(resources: &InstanceResources) -> ResourceRequirements {
    let requests = BTreeMap::from([
        (
            "cpu".to_owned(),
            Quantity(resources.requests.cpu.text.clone()),
        ),
        (
            "memory".to_owned(),
            Quantity(resources.requests.memory.text.clone()),
        ),
    ]);
    let limits: BTreeMap<String, Quantity> = [
        ("cpu", &resources.limits.cpu),
        ("memory", &resources.limits.memory),
    ]
    .into_iter()
    .filter_map(|(name, limit)| Some((name.to_owned(), Quantity(limit.as_ref()?.text.clone()))))
    .collect();
    ResourceRequirements {
        requests: Some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    }
}

/// A Job's container's requests and limits (see the module's table);
/// `instance_memory` is what the instances' settings are derived for.
pub fn job(kind: JobKind, instance_memory: u128) -> ResourceRequirements {
    let at_least = |floor: u128| -> String {
        let bytes = instance_memory.max(floor);
        if bytes.is_multiple_of(1 << 20) {
            format!("{}Mi", bytes >> 20)
        } else {
            bytes.to_string()
        }
    };
    type Requests = &'static [(&'static str, &'static str)];
    let (requests, limits): (Requests, Vec<(&str, String)>) = match kind {
        JobKind::Upgrade => (
            &[("cpu", "100m"), ("memory", "256Mi")],
            vec![("memory", at_least(2 << 30))],
        ),
        JobKind::Verification => (
            &[("cpu", "100m"), ("memory", "256Mi")],
            vec![("cpu", "1".to_owned()), ("memory", at_least(1 << 30))],
        ),
        JobKind::Migration => (&[("cpu", "50m"), ("memory", "128Mi")], Vec::new()),
        JobKind::CopyBinary => (
            &[("cpu", "10m"), ("memory", "32Mi")],
            vec![("memory", "32Mi".to_owned())],
        ),
    };
    let list = |items: Vec<(&str, String)>| -> BTreeMap<String, Quantity> {
        items
            .into_iter()
            .map(|(name, value)| (name.to_owned(), Quantity(value)))
            .collect()
    };
    ResourceRequirements {
        requests: Some(list(
            requests
                .iter()
                .map(|(k, v)| (*k, (*v).to_owned()))
                .collect(),
        )),
        limits: (!limits.is_empty()).then(|| list(limits)),
        ..ResourceRequirements::default()
    }
}

/// `spec` without any container's CPU request or limit: what the spec
/// hash covers, so that a CPU change alone does not make a pod outdated.
pub fn without_cpu(spec: &mut PodSpec) {
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for container in containers {
        if let Some(resources) = &mut container.resources {
            for list in [&mut resources.requests, &mut resources.limits]
                .into_iter()
                .flatten()
            {
                list.remove("cpu");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::{ComputeResources, ResourcesSpec, resolve};

    fn quantities(list: &Option<BTreeMap<String, Quantity>>) -> Vec<(String, String)> {
        list.iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect()
    }

    #[test]
    fn instance_resources_as_written_and_defaults_without_limits() {
        let defaults = instance(&resolve(None).expect("defaults"));
        assert_eq!(
            quantities(&defaults.requests),
            [
                ("cpu".into(), "50m".into()),
                ("memory".into(), "256Mi".into())
            ]
        );
        assert_eq!(defaults.limits, None);
        let spec = ResourcesSpec {
            requests: None,
            limits: Some(ComputeResources {
                cpu: Some("500m".into()),
                memory: Some("1Gi".into()),
            }),
        };
        let guaranteed = instance(&resolve(Some(&spec)).expect("resolves"));
        assert_eq!(
            quantities(&guaranteed.requests),
            quantities(&guaranteed.limits)
        );
    }

    #[test]
    fn every_job_requests_cpu_and_memory() {
        for kind in [
            JobKind::Upgrade,
            JobKind::Verification,
            JobKind::Migration,
            JobKind::CopyBinary,
        ] {
            let names: Vec<String> = quantities(&job(kind, 256 << 20).requests)
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(names, ["cpu", "memory"], "{kind:?}");
        }
    }

    #[test]
    fn jobs_running_the_instance_s_settings_get_at_least_its_memory() {
        let big = 8u128 << 30;
        for kind in [JobKind::Upgrade, JobKind::Verification] {
            let limits = job(kind, big).limits.expect("limits");
            assert_eq!(limits["memory"].0, "8192Mi", "{kind:?}");
        }
        assert_eq!(
            job(JobKind::Upgrade, 256 << 20).limits.expect("limits")["memory"].0,
            "2048Mi"
        );
    }
}
