//! Observe: what exists for one Database (its PVCs, Pods, Secrets, Services and
//! PDBs, found by label) and what each instance manager says, reduced to the
//! [`Observed`] the lifecycle decides on. Listing and polling are the async
//! edge; [`reduce`] is pure.

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod as KubePod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};

use super::instances::InstanceApi;
use crate::api::status::{InstanceRole, InstanceStatus};
use crate::api::v1::Database;
use crate::error::Error;
use crate::instance::{Role, Status};
use crate::lifecycle::{Instance, ManagerStatus, Observed, Pod, PodPhase, PvcState, SyncStandbys};
use crate::postgres::params::{self, Change};
use crate::resources::{self, SecretKind, labels, names};

/// The raw inputs of one pass, as listed and polled.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub pvcs: Vec<PersistentVolumeClaim>,
    pub pods: Vec<KubePod>,
    pub secrets: BTreeSet<String>,
    pub services: BTreeSet<String>,
    pub pdbs: BTreeSet<String>,
    /// `/status` of each pod's manager that answered, by pod name.
    pub managers: BTreeMap<String, Status>,
}

impl Snapshot {
    /// The pod IP of instance `name`, when it has one.
    pub fn pod_ip(&self, name: &str) -> Option<String> {
        self.pods
            .iter()
            .find(|p| p.name_any() == name)
            .and_then(|p| p.status.as_ref()?.pod_ip.clone())
    }
}

/// Lists everything of `db` by its label and polls every running pod's manager
/// concurrently.
pub async fn snapshot(
    client: &kube::Client,
    api: &InstanceApi,
    db: &Database,
    namespace: &str,
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
    let pods: Vec<KubePod> = Api::<KubePod>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(Error::kube("listing the Database's Pods"))?
        .items
        .into_iter()
        // Only the instance pods, not Jobs another feature starts for it.
        .filter(|p| names::serial_of(&name, &p.name_any()).is_some())
        .filter(|p| owned(p.owner_references()))
        .collect();
    let secrets =
        names_of::<Secret>(client, namespace, &params, "listing the Database's Secrets").await?;
    let services = names_of::<Service>(
        client,
        namespace,
        &params,
        "listing the Database's Services",
    )
    .await?;
    let pdbs = names_of::<PodDisruptionBudget>(
        client,
        namespace,
        &params,
        "listing the Database's PodDisruptionBudgets",
    )
    .await?;
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
    let managers = join_all(polls).await.into_iter().flatten().collect();
    Ok(Snapshot {
        pvcs: pvcs
            .into_iter()
            .filter(|p| owned(p.owner_references()))
            .collect(),
        pods,
        secrets,
        services,
        pdbs,
        managers,
    })
}

/// The names of the `K`s matching `params` (metadata only: their content is
/// not needed, only whether they exist).
async fn names_of<K>(
    client: &kube::Client,
    namespace: &str,
    params: &ListParams,
    context: &'static str,
) -> Result<BTreeSet<String>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Ok(Api::<K>::namespaced(client.clone(), namespace)
        .list_metadata(params)
        .await
        .map_err(Error::kube(context))?
        .items
        .into_iter()
        .map(|o| o.name_any())
        .collect())
}

/// The facts the lifecycle decides on (pure).
pub fn reduce(db: &Database, snapshot: &Snapshot) -> Observed {
    let name = db.name_any();
    let mut instances: BTreeMap<u32, Instance> = BTreeMap::new();
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
    for pod in &snapshot.pods {
        let pod_name = pod.name_any();
        let Some(serial) = names::serial_of(&name, &pod_name) else {
            continue;
        };
        let manager = snapshot.managers.get(&pod_name).map(manager_status);
        instances.entry(serial).or_default().pod = Some(Pod {
            phase: phase_of(pod),
            role_label: pod
                .labels()
                .get(labels::ROLE)
                .and_then(|role| match role.as_str() {
                    "primary" => Some(InstanceRole::Primary),
                    "replica" => Some(InstanceRole::Replica),
                    _ => None,
                }),
            manager,
        });
    }
    let primary = snapshot
        .managers
        .values()
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
        .managers
        .values()
        .map(|s| params::classify(&s.parameters, &db.spec.postgresql.parameters))
        .max_by_key(|change| match change {
            Change::Nothing => 0,
            Change::Reload => 1,
            Change::Restart => 2,
        })
        .unwrap_or(Change::Nothing);
    let has_all =
        |present: &BTreeSet<String>, wanted: &[String]| wanted.iter().all(|w| present.contains(w));
    let secret_names: Vec<String> = SecretKind::ALL
        .iter()
        .map(|k| k.secret_name(&name))
        .collect();
    let service_names = [
        names::rw_service(&name),
        names::ro_service(&name),
        names::r_service(&name),
    ];
    // Exactly the budgets the builder makes: one left over from a larger
    // instance count would block draining the remaining replica.
    let pdb_names: BTreeSet<String> = resources::pod_disruption_budgets(db)
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let inactive_slots = primary
        .map(|p| p.postgres.inactive_slots.clone())
        .unwrap_or_default();
    Observed {
        database: name.clone(),
        inactive_slots,
        deleting: db.meta().deletion_timestamp.is_some(),
        secrets: has_all(&snapshot.secrets, &secret_names),
        services: has_all(&snapshot.services, &service_names),
        pod_disruption_budgets: snapshot.pdbs == pdb_names,
        instances,
        sync,
        parameter_change,
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

/// An LSN as PostgreSQL prints it (`16/B374D848`) as a byte position.
pub fn parse_lsn(lsn: &str) -> Option<u64> {
    let (high, low) = lsn.split_once('/')?;
    let high = u64::from_str_radix(high, 16).ok()?;
    let low = u64::from_str_radix(low, 16).ok()?;
    Some((high << 32) | low)
}

fn manager_status(status: &Status) -> ManagerStatus {
    let pg = &status.postgres;
    let lsn = |value: &Option<String>| value.as_deref().and_then(parse_lsn).unwrap_or(0);
    let (received, replayed) = match pg.role {
        Role::Primary => (lsn(&pg.current_lsn), lsn(&pg.current_lsn)),
        Role::Replica => (lsn(&pg.received_lsn), lsn(&pg.replayed_lsn)),
    };
    ManagerStatus {
        role: match pg.role {
            Role::Primary => InstanceRole::Primary,
            Role::Replica => InstanceRole::Replica,
        },
        ready: status.ready,
        timeline: pg.timeline.and_then(|t| u32::try_from(t).ok()).unwrap_or(0),
        received_lsn: received,
        replayed_lsn: replayed,
        streaming: pg.streaming.unwrap_or(false),
        pending_restart: pg.pending_restart,
    }
}

/// `status.instances`: each instance with a pod, in serial order, with what its
/// manager reported. A replica's lag is the primary's WAL position minus what
/// the replica has received.
pub fn instance_statuses(db: &Database, snapshot: &Snapshot) -> Vec<InstanceStatus> {
    let name = db.name_any();
    let primary_lsn = snapshot
        .managers
        .values()
        .find(|s| s.postgres.role == Role::Primary)
        .and_then(|s| s.postgres.current_lsn.as_deref().and_then(parse_lsn));
    let mut pods: Vec<(u32, String)> = snapshot
        .pods
        .iter()
        .filter_map(|p| {
            let pod = p.name_any();
            Some((names::serial_of(&name, &pod)?, pod))
        })
        .collect();
    pods.sort();
    pods.into_iter()
        .map(|(_, pod)| match snapshot.managers.get(&pod) {
            None => InstanceStatus {
                name: pod,
                ..InstanceStatus::default()
            },
            Some(status) => {
                let pg = &status.postgres;
                let (role, lsn, lag_bytes) = match pg.role {
                    Role::Primary => (InstanceRole::Primary, pg.current_lsn.clone(), Some(0)),
                    Role::Replica => {
                        let received = pg.received_lsn.as_deref().and_then(parse_lsn);
                        let lag = primary_lsn
                            .zip(received)
                            .map(|(p, r)| i64::try_from(p.saturating_sub(r)).unwrap_or(i64::MAX));
                        (InstanceRole::Replica, pg.replayed_lsn.clone(), lag)
                    }
                };
                InstanceStatus {
                    name: pod,
                    role: Some(role),
                    ready: status.ready,
                    lsn,
                    lag_bytes,
                }
            }
        })
        .collect()
}
