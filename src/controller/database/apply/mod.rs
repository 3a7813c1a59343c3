//! Apply: carry out the lifecycle's actions, in order, against the API server
//! and the instance managers. Every object goes out through a pure builder from
//! [`crate::resources`], built from the validated model; every action names its
//! target, so nothing here decides anything again. [`Applier::apply`] is a flat
//! table from an action to its method; the methods live by concern:
//!
//! - [`objects`]: Secrets, Services, lease access, PodDisruptionBudgets, PVCs
//!   (created, and grown by applying the claim with a larger request).
//!   Secrets are created only when absent (`POST`): their passwords are set in
//!   PostgreSQL and must never change under it. A Secret that exists is the
//!   source of truth; only its labels and owner are re-applied. Services, PDBs
//!   and PVCs are server-side applied with field manager `tusk`.
//! - [`exposure`]: the Services of `spec.expose`, server-side applied with
//!   field manager `tusk`, and deleted (by uid) when their entry is gone or
//!   their `loadBalancerClass` changed.
//! - [`instances`]: Pods and the instance managers' API. Pods are created, not
//!   applied: their role label belongs to switchover and failover once they
//!   exist, and pod specs are immutable anyway.
//! - [`jobs`]: the upgrade Jobs and the Backup taken before an upgrade.
//! - [`metadata`]: `spec.inheritedMetadata` put back on instance Pods and
//!   PVCs in place (a merge patch of those keys alone).
//! - [`external_secret`]: `<db>-app-external`, applied whole or deleted.

mod backups;
mod exposure;
mod external_secret;
mod instances;
mod jobs;
mod metadata;
mod objects;
mod resize;
mod tls;

pub use backups::take_backup;

use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::instances::{Call, Instances};
use super::observe::Snapshot;
use crate::api::model::ValidatedDatabase;
use crate::api::v1::Database;
use crate::controller::{Error, FIELD_MANAGER};
use crate::lifecycle::Action;
use crate::resources::{BuildConfig, PASSWORD_KEY, names};

use jobs::UpgradeRun;

/// What one applied action did, for its Event; `None` when it changed nothing.
pub struct Done {
    pub reason: &'static str,
    pub note: String,
}

/// Everything an action needs: the clients, the Database, its validated model
/// and this pass's snapshot.
pub struct Applier<'a> {
    /// For Events and what the operator remembers between passes.
    pub ctx: &'a crate::controller::Context,
    pub client: &'a kube::Client,
    pub instances: &'a dyn Instances,
    pub build: &'a BuildConfig,
    /// The Database as stored: the Backups it asks for are made from it.
    pub db: &'a Database,
    pub model: &'a ValidatedDatabase,
    pub namespace: &'a str,
    pub snapshot: &'a Snapshot,
}

impl Applier<'_> {
    /// Carries out `action`. One arm per action, each calling one method: a
    /// new action adds an arm and a method in the file of its concern.
    pub async fn apply(&self, action: &Action) -> Result<Option<Done>, Error> {
        match action {
            Action::EnsureSecrets => self.ensure_secrets().await,
            Action::SyncPassword {
                credential,
                instances,
            } => self.sync_password(*credential, instances).await,
            Action::EnsureServices => self.ensure_services().await,
            Action::ApplyExposure { services } => self.apply_exposure(services).await,
            Action::DeleteExposure { name, reason } => self.delete_exposure(name, *reason).await,
            Action::EnsureLeaseAccess => self.ensure_lease_access().await,
            Action::EnsurePodDisruptionBudgets => self.ensure_budgets().await,
            Action::DeletePodDisruptionBudget { name } => self.delete_budget(name).await,
            Action::CreatePvc { serial } => self.create_pvc(*serial).await,
            Action::DeletePvc { name } => self.delete_pvc(name).await,
            Action::GrowVolume {
                instance,
                volume,
                pvc,
                from,
                to,
                reason,
            } => {
                self.grow_volume(instance, *volume, pvc, (*from, *to), *reason)
                    .await
            }
            Action::CreatePod {
                serial,
                bootstrap,
                role,
                image,
            } => self.create_pod(*serial, *bootstrap, *role, image).await,
            Action::DeletePod { name, reason } => self.delete_pod(name, *reason).await,
            Action::RollPod {
                name,
                evict,
                updated,
                total,
            } => self.roll_pod(name, *evict, *updated, *total).await,
            Action::LabelRole { name, role } => self.label_role(name, *role).await,
            Action::SetMembers { name, members } => self.set_members(name, members).await,
            Action::Promote {
                name,
                from,
                standbys,
                min,
            } => self.fail_over(name, from, standbys, *min).await,
            Action::Switchover {
                from,
                to,
                standbys,
                min,
            } => self.switch_over(from, to, standbys, *min).await,
            Action::ConfigureSync {
                primary,
                standbys,
                min,
            } => self.configure_sync(primary, standbys, *min).await,
            Action::Reload { name } => self.reload(name).await,
            Action::RestartInstance { name } => self.restart(name).await,
            Action::ResizeCpu {
                name,
                request,
                limit,
            } => self.resize_cpu(name, request, limit.as_deref()).await,
            Action::DropSlot { primary, slot } => self.drop_slot(primary, slot).await,
            Action::RunUpgradeJob {
                job,
                from,
                to,
                instance,
                node,
                from_image,
                to_image,
            } => {
                self.run_upgrade_job(&UpgradeRun {
                    job: *job,
                    from: *from,
                    to: *to,
                    instance,
                    node: node.as_deref(),
                    from_image,
                    to_image,
                })
                .await
            }
            Action::DeleteJob { name } => self.delete_job(name).await,
            Action::TakeBackup { name, purpose } => {
                take_backup(self.ctx, self.db, name, purpose).await
            }
            Action::RunRetention {
                primary,
                window_seconds,
                last_backup,
            } => {
                self.run_retention(primary, *window_seconds, last_backup.as_deref())
                    .await
            }
            Action::RunMigration { version } => self.run_migration(version).await,
            Action::RestoreInheritedMetadata { pods, pvcs } => {
                self.restore_inherited_metadata(pods, pvcs).await
            }
            // A status write: the pass carries it out, with the status it is
            // about to write.
            Action::RecordTargetPrimary { .. } => Ok(None),
            Action::Tls(action) => self.tls(action).await,
            Action::ApplyExternalSecret => self.apply_external_secret().await,
            Action::DeleteExternalSecret => self.delete_external_secret().await,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), self.namespace)
    }

    fn name(&self) -> &str {
        &self.model.name
    }

    /// Creates `object`; one that exists already (an earlier pass made it)
    /// is `false`, never a second one.
    async fn create_once<K>(&self, object: &K, context: &'static str) -> Result<bool, Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        match self.api::<K>().create(&PostParams::default(), object).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(Error::kube(context)(err)),
        }
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
        let target = self
            .snapshot
            .target(instance)
            .ok_or_else(|| Error::InstanceUnreachable {
                instance: instance.to_owned(),
                reason: "the pod has no IP".to_owned(),
            })?;
        let token = self
            .secret_password(&names::instance_token_secret(self.name()))
            .await?;
        self.instances
            .call(target, &token, call)
            .await
            .map(drop)
            .map_err(|source| Error::Instance {
                instance: instance.to_owned(),
                source,
            })
    }

    async fn secret_password(&self, name: &str) -> Result<String, Error> {
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
