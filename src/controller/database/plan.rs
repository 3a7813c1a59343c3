//! The pure decision for one Database pass: given the spec and what validation
//! found, which phase and conditions it should show. No I/O.

use crate::api::status::DatabasePhase;
use crate::api::v1::Database;
use crate::api::validate::{self, FieldError};
use crate::controller::conditions::{DEGRADED, Desired, PROGRESSING, READY};

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub phase: DatabasePhase,
    pub conditions: Vec<Desired>,
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
        let errors = validate::database(&db);
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
