//! The CEL rules and OpenAPI constraints in the generated schema, evaluated
//! client-side with kube's CEL interpreter: the rules the API server enforces at
//! admission, tested without one. (The e2e suite checks the same against a real
//! API server.)

use serde_json::json;

use super::arbitrary::sample_database;
use super::v1::{self, BackupConfig, ReplicationMode};

fn cel_messages(result: Result<(), kube::core::cel::ValidationErrors>) -> String {
    match result {
        Ok(()) => String::new(),
        Err(errors) => format!("{errors:?}"),
    }
}

#[test]
fn the_sample_passes_every_rule() {
    assert_eq!(cel_messages(sample_database().validate_cel()), "");
}

#[test]
fn sync_replication_needs_enough_instances() {
    let mut db = sample_database();
    db.spec.replication.mode = ReplicationMode::Sync;
    db.spec.replication.min_sync_replicas = 3;
    let messages = cel_messages(db.validate_cel());
    assert!(
        messages.contains("minSyncReplicas must be lower than spec.instances"),
        "{messages}"
    );
}

/// Whether a schedule has a store depends on the operator's default store,
/// which the schema cannot know: the webhook and the reconciler decide.
#[test]
fn a_schedule_without_a_store_is_left_to_the_webhook() {
    let mut db = sample_database();
    db.spec.backup = Some(BackupConfig {
        schedule: Some("0 2 * * *".into()),
        retention: Some("7d".into()),
        ..Default::default()
    });
    assert_eq!(cel_messages(db.validate_cel()), "");
    let errors = crate::api::validate::database(&db);
    assert!(
        errors.iter().any(
            |e| e.path == "spec.backup.objectStore" && e.message.contains("defaultObjectStore")
        ),
        "{errors:?}"
    );
}

#[test]
fn owned_parameters_are_refused() {
    let mut db = sample_database();
    db.spec
        .postgresql
        .parameters
        .insert("max_connections".into(), "200".into());
    assert_eq!(cel_messages(db.validate_cel()), "");
    db.spec
        .postgresql
        .parameters
        .insert("archive_command".into(), "/bin/true".into());
    let messages = cel_messages(db.validate_cel());
    assert!(
        messages.contains("spec.postgresql.parameters.archive_command is managed by Tusk"),
        "{messages}"
    );
    db.spec.postgresql.parameters.remove("archive_command");
    db.spec
        .postgresql
        .parameters
        .insert("Include_Dir".into(), "conf.d".into());
    let messages = cel_messages(db.validate_cel());
    assert!(
        messages
            .contains("spec.postgresql.parameters.Include_Dir is a configuration-file directive"),
        "{messages}"
    );
    // One refused entry at a time: the message names the first the API
    // server meets, in its own map order.
    db.spec.postgresql.parameters.remove("Include_Dir");
    db.spec
        .postgresql
        .parameters
        .insert("work_mem".into(), "8MB\nport = 1".into());
    let messages = cel_messages(db.validate_cel());
    assert!(
        messages.contains("spec.postgresql.parameters.work_mem has a value with a newline"),
        "{messages}"
    );
}

#[test]
fn bootstrap_is_immutable() {
    let old = sample_database();
    let mut new = old.clone();
    new.spec.bootstrap = Some(v1::BootstrapSpec {
        initdb: Some(v1::InitdbSpec::default()),
        recovery: None,
    });
    let messages = cel_messages(new.validate_cel_update(&old));
    assert!(
        messages.contains("spec.bootstrap is immutable"),
        "{messages}"
    );
    // On create there is no old object and the rule does not apply.
    assert_eq!(cel_messages(new.validate_cel()), "");
}

/// The recovery rules the schema holds (the webhook's copies are in
/// `validate`): not exactly one source, a store with `source`, a time and
/// an LSN together; a malformed time is the `date-time` format's (see
/// `the_schema_pins_types_ranges_and_formats`) and the webhook's.
#[test]
fn recovery_rules_refuse_naming_the_field() {
    let recovering = |recovery: v1::RecoverySpec| {
        let mut db = sample_database();
        db.spec.bootstrap = Some(v1::BootstrapSpec {
            initdb: None,
            recovery: Some(recovery),
        });
        cel_messages(db.validate_cel())
    };
    let store = v1::ObjectStore {
        bucket: "b".into(),
        ..Default::default()
    };
    let cases = [
        (
            v1::RecoverySpec::default(),
            "spec.bootstrap.recovery must name exactly one of backup, source or sourceName",
        ),
        (
            v1::RecoverySpec {
                source: Some("orders".into()),
                source_name: Some("orders".into()),
                ..Default::default()
            },
            "spec.bootstrap.recovery must name exactly one of backup, source or sourceName",
        ),
        (
            v1::RecoverySpec {
                source: Some("orders".into()),
                object_store: Some(store.clone()),
                ..Default::default()
            },
            "spec.bootstrap.recovery.objectStore is not used with source",
        ),
        (
            v1::RecoverySpec {
                backup: Some("nightly".into()),
                target_time: Some("2026-11-22T10:00:00Z".into()),
                target_lsn: Some("0/3000000".into()),
                ..Default::default()
            },
            "spec.bootstrap.recovery may set targetTime or targetLsn, not both",
        ),
    ];
    let wrong: Vec<String> = cases
        .into_iter()
        .filter_map(|(recovery, message)| {
            let messages = recovering(recovery.clone());
            (!messages.contains(message)).then(|| format!("{recovery:?} gave {messages:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    let fine = v1::RecoverySpec {
        source_name: Some("orders".into()),
        object_store: Some(store),
        target_lsn: Some("0/3000000".into()),
        ..Default::default()
    };
    assert_eq!(recovering(fine), "");
}

#[test]
fn bootstrap_sets_exactly_one_method() {
    let mut db = sample_database();
    db.spec.bootstrap = Some(v1::BootstrapSpec::default());
    let messages = cel_messages(db.validate_cel());
    assert!(
        messages.contains("exactly one of initdb or recovery"),
        "{messages}"
    );
}

#[test]
fn a_backup_spec_is_immutable() {
    let old = v1::Backup::new(
        "nightly",
        v1::BackupSpec {
            database: "orders".into(),
            target: v1::BackupTarget::PreferStandby,
        },
    );
    let mut new = old.clone();
    new.spec.database = "other".into();
    let messages = cel_messages(new.validate_cel_update(&old));
    assert!(messages.contains("immutable"), "{messages}");
}

#[test]
fn the_schema_pins_types_ranges_and_formats() {
    let crd = super::crd::all(&super::crd::WebhookService::default()).unwrap();
    let database = crd
        .iter()
        .find(|c| c.spec.names.kind == "Database")
        .unwrap();
    let v1 = database
        .spec
        .versions
        .iter()
        .find(|v| v.name == "v1")
        .unwrap();
    let schema = serde_json::to_value(&v1.schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(spec["instances"]["minimum"], json!(1.0));
    assert_eq!(spec["instances"]["maximum"], json!(16.0));
    assert_eq!(spec["instances"]["type"], "integer");
    assert!(
        spec["version"]["pattern"]
            .as_str()
            .unwrap()
            .starts_with("^(1[3-9])")
    );
    assert_eq!(
        spec["replication"]["properties"]["mode"]["enum"],
        json!(["async", "sync"])
    );
    assert_eq!(
        schema["properties"]["spec"]["required"],
        json!(["storage", "version"])
    );
}

/// `spec.expose`: which fields each type takes, and one entry per target and
/// type, in the schema (the webhook says the same: [`super::expose::errors`]).
mod expose {
    use super::*;
    use crate::api::expose::{ExposeSpec, ExposeTarget, ExposeType};

    fn entry(target: ExposeTarget, type_: ExposeType) -> ExposeSpec {
        ExposeSpec {
            target,
            type_,
            allowed_source_ranges: match type_ {
                ExposeType::LoadBalancer => vec!["192.0.2.0/24".into()],
                ExposeType::NodePort => Vec::new(),
            },
            annotations: Default::default(),
            hostname: None,
            load_balancer_class: None,
            external_traffic_policy: None,
            node_port: None,
        }
    }

    fn messages(expose: Vec<ExposeSpec>) -> String {
        let mut db = sample_database();
        db.spec.expose = expose;
        cel_messages(db.validate_cel())
    }

    #[test]
    fn one_of_each_target_and_type_passes() {
        let all = [ExposeTarget::Rw, ExposeTarget::Ro, ExposeTarget::R]
            .into_iter()
            .flat_map(|t| {
                [
                    entry(t, ExposeType::LoadBalancer),
                    entry(t, ExposeType::NodePort),
                ]
            })
            .collect();
        assert_eq!(messages(all), "");
    }

    #[test]
    fn a_load_balancer_without_source_ranges_is_refused() {
        let mut open = entry(ExposeTarget::Rw, ExposeType::LoadBalancer);
        open.allowed_source_ranges.clear();
        let messages = messages(vec![open]);
        assert!(
            messages.contains("is required for type LoadBalancer"),
            "{messages}"
        );
    }

    #[test]
    fn fields_of_the_other_type_are_refused() {
        let mut lb = entry(ExposeTarget::Rw, ExposeType::LoadBalancer);
        lb.node_port = Some(30_000);
        let got = messages(vec![lb]);
        assert!(got.contains("is only for type NodePort"), "{got}");

        let mut np = entry(ExposeTarget::Rw, ExposeType::NodePort);
        np.load_balancer_class = Some("example.com/vip".into());
        let got = messages(vec![np]);
        assert!(got.contains("is only for type LoadBalancer"), "{got}");

        let mut np = entry(ExposeTarget::Rw, ExposeType::NodePort);
        np.allowed_source_ranges = vec!["192.0.2.0/24".into()];
        let got = messages(vec![np]);
        assert!(got.contains("is not supported for type NodePort"), "{got}");
    }

    #[test]
    fn two_entries_with_the_same_target_and_type_are_refused() {
        let got = messages(vec![
            entry(ExposeTarget::Rw, ExposeType::NodePort),
            entry(ExposeTarget::Ro, ExposeType::NodePort),
            entry(ExposeTarget::Rw, ExposeType::NodePort),
        ]);
        assert!(
            got.contains("at most one entry per target and type"),
            "{got}"
        );
    }

    /// The API server refuses a CRD whose rules it estimates over budget; an
    /// unbounded list under a quadratic rule is how that happens.
    #[test]
    fn the_lists_the_rules_walk_are_bounded() {
        let schema =
            serde_json::to_value(schemars::schema_for!(v1::DatabaseSpec)).expect("a schema");
        let text = schema.to_string();
        let expose = &schema["properties"]["expose"];
        assert_eq!(expose["maxItems"], 6, "{text}");
        let rules = expose["x-kubernetes-validations"].to_string();
        assert!(rules.contains("exists_one"), "{rules}");
    }
}

/// The Drill's rules the schema holds (the rest are
/// [`crate::api::validate_drill`]'s): its bounds, what may not change, an
/// abort deadline past the fault, an outage bound above 0.
mod drill {
    use super::*;
    use crate::api::arbitrary::sample_drill;
    use crate::api::drill::{defaults, rules};
    use crate::api::v1::Scenario;

    #[test]
    fn the_sample_passes_every_rule() {
        assert_eq!(cel_messages(sample_drill().validate_cel()), "");
    }

    #[test]
    fn database_and_scenario_are_immutable_the_rest_is_not() {
        let old = sample_drill();
        let mut moved = old.clone();
        moved.spec.database = "payments".into();
        let got = cel_messages(moved.validate_cel_update(&old));
        assert!(got.contains(rules::DATABASE_IMMUTABLE), "{got}");
        let mut other = old.clone();
        other.spec.scenario = Scenario::KillPostgres;
        let got = cel_messages(other.validate_cel_update(&old));
        assert!(got.contains(rules::SCENARIO_IMMUTABLE), "{got}");
        let mut retimed = old.clone();
        retimed.spec.schedule = Some("0 3 * * 1".into());
        retimed.spec.window_minutes = Some(30);
        retimed.spec.dry_run = true;
        retimed.spec.expect.max_lost_writes = Some(2);
        retimed.spec.guards.max_backup_age_hours = Some(24);
        retimed.spec.abort_after_seconds = Some(600);
        assert_eq!(cel_messages(retimed.validate_cel_update(&old)), "");
    }

    #[test]
    fn an_abort_deadline_inside_the_fault_is_refused_with_the_defaults_too() {
        let holding = |scenario: Scenario, duration: Option<u32>, abort: Option<u32>| {
            let mut drill = sample_drill();
            drill.spec.scenario = scenario;
            drill.spec.duration_seconds = duration;
            drill.spec.abort_after_seconds = abort;
            cel_messages(drill.validate_cel())
        };
        let refused = [
            (Scenario::FreezePrimary, Some(60), Some(60)),
            (Scenario::StoreOutage, Some(400), None),
            (
                Scenario::PartitionPrimary,
                None,
                Some(defaults::DURATION_SECONDS),
            ),
        ];
        for (scenario, duration, abort) in refused {
            let got = holding(scenario, duration, abort);
            assert!(
                got.contains(rules::ABORT_AFTER_THE_FAULT),
                "{scenario} {duration:?} {abort:?}: {got:?}"
            );
        }
        assert_eq!(holding(Scenario::FreezePrimary, Some(60), Some(61)), "");
        assert_eq!(holding(Scenario::StoreOutage, Some(299), None), "");
        // A scenario that holds no fault ignores durationSeconds.
        assert_eq!(holding(Scenario::KillPostgres, Some(400), None), "");
    }

    #[test]
    fn an_outage_bound_of_zero_is_refused() {
        let mut drill = sample_drill();
        drill.spec.expect.max_write_outage_seconds = Some(0.0);
        let got = cel_messages(drill.validate_cel());
        assert!(got.contains(rules::OUTAGE_ABOVE_ZERO), "{got}");
        drill.spec.expect.max_write_outage_seconds = Some(0.5);
        assert_eq!(cel_messages(drill.validate_cel()), "");
    }

    #[test]
    fn a_long_name_is_refused() {
        let mut drill = sample_drill();
        drill.metadata.name = Some("d".repeat(rules::MAX_NAME_LEN + 1));
        let got = cel_messages(drill.validate_cel());
        assert!(got.contains(rules::NAME_FITS), "{got}");
        drill.metadata.name = Some("d".repeat(rules::MAX_NAME_LEN));
        assert_eq!(cel_messages(drill.validate_cel()), "");
    }

    /// The messages quote the numbers the rules are built from.
    #[test]
    fn the_messages_quote_the_constants() {
        assert!(rules::NAME_FITS.contains(&format!("at most {} characters", rules::MAX_NAME_LEN)));
        assert!(rules::ABORT_AFTER_THE_FAULT.contains(&format!(
            "defaults {} and {}",
            defaults::ABORT_AFTER_SECONDS,
            defaults::DURATION_SECONDS
        )));
    }

    #[test]
    fn the_schema_bounds_every_number_and_lists_the_scenarios() {
        let crd = super::super::crd::all(&super::super::crd::WebhookService::default()).unwrap();
        let drill = crd.iter().find(|c| c.spec.names.kind == "Drill").unwrap();
        let v1 = drill.spec.versions.iter().find(|v| v.name == "v1").unwrap();
        let schema = serde_json::to_value(&v1.schema.as_ref().unwrap().open_api_v3_schema).unwrap();
        let spec = &schema["properties"]["spec"]["properties"];
        let bounds = |p: &serde_json::Value| (p["minimum"].clone(), p["maximum"].clone());
        assert_eq!(bounds(&spec["durationSeconds"]), (json!(1.0), json!(600.0)));
        assert_eq!(bounds(&spec["windowMinutes"]), (json!(1.0), json!(1440.0)));
        assert_eq!(
            bounds(&spec["abortAfterSeconds"]),
            (json!(30.0), json!(3600.0))
        );
        assert_eq!(
            spec["expect"]["properties"]["maxLostWrites"]["minimum"],
            json!(0.0)
        );
        let scenarios: Vec<&str> = Scenario::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(spec["scenario"]["enum"], json!(scenarios));
        assert_eq!(
            schema["properties"]["spec"]["required"],
            json!(["database", "scenario"])
        );
    }
}
