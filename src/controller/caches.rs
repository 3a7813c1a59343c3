//! The Database controller's caches of the objects a pass reads that it
//! need not read back from the API server each time: the Services and the
//! Secrets' metadata (found by name, since a user may strip their labels, so
//! every one in scope is cached), the PodDisruptionBudgets and the
//! EndpointSlices of the Services Tusk makes. The same watches wake the
//! Database when one of them changes ([`ScopeFeeds`]), so a pass woken by a change
//! reads a cache that already holds it.
//!
//! A cache lags the operator's own writes. Reading one is safe here because
//! nothing is decided from a cached object's absence that could overwrite or
//! duplicate anything: credential Secrets are created only (an existing one
//! answers 409 and is kept, its password untouched), Services and budgets
//! are server-side applies of what the builders make, and deletions go by
//! name (a 404 is done). Pods, PVCs and Jobs are still listed each pass: the
//! lifecycle decides failovers, recreations and removals from their
//! absence, which must not lag the previous pass's writes.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::Error;
use crate::resources::labels;

/// How long a pass waits for the caches to be filled after the operator
/// starts leading (the first list of each kind); longer is an error, retried
/// by the error policy, rather than a pass that hangs.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The annotation `kubectl apply` leaves: on a Secret it holds the data in
/// clear, which a metadata cache must not keep.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The caches of every scope (all namespaces, or each watched namespace).
#[derive(Clone, Default)]
pub struct Caches {
    scopes: Vec<ScopeCaches>,
    /// Set once every cache has its first list. A store's own readiness
    /// wakes only the last of many waiters (a oneshot channel holds one
    /// waker), so one pass waits on the stores and the others on this.
    filled: Arc<tokio::sync::OnceCell<()>>,
}

/// The caches of one scope.
#[derive(Clone)]
struct ScopeCaches {
    services: Store<Service>,
    secrets: Store<PartialObjectMeta<Secret>>,
    budgets: Store<PodDisruptionBudget>,
    slices: Store<EndpointSlice>,
}

/// A stream of the objects of one kind a watch touched (applied or deleted).
pub type Touched<K> = futures::stream::BoxStream<'static, watcher::Result<K>>;

/// The watch streams behind one scope's caches: the Database controller of
/// that scope polls them (they fill the caches as they go) and is woken by
/// what they yield.
pub struct ScopeFeeds {
    pub services: Touched<Service>,
    pub secrets: Touched<PartialObjectMeta<Secret>>,
    pub budgets: Touched<PodDisruptionBudget>,
    pub slices: Touched<EndpointSlice>,
}

impl Caches {
    /// Adds the caches of the scope of `services` (and of the other kinds'
    /// APIs, of the same scope; the Secrets' by their metadata alone) and
    /// returns the streams that fill them.
    pub fn add_scope(
        &mut self,
        services: Api<Service>,
        secrets: Api<PartialObjectMeta<Secret>>,
        budgets: Api<PodDisruptionBudget>,
        slices: Api<EndpointSlice>,
    ) -> ScopeFeeds {
        // Only Tusk's own budgets and slices (the EndpointSlice controller
        // copies the Service's labels onto its slices).
        let owned = tusks_own();
        let every = watcher::Config::default().any_semantic();
        let (services_cache, services_writer) = reflector::store();
        let (secrets_cache, secrets_writer) = reflector::store();
        let (budgets_cache, budgets_writer) = reflector::store();
        let (slices_cache, slices_writer) = reflector::store();
        self.scopes.push(ScopeCaches {
            services: services_cache,
            secrets: secrets_cache,
            budgets: budgets_cache,
            slices: slices_cache,
        });
        ScopeFeeds {
            services: touched(watcher(services, every.clone()), services_writer),
            secrets: watcher(secrets, every)
                .default_backoff()
                .modify(|secret: &mut PartialObjectMeta<Secret>| {
                    slim(&mut secret.metadata);
                    if let Some(annotations) = secret.metadata.annotations.as_mut() {
                        annotations.remove(LAST_APPLIED);
                    }
                })
                .reflect(secrets_writer)
                .touched_objects()
                .boxed(),
            budgets: touched(watcher(budgets, owned.clone()), budgets_writer),
            slices: touched(watcher(slices, owned), slices_writer),
        }
    }

    /// Waits until every cache holds its first list; a pass reads none before.
    pub async fn ready(&self) -> Result<(), Error> {
        let fill = self.filled.get_or_try_init(|| async {
            for scope in &self.scopes {
                let waits = futures::join!(
                    scope.services.wait_until_ready(),
                    scope.secrets.wait_until_ready(),
                    scope.budgets.wait_until_ready(),
                    scope.slices.wait_until_ready(),
                );
                if waits.0.is_err() || waits.1.is_err() || waits.2.is_err() || waits.3.is_err() {
                    return Err(Error::CachesNotReady("a watch ended"));
                }
            }
            Ok(())
        });
        match tokio::time::timeout(READY_TIMEOUT, fill).await {
            Ok(result) => result.map(|_| ()),
            Err(_) => Err(Error::CachesNotReady("the first lists have not arrived")),
        }
    }

    /// The metadata of the Secrets named `names` in `namespace`.
    pub fn secrets(&self, namespace: &str, names: &[String]) -> Vec<ObjectMeta> {
        names
            .iter()
            .filter_map(|name| {
                let key = ObjectRef::new(name).within(namespace);
                self.scopes.iter().find_map(|s| s.secrets.get(&key))
            })
            .map(|secret| secret.metadata.clone())
            .collect()
    }

    /// The Services in `namespace` that `keep` keeps.
    pub fn services(&self, namespace: &str, keep: impl Fn(&Service) -> bool) -> Vec<Service> {
        collect(self.scopes.iter().map(|s| &s.services), namespace, keep)
    }

    /// The PodDisruptionBudgets in `namespace` that `keep` keeps.
    pub fn budgets(
        &self,
        namespace: &str,
        keep: impl Fn(&PodDisruptionBudget) -> bool,
    ) -> Vec<PodDisruptionBudget> {
        collect(self.scopes.iter().map(|s| &s.budgets), namespace, keep)
    }

    /// The EndpointSlices in `namespace` that `keep` keeps.
    pub fn slices(
        &self,
        namespace: &str,
        keep: impl Fn(&EndpointSlice) -> bool,
    ) -> Vec<EndpointSlice> {
        collect(self.scopes.iter().map(|s| &s.slices), namespace, keep)
    }

    /// Caches already filled with `services` and `secrets` (tests).
    #[cfg(test)]
    pub fn filled(services: Vec<Service>, secrets: Vec<ObjectMeta>) -> Self {
        let secrets = secrets
            .into_iter()
            .map(|metadata| PartialObjectMeta::<Secret> {
                types: None,
                metadata,
                _phantom: std::marker::PhantomData,
            })
            .collect();
        Self {
            scopes: vec![ScopeCaches {
                services: filled(services),
                secrets: filled(secrets),
                budgets: filled(Vec::new()),
                slices: filled(Vec::new()),
            }],
            filled: Arc::default(),
        }
    }
}

/// A watch of the objects Tusk made (its managed-by label).
pub fn tusks_own() -> watcher::Config {
    watcher::Config::default()
        .labels(&format!(
            "{}={}",
            labels::MANAGED_BY,
            labels::MANAGED_BY_VALUE
        ))
        .any_semantic()
}

/// A watch of full objects with their managed fields dropped, filling
/// `writer`'s cache.
fn touched<K>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    writer: reflector::store::Writer<K>,
) -> Touched<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    events
        .default_backoff()
        .modify(|object: &mut K| slim(object.meta_mut()))
        .reflect(writer)
        .touched_objects()
        .boxed()
}

/// Drops what no pass reads and costs memory in every cached object.
pub(crate) fn slim(metadata: &mut ObjectMeta) {
    metadata.managed_fields = None;
}

/// The objects of every scope's cache in `namespace` that `keep` keeps.
fn collect<'a, K>(
    caches: impl Iterator<Item = &'a Store<K>>,
    namespace: &str,
    keep: impl Fn(&K) -> bool,
) -> Vec<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    caches
        .flat_map(|cache| {
            cache.state_filter(|o| o.meta().namespace.as_deref() == Some(namespace) && keep(o))
        })
        .map(|o| o.as_ref().clone())
        .collect()
}

/// A cache holding `objects`, as after its first list.
#[cfg(test)]
fn filled<K>(objects: Vec<K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut writer = reflector::store::Writer::default();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    writer.as_reader()
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;

    use super::*;

    fn meta(namespace: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        }
    }

    /// Every waiting pass goes on once the caches are filled, not only the
    /// last to wait (a store's readiness wakes one waiter).
    #[tokio::test(start_paused = true)]
    async fn every_waiting_pass_goes_on_when_the_caches_are_filled() {
        let (services, mut services_writer) = reflector::store::<Service>();
        let filled_now = |writer: &mut reflector::store::Writer<_>| {
            writer.apply_watcher_event(&watcher::Event::Init);
            writer.apply_watcher_event(&watcher::Event::InitDone);
        };
        let mut caches = Caches::filled(Vec::new(), Vec::new());
        caches.scopes[0].services = services;
        let waits: Vec<_> = (0..3)
            .map(|_| {
                let caches = caches.clone();
                tokio::spawn(async move { caches.ready().await.is_ok() })
            })
            .collect();
        tokio::task::yield_now().await;
        filled_now(&mut services_writer);
        let started = tokio::time::Instant::now();
        for wait in waits {
            assert!(wait.await.unwrap());
        }
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn secrets_are_found_by_name_in_their_namespace_only() {
        let caches = Caches::filled(
            Vec::new(),
            vec![
                meta("shop", "orders-app"),
                meta("other", "orders-superuser"),
                meta("shop", "unrelated"),
            ],
        );
        let names = ["orders-app".to_owned(), "orders-superuser".to_owned()];
        let found: Vec<_> = caches
            .secrets("shop", &names)
            .into_iter()
            .filter_map(|m| m.name)
            .collect();
        assert_eq!(found, ["orders-app"]);
    }

    #[test]
    fn services_are_those_of_the_namespace_that_the_filter_keeps() {
        let service = |namespace: &str, name: &str| Service {
            metadata: meta(namespace, name),
            ..Service::default()
        };
        let caches = Caches::filled(
            vec![
                service("shop", "orders-rw"),
                service("shop", "billing-rw"),
                service("other", "orders-rw"),
            ],
            Vec::new(),
        );
        let found: Vec<_> = caches
            .services("shop", |s| s.name_any().starts_with("orders-"))
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        assert_eq!(found, ["orders-rw"]);
    }
}
