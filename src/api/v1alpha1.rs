//! `tusk.dev/v1alpha1`: the first, flat API. Still served; the API server converts
//! it to and from `v1` through Tusk's conversion webhook (see [`super::conversion`]).
//! Whatever `v1` holds that this version cannot travels in the
//! [`super::conversion::V1_FIELDS_ANNOTATION`] annotation, so nothing is lost.
//!
//! `Drill` came after v1: its v1alpha1 form has the same fields (and the
//! same nested types, status and rules) as v1 had when it was added; fields
//! v1 gains later travel in the annotation like the Database's.

// Several `printcolumn(...)` share a `type_`; clippy reads them as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::drill::rules;
pub use super::drill::{DrillExpectations, DrillGuards, DrillStatus, Scenario};
pub use super::status::{BackupStatus, DatabaseStatus};

/// A PostgreSQL cluster managed by Tusk (flat v1alpha1 form; prefer v1).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tusk.dev",
    version = "v1alpha1",
    kind = "Database",
    namespaced,
    status = "DatabaseStatus",
    derive = "PartialEq",
    shortname = "tdb",
    category = "tusk",
    cel,
    doc = "A PostgreSQL cluster managed by Tusk (v1alpha1; prefer tusk.dev/v1).",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase", description = "Lifecycle phase"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyInstances", description = "Instances ready"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas", description = "Instances desired"),
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.currentPrimary", description = "Current primary instance"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version", description = "PostgreSQL version"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 50").message("metadata.name must be at most 50 characters so that Tusk's suffixes (-rw, -superuser, -<serial>) fit in 63"),
)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSpec {
    /// PostgreSQL major version ("15") or major.minor ("15.8").
    #[schemars(regex(pattern = r"^(1[3-9])(\.[0-9]{1,3})?$"), length(max = 8))]
    pub version: String,

    /// Number of PostgreSQL instances (one primary, the rest streaming replicas).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 16))]
    pub replicas: i32,

    /// Size of each instance's volume, as a Kubernetes quantity (for example `10Gi`).
    #[schemars(
        regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"),
        length(max = 32)
    )]
    pub storage_size: String,

    /// Cron schedule for base backups. Needs an object store, which only v1 can
    /// describe (`spec.backup.objectStore`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^(@(yearly|annually|monthly|weekly|daily|hourly)|\S+(\s+\S+){4,6})$"),
        length(max = 128)
    )]
    pub backup_schedule: Option<String>,
}

fn default_replicas() -> i32 {
    1
}

/// A base backup of a Tusk Database (v1alpha1; prefer tusk.dev/v1).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tusk.dev",
    version = "v1alpha1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus",
    derive = "PartialEq",
    shortname = "tbk",
    category = "tusk",
    cel,
    doc = "A base backup of a Tusk Database (v1alpha1; prefer tusk.dev/v1).",
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
}

/// A failure drill against a Tusk Database (v1alpha1; prefer tusk.dev/v1).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tusk.dev",
    version = "v1alpha1",
    kind = "Drill",
    namespaced,
    status = "DrillStatus",
    derive = "PartialEq",
    shortname = "tdr",
    category = "tusk",
    cel,
    doc = "A failure drill against a Tusk Database (v1alpha1; prefer tusk.dev/v1).",
    printcolumn(name = "Database", type_ = "string", json_path = ".spec.database", description = "Database drilled"),
    printcolumn(name = "Scenario", type_ = "string", json_path = ".spec.scenario", description = "Fault injected"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase", description = "Drill phase"),
    printcolumn(name = "Outage", type_ = "number", json_path = ".status.figures.writeOutageSeconds", description = "Write outage in seconds"),
    printcolumn(name = "Lost", type_ = "integer", json_path = ".status.figures.lostWrites", description = "Acknowledged writes lost"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(rules::name_fits()).message(rules::NAME_FITS)
)]
#[x_kube(validation = Rule::new("self.database == oldSelf.database").message(rules::DATABASE_IMMUTABLE).field_path(".database"))]
#[x_kube(validation = Rule::new("self.scenario == oldSelf.scenario").message(rules::SCENARIO_IMMUTABLE).field_path(".scenario"))]
#[x_kube(validation = Rule::new(rules::abort_after_the_fault()).message(rules::ABORT_AFTER_THE_FAULT).field_path(".abortAfterSeconds"))]
#[serde(rename_all = "camelCase")]
pub struct DrillSpec {
    /// Name of the Database, in this namespace, to drill.
    #[schemars(length(min = 1, max = 63))]
    pub database: String,

    /// The fault to inject.
    pub scenario: Scenario,

    /// How long the fault lasts, for the scenarios that hold one
    /// (`freeze-primary`, `partition-primary`, `store-outage`), in seconds.
    /// Ignored by the others. Default 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600))]
    pub duration_seconds: Option<u32>,

    /// A cron schedule (five fields, or `@daily` and the like; UTC): the
    /// drill runs at every tick instead of once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub schedule: Option<String>,

    /// How long after a scheduled tick a run may still start, in minutes.
    /// Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1440))]
    pub window_minutes: Option<u32>,

    /// Only check the guards; inject nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,

    /// Abort a run, undoing its fault, when it has not finished this many
    /// seconds after it started. Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 3600))]
    pub abort_after_seconds: Option<u32>,

    /// What must hold before the drill starts and while it runs.
    #[serde(default, skip_serializing_if = "DrillGuards::is_empty")]
    pub guards: DrillGuards,

    /// What the drill must show to succeed.
    #[serde(default, skip_serializing_if = "DrillExpectations::is_empty")]
    pub expect: DrillExpectations,
}
