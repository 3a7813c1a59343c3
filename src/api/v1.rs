//! `tusk.dev/v1`: the storage version of the Tusk API.
//!
//! Every field carries a doc comment because those become the `description`s that
//! `kubectl explain` shows. Rules the schema can express live here as OpenAPI
//! constraints and CEL (`x-kubernetes-validations`); rules that need more context
//! live in [`crate::api::validate`] and run in both the webhook and the reconciler.

// Several `printcolumn(...)` share a `type_`; clippy reads them as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, NodeAffinity, Toleration, TopologySpreadConstraint};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

pub use super::drill::{
    Drill, DrillEvent, DrillExpectations, DrillFigures, DrillGuards, DrillPhase, DrillRun,
    DrillSpec, DrillStatus, InjectedFault, PolicyCheck, Scenario,
};
pub use super::expose::{EndpointStatus, ExposeSpec, ExposeTarget, ExposeType, TrafficPolicy};
pub use super::resources::{ComputeResources, ResourcesSpec};
pub use super::status::{
    BackupPhase, BackupStatus, DatabasePhase, DatabaseStatus, InstanceRole, InstanceStatus,
    LastBackup, MigrationsStatus,
};
pub use super::tls::{TlsSecretReference, TlsSpec, TlsVersion};

/// A PostgreSQL cluster managed by Tusk: a primary, streaming replicas, their
/// volumes, services and credentials, and (optionally) backups to object storage.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tusk.dev",
    version = "v1",
    kind = "Database",
    namespaced,
    status = "DatabaseStatus",
    derive = "PartialEq",
    shortname = "tdb",
    category = "tusk",
    cel,
    doc = "A PostgreSQL cluster managed by Tusk.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase", description = "Lifecycle phase"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyInstances", description = "Instances ready"),
    printcolumn(name = "Instances", type_ = "integer", json_path = ".spec.instances", description = "Instances desired"),
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.currentPrimary", description = "Current primary instance"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version", description = "PostgreSQL version"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 50").message("metadata.name must be at most 50 characters so that Tusk's suffixes (-rw, -superuser, -<serial>) fit in 63"),
)]
#[x_kube(validation = Rule::new("!has(oldSelf.bootstrap) && !has(self.bootstrap) || has(oldSelf.bootstrap) && has(self.bootstrap) && self.bootstrap == oldSelf.bootstrap").message("spec.bootstrap is immutable: it only applies when the database is first created").field_path(".bootstrap"))]
#[x_kube(validation = Rule::new("has(self.walStorage) == has(oldSelf.walStorage)").message("spec.walStorage cannot be added to or removed from an existing Database: each instance's WAL volume is chosen when the Database is created (create a new Database, for example restored from a backup)").field_path(".walStorage"))]
#[x_kube(validation = Rule::new("!has(self.replication) || self.replication.mode != 'sync' || self.replication.minSyncReplicas < self.instances").message("spec.replication.minSyncReplicas must be lower than spec.instances: sync replication needs that many standbys besides the primary").field_path(".replication.minSyncReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSpec {
    /// PostgreSQL major version ("17") or major.minor ("17.2"). The image is derived
    /// from it unless `image` is set: `postgres:17` follows the major's latest
    /// minor, `postgres:17.2` pins one. A new minor or image rolls out one
    /// instance at a time (replicas, a switchover, then the old primary); a new
    /// major runs the upgrade Jobs (`pg_upgrade --check`, then `--link`).
    /// Versions may go up, skipping majors, but never down.
    #[schemars(regex(pattern = r"^(1[3-9])(\.[0-9]{1,3})?$"), length(max = 8))]
    pub version: String,

    /// Container image running PostgreSQL, in the official `postgres:NN` layout.
    /// Defaults to `postgres:<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,

    /// Number of PostgreSQL instances: one primary plus `instances - 1` streaming replicas.
    #[serde(default = "default_instances")]
    #[schemars(range(min = 1, max = 16))]
    pub instances: i32,

    /// The persistent volume of each instance.
    pub storage: StorageSpec,

    /// A separate volume for each instance's write-ahead log (`pg_wal`), so
    /// that WAL and data neither share I/O nor fill each other's disk. Set
    /// only when the Database is created: it cannot be added or removed
    /// later (create a new Database, for example restored from a backup).
    /// Unset, WAL lives in the data volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_storage: Option<WalStorageSpec>,

    /// How replicas follow the primary.
    #[serde(default, skip_serializing_if = "is_default")]
    pub replication: ReplicationSpec,

    /// PostgreSQL configuration.
    #[serde(default, skip_serializing_if = "is_default")]
    pub postgresql: PostgresqlSpec,

    /// How the first instance gets its data. Immutable. Defaults to `initdb` with
    /// database `app` owned by `app`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<BootstrapSpec>,

    /// Base backups and WAL archiving to S3-compatible object storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupConfig>,

    /// Automatic failover.
    #[serde(default, skip_serializing_if = "is_default")]
    pub failover: FailoverSpec,

    /// Name of the instance that should be primary. Setting it to a healthy
    /// replica asks for a switchover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub primary: Option<String>,

    /// Schema migrations that travel with the application: a Job running
    /// `image` against the primary with the application's credentials,
    /// whenever `version` differs from the last one that succeeded
    /// (`status.migrations.applied`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrations: Option<MigrationsSpec>,

    /// How version changes are carried out.
    #[serde(default, skip_serializing_if = "is_default")]
    pub upgrade: UpgradeSpec,

    /// Where the instance pods may run: pod anti-affinity between the
    /// instances, node selection and tolerations. A change rolls the
    /// instances like any pod-spec change (replicas, a switchover, then the
    /// old primary).
    #[serde(default, skip_serializing_if = "is_default")]
    pub affinity: AffinitySpec,

    /// Topology spread constraints of the instance pods, as in a PodSpec. A
    /// constraint without a `labelSelector` counts this Database's instances
    /// (`tusk.dev/database=<name>,app.kubernetes.io/component=database`). A
    /// change rolls the instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,

    /// PriorityClass of the instance pods (and of the Jobs that run on an
    /// instance's volume: upgrades, verifications). A change rolls the
    /// instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,

    /// Labels and annotations copied onto every object Tusk creates for the
    /// Database (Pods, PVCs, Services, Jobs and their pods, Secrets,
    /// PodDisruptionBudgets, the instances' ServiceAccount, Role,
    /// RoleBinding and Lease), for cost allocation, backup tools or service
    /// meshes. Tusk's own labels and annotations win over these; keys under
    /// `tusk.dev/` are refused. A removed or changed key on a Pod or PVC is
    /// put back by the next reconcile; a change never recreates a pod.
    #[serde(default, skip_serializing_if = "is_default")]
    pub inherited_metadata: InheritedMetadata,
    /// CPU and memory of each instance's container (PostgreSQL and Tusk's
    /// instance manager share it). See [`ResourcesSpec`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesSpec>,

    /// TLS for every connection: applications, replication, the instance
    /// API. Always on; this says how (protocol version, plaintext opt-out,
    /// client certificates, lifetimes, your own CA or server certificate,
    /// CA rotation).
    #[serde(default, skip_serializing_if = "is_default")]
    pub tls: TlsSpec,

    /// Published endpoints for applications outside Kubernetes: each a
    /// Service of type `LoadBalancer` or `NodePort` routing to `rw`, `ro` or
    /// `r`, with its own source ranges, annotations and hostname. At most one
    /// entry per target and type. `status.endpoints` shows the addresses and
    /// whether Tusk reached PostgreSQL through them; the `<name>-app-external`
    /// Secret carries the URIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 6))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, a.target == b.target && a.type == b.type))").message(super::expose::ONE_PER_TARGET_AND_TYPE))]
    pub expose: Vec<ExposeSpec>,
}

fn default_instances() -> i32 {
    1
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The persistent volume of each instance.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Size of each instance's volume, as a Kubernetes quantity (for example `10Gi`).
    /// It may grow but never shrink.
    #[schemars(
        regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"),
        length(max = 32)
    )]
    pub size: String,

    /// StorageClass of the volumes; the cluster default when unset. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,

    /// Grow each instance's volume before it fills: when the filesystem the
    /// instance sees is `threshold` percent used, its PVC is expanded by
    /// `step`, never past `limit`. Needs a StorageClass with
    /// `allowVolumeExpansion: true`. Unset: volumes only grow when `size` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_grow: Option<AutoGrowSpec>,
}

/// `spec.storage.autoGrow`: when and how far Tusk grows a volume on its own.
/// A volume grown this way stays larger than `spec.storage.size`; raising
/// `size` past it grows every volume to `size`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AutoGrowSpec {
    /// Percent of the volume's filesystem in use (as the instance sees it)
    /// at which the volume is grown. Default 80.
    #[serde(default = "default_grow_threshold")]
    #[schemars(range(min = 1, max = 99))]
    pub threshold: i32,

    /// How much to add each time: a quantity (`512Mi`, `1Gi`) or a percent of
    /// the volume's current size (`20%`, at least 1Mi). Never zero. Default `20%`.
    #[serde(default = "default_grow_step")]
    #[schemars(
        regex(pattern = r"^([0-9]+%|[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?)$"),
        length(max = 32)
    )]
    pub step: String,

    /// The largest size auto-grow may give a volume, as a quantity; at least
    /// `spec.storage.size`. Once reached, a full volume is reported in the
    /// `Degraded` condition and only a larger `size` or `limit` helps.
    #[schemars(
        regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"),
        length(max = 32)
    )]
    pub limit: String,
}

fn default_grow_threshold() -> i32 {
    80
}

fn default_grow_step() -> String {
    "20%".to_owned()
}

/// The WAL volume of each instance (`spec.walStorage`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WalStorageSpec {
    /// Size of each instance's WAL volume, as a Kubernetes quantity (for
    /// example `2Gi`). It must hold `max_wal_size` (PostgreSQL's default
    /// 1GB when `spec.postgresql.parameters` does not set it) plus a margin:
    /// at least `max_wal_size` × 1.25 + 64Mi. It may grow but never shrink.
    #[schemars(
        regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"),
        length(max = 32)
    )]
    pub size: String,

    /// StorageClass of the WAL volumes; the cluster default when unset.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,
}

/// How replicas follow the primary.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSpec {
    /// `async` (default): commits return once the primary has them. `sync`: commits
    /// wait until `minSyncReplicas` standbys have them (quorum over all replicas).
    #[serde(default)]
    pub mode: ReplicationMode,

    /// With `sync`, how many standbys must confirm each commit.
    #[serde(default = "default_min_sync")]
    #[schemars(range(min = 1, max = 15))]
    pub min_sync_replicas: i32,
}

impl Default for ReplicationSpec {
    fn default() -> Self {
        Self {
            mode: ReplicationMode::default(),
            min_sync_replicas: default_min_sync(),
        }
    }
}

fn default_min_sync() -> i32 {
    1
}

/// Replication mode.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
#[serde(rename_all = "lowercase")]
pub enum ReplicationMode {
    /// Asynchronous streaming replication.
    #[default]
    Async,
    /// Quorum-based synchronous replication.
    Sync,
}

/// PostgreSQL configuration.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PostgresqlSpec {
    /// postgresql.conf parameters, for example `max_connections: "200"`.
    /// Refused: directives (`include`, `include_dir`, `include_if_exists`,
    /// `config_file`), parameters Tusk manages itself (archiving, recovery,
    /// replication, listening, TLS files), values with control characters, and
    /// units PostgreSQL does not know (they are case-sensitive: `128MB`, not `128mb`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "parameters_schema")]
    pub parameters: BTreeMap<String, String>,
}

/// The schema of `spec.postgresql.parameters`, its CEL rule generated from
/// the constants of the one parameter validator ([`crate::postgres::params`]).
fn parameters_schema(_generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        // A bound on each value keeps the CEL rule's cost estimate within
        // the API server's budget.
        "additionalProperties": { "type": "string", "maxLength": 1024 },
        "maxProperties": 256,
        "x-kubernetes-validations": [{
            "rule": crate::postgres::params::cel_rule(),
            "messageExpression": crate::postgres::params::cel_message_expression(),
            "message": crate::postgres::params::CEL_MESSAGE,
        }],
    })
}

/// How the first instance gets its data. Set exactly one of `initdb` or `recovery`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.initdb) != has(self.recovery)").message("spec.bootstrap must set exactly one of initdb or recovery"))]
pub struct BootstrapSpec {
    /// Create a new, empty cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initdb: Option<InitdbSpec>,

    /// Restore from a backup, optionally to a point in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoverySpec>,
}

/// Create a new cluster with `initdb`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InitdbSpec {
    /// The application database to create.
    #[serde(default = "default_app")]
    #[schemars(regex(pattern = r"^[a-z_][a-z0-9_]{0,62}$"))]
    pub database: String,

    /// The role that owns the application database; its password lands in the `<name>-app` Secret.
    #[serde(default = "default_app")]
    #[schemars(regex(pattern = r"^[a-z_][a-z0-9_]{0,62}$"))]
    pub owner: String,
}

impl Default for InitdbSpec {
    fn default() -> Self {
        Self {
            database: default_app(),
            owner: default_app(),
        }
    }
}

fn default_app() -> String {
    "app".to_owned()
}

/// Restore the first instance from a base backup and WAL: name exactly one of
/// `backup`, `source` or `sourceName`. The restored Database archives under its
/// own name; the source's objects are only read.
///
/// Examples: `{backup: orders-20261124020000}`;
/// `{source: orders, targetTime: "2026-11-24T10:01:00Z"}` (just before a
/// mistake at 10:02); `{sourceName: orders}` (a deleted Database, from its
/// final backup in this Database's store).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.targetTime) && has(self.targetLsn))").message("spec.bootstrap.recovery may set targetTime or targetLsn, not both"))]
#[x_kube(validation = Rule::new("(has(self.backup) ? 1 : 0) + (has(self.source) ? 1 : 0) + (has(self.sourceName) ? 1 : 0) == 1").message("spec.bootstrap.recovery must name exactly one of backup, source or sourceName"))]
#[x_kube(validation = Rule::new("!(has(self.source) && has(self.objectStore))").message("spec.bootstrap.recovery.objectStore is not used with source: the source Database's store is read"))]
pub struct RecoverySpec {
    /// A completed Backup in this namespace to start from, for example
    /// `orders-20261124020000`. WAL is replayed from its archive to the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub backup: Option<String>,

    /// A Database in this namespace, for example `orders`: its object store and
    /// system, and its newest backup that precedes the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub source: Option<String>,

    /// The name a Database had in the object store, for example `orders`, read
    /// without that Database: the way back to one that was deleted (from its
    /// final backup). The store is `objectStore`, else this Database's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub source_name: Option<String>,

    /// Where to read with `sourceName` or `backup`, when not this Database's
    /// (or the operator's default) store. Only ever read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<ObjectStore>,

    /// Recover up to this time (RFC 3339, for example `2026-11-24T10:01:00Z`),
    /// then promote: every transaction committed until then, none after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub target_time: Option<String>,

    /// Recover up to this WAL location (for example `0/3000148`), then promote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"))]
    pub target_lsn: Option<String>,
}

/// Base backups and WAL archiving.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupConfig {
    /// Cron schedule for base backups, in UTC: crontab's five fields
    /// (`0 2 * * *`; day of week 0-7, Sunday being 0 and 7), optionally with a
    /// leading seconds field, or `@daily`, `@hourly`, `@weekly`, `@monthly`,
    /// `@yearly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^(@(yearly|annually|monthly|weekly|daily|hourly)|\S+(\s+\S+){4,6})$"),
        length(max = 128)
    )]
    pub schedule: Option<String>,

    /// How long backups stay restorable, as a number and a unit: `30d`, `12h`, `4w`.
    /// Older base backups and WAL are pruned, never the last restorable backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,4}[hdw]$"))]
    pub retention: Option<String>,

    /// Where backups and WAL go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<ObjectStore>,

    /// Prove every completed base backup by restoring it in a throwaway Job
    /// (its own volume, same image): replayed to its end, consistent, every
    /// database answering, indexes checked with amcheck where available. The
    /// outcome is in the Backup's `verified` status and `Verified` condition.
    /// Default: on when a `schedule` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
}

impl BackupConfig {
    /// Whether completed backups are verified by a restore.
    pub fn verifies(&self) -> bool {
        self.verify.unwrap_or(self.schedule.is_some())
    }
}

/// An S3-compatible object store location.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStore {
    /// Bucket name.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$"))]
    pub bucket: String,

    /// Key prefix inside the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub path: Option<String>,

    /// Endpoint URL for S3-compatible stores other than AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://"), length(max = 512))]
    pub endpoint: Option<String>,

    /// Region of the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,

    /// Secret in this namespace with keys `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: Option<String>,
}

/// Automatic failover.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// Seconds to wait after the primary's lease expires before promoting a replica.
    #[serde(default)]
    #[schemars(range(min = 0, max = 3600))]
    pub delay_seconds: i32,
}

/// Schema migrations, run as a Job against `<name>-rw` once the Database is
/// Ready and any version change in the same edit has finished. The Job gets
/// the application's credentials from the `<name>-app` Secret as the
/// standard libpq variables `PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`,
/// `PGPASSWORD`, plus `DATABASE_URL` (`postgresql://…`), so `psql -c …` or
/// an ORM's migrate command works unchanged. It runs as a non-root user
/// (uid 65532) with a bounded run time; a failure is retried at most twice,
/// then reported (`status.migrations.failed`, the Ready condition) and not
/// run again until `version` changes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigrationsSpec {
    /// The version of the schema this spec asks for, for example the
    /// application's release (`2026.11.3`) or its last migration's id.
    /// Any change runs the migration Job again; it is compared for equality
    /// only, never ordered.
    #[schemars(length(min = 1, max = 63))]
    pub version: String,

    /// The container image that carries the migrations, for example the
    /// application's own image.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,

    /// The container's entrypoint; the image's when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,

    /// Arguments to the entrypoint; the image's when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,

    /// More environment variables for the container. The connection
    /// variables Tusk sets (`PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`,
    /// `PGPASSWORD`, `DATABASE_URL`) come first; a variable of the same name
    /// here replaces them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
}

/// Where the instance pods may run.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AffinitySpec {
    /// Pod anti-affinity between the instances of this Database:
    /// `preferred` (default) spreads them over `topologyKey` where the
    /// scheduler can, `required` never puts two on the same `topologyKey`
    /// value (an instance that cannot be placed stays Pending, and the
    /// Ready condition names it and this field).
    #[serde(default, skip_serializing_if = "is_default")]
    pub pod_anti_affinity: PodAntiAffinityType,

    /// The node label the anti-affinity spreads over; defaults to
    /// `kubernetes.io/hostname` (one instance per node).
    /// `topology.kubernetes.io/zone` spreads over zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316))]
    pub topology_key: Option<String>,

    /// Node labels an instance's node must have, as a PodSpec's
    /// `nodeSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Node affinity of the instance pods, as a PodSpec's
    /// `affinity.nodeAffinity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,

    /// Tolerations of the instance pods (and of the Jobs that run on an
    /// instance's volume), as a PodSpec's `tolerations`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<Toleration>,
}

/// How strictly the instances of one Database keep apart.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
#[serde(rename_all = "kebab-case")]
pub enum PodAntiAffinityType {
    /// Spread where the scheduler can; a small cluster still runs every
    /// instance.
    #[default]
    Preferred,
    /// Never two instances on the same topology value; an instance with no
    /// such node left is not scheduled.
    Required,
}

/// Labels and annotations Tusk copies onto the objects it creates.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InheritedMetadata {
    /// Labels for every object; keys under `tusk.dev/` are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Annotations for every object; keys under `tusk.dev/` are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// How version changes are carried out.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeSpec {
    /// Before a major upgrade stops the primary, a fresh base backup
    /// completes when an object store is configured (`spec.backup`, or the
    /// operator's default store). `false` waives it: the upgrade starts
    /// sooner, and the way back is only the old data directory Tusk keeps
    /// until the new server answers.
    #[serde(default = "default_true")]
    pub backup_first: bool,
}

impl Default for UpgradeSpec {
    fn default() -> Self {
        Self { backup_first: true }
    }
}

fn default_true() -> bool {
    true
}

/// An on-demand base backup of a Database. Its spec is immutable.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tusk.dev",
    version = "v1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus",
    derive = "PartialEq",
    shortname = "tbk",
    category = "tusk",
    cel,
    doc = "A base backup of a Tusk Database to object storage. Deleting a Backup object leaves its data in the store: the Database's spec.backup.retention removes backups.",
    printcolumn(
        name = "Database",
        type_ = "string",
        json_path = ".spec.database",
        description = "Database backed up"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Backup phase"
    ),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".status.bytes",
        description = "Bytes stored"
    ),
    printcolumn(
        name = "Completed",
        type_ = "date",
        json_path = ".status.completedAt",
        description = "When the backup completed"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("a Backup's spec is immutable: create a new Backup instead"))]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Name of the Database, in this namespace, to back up.
    #[schemars(length(min = 1, max = 63))]
    pub database: String,

    /// Which instance takes the backup.
    #[serde(default, skip_serializing_if = "is_default")]
    pub target: BackupTarget,
}

/// Which instance takes a backup.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
#[serde(rename_all = "kebab-case")]
pub enum BackupTarget {
    /// A streaming replica when one is healthy, else the primary.
    #[default]
    PreferStandby,
    /// Always the primary.
    Primary,
}
