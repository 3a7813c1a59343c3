//! No false alarm: `Degraded` and Warning Events mean that something which
//! was working is not. A new 3-instance Database and a switchover through
//! `spec.primary` are progress, not damage: a watch records every status the
//! Database goes through, and none may say `Degraded=True` (or phase
//! `Degraded`), nor may any Warning Event be about the Database; the
//! switchover shows phase `SwitchingOver` on its way.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tusk::api::v1::{Database, DatabasePhase};
use tusk::resources::POSTGRES_CONTAINER;
use tusk_e2e::{READY_TIMEOUT, Result, apply_value, database, in_namespace, install_operator};

const DB: &str = "pg";

/// One status the watch saw.
#[derive(Clone, Debug)]
struct Seen {
    generation: Option<i64>,
    phase: Option<DatabasePhase>,
    /// `Degraded`'s status, reason and message.
    degraded: Option<(String, String, String)>,
    current_primary: Option<String>,
}

impl Seen {
    fn of(db: &Database) -> Self {
        let status = db.status.clone().unwrap_or_default();
        Self {
            generation: db.metadata.generation,
            phase: status.phase,
            degraded: status
                .conditions
                .iter()
                .find(|c| c.type_ == "Degraded")
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())),
            current_primary: status.current_primary,
        }
    }

    /// An alarm: `Degraded=True`, or phase `Degraded`.
    fn alarm(&self) -> bool {
        self.phase == Some(DatabasePhase::Degraded)
            || self.degraded.as_ref().is_some_and(|(s, _, _)| s == "True")
    }
}

/// Every status of the Database as the watch delivers it, in order. The
/// watch resumes from the last resourceVersion it saw, so a reconnect loses
/// no update (only a `410 Gone` would, and then the relist is recorded too).
struct History {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl History {
    fn start(client: &Client, ns: &str) -> Self {
        let databases: Api<Database> = Api::namespaced(client.clone(), ns);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={DB}"));
        let task = tokio::spawn(async move {
            let mut stream = watcher(databases, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let objects = match event {
                    Ok(watcher::Event::Apply(db) | watcher::Event::InitApply(db)) => vec![db],
                    Ok(_) => Vec::new(),
                    Err(e) => {
                        eprintln!("[alarms] watch error (it retries): {e}");
                        Vec::new()
                    }
                };
                if let Ok(mut seen) = record.lock() {
                    seen.extend(objects.iter().map(Seen::of));
                }
            }
        });
        Self { seen, task }
    }

    fn all(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits until the watch has seen a status satisfying `done`.
    async fn until(&self, what: &str, done: impl Fn(&Seen) -> bool) -> Result<Seen> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(found) = self.all().into_iter().rev().find(|s| done(s)) {
                return Ok(found);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{what}: not seen after {READY_TIMEOUT:?}; the statuses seen: {:#?}",
                    self.all()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Fails naming every alarm the watch saw.
    fn no_alarm(&self, during: &str) -> Result<()> {
        let alarms: Vec<Seen> = self.all().into_iter().filter(Seen::alarm).collect();
        if alarms.is_empty() {
            return Ok(());
        }
        Err(format!("{during}: the Database raised an alarm: {alarms:#?}").into())
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Warning Events about the Database, as "reason: note".
async fn warnings(client: &Client, ns: &str) -> Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Database") && r.name.as_deref() == Some(DB)
            })
        })
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect())
}

/// Ready at generation `generation` with all three instances ready and
/// `primary` the primary.
fn settled(db: &Database, generation: i64, primary: &str) -> bool {
    db.status.as_ref().is_some_and(|s| {
        s.phase == Some(DatabasePhase::Ready)
            && s.observed_generation == Some(generation)
            && s.ready_instances == Some(3)
            && s.current_primary.as_deref() == Some(primary)
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

#[tokio::test]
async fn a_new_database_and_a_switchover_raise_no_alarm() {
    let client = tusk_e2e::client().await;
    install_operator(&client).await;
    in_namespace(
        "e2e-alarms",
        Duration::from_secs(900),
        |client, ns| async move {
            let history = History::start(&client, &ns);
            let spec = json!({
                "version": "17", "instances": 3, "storage": {"size": "1Gi"},
                "bootstrap": {"initdb": {"database": "app", "owner": "app"}}
            });
            let apply = PatchParams::apply(tusk_e2e::MANAGER);
            apply_value(&client, Some(&ns), database(DB, spec), &apply).await?;
            let databases: Api<Database> = Api::namespaced(client.clone(), &ns);

            // First creation: progress all the way to Ready.
            let created = tusk_e2e::wait_for(&databases, DB, READY_TIMEOUT, |db| {
                db.metadata
                    .generation
                    .is_some_and(|g| settled(db, g, "pg-1"))
            })
            .await?;
            let generation = created.metadata.generation.ok_or("no generation")?;
            // The watch has delivered that Ready status too: every status
            // before it is in the history.
            history
                .until("the Ready status in the watch", |s| {
                    s.phase == Some(DatabasePhase::Ready) && s.generation == Some(generation)
                })
                .await?;
            let phases: Vec<_> = history.all().iter().filter_map(|s| s.phase).collect();
            println!("[alarms] first creation went through {phases:?}");
            history.no_alarm("first creation")?;
            // The cause of the one false alarm seen (a replica not streaming
            // for 80 ms): its manager reloaded PostgreSQL only to dial by
            // address the holder it already streamed from through the
            // Service, and the WAL receiver restarted. Each replica's receiver
            // connects once on the way to Ready.
            for replica in ["pg-2", "pg-3"] {
                let connections = streaming_starts(&client, &ns, replica).await?;
                assert_eq!(
                    connections, 1,
                    "{replica}'s WAL receiver started streaming {connections} times during \
                     the first creation, where nothing asked it to reconnect"
                );
            }
            let warned = warnings(&client, &ns).await?;
            assert!(
                warned.is_empty(),
                "first creation published Warning Events about the Database: {warned:#?}"
            );

            // A switchover asked for through spec.primary.
            let before = history.all().len();
            let patch = json!({"spec": {"primary": "pg-2"}});
            let patched = databases
                .patch(DB, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let asked = patched.metadata.generation.ok_or("no generation")?;
            let done = tusk_e2e::wait_for(&databases, DB, READY_TIMEOUT, |db| {
                settled(db, asked, "pg-2")
            })
            .await?;
            history
                .until("the switched-over Ready status in the watch", |s| {
                    s.phase == Some(DatabasePhase::Ready)
                        && s.generation == Some(asked)
                        && s.current_primary.as_deref() == Some("pg-2")
                })
                .await?;
            let during: Vec<Seen> = history.all().split_off(before);
            let phases: Vec<_> = during.iter().filter_map(|s| s.phase).collect();
            println!("[alarms] the switchover went through {phases:?}");
            assert!(
                phases.contains(&DatabasePhase::SwitchingOver),
                "the switchover never showed phase SwitchingOver; the statuses: {during:#?}"
            );
            history.no_alarm("the switchover")?;
            let warned = warnings(&client, &ns).await?;
            assert!(
                warned.is_empty(),
                "the switchover published Warning Events about the Database: {warned:#?}"
            );
            assert_eq!(done.name_any(), DB);
            Ok(())
        },
    )
    .await;
}

/// How often `pod`'s PostgreSQL logged that its WAL receiver started
/// streaming (once per connection to a primary).
async fn streaming_starts(client: &Client, ns: &str, pod: &str) -> Result<usize> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let params = LogParams {
        container: Some(POSTGRES_CONTAINER.to_owned()),
        ..LogParams::default()
    };
    let logs = pods.logs(pod, &params).await?;
    Ok(logs.matches("started streaming WAL from primary").count())
}
