//! Whether a drill may start: every refusal names what failed, so a Refused
//! drill says which guard to fix. Checked before a run starts and again
//! before its fault is injected; once a fault is in effect the Database is
//! expected to look unhealthy, so only [`broken_mid_run`] applies.

use crate::api::drill::{DrillSpec, defaults};
use crate::api::status::{DatabasePhase, InstanceRole};

use super::{DatabaseView, Observed};

/// Why a drill may not start now; empty when every guard holds.
pub fn refusals(spec: &DrillSpec, observed: &Observed) -> Vec<String> {
    let mut refused = Vec::new();
    let Some(db) = &observed.database else {
        refused.push(format!(
            "spec.database: Database {} does not exist",
            spec.database
        ));
        return refused;
    };
    refused.extend(observed.invalid.iter().cloned());
    // The admission rule's own bound, so the webhook and the run agree.
    let needed = spec.scenario.min_instances();
    if db.instances < needed {
        refused.push(format!(
            "spec.scenario: {} needs at least {needed} instances; Database {} has {}",
            spec.scenario.as_str(),
            db.name,
            db.instances
        ));
    }
    if !db.ready {
        refused.push(format!(
            "Database {} is not Ready at its generation (phase {})",
            db.name,
            db.phase.map_or("unknown", |p| p.as_str())
        ));
    }
    if let Some(operation) = operation_under_way(db) {
        refused.push(format!("Database {}: {operation}", db.name));
    }
    refused.extend(replicas(spec, db));
    if let Some(hours) = spec.guards.max_backup_age_hours {
        let bound = observed
            .now
            .checked_sub(jiff::SignedDuration::from_hours(i64::from(hours)))
            .ok();
        let fresh = db
            .newest_verified_backup
            .zip(bound)
            .is_some_and(|(at, bound)| at >= bound);
        if !fresh {
            refused.push(format!(
                "guards.maxBackupAgeHours: no verified backup of {} completed in the last {hours} h",
                db.name
            ));
        }
    }
    for other in &observed.running_drills {
        refused.push(format!(
            "Drill {other} is running on Database {}: one drill at a time",
            db.name
        ));
    }
    refused
}

/// What stops a run that is under way, whatever its phase: the Database
/// gone, or an upgrade or restore started on it.
pub fn broken_mid_run(spec: &DrillSpec, observed: &Observed) -> Option<String> {
    let Some(db) = &observed.database else {
        return Some(format!(
            "spec.database: Database {} no longer exists",
            spec.database
        ));
    };
    match db.phase {
        Some(phase @ (DatabasePhase::Upgrading | DatabasePhase::Restoring)) => Some(format!(
            "Database {} started {} during the drill",
            db.name,
            phase.as_str()
        )),
        _ => None,
    }
}

/// An upgrade, restore, switchover or failover under way.
fn operation_under_way(db: &DatabaseView) -> Option<String> {
    let by_phase = match db.phase {
        Some(DatabasePhase::Upgrading) => Some("an upgrade is under way"),
        Some(DatabasePhase::Restoring) => Some("a restore is under way"),
        Some(DatabasePhase::SwitchingOver) => Some("a switchover is under way"),
        Some(DatabasePhase::FailingOver) => Some("a failover is under way"),
        _ => None,
    };
    if let Some(operation) = by_phase {
        return Some(operation.to_owned());
    }
    match (&db.current_primary, &db.target_primary) {
        (Some(current), Some(target)) if current != target => {
            Some(format!("the primary is moving from {current} to {target}"))
        }
        _ => None,
    }
}

/// Every replica streaming (ready) with its lag within `guards.maxLagBytes`,
/// and every instance of the spec present.
fn replicas(spec: &DrillSpec, db: &DatabaseView) -> Vec<String> {
    let max_lag = spec.guards.max_lag_bytes.unwrap_or(defaults::MAX_LAG_BYTES);
    let mut refused = Vec::new();
    let present = i32::try_from(db.members.len()).unwrap_or(i32::MAX);
    if present < db.instances {
        refused.push(format!(
            "Database {} has {present} of its {} instances",
            db.name, db.instances
        ));
    }
    for member in &db.members {
        if member.role == Some(InstanceRole::Primary) {
            if !member.ready {
                refused.push(format!("primary {} is not ready", member.name));
            }
            continue;
        }
        if !member.ready {
            refused.push(format!(
                "replica {} is not streaming (not ready)",
                member.name
            ));
            continue;
        }
        match member.lag_bytes {
            Some(lag) if lag > max_lag => refused.push(format!(
                "replica {} lags {lag} bytes, more than guards.maxLagBytes ({max_lag})",
                member.name
            )),
            Some(_) => {}
            None => refused.push(format!("replica {} reports no lag", member.name)),
        }
    }
    refused
}
