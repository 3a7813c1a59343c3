//! The pure decision for one Database pass: given the spec and what validation
//! found, which phase and conditions it should show. No I/O.

use crate::api::status::{AppliedSpec, DatabasePhase};
use crate::api::v1::Database;
use crate::api::validate::{self, FieldError};
use crate::controller::conditions::{DEGRADED, Desired, PROGRESSING, READY};

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub phase: DatabasePhase,
    pub conditions: Vec<Desired>,
    /// What to record as accepted: the spec when valid, else what was accepted before.
    pub applied: Option<AppliedSpec>,
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

/// Decides the status of `db` for this pass.
///
/// A spec that fails validation is a permanent error: Tusk changes nothing, says
/// which field is wrong in the Ready condition, and waits for the user. Instance
/// provisioning is not part of this build, so a valid Database stays `Pending` and
/// the Ready condition says so plainly.
pub fn plan(db: &Database, errors: &[FieldError]) -> Plan {
    let phase = db
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .unwrap_or(DatabasePhase::Pending);
    if !errors.is_empty() {
        return Plan {
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
        };
    }
    Plan {
        phase: DatabasePhase::Pending,
        applied: Some(AppliedSpec {
            version: db.spec.version.clone(),
            storage_size: db.spec.storage.size.clone(),
        }),
        conditions: vec![
            Desired::new(
                READY,
                false,
                "ProvisioningUnavailable",
                "the spec is valid; this Tusk build does not provision instances yet",
            ),
            Desired::new(
                PROGRESSING,
                false,
                "SpecAccepted",
                "nothing to do until provisioning is available",
            ),
            Desired::new(
                DEGRADED,
                false,
                "NoInstances",
                "no instance exists to be degraded",
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;

    #[test]
    fn a_downgrade_that_bypassed_the_webhook_is_refused_and_not_recorded() {
        let mut db = sample_database();
        let accepted = plan(&db, &validate(&db)).applied;
        db.status = Some(crate::api::status::DatabaseStatus {
            applied: accepted.clone(),
            ..Default::default()
        });
        db.spec.version = "15".into();
        let errors = validate(&db);
        let next = plan(&db, &errors);
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

    #[test]
    fn a_valid_database_waits_in_pending() {
        let plan = plan(&sample_database(), &[]);
        assert_eq!(plan.phase, DatabasePhase::Pending);
        assert_eq!(plan.conditions[0].type_, READY);
        assert!(!plan.conditions[0].status);
        assert_eq!(plan.conditions[0].reason, "ProvisioningUnavailable");
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
        let plan = plan(&db, &errors);
        assert_eq!(plan.phase, DatabasePhase::Ready);
        assert_eq!(plan.conditions[0].reason, "InvalidSpec");
        assert!(
            plan.conditions[0].message.starts_with("spec.instances:"),
            "{}",
            plan.conditions[0].message
        );
    }
}
