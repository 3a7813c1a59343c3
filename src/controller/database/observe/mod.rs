//! Observe: what exists for one Database (its PVCs, Pods, Jobs, Secrets,
//! Services, PDBs, the Services' EndpointSlices, its Backups, the published
//! endpoints and the probes through them: [`exposure`]) and what each
//! instance manager says, reduced to the [`Observed`] the lifecycle decides
//! on by comparing each object with what the builders make. Listing, reading
//! the operator's caches (`crate::controller::caches`) and polling are the
//! async edge ([`snapshot`] for a live Database,
//! [`deletion_snapshot`] for one being deleted); [`reduce`] is pure.

use std::collections::{BTreeMap, BTreeSet};

use futures::TryFutureExt;
use futures::future::join_all;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod as KubePod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};

use super::backups;
use super::instances::{ClientTls, Instances, Target};
use super::restore::{self, Resolved};
use crate::api::v1::Backup;
use crate::api::v1::{Database, ObjectStore};
use crate::contract::env::BOOTSTRAP_ANNOTATION;
use crate::contract::{API_VERSION, Bootstrap, RestoreProgress, Status, Volumes};
use crate::controller::caches::Caches;
use crate::controller::{Context, Error, key_of};
use crate::lifecycle::RetentionPass;
use crate::resources::{self, SecretKind, labels, names};
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
    /// The rw, ro and r Services, and those of `spec.expose` (label
    /// `tusk.dev/exposed`).
    pub services: Vec<Service>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub endpoints: Vec<EndpointSlice>,
    /// `/status` of each pod's manager that answered, by pod name.
    pub managers: BTreeMap<String, Status>,
    /// `/volumes` of each pod's manager that answered, by pod name (it
    /// answers when PostgreSQL does not: a full disk stops PostgreSQL).
    pub volumes: BTreeMap<String, Volumes>,
    /// The StorageClasses the PVCs name: whether each allows volume
    /// expansion, or why that could not be read.
    pub storage_classes: BTreeMap<String, Result<bool, String>>,
    /// The primary Lease as the operator observes it.
    pub lease: crate::lifecycle::LeaseState,
    /// The Lease, ServiceAccount, Role and RoleBinding exist.
    pub lease_access: bool,
    /// The instance pods the managers' Role lets them patch (label
    /// themselves), `None` without such a rule.
    pub self_label_pods: Option<Vec<String>>,
    /// The Database's Backups (listed only when it has an object store).
    pub backups: Vec<Backup>,
    /// When the pass observed all this.
    pub now: Timestamp,
    /// The last retention pass this operator ran for the Database.
    pub last_retention: Option<RetentionPass>,
    /// The namespace is being deleted (only asked while the Database is).
    pub namespace_terminating: bool,
    /// The TLS material behind `Observed.tls` (`tls::observe`).
    pub tls: Option<tls::TlsMaterial>,
    /// The operator's client material for the instance API
    /// ([`tls::client_tls`]), read before the managers were polled.
    pub client_tls: Option<ClientTls>,
    /// The Secrets this pass has read (`tls::SecretReads`).
    pub secret_reads: tls::SecretReads,
    /// `<db>-app-external` as built this pass, for the apply step
    /// ([`endpoints::probe_and_secret`]); `None` when nothing can be built.
    pub external_secret: Option<Secret>,
}

impl Snapshot {
    /// The serials of database `db`'s instances that have a pod or a volume.
    pub fn instance_serials(&self, db: &str) -> BTreeSet<u32> {
        let pods = self.pods.iter().map(ResourceExt::name_any);
        let volumes = self
            .pvcs
            .iter()
            .filter_map(|p| p.labels().get(labels::TUSK_INSTANCE).cloned());
        pods.chain(volumes)
            .filter_map(|name| names::serial_of(db, &name))
            .collect()
    }

    /// The pod IP of instance `name`, when it has one.
    pub fn pod_ip(&self, name: &str) -> Option<String> {
        self.pods
            .iter()
            .find(|p| p.name_any() == name)
            .and_then(|p| p.status.as_ref()?.pod_ip.clone())
    }

    /// How to reach instance `name`'s manager: its pod IP, over TLS when its
    /// pod was built with a TLS Secret and the client material is known.
    pub fn target(&self, name: &str) -> Option<Target<'_>> {
        let pod = self.pods.iter().find(|p| p.name_any() == name)?;
        let ip = pod.status.as_ref()?.pod_ip.as_deref()?;
        let instance = pod.metadata.name.as_deref()?;
        Some(Target::of(
            ip,
            instance,
            crate::resources::serves_tls(pod),
            self.client_tls.as_ref(),
        ))
    }

    /// Whether instance `name`'s pod was built to serve TLS (as observe
    /// reads `Pod.tls`).
    pub fn pod_serves_tls(&self, name: &str) -> bool {
        self.pods
            .iter()
            .any(|p| p.name_any() == name && crate::resources::serves_tls(p))
    }

    /// Whether a Secret named `name` exists.
    pub fn has_secret(&self, name: &str) -> bool {
        self.secrets.iter().any(|s| s.name.as_deref() == Some(name))
    }

    /// The uid of the Secret named `name`, as last seen.
    pub fn secret_uid(&self, name: &str) -> Option<&str> {
        self.secrets
            .iter()
            .find(|s| s.name.as_deref() == Some(name))
            .and_then(|s| s.uid.as_deref())
    }

    /// Managers that speak this build's instance API, by pod name.
    fn understood(&self) -> impl Iterator<Item = (&String, &Status)> {
        self.managers
            .iter()
            .filter(|(_, s)| s.api_version == API_VERSION)
    }
}

/// Lists `db`'s Pods, PVCs and Jobs by its label, reads its Secrets,
/// Services, budgets and EndpointSlices from `caches`, and polls every
/// running pod's manager concurrently.
pub async fn snapshot(
    client: &kube::Client,
    caches: &Caches,
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
    // Every read a pass makes before it polls the managers, at once: a pass
    // waits for the slowest, not for their sum (with many Databases, a pass
    // holds one of a bounded number of turns: `controller::passes`).
    let mut secret_reads = tls::SecretReads::default();
    let user_ca = db.spec.tls.ca.as_ref().map(|r| r.secret_name.as_str());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let pods: Api<KubePod> = Api::namespaced(client.clone(), namespace);
    let (pvcs, jobs, pods, client_tls, (lease_access, self_label_pods)) = futures::try_join!(
        pvcs.list(&params)
            .map_err(Error::kube("listing the Database's PVCs")),
        jobs.list(&params)
            .map_err(Error::kube("listing the Database's Jobs")),
        pods.list(&params)
            .map_err(Error::kube("listing the Database's Pods")),
        tls::client_tls(client, namespace, &name, user_ca, &mut secret_reads),
        lease_access(client, &name, namespace),
    )?;
    let jobs: Vec<Job> = jobs
        .items
        .into_iter()
        .filter(|j| owned(j.owner_references()))
        .collect();
    let job_names: BTreeSet<String> = jobs.iter().map(ResourceExt::name_any).collect();
    let (pods, job_pods): (Vec<KubePod>, Vec<KubePod>) = pods
        .items
        .into_iter()
        .filter(|p| {
            owned(p.owner_references())
                || p.labels()
                    .get(JOB_NAME_LABEL)
                    .is_some_and(|j| job_names.contains(j))
        })
        .partition(|p| names::serial_of(&name, &p.name_any()).is_some());
    let pvcs: Vec<PersistentVolumeClaim> = pvcs
        .items
        .into_iter()
        .filter(|p| owned(p.owner_references()))
        .collect();
    let secrets = caches.secrets(namespace, &secret_names(db));
    let services = caches.services(namespace, |s| databases_service(s, &name, uid.as_deref()));
    let pdbs = caches.budgets(namespace, |b| {
        b.labels().get(labels::DATABASE) == Some(&name)
    });
    let endpoints = caches.slices(namespace, |s| routes(s, &name));
    let (managers, volumes, storage_classes) = futures::join!(
        poll_managers(api, &pods, client_tls.as_ref()),
        volume_usage::poll(api, &pods, client_tls.as_ref()),
        volume_usage::storage_classes(client, &pvcs),
    );
    let restoring = poll_restoring(api, &pods, &managers, client_tls.as_ref()).await;
    let restore = if crate::lifecycle::restore_pending(&db.spec, db.status.as_ref()) {
        let named = restore::fetch(client, db, namespace).await?;
        restore::resolve(db, &named, default_store)
    } else {
        None
    };
    Ok(Snapshot {
        restore,
        restoring,
        volumes,
        storage_classes,
        pvcs,
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
        self_label_pods,
        backups: Vec::new(),
        now: Timestamp::UNIX_EPOCH,
        last_retention: None,
        namespace_terminating: false,
        tls: None,
        client_tls,
        secret_reads,
        external_secret: None,
    })
}

/// The names of the Database's Secrets and of its store's credentials. By
/// name, not label: a Secret whose labels a user removed must still be found
/// (and relabelled), not recreated over.
fn secret_names(db: &Database) -> Vec<String> {
    let name = db.name_any();
    let mut secret_names: Vec<String> = SecretKind::ALL
        .iter()
        .map(|k| k.secret_name(&name))
        .collect();
    // The object store's credentials: the pods cannot start without them.
    secret_names.extend(reduce::store_credentials(db));
    // Found even once spec.expose is empty: it is deleted then.
    secret_names.push(crate::api::expose::external_secret_name(&name));
    secret_names
}

/// Whether `service` is one of Database `name`'s: the rw, ro and r Services,
/// by name; and those of `spec.expose` (of earlier specs too: label
/// [`labels::EXPOSED`], owned by the Database of `uid`), which only Tusk
/// removes.
fn databases_service(service: &Service, name: &str, uid: Option<&str>) -> bool {
    let service_name = service.name_any();
    [
        names::rw_service(name),
        names::ro_service(name),
        names::r_service(name),
    ]
    .contains(&service_name)
        || (service.labels().contains_key(labels::EXPOSED)
            && service.labels().get(labels::DATABASE).map(String::as_str) == Some(name)
            && service
                .owner_references()
                .iter()
                .any(|r| Some(r.uid.as_str()) == uid))
}

/// Whether `slice` is one of the `-rw` or `-ro` Service's of Database `name`.
fn routes(slice: &EndpointSlice, name: &str) -> bool {
    slice
        .labels()
        .get(SERVICE_NAME_LABEL)
        .is_some_and(|service| {
            *service == names::rw_service(name) || *service == names::ro_service(name)
        })
}

/// `/status` of every running pod's manager, concurrently, by pod name; a
/// manager that does not answer is left out.
async fn poll_managers(
    api: &dyn Instances,
    pods: &[KubePod],
    client: Option<&ClientTls>,
) -> BTreeMap<String, Status> {
    let polls = pods.iter().filter_map(|pod| {
        let ip = pod.status.as_ref()?.pod_ip.clone()?;
        let name = pod.name_any();
        let tls = crate::resources::serves_tls(pod);
        Some(async move {
            match api.status(Target::of(&ip, &name, tls, client)).await {
                Ok(status) => Some((name, status)),
                Err(error) => {
                    tracing::debug!(pod = %name, %error, "instance manager did not answer");
                    None
                }
            }
        })
    });
    join_all(polls).await.into_iter().flatten().collect()
}

/// `/restore` of the pods restoring whose `/status` does not answer yet.
async fn poll_restoring(
    api: &dyn Instances,
    pods: &[KubePod],
    managers: &BTreeMap<String, Status>,
    client: Option<&ClientTls>,
) -> BTreeMap<String, RestoreProgress> {
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
        let tls = crate::resources::serves_tls(pod);
        Some(async move {
            api.restore(Target::of(&ip, &name, tls, client))
                .await
                .ok()
                .map(|p| (name, p))
        })
    });
    join_all(restoring_pods)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Everything one pass over a live Database decides on: the objects and the
/// managers ([`snapshot`]), the primary Lease as the operator watches it,
/// the Database's Backups when it has a store, the time, and the last
/// retention pass.
pub async fn live(ctx: &Context, db: &Database, namespace: &str) -> Result<Snapshot, Error> {
    ctx.caches.ready().await?;
    let mut snapshot = snapshot(
        &ctx.client,
        &ctx.caches,
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
    let facts = reduce::deletion(db, &snapshot);
    let wanted = crate::api::store::effective(db, None).is_some() && !facts.skip_final_backup;
    if let (true, Some(at)) = (wanted, facts.requested_at) {
        snapshot.backups = backups::list(ctx, namespace).await?;
        let name = names::final_backup(&db.name_any(), at);
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

/// Whether the primary Lease and the managers' access to it all exist, and
/// the pods their Role lets them label.
async fn lease_access(
    client: &kube::Client,
    name: &str,
    namespace: &str,
) -> Result<(bool, Option<Vec<String>>), Error> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role as RbacRole, RoleBinding};
    let account = names::instance_account(name);
    let lease_name = names::primary_lease(name);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let roles: Api<RbacRole> = Api::namespaced(client.clone(), namespace);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let (lease, sa, role, binding) = futures::try_join!(
        leases
            .get_metadata_opt(&lease_name)
            .map_err(Error::kube("reading the primary Lease")),
        accounts
            .get_metadata_opt(&account)
            .map_err(Error::kube("reading the instances' ServiceAccount")),
        roles
            .get_opt(&account)
            .map_err(Error::kube("reading the instances' Role")),
        bindings
            .get_metadata_opt(&account)
            .map_err(Error::kube("reading the instances' RoleBinding")),
    )?;
    let self_label_pods = role.as_ref().and_then(resources::role_self_label_pods);
    Ok((
        lease.is_some() && sa.is_some() && role.is_some() && binding.is_some(),
        self_label_pods,
    ))
}

pub mod cert_manager;
mod cpu;
pub mod endpoints;
mod exposure;
mod reduce;
pub mod route;
pub mod tls;
mod views;
mod volume_usage;
mod volumes;

pub use reduce::{reduce, reduce_deletion};

pub use views::{applied, instance_statuses};
pub use volumes::volume_statuses;

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn labelled(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    fn owned_by(mut metadata: ObjectMeta, uid: &str) -> ObjectMeta {
        metadata.owner_references = Some(vec![OwnerReference {
            api_version: "tusk.dev/v1".into(),
            kind: "Database".into(),
            name: "orders".into(),
            uid: uid.into(),
            ..OwnerReference::default()
        }]);
        metadata
    }

    fn service(metadata: ObjectMeta) -> Service {
        Service {
            metadata,
            ..Service::default()
        }
    }

    #[test]
    fn a_databases_services_are_its_own_by_name_and_its_exposed_by_label_and_owner() {
        let exposed = [(labels::EXPOSED, "rw"), (labels::DATABASE, "orders")];
        let ours = |s: &Service| databases_service(s, "orders", Some("uid-orders"));
        // By name, even with every label stripped.
        assert!(ours(&service(labelled("orders-rw", &[]))));
        assert!(ours(&service(labelled("orders-ro", &[]))));
        assert!(ours(&service(labelled("orders-r", &[]))));
        assert!(ours(&service(owned_by(
            labelled("orders-rw-lb", &exposed),
            "uid-orders"
        ))));
        // Another Database's of the same name, gone and recreated.
        assert!(!ours(&service(owned_by(
            labelled("orders-rw-lb", &exposed),
            "uid-previous"
        ))));
        // Labelled but not owned, or another Database's, or a stranger.
        assert!(!ours(&service(labelled("orders-rw-lb", &exposed))));
        assert!(!ours(&service(labelled("billing-rw", &[]))));
        assert!(!ours(&service(labelled("orders-rw-x", &[]))));
        assert!(!databases_service(
            &service(owned_by(labelled("orders-rw-lb", &exposed), "uid-orders")),
            "orders",
            None
        ));
    }

    #[test]
    fn a_databases_endpoints_are_the_slices_of_its_rw_and_ro_services() {
        let slice = |service: &str| EndpointSlice {
            metadata: labelled("slice", &[(SERVICE_NAME_LABEL, service)]),
            ..EndpointSlice::default()
        };
        assert!(routes(&slice("orders-rw"), "orders"));
        assert!(routes(&slice("orders-ro"), "orders"));
        assert!(!routes(&slice("orders-r"), "orders"));
        assert!(!routes(&slice("billing-rw"), "orders"));
        assert!(!routes(
            &EndpointSlice {
                metadata: labelled("slice", &[]),
                ..EndpointSlice::default()
            },
            "orders"
        ));
    }

    #[test]
    fn a_databases_secrets_are_named_for_it_with_the_external_one() {
        let db = crate::api::arbitrary::sample_database();
        let name = db.name_any();
        let names = secret_names(&db);
        for kind in SecretKind::ALL {
            assert!(names.contains(&kind.secret_name(&name)));
        }
        assert!(names.contains(&crate::api::expose::external_secret_name(&name)));
    }
}
