//! What the controller is asked to do, in order. Each action names its target
//! explicitly, so applying one never needs to look anything up again.

use crate::api::status::InstanceRole;
use crate::contract::Credential;

/// One step for the controller to apply. A plan lists them in the order they
/// must be applied: the controller stops at the first that fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the Secrets that are missing (with new passwords) and re-apply
    /// the labels and owner of those that drifted; never their data.
    EnsureSecrets,
    /// Push the password in `credential`'s Secret to `instances` (the primary
    /// first: it sets the role), then mark the Secret as pushed.
    SyncPassword {
        credential: Credential,
        instances: Vec<String>,
    },
    /// Apply the rw, ro and r Services.
    EnsureServices,
    /// Server-side apply these Services of `spec.expose` (by name), as the
    /// builder makes them: created, or patched in place.
    ApplyExposure { services: Vec<String> },
    /// Delete a Service of `spec.expose` (never anything else).
    DeleteExposure {
        name: String,
        reason: ExposureRemoval,
    },
    /// Apply the primary Lease (empty: its spec is the managers') and the
    /// ServiceAccount, Role and RoleBinding the managers hold it with.
    EnsureLeaseAccess,
    /// Tell instance `name` who the members are and where (`POST /members`).
    SetMembers {
        name: String,
        members: Vec<crate::contract::Member>,
    },
    /// Promote replica `name` in place of `from` (it takes the lease first),
    /// with `synchronous_standby_names = ANY <min> (<standbys>)` from its
    /// first write on.
    Promote {
        name: String,
        from: String,
        standbys: Vec<String>,
        min: i32,
    },
    /// A switchover: `from` stops cleanly once `to` has all its WAL and hands
    /// it the lease; then `to` is promoted as in [`Action::Promote`].
    Switchover {
        from: String,
        to: String,
        standbys: Vec<String>,
        min: i32,
    },
    /// Apply the PodDisruptionBudgets (their budgets follow the instance count).
    EnsurePodDisruptionBudgets,
    /// Delete a PodDisruptionBudget the instance count no longer calls for.
    DeletePodDisruptionBudget { name: String },
    /// Create the PVC of instance `serial`.
    CreatePvc { serial: u32 },
    /// Create the Pod of instance `serial` on its PVC. An existing data directory
    /// is always kept by the instance manager, so `bootstrap` only matters for an
    /// empty volume.
    CreatePod {
        serial: u32,
        bootstrap: Bootstrap,
        role: InstanceRole,
        /// The PostgreSQL image: the spec's, or the one the instances run
        /// while a change of image cannot be rolled out.
        image: String,
    },
    /// Delete a Pod (never its PVC).
    DeletePod { name: String, reason: DeleteReason },
    /// Replace instance `name`'s outdated pod (a rolling update step): evicted,
    /// so that PodDisruptionBudgets are respected, or deleted when it is the
    /// only instance (nothing to keep available, and the primary's budget
    /// would refuse). A later pass recreates it on its PVC. `updated` of
    /// `total` instances ran the current pod spec before this one.
    RollPod {
        name: String,
        evict: bool,
        updated: usize,
        total: usize,
    },
    /// Expand instance `instance`'s `volume` (its PVC `pvc`) from `from` to
    /// `to` bytes: the PVC's request is raised, and the storage driver and
    /// kubelet grow the volume and its filesystem online.
    GrowVolume {
        instance: String,
        volume: crate::contract::VolumeKind,
        pvc: String,
        from: u64,
        to: u64,
        reason: GrowReason,
    },
    /// Delete a PVC, and with it the instance's data.
    DeletePvc { name: String },
    /// Set the pod's `tusk.dev/role` label, which the Services select on.
    LabelRole { name: String, role: InstanceRole },
    /// Set `synchronous_standby_names = 'ANY <min> (<standbys>)'` on `primary`;
    /// an empty list turns synchronous replication off.
    ConfigureSync {
        primary: String,
        standbys: Vec<String>,
        min: i32,
    },
    /// Send the spec's parameters to the instance manager (`POST /reload`), which
    /// writes them and reloads PostgreSQL.
    Reload { name: String },
    /// Restart PostgreSQL in the instance so a `postmaster` parameter takes effect.
    RestartInstance { name: String },
    /// Give instance `name`'s container the spec's CPU in place (the pod's
    /// `resize` subresource), without a restart; a refusal is recorded on
    /// the pod, and the pod then rolls.
    ResizeCpu {
        name: String,
        request: String,
        limit: Option<String>,
    },
    /// Create Job `job` of the major upgrade `from` → `to` of `instance`'s
    /// data directory (creating it again finds it).
    RunUpgradeJob {
        job: UpgradeJob,
        from: u32,
        to: u32,
        instance: String,
        /// The node the instance's volume is used on.
        node: Option<String>,
        from_image: String,
        to_image: String,
    },
    /// Delete Job `name` (one of Tusk's own; never data).
    DeleteJob { name: String },
    /// Create Backup `name` of this Database (creating it again finds it).
    TakeBackup {
        name: String,
        purpose: BackupPurpose,
    },
    /// Run a retention pass with `window_seconds` on `primary`'s manager,
    /// then delete the scheduled Backups whose data it removed. The pass is
    /// remembered with `last_backup` (the newest completed backup now): a
    /// newer one makes the next pass due.
    RunRetention {
        primary: String,
        window_seconds: u64,
        last_backup: Option<String>,
    },
    /// Create the Job that runs `spec.migrations` at `version` (creating it
    /// again finds it).
    RunMigration { version: String },
    /// Write `status.targetPrimary = name` before the promotion that follows:
    /// a promotion takes seconds, and `targetPrimary` is how a reader sees it
    /// under way.
    RecordTargetPrimary { name: String },
    /// Drop, on `primary`, the physical replication slot of an instance that no
    /// longer exists, so the primary stops keeping WAL for it.
    DropSlot { primary: String, slot: String },
    /// Put the labels and annotations of `spec.inheritedMetadata` back on
    /// these instance Pods and PVCs, in place (metadata only: no pod is
    /// recreated, and no key Tusk sets itself is touched).
    RestoreInheritedMetadata {
        pods: Vec<String>,
        pvcs: Vec<String>,
    },
    /// A step of the TLS lifecycle (`lifecycle::tls`): a CA, the operator's
    /// identity, an instance's TLS Secret, a CA promotion.
    Tls(super::tls::TlsAction),
    /// Server-side apply `<db>-app-external` as built from this pass's
    /// published endpoints and the `<db>-app` credentials.
    ApplyExternalSecret,
    /// Delete `<db>-app-external`: nothing is published any more.
    DeleteExternalSecret,
}

/// Why a volume grows; goes into the Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrowReason {
    /// `spec.storage.size` is larger than the PVC.
    Spec,
    /// `spec.storage.autoGrow`: the filesystem was `used_percent` full.
    AutoGrow { used_percent: u8 },
}

/// Why a Backup is created: what it is owned by and marked with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupPurpose {
    /// The run of `spec.backup.schedule` at `at`; owned by the Database.
    Scheduled { at: jiff::Timestamp },
    /// Before (or after) a major upgrade; owned by the Database.
    Upgrade,
    /// The last backup of a Database being deleted; owned by nothing, so
    /// the record outlives the Database.
    Final,
}

pub use crate::contract::Bootstrap;
pub use crate::contract::UpgradeJob;

/// Why a Service of `spec.expose` is deleted; goes into the Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExposureRemoval {
    /// Its entry is no longer in `spec.expose`.
    Unlisted,
    /// Its entry's `loadBalancerClass` changed, which Kubernetes does not
    /// allow in place: the next pass creates it again.
    ClassChanged,
}

/// Why a pod is deleted; goes into the Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// `spec.instances` went down.
    ScaleDown,
    /// A major upgrade stops every instance before it upgrades the data.
    MajorUpgrade,
    /// The pod failed and will not restart by itself; it is recreated on the
    /// same PVC.
    PodFailed,
}

impl DeleteReason {
    /// PascalCase, for Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ScaleDown => "ScaleDown",
            Self::MajorUpgrade => "MajorUpgrade",
            Self::PodFailed => "PodFailed",
        }
    }
}

impl Action {
    /// The instance an action touches, if any, by name (`serial` resolved
    /// through `name_of`).
    pub fn target(&self, name_of: impl Fn(u32) -> String) -> Option<String> {
        match self {
            Self::EnsureSecrets
            | Self::SyncPassword { .. }
            | Self::EnsureServices
            | Self::ApplyExposure { .. }
            | Self::DeleteExposure { .. }
            | Self::EnsureLeaseAccess
            | Self::EnsurePodDisruptionBudgets
            | Self::DeletePodDisruptionBudget { .. }
            | Self::ConfigureSync { .. }
            | Self::TakeBackup { .. }
            | Self::RunMigration { .. }
            | Self::RecordTargetPrimary { .. }
            | Self::DeleteJob { .. }
            | Self::DropSlot { .. }
            | Self::RestoreInheritedMetadata { .. }
            | Self::ApplyExternalSecret
            | Self::DeleteExternalSecret => None,
            Self::Tls(action) => action.instance().map(str::to_owned),
            Self::RunUpgradeJob { instance, .. } => Some(instance.clone()),
            Self::RunRetention { primary, .. } => Some(primary.clone()),
            Self::CreatePvc { serial } | Self::CreatePod { serial, .. } => Some(name_of(*serial)),
            Self::Switchover { from: name, .. }
            | Self::SetMembers { name, .. }
            | Self::Promote { name, .. }
            | Self::DeletePod { name, .. }
            | Self::RollPod { name, .. }
            | Self::DeletePvc { name }
            | Self::LabelRole { name, .. }
            | Self::Reload { name }
            | Self::ResizeCpu { name, .. }
            | Self::RestartInstance { name }
            | Self::GrowVolume { instance: name, .. } => Some(name.clone()),
        }
    }

    /// The instance this action makes primary.
    pub fn new_primary(&self) -> Option<&str> {
        match self {
            Self::Promote { name, .. } => Some(name),
            Self::Switchover { to, .. } => Some(to),
            _ => None,
        }
    }

    /// Deletes, restarts or relabels an existing instance: what must never
    /// happen to an instance in state Unknown.
    pub fn acts_on_existing(&self) -> bool {
        matches!(
            self,
            Self::DeletePod { .. }
                | Self::RollPod { .. }
                | Self::DeletePvc { .. }
                | Self::LabelRole { .. }
                | Self::Reload { .. }
                | Self::RestartInstance { .. }
                | Self::Promote { .. }
                | Self::Switchover { .. }
        )
    }
}
