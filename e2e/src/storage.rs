//! Volumes that grow: the local cluster's expandable StorageClass and what a
//! test needs to watch a volume fill and grow from inside a pod.
//!
//! `e2e/cluster up` runs the CSI driver `csi-loop` (`e2e/csi-loop`) with the
//! upstream external-provisioner and external-resizer, and creates
//! [`EXPANDABLE_CLASS`] (`allowVolumeExpansion: true`, WaitForFirstConsumer;
//! local-path's `standard` stays the default class). Each volume is an XFS
//! filesystem on a loop device over a file of exactly the requested size
//! under `$TUSK_CLUSTER_DIR/csi-loop/volumes/<volumeHandle>.img`: it fills
//! up (ENOSPC) and a larger PVC request grows it online, without restarting
//! the pod. The filesystem a pod sees is a little smaller than the request
//! (XFS's log and metadata): [`min_fs_size`] says how much at least.
//!
//! A test that needs the class fails where it is missing, unless
//! `TUSK_E2E_ALLOW_SKIP=csi-loop` lets it skip ([`expandable_class`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::Api;

use crate::faults::exec;
use crate::{Result, skip};

/// The StorageClass whose volumes grow online (driver [`CSI_DRIVER`]).
pub const EXPANDABLE_CLASS: &str = "tusk-expandable";

/// The CSI driver behind [`EXPANDABLE_CLASS`].
pub const CSI_DRIVER: &str = "csi-loop.tusk.dev";

/// The group of tests that need [`EXPANDABLE_CLASS`]; `TUSK_E2E_ALLOW_SKIP=csi-loop`
/// lets them skip on a cluster without it.
pub const CSI_LOOP: &str = "csi-loop";

/// Checks that [`EXPANDABLE_CLASS`] exists and allows expansion. `Ok(false)`:
/// it does not and skipping is allowed (the skip is printed); the caller
/// returns. An error otherwise, saying why `test` cannot run.
pub async fn expandable_class(client: &Client, test: &str) -> Result<bool> {
    let classes: Api<StorageClass> = Api::all(client.clone());
    let why = match classes.get_opt(EXPANDABLE_CLASS).await? {
        Some(class) if class.allow_volume_expansion == Some(true) => return Ok(true),
        Some(class) => format!(
            "StorageClass {EXPANDABLE_CLASS} (provisioner {}) does not allow volume expansion",
            class.provisioner
        ),
        None => format!(
            "the cluster has no StorageClass {EXPANDABLE_CLASS} (the local cluster's \
             `e2e/cluster up` makes it, with the CSI driver {CSI_DRIVER})"
        ),
    };
    skip::cannot_run(CSI_LOOP, test, &why)?;
    Ok(false)
}

/// The smallest filesystem a volume of `requested` bytes of
/// [`EXPANDABLE_CLASS`] shows (`df` size), for volumes of 128 MiB and more:
/// 92 % of the request. XFS keeps a log of 1/64 of the volume (8 to 64 MiB)
/// and some metadata out of it: 256 MiB show as 248 MiB, 512 MiB as 504 MiB.
/// The filesystem is never larger than the request.
pub fn min_fs_size(requested: u64) -> u64 {
    requested / 100 * 92
}

/// A filesystem's size as `df` reports it, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsSize {
    /// Size of the filesystem (without what XFS keeps for itself).
    pub total: u64,
    /// Free for an unprivileged writer.
    pub available: u64,
}

/// The filesystem holding `path` in `container` of `pod`, seen from inside
/// (`df -P -k`, so busybox and coreutils agree).
pub async fn fs_size(
    client: &Client,
    ns: &str,
    pod: &str,
    container: &str,
    path: &str,
) -> Result<FsSize> {
    let out = exec(client, ns, pod, container, &["df", "-P", "-k", path]).await?;
    if !out.success {
        return Err(format!("df {path} in {ns}/{pod}: {}", out.stderr.trim()).into());
    }
    parse_df(&out.stdout)
        .ok_or_else(|| format!("df {path} in {ns}/{pod} printed {:?}", out.stdout).into())
}

/// Total and available bytes from `df -P -k` output (header, then one line).
fn parse_df(out: &str) -> Option<FsSize> {
    let fields: Vec<&str> = out.lines().nth(1)?.split_whitespace().collect();
    let kib = |i: usize| fields.get(i)?.parse::<u64>().ok().map(|k| k * 1024);
    Some(FsSize {
        total: kib(1)?,
        available: kib(3)?,
    })
}

/// Polls [`fs_size`] until the filesystem is at least `bytes` large; fails
/// after `timeout` with the last size seen. An online grow shows in the pod
/// once the kubelet has run the node side of the expansion.
pub async fn wait_fs_size(
    client: &Client,
    ns: &str,
    pod: &str,
    container: &str,
    path: &str,
    bytes: u64,
    timeout: Duration,
) -> Result<FsSize> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match fs_size(client, ns, pod, container, path).await {
            Ok(size) if size.total >= bytes => return Ok(size),
            Ok(size) => format!("{size:?}"),
            Err(e) => format!("error: {e}"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the filesystem at {path} in {ns}/{pod} did not reach {bytes} bytes within \
                 {timeout:?}; last seen: {last}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Where the local cluster's `csi-loop` keeps its volume files (on this
/// machine: meaningful only against the local cluster).
pub fn volumes_dir() -> PathBuf {
    let state = std::env::var_os("TUSK_CLUSTER_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap_or_default())
                .join(".local/state/tusk/cluster")
        });
    state.join("csi-loop/volumes")
}

/// The file of the volume with CSI handle `handle` (a PV's
/// `spec.csi.volumeHandle`).
pub fn volume_file(handle: &str) -> PathBuf {
    volumes_dir().join(format!("{handle}.img"))
}

/// The loop devices attached to `file` (from sysfs, which names a file
/// deleted since as `<path> (deleted)`).
pub fn loop_devices_of(file: &Path) -> Result<Vec<String>> {
    let mut devices = Vec::new();
    for entry in std::fs::read_dir("/sys/block")? {
        let entry = entry?;
        let backing = entry.path().join("loop/backing_file");
        let Ok(text) = std::fs::read_to_string(&backing) else {
            continue; // not a loop device, or not attached
        };
        let text = text.trim();
        if Path::new(text.trim_end_matches(" (deleted)")) == file {
            devices.push(format!("/dev/{}", entry.file_name().to_string_lossy()));
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn df_output_is_read_in_bytes() {
        let busybox = "Filesystem           1024-blocks    Used Available Capacity Mounted on\n\
                       /dev/loop3              245760      3264    242496   1% /data\n";
        assert_eq!(
            parse_df(busybox),
            Some(FsSize {
                total: 245_760 * 1024,
                available: 242_496 * 1024
            })
        );
        assert_eq!(parse_df("Filesystem 1024-blocks\n"), None);
        assert_eq!(parse_df(""), None);
    }

    #[test]
    fn the_smallest_filesystem_is_most_of_the_request() {
        assert_eq!(min_fs_size(100), 92);
        assert!(min_fs_size(256 << 20) < 256 << 20);
    }
}
