//! The verdict of a run: its figures judged against `spec.expect`. A figure
//! that could not be measured fails the run rather than passing it.

use crate::api::drill::{DrillFigures, DrillPhase, DrillSpec, defaults};

/// The bound on acknowledged writes lost: `expect.maxLostWrites`, else 0 in
/// sync mode and none (reported only) in async mode.
pub fn max_lost_writes(spec: &DrillSpec, sync: bool) -> Option<i64> {
    spec.expect.max_lost_writes.or(sync.then_some(0))
}

/// Succeeded or Failed, and one line saying why.
pub fn judge(spec: &DrillSpec, sync: bool, figures: &DrillFigures) -> (DrillPhase, String) {
    let max_outage = spec
        .expect
        .max_write_outage_seconds
        .unwrap_or(defaults::MAX_WRITE_OUTAGE_SECONDS);
    let max_ready = f64::from(
        spec.expect
            .max_seconds_to_ready
            .unwrap_or(defaults::MAX_SECONDS_TO_READY),
    );
    let mut missed = Vec::new();
    match figures.write_outage_seconds {
        None => missed.push(
            "no write outage measured (no write acknowledged on one side of the fault)".to_owned(),
        ),
        Some(outage) if outage > max_outage => missed.push(format!(
            "write outage {outage:.1} s exceeds expect.maxWriteOutageSeconds ({max_outage})"
        )),
        Some(_) => {}
    }
    match (figures.lost_writes, max_lost_writes(spec, sync)) {
        (None, _) => missed.push("the probe could not check its writes".to_owned()),
        (Some(lost), Some(max)) if lost > max => missed.push(format!(
            "{lost} acknowledged writes lost, more than expect.maxLostWrites ({max})"
        )),
        _ => {}
    }
    match figures.seconds_to_ready {
        None => missed.push("the Database was not seen Ready again".to_owned()),
        Some(ready) if ready > max_ready => missed.push(format!(
            "Ready again after {ready:.1} s, more than expect.maxSecondsToReady ({max_ready})"
        )),
        Some(_) => {}
    }
    if missed.is_empty() {
        (DrillPhase::Succeeded, summary(figures))
    } else {
        (
            DrillPhase::Failed,
            format!("{}; {}", missed.join("; "), summary(figures)),
        )
    }
}

/// The figures in one line.
pub fn summary(figures: &DrillFigures) -> String {
    let seconds = |s: Option<f64>| s.map_or("-".to_owned(), |s| format!("{s:.1} s"));
    let mut line = format!(
        "write outage {}, {} acknowledged writes lost of {}, Ready again after {}",
        seconds(figures.write_outage_seconds),
        figures
            .lost_writes
            .map_or("?".to_owned(), |l| l.to_string()),
        figures
            .acknowledged_writes
            .map_or("?".to_owned(), |a| a.to_string()),
        seconds(figures.seconds_to_ready),
    );
    if let Some(failover) = figures.failover_seconds {
        line.push_str(&format!(", failover {failover:.1} s"));
    }
    if let Some(gap) = figures.wal_gap_bytes {
        line.push_str(&format!(", WAL gap {gap} bytes"));
    }
    line
}
