//! The status one Database pass writes (pure): validation first (an invalid
//! spec touches nothing and says which field is wrong), else the lifecycle's
//! plan with what was observed of the instances.

use crate::api::model::{Defaults, ValidatedDatabase};
use crate::api::resources::ResourcesStatus;
use crate::api::status::{
    AppliedSpec, DatabasePhase, InstanceStatus, LastBackup, LastFailover, MigrationsStatus,
    UpgradeStatus,
};
use crate::api::v1::Database;
use crate::api::validate::{self, FieldError};
use crate::controller::conditions::{DEGRADED, Desired, PROGRESSING, READY};
use crate::lifecycle;

/// What the next status write holds.
#[derive(Clone, Debug, PartialEq)]
pub struct NextStatus {
    pub phase: DatabasePhase,
    pub conditions: Vec<Desired>,
    /// `status.applied`: what is observed in effect, else what was recorded.
    pub applied: Option<AppliedSpec>,
    /// `status.currentPrimary`; `None` keeps the recorded one.
    pub current_primary: Option<String>,
    /// `status.targetPrimary`; `None` keeps the recorded one.
    pub target_primary: Option<String>,
    /// `status.instances`; `None` keeps the recorded ones.
    pub instances: Option<Vec<InstanceStatus>>,
    /// `status.lastBackup`; `None` keeps the recorded one.
    pub last_backup: Option<LastBackup>,
    /// `status.lastFailover`; `None` keeps the recorded one.
    pub last_failover: Option<LastFailover>,
    /// `status.upgrade`.
    pub upgrade: Option<UpgradeStatus>,
    /// `status.migrations`; `None` keeps the recorded one.
    pub migrations: Option<MigrationsStatus>,
    /// `status.resources`; `None` keeps the recorded one.
    pub resources: Option<ResourcesStatus>,
    /// `status.tls`; `None` keeps the recorded one.
    pub tls: Option<crate::api::tls::TlsStatus>,
    /// `status.endpoints`; `None` keeps the recorded ones.
    pub endpoints: Option<Vec<crate::api::expose::EndpointStatus>>,
    /// What this pass adds to `status.history` (see [`super::history`]).
    pub history: Vec<crate::api::status::HistoryEntry>,
}

/// Everything the reconciler checks before acting: the spec on its own (as
/// the webhook does, [`validate::validated`]), and the spec against what is
/// in effect (so a downgrade or a shrink that reached the API server while
/// the webhook was down is still refused). Valid, it is the model the
/// builders take.
pub fn validate(
    db: &Database,
    defaults: &Defaults<'_>,
) -> Result<ValidatedDatabase, Vec<FieldError>> {
    let against_applied = db
        .status
        .as_ref()
        .and_then(|s| s.applied.as_ref())
        .map(|applied| validate::against_applied(&db.spec, applied))
        .unwrap_or_default();
    match validate::validated(db, defaults) {
        Ok(model) if against_applied.is_empty() => Ok(model),
        Ok(_) => Err(against_applied),
        Err(mut errors) => {
            errors.extend(against_applied);
            Err(errors)
        }
    }
}

/// The status of `db` when its spec is invalid: Tusk changes nothing, says which
/// field is wrong in the Ready condition, and waits for the user (`Blocked`).
pub fn invalid(db: &Database, errors: &[FieldError]) -> NextStatus {
    NextStatus {
        phase: DatabasePhase::Blocked,
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
        target_primary: None,
        instances: None,
        last_backup: None,
        last_failover: None,
        upgrade: db.status.as_ref().and_then(|s| s.upgrade.clone()),
        migrations: None,
        resources: None,
        tls: None,
        endpoints: None,
        history: Vec::new(),
    }
}

/// The status of `db` while its deletion waits (for its final backup): the
/// phase and conditions the plan names; everything else as recorded.
pub fn deleting(db: &Database, decision: &lifecycle::Plan) -> NextStatus {
    NextStatus {
        phase: decision.phase,
        conditions: decision.conditions.clone(),
        applied: db.status.as_ref().and_then(|s| s.applied.clone()),
        current_primary: None,
        target_primary: None,
        instances: None,
        last_backup: None,
        last_failover: None,
        upgrade: db.status.as_ref().and_then(|s| s.upgrade.clone()),
        migrations: None,
        resources: None,
        tls: None,
        endpoints: None,
        history: Vec::new(),
    }
}

/// The status of a valid `db` from the lifecycle's decision and what is observed.
pub fn accepted(
    decision: &lifecycle::Plan,
    instances: Vec<InstanceStatus>,
    applied: Option<AppliedSpec>,
) -> NextStatus {
    NextStatus {
        phase: decision.phase,
        conditions: decision.conditions.clone(),
        applied,
        current_primary: decision.current_primary.clone(),
        target_primary: decision.target_primary.clone(),
        instances: Some(instances),
        last_backup: decision.last_backup.clone(),
        last_failover: None,
        upgrade: decision.upgrade.clone(),
        migrations: decision.migrations.clone(),
        resources: None,
        tls: decision.tls.as_ref().map(|t| t.status.clone()),
        endpoints: decision.endpoints.clone(),
        history: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;

    fn defaults() -> Defaults<'static> {
        Defaults {
            store: None,
            postgres_repository: "postgres",
            node_ports: Default::default(),
        }
    }

    #[test]
    fn a_valid_spec_is_its_model() {
        let model = validate(&sample_database(), &defaults()).expect("valid");
        assert_eq!(model.name, "orders");
        assert_eq!(model.image, "postgres:17");
    }

    fn applied(version: &str, size: &str) -> AppliedSpec {
        AppliedSpec {
            version: version.into(),
            storage_size: size.into(),
            image: None,
        }
    }

    #[test]
    fn a_downgrade_that_bypassed_the_webhook_is_refused_and_not_recorded() {
        let mut db = sample_database();
        let before = Some(applied("17.6", "1Gi"));
        db.status = Some(crate::api::status::DatabaseStatus {
            applied: before.clone(),
            ..Default::default()
        });
        db.spec.version = "15".into();
        let errors = validate(&db, &defaults()).expect_err("a downgrade");
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
            next.applied, before,
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
    fn a_valid_new_database_starts_provisioning_and_records_what_is_observed() {
        let plan = accepted(&sample_decision(), Vec::new(), Some(applied("17", "1Gi")));
        assert_eq!(plan.phase, DatabasePhase::Provisioning);
        assert_eq!(plan.conditions[0].type_, READY);
        assert!(!plan.conditions[0].status);
        assert_eq!(plan.applied.map(|a| a.version), Some("17".to_owned()));
    }

    #[test]
    fn an_invalid_spec_names_the_field_and_blocks() {
        let mut db = sample_database();
        db.spec.instances = 0;
        db.status = Some(crate::api::status::DatabaseStatus {
            phase: Some(DatabasePhase::Ready),
            ..Default::default()
        });
        let errors = validate(&db, &defaults()).expect_err("no instance");
        let plan = invalid(&db, &errors);
        assert_eq!(plan.phase, DatabasePhase::Blocked);
        assert_eq!(plan.conditions[0].reason, "InvalidSpec");
        assert!(!plan.conditions[1].status, "nothing progresses");
        assert!(
            plan.conditions[0].message.starts_with("spec.instances:"),
            "{}",
            plan.conditions[0].message
        );
    }
}
