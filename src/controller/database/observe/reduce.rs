//! The pure half of observing: the snapshot's objects and the managers'
//! answers reduced to the [`Observed`] the lifecycle decides on, each object
//! compared with what the builders make.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod as KubePod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Resource, ResourceExt};

use super::{JOB_NAME_LABEL, PASSWORD_SYNCED_ANNOTATION, SERVICE_NAME_LABEL, Snapshot};
use crate::api::model::ValidatedDatabase;
use crate::api::v1::Database;
use crate::contract::{API_VERSION, Credential, Lsn, Role, Status};
use crate::controller::database::backups;
use crate::controller::database::migration_jobs::migration_jobs;
use crate::lifecycle::{
    Deletion, InheritedDrift, Instance, JobState, ManagerStatus, Observed, Pod, PodPhase, PvcState,
    RestoreView, Routing, SKIP_FINAL_BACKUP, SyncStandbys,
};
use crate::postgres::params::{self, Change};
use crate::resources::{
    self, BuildConfig, POSTGRES_CONTAINER, SPEC_HASH_ANNOTATION, SecretKind, compare, inherited,
    labels, names, postgres_image,
};

fn ha_view(ha: &crate::contract::HaStatus) -> crate::lifecycle::HaView {
    crate::lifecycle::HaView {
        members: ha.members.clone(),
        peers: ha
            .peers
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    crate::failover::quorum::Report {
                        silent_for: std::time::Duration::from_millis(p.silent_ms),
                        fenced: p.fenced,
                    },
                )
            })
            .collect(),
        fenced: ha.fenced,
        primary_end: ha
            .primary_end
            .as_ref()
            .map(|end| (end.instance.clone(), end.lsn.0)),
    }
}

/// The facts the lifecycle decides on (pure).
pub fn reduce(
    db: &Database,
    model: &ValidatedDatabase,
    snapshot: &Snapshot,
    build: &BuildConfig,
) -> Observed {
    let name = db.name_any();
    let mut instances: BTreeMap<u32, Instance> = BTreeMap::new();
    claims(db, snapshot, &mut instances);
    for (serial, volumes) in super::volumes::volumes(&name, snapshot) {
        instances.entry(serial).or_default().volumes = volumes;
    }
    pods(model, snapshot, build, &mut instances);
    let primary = snapshot
        .understood()
        .map(|(_, s)| s)
        .find(|s| s.postgres.role == Role::Primary);
    let sync = primary
        .and_then(|p| p.sync.clone())
        .map(|s| SyncStandbys {
            standbys: s.standbys,
            min: i32::try_from(s.min).unwrap_or(i32::MAX),
        })
        .unwrap_or_default();
    // Parameters differ when any answering manager runs other ones than the
    // spec's, with the settings derived from its resources.
    let wanted = model.effective_parameters();
    let parameter_change = snapshot
        .understood()
        .map(|(_, s)| params::classify(&s.parameters, &wanted))
        .max()
        .unwrap_or(Change::Nothing);
    let secrets = secrets_as_built(model, snapshot);
    let credentials_to_sync = credentials_to_sync(&name, snapshot);
    let services = services_as_built(model, snapshot);
    let (pod_disruption_budgets, surplus_budgets) = budgets(model, snapshot);
    let inactive_slots = primary
        .map(|p| p.postgres.inactive_slots.clone())
        .unwrap_or_default();
    let missing_store_credentials =
        store_credentials(db).filter(|secret| !snapshot.has_secret(secret));
    Observed {
        database: name.clone(),
        restore: RestoreView {
            unresolved: snapshot.restore.clone().and_then(Result::err),
            progress: snapshot.restoring.values().next().cloned(),
        },
        inactive_slots,
        missing_store_credentials,
        lease: snapshot.lease.clone(),
        lease_access: snapshot.lease_access
            && snapshot.self_label_pods
                == resources::self_label_pods(model, build, snapshot.instance_serials(&name)),
        archiving: primary.and_then(|p| p.postgres.archiver.clone()),
        deleting: db.meta().deletion_timestamp.is_some(),
        secrets,
        credentials_to_sync,
        services,
        pod_disruption_budgets,
        surplus_budgets,
        exposure: super::exposure::exposed(model, &snapshot.services),
        routing: routing(&name, &snapshot.endpoints),
        desired_image: model.image.clone(),
        instances,
        sync,
        parameter_change,
        jobs: snapshot
            .jobs
            .iter()
            .map(|job| (job.name_any(), job_state(job, &snapshot.job_pods)))
            .collect(),
        migration_jobs: migration_jobs(&snapshot.jobs, &snapshot.job_pods),
        backups: backups::of_database(db, &snapshot.backups),
        backups_possible: model.object_store.is_some(),
        now: snapshot.now,
        created: db.metadata.creation_timestamp.as_ref().map(|t| t.0),
        deletion: deletion(db, snapshot),
        last_retention: snapshot.last_retention.clone(),
        inherited_drift: inherited_drift(model, snapshot),
        // Filled by `tls::observe`, which reads the Secrets' data.
        tls: None,
        published: None,
    }
}

/// The instance Pods and PVCs lacking an inherited label or annotation.
fn inherited_drift(model: &ValidatedDatabase, snapshot: &Snapshot) -> InheritedDrift {
    let drifted = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                   own: &BTreeMap<String, String>| {
        !inherited::drift(
            &model.inherited,
            own,
            meta.labels.as_ref().unwrap_or(&BTreeMap::new()),
            meta.annotations.as_ref().unwrap_or(&BTreeMap::new()),
        )
        .is_empty()
    };
    let name = &model.name;
    InheritedDrift {
        pods: snapshot
            .pods
            .iter()
            .filter(|p| p.meta().deletion_timestamp.is_none())
            .filter_map(|pod| {
                let instance = pod.name_any();
                names::serial_of(name, &instance)?;
                // The role's value is not compared: only which keys are Tusk's.
                let own = labels::pod(name, &instance, Role::Replica);
                drifted(&pod.metadata, &own).then_some(instance)
            })
            .collect(),
        pvcs: snapshot
            .pvcs
            .iter()
            .filter(|p| p.meta().deletion_timestamp.is_none())
            .filter_map(|pvc| {
                let claim = pvc.name_any();
                let serial = instance_of_pvc(name, &claim)?;
                let own = labels::instance(name, &names::instance_name(name, serial));
                drifted(&pvc.metadata, &own).then_some(claim)
            })
            .collect(),
    }
}

/// Each instance's PVC and whether it is bound.
fn claims(db: &Database, snapshot: &Snapshot, instances: &mut BTreeMap<u32, Instance>) {
    let name = db.name_any();
    for pvc in &snapshot.pvcs {
        let Some(serial) = instance_of_pvc(&name, &pvc.name_any()) else {
            continue;
        };
        let bound = pvc
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Bound");
        instances.entry(serial).or_default().pvc = Some(if bound {
            PvcState::Bound
        } else {
            PvcState::Pending
        });
    }
}

/// Each instance's pod, with what its manager said.
fn pods(
    model: &ValidatedDatabase,
    snapshot: &Snapshot,
    build: &BuildConfig,
    instances: &mut BTreeMap<u32, Instance>,
) {
    let name = &model.name;
    for pod in &snapshot.pods {
        let pod_name = pod.name_any();
        let Some(serial) = names::serial_of(name, &pod_name) else {
            continue;
        };
        let reported = snapshot.managers.get(&pod_name);
        let api_mismatch = reported
            .map(|s| s.api_version)
            .filter(|v| *v != API_VERSION);
        let manager = reported
            .filter(|_| api_mismatch.is_none())
            .map(manager_status);
        let cpu = super::cpu::pod_cpu(pod);
        let outdated = outdated(model, serial, pod, build) || super::cpu::must_roll(model, &cpu);
        instances.entry(serial).or_default().pod = Some(Pod {
            phase: phase_of(pod),
            role_label: pod
                .labels()
                .get(labels::ROLE)
                .and_then(|role| Role::parse(role)),
            manager,
            ready: pod_ready(pod),
            image: postgres_image(pod),
            outdated,
            api_mismatch,
            address: pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
            tls: crate::resources::serves_tls(pod),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            host_ip: pod.status.as_ref().and_then(|s| s.host_ip.clone()),
            ha: reported
                .filter(|_| api_mismatch.is_none())
                .and_then(|s| s.ha.as_ref())
                .map(ha_view),
            created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
            restarts: postgres_restarts(pod),
            unschedulable: unschedulable(pod),
            cpu,
        });
    }
}

/// Every Secret exists with the labels and owner the builder gives it.
fn secrets_as_built(model: &ValidatedDatabase, snapshot: &Snapshot) -> bool {
    let built_secrets: Vec<Secret> = SecretKind::ALL
        .iter()
        .map(|kind| resources::secret(model, *kind, ""))
        .collect();
    built_secrets.iter().all(|built| {
        snapshot
            .secrets
            .iter()
            .find(|m| m.name == built.metadata.name)
            .is_some_and(|observed| compare::as_built(&built.metadata, observed))
    })
}

/// Credentials whose Secret has not been pushed to the instances yet.
fn credentials_to_sync(name: &str, snapshot: &Snapshot) -> Vec<Credential> {
    [
        (SecretKind::Superuser, Credential::Superuser),
        (SecretKind::Replication, Credential::Replication),
        (SecretKind::App, Credential::App),
    ]
    .into_iter()
    .filter(|(kind, _)| {
        snapshot
            .secrets
            .iter()
            .find(|m| m.name.as_deref() == Some(kind.secret_name(name).as_str()))
            .is_some_and(|m| {
                m.annotations
                    .as_ref()
                    .is_none_or(|a| !a.contains_key(PASSWORD_SYNCED_ANNOTATION))
            })
    })
    .map(|(_, credential)| credential)
    .collect()
}

/// All three Services exist as built.
fn services_as_built(model: &ValidatedDatabase, snapshot: &Snapshot) -> bool {
    resources::services(model).iter().all(|built| {
        snapshot
            .services
            .iter()
            .find(|s| s.metadata.name == built.metadata.name)
            .is_some_and(|observed| compare::as_built(built, observed))
    })
}

/// Exactly the budgets the builder makes, as built; and the names of those it
/// no longer makes.
fn budgets(model: &ValidatedDatabase, snapshot: &Snapshot) -> (bool, Vec<String>) {
    // Exactly the budgets the builder makes, as built: one left over from a
    // larger instance count would block draining the remaining replica.
    let budgets = resources::pod_disruption_budgets(model);
    let budget_names: BTreeSet<String> = budgets.iter().map(ResourceExt::name_any).collect();
    let surplus_budgets: Vec<String> = snapshot
        .pdbs
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| !budget_names.contains(n))
        .collect();
    let as_built = surplus_budgets.is_empty()
        && budgets.iter().all(|built| {
            snapshot
                .pdbs
                .iter()
                .find(|p| p.metadata.name == built.metadata.name)
                .is_some_and(|observed| compare::as_built(built, observed))
        });
    (as_built, surplus_budgets)
}

/// The facts a pass over a Database being deleted decides on (pure).
pub fn reduce_deletion(db: &Database, snapshot: &Snapshot) -> Observed {
    Observed {
        database: db.name_any(),
        deleting: true,
        backups: backups::of_database(db, &snapshot.backups),
        backups_possible: crate::api::store::effective(db, None).is_some(),
        now: snapshot.now,
        created: db.metadata.creation_timestamp.as_ref().map(|t| t.0),
        deletion: deletion(db, snapshot),
        ..Observed::default()
    }
}

/// What a deletion decides on.
pub(super) fn deletion(db: &Database, snapshot: &Snapshot) -> Deletion {
    Deletion {
        uid: db.uid(),
        requested_at: db.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        skip_final_backup: db
            .annotations()
            .get(SKIP_FINAL_BACKUP)
            .is_some_and(|v| v == "true"),
        namespace_terminating: snapshot.namespace_terminating,
    }
}

/// Where a Job is, with what its container reported.
fn job_state(job: &Job, pods: &[KubePod]) -> JobState {
    use crate::resources::upgrade::{UpgradeJobOutcome, outcome};
    let name = job.name_any();
    let own: Vec<KubePod> = pods
        .iter()
        .filter(|p| p.labels().get(JOB_NAME_LABEL) == Some(&name))
        .cloned()
        .collect();
    match outcome(job, &own) {
        UpgradeJobOutcome::Running => JobState::Running,
        UpgradeJobOutcome::Succeeded(report) => JobState::Succeeded(report),
        UpgradeJobOutcome::Failed(report) => JobState::Failed(report),
    }
}

/// The Secret the object store's credentials come from, when one is named.
pub(super) fn store_credentials(db: &Database) -> Option<String> {
    db.spec
        .backup
        .as_ref()?
        .object_store
        .as_ref()?
        .credentials_secret
        .clone()
}

/// Whether the pod was built from another spec than the current one. A pod
/// without the annotation was not built by Tusk's builders as they are:
/// outdated.
fn outdated(model: &ValidatedDatabase, serial: u32, pod: &KubePod, build: &BuildConfig) -> bool {
    let want = resources::instance_spec_hash(model, serial, &model.image, build);
    let have = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SPEC_HASH_ANNOTATION));
    have != Some(&want)
}

/// The scheduler's message while it cannot place `pod`.
fn unschedulable(pod: &KubePod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| c.message.clone().unwrap_or_default())
}

/// How often the kubelet restarted the `postgres` container.
fn postgres_restarts(pod: &KubePod) -> u32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == POSTGRES_CONTAINER))
        .map_or(0, |c| u32::try_from(c.restart_count).unwrap_or(0))
}

pub(super) fn pod_ready(pod: &KubePod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pods behind each Service's ready endpoints.
fn routing(db: &str, slices: &[EndpointSlice]) -> Routing {
    let behind = |service: String| -> Vec<String> {
        let mut pods: Vec<String> = slices
            .iter()
            .filter(|s| s.labels().get(SERVICE_NAME_LABEL) == Some(&service))
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .filter_map(|e| e.target_ref.as_ref()?.name.clone())
            .collect();
        pods.sort();
        pods.dedup();
        pods
    };
    Routing {
        rw: behind(names::rw_service(db)),
        ro: behind(names::ro_service(db)),
    }
}

/// The serial of the instance whose PVC is `claim`.
fn instance_of_pvc(db: &str, claim: &str) -> Option<u32> {
    names::serial_of(db, claim)
        .filter(|serial| names::pvc(&names::instance_name(db, *serial)) == claim)
}

fn phase_of(pod: &KubePod) -> PodPhase {
    if pod.meta().deletion_timestamp.is_some() {
        return PodPhase::Terminating;
    }
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Failed" | "Succeeded") => PodPhase::Failed,
        _ => PodPhase::Pending,
    }
}

pub(super) fn manager_status(status: &Status) -> ManagerStatus {
    let pg = &status.postgres;
    let position = |lsn: Option<Lsn>| lsn.map_or(0, |l| l.0);
    ManagerStatus {
        role: pg.role,
        ready: status.ready,
        timeline: pg.timeline.unwrap_or(0),
        received_lsn: position(pg.received()),
        replayed_lsn: position(pg.replayed()),
        streaming: pg.streaming.unwrap_or(false),
        pending_restart: pg.pending_restart,
        server_version: pg.major_minor(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn restarts_count_the_postgres_container_only() {
        let pod: KubePod = serde_json::from_value(json!({
            "metadata": {"name": "orders-1"},
            "status": {"containerStatuses": [
                {"name": "sidecar", "restartCount": 7, "ready": true, "image": "x", "imageID": ""},
                {"name": POSTGRES_CONTAINER, "restartCount": 2, "ready": false, "image": "y", "imageID": ""}
            ]}
        }))
        .expect("a pod");
        assert_eq!(postgres_restarts(&pod), 2);
        assert_eq!(postgres_restarts(&KubePod::default()), 0);
    }

    #[test]
    fn the_scheduler_s_unschedulable_message_is_kept() {
        let pod: KubePod = serde_json::from_value(json!({
            "metadata": {"name": "orders-2"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."}
            ]}
        }))
        .expect("a pod");
        assert_eq!(
            unschedulable(&pod).as_deref(),
            Some("0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.")
        );
        let scheduled: KubePod = serde_json::from_value(json!({
            "metadata": {"name": "orders-2"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}
        }))
        .expect("a pod");
        assert_eq!(unschedulable(&scheduled), None);
    }

    #[test]
    fn pods_and_volumes_lacking_inherited_metadata_are_found() {
        let mut db = crate::api::arbitrary::sample_database();
        db.spec
            .inherited_metadata
            .labels
            .insert("team".into(), "payments".into());
        db.spec
            .inherited_metadata
            .labels
            .insert(labels::NAME.into(), "not-postgresql".into());
        let model = crate::api::validate::validated(&db, &crate::api::model::Defaults::default())
            .expect("a valid Database");
        let object = |name: &str, team: Option<&str>| {
            let mut labels = json!({ labels::NAME: labels::NAME_VALUE });
            if let Some(team) = team {
                labels["team"] = json!(team);
            }
            json!({"metadata": {"name": name, "labels": labels}})
        };
        let snapshot = Snapshot {
            pods: vec![
                serde_json::from_value(object("orders-1", Some("payments"))).expect("a pod"),
                serde_json::from_value(object("orders-2", None)).expect("a pod"),
                serde_json::from_value(object("orders-3", Some("other"))).expect("a pod"),
            ],
            pvcs: vec![
                serde_json::from_value(object("orders-1", None)).expect("a pvc"),
                serde_json::from_value(object("orders-2", Some("payments"))).expect("a pvc"),
            ],
            ..Snapshot::default()
        };
        let drift = inherited_drift(&model, &snapshot);
        assert_eq!(drift.pods, ["orders-2", "orders-3"]);
        assert_eq!(drift.pvcs, ["orders-1"]);
    }
}
