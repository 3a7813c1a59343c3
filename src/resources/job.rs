//! Reading a finished Job's report: Tusk's Jobs leave a one-line JSON
//! outcome as their container's termination message.

use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};

/// The terminated state of container `name` (a main or an init container)
/// in the first of `pods` where it terminated.
pub fn terminated(pods: &[Pod], name: &str) -> Option<ContainerStateTerminated> {
    pods.iter().find_map(|pod| {
        let status = pod.status.as_ref()?;
        status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .find(|c| c.name == name)?
            .state
            .as_ref()?
            .terminated
            .clone()
    })
}
