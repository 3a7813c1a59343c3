//! `kubectl tusk plan`: the plan printed is what then happens. On a real
//! Database, `plan -o json` is asked what a spec change will do; the change
//! is then applied, and what the operator did (the Events it emits for each
//! instance replaced, created or deleted, each switchover and each upgrade
//! Job, in the order it emitted them) is compared with the plan's steps of
//! those kinds, in order.
//!
//! - `a_minor_update_goes_as_planned`: 2 instances, 17.11 → 17.12 (both
//!   images are loaded by `e2e/images/load`, the older one built by
//!   `e2e/images/build-all postgres-17-previous`);
//! - `a_major_upgrade_goes_as_planned`: 2 instances, 15 → 17: the check Job,
//!   every instance stopped, the link Job, the upgraded primary started,
//!   the replica re-cloned.
//!
//! Also: a plan that fails validation (a downgrade) is one line naming
//! `spec.version` with exit code 2, and changes nothing.
//!   /work/wt/notes/e2e-run plugin_plan

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{Value, json};
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;
use tusk_e2e::plugin::tusk;
use tusk_e2e::{MANAGER, Result, apply_value, database, in_namespace, install_operator, wait_for, wait_ready};

const DB: &str = "pg";
/// How long the change may take to be carried out.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(900);

/// The Event reasons of the steps compared: those that replace, create or
/// delete instances, hand the primary role over, or run upgrade Jobs.
const COMPARED: [&str; 6] = [
    "RollingUpdate",
    "CreatedInstance",
    "DeletedInstance",
    "SwitchedOver",
    "FailedOver",
    "UpgradeJob",
];

/// One step as `(Event reason, what it acts on)`: the instance, or the Job.
type Key = (String, String);

/// The plan's steps that emit a compared Event, in order.
fn planned(plan: &Value) -> Result<Vec<Key>> {
    let steps = plan["steps"]
        .as_array()
        .ok_or_else(|| format!("no steps in the plan: {plan}"))?;
    Ok(steps
        .iter()
        .filter_map(|s| {
            let event = s["event"].as_str()?;
            if !COMPARED.contains(&event) {
                return None;
            }
            let on = s["job"].as_str().or(s["target"].as_str())?;
            Some((event.to_owned(), on.to_owned()))
        })
        .collect())
}

/// What an Event's note names: the Job of an `UpgradeJob` ("created Job
/// pg-upgrade-15-17: …"), else the instance ("replacing pg-2 …", "created
/// replica pg-2 (…)", "deleted pod pg-1 (…)", "pg-1 handed the primary role
/// to pg-2").
fn named(reason: &str, note: &str) -> Option<String> {
    let words: Vec<&str> = note.split_whitespace().collect();
    let word = match reason {
        "UpgradeJob" => words.get(2)?.trim_end_matches(':'),
        "RollingUpdate" => words.get(1)?,
        "CreatedInstance" | "DeletedInstance" => words.get(2)?,
        "SwitchedOver" => words.first()?,
        "FailedOver" => words.iter().find(|w| w.starts_with(DB))?,
        _ => return None,
    };
    Some(word.to_owned())
}

/// The compared Events the operator emitted for the Database since
/// `after` (Events of earlier work are left out), in the order it emitted
/// them; each emitted as many times as its series counts.
async fn happened(client: &Client, ns: &str, after: Option<Timestamp>) -> Result<Vec<Key>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut found: Vec<(Timestamp, Key)> = Vec::new();
    for e in events.list(&ListParams::default()).await?.items {
        let reason = e.reason.clone().unwrap_or_default();
        if !COMPARED.contains(&reason.as_str())
            || e.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(DB)
        {
            continue;
        }
        let Some(when) = when(&e) else {
            continue;
        };
        if after.is_some_and(|after| when <= after) {
            continue;
        }
        let note = e.note.clone().unwrap_or_default();
        let Some(on) = named(&reason, &note) else {
            return Err(format!("{reason} Event {note:?} names no instance or Job").into());
        };
        let count = e.series.as_ref().map_or(1, |s| s.count).max(1);
        for _ in 0..count {
            found.push((when, (reason.clone(), on.clone())));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, key)| key).collect())
}

/// When an Event was first emitted.
fn when(e: &Event) -> Option<Timestamp> {
    e.event_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The newest Event's time so far.
async fn last_event(client: &Client, ns: &str) -> Result<Option<Timestamp>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(when)
        .max())
}

/// `plan -o json` of `patch`, then the patch applied and carried out to
/// Ready with `instances`: the plan's compared steps and the Events'.
async fn plan_then_apply(
    client: &Client,
    ns: &str,
    patch: Value,
    instances: i32,
) -> Result<(Vec<Key>, Vec<Key>, String)> {
    let outcome = tusk(&["-n", ns, "plan", DB, "-o", "json", "--patch", &patch.to_string()]).await;
    let text = outcome.ok("plan")?;
    let plan: Value = serde_json::from_str(&text)?;
    println!("plan: {}", serde_json::to_string_pretty(&plan)?);
    if plan["end"] != "Ready" {
        return Err(format!("the plan does not end Ready: {plan}").into());
    }
    let human = tusk(&["-n", ns, "plan", DB, "--patch", &patch.to_string()])
        .await
        .ok("plan")?;
    println!("{human}");
    let expected = planned(&plan)?;
    let after = last_event(client, ns).await?;
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    let patched = databases
        .patch(DB, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let generation = patched.metadata.generation;
    wait_for(&databases, DB, CHANGE_TIMEOUT, |db| {
        db.status.as_ref().is_some_and(|s| {
            s.phase == Some(DatabasePhase::Ready)
                && s.observed_generation == generation
                && s.ready_instances == Some(instances)
        })
    })
    .await?;
    let actual = happened(client, ns, after).await?;
    Ok((expected, actual, human))
}

#[tokio::test]
async fn a_minor_update_goes_as_planned() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-plugin-plan-minor",
        Duration::from_secs(1500),
        |client, ns| async move {
            let spec = json!({"version": "17.11", "instances": 2, "storage": {"size": "1Gi"}});
            apply_value(&client, Some(&ns), database(DB, spec), &PatchParams::apply(MANAGER))
                .await?;
            wait_ready(&client, &ns, DB, 2).await?;

            // Refused by validation: one line naming the field, exit 2,
            // nothing changed.
            let before = Api::<Database>::namespaced(client.clone(), &ns).get(DB).await?;
            let refused = tusk(&[
                "-n", &ns, "plan", DB, "--patch", r#"{"spec":{"version":"17.10"}}"#,
            ])
            .await;
            assert_eq!(refused.code, 2, "{refused:?}");
            assert!(
                refused.stderr.trim().lines().count() == 1
                    && refused.stderr.contains("spec.version"),
                "one line naming spec.version: {refused:?}"
            );
            let after = Api::<Database>::namespaced(client.clone(), &ns).get(DB).await?;
            assert_eq!(before.metadata.generation, after.metadata.generation);

            let (expected, actual, human) = plan_then_apply(
                &client,
                &ns,
                json!({"spec": {"version": "17.12"}}),
                2,
            )
            .await?;
            assert!(
                human.contains("switch over"),
                "the plan shows the switchover:\n{human}"
            );
            assert_eq!(
                actual, expected,
                "what the operator did (Events, in order) differs from the plan printed:\n{human}"
            );
            Ok(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_major_upgrade_goes_as_planned() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-plugin-plan-major",
        Duration::from_secs(1500),
        |client, ns| async move {
            let spec = json!({"version": "15", "instances": 2, "storage": {"size": "1Gi"}});
            apply_value(&client, Some(&ns), database(DB, spec), &PatchParams::apply(MANAGER))
                .await?;
            wait_ready(&client, &ns, DB, 2).await?;
            let (expected, actual, human) =
                plan_then_apply(&client, &ns, json!({"spec": {"version": "17"}}), 2).await?;
            for job in ["pg-upgrade-check-15-17", "pg-upgrade-15-17"] {
                assert!(
                    expected.iter().any(|(_, on)| on == job),
                    "the plan runs Job {job}:\n{human}"
                );
            }
            assert_eq!(
                actual, expected,
                "what the operator did (Events, in order) differs from the plan printed:\n{human}"
            );
            Ok(())
        },
    )
    .await;
}

#[cfg(test)]
mod units {
    use super::*;

    #[test]
    fn each_event_names_what_it_acts_on() {
        let cases = [
            ("RollingUpdate", "replacing pg-2 with the current pod spec (0 of 2 instances updated)", "pg-2"),
            ("CreatedInstance", "created replica pg-2 (clone, localhost/postgres:17.12)", "pg-2"),
            ("DeletedInstance", "deleted pod pg-1 (MajorUpgrade)", "pg-1"),
            ("SwitchedOver", "pg-1 handed the primary role to pg-2", "pg-1"),
            ("UpgradeJob", "created Job pg-upgrade-check-15-17: check of pg-1 from PostgreSQL 15 to 17", "pg-upgrade-check-15-17"),
        ];
        for (reason, note, want) in cases {
            assert_eq!(named(reason, note).as_deref(), Some(want), "{reason}: {note}");
        }
    }

    #[test]
    fn the_plan_s_compared_steps_are_its_evented_ones_in_order() {
        let plan = json!({"steps": [
            {"action": "RollPod", "target": "pg-2", "event": "RollingUpdate"},
            {"action": "LabelRole", "target": "pg-2", "event": "RoleLabelled"},
            {"action": "RecordTargetPrimary"},
            {"action": "Switchover", "target": "pg-1", "event": "SwitchedOver"},
            {"action": "RunUpgradeJob", "target": "pg-1", "event": "UpgradeJob", "job": "pg-upgrade-15-17"},
        ]});
        assert_eq!(
            planned(&plan).expect("steps"),
            [
                ("RollingUpdate".to_owned(), "pg-2".to_owned()),
                ("SwitchedOver".to_owned(), "pg-1".to_owned()),
                ("UpgradeJob".to_owned(), "pg-upgrade-15-17".to_owned()),
            ]
        );
    }
}
