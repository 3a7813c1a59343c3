//! Operator metrics in Prometheus conventions (prometheus-client).

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::error::Error;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub category: String,
}

/// All operator metrics; cheap to clone (every metric is an `Arc` inside).
#[derive(Clone)]
pub struct Metrics {
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
    leader: Gauge,
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
        };
        let tusk = registry.sub_registry_with_prefix("tusk");
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
            prometheus_client::registry::Unit::Seconds,
            metrics.duration.clone(),
        );
        tusk.register(
            "leader",
            "1 when this replica holds the operator's leader lease",
            metrics.leader.clone(),
        );
        metrics
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

    pub fn reconcile_failed(&self, controller: &str, error: &Error) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_owned(),
                category: error.category().as_str().to_owned(),
            })
            .inc();
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_the_operator_series() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        drop(metrics.reconcile_started("database"));
        metrics.reconcile_failed("database", &Error::MissingField("metadata.name"));
        metrics.set_leader(true);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "tusk_reconcile_total{controller=\"database\"} 1",
            "tusk_reconcile_errors_total{controller=\"database\",category=\"internal\"} 1",
            "tusk_reconcile_duration_seconds_count{controller=\"database\"} 1",
            "tusk_leader 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
