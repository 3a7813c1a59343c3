//! The state `plan` starts from: the objects the API server holds for a
//! Database reduced to the [`Observed`] the planner decides on, by the
//! operator's own reduction ([`observe::reduce`]) over a [`Snapshot`] made of
//! them. Pure: the objects are listed by `plan`'s shell.
//!
//! The one approximation: the plugin cannot reach the instance managers, so
//! each manager's answer is made up from what the operator last published
//! of it in `status.instances` (role, ready, timeline, LSN, version) and its
//! pod, with the parameters and the synchronous standbys the current spec
//! asks for (what a settled Database runs). An instance the status lists
//! without a role is one whose manager did not answer.
//!
//! Which pods are outdated is decided by the spec hash the operator wrote on
//! each pod: the pod is outdated under the new spec when the new spec's
//! hash differs from the current spec's. The operator's build settings
//! (repository of the PostgreSQL images, the operator image) are read off
//! the pods ([`build_of`]); should they still differ from the operator's,
//! a pod whose hash matches neither spec is taken as built from the current
//! one.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod as KubePod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::model::ValidatedDatabase;
use crate::api::status::InstanceStatus;
use crate::api::v1::{Backup, Database};
use crate::contract::{API_VERSION, Lsn, PgStatus, Role, Status, SyncSettings};
use crate::controller::database::observe::{self, Snapshot};
use crate::lifecycle::{self, Action, LeaseState, Observed};
use crate::resources::{self, BuildConfig, POSTGRES_CONTAINER, SPEC_HASH_ANNOTATION, names};

/// What the API server holds for one Database, as `plan` lists it.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    /// The instance pods.
    pub pods: Vec<KubePod>,
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// Tusk's Jobs for the Database, and their pods.
    pub jobs: Vec<Job>,
    pub job_pods: Vec<KubePod>,
    /// The Secrets' metadata (never their data).
    pub secrets: Vec<ObjectMeta>,
    pub services: Vec<Service>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub endpoints: Vec<EndpointSlice>,
    /// The primary Lease.
    pub lease: Option<Lease>,
    /// The Lease, and the instances' ServiceAccount, Role and RoleBinding,
    /// all exist.
    pub lease_access: bool,
    pub backups: Vec<Backup>,
    /// Whether each StorageClass the PVCs name allows expansion, or why
    /// that could not be read.
    pub storage_classes: BTreeMap<String, Result<bool, String>>,
    /// When the objects were listed.
    pub now: Timestamp,
}

/// The operator's build settings as far as the pods show them: the
/// operator image (the init container's), the PostgreSQL images'
/// repository (a pod's image less the tag when the spec names no image),
/// the pull policy and the OpenTelemetry environment of the managers.
pub fn build_of(current: &Database, pods: &[KubePod]) -> BuildConfig {
    let mut build = BuildConfig {
        postgres_repository: "postgres".to_owned(),
        tusk_image: String::new(),
        image_pull_policy: None,
        instance_env: Vec::new(),
        default_store: None,
        node_ports: crate::api::expose::NodePortRange::default(),
        instance_self_label: false,
    };
    let Some(spec) = pods.iter().find_map(|p| p.spec.as_ref()) else {
        return build;
    };
    if let Some(init) = spec.init_containers.as_ref().and_then(|c| c.first()) {
        build.tusk_image = init.image.clone().unwrap_or_default();
    }
    if let Some(postgres) = spec
        .containers
        .iter()
        .find(|c| c.name == POSTGRES_CONTAINER)
    {
        build.image_pull_policy = postgres.image_pull_policy.clone();
        build.instance_env = postgres
            .env
            .iter()
            .flatten()
            .filter(|e| e.name.starts_with("OTEL_"))
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect();
        let image = postgres.image.clone().unwrap_or_default();
        if current.spec.image.as_deref().is_none_or(str::is_empty)
            && let Some((repository, _tag)) = image.rsplit_once(':')
            && !repository.is_empty()
        {
            build.postgres_repository = repository.to_owned();
        }
    }
    build
}

/// The state the planner starts from when `new` (validated as `model`)
/// replaces `current` (its spec and status as stored), from `objects`.
pub fn observed(
    current: &Database,
    current_model: &ValidatedDatabase,
    new: &Database,
    model: &ValidatedDatabase,
    objects: &Objects,
    build: &BuildConfig,
) -> Observed {
    let status = current.status.clone().unwrap_or_default();
    let parameters = current_model.effective_parameters();
    let managers = objects
        .pods
        .iter()
        .filter_map(|pod| {
            let name = pod.name_any();
            let reported = status.instances.iter().find(|i| i.name == name)?;
            Some((name, manager_of(reported, &parameters)?))
        })
        .collect();
    let snapshot = Snapshot {
        pvcs: objects.pvcs.clone(),
        pods: objects.pods.clone(),
        jobs: objects.jobs.clone(),
        job_pods: objects.job_pods.clone(),
        secrets: objects.secrets.clone(),
        services: objects.services.clone(),
        pdbs: objects.pdbs.clone(),
        endpoints: objects.endpoints.clone(),
        managers,
        storage_classes: objects.storage_classes.clone(),
        lease: lease_state(objects.lease.as_ref(), objects.now),
        lease_access: objects.lease_access,
        backups: objects.backups.clone(),
        now: objects.now,
        ..Snapshot::default()
    };
    let mut observed = observe::reduce(new, model, &snapshot, build);
    for pod in &objects.pods {
        let Some(serial) = names::serial_of(&model.name, &pod.name_any()) else {
            continue;
        };
        let Some(observed_pod) = observed
            .instances
            .get_mut(&serial)
            .and_then(|i| i.pod.as_mut())
        else {
            continue;
        };
        observed_pod.outdated = outdated(
            current_model,
            model,
            serial,
            pod,
            build,
            observed_pod.outdated,
        );
    }
    settle(current, &mut observed);
    observed
}

/// Whether `pod` is outdated under `model` (the new spec's), given that
/// the operator's own reduction said `reduced` (against `model` with the
/// build settings read off the pods).
fn outdated(
    current: &ValidatedDatabase,
    model: &ValidatedDatabase,
    serial: u32,
    pod: &KubePod,
    build: &BuildConfig,
    reduced: bool,
) -> bool {
    let have = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SPEC_HASH_ANNOTATION));
    let image = resources::postgres_image(pod);
    let old = resources::instance_spec_hash(current, serial, &image, build);
    let new = resources::instance_spec_hash(model, serial, &model.image, build);
    if have == Some(&new) {
        // As built for the new spec; the reduction still rolls a pod
        // whose CPU cannot be resized.
        return reduced;
    }
    if have == Some(&old) {
        return true;
    }
    // Built with settings this reading of the pods does not match: taken
    // as built from the current spec.
    resources::instance_spec_hash(current, serial, &current.image, build) != new
}

/// What a settled Database's managers run that the plugin cannot ask them:
/// the synchronous standbys the current spec asks for.
fn settle(current: &Database, observed: &mut Observed) {
    let decided = lifecycle::plan(&current.spec, current.status.as_ref(), observed);
    for action in decided.actions {
        if let Action::ConfigureSync { standbys, min, .. } = action {
            observed.sync = lifecycle::SyncStandbys { standbys, min };
        }
    }
}

/// An instance manager's `/status` as `status.instances` last showed it;
/// `None` for an instance whose manager did not answer then.
pub fn manager_of(
    reported: &InstanceStatus,
    parameters: &BTreeMap<String, String>,
) -> Option<Status> {
    let role = reported.role?;
    let lsn = reported.lsn.as_deref().and_then(|l| l.parse::<Lsn>().ok());
    let (major, minor) = reported
        .version
        .as_deref()
        .and_then(|v| v.split_once('.'))
        .and_then(|(major, minor)| Some((major.parse::<i32>().ok()?, minor.parse::<i32>().ok()?)))
        .unwrap_or((0, 0));
    Some(Status {
        api_version: API_VERSION,
        instance: reported.name.clone(),
        pod: Some(reported.name.clone()),
        namespace: None,
        postgres: PgStatus {
            role,
            timeline: reported.timeline,
            current_lsn: lsn.filter(|_| role == Role::Primary),
            received_lsn: lsn.filter(|_| role == Role::Replica),
            replayed_lsn: lsn.filter(|_| role == Role::Replica),
            streaming: Some(role == Role::Replica && reported.ready),
            system_identifier: reported.system_identifier.clone().unwrap_or_default(),
            version: reported.version.clone().unwrap_or_default(),
            version_num: major * 10_000 + minor,
            pending_restart: false,
            inactive_slots: Vec::new(),
            archiver: None,
            replay_lag_milliseconds: Default::default(),
        },
        ready: reported.ready,
        parameters: parameters.clone(),
        sync: None::<SyncSettings>,
        ha: None,
        tls: None,
        faults: None,
    })
}

/// The primary Lease as an observer reading it once at `now` sees it.
pub fn lease_state(lease: Option<&Lease>, now: Timestamp) -> LeaseState {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return LeaseState::Unobserved;
    };
    let Some(holder) = spec.holder_identity.clone().filter(|h| !h.is_empty()) else {
        return LeaseState::Released;
    };
    let duration = std::time::Duration::from_secs(
        u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15),
    );
    let renewed = spec.renew_time.as_ref().map(|t| t.0);
    let age = renewed
        .and_then(|at| now.duration_since(at).try_into().ok())
        .unwrap_or(std::time::Duration::ZERO);
    if age <= duration {
        LeaseState::Held {
            holder,
            remaining: duration - age,
        }
    } else {
        LeaseState::Expired {
            holder,
            overdue: age - duration,
        }
    }
}

#[cfg(test)]
#[path = "plan_observe_tests.rs"]
mod tests;
