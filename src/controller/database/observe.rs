//! Observe: what exists for one Database (its PVCs, Pods, Jobs, Secrets,
//! Services, PDBs, the Services' EndpointSlices, its Backups) and what each
//! instance manager says, reduced to the [`Observed`] the lifecycle decides
//! on by comparing each object with what the builders make. Listing and
//! polling are the async edge ([`snapshot`] for a live Database,
//! [`deletion_snapshot`] for one being deleted); [`reduce`] is pure.

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod as KubePod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};

use super::backups;
use super::instances::Instances;
use super::migration_jobs::migration_jobs;
use super::restore::{self, Resolved};
use crate::api::model::ValidatedDatabase;
use crate::api::quantity;
use crate::api::status::{AppliedSpec, InstanceStatus};
use crate::api::v1::Backup;
use crate::api::v1::{Database, ObjectStore};
use crate::contract::env::BOOTSTRAP_ANNOTATION;
use crate::contract::{API_VERSION, Bootstrap, Credential, Lsn, RestoreProgress, Role, Status};
use crate::controller::{Context, Error, key_of};
use crate::lifecycle::{
    Deletion, Instance, JobState, ManagerStatus, Observed, Pod, PodPhase, PvcState, RestoreView,
    RetentionPass, Routing, SKIP_FINAL_BACKUP, SyncStandbys,
};
use crate::postgres::params::{self, Change};
use crate::resources::{
    self, BuildConfig, SPEC_HASH_ANNOTATION, SecretKind, compare, labels, names, postgres_image,
};
use k8s_openapi::jiff::Timestamp;

/// Set on a credential Secret once its password has been given to the
/// instances (by its own field manager, so re-applying the Secret's labels
/// never removes it). A recreated Secret lacks it.
pub const PASSWORD_SYNCED_ANNOTATION: &str = "tusk.dev/password-synced";

/// The label the Job controller puts on its pods.
const JOB_NAME_LABEL: &str = "job-name";

/// The label the EndpointSlice controller puts on every slice of a Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The raw inputs of one pass, as listed and polled.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// `spec.bootstrap.recovery` resolved, while the restore is pending.
    pub restore: Option<Resolved>,
    /// `/restore` of pods bootstrapping by restore whose `/status` does not
    /// answer yet, by pod name.
    pub restoring: BTreeMap<String, RestoreProgress>,
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// The instance pods.
    pub pods: Vec<KubePod>,
    /// The Jobs Tusk runs for the Database, and their pods.
    pub jobs: Vec<Job>,
    pub job_pods: Vec<KubePod>,
    /// The Secrets' metadata (their data is never needed to observe).
    pub secrets: Vec<ObjectMeta>,
    pub services: Vec<Service>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub endpoints: Vec<EndpointSlice>,
    /// `/status` of each pod's manager that answered, by pod name.
    pub managers: BTreeMap<String, Status>,
    /// The primary Lease as the operator observes it.
    pub lease: crate::lifecycle::LeaseState,
    /// The Lease, ServiceAccount, Role and RoleBinding exist.
    pub lease_access: bool,
    /// The Database's Backups (listed only when it has an object store).
    pub backups: Vec<Backup>,
    /// When the pass observed all this.
    pub now: Timestamp,
    /// The last retention pass this operator ran for the Database.
    pub last_retention: Option<RetentionPass>,
    /// The namespace is being deleted (only asked while the Database is).
    pub namespace_terminating: bool,
}

impl Snapshot {
    /// The pod IP of instance `name`, when it has one.
    pub fn pod_ip(&self, name: &str) -> Option<String> {
        self.pods
            .iter()
            .find(|p| p.name_any() == name)
            .and_then(|p| p.status.as_ref()?.pod_ip.clone())
    }

    /// Whether a Secret named `name` exists.
    pub fn has_secret(&self, name: &str) -> bool {
        self.secrets.iter().any(|s| s.name.as_deref() == Some(name))
    }

    /// Managers that speak this build's instance API, by pod name.
    fn understood(&self) -> impl Iterator<Item = (&String, &Status)> {
        self.managers
            .iter()
            .filter(|(_, s)| s.api_version == API_VERSION)
    }
}

/// Lists everything of `db` by its label and polls every running pod's manager
/// concurrently.
pub async fn snapshot(
    client: &kube::Client,
    api: &dyn Instances,
    db: &Database,
    namespace: &str,
    default_store: Option<&ObjectStore>,
) -> Result<Snapshot, Error> {
    let name = db.name_any();
    let uid = db.meta().uid.clone();
    let selector = format!("{}={name}", labels::DATABASE);
    let params = ListParams::default().labels(&selector);
    let owned = |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
        uid.is_some() && refs.iter().any(|r| Some(&r.uid) == uid.as_ref())
    };
    let pvcs: Vec<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(Error::kube("listing the Database's PVCs"))?
        .items;
    let jobs: Vec<Job> = Api::<Job>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(Error::kube("listing the Database's Jobs"))?
        .items
        .into_iter()
        .filter(|j| owned(j.owner_references()))
        .collect();
    let job_names: BTreeSet<String> = jobs.iter().map(ResourceExt::name_any).collect();
    let (pods, job_pods): (Vec<KubePod>, Vec<KubePod>) =
        Api::<KubePod>::namespaced(client.clone(), namespace)
            .list(&params)
            .await
            .map_err(Error::kube("listing the Database's Pods"))?
            .items
            .into_iter()
            .filter(|p| {
                owned(p.owner_references())
                    || p.labels()
                        .get(JOB_NAME_LABEL)
                        .is_some_and(|j| job_names.contains(j))
            })
            .partition(|p| names::serial_of(&name, &p.name_any()).is_some());
    // By name, not label: a Secret whose labels a user removed must still be
    // found (and relabelled), not recreated over.
    let mut secret_names: Vec<String> = SecretKind::ALL
        .iter()
        .map(|k| k.secret_name(&name))
        .collect();
    // The object store's credentials: the pods cannot start without them.
    secret_names.extend(store_credentials(db));
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default())
        .await
        .map_err(Error::kube("listing the Database's Secrets"))?
        .items
        .into_iter()
        .map(|s| s.metadata)
        .filter(|m| m.name.as_ref().is_some_and(|n| secret_names.contains(n)))
        .collect();
    let service_names = [
        names::rw_service(&name),
        names::ro_service(&name),
        names::r_service(&name),
    ];
    let services = Api::<Service>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing the Database's Services"))?
        .items
        .into_iter()
        .filter(|s| service_names.contains(&s.name_any()))
        .collect();
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(Error::kube("listing the Database's PodDisruptionBudgets"))?
        .items;
    let routed = format!(
        "{SERVICE_NAME_LABEL} in ({},{})",
        names::rw_service(&name),
        names::ro_service(&name)
    );
    let endpoints = Api::<EndpointSlice>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&routed))
        .await
        .map_err(Error::kube("listing the Services' EndpointSlices"))?
        .items;
    let polls = pods.iter().filter_map(|pod| {
        let ip = pod.status.as_ref()?.pod_ip.clone()?;
        let name = pod.name_any();
        Some(async move {
            match api.status(&ip).await {
                Ok(status) => Some((name, status)),
                Err(error) => {
                    tracing::debug!(pod = %name, %error, "instance manager did not answer");
                    None
                }
            }
        })
    });
    let managers: BTreeMap<String, Status> = join_all(polls).await.into_iter().flatten().collect();
    let restoring_pods = pods.iter().filter_map(|pod| {
        let name = pod.name_any();
        let restoring = pod
            .annotations()
            .get(BOOTSTRAP_ANNOTATION)
            .is_some_and(|b| b == Bootstrap::Restore.as_str());
        if !restoring || managers.contains_key(&name) {
            return None;
        }
        let ip = pod.status.as_ref()?.pod_ip.clone()?;
        Some(async move { api.restore(&ip).await.ok().map(|p| (name, p)) })
    });
    let restoring = join_all(restoring_pods)
        .await
        .into_iter()
        .flatten()
        .collect();
    let lease_access = lease_access(client, &name, namespace).await?;
    let restore = if crate::lifecycle::restore_pending(&db.spec, db.status.as_ref()) {
        let named = restore::fetch(client, db, namespace).await?;
        restore::resolve(db, &named, default_store)
    } else {
        None
    };
    Ok(Snapshot {
        restore,
        restoring,
        pvcs: pvcs
            .into_iter()
            .filter(|p| owned(p.owner_references()))
            .collect(),
        pods,
        jobs,
        job_pods,
        secrets,
        services,
        pdbs,
        endpoints,
        managers,
        lease: crate::lifecycle::LeaseState::Unobserved,
        lease_access,
        backups: Vec::new(),
        now: Timestamp::UNIX_EPOCH,
        last_retention: None,
        namespace_terminating: false,
    })
}

/// Everything one pass over a live Database decides on: the objects and the
/// managers ([`snapshot`]), the primary Lease as the operator watches it,
/// the Database's Backups when it has a store, the time, and the last
/// retention pass.
pub async fn live(ctx: &Context, db: &Database, namespace: &str) -> Result<Snapshot, Error> {
    let mut snapshot = snapshot(
        &ctx.client,
        ctx.instances.as_ref(),
        db,
        namespace,
        ctx.build.default_store.as_ref(),
    )
    .await?;
    snapshot.lease = ctx
        .leases
        .state(namespace, &names::primary_lease(&db.name_any()));
    // Backups need a store; a Database without one has none to look at.
    if crate::api::store::effective(db, None).is_some() {
        snapshot.backups = backups::list(ctx, namespace).await?;
    }
    snapshot.now = Timestamp::now();
    snapshot.last_retention = ctx.last_prune(&key_of(db));
    Ok(snapshot)
}

/// What a pass over a Database being deleted decides on: its Backups and
/// whether its namespace is going too, when it wants a final backup;
/// nothing else (its pods may already be going).
pub async fn deletion_snapshot(
    ctx: &Context,
    db: &Database,
    namespace: &str,
) -> Result<Snapshot, Error> {
    let mut snapshot = Snapshot {
        now: Timestamp::now(),
        ..Snapshot::default()
    };
    let facts = deletion(db, &snapshot);
    let wanted = crate::api::store::effective(db, None).is_some() && !facts.skip_final_backup;
    if let (true, Some(at)) = (wanted, facts.requested_at) {
        snapshot.backups = backups::list(ctx, namespace).await?;
        let name = crate::lifecycle::final_backup_name(&db.name_any(), at);
        if let Some(probe) = resources::final_backup(db, &name) {
            snapshot.namespace_terminating = namespace_terminating(ctx, namespace, &probe).await;
        }
    }
    Ok(snapshot)
}

/// Whether `namespace` is being deleted, asked the way a namespaced operator
/// can: a dry-run create there is refused for that reason alone.
async fn namespace_terminating(ctx: &Context, namespace: &str, probe: &Backup) -> bool {
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), namespace);
    let params = kube::api::PostParams {
        dry_run: true,
        ..kube::api::PostParams::default()
    };
    match api.create(&params, probe).await {
        Err(kube::Error::Api(status)) => {
            status.code == 403 && status.message.contains("being terminated")
        }
        _ => false,
    }
}

/// Whether the primary Lease and the managers' access to it all exist.
async fn lease_access(client: &kube::Client, name: &str, namespace: &str) -> Result<bool, Error> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role as RbacRole, RoleBinding};
    let account = names::instance_account(name);
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(&names::primary_lease(name))
        .await
        .map_err(Error::kube("reading the primary Lease"))?;
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .get_metadata_opt(&account)
        .await
        .map_err(Error::kube("reading the instances' ServiceAccount"))?;
    let role = Api::<RbacRole>::namespaced(client.clone(), namespace)
        .get_metadata_opt(&account)
        .await
        .map_err(Error::kube("reading the instances' Role"))?;
    let binding = Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .get_metadata_opt(&account)
        .await
        .map_err(Error::kube("reading the instances' RoleBinding"))?;
    Ok(lease.is_some() && sa.is_some() && role.is_some() && binding.is_some())
}

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
    let wanted_bytes = quantity::parse_bytes(&db.spec.storage.size).ok();
    let mut short_volumes = Vec::new();
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
        if let (Some(wanted), Some(requested)) = (wanted_bytes, pvc_request(pvc))
            && requested < wanted
        {
            short_volumes.push(pvc.name_any());
        }
    }
    for pod in &snapshot.pods {
        let pod_name = pod.name_any();
        let Some(serial) = names::serial_of(&name, &pod_name) else {
            continue;
        };
        let reported = snapshot.managers.get(&pod_name);
        let api_mismatch = reported
            .map(|s| s.api_version)
            .filter(|v| *v != API_VERSION);
        let manager = reported
            .filter(|_| api_mismatch.is_none())
            .map(manager_status);
        instances.entry(serial).or_default().pod = Some(Pod {
            phase: phase_of(pod),
            role_label: pod
                .labels()
                .get(labels::ROLE)
                .and_then(|role| Role::parse(role)),
            manager,
            ready: pod_ready(pod),
            image: postgres_image(pod),
            outdated: outdated(model, serial, pod, build),
            api_mismatch,
            address: pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            ha: reported
                .filter(|_| api_mismatch.is_none())
                .and_then(|s| s.ha.as_ref())
                .map(ha_view),
        });
    }
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
    // Parameters differ when any answering manager runs other ones than the spec.
    let parameter_change = snapshot
        .understood()
        .map(|(_, s)| params::classify(&s.parameters, &db.spec.postgresql.parameters))
        .max()
        .unwrap_or(Change::Nothing);
    let built_secrets: Vec<Secret> = SecretKind::ALL
        .iter()
        .map(|kind| resources::secret(model, *kind, ""))
        .collect();
    let secrets = built_secrets.iter().all(|built| {
        snapshot
            .secrets
            .iter()
            .find(|m| m.name == built.metadata.name)
            .is_some_and(|observed| compare::as_built(&built.metadata, observed))
    });
    let credentials_to_sync = [
        (SecretKind::Superuser, Credential::Superuser),
        (SecretKind::Replication, Credential::Replication),
        (SecretKind::App, Credential::App),
    ]
    .into_iter()
    .filter(|(kind, _)| {
        snapshot
            .secrets
            .iter()
            .find(|m| m.name.as_deref() == Some(kind.secret_name(&name).as_str()))
            .is_some_and(|m| {
                m.annotations
                    .as_ref()
                    .is_none_or(|a| !a.contains_key(PASSWORD_SYNCED_ANNOTATION))
            })
    })
    .map(|(_, credential)| credential)
    .collect();
    let services = resources::services(model).iter().all(|built| {
        snapshot
            .services
            .iter()
            .find(|s| s.metadata.name == built.metadata.name)
            .is_some_and(|observed| compare::as_built(built, observed))
    });
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
    let pod_disruption_budgets = surplus_budgets.is_empty()
        && budgets.iter().all(|built| {
            snapshot
                .pdbs
                .iter()
                .find(|p| p.metadata.name == built.metadata.name)
                .is_some_and(|observed| compare::as_built(built, observed))
        });
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
        lease_access: snapshot.lease_access,
        archiving: primary.and_then(|p| p.postgres.archiver.clone()),
        deleting: db.meta().deletion_timestamp.is_some(),
        secrets,
        credentials_to_sync,
        services,
        pod_disruption_budgets,
        surplus_budgets,
        routing: routing(&name, &snapshot.endpoints),
        desired_image: model.image.clone(),
        short_volumes,
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
    }
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
fn deletion(db: &Database, snapshot: &Snapshot) -> Deletion {
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
fn store_credentials(db: &Database) -> Option<String> {
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

fn pod_ready(pod: &KubePod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pvc_request(pvc: &PersistentVolumeClaim) -> Option<u128> {
    let requested = pvc
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?;
    quantity::parse_bytes(&requested.0).ok()
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

fn manager_status(status: &Status) -> ManagerStatus {
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

/// `status.instances`: each instance with a pod, in serial order, with what its
/// manager reported and the image its pod runs. A replica's lag is the
/// primary's WAL position minus what the replica has received.
pub fn instance_statuses(db: &Database, snapshot: &Snapshot) -> Vec<InstanceStatus> {
    let name = db.name_any();
    let primary_lsn = snapshot
        .understood()
        .map(|(_, s)| s)
        .find(|s| s.postgres.role == Role::Primary)
        .and_then(|s| s.postgres.current_lsn);
    let mut pods: Vec<(u32, &KubePod)> = snapshot
        .pods
        .iter()
        .filter_map(|p| Some((names::serial_of(&name, &p.name_any())?, p)))
        .collect();
    pods.sort_by_key(|(serial, _)| *serial);
    pods.into_iter()
        .map(|(_, pod)| {
            let pod_name = pod.name_any();
            let image = Some(postgres_image(pod)).filter(|i| !i.is_empty());
            let reported = snapshot
                .managers
                .get(&pod_name)
                .filter(|s| s.api_version == API_VERSION);
            match reported {
                None => InstanceStatus {
                    name: pod_name,
                    image,
                    ..InstanceStatus::default()
                },
                Some(status) => {
                    let pg = &status.postgres;
                    let (lsn, lag_bytes) = match pg.role {
                        Role::Primary => (pg.current_lsn, Some(0)),
                        Role::Replica => {
                            let lag = primary_lsn
                                .zip(pg.received_lsn)
                                .map(|(p, r)| i64::try_from(p.bytes_after(r)).unwrap_or(i64::MAX));
                            (pg.replayed_lsn, lag)
                        }
                    };
                    InstanceStatus {
                        name: pod_name,
                        role: Some(pg.role),
                        // Ready as the Services see it: the manager and the kubelet agree.
                        ready: status.ready && pod_ready(pod),
                        lsn: lsn.map(|l| l.to_string()),
                        lag_bytes,
                        image,
                        version: pg
                            .major_minor()
                            .map(|(major, minor)| format!("{major}.{minor}")),
                        system_identifier: Some(pg.system_identifier.clone()),
                        timeline: pg.timeline,
                    }
                }
            }
        })
        .collect()
}

/// `status.applied`: what is observed to be in effect. Each figure falls back
/// to what was recorded before (an instance that does not answer now did
/// not change); `None` until a primary has answered once, since until then
/// nothing is in effect.
pub fn applied(db: &Database, snapshot: &Snapshot) -> Option<AppliedSpec> {
    let before = db.status.as_ref().and_then(|s| s.applied.as_ref());
    let primary = snapshot
        .understood()
        .find(|(_, s)| s.postgres.role == Role::Primary);
    if primary.is_none() && before.is_none() {
        return None;
    }
    let version = primary
        .and_then(|(_, s)| s.postgres.major_minor())
        .map(|(major, minor)| format!("{major}.{minor}"))
        .or_else(|| before.map(|a| a.version.clone()))
        .unwrap_or_else(|| db.spec.version.clone());
    let smallest = snapshot
        .pvcs
        .iter()
        .filter_map(|pvc| {
            let text = pvc
                .spec
                .as_ref()?
                .resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("storage")?
                .0
                .clone();
            Some((quantity::parse_bytes(&text).ok()?, text))
        })
        .min_by_key(|(bytes, _)| *bytes)
        .map(|(_, text)| text);
    let storage_size = smallest
        .or_else(|| before.map(|a| a.storage_size.clone()))
        .unwrap_or_else(|| db.spec.storage.size.clone());
    let image = primary
        .and_then(|(name, _)| snapshot.pods.iter().find(|p| p.name_any() == *name))
        .map(postgres_image)
        .filter(|i| !i.is_empty())
        .or_else(|| before.and_then(|a| a.image.clone()));
    Some(AppliedSpec {
        version,
        storage_size,
        image,
    })
}
