//! The pure decision for one Database pass: validation first (an invalid spec
//! touches nothing), then the lifecycle's plan turned into the status to show.
//! No I/O.

use crate::api::status::{AppliedSpec, DatabasePhase, InstanceStatus};
use crate::api::v1::Database;
use crate::api::validate::{self, FieldError};
use crate::controller::conditions::{DEGRADED, Desired, PROGRESSING, READY};
use crate::lifecycle;

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub phase: DatabasePhase,
    pub conditions: Vec<Desired>,
    /// What to record as accepted: the spec when valid, else what was accepted before.
    pub applied: Option<AppliedSpec>,
    /// `status.currentPrimary`; `None` keeps the recorded one.
    pub current_primary: Option<String>,
    /// `status.instances`; `None` keeps the recorded ones.
    pub instances: Option<Vec<InstanceStatus>>,
}

/// Everything the reconciler checks before acting: the spec on its own, and the
/// spec against what Tusk last accepted (so a downgrade or a shrink that reached
/// the API server while the webhook was down is still refused).
pub fn validate(db: &Database) -> Vec<FieldError> {
    let mut errors = validate::database(db);
    if let Some(applied) = db.status.as_ref().and_then(|s| s.applied.as_ref()) {
        errors.extend(validate::against_applied(&db.spec, applied));
    }
    errors
}

/// The status of `db` when its spec is invalid: Tusk changes nothing, says which
/// field is wrong in the Ready condition, keeps the phase, and waits for the user.
pub fn invalid(db: &Database, errors: &[FieldError]) -> Plan {
    let phase = db
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .unwrap_or(DatabasePhase::Pending);
    Plan {
        phase,
        applied: db.status.as_ref().and_then(|s| s.applied.clone()),
        conditions: vec![
            Desired::new(READY, false, "InvalidSpec", validate::summary(errors)),
            Desired::new(
                PROGRESSING,
                false,
                "InvalidSpec",
                "waiting for the spec to be corrected",
            ),
            Desired::new(DEGRADED, false, "InvalidSpec", "no instance is affected"),
        ],
        current_primary: None,
        instances: None,
    }
}

/// The status of a valid `db` from the lifecycle's decision and the instances
/// as observed.
pub fn accepted(db: &Database, decision: &lifecycle::Plan, instances: Vec<InstanceStatus>) -> Plan {
    Plan {
        phase: decision.phase,
        conditions: decision.conditions.clone(),
        applied: Some(AppliedSpec {
            version: db.spec.version.clone(),
            storage_size: db.spec.storage.size.clone(),
        }),
        current_primary: decision.current_primary.clone(),
        instances: Some(instances),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;

    #[test]
    fn a_downgrade_that_bypassed_the_webhook_is_refused_and_not_recorded() {
        let mut db = sample_database();
        let accepted = accepted(&db, &sample_decision(), Vec::new()).applied;
        db.status = Some(crate::api::status::DatabaseStatus {
            applied: accepted.clone(),
            ..Default::default()
        });
        db.spec.version = "15".into();
        let errors = validate(&db);
        let next = invalid(&db, &errors);
        assert_eq!(next.conditions[0].reason, "InvalidSpec");
        assert!(
            next.conditions[0]
                .message
                .contains("spec.version: cannot go down"),
            "{}",
            next.conditions[0].message
        );
        assert_eq!(
            next.applied, accepted,
            "the refused spec must not become the new baseline"
        );
    }

    fn sample_decision() -> lifecycle::Plan {
        let db = sample_database();
        let observed = lifecycle::Observed {
            database: "orders".into(),
            ..Default::default()
        };
        lifecycle::plan(&db.spec, None, &observed)
    }

    #[test]
    fn a_valid_new_database_starts_provisioning_and_records_the_spec() {
        let db = sample_database();
        let plan = accepted(&db, &sample_decision(), Vec::new());
        assert_eq!(plan.phase, DatabasePhase::Provisioning);
        assert_eq!(plan.conditions[0].type_, READY);
        assert!(!plan.conditions[0].status);
        assert_eq!(
            plan.applied.map(|a| a.version),
            Some(db.spec.version.clone())
        );
    }

    #[test]
    fn an_invalid_spec_names_the_field_and_keeps_the_phase() {
        let mut db = sample_database();
        db.spec.instances = 0;
        db.status = Some(crate::api::status::DatabaseStatus {
            phase: Some(DatabasePhase::Ready),
            ..Default::default()
        });
        let errors = validate(&db);
        let plan = invalid(&db, &errors);
        assert_eq!(plan.phase, DatabasePhase::Ready);
        assert_eq!(plan.conditions[0].reason, "InvalidSpec");
        assert!(
            plan.conditions[0].message.starts_with("spec.instances:"),
            "{}",
            plan.conditions[0].message
        );
    }
}
