//! The Services of `spec.expose`: applied (server-side, field manager
//! `tusk`) as the builder makes them, and deleted when the plan says so.
//! Which ones is the plan's decision (`lifecycle::exposure`); nothing here
//! decides again.

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{DeleteParams, Preconditions};

use super::{Applier, Done};
use crate::controller::Error;
use crate::lifecycle::ExposureRemoval;
use crate::resources;

impl Applier<'_> {
    /// Applies the Services named in `services` (the plan names only those
    /// missing or not as built, so each is a creation or a change).
    pub(super) async fn apply_exposure(&self, services: &[String]) -> Result<Option<Done>, Error> {
        let mut changed = Vec::new();
        for service in resources::exposure_services(self.model) {
            let name = service.name_any();
            if !services.contains(&name) {
                continue;
            }
            self.server_side_apply::<Service>(&service, "applying a Service of spec.expose")
                .await?;
            changed.push(name);
        }
        Ok((!changed.is_empty()).then(|| Done {
            reason: "AppliedExposure",
            note: format!(
                "applied Service {} of spec.expose (created, or changed in place)",
                changed.join(", ")
            ),
        }))
    }

    /// Deletes Service `name` of `spec.expose`: only the one observed (its
    /// uid), so a Service someone else created under that name meanwhile
    /// stays.
    pub(super) async fn delete_exposure(
        &self,
        name: &str,
        reason: ExposureRemoval,
    ) -> Result<Option<Done>, Error> {
        let uid = self
            .snapshot
            .services
            .iter()
            .find(|s| s.name_any() == name)
            .and_then(|s| s.metadata.uid.clone());
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.api::<Service>().delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                return Ok(None);
            }
            Err(err) => return Err(Error::kube("deleting a Service of spec.expose")(err)),
        }
        let note = match reason {
            ExposureRemoval::Unlisted => {
                format!("deleted Service {name}: its entry is no longer in spec.expose")
            }
            ExposureRemoval::ClassChanged => format!(
                "deleted Service {name}: its loadBalancerClass changed, which Kubernetes does not allow in place; it is created again with the new class (and a new address)"
            ),
        };
        Ok(Some(Done {
            reason: "DeletedExposure",
            note,
        }))
    }
}
