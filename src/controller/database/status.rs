//! The Database status for one pass (pure): built whole from the pass's
//! [`NextStatus`] and the previous status, as the body the controller
//! writes with server-side apply.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::plan::NextStatus;
use crate::api::status::DatabaseStatus;
use crate::api::v1::Database;
use crate::controller::conditions;

/// Computes the status from the plan and the previous status (pure).
pub fn build(db: &Database, plan: &NextStatus, now: &Time) -> DatabaseStatus {
    let previous = db.status.clone().unwrap_or_default();
    let generation = db.metadata.generation;
    let instances = plan.instances.clone().unwrap_or(previous.instances.clone());
    let ready_instances = match &plan.instances {
        Some(list) => Some(i32::try_from(list.iter().filter(|i| i.ready).count()).unwrap_or(0)),
        None => previous.ready_instances,
    };
    DatabaseStatus {
        phase: Some(plan.phase),
        observed_generation: generation,
        conditions: conditions::merge(&previous.conditions, &plan.conditions, generation, now),
        applied: plan.applied.clone(),
        current_primary: plan
            .current_primary
            .clone()
            .or(previous.current_primary.clone()),
        target_primary: plan
            .target_primary
            .clone()
            .or(previous.target_primary.clone()),
        ready_instances,
        instances,
        last_backup: plan.last_backup.clone().or(previous.last_backup.clone()),
        last_failover: plan
            .last_failover
            .clone()
            .or(previous.last_failover.clone()),
        upgrade: plan.upgrade.clone(),
        migrations: plan.migrations.clone().or(previous.migrations.clone()),
        resources: plan.resources.clone().or(previous.resources.clone()),
        // Kept until the controller computes it (the TLS wiring, #27).
        tls: plan.tls.clone().or(previous.tls.clone()),
        // Kept until a pass observes the published endpoints.
        endpoints: plan
            .endpoints
            .clone()
            .unwrap_or_else(|| previous.endpoints.clone()),
        history: super::history::append(&previous.history, &plan.history),
    }
}

/// `status` without the figures that move with every write (each instance's
/// LSN and lag). When only those differ, a status write can wait: every write
/// wakes the controller again, and under load they would differ on every pass.
pub fn without_progress(status: &DatabaseStatus) -> DatabaseStatus {
    let mut status = status.clone();
    for instance in &mut status.instances {
        instance.lsn = None;
        instance.lag_bytes = None;
        instance.lag_milliseconds = None;
    }
    status
}

/// The server-side apply body for the status subresource.
pub fn patch_body(status: &DatabaseStatus) -> serde_json::Value {
    json!({
        "apiVersion": "tusk.dev/v1",
        "kind": "Database",
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::InstanceStatus;

    #[test]
    fn progress_figures_are_all_that_without_progress_drops() {
        let status = DatabaseStatus {
            ready_instances: Some(1),
            instances: vec![InstanceStatus {
                name: "orders-1".into(),
                ready: true,
                lsn: Some("0/3000060".into()),
                lag_bytes: Some(0),
                ..InstanceStatus::default()
            }],
            ..DatabaseStatus::default()
        };
        let mut moved = status.clone();
        moved.instances[0].lsn = Some("0/4000000".into());
        moved.instances[0].lag_milliseconds = Some(250);
        assert_eq!(without_progress(&status), without_progress(&moved));
        let mut changed = status.clone();
        changed.instances[0].ready = false;
        assert_ne!(without_progress(&status), without_progress(&changed));
    }
}
