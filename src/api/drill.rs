//! `Drill` (`tusk.dev/v1`): a failure Tusk injects into one of its own
//! Databases, on demand or on a schedule, measuring what it cost (the write
//! outage a probe saw through `-rw`, the acknowledged writes lost, the time
//! to Ready again) and judging it against the drill's expectations.
//!
//! The spec says what to break and what must hold; the status is the drill's
//! whole state (phase, the fault injected and its undo deadline, the
//! timeline, the figures and the verdict), so an operator that restarts in
//! the middle of a drill reads from it what it must undo.
//!
//! What the schema can say is said here, as OpenAPI bounds and CEL built
//! from the same constants the operator uses ([`rules`]): the bounds of
//! every number, `spec.database` and `spec.scenario` fixed once created (the
//! other fields may change and apply from the next run), an abort deadline
//! longer than the fault it would cut short, an outage bound above 0. What
//! needs the Database or a cron parser is [`super::validate_drill`]'s, run by
//! the webhook (`/validate/drill`) and the drill controller alike.

// Several `printcolumn(...)` share a `type_`; clippy reads them as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A failure drill against a Tusk Database.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tusk.dev",
    version = "v1",
    kind = "Drill",
    namespaced,
    status = "DrillStatus",
    derive = "PartialEq",
    shortname = "tdr",
    category = "tusk",
    cel,
    doc = "A failure drill: Tusk injects a fault into one of its Databases (once, or on a schedule), measures the write outage and the acknowledged writes lost through the rw Service, undoes the fault and judges the result against the drill's expectations. A drill never deletes a PVC or a backup of the Database it drills (a restore drill deletes only its own throwaway copy).",
    printcolumn(
        name = "Database",
        type_ = "string",
        json_path = ".spec.database",
        description = "Database drilled"
    ),
    printcolumn(
        name = "Scenario",
        type_ = "string",
        json_path = ".spec.scenario",
        description = "Fault injected"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Drill phase"
    ),
    printcolumn(
        name = "Outage",
        type_ = "number",
        json_path = ".status.figures.writeOutageSeconds",
        description = "Write outage in seconds"
    ),
    printcolumn(
        name = "Lost",
        type_ = "integer",
        json_path = ".status.figures.lostWrites",
        description = "Acknowledged writes lost"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = Rule::new(rules::name_fits()).message(rules::NAME_FITS)
)]
#[x_kube(validation = Rule::new("self.database == oldSelf.database").message(rules::DATABASE_IMMUTABLE).field_path(".database"))]
#[x_kube(validation = Rule::new("self.scenario == oldSelf.scenario").message(rules::SCENARIO_IMMUTABLE).field_path(".scenario"))]
#[x_kube(validation = Rule::new(rules::abort_after_the_fault()).message(rules::ABORT_AFTER_THE_FAULT).field_path(".abortAfterSeconds"))]
#[serde(rename_all = "camelCase")]
pub struct DrillSpec {
    /// Name of the Database, in this namespace, to drill. Fixed once the
    /// Drill is created; the other fields may change and apply from the
    /// next run.
    #[schemars(length(min = 1, max = 63))]
    pub database: String,

    /// The fault to inject. Fixed once the Drill is created.
    pub scenario: Scenario,

    /// How long the fault lasts, for the scenarios that hold one
    /// (`freeze-primary`, `partition-primary`, `store-outage`), in seconds.
    /// Ignored by the others. Default 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600))]
    pub duration_seconds: Option<u32>,

    /// A cron schedule (five fields, or `@daily` and the like; UTC): the
    /// drill runs at every tick instead of once. Without it, the drill runs
    /// once, when created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub schedule: Option<String>,

    /// How long after a scheduled tick a run may still start, in minutes:
    /// a run whose guards do not hold at the tick is retried until the window
    /// closes, then recorded as skipped. Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1440))]
    pub window_minutes: Option<u32>,

    /// Only check the guards and report whether the drill could start;
    /// inject nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,

    /// Abort a run, undoing its fault, when it has not finished this many
    /// seconds after it started. Default 300; must be longer than
    /// `durationSeconds` for the scenarios that hold a fault.
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

/// The faults a drill can inject.
#[derive(
    schemars::JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// A planned switchover to the most advanced synchronous replica.
    Switchover,
    /// The primary's pod force-deleted (grace period 0).
    DeletePrimaryPod,
    /// The primary's postmaster killed with SIGKILL by its instance manager.
    KillPostgres,
    /// The primary's PostgreSQL stopped with SIGSTOP for `durationSeconds`:
    /// a hung primary, not a dead one.
    FreezePrimary,
    /// The primary cut from its peers, the API server and clients by a
    /// NetworkPolicy for `durationSeconds`. Refused when the cluster does not
    /// enforce NetworkPolicy.
    PartitionPrimary,
    /// A replica's pod force-deleted.
    KillReplica,
    /// WAL archiving pointed at an unreachable store for `durationSeconds`.
    StoreOutage,
    /// The latest backup restored into a throwaway Database, verified and
    /// removed.
    Restore,
}

impl Scenario {
    /// Every scenario, in the order the docs list them.
    pub const ALL: [Scenario; 8] = [
        Scenario::Switchover,
        Scenario::DeletePrimaryPod,
        Scenario::KillPostgres,
        Scenario::FreezePrimary,
        Scenario::PartitionPrimary,
        Scenario::KillReplica,
        Scenario::StoreOutage,
        Scenario::Restore,
    ];

    /// The name the API spells.
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Switchover => "switchover",
            Scenario::DeletePrimaryPod => "delete-primary-pod",
            Scenario::KillPostgres => "kill-postgres",
            Scenario::FreezePrimary => "freeze-primary",
            Scenario::PartitionPrimary => "partition-primary",
            Scenario::KillReplica => "kill-replica",
            Scenario::StoreOutage => "store-outage",
            Scenario::Restore => "restore",
        }
    }

    /// Whether the fault lasts `durationSeconds` (and so has an undo).
    pub fn holds_a_fault(self) -> bool {
        matches!(
            self,
            Scenario::FreezePrimary | Scenario::PartitionPrimary | Scenario::StoreOutage
        )
    }

    /// Whether the fault's instance manager undoes it by itself at its
    /// deadline (a manager-held fault); the others (a NetworkPolicy) stay
    /// until Tusk removes them.
    pub fn undone_by_the_instance(self) -> bool {
        matches!(self, Scenario::FreezePrimary | Scenario::StoreOutage)
    }

    /// Whether the scenario only means something where NetworkPolicy is
    /// enforced: checked with a canary before the fault.
    pub fn needs_network_policy(self) -> bool {
        self == Scenario::PartitionPrimary
    }

    /// Whether the scenario acts on the Database's object store (its WAL
    /// archive, its backups): refused on a Database without one.
    pub fn needs_a_store(self) -> bool {
        matches!(self, Scenario::StoreOutage | Scenario::Restore)
    }

    /// The fewest instances a Database needs for this scenario to mean
    /// anything: a primary fault needs a replica to take over, `kill-replica`
    /// a replica to kill. The admission webhook refuses a Drill on a smaller
    /// Database, and the drill's guards refuse a run on one.
    pub fn min_instances(self) -> i32 {
        match self {
            Scenario::StoreOutage | Scenario::Restore => 1,
            _ => 2,
        }
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What must hold before a drill starts and while it runs; a guard that
/// breaks mid-way aborts the run and undoes its fault.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrillGuards {
    /// The most replay lag, in bytes, any replica may have. Default 16 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_lag_bytes: Option<i64>,

    /// When set, a verified backup no older than this many hours must exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8760))]
    pub max_backup_age_hours: Option<u32>,
}

impl DrillGuards {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What a drill must show to succeed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.maxWriteOutageSeconds) || self.maxWriteOutageSeconds > 0.0").message(rules::OUTAGE_ABOVE_ZERO).field_path(".maxWriteOutageSeconds"))]
#[serde(rename_all = "camelCase")]
pub struct DrillExpectations {
    /// The longest write outage allowed, in seconds: above 0 (every fault
    /// costs some outage: the probe's writes are apart in time). Default 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub max_write_outage_seconds: Option<f64>,

    /// The most acknowledged writes the drill may lose. Default 0 in sync
    /// mode; unbounded (reported only) in async mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_lost_writes: Option<i64>,

    /// The longest time to Ready again after the fault, in seconds.
    /// Default 120.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub max_seconds_to_ready: Option<u32>,
}

impl DrillExpectations {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Where a drill is. A run goes `Pending → CheckingGuards → Probing →
/// Injecting → Observing → Undoing → Recovering → Verifying` and ends in a
/// verdict; a scheduled drill then waits in `Scheduled` for its next tick.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrillPhase {
    /// Not started yet.
    Pending,
    /// A scheduled drill waiting for its next tick.
    Scheduled,
    /// The guards are being checked.
    CheckingGuards,
    /// The probe is starting and writing its baseline.
    Probing,
    /// The fault is being injected.
    Injecting,
    /// The fault is in effect (or its effect is under way); watching.
    Observing,
    /// The fault is being undone.
    Undoing,
    /// The fault is undone; waiting for the Database to be Ready again.
    Recovering,
    /// Reading the probe's figures and judging them.
    Verifying,
    /// The run met its expectations (or, for a dry run, the guards hold).
    Succeeded,
    /// The run missed an expectation.
    Failed,
    /// The run was stopped (a guard broke, `abortAfterSeconds` passed, the
    /// drill was deleted) and its fault undone.
    Aborted,
    /// The run could not start: a guard did not hold, or the scenario
    /// cannot run on this Database or cluster.
    Refused,
}

impl DrillPhase {
    /// The name the API spells.
    pub fn as_str(self) -> &'static str {
        match self {
            DrillPhase::Pending => "Pending",
            DrillPhase::Scheduled => "Scheduled",
            DrillPhase::CheckingGuards => "CheckingGuards",
            DrillPhase::Probing => "Probing",
            DrillPhase::Injecting => "Injecting",
            DrillPhase::Observing => "Observing",
            DrillPhase::Undoing => "Undoing",
            DrillPhase::Recovering => "Recovering",
            DrillPhase::Verifying => "Verifying",
            DrillPhase::Succeeded => "Succeeded",
            DrillPhase::Failed => "Failed",
            DrillPhase::Aborted => "Aborted",
            DrillPhase::Refused => "Refused",
        }
    }

    /// Whether a run in this phase is over.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            DrillPhase::Succeeded | DrillPhase::Failed | DrillPhase::Aborted | DrillPhase::Refused
        )
    }
}

/// Observed state of a Drill, written by Tusk. It is the drill's whole
/// state: an operator restarted mid-run reads from it what to undo.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrillStatus {
    /// Where the current (or last) run is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DrillPhase>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Standard conditions: Ready (the drill did what it was asked),
    /// Succeeded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// When the current (or last) run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// When the current (or last) run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,

    /// For a scheduled drill, the next tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<Time>,

    /// The fault injected by the current run, until it is undone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<InjectedFault>,

    /// The probe writing through `-rw` for the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,

    /// For `partition-primary`: the check, before the fault, that the
    /// cluster enforces NetworkPolicy (a cluster without an implementation
    /// accepts policies and ignores them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_check: Option<PolicyCheck>,

    /// The phases of the current (or last) run, with their times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<DrillEvent>,

    /// What the current (or last) run measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figures: Option<DrillFigures>,

    /// One line on why the run ended as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,

    /// The earlier runs of a scheduled drill, newest first (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<DrillRun>,
}

/// A fault in effect, and what undoes it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InjectedFault {
    /// The instance (or pod) the fault was injected into; for `restore`,
    /// the throwaway Database.
    pub target: String,

    /// When it was injected; for `restore`, the recovery point the
    /// throwaway Database is restored to.
    pub injected_at: Time,

    /// When it must be undone at the latest; the instance manager undoes
    /// faults it holds by this time on its own as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_by: Option<Time>,

    /// The object that holds the fault (a NetworkPolicy, a throwaway
    /// Database), when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,

    /// When the fault was undone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone_at: Option<Time>,
}

/// The canary of a `partition-primary` run: a NetworkPolicy denying all
/// ingress to the drill's probe pod. Where policies are enforced the
/// operator stops reaching the probe; where they are not, the run is
/// refused before any fault.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCheck {
    /// The canary NetworkPolicy.
    pub policy: String,

    /// When it was applied (on record before it was).
    pub applied_at: Time,

    /// When the operator found the probe unreachable behind it: the
    /// cluster enforces NetworkPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforced_at: Option<Time>,

    /// When the canary was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_at: Option<Time>,
}

/// One step of a drill's run.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrillEvent {
    /// The phase entered.
    pub phase: DrillPhase,
    /// When.
    pub at: Time,
    /// What happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a run measured.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrillFigures {
    /// From the last write acknowledged before the fault to the first after
    /// it, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_outage_seconds: Option<f64>,

    /// Writes the probe saw acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_writes: Option<i64>,

    /// Acknowledged writes missing from the database afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_writes: Option<i64>,

    /// From the fault to the Database Ready again, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_to_ready: Option<f64>,

    /// The failover (or switchover) the fault caused: from the Database's
    /// `status.lastFailover`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_seconds: Option<f64>,

    /// Bytes of WAL the failover lost (0 in sync mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_gap_bytes: Option<i64>,

    /// For `restore`: from the throwaway Database's creation to Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_seconds: Option<f64>,

    /// For `restore`: the probe's writes acknowledged by the recovery point
    /// looked for in the restored copy (one missing fails the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_compared: Option<i64>,
}

/// The summary of an earlier run.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrillRun {
    /// When it started.
    pub started_at: Time,
    /// How it ended.
    pub phase: DrillPhase,
    /// What it measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figures: Option<DrillFigures>,
    /// Why it ended as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
}

/// The CEL rules of the schema, built from the constants the operator uses
/// so that the two cannot drift.
pub mod rules {
    use super::{Scenario, defaults};

    /// Longest Drill name: its probe Pod is `<name>-probe`, and label values
    /// (`tusk.dev/drill`) stay within 63 characters.
    pub const MAX_NAME_LEN: usize = 63 - "-probe".len();

    pub const NAME_FITS: &str = "metadata.name must be at most 57 characters so that the drill's probe Pod, <name>-probe, fits in 63";
    pub const DATABASE_IMMUTABLE: &str =
        "spec.database is immutable: a Drill drills one Database (create a new Drill instead)";
    pub const SCENARIO_IMMUTABLE: &str = "spec.scenario is immutable: a Drill's runs and metrics are those of one scenario (create a new Drill instead)";
    pub const ABORT_AFTER_THE_FAULT: &str = "spec.abortAfterSeconds must be longer than spec.durationSeconds (defaults 300 and 20) for a scenario that holds its fault: every run would be aborted before its fault ends";
    pub const OUTAGE_ABOVE_ZERO: &str = "spec.expect.maxWriteOutageSeconds must be above 0: the probe's writes are apart in time, so every fault costs some outage and a bound of 0 can never hold";

    /// `size(self.metadata.name) <= 57`.
    pub fn name_fits() -> String {
        format!("size(self.metadata.name) <= {MAX_NAME_LEN}")
    }

    /// For the scenarios that hold a fault, `abortAfterSeconds` (or its
    /// default) is longer than `durationSeconds` (or its default).
    pub fn abort_after_the_fault() -> String {
        let holding: Vec<String> = Scenario::ALL
            .iter()
            .filter(|s| s.holds_a_fault())
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        format!(
            "!(self.scenario in [{}]) || (has(self.abortAfterSeconds) ? self.abortAfterSeconds : {}) > (has(self.durationSeconds) ? self.durationSeconds : {})",
            holding.join(", "),
            defaults::ABORT_AFTER_SECONDS,
            defaults::DURATION_SECONDS,
        )
    }
}

/// Defaults the spec leaves out.
pub mod defaults {
    /// `durationSeconds`.
    pub const DURATION_SECONDS: u32 = 20;
    /// `windowMinutes`.
    pub const WINDOW_MINUTES: u32 = 60;
    /// `abortAfterSeconds`.
    pub const ABORT_AFTER_SECONDS: u32 = 300;
    /// `guards.maxLagBytes`.
    pub const MAX_LAG_BYTES: i64 = 16 << 20;
    /// `expect.maxWriteOutageSeconds`.
    pub const MAX_WRITE_OUTAGE_SECONDS: f64 = 30.0;
    /// `expect.maxSecondsToReady`.
    pub const MAX_SECONDS_TO_READY: u32 = 120;
}
