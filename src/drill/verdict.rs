//! The verdict of a run: its figures judged against `spec.expect`. A figure
//! that could not be measured fails the run rather than passing it. A
//! `restore` run has its own ([`judge_restore`]): nothing was injected into
//! the Database, so no write outage is judged.

use crate::api::drill::{DrillFigures, DrillPhase, DrillSpec, defaults};
use crate::probe::check::CheckReport;

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

/// The verdict of a `restore` run: the copy Ready within
/// `expect.maxSecondsToReady`, every write acknowledged by the recovery
/// point found in it, none of the probe's acknowledged writes lost from the
/// Database itself (as [`judge`] bounds them). The write outage is not
/// judged: nothing was injected into the Database.
pub fn judge_restore(
    spec: &DrillSpec,
    sync: bool,
    figures: &DrillFigures,
    check: &CheckReport,
) -> (DrillPhase, String) {
    let max_ready = f64::from(
        spec.expect
            .max_seconds_to_ready
            .unwrap_or(defaults::MAX_SECONDS_TO_READY),
    );
    let mut missed = Vec::new();
    match figures.recovery_seconds {
        None => missed.push("the restored copy was not seen Ready".to_owned()),
        Some(seconds) if seconds > max_ready => missed.push(format!(
            "the copy was Ready after {seconds:.1} s, more than expect.maxSecondsToReady ({max_ready})"
        )),
        Some(_) => {}
    }
    if check.compared == 0 {
        missed.push("no acknowledged write to look for in the copy".to_owned());
    }
    if check.missing > 0 {
        let first: Vec<String> = check.first_missing.iter().map(i64::to_string).collect();
        missed.push(format!(
            "{} of the {} writes acknowledged by the recovery point are missing from the copy (first: {})",
            check.missing,
            check.compared,
            first.join(", ")
        ));
    }
    match (figures.lost_writes, max_lost_writes(spec, sync)) {
        (None, _) => missed.push("the probe could not check its writes".to_owned()),
        (Some(lost), Some(max)) if lost > max => missed.push(format!(
            "{lost} acknowledged writes lost, more than expect.maxLostWrites ({max})"
        )),
        _ => {}
    }
    if missed.is_empty() {
        (DrillPhase::Succeeded, summary_restore(figures))
    } else {
        (
            DrillPhase::Failed,
            format!("{}; {}", missed.join("; "), summary_restore(figures)),
        )
    }
}

/// A `restore` run's figures in one line.
pub fn summary_restore(figures: &DrillFigures) -> String {
    let known = |n: Option<i64>| n.map_or("?".to_owned(), |n| n.to_string());
    format!(
        "copy Ready after {}, {} rows compared, {} acknowledged writes lost of {}",
        figures
            .recovery_seconds
            .map_or("-".to_owned(), |s| format!("{s:.1} s")),
        known(figures.rows_compared),
        known(figures.lost_writes),
        known(figures.acknowledged_writes),
    )
}
