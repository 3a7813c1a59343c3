//! The instances: their Pods (created, evicted, deleted, labelled) and the
//! requests to their managers (members, promotion, switchover, synchronous
//! replication, configuration, restart, slots).

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{EvictParams, Patch, PatchParams};
use serde_json::json;

use super::{Applier, Done};
use crate::api::model;
use crate::api::status::InstanceRole;
use crate::contract::{
    DropSlotRequest, Member, Members, PromoteRequest, ReloadRequest, SwitchoverRequest,
    SyncSettings,
};
use crate::controller::database::instances::Call;
use crate::controller::{Error, FIELD_MANAGER};
use crate::lifecycle::{Bootstrap, DeleteReason};
use crate::resources::{self, PlannedInstance, labels};

impl Applier<'_> {
    pub(super) async fn create_pod(
        &self,
        serial: u32,
        bootstrap: Bootstrap,
        role: InstanceRole,
        image: &str,
    ) -> Result<Option<Done>, Error> {
        // The plan chose the image (the spec's, or the one the others run
        // while a new one cannot be rolled out); none stands for the
        // version's image in the operator's repository.
        let versioned;
        let planned = PlannedInstance {
            serial,
            role,
            bootstrap,
            image: if image.is_empty() {
                versioned = model::image(None, self.model.version, &self.build.postgres_repository);
                &versioned
            } else {
                image
            },
        };
        let mut pod = resources::instance_pod(self.model, &planned, self.build);
        if bootstrap == Bootstrap::Restore {
            // The plan creates it only once the source resolved.
            let Some(Ok(source)) = &self.snapshot.restore else {
                return Err(Error::Restore(
                    "spec.bootstrap.recovery: the restore source is not resolved".to_owned(),
                ));
            };
            pod = resources::with_restore(pod, source);
        }
        let name = pod.name_any();
        self.ensure_wal_pvc(&name).await?;
        if !self.create_once(&pod, "creating an instance Pod").await? {
            return Ok(None);
        }
        Ok(Some(Done {
            reason: "CreatedInstance",
            note: format!(
                "created {} {name} ({}, {image})",
                labels::role_value(role),
                bootstrap.as_str()
            ),
        }))
    }

    /// The instance's WAL PVC (`spec.walStorage`) when this Database's
    /// listing lacks it: a pass that failed between the data PVC and the
    /// WAL PVC would otherwise leave the pod Pending on a missing claim.
    async fn ensure_wal_pvc(&self, instance: &str) -> Result<(), Error> {
        let Some(wal) = resources::wal_pvc(self.model, instance) else {
            return Ok(());
        };
        let name = wal.name_any();
        if self.snapshot.pvcs.iter().any(|p| p.name_any() == name) {
            return Ok(());
        }
        self.server_side_apply::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
            &wal,
            "applying a WAL PVC",
        )
        .await
    }

    pub(super) async fn delete_pod(
        &self,
        name: &str,
        reason: DeleteReason,
    ) -> Result<Option<Done>, Error> {
        self.delete::<Pod>(name, "deleting an instance Pod").await?;
        Ok(Some(Done {
            reason: "DeletedInstance",
            note: format!("deleted pod {name} ({})", reason.as_str()),
        }))
    }

    /// One step of a rolling update: `name` evicted (or deleted), to be
    /// recreated from the current spec by a later pass.
    pub(super) async fn roll_pod(
        &self,
        name: &str,
        evict: bool,
        updated: usize,
        total: usize,
    ) -> Result<Option<Done>, Error> {
        if evict {
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

    pub(super) async fn label_role(
        &self,
        name: &str,
        role: InstanceRole,
    ) -> Result<Option<Done>, Error> {
        let patch = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": name, "labels": { labels::ROLE: labels::role_value(role) } },
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
            note: format!("{name} is now labelled {}", labels::role_value(role)),
        }))
    }

    pub(super) async fn set_members(
        &self,
        name: &str,
        members: &[Member],
    ) -> Result<Option<Done>, Error> {
        let request = Members {
            members: members.to_vec(),
        };
        self.call(name, Call::Members(request)).await?;
        Ok(None)
    }

    /// Promotes `name` in place of the failed `from`.
    pub(super) async fn fail_over(
        &self,
        name: &str,
        from: &str,
        standbys: &[String],
        min: i32,
    ) -> Result<Option<Done>, Error> {
        self.promote(name, standbys, min).await?;
        Ok(Some(Done {
            reason: "FailedOver",
            note: format!("promoted {name} in place of {from}"),
        }))
    }

    pub(super) async fn switch_over(
        &self,
        from: &str,
        to: &str,
        standbys: &[String],
        min: i32,
    ) -> Result<Option<Done>, Error> {
        let request = SwitchoverRequest {
            target: to.to_owned(),
        };
        self.call(from, Call::Switchover(request)).await?;
        self.promote(to, standbys, min).await?;
        Ok(Some(Done {
            reason: "SwitchedOver",
            note: format!("{from} handed the primary role to {to}"),
        }))
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

    pub(super) async fn configure_sync(
        &self,
        primary: &str,
        standbys: &[String],
        min: i32,
    ) -> Result<Option<Done>, Error> {
        let settings = SyncSettings {
            min: u32::try_from(min).unwrap_or(0),
            standbys: standbys.to_vec(),
        };
        self.call(primary, Call::Sync(settings)).await?;
        let note = if min > 0 {
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

    pub(super) async fn reload(&self, name: &str) -> Result<Option<Done>, Error> {
        let request = ReloadRequest {
            parameters: Some(self.model.effective_parameters()),
        };
        self.call(name, Call::Reload(request)).await?;
        Ok(Some(Done {
            reason: "Reloaded",
            note: format!("{name} reloaded its configuration"),
        }))
    }

    pub(super) async fn restart(&self, name: &str) -> Result<Option<Done>, Error> {
        self.call(name, Call::Restart).await?;
        Ok(Some(Done {
            reason: "Restarting",
            note: format!("{name} restarts PostgreSQL for a parameter change"),
        }))
    }

    pub(super) async fn drop_slot(&self, primary: &str, slot: &str) -> Result<Option<Done>, Error> {
        let request = DropSlotRequest {
            slot: slot.to_owned(),
        };
        self.call(primary, Call::DropSlot(request)).await?;
        Ok(Some(Done {
            reason: "DroppedSlot",
            note: format!("dropped replication slot {slot} of a removed instance"),
        }))
    }
}
