use super::migrations::*;
use crate::api::status::MigrationsStatus;
use crate::api::v1::MigrationsSpec;
use crate::lifecycle::{self, Action, JobState, MigrationJob, Verdict};
use crate::resources::migration_job_name;

fn spec(version: &str) -> MigrationsSpec {
    MigrationsSpec {
        version: version.into(),
        image: "app:1".into(),
        ..Default::default()
    }
}

fn record(applied: Option<&str>, running: Option<&str>, failed: Option<&str>) -> MigrationsStatus {
    MigrationsStatus {
        applied: applied.map(Into::into),
        running: running.map(Into::into),
        failed: failed.map(Into::into),
        message: failed.map(|v| format!("boom in {v}")),
    }
}

fn job(version: &str, state: JobState) -> MigrationJob {
    MigrationJob {
        name: migration_job_name("orders", version),
        version: version.into(),
        state,
        deleting: false,
    }
}

fn failed(why: &str) -> JobState {
    JobState::Failed(why.into())
}

fn reason(verdict: &Option<Verdict>) -> Option<&'static str> {
    match verdict {
        Some(Verdict::Progress { reason, .. }) => Some(reason),
        Some(Verdict::Blocked { reason, .. }) => Some(reason),
        Some(Verdict::Degraded { reason, .. }) => Some(reason),
        None => None,
    }
}

fn blocks(verdict: &Option<Verdict>) -> bool {
    matches!(verdict, Some(Verdict::Blocked { .. }))
}

struct Case {
    name: &'static str,
    spec: Option<&'static str>,
    recorded: Option<MigrationsStatus>,
    jobs: Vec<MigrationJob>,
    settled: bool,
    create: Option<&'static str>,
    delete: Vec<&'static str>,
    status: Option<MigrationsStatus>,
    verdict: Option<&'static str>,
    notes: Vec<&'static str>,
}

fn cases() -> Vec<Case> {
    use JobState::Running;
    let succeeded = || JobState::Succeeded(String::new());
    vec![
        Case {
            name: "the first version runs on a settled Database",
            spec: Some("1"),
            recorded: None,
            jobs: vec![],
            settled: true,
            create: Some("1"),
            delete: vec![],
            status: Some(record(None, Some("1"), None)),
            verdict: Some("Migrating"),
            notes: vec![],
        },
        Case {
            name: "nothing starts while the Database is not settled",
            spec: Some("1"),
            recorded: None,
            jobs: vec![],
            settled: false,
            create: None,
            delete: vec![],
            status: None,
            verdict: None,
            notes: vec![],
        },
        Case {
            name: "the applied version does not run again",
            spec: Some("1"),
            recorded: Some(record(Some("1"), None, None)),
            jobs: vec![],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("1"), None, None)),
            verdict: None,
            notes: vec![],
        },
        Case {
            name: "a running Job is watched, whatever the phase",
            spec: Some("2"),
            recorded: Some(record(Some("1"), Some("2"), None)),
            jobs: vec![job("2", Running)],
            settled: false,
            create: None,
            delete: vec![],
            status: Some(record(Some("1"), Some("2"), None)),
            verdict: Some("Migrating"),
            notes: vec![],
        },
        Case {
            name: "a success is recorded once, and the Job kept",
            spec: Some("2"),
            recorded: Some(record(Some("1"), Some("2"), None)),
            jobs: vec![job("2", succeeded())],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("2"), None, None)),
            verdict: None,
            notes: vec!["MigrationSucceeded"],
        },
        Case {
            name: "a recorded success says nothing more",
            spec: Some("2"),
            recorded: Some(record(Some("2"), None, None)),
            jobs: vec![job("2", succeeded())],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("2"), None, None)),
            verdict: None,
            notes: vec![],
        },
        Case {
            name: "a failure keeps the applied version and blocks",
            spec: Some("2"),
            recorded: Some(record(Some("1"), Some("2"), None)),
            jobs: vec![job("2", failed("boom in 2"))],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("1"), None, Some("2"))),
            verdict: Some("MigrationFailed"),
            notes: vec!["MigrationFailed"],
        },
        Case {
            name: "a recorded failure is not retried",
            spec: Some("2"),
            recorded: Some(record(Some("1"), None, Some("2"))),
            jobs: vec![job("2", failed(""))],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("1"), None, Some("2"))),
            verdict: Some("MigrationFailed"),
            notes: vec![],
        },
        Case {
            name: "nor when its Job was deleted",
            spec: Some("2"),
            recorded: Some(record(Some("1"), None, Some("2"))),
            jobs: vec![],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("1"), None, Some("2"))),
            verdict: Some("MigrationFailed"),
            notes: vec![],
        },
        Case {
            name: "a new version after a failure runs",
            spec: Some("3"),
            recorded: Some(record(Some("1"), None, Some("2"))),
            jobs: vec![job("2", failed(""))],
            settled: true,
            create: Some("3"),
            delete: vec!["2"],
            status: Some(MigrationsStatus {
                running: Some("3".into()),
                ..record(Some("1"), None, Some("2"))
            }),
            verdict: Some("Migrating"),
            notes: vec![],
        },
        Case {
            name: "a newer success clears the failure",
            spec: Some("3"),
            recorded: Some(MigrationsStatus {
                running: Some("3".into()),
                ..record(Some("1"), None, Some("2"))
            }),
            jobs: vec![job("3", succeeded())],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("3"), None, None)),
            verdict: None,
            notes: vec!["MigrationSucceeded"],
        },
        Case {
            name: "a version changed while another runs waits for it",
            spec: Some("3"),
            recorded: Some(record(Some("1"), Some("2"), None)),
            jobs: vec![job("2", Running)],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("1"), Some("2"), None)),
            verdict: Some("Migrating"),
            notes: vec![],
        },
        Case {
            name: "the older Job's outcome is recorded before it goes",
            spec: Some("3"),
            recorded: Some(record(Some("1"), Some("2"), None)),
            jobs: vec![job("2", succeeded())],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("2"), None, None)),
            verdict: Some("Migrating"),
            notes: vec!["MigrationSucceeded"],
        },
        Case {
            name: "then it goes and the new version starts",
            spec: Some("3"),
            recorded: Some(record(Some("2"), None, None)),
            jobs: vec![job("2", succeeded())],
            settled: true,
            create: Some("3"),
            delete: vec!["2"],
            status: Some(record(Some("2"), Some("3"), None)),
            verdict: Some("Migrating"),
            notes: vec![],
        },
        Case {
            name: "an older failure is recorded too",
            spec: Some("3"),
            recorded: Some(record(Some("1"), Some("2"), None)),
            jobs: vec![job("2", failed("boom in 2"))],
            settled: true,
            create: None,
            delete: vec![],
            status: Some(record(Some("1"), None, Some("2"))),
            verdict: Some("Migrating"),
            notes: vec!["MigrationFailed"],
        },
        Case {
            name: "without spec.migrations a finished Job goes once recorded",
            spec: None,
            recorded: Some(record(Some("2"), None, None)),
            jobs: vec![job("2", succeeded())],
            settled: true,
            create: None,
            delete: vec!["2"],
            status: Some(record(Some("2"), None, None)),
            verdict: None,
            notes: vec![],
        },
        Case {
            name: "a Job being deleted no longer counts",
            spec: Some("3"),
            recorded: Some(record(Some("2"), None, None)),
            jobs: vec![MigrationJob {
                deleting: true,
                ..job("2", succeeded())
            }],
            settled: true,
            create: Some("3"),
            delete: vec![],
            status: Some(record(Some("2"), Some("3"), None)),
            verdict: Some("Migrating"),
            notes: vec![],
        },
        Case {
            name: "a running Job deleted by hand is no longer running",
            spec: Some("2"),
            recorded: Some(record(Some("1"), Some("2"), None)),
            jobs: vec![],
            settled: false,
            create: None,
            delete: vec![],
            status: Some(record(Some("1"), None, None)),
            verdict: None,
            notes: vec![],
        },
    ]
}

#[test]
fn decisions() {
    for case in cases() {
        let spec = case.spec.map(spec);
        let got = decide(
            "orders",
            spec.as_ref(),
            case.recorded.as_ref(),
            &case.jobs,
            case.settled,
        );
        let name = case.name;
        assert_eq!(got.create.as_deref(), case.create, "{name}: create");
        let delete: Vec<String> = case
            .delete
            .iter()
            .map(|v| migration_job_name("orders", v))
            .collect();
        assert_eq!(got.delete, delete, "{name}: delete");
        assert_eq!(got.status, case.status, "{name}: status");
        assert_eq!(reason(&got.verdict), case.verdict, "{name}: verdict");
        let notes: Vec<&str> = got.notes.iter().map(|n| n.reason).collect();
        assert_eq!(notes, case.notes, "{name}: notes");
        assert!(
            !(got.create.is_some()
                && case
                    .jobs
                    .iter()
                    .any(|j| !j.deleting && j.state == JobState::Running)),
            "{name}: never two Jobs running"
        );
    }
}

#[test]
fn a_failure_names_the_version_and_quotes_the_last_lines() {
    let recorded = record(Some("1"), Some("2"), None);
    let got = decide(
        "orders",
        Some(&spec("2")),
        Some(&recorded),
        &[job(
            "2",
            failed("exit code 3: ERROR:  syntax error at or near \"tabel\""),
        )],
        true,
    );
    assert!(blocks(&got.verdict));
    let Some(Verdict::Blocked { message, .. }) = &got.verdict else {
        unreachable!()
    };
    assert!(
        message.starts_with("spec.migrations: version 2 failed: exit code 3: ERROR:  syntax error"),
        "{message}"
    );
    assert!(
        message.contains("until spec.migrations.version changes"),
        "{message}"
    );
    assert!(got.notes[0].warning);
    assert!(
        got.notes[0].message.contains("syntax error"),
        "{}",
        got.notes[0].message
    );
    assert_eq!(
        got.status.and_then(|s| s.message).as_deref(),
        Some("exit code 3: ERROR:  syntax error at or near \"tabel\"")
    );
}

/// Pass after pass, as the controller runs it: the status each decision
/// writes is the next one's record, Jobs appear when created and end when
/// the test says.
#[derive(Default)]
struct Cluster {
    recorded: Option<MigrationsStatus>,
    jobs: Vec<MigrationJob>,
    created: Vec<String>,
}

impl Cluster {
    fn pass(&mut self, version: &str) -> Option<Verdict> {
        let got = decide(
            "orders",
            Some(&spec(version)),
            self.recorded.as_ref(),
            &self.jobs,
            true,
        );
        self.jobs.retain(|j| !got.delete.contains(&j.name));
        if let Some(v) = &got.create {
            assert!(
                self.jobs.iter().all(|j| j.state != JobState::Running),
                "two Jobs running: {:?}",
                self.jobs
            );
            self.jobs.push(job(v, JobState::Running));
            self.created.push(v.clone());
        }
        if got.status.is_some() {
            self.recorded = got.status;
        }
        got.verdict
    }

    fn end(&mut self, state: JobState) {
        for job in self
            .jobs
            .iter_mut()
            .filter(|j| j.state == JobState::Running)
        {
            job.state = state.clone();
        }
    }
}

#[test]
fn a_version_changed_mid_run_runs_after_the_first_ends() {
    let mut cluster = Cluster::default();
    cluster.pass("1");
    // The version changes while 1 runs: 1 goes on.
    assert_eq!(reason(&cluster.pass("2")), Some("Migrating"));
    assert_eq!(cluster.created, ["1"]);
    cluster.end(JobState::Succeeded(String::new()));
    for _ in 0..3 {
        assert_eq!(reason(&cluster.pass("2")), Some("Migrating"));
    }
    assert_eq!(cluster.created, ["1", "2"]);
    assert_eq!(
        cluster.jobs.len(),
        1,
        "1's Job went once recorded: {:?}",
        cluster.jobs
    );
    assert_eq!(
        cluster.recorded.as_ref().and_then(|r| r.applied.as_deref()),
        Some("1")
    );
    cluster.end(JobState::Succeeded(String::new()));
    assert_eq!(cluster.pass("2"), None);
    assert_eq!(cluster.recorded, Some(record(Some("2"), None, None)));
    for _ in 0..3 {
        assert_eq!(cluster.pass("2"), None);
    }
    assert_eq!(cluster.created, ["1", "2"]);
}

#[test]
fn a_failed_version_runs_once_until_the_version_changes() {
    let mut cluster = Cluster::default();
    cluster.pass("1");
    cluster.end(failed("ERROR: boom"));
    for _ in 0..5 {
        assert!(blocks(&cluster.pass("1")));
    }
    assert_eq!(cluster.created, ["1"]);
    assert_eq!(
        cluster.recorded.as_ref().and_then(|r| r.applied.as_deref()),
        None
    );
    assert_eq!(reason(&cluster.pass("1-fixed")), Some("Migrating"));
    cluster.end(JobState::Succeeded(String::new()));
    assert_eq!(cluster.pass("1-fixed"), None);
    assert_eq!(cluster.recorded, Some(record(Some("1-fixed"), None, None)));
    assert_eq!(cluster.created, ["1", "1-fixed"]);
}

#[test]
fn tails_keep_the_end_within_bounds() {
    let log: String = (1..=30).map(|i| format!("line {i}\n\n")).collect();
    let kept = tail(&log, 1024);
    assert_eq!(kept.lines().count(), 10);
    assert!(
        kept.starts_with("line 21") && kept.ends_with("line 30"),
        "{kept}"
    );
    let long = "é".repeat(2000);
    let kept = tail(&long, 100);
    assert!(kept.len() <= 100, "{}", kept.len());
    assert!(kept.starts_with('…'));
    assert_eq!(tail("", 10), "");
}

/// A settled one-instance Database, as the lifecycle plans it.
fn ready_plan(migrations: Option<(&str, MigrationsStatus, Vec<MigrationJob>)>) -> lifecycle::Plan {
    use crate::api::status::{DatabasePhase, DatabaseStatus, InstanceRole};
    use lifecycle::{
        Instance, ManagerStatus, Observed, Pod as PodView, PodPhase, PvcState, Routing,
    };
    let manager = ManagerStatus {
        role: InstanceRole::Primary,
        ready: true,
        timeline: 1,
        received_lsn: 100,
        replayed_lsn: 100,
        streaming: false,
        pending_restart: false,
        server_version: None,
    };
    let observed = Observed {
        database: "orders".into(),
        secrets: true,
        services: true,
        pod_disruption_budgets: true,
        lease_access: true,
        instances: [(
            1,
            Instance {
                pvc: Some(PvcState::Bound),
                pod: Some(PodView {
                    phase: PodPhase::Running,
                    role_label: Some(InstanceRole::Primary),
                    ready: true,
                    manager: Some(manager),
                    ..PodView::default()
                }),
                ..Instance::default()
            },
        )]
        .into_iter()
        .collect(),
        routing: Routing {
            rw: vec!["orders-1".into()],
            ro: Vec::new(),
        },
        ..Observed::default()
    };
    let mut spec = crate::api::arbitrary::sample_database().spec;
    spec.instances = 1;
    let mut previous = DatabaseStatus {
        phase: Some(DatabasePhase::Ready),
        current_primary: Some("orders-1".into()),
        ..DatabaseStatus::default()
    };
    let mut observed = observed;
    if let Some((version, recorded, jobs)) = migrations {
        spec.migrations = Some(self::spec(version));
        previous.migrations = Some(recorded);
        observed.migration_jobs = jobs;
    } else {
        spec.migrations = None;
    }
    lifecycle::plan(&spec, Some(&previous), &observed)
}

fn ready_condition(plan: &lifecycle::Plan) -> &lifecycle::Desired {
    plan.conditions
        .iter()
        .find(|c| c.type_ == lifecycle::READY)
        .expect("a Ready condition")
}

#[test]
fn ready_never_claims_a_running_or_failed_migration_is_in_effect() {
    use crate::api::status::DatabasePhase;
    let settled = ready_plan(None);
    assert_eq!(settled.phase, DatabasePhase::Ready, "{settled:#?}");
    assert!(ready_condition(&settled).status);

    let running = ready_plan(Some((
        "2",
        record(Some("1"), Some("2"), None),
        vec![job("2", JobState::Running)],
    )));
    let ready = ready_condition(&running);
    assert!(!ready.status);
    assert_eq!(ready.reason, "Migrating");
    assert_eq!(running.phase, DatabasePhase::Configuring);
    assert_eq!(running.requeue_after_seconds, Some(POLL_SECONDS));
    let progressing = running
        .conditions
        .iter()
        .find(|c| c.type_ == lifecycle::PROGRESSING)
        .expect("Progressing");
    assert!(progressing.status);

    let mut recorded = record(Some("1"), None, Some("2"));
    recorded.message = Some("exit code 3: ERROR: boom".into());
    let failed = ready_plan(Some((
        "2",
        recorded,
        vec![job("2", failed("exit code 3: ERROR: boom"))],
    )));
    let ready = ready_condition(&failed);
    assert!(!ready.status);
    assert_eq!(ready.reason, "MigrationFailed");
    assert!(ready.message.contains("ERROR: boom"), "{}", ready.message);
    assert_eq!(failed.phase, DatabasePhase::Blocked);
    // Nothing to poll: the failure waits for a new version.
    assert_ne!(failed.requeue_after_seconds, Some(POLL_SECONDS));
}

fn migration_job() -> impl proptest::strategy::Strategy<Value = MigrationJob> {
    use proptest::prelude::*;
    (
        prop_oneof![Just("1"), Just("2"), Just("3")],
        prop_oneof![
            Just(JobState::Running),
            Just(JobState::Succeeded(String::new())),
            Just(JobState::Failed("boom".into()))
        ],
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(version, state, deleting)| MigrationJob {
            deleting,
            ..job(version, state)
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    #[test]
    fn never_two_migration_jobs(
        jobs in proptest::collection::vec(migration_job(), 0..3),
        version in proptest::prop_oneof![proptest::strategy::Just("1"), proptest::strategy::Just("2"), proptest::strategy::Just("3")],
        applied in proptest::option::of(proptest::prop_oneof![proptest::strategy::Just("1"), proptest::strategy::Just("2")]),
    ) {
        let plan = ready_plan(Some((version, record(applied, None, None), jobs.clone())));
        let runs: Vec<&Action> = plan.actions.iter()
            .filter(|a| matches!(a, Action::RunMigration { .. }))
            .collect();
        proptest::prop_assert!(runs.len() <= 1, "{runs:?}");
        let running = jobs.iter().any(|j| !j.deleting && j.state == JobState::Running);
        proptest::prop_assert!(!running || runs.is_empty(), "{runs:?} while {jobs:?}");
        // A new Job only starts on a settled Database, last in the plan.
        if !runs.is_empty() {
            proptest::prop_assert_eq!(plan.actions.last(), runs.last().copied());
        }
    }
}
