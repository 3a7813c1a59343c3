//! The async edge of observing volumes: each manager's `/volumes`, and
//! whether the StorageClasses the PVCs name allow expansion.

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod as KubePod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::api::Api;

use super::super::instances::{ClientTls, Instances, Target};
use crate::contract::Volumes;

/// `/volumes` of every running pod's manager, concurrently, by pod name; a
/// manager that does not answer is left out.
pub async fn poll(
    api: &dyn Instances,
    pods: &[KubePod],
    client: Option<&ClientTls>,
) -> BTreeMap<String, Volumes> {
    let polls = pods.iter().filter_map(|pod| {
        let ip = pod.status.as_ref()?.pod_ip.clone()?;
        let name = pod.name_any();
        let tls = crate::resources::serves_tls(pod);
        Some(async move {
            match api.volumes(Target::of(&ip, &name, tls, client)).await {
                Ok(volumes) => Some((name, volumes)),
                Err(error) => {
                    tracing::debug!(pod = %name, %error, "no volume usage from the manager");
                    None
                }
            }
        })
    });
    join_all(polls).await.into_iter().flatten().collect()
}

/// `allowVolumeExpansion` of each StorageClass the PVCs name. A class that
/// cannot be read (missing, or an install without the ClusterRole that
/// reads classes) is an `Err` saying why, not a failed pass.
pub async fn storage_classes(
    client: &kube::Client,
    pvcs: &[PersistentVolumeClaim],
) -> BTreeMap<String, Result<bool, String>> {
    let names: BTreeSet<String> = pvcs
        .iter()
        .filter_map(|p| p.spec.as_ref()?.storage_class_name.clone())
        .collect();
    let api: Api<StorageClass> = Api::all(client.clone());
    let reads = names.into_iter().map(|name| {
        let api = api.clone();
        async move {
            let expandable = match api.get_opt(&name).await {
                Ok(Some(class)) => Ok(class.allow_volume_expansion == Some(true)),
                Ok(None) => Err("it does not exist".to_owned()),
                Err(error) => Err(format!("it could not be read: {error}")),
            };
            (name, expandable)
        }
    });
    join_all(reads).await.into_iter().collect()
}
