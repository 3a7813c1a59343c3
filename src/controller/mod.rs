//! The controllers (Database, Backup, backup verification, Drill, and the
//! copies of the default store's credentials in [`store_credentials`]):
//! thin shells around pure planning. Each pass observes, asks a pure planner
//! what to do (`crate::lifecycle` for a Database, `backup::decide` and
//! `verification::decide` for Backups, `crate::drill` for a Drill), carries
//! it out and writes the status once (a Drill's status is written before its
//! actions, and again when an action's outcome changes it). The [`Context`] they share holds the clients, the Event
//! recorder, the metrics, and the little a pass remembers between passes
//! (the last primary seen, when the status last changed, the last retention
//! pass), which the planners receive as observations.

pub mod backup;
pub mod caches;
pub mod conditions;
pub mod credentials;
pub mod database;
pub mod drill;
mod error;
pub mod guarded;
pub mod in_flight;
pub mod lane;
pub mod leases;
pub mod passes;
pub mod store_credentials;
pub mod verification;

pub use error::Error;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tracing::warn;

use crate::resources::BuildConfig;
use crate::telemetry::metrics::{Metrics, ReconcileTimer};
use database::instances::{HttpInstances, Instances};

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
    /// How the instance managers are reached (HTTP, or fakes in tests).
    pub instances: Arc<dyn Instances>,
    /// Every primary Lease, as this process observes it.
    pub leases: Arc<leases::Leases>,
    /// Databases whose primary's pod the pod watch saw go or fail, for the
    /// lane of their next pass.
    pub alarms: Arc<database::urgency::Alarms>,
    /// The objects a Database pass reads from caches (empty for the other
    /// controllers).
    pub caches: caches::Caches,
    recorder: Recorder,
    /// Consecutive failures per object, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// When each object's status was last written, to pace writes that only
    /// refresh progress figures.
    status_writes: Mutex<HashMap<String, Instant>>,
    /// The resourceVersion each object had when its last reconciliation
    /// finished: the work-queue depth counts the objects whose version differs.
    finished: Mutex<HashMap<String, String>>,
    /// What was last recorded about each object (the Database's primary, the
    /// Backup's outcome), so that a change is counted once even when a later
    /// pass gets an object from a cache that has not seen the status write yet.
    remembered: Mutex<HashMap<String, String>>,
    /// Each Database's last retention pass by this operator: the lifecycle
    /// decides from it when the next one is due.
    pruned: Mutex<HashMap<String, crate::lifecycle::RetentionPass>>,
    /// Each Database's primary as last seen, to measure a failover.
    outages: Mutex<HashMap<String, database::outage::Outage>>,
}

impl Context {
    pub fn new(
        client: Client,
        metrics: Metrics,
        reporter: Reporter,
        build: BuildConfig,
    ) -> Arc<Self> {
        Self::with_instances(
            client,
            metrics,
            reporter,
            build,
            Arc::new(HttpInstances::default()),
        )
    }

    /// [`Context::new`] with another way to reach the instance managers.
    pub fn with_instances(
        client: Client,
        metrics: Metrics,
        reporter: Reporter,
        build: BuildConfig,
        instances: Arc<dyn Instances>,
    ) -> Arc<Self> {
        Self::assemble(
            client,
            metrics,
            reporter,
            build,
            instances,
            caches::Caches::default(),
        )
    }

    /// The Database controller's: [`Context::new`] whose passes read `caches`.
    pub fn for_databases(
        client: Client,
        metrics: Metrics,
        reporter: Reporter,
        build: BuildConfig,
        caches: caches::Caches,
    ) -> Arc<Self> {
        Self::assemble(
            client,
            metrics,
            reporter,
            build,
            Arc::new(HttpInstances::default()),
            caches,
        )
    }

    fn assemble(
        client: Client,
        metrics: Metrics,
        reporter: Reporter,
        build: BuildConfig,
        instances: Arc<dyn Instances>,
        caches: caches::Caches,
    ) -> Arc<Self> {
        Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            build,
            instances,
            leases: Arc::default(),
            alarms: Arc::default(),
            caches,
            failures: Mutex::default(),
            status_writes: Mutex::default(),
            finished: Mutex::default(),
            remembered: Mutex::default(),
            pruned: Mutex::default(),
            outages: Mutex::default(),
        })
    }

    /// Starts a reconciliation of `obj`: counts and times it, and when the
    /// returned guard drops (however the pass ends) records the version of
    /// `obj` as reconciled.
    pub fn pass<K: Resource>(&self, controller: &'static str, obj: &K) -> Pass<'_> {
        Pass {
            ctx: self,
            key: key_of(obj),
            version: obj.meta().resource_version.clone().unwrap_or_default(),
            _timer: self.metrics.reconcile_started(controller),
        }
    }

    /// The work-queue depth among `known` (every object in the controller's
    /// cache): those whose current version has not been through a finished
    /// reconciliation, waiting for a worker or in flight.
    ///
    /// kube-runtime's Controller does not expose its queue, and most of what it
    /// holds are requeues timed for later, which are not a backlog. What piles up
    /// when the operator falls behind are changed objects not yet reconciled, and
    /// those the cache shows directly. Not counted: a Database woken by a change
    /// to one of its Pods or PVCs (the Database itself did not change) and
    /// retries waiting out their backoff.
    ///
    /// Also forgets what this context remembers about objects no longer known.
    pub fn queue_depth<K: Resource>(&self, known: &[Arc<K>]) -> usize {
        let keys: HashSet<String> = known.iter().map(|o| key_of(o.as_ref())).collect();
        self.remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| keys.contains(key));
        self.outages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| keys.contains(key));
        let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        finished.retain(|key, _| keys.contains(key));
        known
            .iter()
            .filter(|o| {
                let version = o.meta().resource_version.as_deref().unwrap_or_default();
                finished.get(&key_of(o.as_ref())).map(String::as_str) != Some(version)
            })
            .count()
    }

    /// Remembers `value` for the object `key` and says how it compares with what
    /// was known before: the remembered value or, when there is none (a new
    /// leader, a first pass), `stored`, what the object's status already says.
    pub fn remember(&self, key: &str, stored: Option<&str>, value: &str) -> Change {
        let mut remembered = self
            .remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let previous = remembered
            .insert(key.to_owned(), value.to_owned())
            .or_else(|| stored.map(str::to_owned));
        match previous {
            None => Change::First,
            Some(previous) if previous == value => Change::Unchanged,
            Some(previous) => Change::From(previous),
        }
    }

    /// Runs `f` on what is remembered of `key`'s primary (see [`database::outage`]).
    pub fn outage<T>(&self, key: &str, f: impl FnOnce(&mut database::outage::Outage) -> T) -> T {
        let mut outages = self.outages.lock().unwrap_or_else(PoisonError::into_inner);
        f(outages.entry(key.to_owned()).or_default())
    }

    /// Forgets what [`Context::remember`] holds for `key`.
    pub fn forget(&self, key: &str) {
        self.remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        self.pruned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        self.outages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
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
        self.publish_about(obj, None, type_, reason, action, note)
            .await;
    }

    /// [`Context::publish`] with a related object (the pod an action touched).
    /// The recorder counts repeats of one reason and action about one object
    /// as one series and keeps its first note: the related object makes each
    /// instance's Events a series of their own.
    pub async fn publish_about<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        related: Option<k8s_openapi::api::core::v1::ObjectReference>,
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
            secondary: related,
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

    /// The last retention pass of Database `key` by this operator.
    pub fn last_prune(&self, key: &str) -> Option<crate::lifecycle::RetentionPass> {
        self.pruned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// Records a retention pass of Database `key` as started.
    pub fn pruned(&self, key: &str, pass: crate::lifecycle::RetentionPass) {
        self.pruned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_owned(), pass);
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

/// A reconciliation under way; see [`Context::pass`].
pub struct Pass<'a> {
    ctx: &'a Context,
    key: String,
    version: String,
    _timer: ReconcileTimer,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.ctx
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                std::mem::take(&mut self.key),
                std::mem::take(&mut self.version),
            );
    }
}

/// How a remembered value compares with the one before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing was known before.
    First,
    Unchanged,
    /// It changed from this.
    From(String),
}

/// How often the gauges computed from the controllers' caches are refreshed;
/// well under any scrape interval.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// Calls `sample` with every object in `stores` every [`SAMPLE_INTERVAL`] until
/// `shutdown` turns true. Starts once every store has its first list: an empty
/// cache before that would read as "no objects".
pub async fn sample_every<K, F>(
    stores: Vec<Store<K>>,
    mut shutdown: watch::Receiver<bool>,
    mut sample: F,
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
    F: FnMut(&[Arc<K>]),
{
    let ready = futures::future::join_all(stores.iter().map(Store::wait_until_ready));
    tokio::select! {
        results = ready => {
            // A dropped writer means the controller is gone: nothing to sample.
            if results.iter().any(Result::is_err) {
                return;
            }
        }
        _ = shutdown.wait_for(|stop| *stop) => return,
    }
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let objects: Vec<Arc<K>> = stores.iter().flat_map(Store::state).collect();
        sample(&objects);
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
    let category = error.category();
    ctx.metrics.reconcile_failed(controller, category);
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
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::Database;
    use prometheus_client::registry::Registry;

    pub(super) fn context() -> Arc<Context> {
        context_with(&mut Registry::default())
    }

    fn context_with(registry: &mut Registry) -> Arc<Context> {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let build = BuildConfig {
            postgres_repository: "postgres".into(),
            tusk_image: "tusk".into(),
            image_pull_policy: None,
            instance_env: Vec::new(),
            default_store: None,
            instance_self_label: false,
            node_ports: Default::default(),
        };
        Context::new(
            Client::new(service, "default"),
            Metrics::register(registry),
            Reporter {
                controller: "tusk".into(),
                instance: None,
            },
            build,
        )
    }

    fn database(name: &str, version: &str) -> Arc<Database> {
        let mut db = sample_database();
        db.metadata.name = Some(name.into());
        db.metadata.resource_version = Some(version.into());
        Arc::new(db)
    }

    #[tokio::test]
    async fn queue_depth_counts_versions_no_pass_has_finished() {
        let ctx = context();
        let orders = database("orders", "1");
        let users = database("users", "7");
        assert_eq!(ctx.queue_depth(&[orders.clone(), users.clone()]), 2);

        let pass = ctx.pass("database", orders.as_ref());
        assert_eq!(
            ctx.queue_depth(&[orders.clone(), users.clone()]),
            2,
            "a pass in flight still counts"
        );
        drop(pass);
        assert_eq!(ctx.queue_depth(&[orders.clone(), users.clone()]), 1);

        // The status write of that pass makes a new version, which waits again.
        let written = database("orders", "2");
        assert_eq!(ctx.queue_depth(&[written.clone(), users.clone()]), 2);
        drop(ctx.pass("database", written.as_ref()));
        drop(ctx.pass("database", users.as_ref()));
        assert_eq!(ctx.queue_depth(&[written.clone(), users]), 0);

        // A deleted object is forgotten: were it recreated with the same
        // version string, it would still wait for its first pass.
        assert_eq!(ctx.queue_depth(std::slice::from_ref(&written)), 0);
        assert_eq!(ctx.queue_depth(&[written, database("users", "7")]), 1);
    }

    #[tokio::test]
    async fn the_database_sampler_reports_phases_and_queue_depth_once_the_cache_is_listed() {
        use crate::api::status::{DatabasePhase, DatabaseStatus};
        use kube::core::DeserializeGuard;
        use kube::core::error_boundary::InvalidObject;
        use kube::runtime::{reflector, watcher};

        let mut registry = Registry::default();
        let ctx = context_with(&mut registry);
        let text = |registry: &Registry| {
            crate::telemetry::metrics::exposition(registry, None)
                .expect("encode")
                .body
        };
        let (store, mut writer) = reflector::store::<DeserializeGuard<Database>>();
        let (stop, shutdown) = watch::channel(false);
        let sampler = tokio::spawn(database::sample(vec![store], ctx.clone(), shutdown));

        // Before the first list, an empty cache says nothing.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!text(&registry).contains("tusk_databases{"));

        let mut ready = (*database("orders", "1")).clone();
        ready.status = Some(DatabaseStatus {
            phase: Some(DatabasePhase::Ready),
            ..DatabaseStatus::default()
        });
        drop(ctx.pass("database", &ready));
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(DeserializeGuard(Ok(ready))));
        writer.apply_watcher_event(&watcher::Event::InitApply(DeserializeGuard(Ok(
            (*database("users", "3")).clone(),
        ))));
        // One that does not decode is in the cache but in no count.
        writer.apply_watcher_event(&watcher::Event::InitApply(DeserializeGuard(Err(
            InvalidObject {
                error: "invalid type: integer `17`, expected a string".into(),
                metadata: database("broken", "2").metadata.clone(),
            },
        ))));
        writer.apply_watcher_event(&watcher::Event::InitDone);

        let deadline = Instant::now() + Duration::from_secs(5);
        let body = loop {
            let body = text(&registry);
            if body.contains("tusk_work_queue_depth{") || Instant::now() > deadline {
                break body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for line in [
            "tusk_databases{phase=\"Ready\"} 1\n",
            // No status yet: not reconciled, so Pending.
            "tusk_databases{phase=\"Pending\"} 1\n",
            "tusk_databases{phase=\"Failed\"} 0\n",
            // users has never been through a pass; orders has, at this version.
            "tusk_work_queue_depth{controller=\"database\"} 1\n",
        ] {
            assert!(body.contains(line), "missing {line:?} in\n{body}");
        }
        stop.send(true).expect("the sampler listens");
        tokio::time::timeout(Duration::from_secs(5), sampler)
            .await
            .expect("the sampler stops on shutdown")
            .expect("the sampler does not panic");
    }

    #[tokio::test]
    async fn remember_tells_first_unchanged_and_changed_values() {
        let ctx = context();
        assert_eq!(ctx.remember("shop/orders", None, "orders-1"), Change::First);
        assert_eq!(
            ctx.remember("shop/orders", None, "orders-1"),
            Change::Unchanged
        );
        assert_eq!(
            ctx.remember("shop/orders", Some("orders-1"), "orders-2"),
            Change::From("orders-1".into())
        );
        // A pass on a stale cached object (status still says orders-1) does not
        // count the same change twice.
        assert_eq!(
            ctx.remember("shop/orders", Some("orders-1"), "orders-2"),
            Change::Unchanged
        );
        // A fresh context (a new leader) compares with the stored status.
        let fresh = context();
        assert_eq!(
            fresh.remember("shop/orders", Some("orders-2"), "orders-2"),
            Change::Unchanged
        );
        assert_eq!(
            fresh.remember("shop/orders", Some("orders-2"), "orders-3"),
            Change::From("orders-2".into())
        );
        fresh.forget("shop/orders");
        assert_eq!(
            fresh.remember("shop/orders", None, "orders-3"),
            Change::First
        );
    }

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
