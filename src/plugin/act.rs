//! What the commands that act share: reading a Database or refusing in one
//! line when it is not there, choosing an instance from its status, and
//! `--wait`: watching one object until a pure judgement says it is done,
//! with progress lines meanwhile.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::Error;
use super::term::Progress;
use crate::api::status::{DatabaseStatus, InstanceRole, InstanceStatus};
use crate::api::v1::Database;

/// `--instance`/`--to` as given: a number means `<database>-<number>`.
pub fn instance_name(database: &str, given: &str) -> String {
    if !given.is_empty() && given.bytes().all(|b| b.is_ascii_digit()) {
        format!("{database}-{given}")
    } else {
        given.to_owned()
    }
}

/// The ready replicas, the least behind first (unknown lag last).
pub fn ready_replicas(status: &DatabaseStatus) -> Vec<&InstanceStatus> {
    let mut replicas: Vec<&InstanceStatus> = status
        .instances
        .iter()
        .filter(|i| i.ready && i.role == Some(InstanceRole::Replica))
        .filter(|i| status.current_primary.as_deref() != Some(i.name.as_str()))
        .collect();
    replicas.sort_by_key(|i| (i.lag_bytes.unwrap_or(i64::MAX), i.name.clone()));
    replicas
}

/// The condition `type_`.
pub fn condition<'a>(status: &'a DatabaseStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Ready is True and describes `generation` (or a later one).
pub fn ready_at(db: &Database, generation: i64) -> bool {
    let Some(status) = &db.status else {
        return false;
    };
    status.observed_generation.unwrap_or(0) >= generation
        && condition(status, "Ready")
            .is_some_and(|c| c.status == "True" && c.observed_generation.unwrap_or(0) >= generation)
}

/// A line on where a Database is: its phase and what Ready says.
pub fn phase_line(db: &Database) -> String {
    let Some(status) = &db.status else {
        return "waiting for the operator".to_owned();
    };
    let phase = status.phase.map_or("Unknown", |p| p.as_str());
    match condition(status, "Ready").filter(|c| !c.message.is_empty()) {
        Some(ready) => format!("{phase}: {}", ready.message),
        None => phase.to_owned(),
    }
}

/// A duration as people read it: `850 ms`, `4.2 s`, `3 min 12 s`.
pub fn human_duration(milliseconds: i64) -> String {
    match milliseconds {
        ..1_000 => format!("{milliseconds} ms"),
        1_000..60_000 => format!("{:.1} s", milliseconds as f64 / 1000.0),
        _ => {
            let seconds = milliseconds / 1000;
            format!("{} min {} s", seconds / 60, seconds % 60)
        }
    }
}

/// A size as people read it, in binary units.
pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// What a judgement of the watched object says.
#[derive(Debug)]
pub enum Step<T> {
    /// Done, with what to report.
    Done(T),
    /// Not yet: where it is, and how far (for a bar) when known.
    Waiting(String, Option<u64>),
    /// It will not get done.
    Failed(Error),
}

/// Watches `name` through `api` until `judge` says it is done or failed,
/// showing its progress; gives up after `timeout` seconds.
pub async fn watch_until<K, T>(
    api: &Api<K>,
    name: &str,
    timeout: u64,
    what: &str,
    progress: &mut Progress,
    mut judge: impl FnMut(&K) -> Step<T>,
) -> Result<T, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let outcome = tokio::time::timeout(Duration::from_secs(timeout), async {
        while let Some(event) = events.next().await {
            // The watch reconnects by itself after an error.
            let Ok(object) = event else { continue };
            if object.name_any() != name {
                continue;
            }
            match judge(&object) {
                Step::Done(done) => return Ok(done),
                Step::Waiting(message, position) => progress.update(&message, position),
                Step::Failed(error) => return Err(error),
            }
        }
        Err(Error::Failed(format!("the watch on {what} ended")))
    })
    .await;
    outcome.unwrap_or_else(|_| {
        Err(Error::TimedOut {
            seconds: timeout,
            what: what.to_owned(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_given_by_number_is_named_for_the_database() {
        assert_eq!(instance_name("pg", "2"), "pg-2");
        assert_eq!(instance_name("pg", "pg-2"), "pg-2");
        assert_eq!(instance_name("pg", "other"), "other");
    }

    fn instance(name: &str, role: InstanceRole, ready: bool, lag: Option<i64>) -> InstanceStatus {
        InstanceStatus {
            name: name.into(),
            role: Some(role),
            ready,
            lag_bytes: lag,
            ..InstanceStatus::default()
        }
    }

    #[test]
    fn ready_replicas_come_least_behind_first() {
        let status = DatabaseStatus {
            current_primary: Some("pg-1".into()),
            instances: vec![
                instance("pg-1", InstanceRole::Primary, true, None),
                instance("pg-2", InstanceRole::Replica, true, Some(300)),
                instance("pg-3", InstanceRole::Replica, true, Some(10)),
                instance("pg-4", InstanceRole::Replica, false, Some(0)),
                instance("pg-5", InstanceRole::Replica, true, None),
            ],
            ..DatabaseStatus::default()
        };
        let names: Vec<&str> = ready_replicas(&status)
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        assert_eq!(names, ["pg-3", "pg-2", "pg-5"]);
    }

    #[test]
    fn figures_read_like_people_say_them() {
        assert_eq!(human_duration(850), "850 ms");
        assert_eq!(human_duration(4_210), "4.2 s");
        assert_eq!(human_duration(192_000), "3 min 12 s");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 * 1024 * 1024 + 512 * 1024), "3.5 MiB");
    }
}
