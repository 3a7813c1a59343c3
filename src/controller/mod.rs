//! The Database and Backup controllers: thin shells around pure planning.

pub mod backup;
pub mod conditions;
pub mod database;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use tracing::warn;

use crate::error::Error;
use crate::resources::BuildConfig;
use crate::telemetry::metrics::Metrics;
use database::instances::InstanceApi;

/// Field manager for every server-side apply Tusk makes.
pub const FIELD_MANAGER: &str = "tusk";
/// Finalizer for external cleanup (final backup, object storage).
pub const FINALIZER: &str = "tusk.dev/cleanup";

/// Shared by every reconciliation of one controller.
pub struct Context {
    pub client: Client,
    pub metrics: Metrics,
    /// Images and pull policy for the objects Tusk builds.
    pub build: BuildConfig,
    /// The HTTP client for the instance managers.
    pub instances: InstanceApi,
    recorder: Recorder,
    /// Consecutive failures per object, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// When each object's status was last written, to pace writes that only
    /// refresh progress figures.
    status_writes: Mutex<HashMap<String, Instant>>,
}

impl Context {
    pub fn new(
        client: Client,
        metrics: Metrics,
        reporter: Reporter,
        build: BuildConfig,
    ) -> Arc<Self> {
        Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            build,
            instances: InstanceApi::default(),
            failures: Mutex::default(),
            status_writes: Mutex::default(),
        })
    }

    /// Publishes an Event about `obj`. Events are best effort: a failure is logged,
    /// never allowed to fail the reconciliation that already did its work.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            warn!(%error, reason, "could not publish an event");
        }
    }

    /// Whether a progress-only status write for `key` is due (none in `interval`).
    pub fn progress_due(&self, key: &str, interval: Duration) -> bool {
        match self.status_writes.lock() {
            Ok(writes) => writes.get(key).is_none_or(|at| at.elapsed() >= interval),
            Err(_) => true,
        }
    }

    pub fn progress_written(&self, key: &str) {
        if let Ok(mut writes) = self.status_writes.lock() {
            writes.insert(key.to_owned(), Instant::now());
        }
    }

    fn succeeded(&self, key: &str) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(key);
        }
    }

    fn failed(&self, key: &str) -> u32 {
        match self.failures.lock() {
            Ok(mut failures) => {
                let count = failures.entry(key.to_owned()).or_insert(0);
                *count = count.saturating_add(1);
                *count
            }
            Err(_) => 1,
        }
    }
}

fn key_of<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

/// Backoff for the `attempt`-th consecutive failure (from 1): doubling from one
/// second up to five minutes, spread by ±20% so that many objects failing together
/// do not retry in lockstep. `jitter` is uniform in [0, 1).
pub fn backoff(attempt: u32, jitter: f64) -> Duration {
    let base = Duration::from_secs(1).saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let capped = base.min(Duration::from_secs(300));
    capped.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0))
}

/// What a controller does after a failed reconciliation: transient errors retry
/// with backoff, the rest wait for the object to change (they already surfaced as
/// a Condition where they could).
pub fn error_policy<K: Resource>(
    controller: &'static str,
    obj: &K,
    error: &Error,
    ctx: &Context,
) -> Action {
    ctx.metrics.reconcile_failed(controller, error);
    let category = error.category();
    warn!(controller, object = %key_of(obj), category = category.as_str(), %error, "reconcile failed");
    if category.is_transient() {
        let attempt = ctx.failed(&key_of(obj));
        Action::requeue(backoff(attempt, rand::random::<f64>()))
    } else {
        Action::await_change()
    }
}

/// Records a successful pass (resets the backoff).
pub fn reconciled<K: Resource>(obj: &K, ctx: &Context) {
    ctx.succeeded(&key_of(obj));
}

/// Namespace of a namespaced object (every Tusk kind is namespaced).
pub fn namespace_of<K: Resource>(obj: &K) -> Result<String, Error> {
    obj.namespace()
        .ok_or(Error::MissingField("metadata.namespace"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1, 0.5), Duration::from_secs(1));
        assert_eq!(backoff(2, 0.5), Duration::from_secs(2));
        assert_eq!(backoff(5, 0.5), Duration::from_secs(16));
        assert_eq!(backoff(30, 0.5), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX, 0.5), Duration::from_secs(300));
    }

    #[test]
    fn backoff_jitter_stays_within_twenty_percent() {
        assert_eq!(backoff(4, 0.0), Duration::from_millis(6400));
        assert!(backoff(4, 0.999) < Duration::from_millis(9600));
    }
}
