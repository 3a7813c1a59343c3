//! `kubectl tusk plan`: the plan printed is what then happens. On a real
//! Database, `plan -o json` is asked what a spec change will do; the change
//! is then applied, and what the operator did (each instance pod deleted or
//! created, the primary role moving away from an instance, each Job
//! created, in the order watches on the API server saw them) is compared
//! with the plan's steps of those kinds, in order. Not its Events: the
//! Event recorder folds Events of one reason into one series that keeps the
//! first note, so which instance a later one was about is lost.
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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tusk::api::status::DatabasePhase;
use tusk::api::v1::Database;
use tusk_e2e::plugin::tusk;
use tusk_e2e::{
    MANAGER, Result, apply_value, database, in_namespace, install_operator, wait_for, wait_ready,
};

const DB: &str = "pg";
/// How long the change may take to be carried out.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(900);

/// One step as `(what, on what)`: `Gone` (an instance pod deleted or
/// evicted), `Created` (an instance pod created), `PrimaryChange` (the
/// primary role left that instance: a switchover) or `Job` (a Job created),
/// and the instance or Job.
type Key = (String, String);

/// The plan's steps that change pods, the primary or Jobs, in order, as
/// [`Key`]s.
fn planned(plan: &Value) -> Result<Vec<Key>> {
    let steps = plan["steps"]
        .as_array()
        .ok_or_else(|| format!("no steps in the plan: {plan}"))?;
    Ok(steps
        .iter()
        .filter_map(|s| {
            let what = match s["action"].as_str()? {
                "RollPod" | "DeletePod" => "Gone",
                "CreatePod" => "Created",
                "Switchover" => "PrimaryChange",
                "RunUpgradeJob" => "Job",
                _ => return None,
            };
            let on = s["job"].as_str().or(s["target"].as_str())?;
            Some((what.to_owned(), on.to_owned()))
        })
        .collect())
}

/// What the operator did, as the API server's watches tell it in order:
/// instance pods deleted (from the moment their deletion is asked) and
/// created, `status.targetPrimary` moving away from an instance, Jobs
/// created. Only what happens after every watch listed what was there.
struct Watcher {
    seen: Arc<Mutex<Vec<Key>>>,
    listed: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn push(seen: &Mutex<Vec<Key>>, what: &str, on: &str) {
    if let Ok(mut seen) = seen.lock() {
        seen.push((what.to_owned(), on.to_owned()));
    }
}

impl Watcher {
    async fn start(client: &Client, ns: &str) -> Result<Self> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let listed = Arc::new(AtomicUsize::new(0));
        let tasks = vec![
            tokio::spawn(Self::pods(
                Api::namespaced(client.clone(), ns),
                seen.clone(),
                listed.clone(),
            )),
            tokio::spawn(Self::jobs(
                Api::namespaced(client.clone(), ns),
                seen.clone(),
                listed.clone(),
            )),
            tokio::spawn(Self::primary(
                Api::namespaced(client.clone(), ns),
                seen.clone(),
                listed.clone(),
            )),
        ];
        let watcher = Self {
            seen,
            listed,
            tasks,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while watcher.listed.load(Ordering::SeqCst) < 3 {
            if tokio::time::Instant::now() >= deadline {
                return Err("the watches did not list within 60 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(watcher)
    }

    fn all(&self) -> Vec<Key> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    async fn pods(api: Api<Pod>, seen: Arc<Mutex<Vec<Key>>>, listed: Arc<AtomicUsize>) {
        // By name: the uid seen last, and whether its deletion was seen.
        let mut known: BTreeMap<String, (String, bool)> = BTreeMap::new();
        let mut live = false;
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            let (pod, deleted) = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => (pod, false),
                Ok(watcher::Event::Delete(pod)) => (pod, true),
                Ok(watcher::Event::InitDone) => {
                    if !live {
                        live = true;
                        listed.fetch_add(1, Ordering::SeqCst);
                    }
                    continue;
                }
                Ok(watcher::Event::Init) => continue,
                Err(e) => {
                    eprintln!("[plugin_plan] pod watch error (it retries): {e}");
                    continue;
                }
            };
            let name = pod.name_any();
            if tusk::resources::names::serial_of(DB, &name).is_none() {
                continue;
            }
            let uid = pod.uid().unwrap_or_default();
            let going = deleted || pod.metadata.deletion_timestamp.is_some();
            let new_uid = known
                .get(&name)
                .is_none_or(|(known_uid, _)| *known_uid != uid);
            if new_uid && live {
                push(&seen, "Created", &name);
            }
            let was_going = known
                .get(&name)
                .is_some_and(|(known_uid, gone)| *known_uid == uid && *gone);
            if going && !was_going && live {
                push(&seen, "Gone", &name);
            }
            known.insert(name, (uid, going));
        }
    }

    async fn jobs(api: Api<Job>, seen: Arc<Mutex<Vec<Key>>>, listed: Arc<AtomicUsize>) {
        let mut known: BTreeSet<String> = BTreeSet::new();
        let mut live = false;
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job)) => {
                    if known.insert(job.name_any()) && live {
                        push(&seen, "Job", &job.name_any());
                    }
                }
                Ok(watcher::Event::InitDone) if !live => {
                    live = true;
                    listed.fetch_add(1, Ordering::SeqCst);
                }
                Ok(_) => {}
                Err(e) => eprintln!("[plugin_plan] Job watch error (it retries): {e}"),
            }
        }
    }

    async fn primary(api: Api<Database>, seen: Arc<Mutex<Vec<Key>>>, listed: Arc<AtomicUsize>) {
        let mut primary: Option<String> = None;
        let mut live = false;
        let config = watcher::Config::default().fields(&format!("metadata.name={DB}"));
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(db) | watcher::Event::InitApply(db)) => {
                    // `targetPrimary`: the switchover records it before it
                    // hands the role over; `currentPrimary` follows only
                    // with the next pass's status, after that pass's
                    // actions (the old primary's eviction among them).
                    let now = db.status.and_then(|s| s.target_primary);
                    if let (Some(before), Some(after)) = (&primary, &now)
                        && before != after
                        && live
                    {
                        push(&seen, "PrimaryChange", before);
                    }
                    if now.is_some() {
                        primary = now;
                    }
                }
                Ok(watcher::Event::InitDone) if !live => {
                    live = true;
                    listed.fetch_add(1, Ordering::SeqCst);
                }
                Ok(_) => {}
                Err(e) => eprintln!("[plugin_plan] Database watch error (it retries): {e}"),
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// `plan -o json` of `patch`, then the patch applied and carried out to
/// Ready with `instances`: the plan's compared steps and the Events'.
async fn plan_then_apply(
    client: &Client,
    ns: &str,
    patch: Value,
    instances: i32,
) -> Result<(Vec<Key>, Vec<Key>, String)> {
    let outcome = tusk(&[
        "-n",
        ns,
        "plan",
        DB,
        "-o",
        "json",
        "--patch",
        &patch.to_string(),
    ])
    .await;
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
    let watcher = Watcher::start(client, ns).await?;
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
    let actual = watcher.all();
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
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec),
                &PatchParams::apply(MANAGER),
            )
            .await?;
            wait_ready(&client, &ns, DB, 2).await?;

            // Refused by validation: one line naming the field, exit 2,
            // nothing changed.
            let before = Api::<Database>::namespaced(client.clone(), &ns)
                .get(DB)
                .await?;
            let refused = tusk(&[
                "-n",
                &ns,
                "plan",
                DB,
                "--patch",
                r#"{"spec":{"version":"17.10"}}"#,
            ])
            .await;
            assert_eq!(refused.code, 2, "{refused:?}");
            assert!(
                refused.stderr.trim().lines().count() == 1
                    && refused.stderr.contains("spec.version"),
                "one line naming spec.version: {refused:?}"
            );
            let after = Api::<Database>::namespaced(client.clone(), &ns)
                .get(DB)
                .await?;
            assert_eq!(before.metadata.generation, after.metadata.generation);

            let (expected, actual, human) =
                plan_then_apply(&client, &ns, json!({"spec": {"version": "17.12"}}), 2).await?;
            assert!(
                human.contains("switch over"),
                "the plan shows the switchover:\n{human}"
            );
            assert_eq!(
                actual, expected,
                "what the operator did (pods, primary and Jobs as watched, in order) differs from the plan printed:\n{human}"
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
            apply_value(
                &client,
                Some(&ns),
                database(DB, spec),
                &PatchParams::apply(MANAGER),
            )
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
                "what the operator did (pods, primary and Jobs as watched, in order) differs from the plan printed:\n{human}"
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
    fn the_plan_s_compared_steps_are_those_that_change_pods_the_primary_or_jobs() {
        let plan = json!({"steps": [
            {"action": "RollPod", "target": "pg-2", "event": "RollingUpdate"},
            {"action": "CreatePod", "target": "pg-2", "event": "CreatedInstance"},
            {"action": "LabelRole", "target": "pg-2", "event": "RoleLabelled"},
            {"action": "RecordTargetPrimary"},
            {"action": "Switchover", "target": "pg-1", "event": "SwitchedOver"},
            {"action": "DeletePod", "target": "pg-2", "event": "DeletedInstance"},
            {"action": "RunUpgradeJob", "target": "pg-1", "event": "UpgradeJob", "job": "pg-upgrade-15-17"},
        ]});
        let key = |what: &str, on: &str| (what.to_owned(), on.to_owned());
        assert_eq!(
            planned(&plan).expect("steps"),
            [
                key("Gone", "pg-2"),
                key("Created", "pg-2"),
                key("PrimaryChange", "pg-1"),
                key("Gone", "pg-2"),
                key("Job", "pg-upgrade-15-17"),
            ]
        );
    }
}
