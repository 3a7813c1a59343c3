//! A Drill's rules beyond the schema (pure): the ones that need the Database
//! it names or a cron parser. The admission webhook (`/validate/drill`) and
//! the drill controller call the same functions, so a Drill admitted while
//! the webhook was down still cannot start a run it should not. The schema's
//! own rules (bounds, what may not change, an abort deadline past the fault,
//! an outage bound above 0) are in [`super::drill::rules`].

use super::drill::Drill;
use super::field::FieldError;
use super::v1::Database;
use super::validate::parse_schedule;

/// Every problem with `drill`, given the Database it names as found in its
/// namespace (with the operator's default store folded in), or `None`.
pub fn errors(drill: &Drill, database: Option<&Database>) -> Vec<FieldError> {
    let spec = &drill.spec;
    let mut errors = Vec::new();
    if let Some(schedule) = &spec.schedule
        && let Err(e) = parse_schedule(schedule)
    {
        errors.push(FieldError::new("spec.schedule", e));
    }
    let Some(db) = database else {
        errors.push(FieldError::new(
            "spec.database",
            format!("no Database {:?} in this namespace", spec.database),
        ));
        return errors;
    };
    let needed = spec.scenario.min_instances();
    if db.spec.instances < needed {
        errors.push(FieldError::new(
            "spec.scenario",
            format!(
                "{} needs a Database with at least {needed} instances, and {} has {}: \
                 there is no replica to {}",
                spec.scenario,
                spec.database,
                db.spec.instances,
                if spec.scenario == super::drill::Scenario::KillReplica {
                    "kill"
                } else {
                    "take over"
                }
            ),
        ));
    }
    let has_store = db
        .spec
        .backup
        .as_ref()
        .is_some_and(|b| b.object_store.is_some());
    if spec.scenario.needs_a_store() && !has_store {
        errors.push(FieldError::new(
            "spec.scenario",
            format!(
                "{} needs a Database with an object store, and {} has none (spec.backup.objectStore, or the operator's default)",
                spec.scenario, spec.database
            ),
        ));
    }
    if spec.guards.max_backup_age_hours.is_some() && !has_store {
        errors.push(FieldError::new(
            "spec.guards.maxBackupAgeHours",
            format!(
                "Database {} has no object store (spec.backup.objectStore, or the operator's \
                 default), so no backup can ever meet this guard",
                spec.database
            ),
        ));
    }
    errors
}

/// What is legal but deserves a second look: fields the scenario ignores.
pub fn warnings(drill: &Drill) -> Vec<String> {
    let spec = &drill.spec;
    let mut warnings = Vec::new();
    if let Some(seconds) = spec.duration_seconds
        && !spec.scenario.holds_a_fault()
    {
        warnings.push(format!(
            "spec.durationSeconds ({seconds}) is ignored: {} holds no fault for a set time",
            spec.scenario
        ));
    }
    if let Some(minutes) = spec.window_minutes
        && spec.schedule.is_none()
    {
        warnings.push(format!(
            "spec.windowMinutes ({minutes}) is ignored without spec.schedule: the drill runs once, now"
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::{sample_database, sample_drill};
    use crate::api::v1::{BackupConfig, ObjectStore, Scenario};

    fn paths(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn the_sample_is_valid() {
        assert_eq!(errors(&sample_drill(), Some(&sample_database())), []);
        assert_eq!(warnings(&sample_drill()), Vec::<String>::new());
    }

    #[test]
    fn a_missing_database_is_named() {
        let got = errors(&sample_drill(), None);
        assert_eq!(
            got.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["spec.database: no Database \"orders\" in this namespace"]
        );
    }

    #[test]
    fn a_schedule_that_does_not_parse_is_named() {
        let mut drill = sample_drill();
        drill.spec.schedule = Some("every monday".into());
        let got = errors(&drill, Some(&sample_database()));
        assert_eq!(paths(&got), ["spec.schedule"], "{got:?}");
        drill.spec.schedule = Some("0 3 * * 1".into());
        assert_eq!(errors(&drill, Some(&sample_database())), []);
        drill.spec.schedule = Some("@weekly".into());
        assert_eq!(errors(&drill, Some(&sample_database())), []);
    }

    #[test]
    fn scenarios_that_need_a_replica_are_refused_on_one_instance() {
        let mut single = with_store();
        single.spec.instances = 1;
        let refused: Vec<Scenario> = Scenario::ALL
            .into_iter()
            .filter(|scenario| {
                let mut drill = sample_drill();
                drill.spec.scenario = *scenario;
                let got = errors(&drill, Some(&single));
                assert!(
                    got.iter().all(|e| e.path == "spec.scenario"),
                    "{scenario}: {got:?}"
                );
                !got.is_empty()
            })
            .collect();
        assert_eq!(
            refused,
            [
                Scenario::Switchover,
                Scenario::DeletePrimaryPod,
                Scenario::KillPostgres,
                Scenario::FreezePrimary,
                Scenario::PartitionPrimary,
                Scenario::KillReplica,
            ]
        );
        let mut drill = sample_drill();
        drill.spec.scenario = Scenario::PartitionPrimary;
        assert_eq!(
            errors(&drill, Some(&single))[0].to_string(),
            "spec.scenario: partition-primary needs a Database with at least 2 instances, \
             and orders has 1: there is no replica to take over"
        );
    }

    #[test]
    fn store_scenarios_need_an_object_store() {
        let mut drill = sample_drill();
        for scenario in [Scenario::StoreOutage, Scenario::Restore] {
            drill.spec.scenario = scenario;
            let got = errors(&drill, Some(&sample_database()));
            assert_eq!(
                got.iter().map(ToString::to_string).collect::<Vec<_>>(),
                [format!(
                    "spec.scenario: {scenario} needs a Database with an object store, and orders \
                     has none (spec.backup.objectStore, or the operator's default)"
                )]
            );
            assert_eq!(errors(&drill, Some(&with_store())), []);
        }
    }

    fn with_store() -> crate::api::v1::Database {
        let mut stored = sample_database();
        stored.spec.backup = Some(BackupConfig {
            object_store: Some(ObjectStore {
                bucket: "b".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        stored
    }

    #[test]
    fn a_backup_guard_needs_an_object_store() {
        let mut drill = sample_drill();
        drill.spec.guards.max_backup_age_hours = Some(24);
        let got = errors(&drill, Some(&sample_database()));
        assert_eq!(paths(&got), ["spec.guards.maxBackupAgeHours"]);
        let stored = with_store();
        assert_eq!(errors(&drill, Some(&stored)), []);
    }

    #[test]
    fn ignored_fields_warn() {
        let mut drill = sample_drill();
        drill.spec.duration_seconds = Some(30);
        drill.spec.window_minutes = Some(10);
        assert_eq!(
            warnings(&drill),
            [
                "spec.durationSeconds (30) is ignored: switchover holds no fault for a set time",
                "spec.windowMinutes (10) is ignored without spec.schedule: the drill runs once, now"
            ]
        );
        drill.spec.scenario = Scenario::FreezePrimary;
        drill.spec.schedule = Some("@daily".into());
        assert_eq!(warnings(&drill), Vec::<String>::new());
    }
}
