//! The manager moves its own pod's `tusk.dev/role` label the moment the role
//! changes hands here (a promotion, a switchover's hand-over), so that `-rw`
//! follows at once instead of on the operator's next pass, or, when the
//! operator itself is lost in the middle of a failover, only once the next
//! operator leader runs.
//!
//! The operator's Role for the managers grants `patch` on the Database's
//! instance pods only when the operator runs with `instanceSelfLabel`, and
//! the chart then installs a ValidatingAdmissionPolicy that lets a manager
//! change that one label of its own pod and nothing else. Without the right,
//! the call is refused and the operator labels the pod, as it always does:
//! the operator stays the authority (it also puts a stale `primary` label
//! back to `replica`); this only saves the wait.
//!
//! Safety does not rest on the label: a pod labelled `primary` accepts
//! writes only while its manager holds the lease (fencing), so the label is
//! set only after the lease is taken and the promotion is done.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::Ha;
use crate::contract::{ROLE_LABEL, Role};

/// The field manager of the label the manager sets; the operator's forced
/// apply (`tusk`) takes the field back when it relabels.
pub const FIELD_MANAGER: &str = "tusk-instance";
/// One attempt, bounded like a lease call: a slow API server must not hold a
/// promotion's answer, and the operator labels the pod anyway.
const CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// The server-side apply body that sets `role` on pod `name`.
pub fn role_patch(name: &str, role: Role) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": { ROLE_LABEL: role.as_str() } },
    })
}

impl Ha {
    /// Label this instance's pod `role`, in the background so that a slow
    /// API server holds nothing up; the outcome is only logged (see the
    /// module's docs).
    pub async fn label_self(&self, role: Role) {
        if !self.lease.enabled() {
            return;
        }
        let client = match self.lease.client().await {
            Ok(client) => client,
            Err(error) => {
                tracing::info!(%error, "not labelling its own pod: no client");
                return;
            }
        };
        let pods: Api<Pod> = Api::namespaced(client, self.lease.namespace());
        let name = self.me.clone();
        tokio::spawn(apply(pods, name, role));
    }
}

async fn apply(pods: Api<Pod>, name: String, role: Role) {
    let started = std::time::Instant::now();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let patch = Patch::Apply(role_patch(&name, role));
    match tokio::time::timeout(CALL_TIMEOUT, pods.patch(&name, &params, &patch)).await {
        Ok(Ok(_)) => tracing::info!(
            role = role.as_str(),
            elapsed_ms = started.elapsed().as_millis(),
            "labelled its own pod"
        ),
        Ok(Err(kube::Error::Api(status))) if matches!(status.code, 403 | 422) => {
            tracing::info!(
                reason = %status.message,
                "not permitted to label its own pod; the operator labels it"
            );
        }
        Ok(Err(error)) => tracing::warn!(%error, "labelling its own pod failed"),
        Err(_) => tracing::warn!("labelling its own pod timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_sets_only_the_role_label_of_the_named_pod() {
        let patch = role_patch("orders-2", Role::Primary);
        assert_eq!(patch["metadata"]["name"], "orders-2");
        assert_eq!(
            patch["metadata"]["labels"],
            json!({ "tusk.dev/role": "primary" })
        );
        assert_eq!(patch.as_object().map(|o| o.len()), Some(3));
        assert_eq!(
            role_patch("orders-1", Role::Replica)["metadata"]["labels"]["tusk.dev/role"],
            "replica"
        );
    }
}
