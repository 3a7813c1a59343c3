//! `<db>-app-external`, the connection Secret for applications outside
//! Kubernetes: server-side applied whole as observe built it this pass
//! (from `<db>-app` and the published endpoints), or deleted once
//! `spec.expose` is empty. The published Services themselves are applied
//! with the other Services.

use k8s_openapi::api::core::v1::Secret;

use super::{Applier, Done};
use crate::api::expose::external_secret_name;
use crate::controller::Error;

impl Applier<'_> {
    pub(super) async fn apply_external_secret(&self) -> Result<Option<Done>, Error> {
        let secret = self
            .snapshot
            .external_secret
            .as_ref()
            .ok_or(Error::MissingField("the external app Secret as built"))?;
        self.server_side_apply(secret, "applying the external app Secret")
            .await?;
        Ok(Some(Done {
            reason: "ExternalSecretApplied",
            note: format!(
                "{} holds the published endpoints",
                external_secret_name(self.name())
            ),
        }))
    }

    pub(super) async fn delete_external_secret(&self) -> Result<Option<Done>, Error> {
        let name = external_secret_name(self.name());
        self.delete::<Secret>(&name, "deleting the external app Secret")
            .await?;
        Ok(Some(Done {
            reason: "ExternalSecretDeleted",
            note: format!("{name} deleted: spec.expose publishes nothing"),
        }))
    }
}
