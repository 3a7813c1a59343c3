//! The one contract between the operator and `tusk instance`: the HTTP paths
//! of the instance API, its request and response bodies, the pod environment
//! the pod builder sets and the manager reads, and the vocabulary both sides
//! share ([`Role`], [`Lsn`], [`Bootstrap`], [`Change`], [`UpgradeJob`]).
//!
//! A leaf: it depends on nothing else in the crate, so the operator, the
//! in-pod manager and the pure planners can all use it without depending on
//! each other. A change to a body that an older peer would misread bumps
//! [`API_VERSION`]; the operator refuses to drive a manager that speaks
//! another version and says so in a condition.

pub mod drill;
pub mod env;
mod lsn;
pub mod tls;
mod upgrade;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use lsn::{Lsn, ParseLsnError};
pub use upgrade::UpgradeJob;

/// The version of the instance API this build speaks; reported on `/status`.
/// 1 was the unversioned API (no `apiVersion` field); 2 adds it, numeric
/// timelines and WAL positions, and `POST /roles/password`.
pub const API_VERSION: u32 = 2;

/// The pod label the Services select the primary and the replicas by; its
/// values are [`Role::as_str`]. The operator moves it, and a manager labels
/// its own pod on a promotion or hand-over when its Role allows.
pub const ROLE_LABEL: &str = "tusk.dev/role";

/// The instance manager's HTTP port (container port `tusk`): probes, API, metrics.
pub const PORT: u16 = 8000;

/// The paths of the instance API. Reads are open; every `POST` needs the
/// bearer token.
pub mod path {
    pub const HEALTHZ: &str = "/healthz";
    pub const READYZ: &str = "/readyz";
    pub const METRICS: &str = "/metrics";
    /// `GET`: [`super::Status`].
    pub const STATUS: &str = "/status";
    /// `POST` [`super::ReloadRequest`] → [`super::ReloadResponse`].
    pub const RELOAD: &str = "/reload";
    /// `POST` (no body) → [`super::Status`] once the instance accepts writes.
    pub const PROMOTE: &str = "/promote";
    /// `POST` [`super::SyncSettings`] → [`super::SyncResponse`].
    pub const SYNC: &str = "/sync";
    /// `POST` (no body) → [`super::RestartResponse`].
    pub const RESTART: &str = "/restart";
    /// `POST` [`super::DropSlotRequest`] → [`super::DropSlotResponse`].
    pub const DROP_SLOT: &str = "/slots/drop";
    /// `POST` [`super::PasswordRequest`] → [`super::PasswordResponse`].
    pub const PASSWORD: &str = "/roles/password";
    /// `POST` [`super::BackupRequest`] → [`super::BackupState`] (starts one,
    /// or answers for the one of that name); `GET` → [`super::Backups`].
    pub const BACKUPS: &str = "/backups";
    /// `POST` (no body), on a primary → [`super::WalSwitchResponse`].
    pub const WAL_SWITCH: &str = "/wal/switch";
    /// `POST` [`super::RetentionRequest`] → [`super::RetentionReport`]: prune
    /// the object store by the recovery window.
    pub const RETENTION: &str = "/retention";
    /// `GET` → [`super::RestoreProgress`] while (or after) a restore bootstrap
    /// runs; 404 for any other bootstrap.
    pub const RESTORE: &str = "/restore";
    /// `GET` (bearer, header [`super::PEER_HEADER`] naming the caller) →
    /// [`super::PeerStatus`]: the instances' heartbeat to each other. Cheap:
    /// it never waits for PostgreSQL.
    pub const PEER: &str = "/peer";
    /// `POST` [`super::Members`] → [`super::Members`]: the Database's instances
    /// and their addresses, pushed by the operator when they change.
    pub const MEMBERS: &str = "/members";
    /// `POST` [`super::SwitchoverRequest`], on the primary →
    /// [`super::SwitchoverResponse`] once it has shut down cleanly, the target
    /// holds all its WAL and the lease is the target's.
    pub const SWITCHOVER: &str = "/switchover";
    /// `GET` → [`super::Volumes`]: how full the instance's volumes are, as
    /// its filesystem says (`statvfs`). Never waits for PostgreSQL, so it
    /// answers when a full disk has stopped it.
    pub const VOLUMES: &str = "/volumes";
}

/// The serial of `instance` if it is an instance name of database `db`.
///
/// Only canonical names match (`orders-7`, not `orders-07` or `orders-0`), so a
/// serial parsed here always rebuilds the same name; and because the rest after
/// `<db>-` must be all digits, database `orders` does not claim the instances of
/// a database named `orders-1` (`orders-1-2`). Here because both sides name
/// instances: the operator builds them, a manager checks a peer's certificate.
pub fn serial_of(db: &str, instance: &str) -> Option<u32> {
    let digits = instance.strip_prefix(db)?.strip_prefix('-')?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The header a peer call names its caller in (an instance name).
pub const PEER_HEADER: &str = "x-tusk-peer";

/// Which role an instance plays. The same type is the API's `InstanceRole`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Accepts writes.
    Primary,
    /// Streams from the primary.
    Replica,
}

impl Role {
    /// The lower-case name: the `tusk.dev/role` label value and the wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Replica => "replica",
        }
    }

    /// The role named `value` (a label value), if it names one.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "primary" => Some(Self::Primary),
            "replica" => Some(Self::Replica),
            _ => None,
        }
    }
}

/// How an empty data directory gets its data; the operator decides, the pod
/// carries it as an annotation read into `TUSK_BOOTSTRAP`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bootstrap {
    /// `initdb`: a new cluster; only for the first primary (or the primary's
    /// own volume, where the existing data is kept).
    Initdb,
    /// `pg_basebackup` from the primary, then follow it.
    Clone,
    /// A base backup from the object store, WAL replayed to the target, then
    /// promoted; only for the first primary of a Database restored from a
    /// backup (the `TUSK_RESTORE_*` variables say from where).
    Restore,
}

impl Bootstrap {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initdb => "initdb",
            Self::Clone => "clone",
            Self::Restore => "restore",
        }
    }
}

/// Where a restore bootstrap stands (`GET /restore`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RestoreProgress {
    pub stage: RestoreStage,
    /// The source, as `s3://bucket/path/<database>/<system>`, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The base backup chosen (its id, `YYYYMMDDTHHMMSSZ`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// Where recovery stops, for people: `end of the archive`, `time …`, `LSN …`.
    #[serde(default)]
    pub target: String,
    /// The timeline recovery follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// Bytes of the stored backup downloaded so far, and in all.
    #[serde(default)]
    pub downloaded_bytes: u64,
    #[serde(default)]
    pub total_bytes: u64,
    /// The last WAL location replayed, while replaying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_lsn: Option<Lsn>,
    /// Why the last attempt failed; the manager tries again after a pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Attempts so far, the current one included.
    #[serde(default)]
    pub attempts: u32,
}

/// The steps of a restore bootstrap, in order.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RestoreStage {
    /// Listing the store and choosing the backup.
    #[default]
    Choosing,
    /// Streaming the base backup into the data directory.
    Downloading,
    /// PostgreSQL replays WAL from the archive towards the target.
    Replaying,
    /// Promoted on a new timeline; the instance starts as primary.
    Done,
    /// The last attempt failed (see `error`); waiting to try again.
    Failed,
}

/// The outcome of one `tusk upgrade` step (`stage-old`, `check`, `run`,
/// `rollback`), the one-line JSON its container leaves as its termination
/// message for the operator. `message` quotes what pg_upgrade reported on a
/// failure, bounded so that the whole line fits a termination message.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct UpgradeOutcome {
    pub ok: bool,
    #[serde(default)]
    pub message: String,
}

/// The outcome of `tusk verify-backup`, the JSON its pod leaves as its
/// termination message for the operator.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Verification {
    pub verified: bool,
    /// The backup id restored.
    #[serde(default)]
    pub backup: String,
    /// Seconds from start to the last check.
    #[serde(default)]
    pub seconds: f64,
    /// Databases that answered a query, and B-tree indexes `amcheck` verified
    /// (0 where the extension is not available).
    #[serde(default)]
    pub databases: u32,
    #[serde(default)]
    pub indexes_checked: u32,
    /// What was proven, or why it failed.
    #[serde(default)]
    pub message: String,
}

/// What applying a new set of parameters takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// The parameters are the same.
    Nothing,
    /// `pg_reload_conf()` applies every change.
    Reload,
    /// At least one changed parameter needs the postmaster restarted.
    Restart,
}

/// `GET /status`: who this instance is and where its WAL stands. Field names
/// on the wire are snake_case, as in every body of the instance API.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// [`API_VERSION`] of the manager; absent (0) from managers older than 2.
    #[serde(default)]
    pub api_version: u32,
    pub instance: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(flatten)]
    pub postgres: PgStatus,
    /// What `/readyz` would answer: accepts connections and, on a primary, its
    /// roles and database are in place.
    #[serde(default)]
    pub ready: bool,
    /// `spec.postgresql.parameters` as currently rendered.
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// Synchronous replication as currently rendered; absent when asynchronous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncSettings>,
    /// The failover protocol as this manager sees it; absent when it runs
    /// without a lease (outside Kubernetes, or an older operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha: Option<HaStatus>,
    /// The TLS material in effect; absent when the manager runs without TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<tls::TlsReport>,
    /// Drill faults in effect on this instance ([`drill`]); absent when none
    /// is (and from managers older than drills).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<drill::ActiveFaults>,
}

/// Which of an instance's volumes a [`VolumeUsage`] is about.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum VolumeKind {
    /// The data volume (`PGDATA`'s filesystem).
    Data,
    /// A separate WAL volume (`pg_wal`), when the Database has one.
    Wal,
}

impl VolumeKind {
    /// As it reads in status and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeKind::Data => "data",
            VolumeKind::Wal => "wal",
        }
    }
}

/// One volume's filesystem as the instance sees it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeUsage {
    pub volume: VolumeKind,
    /// Size of the filesystem (`f_blocks × f_frsize`): grows once an
    /// expansion has reached the node.
    pub total_bytes: u64,
    /// What an unprivileged process such as PostgreSQL can still write
    /// (`f_bavail × f_frsize`).
    pub available_bytes: u64,
}

impl VolumeUsage {
    /// Below this much room, PostgreSQL cannot count on writing one more
    /// WAL segment (16 MiB) and a checkpoint: the volume is full.
    pub const FULL_BELOW_BYTES: u64 = 32 << 20;

    /// Percent of the filesystem in use (0 to 100), as `df` rounds it: up.
    pub fn used_percent(&self) -> u8 {
        if self.total_bytes == 0 {
            return 100;
        }
        let used = u128::from(self.total_bytes.saturating_sub(self.available_bytes));
        let percent = (used * 100).div_ceil(u128::from(self.total_bytes));
        u8::try_from(percent.min(100)).unwrap_or(100)
    }

    /// PostgreSQL has run, or is about to run, out of room on it.
    pub fn full(&self) -> bool {
        self.available_bytes < Self::FULL_BELOW_BYTES
    }
}

/// `GET /volumes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Volumes {
    pub volumes: Vec<VolumeUsage>,
}

/// What an instance manager knows of the primary lease and its peers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HaStatus {
    /// The lease's holder as last read; `None` when released or unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_holder: Option<String>,
    /// This instance holds the lease and renewed it recently.
    #[serde(default)]
    pub holds_lease: bool,
    /// This instance was primary and fenced itself: PostgreSQL is stopped
    /// until it renews the lease (or rejoins as a replica).
    #[serde(default)]
    pub fenced: bool,
    /// The members as the operator last pushed them.
    #[serde(default)]
    pub members: Vec<Member>,
    /// How long since each peer was last heard from.
    #[serde(default)]
    pub peers: Vec<PeerView>,
    /// A replica: the WAL end its primary last reported to its WAL receiver,
    /// kept after the primary went silent (what a failover may have lost is
    /// measured against it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_end: Option<PrimaryEnd>,
}

/// The WAL end `instance`, as primary, last reported to a replica
/// (`pg_stat_wal_receiver.latest_end_lsn`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PrimaryEnd {
    pub instance: String,
    pub lsn: Lsn,
}

/// One instance of the Database and where its manager listens.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    pub name: String,
    /// The pod IP.
    pub address: String,
    /// Its pod mounts a TLS Secret: its manager serves HTTPS and its
    /// PostgreSQL TLS, and its certificates name it. False for a pod built
    /// before TLS (an operator upgrade rolls it), so peers and standbys
    /// reach it the old way until then.
    #[serde(default)]
    pub tls: bool,
}

/// `POST /members`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Members {
    pub members: Vec<Member>,
}

/// A peer as one instance sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeerView {
    pub name: String,
    /// Milliseconds since the last call exchanged with it, either way
    /// (counted from this manager's start when none was).
    pub silent_ms: u64,
    /// Its last answer said it is a primary that fenced itself.
    #[serde(default)]
    pub fenced: bool,
    /// Its last answer said it runs as primary.
    #[serde(default)]
    pub primary: bool,
}

/// `GET /peer`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeerStatus {
    pub instance: String,
    /// Runs (or is to run) as primary: its data directory is not a standby's.
    pub primary: bool,
    pub fenced: bool,
}

/// `POST /switchover`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SwitchoverRequest {
    /// The replica to hand the primary role to.
    pub target: String,
}

/// `POST /switchover`'s answer: the old primary stopped at `final_lsn`, the
/// target has received it, and the lease names the target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SwitchoverResponse {
    pub target: String,
    pub final_lsn: Lsn,
}

/// `POST /promote` (a body is optional: an empty one promotes with the
/// synchronous settings the manager has).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PromoteRequest {
    /// Synchronous replication for the new primary, set before it accepts a
    /// write (the standbys it had as a replica are not the ones it has now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncSettings>,
}

/// What PostgreSQL itself says, part of [`Status`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PgStatus {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// The primary's current WAL insert position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_lsn: Option<Lsn>,
    /// A replica's last WAL position received and flushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_lsn: Option<Lsn>,
    /// A replica's last WAL position replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_lsn: Option<Lsn>,
    /// A replica: whether its WAL receiver is streaming from the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// `pg_control_system().system_identifier`: which cluster this data is.
    pub system_identifier: String,
    /// `server_version`, for people (`17.6 (Debian 17.6-1.pgdg12+1)`).
    pub version: String,
    /// `server_version_num`, for comparisons (`170006`).
    pub version_num: i32,
    /// A changed parameter waits for a restart.
    #[serde(default)]
    pub pending_restart: bool,
    /// A primary's physical replication slots that no walsender uses.
    #[serde(default)]
    pub inactive_slots: Vec<String>,
    /// A primary's WAL archiving, when `archive_mode` is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archiver: Option<Archiver>,
    /// A primary: how far behind in time each streaming standby's replay is
    /// (`pg_stat_replication.replay_lag`, 0 once it has replayed everything),
    /// in milliseconds by instance name. Absent from older managers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replay_lag_milliseconds: BTreeMap<String, i64>,
}

/// `pg_stat_archiver`, and what `tusk wal-archive` last said when it failed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Archiver {
    pub archived_count: i64,
    pub failed_count: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archived_wal: Option<String>,
    /// Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archived_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_wal: Option<String>,
    /// Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_at: Option<i64>,
    /// The error of the last `tusk wal-archive` that failed, until one succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl Archiver {
    /// The last attempt failed: a failure and no success since.
    pub fn failing(&self) -> bool {
        match (self.last_failed_at, self.last_archived_at) {
            (Some(failed), Some(archived)) => failed >= archived,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

impl PgStatus {
    /// The position that says how far this instance's WAL goes: a primary's
    /// insert position, a replica's received (else replayed) one.
    pub fn received(&self) -> Option<Lsn> {
        match self.role {
            Role::Primary => self.current_lsn,
            Role::Replica => self.received_lsn.or(self.replayed_lsn),
        }
    }

    /// What has been applied: a primary's insert position, a replica's replay one.
    pub fn replayed(&self) -> Option<Lsn> {
        match self.role {
            Role::Primary => self.current_lsn,
            Role::Replica => self.replayed_lsn,
        }
    }

    /// `major.minor` of the running server (`17.6`), from `server_version_num`.
    pub fn major_minor(&self) -> Option<(u32, u32)> {
        let num = u32::try_from(self.version_num).ok()?;
        // From 10 on: major * 10000 + minor.
        (num >= 100_000).then_some((num / 10_000, num % 10_000))
    }
}

/// `synchronous_standby_names = 'ANY <min> (<standbys>)'`, on the wire.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SyncSettings {
    /// How many standbys must confirm each commit; 0 turns synchronous
    /// replication off.
    pub min: u32,
    /// Instance names; empty means any standby.
    #[serde(default)]
    pub standbys: Vec<String>,
}

/// `POST /sync`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SyncResponse {
    /// The rendered setting, or `None` when asynchronous.
    pub synchronous_standby_names: Option<String>,
}

/// `POST /reload`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReloadRequest {
    /// New `spec.postgresql.parameters`; when absent, the current ones are re-rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<BTreeMap<String, String>>,
}

/// `POST /reload`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReloadResponse {
    /// What the parameter change takes.
    pub change: Change,
    pub pending_restart: bool,
}

/// `POST /restart`'s answer: the restart was asked for; readiness says when
/// it is over.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RestartResponse {
    pub restarting: bool,
}

/// `POST /slots/drop`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DropSlotRequest {
    pub slot: String,
}

/// `POST /slots/drop`'s answer; a slot still in use is kept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DropSlotResponse {
    pub slot: String,
    pub dropped: bool,
}

/// The database roles whose passwords live in the Database's Secrets.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Credential {
    /// `postgres`.
    Superuser,
    /// `tusk_replication`: the primary's role, and every replica's password file.
    Replication,
    /// The application database's owner.
    App,
}

/// `POST /roles/password`: the Secret holding `credential` was recreated; the
/// role (on a primary) and the password file (for replication) follow it.
/// The Secret is the source of truth, never the database.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PasswordRequest {
    pub credential: Credential,
    pub password: String,
}

impl std::fmt::Debug for PasswordRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordRequest")
            .field("credential", &self.credential)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// `POST /roles/password`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PasswordResponse {
    pub credential: Credential,
    /// The role's password was set in PostgreSQL (only a primary does).
    pub role_updated: bool,
}

/// `POST /backups`: take a base backup to the pod's object store.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// The Backup object's name: one run per name, asked again it answers
    /// for the same run.
    pub backup: String,
}

/// Where a base backup run stands, as the instance that runs it knows.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BackupRun {
    Running,
    Completed,
    Failed,
}

/// What a Running backup is doing.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BackupStage {
    Starting,
    Streaming,
    /// The data is stored; the WAL it ends in is not archived yet (a standby's
    /// backup needs the primary to switch segments: `POST /wal/switch`).
    WaitingForWal,
    Done,
}

/// One backup run on an instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BackupState {
    pub backup: String,
    pub run: BackupRun,
    pub stage: BackupStage,
    /// RFC 3339.
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_lsn: Option<Lsn>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_lsn: Option<Lsn>,
    /// Bytes of the data directory to read; bytes read; bytes stored.
    #[serde(default)]
    pub estimated_bytes: u64,
    #[serde(default)]
    pub raw_bytes: u64,
    #[serde(default)]
    pub stored_bytes: u64,
    /// `s3://<bucket>/<key of the backup's directory>/`, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /backups`: the running backup and the last finished ones.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Backups {
    pub backups: Vec<BackupState>,
}

/// `POST /wal/switch`'s answer: where the primary's WAL switched.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WalSwitchResponse {
    pub lsn: Lsn,
}

/// `POST /retention`: keep every moment of the last `window_seconds`
/// restorable and remove the rest of this system's backups and WAL.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RetentionRequest {
    pub window_seconds: u64,
}

/// What a retention pass removed and kept (backup ids).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RetentionReport {
    /// Completed backups removed, oldest first.
    pub removed: Vec<String>,
    /// Completed backups kept, oldest first; the last is the newest.
    pub kept: Vec<String>,
    /// Backups without a manifest (interrupted) that were removed.
    pub interrupted_removed: Vec<String>,
    /// WAL files removed.
    pub wal_removed: usize,
    /// Keys deleted in all.
    pub deleted: usize,
}

/// Every error answer's body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> Status {
        Status {
            api_version: API_VERSION,
            instance: "orders-2".into(),
            pod: Some("orders-2".into()),
            namespace: Some("shop".into()),
            postgres: PgStatus {
                role: Role::Replica,
                timeline: Some(3),
                current_lsn: None,
                received_lsn: Some(Lsn(0x3000148)),
                replayed_lsn: Some(Lsn(0x3000100)),
                streaming: Some(true),
                system_identifier: "7441234567890123456".into(),
                version: "17.6".into(),
                version_num: 170_006,
                pending_restart: false,
                inactive_slots: Vec::new(),
                archiver: None,
                replay_lag_milliseconds: BTreeMap::new(),
            },
            ready: true,
            parameters: BTreeMap::from([("work_mem".into(), "8MB".into())]),
            sync: None,
            ha: None,
            tls: None,
            faults: None,
        }
    }

    #[test]
    fn status_round_trips_and_keeps_the_postgres_spellings() {
        let status = status();
        let json = serde_json::to_value(&status).expect("serializes");
        assert_eq!(json["api_version"], API_VERSION);
        assert_eq!(json["role"], "replica");
        assert_eq!(json["received_lsn"], "0/3000148");
        assert_eq!(json["timeline"], 3);
        let back: Status = serde_json::from_value(json).expect("deserializes");
        assert_eq!(back, status);
        assert_eq!(back.postgres.received(), Some(Lsn(0x3000148)));
        assert_eq!(back.postgres.replayed(), Some(Lsn(0x3000100)));
        assert_eq!(back.postgres.major_minor(), Some((17, 6)));
    }

    #[test]
    fn a_manager_without_a_version_reads_as_version_zero() {
        let mut json = serde_json::to_value(status()).expect("serializes");
        json.as_object_mut().expect("object").remove("api_version");
        let old: Status = serde_json::from_value(json).expect("deserializes");
        assert_eq!(old.api_version, 0);
    }

    #[test]
    fn passwords_stay_out_of_debug_output() {
        let request = PasswordRequest {
            credential: Credential::App,
            password: "hunter2".into(),
        };
        assert!(!format!("{request:?}").contains("hunter2"));
        let json = serde_json::to_string(&request).expect("serializes");
        assert_eq!(json, r#"{"credential":"app","password":"hunter2"}"#);
    }

    #[test]
    fn roles_have_one_spelling() {
        for role in [Role::Primary, Role::Replica] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
            assert_eq!(
                serde_json::to_value(role).expect("serializes"),
                role.as_str()
            );
        }
        assert_eq!(Role::parse("leader"), None);
    }
}
