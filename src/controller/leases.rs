//! The operator's view of every Database's primary Lease, from a watch: each
//! change of a lease's resourceVersion is timed by this process's clock as it
//! arrives ([`crate::failover::lease::Observer`]), so "expired" never compares
//! the holder's clock with ours. A ticker wakes a Database whose lease stops
//! changing (its primary stopped renewing) or changes holder, so a dead
//! primary is noticed within about a second with no other event to go by.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};

use crate::api::v1::Database;
use crate::failover::lease::{Observer, Record, State};
use crate::failover::{Moment, Timing};
use crate::resources::labels;

/// A lease is suspect when it has not changed for this long: two renewals missed.
const SUSPECT_AFTER: Duration = Duration::from_millis(2100);

#[derive(Default)]
struct Entry {
    observer: Observer,
    holder: Option<String>,
    /// The staleness already signalled: 0 none, 1 suspect, 2 expired.
    signalled: u8,
    database: String,
}

/// Every primary lease seen, by `namespace/name`.
pub struct Leases {
    origin: Instant,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Default for Leases {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            entries: Mutex::default(),
        }
    }
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Leases {
    fn now(&self) -> Moment {
        self.origin.elapsed()
    }

    /// Record a lease as read; the Database to wake when its holder changed.
    pub fn observe(&self, lease: &Lease) -> Option<ObjectRef<Database>> {
        let namespace = lease.namespace()?;
        let database = lease.labels().get(labels::DATABASE)?.clone();
        let spec = lease.spec.as_ref();
        let record = Record {
            version: lease.resource_version().unwrap_or_default(),
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            duration: Duration::from_secs(
                spec.and_then(|s| s.lease_duration_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(Timing::DEFAULT.lease.as_secs()),
            ),
        };
        let now = self.now();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries
            .entry(key(&namespace, &lease.name_any()))
            .or_default();
        let before = entry.observer.version().map(str::to_owned);
        entry.observer.observe(&record, now);
        entry.database = database.clone();
        if before.as_deref() != Some(record.version.as_str()) {
            entry.signalled = 0;
        }
        let changed = entry.holder != record.holder;
        entry.holder = record.holder;
        changed.then(|| ObjectRef::new(&database).within(&namespace))
    }

    /// The lease as this process judges it now.
    pub fn state(&self, namespace: &str, name: &str) -> State {
        let now = self.now();
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key(namespace, name))
            .map_or(State::Unobserved, |e| e.observer.state(now))
    }

    /// Whether the lease has stopped changing: suspect or expired.
    pub fn troubled(&self, namespace: &str, name: &str) -> bool {
        staleness(&self.state(namespace, name)) > 0
    }

    /// Databases whose lease turned suspect or expired since last asked.
    fn due(&self) -> Vec<ObjectRef<Database>> {
        let now = self.now();
        let mut due = Vec::new();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, entry) in entries.iter_mut() {
            let level = staleness(&entry.observer.state(now));
            if level > entry.signalled {
                entry.signalled = level;
                if let Some((namespace, _)) = key.split_once('/') {
                    due.push(ObjectRef::new(&entry.database).within(namespace));
                }
            }
        }
        due
    }
}

/// How stale a lease is: 0 live (or not held), 1 suspect, 2 expired.
fn staleness(state: &State) -> u8 {
    match state {
        State::Expired { .. } => 2,
        // Unchanged for SUSPECT_AFTER: the remaining time says how long.
        State::Held { remaining, .. } => {
            u8::from(*remaining + SUSPECT_AFTER <= Timing::DEFAULT.lease)
        }
        State::Released | State::Unobserved => 0,
    }
}

/// Wake-ups for the Database controller: holder changes as the watch sees
/// them, and leases turning suspect or expired as a ticker sees them.
pub fn triggers(
    api: Api<Lease>,
    leases: std::sync::Arc<Leases>,
) -> impl Stream<Item = ObjectRef<Database>> + Send + 'static {
    let config = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::MANAGED_BY,
        labels::MANAGED_BY_VALUE
    ));
    let watched = {
        let leases = leases.clone();
        watcher(api, config)
            .default_backoff()
            .applied_objects()
            .filter_map(move |event| {
                let wake = match event {
                    Ok(lease) => leases.observe(&lease),
                    Err(error) => {
                        tracing::debug!(%error, "watching primary leases");
                        None
                    }
                };
                futures::future::ready(wake)
            })
    };
    let ticks = tokio_stream_interval(Duration::from_millis(250))
        .flat_map(move |()| futures::stream::iter(leases.due()));
    futures::stream::select(watched, ticks)
}

fn tokio_stream_interval(period: Duration) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(tokio::time::interval(period), |mut interval| async move {
        interval.tick().await;
        Some(((), interval))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn lease(version: &str, holder: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("pg-primary".into()),
                namespace: Some("ns".into()),
                resource_version: Some(version.into()),
                labels: Some(BTreeMap::from([(
                    labels::DATABASE.to_owned(),
                    "pg".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(5),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn holder_changes_wake_the_database_and_renewals_do_not() {
        let leases = Leases::default();
        assert!(leases.observe(&lease("1", Some("pg-1"))).is_some());
        assert!(leases.observe(&lease("2", Some("pg-1"))).is_none());
        let wake = leases.observe(&lease("3", None)).expect("released");
        assert_eq!(wake.name, "pg");
        assert_eq!(leases.state("ns", "pg-primary"), State::Released);
        assert_eq!(leases.state("ns", "other"), State::Unobserved);
    }
}
