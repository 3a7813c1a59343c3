//! An in-place CPU resize of an instance pod (the `resize` subresource,
//! Kubernetes 1.33+). Where the API server refuses it (an older cluster
//! without the subresource, a change it finds invalid, a missing
//! permission), the refusal is recorded on the pod
//! ([`RESIZE_REFUSED_ANNOTATION`]) and the planner rolls the pod instead.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{Applier, Done};
use crate::api::quantity;
use crate::controller::Error;
use crate::resources::POSTGRES_CONTAINER;
use crate::resources::compute::{RESIZE_REFUSED_ANNOTATION, cpu_key};

/// HTTP statuses meaning "not this way": no such subresource (404, 405),
/// not allowed (403), invalid for this pod (422).
const REFUSALS: &[u16] = &[403, 404, 405, 422];

impl Applier<'_> {
    pub(super) async fn resize_cpu(
        &self,
        name: &str,
        request: &str,
        limit: Option<&str>,
    ) -> Result<Option<Done>, Error> {
        let mut resources = json!({ "requests": { "cpu": request } });
        if let Some(limit) = limit {
            resources["limits"] = json!({ "cpu": limit });
        }
        // Strategic merge: containers merge by name, so only this
        // container's CPU is named and everything else stays.
        let patch = json!({
            "spec": { "containers": [{ "name": POSTGRES_CONTAINER, "resources": resources }] }
        });
        let pods = self.api::<Pod>();
        let result = pods
            .patch_subresource(
                "resize",
                name,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await;
        match result {
            Ok(_) => Ok(Some(Done {
                reason: "ResizingCpu",
                note: format!(
                    "{name}: CPU request {request}, limit {} applied in place, without a restart",
                    limit.unwrap_or("none")
                ),
            })),
            Err(kube::Error::Api(refusal)) if REFUSALS.contains(&refusal.code) => {
                let millicores = |v: &str| quantity::parse_millicores(v).ok();
                let key = cpu_key(millicores(request), limit.and_then(millicores));
                let mark =
                    json!({ "metadata": { "annotations": { RESIZE_REFUSED_ANNOTATION: key } } });
                pods.patch(name, &PatchParams::default(), &Patch::Merge(mark))
                    .await
                    .map_err(Error::kube("recording a refused resize on an instance Pod"))?;
                Ok(Some(Done {
                    reason: "ResizeRefused",
                    note: format!(
                        "{name}: the API server refused to resize its CPU in place ({}); it rolls instead",
                        refusal.message
                    ),
                }))
            }
            Err(e) => Err(Error::kube("resizing an instance Pod's CPU")(e)),
        }
    }
}
