//! Drill objects as the e2e suites use them: applied like a user would, run
//! to their end, their figures printed. Shared by the drill suite and the
//! failover suite, which injects its faults through Drills where one fits
//! (so the feature users run is the one CI proves).

use std::time::Duration;

use kube::Client;
use kube::api::{Api, PatchParams};
use serde_json::{Value, json};
use tusk::api::drill::{Drill, DrillFigures, DrillPhase, InjectedFault};

use crate::{MANAGER, Result, apply_value, wait_for};

/// Applies Drill `name` on Database `db` with `spec` (without `database`).
pub async fn apply(client: &Client, ns: &str, db: &str, name: &str, mut spec: Value) -> Result<()> {
    spec["database"] = json!(db);
    apply_value(
        client,
        Some(ns),
        json!({"apiVersion": "tusk.dev/v1", "kind": "Drill", "metadata": {"name": name}, "spec": spec}),
        &PatchParams::apply(MANAGER),
    )
    .await?;
    Ok(())
}

/// Waits until Drill `name` satisfies `done`, failing with its status.
pub async fn until(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
    done: impl Fn(&Drill) -> bool,
) -> Result<Drill> {
    let drills: Api<Drill> = Api::namespaced(client.clone(), ns);
    wait_for(&drills, name, timeout, done).await
}

pub fn phase(drill: &Drill) -> Option<DrillPhase> {
    drill.status.as_ref().and_then(|s| s.phase)
}

/// The run is over (a verdict, a refusal or an abort).
pub fn finished(drill: &Drill) -> bool {
    phase(drill).is_some_and(DrillPhase::is_final)
}

/// The fault on record, once the run injected it.
pub fn fault(drill: &Drill) -> Option<InjectedFault> {
    drill.status.as_ref().and_then(|s| s.fault.clone())
}

pub fn figures(drill: &Drill) -> DrillFigures {
    drill
        .status
        .as_ref()
        .and_then(|s| s.figures.clone())
        .unwrap_or_default()
}

/// Waits until Drill `name` has its fault on record (the injection is
/// asked for right after); answers the fault.
pub async fn injected(client: &Client, ns: &str, name: &str) -> Result<InjectedFault> {
    let drill = until(client, ns, name, Duration::from_secs(300), |d| {
        fault(d).is_some() || finished(d)
    })
    .await?;
    fault(&drill)
        .ok_or_else(|| format!("drill {name} ended before a fault: {}", line(name, &drill)).into())
}

/// One line on what a drill measured and how it ended.
pub fn line(what: &str, drill: &Drill) -> String {
    let status = drill.status.clone().unwrap_or_default();
    let figures = status.figures.unwrap_or_default();
    format!(
        "{what}: {:?} in {:.0} s; write outage {:?} s, lost {:?} of {:?} acknowledged, Ready again after {:?} s, failover {:?} s, WAL gap {:?} bytes; verdict: {}",
        status.phase,
        status
            .finished_at
            .zip(status.started_at)
            .map_or(0.0, |(end, start)| end
                .0
                .duration_since(start.0)
                .as_secs_f64()),
        figures.write_outage_seconds,
        figures.lost_writes,
        figures.acknowledged_writes,
        figures.seconds_to_ready,
        figures.failover_seconds,
        figures.wal_gap_bytes,
        status.verdict.unwrap_or_default()
    )
}

/// Prints [`line`] and returns it.
pub fn report(what: &str, drill: &Drill) -> String {
    let line = line(what, drill);
    println!("{line}");
    line
}

/// Waits for Drill `name` to end; it must have Succeeded with no
/// acknowledged write lost and an outage measured.
pub async fn succeeded(client: &Client, ns: &str, name: &str) -> Result<Drill> {
    let done = until(client, ns, name, Duration::from_secs(400), finished).await?;
    let line = report(name, &done);
    if phase(&done) != Some(DrillPhase::Succeeded) {
        return Err(format!("drill {name} did not succeed: {line}").into());
    }
    let figures = figures(&done);
    if figures.lost_writes != Some(0) || figures.write_outage_seconds.is_none() {
        return Err(format!("drill {name}: want 0 lost writes and an outage: {line}").into());
    }
    Ok(done)
}
