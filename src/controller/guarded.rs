//! Watching through [`DeserializeGuard`]: a stored object that does not
//! decode as the current type (written by a newer operator, edited past the
//! schema) must not stop the watch and with it every other object. Such an
//! object is logged, gets a Warning Event, and waits for its next change; the
//! others are reconciled and sampled as usual.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use kube::Resource;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use tokio::sync::watch;
use tracing::warn;

use super::{Context, Error, key_of, sample_every};

/// Reconciles the object `guard` decoded with `reconcile`; one that did not
/// decode is reported and skipped until it changes.
pub async fn reconcile_decoded<K, F, Fut>(
    controller: &'static str,
    guard: Arc<DeserializeGuard<K>>,
    ctx: Arc<Context>,
    reconcile: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + Clone,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
{
    match &guard.0 {
        Ok(object) => reconcile(Arc::new(object.clone()), ctx).await,
        Err(invalid) => {
            let kind = K::kind(&());
            warn!(
                controller,
                object = %key_of(guard.as_ref()),
                error = %invalid,
                "skipping an object that cannot be decoded"
            );
            ctx.publish(
                guard.as_ref(),
                EventType::Warning,
                "Undecodable",
                "Reconcile",
                format!(
                    "this {kind} cannot be read by this operator ({invalid}); \
                     it is left alone until it changes"
                ),
            )
            .await;
            Ok(Action::await_change())
        }
    }
}

/// [`sample_every`] over the objects of guarded caches that decoded.
pub async fn sample_decoded<K, F>(
    stores: Vec<Store<DeserializeGuard<K>>>,
    shutdown: watch::Receiver<bool>,
    mut sample: F,
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
    F: FnMut(&[Arc<K>]),
{
    sample_every(stores, shutdown, |guards| {
        sample(&decoded(guards));
    })
    .await;
}

/// The objects among `guards` that decoded.
fn decoded<K: Clone>(guards: &[Arc<DeserializeGuard<K>>]) -> Vec<Arc<K>> {
    guards
        .iter()
        .filter_map(|guard| guard.0.as_ref().ok())
        .map(|object| Arc::new(object.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use serde_json::json;

    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::Database;

    fn guard(value: serde_json::Value) -> Arc<DeserializeGuard<Database>> {
        Arc::new(serde_json::from_value(value).expect("a guard decodes any object"))
    }

    fn undecodable() -> Arc<DeserializeGuard<Database>> {
        guard(json!({
            "apiVersion": "tusk.dev/v1",
            "kind": "Database",
            "metadata": { "name": "broken", "namespace": "shop", "uid": "u-1" },
            "spec": { "version": 17, "instances": "three" },
        }))
    }

    #[test]
    fn an_undecodable_database_keeps_its_metadata_and_the_others_decode() {
        let good = guard(serde_json::to_value(sample_database()).expect("serialises"));
        let bad = undecodable();
        let Err(invalid) = &bad.0 else {
            panic!("a number as version must not decode")
        };
        assert_eq!(invalid.metadata.name.as_deref(), Some("broken"));
        let objects = decoded(&[good, bad]);
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].metadata.name.as_deref(), Some("orders"));
    }

    #[tokio::test]
    async fn an_undecodable_database_is_skipped_until_it_changes() {
        let ctx = super::super::tests::context();
        let called = AtomicBool::new(false);
        let action = reconcile_decoded("database", undecodable(), ctx, |_, _| async {
            called.store(true, Ordering::SeqCst);
            Ok(Action::requeue(std::time::Duration::from_secs(1)))
        })
        .await
        .expect("skipping is not an error");
        assert_eq!(action, Action::await_change());
        assert!(!called.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_decoded_database_is_reconciled() {
        let ctx = super::super::tests::context();
        let good = guard(serde_json::to_value(sample_database()).expect("serialises"));
        let action = reconcile_decoded("database", good, ctx, |db: Arc<Database>, _| async move {
            assert_eq!(db.metadata.name.as_deref(), Some("orders"));
            Ok(Action::requeue(std::time::Duration::from_secs(1)))
        })
        .await
        .expect("reconciled");
        assert_eq!(action, Action::requeue(std::time::Duration::from_secs(1)));
    }
}
