//! The drill metrics (`tusk_drill_*`): what each drill's last run measured,
//! the runs counted by verdict, and the last success per scenario, set by
//! the Drill controller when a run ends.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// One Drill.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrillLabels {
    pub namespace: String,
    pub database: String,
    pub drill: String,
    pub scenario: String,
}

/// Runs of a scenario on a Database, by verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabels {
    pub namespace: String,
    pub database: String,
    pub scenario: String,
    pub verdict: String,
}

/// A scenario on a Database.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScenarioLabels {
    pub namespace: String,
    pub database: String,
    pub scenario: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The drill metrics; cheap to clone.
#[derive(Clone, Default)]
pub struct DrillMetrics {
    write_outage: Family<DrillLabels, FloatGauge>,
    lost_writes: Family<DrillLabels, Gauge>,
    seconds_to_ready: Family<DrillLabels, FloatGauge>,
    runs: Family<RunLabels, Counter>,
    last_success: Family<ScenarioLabels, FloatGauge>,
}

/// What a finished run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedRun<'a> {
    pub namespace: &'a str,
    pub database: &'a str,
    pub drill: &'a str,
    pub scenario: &'a str,
    /// The final phase (`Succeeded`, `Failed`, `Aborted`, `Refused`).
    pub verdict: &'a str,
    pub write_outage_seconds: Option<f64>,
    pub lost_writes: Option<i64>,
    pub seconds_to_ready: Option<f64>,
    /// When it ended, in Unix seconds.
    pub finished_at: f64,
}

impl DrillMetrics {
    /// Registers the drill metrics on `tusk`'s (prefixed) registry.
    pub fn register(tusk: &mut Registry) -> Self {
        let metrics = Self::default();
        tusk.register_with_unit(
            "drill_write_outage",
            "The write outage the last run of each Drill measured through -rw: from the last acknowledged write before the fault to the first after",
            Unit::Seconds,
            metrics.write_outage.clone(),
        );
        tusk.register(
            "drill_lost_writes",
            "Acknowledged writes the last run of each Drill found missing afterwards",
            metrics.lost_writes.clone(),
        );
        tusk.register(
            "drill_seconds_to_ready",
            "Seconds from the fault to the Database Ready again, at the last run of each Drill",
            metrics.seconds_to_ready.clone(),
        );
        tusk.register(
            "drill_runs",
            "Drill runs ended, by Database, scenario and verdict",
            metrics.runs.clone(),
        );
        tusk.register_with_unit(
            "drill_last_success_timestamp",
            "When the last successful drill of each scenario on each Database ended, in Unix seconds",
            Unit::Seconds,
            metrics.last_success.clone(),
        );
        metrics
    }

    /// Records a run that ended.
    pub fn finished(&self, run: &FinishedRun<'_>) {
        let drill = DrillLabels {
            namespace: run.namespace.to_owned(),
            database: run.database.to_owned(),
            drill: run.drill.to_owned(),
            scenario: run.scenario.to_owned(),
        };
        if let Some(outage) = run.write_outage_seconds {
            self.write_outage.get_or_create(&drill).set(outage);
        }
        if let Some(lost) = run.lost_writes {
            self.lost_writes.get_or_create(&drill).set(lost);
        }
        if let Some(ready) = run.seconds_to_ready {
            self.seconds_to_ready.get_or_create(&drill).set(ready);
        }
        self.runs
            .get_or_create(&RunLabels {
                namespace: run.namespace.to_owned(),
                database: run.database.to_owned(),
                scenario: run.scenario.to_owned(),
                verdict: run.verdict.to_owned(),
            })
            .inc();
        if run.verdict == "Succeeded" {
            self.last_success
                .get_or_create(&ScenarioLabels {
                    namespace: run.namespace.to_owned(),
                    database: run.database.to_owned(),
                    scenario: run.scenario.to_owned(),
                })
                .set(run.finished_at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_sets_the_series_named_in_the_design() {
        let mut registry = Registry::default();
        let metrics = DrillMetrics::register(registry.sub_registry_with_prefix("tusk"));
        metrics.finished(&FinishedRun {
            namespace: "shop",
            database: "orders",
            drill: "weekly",
            scenario: "delete-primary-pod",
            verdict: "Succeeded",
            write_outage_seconds: Some(4.5),
            lost_writes: Some(0),
            seconds_to_ready: Some(9.0),
            finished_at: 1_800_000_000.0,
        });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for line in [
            r#"tusk_drill_write_outage_seconds{namespace="shop",database="orders",drill="weekly",scenario="delete-primary-pod"} 4.5"#,
            r#"tusk_drill_lost_writes{namespace="shop",database="orders",drill="weekly",scenario="delete-primary-pod"} 0"#,
            r#"tusk_drill_seconds_to_ready{namespace="shop",database="orders",drill="weekly",scenario="delete-primary-pod"} 9.0"#,
            r#"tusk_drill_runs_total{namespace="shop",database="orders",scenario="delete-primary-pod",verdict="Succeeded"} 1"#,
            r#"tusk_drill_last_success_timestamp_seconds{namespace="shop",database="orders",scenario="delete-primary-pod"} 1800000000.0"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
