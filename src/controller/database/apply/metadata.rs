//! Inherited metadata put back on instance Pods and PVCs: a JSON merge
//! patch of the inherited labels and annotations alone (never Tusk's own
//! keys, never the spec), so a pod is updated in place and nothing else on
//! it changes.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{Applier, Done};
use crate::controller::{Error, FIELD_MANAGER};
use crate::resources::{inherited, labels, names};

impl Applier<'_> {
    pub(super) async fn restore_inherited_metadata(
        &self,
        pods: &[String],
        pvcs: &[String],
    ) -> Result<Option<Done>, Error> {
        let db = self.name();
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        for pod in pods {
            let own = labels::pod(db, pod, crate::api::status::InstanceRole::Replica);
            let patch = self.inherited_patch(&own);
            self.api::<Pod>()
                .patch(pod, &params, &Patch::Merge(patch))
                .await
                .map_err(Error::kube(
                    "restoring an instance Pod's inherited metadata",
                ))?;
        }
        for pvc in pvcs {
            let instance = names::serial_of(db, pvc)
                .map(|serial| names::instance_name(db, serial))
                .unwrap_or_else(|| pvc.clone());
            let patch = self.inherited_patch(&labels::instance(db, &instance));
            self.api::<PersistentVolumeClaim>()
                .patch(pvc, &params, &Patch::Merge(patch))
                .await
                .map_err(Error::kube("restoring a PVC's inherited metadata"))?;
        }
        let objects: Vec<&str> = pods.iter().chain(pvcs).map(String::as_str).collect();
        Ok(Some(Done {
            reason: "InheritedMetadataRestored",
            note: format!("put spec.inheritedMetadata back on {}", objects.join(", ")),
        }))
    }

    /// Every inherited label and annotation whose key is not among `own`.
    fn inherited_patch(
        &self,
        own: &std::collections::BTreeMap<String, String>,
    ) -> serde_json::Value {
        let none = std::collections::BTreeMap::new();
        let wanted = inherited::drift(&self.model.inherited, own, &none, &none);
        json!({ "metadata": { "labels": wanted.labels, "annotations": wanted.annotations } })
    }
}
