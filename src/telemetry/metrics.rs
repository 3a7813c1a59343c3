//! Operator metrics in Prometheus conventions (prometheus-client), and the
//! exposition both `/metrics` endpoints (operator and instance manager) serve.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::api::status::DatabasePhase;
use crate::error::Category;

/// `tusk_failover_duration_seconds` buckets: around the seconds a failover
/// takes (goal ≤ 5 s), up to the minutes a slow one would.
const FAILOVER_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

/// One Database. `namespace` is a metric label on purpose: the ServiceMonitor
/// honours it, so these series join the instance series of the same Database
/// (whose `namespace` is the pod's) instead of carrying the operator's namespace.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct DatabaseLabels {
    pub namespace: String,
    pub database: String,
}

/// One certificate of one Database: the Secret that holds it and what it is
/// (see [`CertificateKind`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct CertificateLabels {
    pub namespace: String,
    pub database: String,
    pub secret: String,
    pub kind: String,
}

/// What a certificate is for; the `kind` label of
/// `tusk_certificate_not_after_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertificateKind {
    /// A CA in effect (Tusk's in `<db>-ca`, or the user's `spec.tls.ca`).
    Ca,
    /// The CA a rotation moves to.
    NextCa,
    /// PostgreSQL's server certificate of an instance.
    Server,
    /// An instance's API identity.
    Api,
    /// An instance's replication client certificate.
    Replication,
    /// The operator's client certificate on the instance API.
    Operator,
    /// The application role's client certificate (`<db>-app`).
    Client,
}

impl CertificateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ca => "ca",
            Self::NextCa => "next-ca",
            Self::Server => "server",
            Self::Api => "api",
            Self::Replication => "replication",
            Self::Operator => "operator",
            Self::Client => "client",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

/// How a Backup ended, as far as the Backup controller took it; the `result`
/// label of `tusk_backups_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupResult {
    /// Stored and restorable.
    Completed,
    /// Started and did not complete.
    Failed,
    /// Refused for an invalid spec.
    Invalid,
}

impl BackupResult {
    pub const ALL: [BackupResult; 3] = [Self::Completed, Self::Failed, Self::Invalid];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Invalid => "invalid",
        }
    }
}

/// All operator metrics; cheap to clone (every metric is an `Arc` inside).
#[derive(Clone)]
pub struct Metrics {
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
    leader: Gauge,
    queue_depth: Family<ControllerLabels, Gauge>,
    databases: Family<PhaseLabels, Gauge>,
    failovers: Family<DatabaseLabels, Counter>,
    failover_duration: Family<DatabaseLabels, Histogram>,
    failover_wal_gap: Family<DatabaseLabels, Gauge>,
    backups: Family<ResultLabels, Counter>,
    last_backup: DatabaseGauge,
    last_verified: DatabaseGauge,
    verification_success: DatabaseGauge,
    schedule_period: DatabaseGauge,
    certificates: CertificateGauge,
    /// `tusk_drill_*`, set by the Drill controller.
    pub drills: super::drill_metrics::DrillMetrics,
}

/// `tusk_certificate_not_after_seconds`: per Database, the set of its
/// certificates is replaced at each sample, so a certificate no longer in
/// effect (a dropped CA, a removed instance) loses its series.
#[derive(Clone, Default)]
struct CertificateGauge {
    family: Family<CertificateLabels, Gauge<f64, AtomicU64>>,
    /// Per Database, the label sets the family holds for it.
    keys: Arc<Mutex<std::collections::BTreeMap<DatabaseLabels, BTreeSet<CertificateLabels>>>>,
}

impl CertificateGauge {
    fn replace(&self, database: DatabaseLabels, latest: BTreeSet<(CertificateLabels, u64)>) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let mut current = BTreeSet::new();
        for (labels, not_after) in latest {
            // Unix seconds: exact in an f64 for the next 285 million years.
            self.family.get_or_create(&labels).set(not_after as f64);
            current.insert(labels);
        }
        let before = keys.remove(&database).unwrap_or_default();
        for gone in before.difference(&current) {
            self.family.remove(gone);
        }
        if !current.is_empty() {
            keys.insert(database, current);
        }
    }
}

/// A gauge per Database whose whole set is replaced at each sample: a
/// Database no longer in it loses its series.
#[derive(Clone, Default)]
struct DatabaseGauge {
    family: Family<DatabaseLabels, Gauge<f64, AtomicU64>>,
    /// The label sets the family holds, to drop those that no longer apply.
    keys: Arc<Mutex<BTreeSet<DatabaseLabels>>>,
}

impl DatabaseGauge {
    fn replace(&self, latest: impl IntoIterator<Item = (DatabaseLabels, f64)>) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let mut current = BTreeSet::new();
        for (labels, value) in latest {
            self.family.get_or_create(&labels).set(value);
            current.insert(labels);
        }
        for gone in keys.difference(&current) {
            self.family.remove(gone);
        }
        *keys = current;
    }
}

impl Metrics {
    /// Creates the metrics and registers them under the `tusk` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 12))
            }),
            leader: Gauge::default(),
            queue_depth: Family::default(),
            databases: Family::default(),
            failovers: Family::default(),
            failover_duration: Family::new_with_constructor(|| {
                Histogram::new(FAILOVER_BUCKETS.iter().copied())
            }),
            failover_wal_gap: Family::default(),
            backups: Family::default(),
            last_backup: DatabaseGauge::default(),
            last_verified: DatabaseGauge::default(),
            verification_success: DatabaseGauge::default(),
            schedule_period: DatabaseGauge::default(),
            certificates: CertificateGauge::default(),
            drills: super::drill_metrics::DrillMetrics::default(),
        };
        // Every result exists from the start, so that `increase()` sees the first
        // backup of each kind rather than a series appearing at 1.
        for result in BackupResult::ALL {
            metrics
                .backups
                .get_or_create(&ResultLabels {
                    result: result.as_str().to_owned(),
                })
                .inc_by(0);
        }
        let tusk = registry.sub_registry_with_prefix("tusk");
        let metrics = Self {
            drills: super::drill_metrics::DrillMetrics::register(tusk),
            ..metrics
        };
        tusk.register(
            "reconcile",
            "Reconciliations run, by controller",
            metrics.reconciles.clone(),
        );
        tusk.register(
            "reconcile_errors",
            "Reconciliations that failed, by controller and error category",
            metrics.errors.clone(),
        );
        tusk.register_with_unit(
            "reconcile_duration",
            "Time spent in one reconciliation, by controller",
            Unit::Seconds,
            metrics.duration.clone(),
        );
        tusk.register(
            "leader",
            "1 when this replica holds the operator's leader lease",
            metrics.leader.clone(),
        );
        tusk.register(
            "work_queue_depth",
            "Objects whose latest version has not been through a finished reconciliation yet (waiting or in flight), by controller",
            metrics.queue_depth.clone(),
        );
        tusk.register(
            "databases",
            "Databases by status.phase as the leader sees them",
            metrics.databases.clone(),
        );
        tusk.register(
            "failovers",
            "Times the Database controller saw status.currentPrimary move from one instance to another",
            metrics.failovers.clone(),
        );
        tusk.register_with_unit(
            "failover_duration",
            "From the operator finding a Database's primary not serving to the instance it promoted accepting writes",
            Unit::Seconds,
            metrics.failover_duration.clone(),
        );
        tusk.register_with_unit(
            "failover_wal_gap",
            "WAL the replaced primary last reported beyond what the promoted instance had received, at the latest failover",
            Unit::Bytes,
            metrics.failover_wal_gap.clone(),
        );
        tusk.register(
            "backups",
            "Backups the Backup controller took to an end, by result",
            metrics.backups.clone(),
        );
        tusk.register_with_unit(
            "backup_last_success_timestamp",
            "Completion time of the newest Completed Backup of each Database, in Unix seconds",
            Unit::Seconds,
            metrics.last_backup.family.clone(),
        );
        tusk.register_with_unit(
            "backup_last_verified_timestamp",
            "When the newest backup a throwaway restore proved finished verifying, per Database, in Unix seconds",
            Unit::Seconds,
            metrics.last_verified.family.clone(),
        );
        tusk.register(
            "backup_last_verification_success",
            "1 when the newest verification of a Database's backups proved it, 0 when it failed",
            metrics.verification_success.family.clone(),
        );
        tusk.register_with_unit(
            "backup_schedule_period",
            "Time between two runs of a Database's spec.backup.schedule",
            Unit::Seconds,
            metrics.schedule_period.family.clone(),
        );
        tusk.register_with_unit(
            "certificate_not_after",
            "When each certificate of a Database in effect expires, in Unix seconds, by the Secret that holds it and its kind (ca, next-ca, server, api, replication, operator, client)",
            Unit::Seconds,
            metrics.certificates.family.clone(),
        );
        metrics
    }

    /// Sets `tusk_certificate_not_after_seconds` for Database
    /// `namespace/database`: every certificate in effect, as (Secret, kind,
    /// notAfter in Unix seconds). Replaces the Database's previous set: a
    /// certificate not listed any more loses its series.
    pub fn set_certificates<'a>(
        &self,
        namespace: &str,
        database: &str,
        certificates: impl IntoIterator<Item = (&'a str, CertificateKind, u64)>,
    ) {
        let latest = certificates
            .into_iter()
            .map(|(secret, kind, not_after)| {
                (
                    CertificateLabels {
                        namespace: namespace.to_owned(),
                        database: database.to_owned(),
                        secret: secret.to_owned(),
                        kind: kind.as_str().to_owned(),
                    },
                    not_after,
                )
            })
            .collect();
        self.certificates
            .replace(database_labels(namespace, database), latest);
    }

    /// Counts a reconciliation and times it until the returned guard drops.
    pub fn reconcile_started(&self, controller: &str) -> ReconcileTimer {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        ReconcileTimer {
            histogram: self.duration.get_or_create(&labels).clone(),
            start: Instant::now(),
        }
    }

    pub fn reconcile_failed(&self, controller: &str, category: Category) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_owned(),
                category: category.as_str().to_owned(),
            })
            .inc();
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub fn set_queue_depth(&self, controller: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Sets `tusk_databases` for every phase, zero included: a phase nobody is in
    /// must read 0, not keep its last value or vanish.
    pub fn set_databases(&self, phases: impl IntoIterator<Item = Option<DatabasePhase>>) {
        let mut counts = [0i64; DatabasePhase::ALL.len()];
        for phase in phases {
            // No status yet: the controller has not been through it, which is
            // what Pending means.
            let phase = phase.unwrap_or(DatabasePhase::Pending);
            if let Some(i) = DatabasePhase::ALL.iter().position(|p| *p == phase) {
                counts[i] += 1;
            }
        }
        for (phase, count) in DatabasePhase::ALL.iter().zip(counts) {
            self.databases
                .get_or_create(&PhaseLabels {
                    phase: phase.as_str().to_owned(),
                })
                .set(count);
        }
    }

    /// Makes the per-Database series exist (at 0), so the first failover shows
    /// up in `increase()`.
    pub fn track_database(&self, namespace: &str, database: &str) {
        self.failovers
            .get_or_create(&database_labels(namespace, database))
            .inc_by(0);
    }

    /// Drops the per-Database series of a deleted Database.
    pub fn forget_database(&self, namespace: &str, database: &str) {
        let labels = database_labels(namespace, database);
        self.failovers.remove(&labels);
        self.failover_duration.remove(&labels);
        self.failover_wal_gap.remove(&labels);
        self.certificates.replace(labels, BTreeSet::new());
    }

    pub fn failover(&self, namespace: &str, database: &str) {
        self.failovers
            .get_or_create(&database_labels(namespace, database))
            .inc();
    }

    /// A promotion the operator measured (see `status.lastFailover`).
    pub fn failed_over(
        &self,
        namespace: &str,
        database: &str,
        duration: Option<Duration>,
        wal_gap_bytes: Option<u64>,
    ) {
        let labels = database_labels(namespace, database);
        if let Some(duration) = duration {
            self.failover_duration
                .get_or_create(&labels)
                .observe(duration.as_secs_f64());
        }
        if let Some(gap) = wal_gap_bytes {
            self.failover_wal_gap
                .get_or_create(&labels)
                .set(i64::try_from(gap).unwrap_or(i64::MAX));
        }
    }

    pub fn backup_finished(&self, result: BackupResult) {
        self.backups
            .get_or_create(&ResultLabels {
                result: result.as_str().to_owned(),
            })
            .inc();
    }

    /// Replaces `tusk_backup_last_success_timestamp_seconds` with `latest`
    /// (namespace, database, Unix seconds); Databases no longer in it lose
    /// their series.
    pub fn set_last_backups(&self, latest: impl IntoIterator<Item = (DatabaseLabels, f64)>) {
        self.last_backup.replace(latest);
    }

    /// Replaces `tusk_backup_last_verified_timestamp_seconds` and
    /// `tusk_backup_last_verification_success` (namespace, database → Unix
    /// seconds of the newest proven backup's verification, and whether the
    /// newest verification proved its backup).
    pub fn set_verifications(
        &self,
        last_verified: impl IntoIterator<Item = (DatabaseLabels, f64)>,
        success: impl IntoIterator<Item = (DatabaseLabels, f64)>,
    ) {
        self.last_verified.replace(last_verified);
        self.verification_success.replace(success);
    }

    /// Replaces `tusk_backup_schedule_period_seconds`.
    pub fn set_schedule_periods(&self, periods: impl IntoIterator<Item = (DatabaseLabels, f64)>) {
        self.schedule_period.replace(periods);
    }
}

fn database_labels(namespace: &str, database: &str) -> DatabaseLabels {
    DatabaseLabels {
        namespace: namespace.to_owned(),
        database: database.to_owned(),
    }
}

/// Observes the elapsed time into the duration histogram when dropped.
pub struct ReconcileTimer {
    histogram: Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A `/metrics` response body and its content type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exposition {
    pub content_type: &'static str,
    pub body: String,
}

/// Encodes `registry` in the format the client's `Accept` header asks for:
/// OpenMetrics when it accepts that (Prometheus does, and gets units), else the
/// Prometheus text format, which every other reader understands — `promtool
/// check metrics` and curl among them.
pub fn exposition(
    registry: &Registry,
    accept: Option<&str>,
) -> Result<Exposition, std::fmt::Error> {
    let mut openmetrics = String::new();
    prometheus_client::encoding::text::encode(&mut openmetrics, registry)?;
    Ok(if accepts_openmetrics(accept) {
        Exposition {
            content_type: OPENMETRICS,
            body: openmetrics,
        }
    } else {
        Exposition {
            content_type: PROMETHEUS_TEXT,
            body: to_prometheus_text(&openmetrics),
        }
    })
}

fn accepts_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|accept| {
        accept.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let refused = parts.any(|param| {
                param
                    .strip_prefix("q=")
                    .and_then(|q| q.parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        })
    })
}

/// Rewrites prometheus-client's OpenMetrics text as Prometheus text format 0.0.4.
/// The two differ where it matters to parsers: an OpenMetrics counter family is
/// named without `_total` while its samples carry it (the Prometheus format
/// names the family like its samples), `# UNIT` and `# EOF` do not exist there,
/// `info` is a gauge, and exemplars are not allowed.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // Held back: the family's name in Prometheus text depends on its type.
            help = Some(rest.split_once(' ').map_or("", |(_, text)| text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_owned(), kind),
                _ => (name.to_owned(), "untyped"),
            };
            if let Some(text) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if line.starts_with('#') {
            // `# UNIT`, `# EOF`: OpenMetrics only.
        } else if !line.is_empty() {
            out.push_str(without_exemplar(line));
            out.push('\n');
        }
    }
    out
}

/// A sample line without its ` # {…} value` exemplar. Label values may hold
/// ` # `, so the search starts after the closing brace of the label set.
fn without_exemplar(line: &str) -> &str {
    let mut labels_end = 0;
    if let Some(open) = line.find('{')
        && line[..open].find(' ').is_none()
    {
        let mut quoted = false;
        let mut escaped = false;
        for (i, c) in line[open..].char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    labels_end = open + i;
                    break;
                }
                _ => {}
            }
        }
    }
    match line[labels_end..].find(" # ") {
        Some(at) => &line[..labels_end + at],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn openmetrics(registry: &Registry) -> String {
        exposition(registry, Some("application/openmetrics-text"))
            .unwrap()
            .body
    }

    #[test]
    fn exposition_has_the_operator_series() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        drop(metrics.reconcile_started("database"));
        metrics.reconcile_failed("database", Category::Internal);
        metrics.set_leader(true);
        metrics.set_queue_depth("database", 3);
        metrics.failover("shop", "orders");
        metrics.failed_over(
            "shop",
            "orders",
            Some(Duration::from_millis(2700)),
            Some(8192),
        );
        // Unmeasured parts are not reported as zero.
        metrics.failed_over("shop", "orders", None, None);
        metrics.backup_finished(BackupResult::Completed);
        metrics.set_last_backups([(database_labels("shop", "orders"), 1_700_000_000.5)]);
        let text = openmetrics(&registry);
        for line in [
            "tusk_reconcile_total{controller=\"database\"} 1",
            "tusk_reconcile_errors_total{controller=\"database\",category=\"internal\"} 1",
            "tusk_reconcile_duration_seconds_count{controller=\"database\"} 1",
            "tusk_leader 1",
            "tusk_work_queue_depth{controller=\"database\"} 3",
            "tusk_failovers_total{namespace=\"shop\",database=\"orders\"} 1",
            "tusk_failover_duration_seconds_count{namespace=\"shop\",database=\"orders\"} 1",
            "tusk_failover_duration_seconds_sum{namespace=\"shop\",database=\"orders\"} 2.7",
            "tusk_failover_duration_seconds_bucket{le=\"3.0\",namespace=\"shop\",database=\"orders\"} 1",
            "tusk_failover_wal_gap_bytes{namespace=\"shop\",database=\"orders\"} 8192",
            "tusk_backups_total{result=\"completed\"} 1",
            "tusk_backups_total{result=\"failed\"} 0",
            "tusk_backups_total{result=\"invalid\"} 0",
            "tusk_backup_last_success_timestamp_seconds{namespace=\"shop\",database=\"orders\"} 1700000000.5",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn every_phase_is_set_and_missing_status_counts_as_pending() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.set_databases([Some(DatabasePhase::Ready), Some(DatabasePhase::Ready), None]);
        metrics.set_databases([Some(DatabasePhase::Ready), Some(DatabasePhase::Degraded)]);
        let text = openmetrics(&registry);
        assert!(
            text.contains("tusk_databases{phase=\"Ready\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("tusk_databases{phase=\"Degraded\"} 1\n"),
            "{text}"
        );
        // Pending went back to 0 rather than keeping its last value.
        assert!(
            text.contains("tusk_databases{phase=\"Pending\"} 0\n"),
            "{text}"
        );
        let phases = text
            .lines()
            .filter(|l| l.starts_with("tusk_databases{"))
            .count();
        assert_eq!(phases, DatabasePhase::ALL.len(), "{text}");
    }

    #[test]
    fn tracked_databases_start_at_zero_and_forgotten_ones_go() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.track_database("shop", "orders");
        let text = openmetrics(&registry);
        assert!(
            text.contains("tusk_failovers_total{namespace=\"shop\",database=\"orders\"} 0"),
            "{text}"
        );
        metrics.forget_database("shop", "orders");
        assert!(!openmetrics(&registry).contains("database=\"orders\""));
    }

    #[test]
    fn last_backups_drop_databases_that_have_none_any_more() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.set_last_backups([
            (database_labels("shop", "orders"), 10.0),
            (database_labels("shop", "users"), 20.0),
        ]);
        metrics.set_last_backups([(database_labels("shop", "users"), 30.0)]);
        let text = openmetrics(&registry);
        assert!(!text.contains("database=\"orders\""), "{text}");
        assert!(
            text.contains(
                "tusk_backup_last_success_timestamp_seconds{namespace=\"shop\",database=\"users\"} 30.0"
            ),
            "{text}"
        );
    }

    #[test]
    fn certificate_expiry_is_replaced_per_database_and_forgotten_with_it() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.set_certificates(
            "shop",
            "orders",
            [
                ("orders-ca", CertificateKind::Ca, 2_000_000_000),
                ("orders-ca", CertificateKind::NextCa, 2_100_000_000),
                ("orders-1-tls", CertificateKind::Server, 1_700_000_000),
            ],
        );
        metrics.set_certificates(
            "shop",
            "users",
            [("users-1-tls", CertificateKind::Server, 1_800_000_000)],
        );
        let text = openmetrics(&registry);
        for line in [
            "# TYPE tusk_certificate_not_after_seconds gauge",
            "tusk_certificate_not_after_seconds{namespace=\"shop\",database=\"orders\",secret=\"orders-1-tls\",kind=\"server\"} 1700000000.0",
            "tusk_certificate_not_after_seconds{namespace=\"shop\",database=\"orders\",secret=\"orders-ca\",kind=\"next-ca\"} 2100000000.0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // The rotation ended: the next CA is the CA, the old one is gone.
        metrics.set_certificates(
            "shop",
            "orders",
            [
                ("orders-ca", CertificateKind::Ca, 2_100_000_000),
                ("orders-1-tls", CertificateKind::Server, 1_700_500_000),
            ],
        );
        let text = openmetrics(&registry);
        assert!(!text.contains("kind=\"next-ca\""), "{text}");
        assert!(
            text.contains("secret=\"orders-ca\",kind=\"ca\"} 2100000000.0"),
            "{text}"
        );
        assert!(
            text.contains("database=\"users\""),
            "another Database is untouched"
        );
        metrics.forget_database("shop", "orders");
        let text = openmetrics(&registry);
        assert!(!text.contains("database=\"orders\""), "{text}");
        assert!(text.contains("database=\"users\""), "{text}");
    }

    #[test]
    fn the_accept_header_picks_the_format() {
        let mut registry = Registry::default();
        Metrics::register(&mut registry).set_leader(true);
        let prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let om = exposition(&registry, Some(prometheus_accept)).unwrap();
        assert_eq!(om.content_type, OPENMETRICS);
        assert!(om.body.ends_with("# EOF\n"));
        for accept in [
            None,
            Some("*/*"),
            Some("text/plain"),
            Some("application/openmetrics-text;q=0"),
        ] {
            let text = exposition(&registry, accept).unwrap();
            assert_eq!(text.content_type, PROMETHEUS_TEXT, "{accept:?}");
            assert!(!text.body.contains("# EOF"), "{accept:?}");
        }
    }

    #[test]
    fn prometheus_text_names_counter_families_like_their_samples() {
        let om = "# HELP tusk_reconcile Reconciliations.\n\
                  # TYPE tusk_reconcile counter\n\
                  tusk_reconcile_total{controller=\"a # b\"} 2 # {trace_id=\"x\"} 1.0\n\
                  # HELP tusk_reconcile_duration_seconds Time.\n\
                  # TYPE tusk_reconcile_duration_seconds histogram\n\
                  # UNIT tusk_reconcile_duration_seconds seconds\n\
                  tusk_reconcile_duration_seconds_count 1\n\
                  # HELP tusk_build Build.\n\
                  # TYPE tusk_build info\n\
                  tusk_build_info{version=\"1\"} 1\n\
                  # HELP tusk_x Unknown.\n\
                  # TYPE tusk_x unknown\n\
                  tusk_x 1 # {a=\"b\"} 1\n\
                  # EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP tusk_reconcile_total Reconciliations.\n\
             # TYPE tusk_reconcile_total counter\n\
             tusk_reconcile_total{controller=\"a # b\"} 2\n\
             # HELP tusk_reconcile_duration_seconds Time.\n\
             # TYPE tusk_reconcile_duration_seconds histogram\n\
             tusk_reconcile_duration_seconds_count 1\n\
             # HELP tusk_build_info Build.\n\
             # TYPE tusk_build_info gauge\n\
             tusk_build_info{version=\"1\"} 1\n\
             # HELP tusk_x Unknown.\n\
             # TYPE tusk_x untyped\n\
             tusk_x 1\n"
        );
    }
}
