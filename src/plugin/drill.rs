//! `kubectl tusk drill run|list|show`: failure drills from the command line.
//!
//! `run <db> <scenario>` creates a one-shot Drill named
//! `<db>-<scenario>-<unix time>`; with `--wait` it watches the Drill to its
//! verdict and prints the figures: exit code 1 when the run Failed, was
//! Aborted or Refused, 4 when `--wait` gave up (the drill goes on).
//! `list [<db>]` is a table of the namespace's Drills, `show <drill>` one
//! Drill's timeline, figures and verdict (or the object with `-o json|yaml`).
//! Everything printed is rendered by pure functions from the Drill objects,
//! tested on fixed Drills (`testdata/drills.yaml`).

use std::fmt::Write as _;

use clap::Subcommand;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};

use super::act::{self, Step};
use super::render::{self, or_dash};
use super::term::{Progress, Terminal};
use super::{Error, Output, Session, Wait};
use crate::api::drill::{DrillPhase, DrillStatus, Scenario, defaults, rules};
use crate::api::v1::{Drill, DrillExpectations, DrillFigures, DrillGuards, DrillSpec};

/// `kubectl tusk drill ...`
#[derive(Subcommand, Debug)]
pub enum DrillCommand {
    /// Run a drill once now: inject the scenario's fault into the Database,
    /// measure the write outage and the writes lost, undo it.
    #[command(
        after_help = "Examples:\n  kubectl tusk drill run pg switchover --wait\n  \
                            kubectl tusk drill run pg freeze-primary --duration 30 --wait\n  \
                            kubectl tusk drill run pg kill-postgres --dry-run --wait"
    )]
    Run {
        database: String,
        /// switchover, delete-primary-pod, kill-postgres, freeze-primary,
        /// partition-primary, kill-replica, store-outage or restore.
        #[arg(value_parser = parse_scenario)]
        scenario: Scenario,
        /// How long a held fault lasts, in seconds (freeze-primary,
        /// partition-primary, store-outage).
        #[arg(long, value_name = "SECONDS")]
        duration: Option<u32>,
        /// Only check the guards; inject nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        wait: Wait,
    },
    /// The namespace's Drills (of one Database), with their last figures.
    #[command(after_help = "Examples:\n  kubectl tusk drill list\n  kubectl tusk drill list pg")]
    List { database: Option<String> },
    /// One Drill: its timeline, figures, verdict and earlier runs.
    #[command(
        after_help = "Examples:\n  kubectl tusk drill show pg-switchover-1795687200\n  \
                            kubectl tusk drill show pg-switchover-1795687200 -o yaml"
    )]
    Show {
        drill: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
}

fn parse_scenario(given: &str) -> Result<Scenario, String> {
    Scenario::ALL
        .into_iter()
        .find(|s| s.as_str() == given)
        .ok_or_else(|| {
            let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.as_str()).collect();
            format!("unknown scenario {given:?}; one of: {}", known.join(", "))
        })
}

pub async fn dispatch(session: &Session, command: DrillCommand) -> Result<(), Error> {
    match command {
        DrillCommand::Run {
            database,
            scenario,
            duration,
            dry_run,
            wait,
        } => {
            let request = RunRequest {
                database: &database,
                scenario,
                duration,
                dry_run,
                wait,
            };
            run(session, request).await
        }
        DrillCommand::List { database } => list(session, database.as_deref()).await,
        DrillCommand::Show { drill, output } => show(session, &drill, output).await,
    }
}

/// What `drill run` was asked.
pub struct RunRequest<'a> {
    pub database: &'a str,
    pub scenario: Scenario,
    pub duration: Option<u32>,
    pub dry_run: bool,
    pub wait: Wait,
}

async fn run(session: &Session, request: RunRequest<'_>) -> Result<(), Error> {
    session.database(request.database).await?;
    let name = default_name(request.database, request.scenario, Timestamp::now());
    let manifest = manifest(&name, &request);
    let api: Api<Drill> = Api::namespaced(session.client.clone(), &session.namespace);
    api.create(&PostParams::default(), &manifest)
        .await
        .map_err(|err| match err {
            kube::Error::Api(status) if status.code == 409 => {
                Error::Usage(format!("Drill {name} already exists"))
            }
            // Refused at admission: the message names the field.
            kube::Error::Api(status) if status.code == 422 || status.code == 400 => {
                Error::Usage(status.message)
            }
            other => Error::kube(format!("creating Drill {name}"))(other),
        })?;
    if !request.wait.wait {
        println!(
            "Drill {name} created: {} of {}{}",
            request.scenario,
            request.database,
            if request.dry_run { " (dry run)" } else { "" }
        );
        return Ok(());
    }
    let mut progress = Progress::start(Terminal::detect(), None);
    let what = format!("Drill {name}");
    let done = act::watch_until(
        &api,
        &name,
        request.wait.timeout,
        &what,
        &mut progress,
        judge,
    )
    .await;
    progress.finish();
    let drill = done?;
    print!("{}", render_show(&drill, Timestamp::now()));
    outcome(&drill)
}

async fn list(session: &Session, database: Option<&str>) -> Result<(), Error> {
    let api: Api<Drill> = Api::namespaced(session.client.clone(), &session.namespace);
    let drills = api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing Drills"))?
        .items;
    let drills: Vec<Drill> = drills
        .into_iter()
        .filter(|d| database.is_none_or(|db| d.spec.database == db))
        .collect();
    print!("{}", render_list(&drills, Timestamp::now()));
    Ok(())
}

async fn show(session: &Session, name: &str, output: Output) -> Result<(), Error> {
    let api: Api<Drill> = Api::namespaced(session.client.clone(), &session.namespace);
    let drill = api
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("reading Drill {name}")))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "Drill {name} not found in namespace {}",
                session.namespace
            ))
        })?;
    let text = match output {
        Output::Text => render_show(&drill, Timestamp::now()),
        Output::Json => serde_json::to_string_pretty(&drill)
            .map(|t| t + "\n")
            .map_err(|e| Error::Render {
                what: "the Drill as JSON",
                message: e.to_string(),
            })?,
        Output::Yaml => serde_yaml::to_string(&drill).map_err(|e| Error::Render {
            what: "the Drill as YAML",
            message: e.to_string(),
        })?,
    };
    print!("{text}");
    Ok(())
}

/// `<database>-<scenario>-<unix time>`, the database part shortened when the
/// whole would not fit a Drill's name.
pub fn default_name(database: &str, scenario: Scenario, now: Timestamp) -> String {
    let tail = format!("-{}-{}", scenario.as_str(), now.as_second());
    let room = rules::MAX_NAME_LEN.saturating_sub(tail.len());
    let head: String = database.chars().take(room).collect();
    format!("{}{tail}", head.trim_end_matches('-'))
}

/// The one-shot Drill `drill run` creates.
pub fn manifest(name: &str, request: &RunRequest<'_>) -> Drill {
    Drill::new(
        name,
        DrillSpec {
            database: request.database.to_owned(),
            scenario: request.scenario,
            duration_seconds: request.duration,
            schedule: None,
            window_minutes: None,
            dry_run: request.dry_run,
            abort_after_seconds: None,
            guards: DrillGuards::default(),
            expect: DrillExpectations::default(),
        },
    )
}

/// Where a watched Drill is: done at a final phase of the run at its
/// current generation.
pub fn judge(drill: &Drill) -> Step<Drill> {
    let status = drill.status.clone().unwrap_or_default();
    let current = status.observed_generation.is_some()
        && status.observed_generation == drill.metadata.generation;
    match status.phase {
        Some(phase) if phase.is_final() && current => Step::Done(drill.clone()),
        phase => {
            let mut line = format!(
                "Drill {}: {}",
                drill.name_any(),
                phase.map_or("Pending", DrillPhase::as_str)
            );
            if let Some(message) = status.timeline.last().and_then(|e| e.message.as_deref()) {
                line.push_str(&format!(" ({message})"));
            }
            Step::Waiting(line, None)
        }
    }
}

/// The exit status of a finished run: an error (exit code 1) unless it
/// Succeeded.
pub fn outcome(drill: &Drill) -> Result<(), Error> {
    let status = drill.status.clone().unwrap_or_default();
    match status.phase {
        Some(DrillPhase::Succeeded) => Ok(()),
        phase => Err(Error::Failed(format!(
            "Drill {} {}: {}",
            drill.name_any(),
            phase.map_or("Pending", DrillPhase::as_str),
            status.verdict.as_deref().unwrap_or("no verdict recorded")
        ))),
    }
}

fn seconds(value: f64) -> String {
    render::milliseconds((value * 1000.0).round() as i64)
}

/// A bound as the spec spells it: `30 s`, `12.5 s`.
fn bound_seconds(value: f64) -> String {
    format!("<= {value} s")
}

/// The `drill list` table, oldest first (pure).
pub fn render_list(drills: &[Drill], now: Timestamp) -> String {
    if drills.is_empty() {
        return "No Drills found.\n".to_owned();
    }
    let mut drills: Vec<&Drill> = drills.iter().collect();
    drills.sort_by_key(|d| {
        (
            d.metadata.creation_timestamp.as_ref().map(|t| t.0),
            d.name_any(),
        )
    });
    let rows: Vec<Vec<String>> = drills
        .iter()
        .map(|d| {
            let status = d.status.clone().unwrap_or_default();
            let figures = status.figures.clone().unwrap_or_default();
            vec![
                d.name_any(),
                d.spec.database.clone(),
                d.spec.scenario.as_str().to_owned(),
                status
                    .phase
                    .map_or("Pending", DrillPhase::as_str)
                    .to_owned(),
                or_dash(figures.write_outage_seconds.map(seconds)),
                or_dash(figures.lost_writes.map(|l| l.to_string())),
                or_dash(
                    d.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| render::span(t.0, now)),
                ),
            ]
        })
        .collect();
    render::table(
        &[
            "NAME", "DATABASE", "SCENARIO", "PHASE", "OUTAGE", "LOST", "AGE",
        ],
        &rows,
    )
}

/// `drill show`: what was asked, the run's timeline, figures against the
/// expectations, the verdict and the earlier runs (pure).
pub fn render_show(drill: &Drill, now: Timestamp) -> String {
    let spec = &drill.spec;
    let status = drill.status.clone().unwrap_or_default();
    let mut out = String::new();
    let mut asked = format!("{} of Database {}", spec.scenario, spec.database);
    if spec.scenario.holds_a_fault() {
        let held = spec.duration_seconds.unwrap_or(defaults::DURATION_SECONDS);
        asked.push_str(&format!(" for {held} s"));
    }
    if spec.dry_run {
        asked.push_str(" (dry run: guards only)");
    }
    let _ = writeln!(out, "Drill {}: {asked}", drill.name_any());
    if let Some(schedule) = &spec.schedule {
        let next = status.next_run_at.as_ref().map_or_else(String::new, |t| {
            format!(", next run {}", render::stamp(t.0))
        });
        let _ = writeln!(out, "Schedule: {schedule} (UTC){next}");
    }
    let _ = writeln!(
        out,
        "Phase:    {}",
        status.phase.map_or("Pending", DrillPhase::as_str)
    );
    if let Some(verdict) = &status.verdict {
        let _ = writeln!(out, "Verdict:  {verdict}");
    }
    if let Some(started) = &status.started_at {
        let mut line = format!("Started:  {}", render::when(started, now));
        if let Some(finished) = &status.finished_at {
            line.push_str(&format!(", took {}", render::span(started.0, finished.0)));
        }
        let _ = writeln!(out, "{line}");
    }
    if let Some(fault) = &status.fault {
        let mut line = format!(
            "Fault:    on {}, injected {}",
            fault.target,
            render::clock(fault.injected_at.0)
        );
        if let Some(by) = &fault.undo_by {
            line.push_str(&format!(", undo by {}", render::clock(by.0)));
        }
        match &fault.undone_at {
            Some(undone) => line.push_str(&format!(", undone {}", render::clock(undone.0))),
            None => line.push_str(", NOT UNDONE YET"),
        }
        let _ = writeln!(out, "{line}");
    }
    if !status.timeline.is_empty() {
        let _ = writeln!(out, "\nTimeline:");
        let rows: Vec<Vec<String>> = status
            .timeline
            .iter()
            .map(|e| {
                vec![
                    render::clock(e.at.0),
                    e.phase.as_str().to_owned(),
                    e.message.clone().unwrap_or_default(),
                ]
            })
            .collect();
        out.push_str(&indent(&render::table(
            &["TIME", "PHASE", "MESSAGE"],
            &rows,
        )));
    }
    if let Some(figures) = &status.figures {
        let _ = writeln!(out, "\nFigures:");
        out.push_str(&indent(&figures_table(figures, &spec.expect)));
    }
    if !status.runs.is_empty() {
        let _ = writeln!(out, "\nEarlier runs:");
        out.push_str(&indent(&runs_table(&status)));
    }
    out
}

/// Each figure measured, with the bound it was judged against.
fn figures_table(figures: &DrillFigures, expect: &DrillExpectations) -> String {
    let bound = |value: Option<i64>| value.map_or_else(String::new, |v| format!("<= {v}"));
    let outage_bound = expect
        .max_write_outage_seconds
        .unwrap_or(defaults::MAX_WRITE_OUTAGE_SECONDS);
    let ready_bound = expect
        .max_seconds_to_ready
        .unwrap_or(defaults::MAX_SECONDS_TO_READY);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |name: &str, value: Option<String>, expected: String| {
        if let Some(value) = value {
            rows.push(vec![name.to_owned(), value, expected]);
        }
    };
    row(
        "write outage",
        figures.write_outage_seconds.map(seconds),
        bound_seconds(outage_bound),
    );
    row(
        "writes acknowledged",
        figures.acknowledged_writes.map(|n| n.to_string()),
        String::new(),
    );
    row(
        "writes lost",
        figures.lost_writes.map(|n| n.to_string()),
        bound(expect.max_lost_writes),
    );
    row(
        "time to Ready",
        figures.seconds_to_ready.map(seconds),
        bound_seconds(f64::from(ready_bound)),
    );
    row(
        "failover",
        figures.failover_seconds.map(seconds),
        String::new(),
    );
    row(
        "WAL gap",
        figures.wal_gap_bytes.map(render::bytes),
        String::new(),
    );
    row(
        "recovery",
        figures.recovery_seconds.map(seconds),
        String::new(),
    );
    row(
        "rows compared",
        figures.rows_compared.map(|n| n.to_string()),
        String::new(),
    );
    render::table(&["FIGURE", "VALUE", "EXPECTED"], &rows)
}

fn runs_table(status: &DrillStatus) -> String {
    let rows: Vec<Vec<String>> = status
        .runs
        .iter()
        .map(|run| {
            let figures = run.figures.clone().unwrap_or_default();
            vec![
                render::stamp(run.started_at.0),
                run.phase.as_str().to_owned(),
                or_dash(figures.write_outage_seconds.map(seconds)),
                or_dash(figures.lost_writes.map(|n| n.to_string())),
                run.verdict.clone().unwrap_or_default(),
            ]
        })
        .collect();
    render::table(&["STARTED", "PHASE", "OUTAGE", "LOST", "VERDICT"], &rows)
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(database: &str, scenario: Scenario) -> RunRequest<'_> {
        RunRequest {
            database,
            scenario,
            duration: Some(30),
            dry_run: true,
            wait: Wait {
                wait: false,
                timeout: 600,
            },
        }
    }

    #[test]
    fn the_default_name_is_database_scenario_time_and_always_fits() {
        let now: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
        assert_eq!(
            default_name("pg", Scenario::Switchover, now),
            "pg-switchover-1795687200"
        );
        let long = "d".repeat(50);
        let name = default_name(&long, Scenario::DeletePrimaryPod, now);
        assert_eq!(name.len(), rules::MAX_NAME_LEN);
        assert!(name.ends_with("-delete-primary-pod-1795687200"), "{name}");
    }

    #[test]
    fn the_manifest_is_a_one_shot_drill() {
        let drill = manifest("pg-x", &request("pg", Scenario::FreezePrimary));
        let json = serde_json::to_value(&drill).expect("json");
        assert_eq!(json["apiVersion"], "tusk.dev/v1");
        assert_eq!(json["kind"], "Drill");
        assert_eq!(
            json["spec"],
            serde_json::json!({"database": "pg", "scenario": "freeze-primary", "durationSeconds": 30, "dryRun": true})
        );
    }

    #[test]
    fn scenarios_parse_by_their_api_names() {
        for scenario in Scenario::ALL {
            assert_eq!(parse_scenario(scenario.as_str()), Ok(scenario));
        }
        let err = parse_scenario("explode").unwrap_err();
        assert!(
            err.contains("one of: switchover, delete-primary-pod"),
            "{err}"
        );
    }

    fn with_phase(phase: DrillPhase, observed: i64, verdict: &str) -> Drill {
        let mut drill = manifest("pg-x", &request("pg", Scenario::Switchover));
        drill.metadata.generation = Some(1);
        drill.status = Some(DrillStatus {
            phase: Some(phase),
            observed_generation: Some(observed),
            verdict: Some(verdict.into()),
            ..DrillStatus::default()
        });
        drill
    }

    #[test]
    fn a_run_is_done_at_a_final_phase_of_its_generation() {
        assert!(matches!(
            judge(&with_phase(DrillPhase::Observing, 1, "")),
            Step::Waiting(..)
        ));
        // A verdict of an earlier generation is not this run's.
        assert!(matches!(
            judge(&with_phase(DrillPhase::Succeeded, 0, "")),
            Step::Waiting(..)
        ));
        assert!(matches!(
            judge(&with_phase(DrillPhase::Refused, 1, "")),
            Step::Done(_)
        ));
    }

    #[test]
    fn only_success_exits_0() {
        assert!(outcome(&with_phase(DrillPhase::Succeeded, 1, "ok")).is_ok());
        for phase in [DrillPhase::Failed, DrillPhase::Aborted, DrillPhase::Refused] {
            let error = outcome(&with_phase(phase, 1, "write outage 41 s > 30 s"))
                .expect_err("not a success");
            assert_eq!(error.exit_code(), 1, "{phase:?}");
            assert!(
                error.to_string().ends_with(": write outage 41 s > 30 s"),
                "{error}"
            );
        }
    }
}
