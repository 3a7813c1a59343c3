//! Golden files for what `status`, `why` and `history` print, on fixed
//! Databases (healthy, degraded, failing over, upgrading) with their Backups
//! and Events: `testdata/<case>.yaml` in, `testdata/<case>.<command>.txt`
//! out, compared exactly; and for `drill list` and `drill show`, on the
//! Drills of `testdata/drills.yaml`. After reviewing a change, regenerate with
//! `TUSK_BLESS_FIXTURES=1 cargo test --lib plugin::`.

use std::path::PathBuf;

use super::status::{self, Inputs};
use super::{history, why};

const CASES: [&str; 4] = ["healthy", "degraded", "failing-over", "upgrading"];

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/plugin/testdata")
        .join(file)
}

fn inputs(case: &str) -> Inputs {
    let path = testdata(&format!("{case}.yaml"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a fixture: {e}", path.display()))
}

fn compare(case: &str, command: &str, actual: &str) {
    let path = testdata(&format!("{case}.{command}.txt"));
    if std::env::var_os("TUSK_BLESS_FIXTURES").is_some() {
        std::fs::write(&path, actual)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "`{command}` of {case} differs from {}; printed:\n{actual}\nexpected:\n{expected}",
        path.display()
    );
}

#[test]
fn status_prints_as_the_golden_files_say() {
    for case in CASES {
        compare(
            case,
            "status",
            &status::render(&status::derive(&inputs(case))),
        );
    }
}

#[test]
fn why_prints_as_the_golden_files_say() {
    for case in CASES {
        compare(case, "why", &why::render(&why::explain(&inputs(case))));
    }
}

#[test]
fn history_prints_as_the_golden_files_say() {
    for case in CASES {
        let db = inputs(case).database;
        compare(
            case,
            "history",
            &history::render(&history::entries(&db.status.unwrap_or_default())),
        );
    }
}

#[test]
fn a_healthy_database_is_ready_in_one_line() {
    let answer = why::explain(&inputs("healthy"));
    assert!(matches!(answer, why::Answer::Ready(_)), "{answer:?}");
    assert_eq!(why::render(&answer).lines().count(), 1);
}

#[test]
fn the_machine_readable_status_holds_the_derived_sections() {
    let report = status::derive(&inputs("degraded"));
    let json = serde_json::to_value(&report).expect("serializes");
    assert_eq!(json["summary"]["ready"], false);
    assert!(json["status"]["instances"].is_array());
    assert!(json["attention"].as_array().is_some_and(|a| !a.is_empty()));
    let back: status::StatusReport = serde_json::from_value(json).expect("reads back");
    assert_eq!(back, report);
}

#[test]
fn warnings_are_the_last_hour_s_newest_last_and_few() {
    let report = status::derive(&inputs("degraded"));
    let times: Vec<_> = report
        .warnings
        .iter()
        .filter_map(|w| w.time.clone())
        .collect();
    assert!(times.windows(2).all(|w| w[0].0 <= w[1].0), "{times:?}");
    assert!(report.warnings.len() <= 5);
    assert!(
        report.warnings.iter().all(|w| w.reason != "OldWarning"),
        "an Event older than an hour is shown: {:?}",
        report.warnings
    );
}

/// `testdata/drills.yaml`: a few Drills and the time they are looked at.
#[derive(serde::Deserialize)]
struct DrillCases {
    now: jiff::Timestamp,
    drills: Vec<crate::api::v1::Drill>,
}

fn drill_cases() -> DrillCases {
    let path = testdata("drills.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a fixture: {e}", path.display()))
}

#[test]
fn drill_list_and_show_print_as_the_golden_files_say() {
    use kube::ResourceExt;
    let cases = drill_cases();
    compare(
        "drills",
        "list",
        &super::drill::render_list(&cases.drills, cases.now),
    );
    let pg: Vec<_> = cases
        .drills
        .iter()
        .filter(|d| d.spec.database == "pg")
        .cloned()
        .collect();
    compare(
        "drills-pg",
        "list",
        &super::drill::render_list(&pg, cases.now),
    );
    for drill in &cases.drills {
        compare(
            &format!("drill.{}", drill.name_any()),
            "show",
            &super::drill::render_show(drill, cases.now),
        );
    }
}
