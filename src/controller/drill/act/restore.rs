//! The `restore` drill's actions: the WAL switch on the primary and the
//! throwaway Database, the checker pod, and the undo that deletes both.
//! Only a copy this Drill owns (its uid in the copy's ownerReferences) is
//! ever taken as created or deleted: a Database of the same name that is
//! not the Drill's fails the run and is left alone.

use std::net::IpAddr;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use tracing::{info, warn};

use super::{Act, kube_outcome};
use crate::api::v1::Database;
use crate::controller::database::instances::Call;
use crate::drill::Outcome;
use crate::resources::{check_pod, check_pod_name, names, restore_copy};

impl Act<'_> {
    /// Switches `primary`'s WAL, so that the segment holding the recovery
    /// point is archived now rather than at `archive_timeout`, then creates
    /// the copy. A copy of this Drill's that exists already counts as
    /// created (a restarted operator asks again).
    pub(super) async fn start_restore(
        &self,
        primary: &str,
        copy: &str,
        target_time: Timestamp,
    ) -> Outcome {
        info!(%primary, %copy, %target_time, "restoring into a throwaway Database");
        match self.manager(primary, Call::WalSwitch).await {
            Outcome::Done => {}
            Outcome::Refused(why) => {
                return Outcome::Refused(format!("switching WAL on {primary}: {why}"));
            }
            Outcome::Unknown(why) => {
                return Outcome::Unknown(format!("switching WAL on {primary}: {why}"));
            }
        }
        let Some(source) = &self.seen.database else {
            return Outcome::Refused(format!(
                "Database {} does not exist",
                self.drill.spec.database
            ));
        };
        let Some(database) = restore_copy(self.drill, source, copy, target_time) else {
            return Outcome::Refused("the Drill has no uid to own its copy by".to_owned());
        };
        match self
            .databases()
            .create(&PostParams::default(), &database)
            .await
        {
            Ok(_) => Outcome::Done,
            Err(kube::Error::Api(e)) if e.code == 409 => self.existing_copy(copy).await,
            Err(error) => kube_outcome(error),
        }
    }

    async fn existing_copy(&self, copy: &str) -> Outcome {
        match self.databases().get_opt(copy).await {
            Ok(Some(db)) if db.metadata.deletion_timestamp.is_some() => {
                Outcome::Refused(format!("Database {copy} is being deleted"))
            }
            Ok(Some(db)) if self.owns(&db) => Outcome::Done,
            Ok(Some(_)) => {
                Outcome::Refused(format!("Database {copy} exists and is not this Drill's"))
            }
            Ok(None) => Outcome::Unknown(format!("Database {copy} was created and is gone")),
            Err(error) => Outcome::Unknown(error.to_string()),
        }
    }

    /// Creates the checker pod; one that exists already counts as created.
    pub(super) async fn check_copy(&self, copy: &str, ids: &str) -> Outcome {
        let address = self.cluster_ip(&names::rw_service(copy)).await;
        // The probe's table is in the source's application database.
        let dbname = self
            .seen
            .database
            .as_ref()
            .and_then(|db| db.spec.bootstrap.as_ref())
            .and_then(|b| b.initdb.as_ref())
            .map_or_else(
                || crate::api::v1::InitdbSpec::default().database,
                |i| i.database.clone(),
            );
        let Some(pod) = check_pod(self.drill, copy, address, &dbname, ids, &self.ctx.build) else {
            return Outcome::Refused("the Drill has no uid to own its checker by".to_owned());
        };
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => Outcome::Done,
            Err(kube::Error::Api(e)) if e.code == 409 => Outcome::Done,
            Err(error) => kube_outcome(error),
        }
    }

    /// Deletes the checker pod and the copy (never a Database this Drill
    /// does not own; its volumes, owned by it, go with it). Done once the
    /// copy's deletion was accepted, or it is gone.
    pub(super) async fn undo_restore(&self, copy: &str) -> Outcome {
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        let checker = check_pod_name(&self.drill.name_any());
        match pods.delete(&checker, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(error) => return Outcome::Unknown(error.to_string()),
        }
        let databases = self.databases();
        let db = match databases.get_opt(copy).await {
            Ok(Some(db)) => db,
            Ok(None) => return Outcome::Done,
            Err(error) => return Outcome::Unknown(error.to_string()),
        };
        if !self.owns(&db) {
            warn!(%copy, "a Database of the copy's name is not this Drill's: left alone");
            return Outcome::Done;
        }
        if db.metadata.deletion_timestamp.is_some() {
            return Outcome::Done;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: db.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match databases.delete(copy, &params).await {
            Ok(_) => Outcome::Done,
            Err(kube::Error::Api(e)) if e.code == 404 => Outcome::Done,
            Err(error) => kube_outcome(error),
        }
    }

    fn databases(&self) -> Api<Database> {
        Api::namespaced(self.ctx.client.clone(), self.namespace)
    }

    /// Whether `db` is owned by this Drill.
    fn owns(&self, db: &Database) -> bool {
        let Some(uid) = self.drill.metadata.uid.as_deref() else {
            return false;
        };
        db.owner_references().iter().any(|o| o.uid == uid)
    }

    /// Service `name`'s cluster IP: the checker dials it without DNS, like
    /// the probe.
    async fn cluster_ip(&self, name: &str) -> Option<IpAddr> {
        let services: Api<Service> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        let service = services.get_opt(name).await.ok().flatten()?;
        service.spec?.cluster_ip?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_copy_carries_the_annotation_the_deletion_reads() {
        assert_eq!(
            crate::resources::COPY_SKIPS_FINAL_BACKUP,
            crate::lifecycle::SKIP_FINAL_BACKUP
        );
    }
}
