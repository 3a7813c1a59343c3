//! `kubectl tusk status <db>`: one screen read in five seconds. It reads
//! only what the API server holds (the Database, its Backups and Events), so
//! `get`/`list`/`watch` on those is all a user needs; [`derive`] turns them
//! into a [`StatusReport`] (pure), which prints as text ([`render`]) or as
//! JSON/YAML, and `--watch` prints it again on every change of the Database.

use std::fmt::Write as _;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde::{Deserialize, Serialize};

use super::render::{self, or_dash};
use super::{Error, Output, Session};
use crate::api::status::{BackupPhase, DatabaseStatus};
use crate::api::v1::{Backup, Database, ReplicationMode};
use crate::resources::names;

/// How many recent Warning Events `status` shows.
const WARNINGS_SHOWN: usize = 5;
/// How far back `status` looks for Warning Events.
const WARNINGS_WITHIN_SECONDS: i64 = 3600;

/// What `status` prints: the Database's status and what is derived from it,
/// its Backups and its Events (the `-o json|yaml` document).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub name: String,
    pub namespace: String,
    pub generation: Option<i64>,
    /// The Database's status as the operator wrote it.
    pub status: DatabaseStatus,
    pub summary: Summary,
    pub replication: Replication,
    pub backups: Backups,
    /// Conditions not in their good state.
    pub attention: Vec<ConditionSummary>,
    /// Warning Events of the Database and its pods in the last hour, newest
    /// last.
    pub warnings: Vec<EventSummary>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub phase: String,
    pub ready: bool,
    /// The operator has not yet looked at the latest spec.
    pub spec_pending: bool,
    /// What is under way (the Progressing condition's message).
    pub under_way: Option<String>,
    /// Why it is not Ready (the Ready condition's message), when it is not.
    pub not_ready: Option<String>,
    pub instances_wanted: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Replication {
    /// `async` or `sync`.
    pub mode: String,
    /// With `sync`: how many standbys confirm each commit.
    pub min_sync_replicas: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Backups {
    /// `spec.backup` is set.
    pub configured: bool,
    /// Completed Backups of this Database.
    pub completed: usize,
    pub last_completed: Option<BackupSummary>,
    /// The earliest point it can be restored to: the start of the oldest
    /// completed base backup kept.
    pub recoverable_from: Option<Time>,
    /// The latest: now while WAL archiving is healthy, else the end of the
    /// newest backup.
    pub recoverable_to: Option<Time>,
    /// The BackupHealthy condition.
    pub archiving: Option<ConditionSummary>,
    /// Backups that failed, newest last (at most three).
    pub failed: Vec<BackupSummary>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupSummary {
    pub name: String,
    pub completed_at: Option<Time>,
    pub bytes: Option<i64>,
    pub verified: Option<bool>,
    pub message: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionSummary {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventSummary {
    pub time: Option<Time>,
    /// `Database/pg`, `Pod/pg-2`.
    pub object: String,
    pub reason: String,
    pub message: String,
    pub count: i32,
}

/// Everything [`derive`] reads, as fetched (or as a fixture holds it).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Inputs {
    pub now: Timestamp,
    pub database: Database,
    #[serde(default)]
    pub backups: Vec<Backup>,
    #[serde(default)]
    pub events: Vec<Event>,
}

pub async fn run(session: &Session, name: &str, output: Output, watch: bool) -> Result<(), Error> {
    let mut inputs = fetch(session, name).await?;
    print(&derive(&inputs), output)?;
    if !watch {
        return Ok(());
    }
    let api: Api<Database> = Api::namespaced(session.client.clone(), &session.namespace);
    let mut changes = std::pin::pin!(watcher::watch_object(api, name).boxed());
    while let Some(change) = changes.next().await {
        match change {
            Ok(Some(database)) => {
                if database.metadata.resource_version == inputs.database.metadata.resource_version {
                    continue;
                }
                inputs = fetch_around(session, database).await?;
                if output == Output::Text {
                    println!("\n--- {}", render::stamp(inputs.now));
                }
                print(&derive(&inputs), output)?;
            }
            Ok(None) => return Err(Error::NotFound(format!("Database {name} was deleted"))),
            Err(err) => eprintln!("watching Database {name}: {err}"),
        }
    }
    Ok(())
}

fn print(report: &StatusReport, output: Output) -> Result<(), Error> {
    let text = match output {
        Output::Text => render(report),
        Output::Json => serde_json::to_string_pretty(report)
            .map(|t| t + "\n")
            .map_err(|e| Error::Render {
                what: "the status as JSON",
                message: e.to_string(),
            })?,
        Output::Yaml => serde_yaml::to_string(report).map_err(|e| Error::Render {
            what: "the status as YAML",
            message: e.to_string(),
        })?,
    };
    print!("{text}");
    Ok(())
}

/// The Database and what `status` shows with it.
pub async fn fetch(session: &Session, name: &str) -> Result<Inputs, Error> {
    let database = session.database(name).await?;
    fetch_around(session, database).await
}

async fn fetch_around(session: &Session, database: Database) -> Result<Inputs, Error> {
    let name = database.name_any();
    Ok(Inputs {
        now: Timestamp::now(),
        backups: backups_of(session, &name).await?,
        events: events_of(session, &name).await?,
        database,
    })
}

/// The Backups whose `spec.database` is `name`.
pub async fn backups_of(session: &Session, name: &str) -> Result<Vec<Backup>, Error> {
    let api: Api<Backup> = Api::namespaced(session.client.clone(), &session.namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing Backups"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|b| b.spec.database == name)
        .collect())
}

/// The namespace's Events about the Database `name` and its instance pods.
pub async fn events_of(session: &Session, name: &str) -> Result<Vec<Event>, Error> {
    let api: Api<Event> = Api::namespaced(session.client.clone(), &session.namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing Events"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| concerns(e, name))
        .collect())
}

/// Whether an Event is about the Database `name` or one of its instances.
pub fn concerns(event: &Event, name: &str) -> bool {
    let object = &event.involved_object;
    let object_name = object.name.as_deref().unwrap_or_default();
    match object.kind.as_deref() {
        Some("Database") => object_name == name,
        Some("Pod") => names::serial_of(name, object_name).is_some(),
        _ => false,
    }
}

/// When an Event last happened.
pub fn event_time(event: &Event) -> Option<Timestamp> {
    event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// What `status` shows, from what the API server holds (pure).
pub fn derive(inputs: &Inputs) -> StatusReport {
    let db = &inputs.database;
    let status = db.status.clone().unwrap_or_default();
    let generation = db.metadata.generation;
    let ready = render::condition(&status.conditions, "Ready");
    let progressing = render::condition(&status.conditions, "Progressing");
    let summary = Summary {
        phase: status
            .phase
            .map_or_else(|| "Unknown".to_owned(), |p| p.as_str().to_owned()),
        ready: ready.is_some_and(|c| c.status == "True"),
        spec_pending: generation.is_some() && status.observed_generation < generation,
        under_way: progressing
            .filter(|c| c.status == "True")
            .map(|c| c.message.clone()),
        // The same words twice say nothing more.
        not_ready: ready
            .filter(|c| c.status != "True")
            .filter(|c| progressing.is_none_or(|p| p.status != "True" || p.message != c.message))
            .map(|c| c.message.clone()),
        instances_wanted: db.spec.instances,
    };
    let replication = Replication {
        mode: match db.spec.replication.mode {
            ReplicationMode::Async => "async".to_owned(),
            ReplicationMode::Sync => "sync".to_owned(),
        },
        min_sync_replicas: (db.spec.replication.mode == ReplicationMode::Sync)
            .then_some(db.spec.replication.min_sync_replicas),
    };
    let attention = status
        .conditions
        .iter()
        .filter(|c| !render::is_good(c))
        .map(summarize)
        .collect();
    StatusReport {
        name: db.name_any(),
        namespace: db.namespace().unwrap_or_default(),
        generation,
        backups: backups(db, &status, &inputs.backups, inputs.now),
        warnings: warnings(&db.name_any(), &inputs.events, inputs.now),
        status,
        summary,
        replication,
        attention,
    }
}

fn summarize(c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> ConditionSummary {
    ConditionSummary {
        type_: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
    }
}

fn backups(db: &Database, status: &DatabaseStatus, all: &[Backup], now: Timestamp) -> Backups {
    let phase = |b: &Backup| b.status.as_ref().and_then(|s| s.phase);
    let name = db.name_any();
    let all: Vec<&Backup> = all.iter().filter(|b| b.spec.database == name).collect();
    let mut completed: Vec<&Backup> = all
        .iter()
        .copied()
        .filter(|b| phase(b) == Some(BackupPhase::Completed))
        .collect();
    completed.sort_by_key(|b| b.status.as_ref().and_then(|s| s.completed_at.clone()));
    let summary = |b: &Backup| {
        let s = b.status.clone().unwrap_or_default();
        BackupSummary {
            name: b.name_any(),
            completed_at: s.completed_at,
            bytes: s.bytes,
            verified: s.verified,
            message: render::condition(&s.conditions, "Ready")
                .filter(|c| c.status != "True")
                .map(|c| c.message.clone()),
        }
    };
    let archiving = render::condition(&status.conditions, "BackupHealthy");
    let healthy = archiving.is_some_and(|c| c.status == "True");
    let recoverable_from = completed
        .iter()
        .filter_map(|b| b.status.as_ref()?.started_at.clone())
        .min_by_key(|t| t.0);
    let newest_end = completed
        .last()
        .and_then(|b| b.status.as_ref()?.completed_at.clone());
    let recoverable_to =
        recoverable_from
            .as_ref()
            .and(if healthy { Some(Time(now)) } else { newest_end });
    let mut failed: Vec<&Backup> = all
        .iter()
        .copied()
        .filter(|b| phase(b) == Some(BackupPhase::Failed))
        .collect();
    failed.sort_by_key(|b| b.metadata.creation_timestamp.clone());
    let skip = failed.len().saturating_sub(3);
    Backups {
        configured: db.spec.backup.is_some(),
        completed: completed.len(),
        last_completed: completed.last().map(|b| summary(b)).or_else(|| {
            status.last_backup.as_ref().map(|l| BackupSummary {
                name: l.name.clone(),
                completed_at: l.completed_at.clone(),
                bytes: None,
                verified: None,
                message: None,
            })
        }),
        recoverable_from,
        recoverable_to,
        archiving: archiving.map(summarize),
        failed: failed.into_iter().skip(skip).map(summary).collect(),
    }
}

fn warnings(name: &str, events: &[Event], now: Timestamp) -> Vec<EventSummary> {
    let mut recent: Vec<(Timestamp, &Event)> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning") && concerns(e, name))
        .filter_map(|e| Some((event_time(e)?, e)))
        .filter(|(t, _)| now.duration_since(*t).as_secs() <= WARNINGS_WITHIN_SECONDS)
        .collect();
    recent.sort_by_key(|(t, _)| *t);
    let skip = recent.len().saturating_sub(WARNINGS_SHOWN);
    recent
        .into_iter()
        .skip(skip)
        .map(|(t, e)| EventSummary {
            time: Some(Time(t)),
            object: format!(
                "{}/{}",
                e.involved_object.kind.as_deref().unwrap_or("?"),
                e.involved_object.name.as_deref().unwrap_or("?")
            ),
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default().trim().to_owned(),
            count: e.count.unwrap_or(1),
        })
        .collect()
}

/// The screen (pure; no colour, so golden files compare exactly).
pub fn render(report: &StatusReport) -> String {
    let mut out = String::new();
    headline(&mut out, report);
    instances(&mut out, report);
    replication(&mut out, report);
    backups_section(&mut out, report);
    failover(&mut out, report);
    upgrade(&mut out, report);
    endpoints(&mut out, report);
    attention(&mut out, report);
    warnings_section(&mut out, report);
    out
}

fn headline(out: &mut String, r: &StatusReport) {
    let s = &r.status;
    let _ = writeln!(
        out,
        "Database {}/{}: {}{}, {}/{} instances ready, primary {}",
        r.namespace,
        r.name,
        r.summary.phase,
        if r.summary.ready { "" } else { " (not Ready)" },
        s.ready_instances.unwrap_or(0),
        r.summary.instances_wanted,
        or_dash(s.current_primary.clone()),
    );
    if s.target_primary.is_some() && s.target_primary != s.current_primary {
        let _ = writeln!(
            out,
            "  moving the primary role to {}",
            or_dash(s.target_primary.clone())
        );
    }
    if r.summary.spec_pending {
        let _ = writeln!(
            out,
            "  generation {} not yet observed by the operator (status is of {})",
            r.generation.unwrap_or(0),
            or_dash(s.observed_generation.map(|g| g.to_string()))
        );
    }
    if let Some(msg) = &r.summary.under_way {
        let _ = writeln!(out, "  under way: {msg}");
    }
    if let Some(msg) = &r.summary.not_ready {
        let _ = writeln!(out, "  not ready: {msg}");
    }
    if let Some(applied) = &s.applied {
        let _ = writeln!(
            out,
            "  running PostgreSQL {}, {} volumes",
            applied.version, applied.storage_size
        );
    }
}

fn instances(out: &mut String, r: &StatusReport) {
    out.push_str("\nInstances\n");
    if r.status.instances.is_empty() {
        out.push_str("  none yet\n");
        return;
    }
    let rows: Vec<Vec<String>> = r
        .status
        .instances
        .iter()
        .map(|i| {
            vec![
                i.name.clone(),
                or_dash(i.role.map(|role| role_word(role).to_owned())),
                if i.ready { "yes" } else { "no" }.to_owned(),
                or_dash(i.timeline.map(|t| t.to_string())),
                or_dash(i.lsn.clone()),
                or_dash(i.lag_bytes.map(render::bytes)),
                or_dash(i.lag_milliseconds.map(render::milliseconds)),
                or_dash(i.node.clone()),
                or_dash(i.qos_class.clone()),
                or_dash(i.image.clone()),
            ]
        })
        .collect();
    let header = [
        "NAME", "ROLE", "READY", "TL", "LSN", "LAG", "LAG TIME", "NODE", "QOS", "IMAGE",
    ];
    indent(out, &render::table(&header, &rows));
}

fn role_word(role: crate::api::status::InstanceRole) -> &'static str {
    match role {
        crate::api::status::InstanceRole::Primary => "primary",
        crate::api::status::InstanceRole::Replica => "replica",
    }
}

fn replication(out: &mut String, r: &StatusReport) {
    let mode = match r.replication.min_sync_replicas {
        Some(n) => format!(
            "synchronous, {n} standby{} confirm{} each commit",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" }
        ),
        None => "asynchronous".to_owned(),
    };
    let _ = writeln!(out, "\nReplication: {mode}");
}

fn backups_section(out: &mut String, r: &StatusReport) {
    let b = &r.backups;
    if !b.configured && b.completed == 0 && b.last_completed.is_none() {
        out.push_str("\nBackups: not configured (spec.backup)\n");
        return;
    }
    out.push_str("\nBackups\n");
    match &b.last_completed {
        Some(last) => {
            let verified = match last.verified {
                Some(true) => "verified",
                Some(false) => "VERIFICATION FAILED",
                None => "not verified",
            };
            let _ = writeln!(
                out,
                "  last completed: {} at {}, {}, {} ({} completed kept)",
                last.name,
                last.completed_at
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |t| render::stamp(t.0)),
                or_dash(last.bytes.map(render::bytes)),
                verified,
                b.completed
            );
        }
        None => out.push_str("  last completed: none\n"),
    }
    if let (Some(from), Some(to)) = (&b.recoverable_from, &b.recoverable_to) {
        let _ = writeln!(
            out,
            "  recoverable: {} to {} ({})",
            render::stamp(from.0),
            render::stamp(to.0),
            render::span(from.0, to.0)
        );
    }
    match &b.archiving {
        Some(c) if c.status == "True" => {
            let _ = writeln!(out, "  archiving: healthy ({})", c.reason);
        }
        Some(c) => {
            let _ = writeln!(
                out,
                "  archiving: {} ({}): {}",
                c.status, c.reason, c.message
            );
        }
        None => out.push_str("  archiving: not reported\n"),
    }
    for failed in &b.failed {
        let _ = writeln!(
            out,
            "  failed: {}{}",
            failed.name,
            failed
                .message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
    }
}

fn failover(out: &mut String, r: &StatusReport) {
    if let Some(f) = &r.status.last_failover {
        let _ = writeln!(
            out,
            "\nLast failover: {} -> {} at {}, writes paused {}, WAL gap {}",
            f.from,
            f.to,
            render::stamp(f.time.0),
            or_dash(f.duration_milliseconds.map(render::milliseconds)),
            or_dash(f.wal_gap_bytes.map(render::bytes)),
        );
    }
}

fn upgrade(out: &mut String, r: &StatusReport) {
    if let Some(u) = &r.status.upgrade {
        let _ = writeln!(
            out,
            "\nMajor upgrade {} -> {}: {:?} on {}{}",
            u.from,
            u.to,
            u.step,
            u.instance,
            u.message
                .as_ref()
                .map(|m| format!("\n  {m}"))
                .unwrap_or_default()
        );
    }
    if let Some(m) = &r.status.migrations {
        let mut parts = Vec::new();
        if let Some(v) = &m.applied {
            parts.push(format!("applied {v}"));
        }
        if let Some(v) = &m.running {
            parts.push(format!("running {v}"));
        }
        if let Some(v) = &m.failed {
            parts.push(format!("FAILED {v}"));
        }
        let _ = writeln!(out, "\nMigrations: {}", parts.join(", "));
        if let (Some(_), Some(msg)) = (&m.failed, &m.message) {
            let _ = writeln!(out, "  {}", msg.lines().last().unwrap_or_default());
        }
    }
}

fn endpoints(out: &mut String, r: &StatusReport) {
    if r.status.endpoints.is_empty() {
        return;
    }
    out.push_str("\nEndpoints\n");
    let rows: Vec<Vec<String>> = r
        .status
        .endpoints
        .iter()
        .map(|e| {
            let host = e
                .hostname
                .clone()
                .or_else(|| e.addresses.first().cloned())
                .unwrap_or_else(|| "(pending)".to_owned());
            vec![
                e.service.clone(),
                format!("{:?}", e.type_),
                match e.port {
                    Some(port) => format!("{host}:{port}"),
                    None => host,
                },
                if e.reached { "yes" } else { "no" }.to_owned(),
            ]
        })
        .collect();
    indent(
        out,
        &render::table(&["SERVICE", "TYPE", "ADDRESS", "REACHED"], &rows),
    );
}

fn attention(out: &mut String, r: &StatusReport) {
    if r.attention.is_empty() {
        return;
    }
    out.push_str("\nNeeds attention\n");
    for c in &r.attention {
        let _ = writeln!(
            out,
            "  {}={} {}: {}",
            c.type_, c.status, c.reason, c.message
        );
    }
}

fn warnings_section(out: &mut String, r: &StatusReport) {
    if r.warnings.is_empty() {
        return;
    }
    out.push_str("\nRecent warnings (last hour)\n");
    for w in &r.warnings {
        let count = if w.count > 1 {
            format!(" (x{})", w.count)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {} {} {}{}: {}",
            w.time
                .as_ref()
                .map_or_else(|| "-".to_owned(), |t| render::clock(t.0)),
            w.object,
            w.reason,
            count,
            w.message
        );
    }
}

fn indent(out: &mut String, text: &str) {
    for line in text.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
}
