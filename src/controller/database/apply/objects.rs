//! The Database's objects that are not instances: the credential Secrets
//! (created once, never overwritten), the Services, the primary Lease and
//! the managers' access to it, the PodDisruptionBudgets and the PVCs
//! (created, and grown).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use rand::Rng;
use rand::distr::Alphanumeric;
use serde_json::json;

use super::{Applier, Done};
use crate::contract::{Credential, PasswordRequest, VolumeKind};
use crate::controller::database::instances::Call;
use crate::controller::database::observe::PASSWORD_SYNCED_ANNOTATION;
use crate::controller::{Error, FIELD_MANAGER};
use crate::lifecycle::{GrowReason, growth};
use crate::resources::{self, SecretKind, names};

/// Length of generated passwords and tokens: 32 alphanumerics, about 190 bits.
const PASSWORD_LENGTH: usize = 32;

/// The field manager of the annotation that marks a Secret's password as
/// given to the instances: apart from `tusk`'s, so that re-applying the
/// Secret's labels leaves it alone.
const CREDENTIALS_MANAGER: &str = "tusk-credentials";

impl Applier<'_> {
    /// Creates the missing Secrets; re-applies the labels and owner of the
    /// others (never their data).
    pub(super) async fn ensure_secrets(&self) -> Result<Option<Done>, Error> {
        let mut created = Vec::new();
        for kind in SecretKind::ALL {
            let name = kind.secret_name(self.name());
            if self.snapshot.has_secret(&name) {
                self.reapply_secret_metadata(kind, &name, self.snapshot.secret_uid(&name))
                    .await?;
                continue;
            }
            let secret = resources::secret(self.model, kind, &generate_password());
            // One created by an earlier pass whose list did not see it yet is kept.
            if self
                .create_once(&secret, "creating a credential Secret")
                .await?
            {
                created.push(name);
            }
        }
        Ok((!created.is_empty()).then(|| Done {
            reason: "CreatedSecrets",
            note: format!("generated credentials: {}", created.join(", ")),
        }))
    }

    /// Re-applies the labels, inherited annotations and owner of existing
    /// Secret `name` (`uid` as last seen), leaving its data alone.
    ///
    /// The uid makes the apply a precondition: an apply creates what does
    /// not exist, and one without it would recreate, without a password, a
    /// Secret deleted since it was seen. The API server refuses instead (409
    /// when it is gone, 422 when another Secret took its name), and the next
    /// pass, which sees what happened, creates or keeps it.
    async fn reapply_secret_metadata(
        &self,
        kind: SecretKind,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), Error> {
        let built = resources::secret(self.model, kind, "");
        let mut metadata = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "labels": built.metadata.labels,
                "annotations": built.metadata.annotations,
                "ownerReferences": built.metadata.owner_references,
            },
        });
        if let Some(uid) = uid {
            metadata["metadata"]["uid"] = json!(uid);
        }
        match self
            .api::<Secret>()
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(metadata),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if uid.is_some() && [409, 422].contains(&status.code) => {
                tracing::info!(secret = name, reason = %status.message, "the Secret changed since it was seen; the next pass re-applies it");
                Ok(())
            }
            Err(error) => Err(Error::kube("re-applying a Secret's labels and owner")(
                error,
            )),
        }
    }

    /// Gives `instances` the password in `credential`'s Secret, then marks
    /// the Secret so that the next pass does not again.
    pub(super) async fn sync_password(
        &self,
        credential: Credential,
        instances: &[String],
    ) -> Result<Option<Done>, Error> {
        let kind = match credential {
            Credential::Superuser => SecretKind::Superuser,
            Credential::Replication => SecretKind::Replication,
            Credential::App => SecretKind::App,
        };
        let name = kind.secret_name(self.name());
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

    pub(super) async fn ensure_services(&self) -> Result<Option<Done>, Error> {
        for service in resources::services(self.model) {
            self.server_side_apply::<Service>(&service, "applying a Service")
                .await?;
        }
        Ok(None)
    }

    pub(super) async fn ensure_lease_access(&self) -> Result<Option<Done>, Error> {
        self.server_side_apply::<ServiceAccount>(
            &resources::instance_account(self.model),
            "applying the instances' ServiceAccount",
        )
        .await?;
        let pods = resources::self_label_pods(
            self.model,
            self.build,
            self.snapshot.instance_serials(&self.model.name),
        );
        self.server_side_apply::<Role>(
            &resources::instance_role(self.model, pods.as_deref()),
            "applying the instances' Role",
        )
        .await?;
        self.server_side_apply::<RoleBinding>(
            &resources::instance_role_binding(self.model),
            "applying the instances' RoleBinding",
        )
        .await?;
        self.server_side_apply::<Lease>(
            &resources::primary_lease(self.model),
            "applying the primary Lease",
        )
        .await?;
        Ok(None)
    }

    pub(super) async fn ensure_budgets(&self) -> Result<Option<Done>, Error> {
        for pdb in resources::pod_disruption_budgets(self.model) {
            self.server_side_apply::<PodDisruptionBudget>(&pdb, "applying a PodDisruptionBudget")
                .await?;
        }
        Ok(None)
    }

    pub(super) async fn delete_budget(&self, name: &str) -> Result<Option<Done>, Error> {
        self.delete::<PodDisruptionBudget>(name, "deleting a PodDisruptionBudget")
            .await?;
        Ok(None)
    }

    /// The instance's PVCs: its data volume and, with `spec.walStorage`,
    /// its WAL volume, created together.
    pub(super) async fn create_pvc(&self, serial: u32) -> Result<Option<Done>, Error> {
        let instance = names::instance_name(self.name(), serial);
        let claims = resources::instance_pvcs(self.model, &instance);
        for pvc in &claims {
            self.server_side_apply::<PersistentVolumeClaim>(pvc, "applying a PVC")
                .await?;
        }
        let names: Vec<String> = claims.iter().map(ResourceExt::name_any).collect();
        Ok(Some(Done {
            reason: "CreatedVolume",
            note: format!("created PVC {}", names.join(" and ")),
        }))
    }

    /// Raises PVC `pvc`'s request from `from` to `to` bytes (server-side
    /// apply of the claim as built, at the new size).
    pub(super) async fn grow_volume(
        &self,
        instance: &str,
        volume: VolumeKind,
        pvc: &str,
        (from, to): (u64, u64),
        reason: GrowReason,
    ) -> Result<Option<Done>, Error> {
        let claim = resources::grown_pvc(self.model, instance, volume, to)
            .ok_or(Error::MissingField("a claim for this volume in the spec"))?;
        self.server_side_apply::<PersistentVolumeClaim>(&claim, "growing a PVC")
            .await?;
        let why = match reason {
            GrowReason::Spec if volume == VolumeKind::Wal => "spec.walStorage.size".to_owned(),
            GrowReason::Spec => "spec.storage.size".to_owned(),
            GrowReason::AutoGrow { used_percent } => {
                format!("spec.storage.autoGrow: the filesystem is {used_percent}% used")
            }
        };
        Ok(Some(Done {
            reason: match reason {
                GrowReason::Spec => "GrowingVolume",
                GrowReason::AutoGrow { .. } => "AutoGrowingVolume",
            },
            note: format!(
                "growing PVC {pvc} ({} volume of {instance}) from {} to {}: {why}",
                volume.as_str(),
                growth::bytes(from),
                growth::bytes(to)
            ),
        }))
    }

    /// The PVCs of a removed instance: its data PVC, and its WAL PVC when
    /// this Database's listing (by its label) holds one, so that a PVC a
    /// user made with a similar name is never touched.
    pub(super) async fn delete_pvc(&self, name: &str) -> Result<Option<Done>, Error> {
        let wal = names::wal_pvc(name);
        let has_wal = self.snapshot.pvcs.iter().any(|p| p.name_any() == wal);
        let claims = names::instance_pvcs(name, has_wal);
        for claim in &claims {
            self.delete::<PersistentVolumeClaim>(claim, "deleting a PVC")
                .await?;
        }
        Ok(Some(Done {
            reason: "DeletedVolume",
            note: format!(
                "deleted PVC {} of removed instance {name}",
                claims.join(" and ")
            ),
        }))
    }
}

fn generate_password() -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(PASSWORD_LENGTH)
        .map(char::from)
        .collect()
}
