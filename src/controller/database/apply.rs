//! Apply: carry out the lifecycle's actions, in order, against the API server
//! and the instance managers. Every object goes out through a pure builder from
//! [`crate::resources`]; every action names its target, so nothing here decides
//! anything again. This module only decides how each object is written:
//!
//! - Secrets are created only when absent (`POST`): their passwords are set in
//!   PostgreSQL and must never change under it. A Secret that exists is the
//!   source of truth; only its labels and owner are re-applied.
//! - Pods are created, not applied: their role label belongs to switchover and
//!   failover once they exist, and pod specs are immutable anyway.
//! - Services, PDBs and PVCs are server-side applied with field manager `tusk`.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use rand::Rng;
use rand::distr::Alphanumeric;
use serde_json::json;

use super::instances::{Call, Instances};
use super::observe::{PASSWORD_SYNCED_ANNOTATION, Snapshot};
use crate::api::v1::Database;
use crate::contract::{
    Credential, DropSlotRequest, Members, PasswordRequest, PromoteRequest, ReloadRequest,
    SwitchoverRequest, SyncSettings,
};
use crate::controller::{Error, FIELD_MANAGER};
use crate::lifecycle::{Action, Bootstrap};
use crate::resources::{self, BuildConfig, PASSWORD_KEY, SecretKind, labels, names};

/// Length of generated passwords and tokens: 32 alphanumerics, about 190 bits.
const PASSWORD_LENGTH: usize = 32;

/// The field manager of the annotation that marks a Secret's password as
/// given to the instances: apart from `tusk`'s, so that re-applying the
/// Secret's labels leaves it alone.
const CREDENTIALS_MANAGER: &str = "tusk-credentials";

/// What one applied action did, for its Event; `None` when it changed nothing.
pub struct Done {
    pub reason: &'static str,
    pub note: String,
}

/// Everything an action needs: the clients, the Database and this pass's snapshot.
pub struct Applier<'a> {
    /// For Events and what the operator remembers between passes.
    pub ctx: &'a crate::controller::Context,
    pub client: &'a kube::Client,
    pub instances: &'a dyn Instances,
    pub build: &'a BuildConfig,
    pub db: &'a Database,
    pub namespace: &'a str,
    pub snapshot: &'a Snapshot,
}

impl Applier<'_> {
    pub(super) fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), self.namespace)
    }

    pub(super) fn name(&self) -> String {
        self.db.name_any()
    }

    pub async fn apply(&self, action: &Action) -> Result<Option<Done>, Error> {
        match action {
            Action::EnsureSecrets => self.ensure_secrets().await,
            Action::SyncPassword {
                credential,
                instances,
            } => self.sync_password(*credential, instances).await,
            Action::EnsureServices => {
                for service in resources::services(self.db) {
                    self.server_side_apply::<Service>(&service, "applying a Service")
                        .await?;
                }
                Ok(None)
            }
            Action::EnsureLeaseAccess => {
                self.server_side_apply::<ServiceAccount>(
                    &resources::instance_account(self.db),
                    "applying the instances' ServiceAccount",
                )
                .await?;
                self.server_side_apply::<Role>(
                    &resources::instance_role(self.db),
                    "applying the instances' Role",
                )
                .await?;
                self.server_side_apply::<RoleBinding>(
                    &resources::instance_role_binding(self.db),
                    "applying the instances' RoleBinding",
                )
                .await?;
                self.server_side_apply::<Lease>(
                    &resources::primary_lease(self.db),
                    "applying the primary Lease",
                )
                .await?;
                Ok(None)
            }
            Action::SetMembers { name, members } => {
                let request = Members {
                    members: members.clone(),
                };
                self.call(name, Call::Members(request)).await?;
                Ok(None)
            }
            Action::Promote {
                name,
                from,
                standbys,
                min,
            } => {
                self.promote(name, standbys, *min).await?;
                Ok(Some(Done {
                    reason: "FailedOver",
                    note: format!("promoted {name} in place of {from}"),
                }))
            }
            Action::Switchover {
                from,
                to,
                standbys,
                min,
            } => {
                let request = SwitchoverRequest { target: to.clone() };
                self.call(from, Call::Switchover(request)).await?;
                self.promote(to, standbys, *min).await?;
                Ok(Some(Done {
                    reason: "SwitchedOver",
                    note: format!("{from} handed the primary role to {to}"),
                }))
            }
            Action::EnsurePodDisruptionBudgets => {
                for pdb in resources::pod_disruption_budgets(self.db) {
                    self.server_side_apply::<PodDisruptionBudget>(
                        &pdb,
                        "applying a PodDisruptionBudget",
                    )
                    .await?;
                }
                Ok(None)
            }
            Action::RunUpgradeJob {
                job,
                from,
                to,
                instance,
                node,
                from_image,
                to_image,
            } => {
                let input = resources::upgrade::UpgradeJobInput {
                    db: self.db,
                    config: self.build,
                    old_image: from_image.clone(),
                    new_image: to_image.clone(),
                    old_major: *from,
                    new_major: *to,
                    claim: names::pvc(instance),
                    node: node.clone(),
                    primary_host: self.snapshot.pod_ip(instance),
                };
                let built = resources::upgrade::job(&input, *job);
                let name = built.name_any();
                match self
                    .api::<Job>()
                    .create(&PostParams::default(), &built)
                    .await
                {
                    Ok(_) => {}
                    // Created by an earlier pass: never a second run.
                    Err(kube::Error::Api(status)) if status.code == 409 => return Ok(None),
                    Err(err) => return Err(Error::kube("creating an upgrade Job")(err)),
                }
                Ok(Some(Done {
                    reason: "UpgradeJob",
                    note: format!(
                        "created Job {name}: {} of {instance} from PostgreSQL {from} to {to}",
                        job.as_str()
                    ),
                }))
            }
            Action::DeleteJob { name } => {
                let params = DeleteParams {
                    propagation_policy: Some(kube::api::PropagationPolicy::Background),
                    ..DeleteParams::default()
                };
                match self.api::<Job>().delete(name, &params).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
                    Err(err) => return Err(Error::kube("deleting a Job")(err)),
                }
                Ok(Some(Done {
                    reason: "DeletedJob",
                    note: format!("deleted Job {name}"),
                }))
            }
            Action::TakeBackup { name, purpose } => self.take_backup(name, purpose).await,
            Action::RunRetention {
                primary,
                window_seconds,
                last_backup,
            } => {
                self.run_retention(primary, *window_seconds, last_backup.as_deref())
                    .await
            }
            Action::RunMigration { version } => self.run_migration(version).await,
            // A status write: the pass carries it out, with the status it
            // is about to write.
            Action::RecordTargetPrimary { .. } => Ok(None),
            Action::DeletePodDisruptionBudget { name } => {
                self.delete::<PodDisruptionBudget>(name, "deleting a PodDisruptionBudget")
                    .await?;
                Ok(None)
            }
            Action::CreatePvc { serial } => {
                let instance = names::instance_name(&self.name(), *serial);
                let pvc = resources::pvc(self.db, &instance);
                self.server_side_apply::<PersistentVolumeClaim>(&pvc, "applying a PVC")
                    .await?;
                Ok(Some(Done {
                    reason: "CreatedVolume",
                    note: format!("created PVC {}", pvc.name_any()),
                }))
            }
            Action::CreatePod {
                serial,
                bootstrap,
                role,
                image,
            } => {
                // The plan chose the image (the spec's, or the one the others
                // run while a new one cannot be rolled out).
                let mut db = self.db.clone();
                db.spec.image = Some(image.clone()).filter(|i| !i.is_empty());
                let mut pod =
                    resources::instance_pod_with(&db, *serial, *role, *bootstrap, self.build);
                if *bootstrap == Bootstrap::Restore {
                    // The plan creates it only once the source resolved.
                    let Some(Ok(source)) = &self.snapshot.restore else {
                        return Err(Error::Restore(
                            "spec.bootstrap.recovery: the restore source is not resolved"
                                .to_owned(),
                        ));
                    };
                    pod = resources::with_restore(pod, source);
                }
                let name = pod.name_any();
                match self.api::<Pod>().create(&PostParams::default(), &pod).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => return Ok(None),
                    Err(err) => return Err(Error::kube("creating an instance Pod")(err)),
                }
                Ok(Some(Done {
                    reason: "CreatedInstance",
                    note: format!(
                        "created {} {name} ({}, {image})",
                        labels::role_value(*role),
                        bootstrap.as_str()
                    ),
                }))
            }
            Action::DeletePod { name, reason } => {
                self.delete::<Pod>(name, "deleting an instance Pod").await?;
                Ok(Some(Done {
                    reason: "DeletedInstance",
                    note: format!("deleted pod {name} ({})", reason.as_str()),
                }))
            }
            Action::RollPod {
                name,
                evict,
                updated,
                total,
            } => {
                if *evict {
                    match self.api::<Pod>().evict(name, &EvictParams::default()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        // A budget refuses for now (a drain took another
                        // instance): the next pass asks again.
                        Err(kube::Error::Api(status)) if status.code == 429 => {
                            return Ok(Some(Done {
                                reason: "EvictionRefused",
                                note: format!(
                                    "rolling update: evicting {name} is refused for now: {}",
                                    status.message
                                ),
                            }));
                        }
                        Err(err) => return Err(Error::kube("evicting an instance Pod")(err)),
                    }
                } else {
                    self.delete::<Pod>(name, "deleting an instance Pod").await?;
                }
                Ok(Some(Done {
                    reason: "RollingUpdate",
                    note: format!(
                        "replacing {name} with the current pod spec ({updated} of {total} instances updated)"
                    ),
                }))
            }
            Action::DeletePvc { name } => {
                self.delete::<PersistentVolumeClaim>(&names::pvc(name), "deleting a PVC")
                    .await?;
                Ok(Some(Done {
                    reason: "DeletedVolume",
                    note: format!(
                        "deleted PVC {} of removed instance {name}",
                        names::pvc(name)
                    ),
                }))
            }
            Action::LabelRole { name, role } => {
                let patch = json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": { "name": name, "labels": { labels::ROLE: labels::role_value(*role) } },
                });
                self.api::<Pod>()
                    .patch(
                        name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(patch),
                    )
                    .await
                    .map_err(Error::kube("labelling an instance Pod"))?;
                Ok(Some(Done {
                    reason: "RoleLabelled",
                    note: format!("{name} is now labelled {}", labels::role_value(*role)),
                }))
            }
            Action::ConfigureSync {
                primary,
                standbys,
                min,
            } => {
                let settings = SyncSettings {
                    min: u32::try_from(*min).unwrap_or(0),
                    standbys: standbys.clone(),
                };
                self.call(primary, Call::Sync(settings)).await?;
                let note = if *min > 0 {
                    format!(
                        "synchronous_standby_names = ANY {min} ({})",
                        standbys.join(", ")
                    )
                } else {
                    "synchronous replication off".to_owned()
                };
                Ok(Some(Done {
                    reason: "SynchronousReplication",
                    note,
                }))
            }
            Action::Reload { name } => {
                let request = ReloadRequest {
                    parameters: Some(self.db.spec.postgresql.parameters.clone()),
                };
                self.call(name, Call::Reload(request)).await?;
                Ok(Some(Done {
                    reason: "Reloaded",
                    note: format!("{name} reloaded its configuration"),
                }))
            }
            Action::DropSlot { primary, slot } => {
                let request = DropSlotRequest { slot: slot.clone() };
                self.call(primary, Call::DropSlot(request)).await?;
                Ok(Some(Done {
                    reason: "DroppedSlot",
                    note: format!("dropped replication slot {slot} of a removed instance"),
                }))
            }
            Action::RestartInstance { name } => {
                self.call(name, Call::Restart).await?;
                Ok(Some(Done {
                    reason: "Restarting",
                    note: format!("{name} restarts PostgreSQL for a parameter change"),
                }))
            }
        }
    }

    /// Creates the missing Secrets; re-applies the labels and owner of the
    /// others (never their data).
    async fn ensure_secrets(&self) -> Result<Option<Done>, Error> {
        let mut created = Vec::new();
        for kind in SecretKind::ALL {
            let name = kind.secret_name(&self.name());
            if self.snapshot.has_secret(&name) {
                let built = resources::secret(self.db, kind, "");
                let metadata = json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": name,
                        "labels": built.metadata.labels,
                        "ownerReferences": built.metadata.owner_references,
                    },
                });
                self.api::<Secret>()
                    .patch(
                        &name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(metadata),
                    )
                    .await
                    .map_err(Error::kube("re-applying a Secret's labels and owner"))?;
                continue;
            }
            let secret = resources::secret(self.db, kind, &generate_password());
            match self
                .api::<Secret>()
                .create(&PostParams::default(), &secret)
                .await
            {
                Ok(_) => created.push(name),
                // Created by an earlier pass whose list did not see it yet: keep it.
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(err) => return Err(Error::kube("creating a credential Secret")(err)),
            }
        }
        Ok((!created.is_empty()).then(|| Done {
            reason: "CreatedSecrets",
            note: format!("generated credentials: {}", created.join(", ")),
        }))
    }

    /// Gives `instances` the password in `credential`'s Secret, then marks
    /// the Secret so that the next pass does not again.
    async fn sync_password(
        &self,
        credential: Credential,
        instances: &[String],
    ) -> Result<Option<Done>, Error> {
        let kind = match credential {
            Credential::Superuser => SecretKind::Superuser,
            Credential::Replication => SecretKind::Replication,
            Credential::App => SecretKind::App,
        };
        let name = kind.secret_name(&self.name());
        let password = self.secret_password(&name).await?;
        for instance in instances {
            let request = PasswordRequest {
                credential,
                password: password.clone(),
            };
            self.call(instance, Call::Password(request)).await?;
        }
        let mark = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": { "name": name, "annotations": { PASSWORD_SYNCED_ANNOTATION: "true" } },
        });
        self.api::<Secret>()
            .patch(
                &name,
                &PatchParams::apply(CREDENTIALS_MANAGER).force(),
                &Patch::Apply(mark),
            )
            .await
            .map_err(Error::kube("marking a Secret's password as given"))?;
        Ok(Some(Done {
            reason: "PasswordSynced",
            note: format!(
                "the password in Secret {name} is in effect on {}",
                instances.join(", ")
            ),
        }))
    }

    async fn server_side_apply<K>(&self, object: &K, context: &'static str) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let name = object
            .meta()
            .name
            .clone()
            .ok_or(Error::MissingField("metadata.name"))?;
        let mut body = serde_json::to_value(object).map_err(|source| Error::Serialize {
            what: "an object to apply",
            source,
        })?;
        // The builders leave apiVersion/kind to the typed client; apply needs them.
        body["apiVersion"] = json!(K::api_version(&()));
        body["kind"] = json!(K::kind(&()));
        self.api::<K>()
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(Error::kube(context))?;
        Ok(())
    }

    async fn delete<K>(&self, name: &str, context: &'static str) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        match self.api::<K>().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(Error::kube(context)(err)),
        }
    }

    async fn call(&self, instance: &str, call: Call) -> Result<(), Error> {
        let ip = self
            .snapshot
            .pod_ip(instance)
            .ok_or_else(|| Error::InstanceUnreachable {
                instance: instance.to_owned(),
                reason: "the pod has no IP".to_owned(),
            })?;
        let token = self
            .secret_password(&names::instance_token_secret(&self.name()))
            .await?;
        self.instances
            .call(&ip, &token, call)
            .await
            .map(drop)
            .map_err(|source| Error::Instance {
                instance: instance.to_owned(),
                source,
            })
    }

    async fn promote(&self, name: &str, standbys: &[String], min: i32) -> Result<(), Error> {
        let request = PromoteRequest {
            sync: Some(SyncSettings {
                min: u32::try_from(min).unwrap_or(0),
                standbys: standbys.to_vec(),
            }),
        };
        self.call(name, Call::Promote(request)).await
    }

    pub(super) async fn secret_password(&self, name: &str) -> Result<String, Error> {
        let secret = self
            .api::<Secret>()
            .get(name)
            .await
            .map_err(Error::kube("reading a credential Secret"))?;
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(PASSWORD_KEY))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .ok_or(Error::MissingField("password in a credential Secret"))
    }
}

fn generate_password() -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(PASSWORD_LENGTH)
        .map(char::from)
        .collect()
}
