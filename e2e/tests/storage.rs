//! The local cluster's expandable StorageClass (`tusk-expandable`, the CSI
//! driver csi-loop with the upstream provisioner and resizer) gives real
//! filesystems of the requested size that fill up and grow online: what the
//! volume-growth tests of Databases stand on.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::json;
use tusk_e2e::faults::exec;
use tusk_e2e::storage::{
    CSI_DRIVER, EXPANDABLE_CLASS, FsSize, expandable_class, fs_size, loop_devices_of, min_fs_size,
    volume_file, wait_fs_size,
};
use tusk_e2e::{Result, in_namespace, pod_ready, restricted, wait_for};

const MIB: u64 = 1 << 20;
const POD: &str = "holder";
const CONTAINER: &str = "main";
const MOUNT: &str = "/data";

/// A 256 MiB claim of the class under a running pod: `df` in the pod shows
/// about 256 MiB, writing until full fails with ENOSPC, a larger request
/// (512 MiB) grows the filesystem the same container sees (same container,
/// no restart) and the PVC reports the new capacity; deleting the claim
/// detaches the loop device and removes the volume's file.
#[tokio::test]
async fn an_expandable_volume_fills_and_grows_online_under_a_running_pod() {
    const TEST: &str = "an_expandable_volume_fills_and_grows_online_under_a_running_pod";
    in_namespace(
        "e2e-grow",
        Duration::from_secs(600),
        |client, ns| async move {
            if !expandable_class(&client, TEST).await? {
                return Ok(());
            }
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": EXPANDABLE_CLASS,
                         "resources": {"requests": {"storage": "256Mi"}}}
            }))?;
            claims.create(&PostParams::default(), &claim).await?;
            pods.create(&PostParams::default(), &holder()?).await?;
            wait_for(&pods, POD, Duration::from_secs(180), pod_ready).await?;

            let (pv, handle) = volume_of(&client, &claims).await?;
            let file = volume_file(&handle);
            let length = std::fs::metadata(&file)
                .map_err(|e| format!("volume file {} of PV {pv}: {e}", file.display()))?
                .len();
            assert_eq!(
                length,
                256 * MIB,
                "{} is the requested size",
                file.display()
            );
            let devices = loop_devices_of(&file)?;
            assert_eq!(
                devices.len(),
                1,
                "one loop device holds {}: {devices:?}",
                file.display()
            );

            let size = fs_size(&client, &ns, POD, CONTAINER, MOUNT).await?;
            assert_fits(size, 256 * MIB, "the new volume");

            let fill = exec(
                &client,
                &ns,
                POD,
                CONTAINER,
                &["dd", "if=/dev/zero", "of=/data/fill", "bs=1M"],
            )
            .await?;
            assert!(
                !fill.success && fill.stderr.contains("No space left on device"),
                "writing until full ends in ENOSPC; dd said: {}",
                fill.stderr.trim()
            );
            let full = fs_size(&client, &ns, POD, CONTAINER, MOUNT).await?;
            assert!(
                full.available < 4 * MIB,
                "a full volume has (almost) nothing free: {full:?}"
            );

            let before = container_of(&pods).await?;
            let grow = json!({"spec": {"resources": {"requests": {"storage": "512Mi"}}}});
            claims
                .patch("data", &PatchParams::default(), &Patch::Merge(&grow))
                .await?;
            let grown = wait_fs_size(
                &client,
                &ns,
                POD,
                CONTAINER,
                MOUNT,
                min_fs_size(512 * MIB),
                Duration::from_secs(180),
            )
            .await?;
            assert_fits(grown, 512 * MIB, "the grown volume");
            assert!(
                grown.available > 200 * MIB,
                "the grown volume has the new room free: {grown:?}"
            );
            wait_for(&claims, "data", Duration::from_secs(60), |c| {
                capacity(c).as_deref() == Some("512Mi")
            })
            .await?;
            assert_eq!(
                std::fs::metadata(&file)?.len(),
                512 * MIB,
                "{} grew",
                file.display()
            );
            assert_eq!(
                container_of(&pods).await?,
                before,
                "(container ID, restart count) of the pod: grown under the running container"
            );
            let more = exec(
                &client,
                &ns,
                POD,
                CONTAINER,
                &["dd", "if=/dev/zero", "of=/data/more", "bs=1M", "count=64"],
            )
            .await?;
            assert!(
                more.success,
                "64 MiB more fit after the grow; dd said: {}",
                more.stderr.trim()
            );

            pods.delete(POD, &DeleteParams::default()).await?;
            wait_gone(&pods, POD).await?;
            claims.delete("data", &DeleteParams::default()).await?;
            let volumes: Api<PersistentVolume> = Api::all(client.clone());
            wait_gone(&volumes, &pv).await?;
            assert!(
                !file.exists(),
                "deleting the claim removed {}",
                file.display()
            );
            let left = loop_devices_of(&file)?;
            assert!(
                left.is_empty(),
                "deleting the claim detached the loop device: still {left:?}"
            );
            Ok(())
        },
    )
    .await;
}

/// A pod that keeps the claim mounted at [`MOUNT`] and does nothing.
fn holder() -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD},
        "spec": {
            "securityContext": {"fsGroup": 999},
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [{
                "name": CONTAINER, "image": "localhost/busybox:latest", "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
                "volumeMounts": [{"name": "data", "mountPath": MOUNT}],
                "securityContext": restricted(999)
            }]
        }
    }))?)
}

/// The claim's PV and its CSI volume handle; the PV must be csi-loop's.
async fn volume_of(
    client: &Client,
    claims: &Api<PersistentVolumeClaim>,
) -> Result<(String, String)> {
    let bound = wait_for(claims, "data", Duration::from_secs(60), |c| {
        c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    })
    .await?;
    let pv = bound
        .spec
        .and_then(|s| s.volume_name)
        .ok_or("a Bound claim without a volume")?;
    let volume = Api::<PersistentVolume>::all(client.clone())
        .get(&pv)
        .await?;
    let csi = volume
        .spec
        .and_then(|s| s.csi)
        .ok_or_else(|| format!("PV {pv} is not a CSI volume"))?;
    assert_eq!(csi.driver, CSI_DRIVER, "PV {pv}'s driver");
    Ok((pv, csi.volume_handle))
}

/// The claim's `status.capacity.storage`.
fn capacity(claim: &PersistentVolumeClaim) -> Option<String> {
    Some(
        claim
            .status
            .as_ref()?
            .capacity
            .as_ref()?
            .get("storage")?
            .0
            .clone(),
    )
}

/// The holder's (container ID, restart count).
async fn container_of(pods: &Api<Pod>) -> Result<(String, i32)> {
    let pod = pods.get(POD).await?;
    let status = pod
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|s| s.into_iter().next())
        .ok_or("the holder pod has no container status")?;
    Ok((
        status.container_id.unwrap_or_default(),
        status.restart_count,
    ))
}

/// `df` shows a filesystem no larger than the device and at least
/// [`min_fs_size`] of it.
fn assert_fits(size: FsSize, requested: u64, what: &str) {
    assert!(
        size.total <= requested && size.total >= min_fs_size(requested),
        "{what}: df shows {} bytes for a request of {requested} (want between {} and {requested})",
        size.total,
        min_fs_size(requested)
    );
}

async fn wait_gone<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while api.get_opt(name).await?.is_some() {
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("{name} still exists after 120 s").into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}
