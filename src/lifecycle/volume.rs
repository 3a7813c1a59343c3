//! One volume of an instance as observed: its PVC's request, capacity and
//! resize conditions, its StorageClass, and the filesystem the instance's
//! manager measured on it. What `growth` decides on and `primary` asks
//! (a full replica is not promoted).

use crate::contract::{VolumeKind, VolumeUsage};

/// A filesystem this much smaller than its PVC's capacity has not been
/// grown on the node yet (a filesystem's own overhead is a few percent).
const FILESYSTEM_LAG_PERCENT: u64 = 10;

/// One volume of an instance, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Volume {
    pub kind: Kind,
    /// The PVC's name.
    pub pvc: String,
    /// `spec.resources.requests.storage`, in bytes.
    pub requested: u64,
    /// `status.capacity.storage`, in bytes; `None` while unbound.
    pub capacity: Option<u64>,
    /// A resize the PVC reports under way (`Resizing`,
    /// `FileSystemResizePending`, or an allocated-resource status), or that
    /// failed: its words.
    pub resizing: Option<String>,
    /// The StorageClass (`None`: the PVC names none).
    pub class: Option<String>,
    /// The StorageClass exists and has `allowVolumeExpansion: true`.
    pub expandable: bool,
    /// Why the StorageClass could not be read, when it could not.
    pub class_unreadable: Option<String>,
    /// The filesystem as the instance's manager measured it.
    pub usage: Option<VolumeUsage>,
}

/// [`VolumeKind`] with a default, for [`Volume`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kind(pub VolumeKind);

impl Default for Kind {
    fn default() -> Self {
        Kind(VolumeKind::Data)
    }
}

impl Volume {
    /// A resize has been asked for and has not reached the filesystem yet.
    pub fn resize_pending(&self) -> bool {
        let capacity_short = self.capacity.is_some_and(|c| c < self.requested);
        let filesystem_short = match (self.capacity, self.usage) {
            (Some(capacity), Some(usage)) => {
                usage
                    .total_bytes
                    .saturating_add(capacity / 100 * FILESYSTEM_LAG_PERCENT)
                    < capacity
            }
            _ => false,
        };
        self.resizing.is_some() || capacity_short || filesystem_short
    }

    pub fn full(&self) -> bool {
        self.usage.is_some_and(|u| u.full())
    }
}
