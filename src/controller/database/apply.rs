//! Apply: carry out the lifecycle's actions, in order, against the API server
//! and the instance managers. Every object goes out through a pure builder from
//! [`crate::resources`]; this module only decides how each is written.
//!
//! - Secrets are created only when absent (`POST`, never apply): their
//!   passwords are set in PostgreSQL once and must never change under it.
//! - Pods are created, not applied: their role label belongs to switchover and
//!   failover once they exist, and pod specs are immutable anyway.
//! - Services, PDBs and PVCs are server-side applied with field manager `tusk`.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use rand::Rng;
use rand::distr::Alphanumeric;
use serde_json::json;

use super::instances::InstanceApi;
use super::observe::Snapshot;
use crate::api::v1::Database;
use crate::controller::FIELD_MANAGER;
use crate::error::Error;
use crate::instance::Role;
use crate::lifecycle::Action;
use crate::resources::{self, BuildConfig, PASSWORD_KEY, SecretKind, labels, names};

/// Length of generated passwords and tokens: 32 alphanumerics, about 190 bits.
const PASSWORD_LENGTH: usize = 32;

/// What one applied action did, for its Event; `None` when it changed nothing.
pub struct Done {
    pub reason: &'static str,
    pub note: String,
}

/// Everything an action needs: the clients, the Database and this pass's snapshot.
pub struct Applier<'a> {
    pub client: &'a kube::Client,
    pub instances: &'a InstanceApi,
    pub build: &'a BuildConfig,
    pub db: &'a Database,
    pub namespace: &'a str,
    pub snapshot: &'a Snapshot,
}

impl Applier<'_> {
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), self.namespace)
    }

    fn name(&self) -> String {
        self.db.name_any()
    }

    pub async fn apply(&self, action: &Action) -> Result<Option<Done>, Error> {
        match action {
            Action::EnsureSecrets => self.ensure_secrets().await,
            Action::EnsureServices => {
                for service in resources::services(self.db) {
                    self.server_side_apply::<Service>(&service, "applying a Service")
                        .await?;
                }
                Ok(None)
            }
            Action::EnsurePodDisruptionBudgets => {
                let budgets = resources::pod_disruption_budgets(self.db);
                for pdb in &budgets {
                    self.server_side_apply::<PodDisruptionBudget>(
                        pdb,
                        "applying a PodDisruptionBudget",
                    )
                    .await?;
                }
                // A budget the instance count no longer calls for goes.
                for name in &self.snapshot.pdbs {
                    if !budgets.iter().any(|b| b.name_any() == *name) {
                        self.delete::<PodDisruptionBudget>(name, "deleting a PodDisruptionBudget")
                            .await?;
                    }
                }
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
            } => {
                let pod =
                    resources::instance_pod_with(self.db, *serial, *role, *bootstrap, self.build);
                let name = pod.name_any();
                match self.api::<Pod>().create(&PostParams::default(), &pod).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => return Ok(None),
                    Err(err) => return Err(Error::kube("creating an instance Pod")(err)),
                }
                Ok(Some(Done {
                    reason: "CreatedInstance",
                    note: format!(
                        "created {} {name} ({:?})",
                        labels::role_value(*role),
                        bootstrap
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
            Action::ConfigureSync { standbys, min } => {
                let primary = self.primary()?;
                let body = json!({ "min": (*min).max(0), "standbys": standbys });
                self.post(&primary, "/sync", &body).await?;
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
                let body = json!({ "parameters": self.db.spec.postgresql.parameters });
                self.post(name, "/reload", &body).await?;
                Ok(Some(Done {
                    reason: "Reloaded",
                    note: format!("{name} reloaded its configuration"),
                }))
            }
            Action::DropSlot { slot } => {
                let primary = self.primary()?;
                self.post(&primary, "/slots/drop", &json!({ "slot": slot }))
                    .await?;
                Ok(Some(Done {
                    reason: "DroppedSlot",
                    note: format!("dropped replication slot {slot} of a removed instance"),
                }))
            }
            Action::RestartInstance { name } => {
                self.post(name, "/restart", &json!({})).await?;
                Ok(Some(Done {
                    reason: "Restarting",
                    note: format!("{name} restarts PostgreSQL for a parameter change"),
                }))
            }
        }
    }

    async fn ensure_secrets(&self) -> Result<Option<Done>, Error> {
        let mut created = Vec::new();
        for kind in SecretKind::ALL {
            let name = kind.secret_name(&self.name());
            if self.snapshot.secrets.contains(&name) {
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

    /// The instance whose manager reports primary in this pass.
    fn primary(&self) -> Result<String, Error> {
        self.snapshot
            .managers
            .iter()
            .find(|(_, s)| s.postgres.role == Role::Primary)
            .map(|(name, _)| name.clone())
            .ok_or_else(|| Error::InstanceUnreachable {
                instance: self.name(),
                reason: "no instance reports primary".to_owned(),
            })
    }

    async fn post(
        &self,
        instance: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<(), Error> {
        let ip = self
            .snapshot
            .pod_ip(instance)
            .ok_or_else(|| Error::InstanceUnreachable {
                instance: instance.to_owned(),
                reason: "the pod has no IP".to_owned(),
            })?;
        let token = self.token().await?;
        self.instances
            .post(&ip, path, &token, body)
            .await
            .map_err(|source| Error::InstanceApi {
                instance: instance.to_owned(),
                source,
            })
    }

    async fn token(&self) -> Result<String, Error> {
        let name = names::instance_token_secret(&self.name());
        let secret = self
            .api::<Secret>()
            .get(&name)
            .await
            .map_err(Error::kube("reading the instance token Secret"))?;
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(PASSWORD_KEY))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .ok_or(Error::MissingField("password in the instance token Secret"))
    }
}

fn generate_password() -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(PASSWORD_LENGTH)
        .map(char::from)
        .collect()
}
