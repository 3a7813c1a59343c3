//! `kubectl tusk history <db>`: what happened to a Database — failovers,
//! switchovers, backups, upgrades, restarts — with the figures the operator
//! measured, oldest first, from `status.history` (and `status.lastFailover`
//! when the history does not hold it: written before history was kept).

use serde::Serialize;

use super::render::{self, or_dash};
use super::{Error, Output, Session};
use crate::api::status::{DatabaseStatus, HistoryEntry, HistoryKind};

pub async fn run(session: &Session, name: &str, output: Output) -> Result<(), Error> {
    let db = session.database(name).await?;
    let entries = entries(&db.status.unwrap_or_default());
    let text = match output {
        Output::Text => render(&entries),
        Output::Json => serde_json::to_string_pretty(&Document { history: &entries })
            .map(|t| t + "\n")
            .map_err(|e| Error::Render {
                what: "the history as JSON",
                message: e.to_string(),
            })?,
        Output::Yaml => {
            serde_yaml::to_string(&Document { history: &entries }).map_err(|e| Error::Render {
                what: "the history as YAML",
                message: e.to_string(),
            })?
        }
    };
    print!("{text}");
    Ok(())
}

#[derive(Serialize)]
struct Document<'a> {
    history: &'a [HistoryEntry],
}

/// The entries, oldest first (pure).
pub fn entries(status: &DatabaseStatus) -> Vec<HistoryEntry> {
    let mut entries = status.history.clone();
    if let Some(f) = &status.last_failover {
        let recorded = entries.iter().any(|e| {
            e.kind == HistoryKind::Failover
                && e.to.as_deref() == Some(f.to.as_str())
                && e.time.0.duration_since(f.time.0).abs().as_secs() < 60
        });
        if !recorded {
            entries.push(HistoryEntry {
                kind: HistoryKind::Failover,
                time: f.time.clone(),
                from: Some(f.from.clone()),
                to: Some(f.to.clone()),
                name: None,
                duration_milliseconds: f.duration_milliseconds,
                wal_gap_bytes: f.wal_gap_bytes,
                bytes: None,
                succeeded: true,
                message: None,
            });
        }
    }
    entries.sort_by_key(|e| e.time.0);
    entries
}

/// The table (pure).
pub fn render(entries: &[HistoryEntry]) -> String {
    if entries.is_empty() {
        return "No history recorded yet.\n".to_owned();
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let what = match (&e.from, &e.to, &e.name) {
                (Some(from), Some(to), _) => format!("{from} -> {to}"),
                (None, Some(to), _) => format!("-> {to}"),
                (_, _, Some(name)) => name.clone(),
                (Some(from), None, None) => from.clone(),
                (None, None, None) => "-".to_owned(),
            };
            vec![
                render::stamp(e.time.0),
                format!("{:?}", e.kind),
                what,
                or_dash(e.duration_milliseconds.map(render::milliseconds)),
                or_dash(e.wal_gap_bytes.map(render::bytes)),
                or_dash(e.bytes.map(render::bytes)),
                if e.succeeded { "ok" } else { "FAILED" }.to_owned(),
                e.message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    render::table(
        &[
            "TIME", "KIND", "WHAT", "DURATION", "WAL GAP", "SIZE", "RESULT", "MESSAGE",
        ],
        &rows,
    )
}
