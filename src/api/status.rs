//! Status types, shared by every served version: status is written only by Tusk,
//! so it has one shape and converts as the identity.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::{Deserialize, Serialize};

/// Observed state of a Database, written by Tusk.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DatabasePhase>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Standard conditions: Ready, Progressing, Degraded, BackupHealthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// The instance that currently runs as primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary: Option<String>,

    /// The instance Tusk wants as primary; differs from `currentPrimary` during a
    /// switchover or failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_primary: Option<String>,

    /// Number of instances that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_instances: Option<i32>,

    /// Per-instance state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,

    /// The most recent completed backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<LastBackup>,

    /// The most recent automatic failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<LastFailover>,

    /// The major upgrade under way, or the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,

    /// What is observed to be running (version, volume size, image), once a
    /// primary has answered; a later spec may not go below it, even if it
    /// reached the API server while the webhook was down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<AppliedSpec>,

    /// The schema migrations (`spec.migrations`) run so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrations: Option<MigrationsStatus>,

    /// The instances' QoS class and the memory settings derived from
    /// `spec.resources`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<super::resources::ResourcesStatus>,

    /// The certificates in effect: their source, the CA rotation stage,
    /// expiry, and per instance the certificate presented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<super::tls::TlsStatus>,

    /// The published endpoints of `spec.expose`: addresses and ports
    /// Kubernetes assigned and whether Tusk reached PostgreSQL through each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<super::expose::EndpointStatus>,

    /// What happened to this Database, oldest first: failovers, switchovers,
    /// backups, upgrades and restarts with the figures the operator measured
    /// (the last [`HISTORY_LENGTH`] entries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
}

/// How many entries `status.history` keeps.
pub const HISTORY_LENGTH: usize = 20;

/// One thing that happened to a Database, as the operator saw it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub kind: HistoryKind,
    /// When it was over (or, for one that failed, when it was given up).
    pub time: Time,
    /// The primary before (failover, switchover), the version before
    /// (upgrade).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The primary after, the version after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The object it concerns (a Backup's name), or a restart's
    /// `tusk.dev/restartedAt` value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How long it took; for a failover or switchover, how long no primary
    /// accepted writes as the operator measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_milliseconds: Option<i64>,
    /// A failover's WAL gap (see `lastFailover.walGapBytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_gap_bytes: Option<i64>,
    /// A backup's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<i64>,
    /// Whether it succeeded.
    pub succeeded: bool,
    /// What else a person should know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a history entry records.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryKind {
    Failover,
    Switchover,
    Backup,
    Upgrade,
    Restart,
}

/// The schema migrations run so far.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigrationsStatus {
    /// The last `spec.migrations.version` whose Job succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    /// The version whose Job is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// The version whose Job failed; cleared when a later one succeeds. Tusk
    /// does not run it again: change `spec.migrations.version` to retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Why the failed Job failed: the last lines its container logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A major upgrade: `pg_upgrade --check` in a Job while the old major
/// serves, a base backup, the instances stopped, `pg_upgrade --link` in a Job
/// on the primary's volume, and the new major started on it; undone (the old
/// data directory put back) when it fails before the new server answered.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// The major upgraded from.
    pub from: u32,
    /// The major upgraded to.
    pub to: u32,
    /// The image the instances ran before.
    pub from_image: String,
    /// The image they run after.
    pub to_image: String,
    /// The instance whose data directory is upgraded (the primary).
    pub instance: String,
    /// The node its volume is used on: the Jobs run there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Where it is.
    pub step: UpgradeStep,
    /// What happened last, in words (a failed check quotes pg_upgrade).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The steps of a major upgrade.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpgradeStep {
    /// `pg_upgrade --check` runs in a Job while the old major serves.
    Checking,
    /// The check failed; nothing was changed.
    CheckFailed,
    /// A base backup is taken before anything stops.
    BackingUp,
    /// The instances are being stopped.
    Stopping,
    /// `pg_upgrade --link` runs in a Job on the primary's volume.
    Upgrading,
    /// The new major starts on the upgraded data directory.
    Starting,
    /// The new major answered: the old data directory is gone.
    Done,
    /// The old data directory is being put back.
    RollingBack,
    /// The old major runs again on its own data directory.
    RolledBack,
}

/// An automatic failover, as the operator measured it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastFailover {
    /// The primary that was replaced.
    pub from: String,
    /// The instance promoted in its place.
    pub to: String,
    /// When the promoted instance accepted writes.
    pub time: Time,
    /// From the first reconciliation that found the primary not serving to
    /// the promoted instance accepting writes; absent when the operator
    /// restarted during the failover and did not see it begin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_milliseconds: Option<i64>,
    /// WAL the old primary last reported beyond what the promoted instance had
    /// received: an upper bound of the writes lost (acknowledged or not) when
    /// replication is asynchronous; with `sync`, only unacknowledged ones.
    /// Absent when the operator had not heard the old primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_gap_bytes: Option<i64>,
}

/// What is observed to be in effect: the floor a later spec may not go below.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppliedSpec {
    /// The PostgreSQL version the primary runs (`major.minor`).
    pub version: String,
    /// The smallest volume size requested among the instances' PVCs.
    pub storage_size: String,
    /// The image the primary's `postgres` container runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// Lifecycle phase of a Database.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DatabasePhase {
    /// Accepted, nothing created yet.
    Pending,
    /// Creating volumes, secrets and services.
    Provisioning,
    /// The first instance is being initialised (initdb or restore).
    InitializingPrimary,
    /// Replicas are cloning from the primary.
    CreatingReplicas,
    /// Every instance is ready.
    Ready,
    /// Instances are being added or removed.
    Scaling,
    /// A minor or major version change is under way.
    Upgrading,
    /// The primary role is moving on request.
    SwitchingOver,
    /// The primary failed and a replica is being promoted.
    FailingOver,
    /// Restoring from a backup.
    Restoring,
    /// Serving, but something needs attention (see the Degraded condition).
    Degraded,
    /// Serving; a change of parameters, synchronous replication, role labels
    /// or routing is being applied.
    Configuring,
    /// The spec asks for something Tusk cannot carry out (the Ready condition
    /// names the field), or an instance refuses; nothing changes for it until
    /// a human does.
    Blocked,
    /// The finalizer runs (final backup, then release).
    Deleting,
    /// Tusk needs a human: the Ready condition says why.
    Failed,
}

impl DatabasePhase {
    pub const ALL: [DatabasePhase; 15] = [
        Self::Pending,
        Self::Provisioning,
        Self::InitializingPrimary,
        Self::CreatingReplicas,
        Self::Ready,
        Self::Scaling,
        Self::Upgrading,
        Self::SwitchingOver,
        Self::FailingOver,
        Self::Restoring,
        Self::Degraded,
        Self::Configuring,
        Self::Blocked,
        Self::Deleting,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Provisioning => "Provisioning",
            Self::InitializingPrimary => "InitializingPrimary",
            Self::CreatingReplicas => "CreatingReplicas",
            Self::Ready => "Ready",
            Self::Scaling => "Scaling",
            Self::Upgrading => "Upgrading",
            Self::SwitchingOver => "SwitchingOver",
            Self::FailingOver => "FailingOver",
            Self::Restoring => "Restoring",
            Self::Degraded => "Degraded",
            Self::Configuring => "Configuring",
            Self::Blocked => "Blocked",
            Self::Deleting => "Deleting",
            Self::Failed => "Failed",
        }
    }
}

/// One PostgreSQL instance as last observed.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// Instance (Pod) name.
    pub name: String,
    /// Role of the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<InstanceRole>,
    /// Whether the instance is ready to serve.
    #[serde(default)]
    pub ready: bool,
    /// Last WAL location written (primary) or replayed (replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lsn: Option<String>,
    /// How far behind the primary this replica is, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<i64>,
    /// The image its `postgres` container runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The PostgreSQL version it runs (`major.minor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Which cluster its data is (`pg_control_system().system_identifier`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_identifier: Option<String>,
    /// Its WAL timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// The node its pod runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Its pod's QoS class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<String>,
    /// How far behind the primary this replica's replay is, in time (the
    /// primary's `replay_lag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_milliseconds: Option<i64>,
    /// Its volumes: what each PVC asks for and has, and the filesystem the
    /// instance sees on it (a grow is done when that is larger).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeStatus>,
}

/// One volume of an instance, and how far a resize of it has come.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStatus {
    /// `data` (or `wal`, a separate WAL volume).
    pub volume: String,
    /// The PersistentVolumeClaim.
    pub pvc: String,
    /// The size the PVC asks for (`spec.resources.requests.storage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
    /// The size the PVC reports (`status.capacity.storage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// A resize under way, or one that failed, as the PVC's conditions say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resizing: Option<String>,
    /// The size of the filesystem as the instance sees it, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem_bytes: Option<i64>,
    /// What PostgreSQL can still write on it, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<i64>,
    /// Percent of the filesystem in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_percent: Option<i32>,
}

/// Role of an instance: one type with the instance API's.
pub use crate::contract::Role as InstanceRole;

/// The most recent completed backup.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    /// Name of the Backup object.
    pub name: String,
    /// When it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
}

/// Observed state of a Backup, written by Tusk.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// Backup phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// When the backup started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the backup completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// WAL location where the backup starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_lsn: Option<String>,
    /// WAL location where the backup ends (restorable from here on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_lsn: Option<String>,
    /// Bytes stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<i64>,
    /// Progress while running, for example `42%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Where the backup is stored (`s3://bucket/path/...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The instance (pod) taking or that took the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The PostgreSQL image that instance ran: one that can restore the
    /// backup, also once the Database has moved to another major.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Whether a throwaway restore proved the backup (`spec.backup.verify`);
    /// absent until one has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
    /// When the verification finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<Time>,
    /// How long the verification took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_seconds: Option<i64>,
}

/// Phase of a Backup.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupPhase {
    /// Accepted, not started.
    Pending,
    /// Streaming to object storage.
    Running,
    /// Stored and restorable.
    Completed,
    /// Did not complete: the Ready condition says why.
    Failed,
}

impl BackupPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
        }
    }
}
