//! The store-credentials controller: keeps Tusk's copy of the default object
//! store's credentials Secret (which lives in the operator's namespace) in
//! each namespace whose Databases use the default store, so that the store
//! serves every watched namespace without anyone copying Secrets by hand.
//! [`decide`] says what to do (pure); this shell reads the source and the
//! namespace's Secret and carries it out.
//!
//! Every Database of a scope is reconciled when the source Secret changes
//! (it is watched by name), and a Database when its copy changes (the copy
//! is owned by the Databases that use it). A copy is created with a plain
//! create (which fails if a Secret of that name appeared meanwhile) and
//! refreshed only while it is still the version read, so a user's Secret of
//! that name is never written over.

pub mod decide;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};

use super::{Context, Error, FIELD_MANAGER, error_policy, namespace_of, reconciled};
use crate::api::v1::{Database, ObjectStore};
use decide::Decision;

pub const CONTROLLER: &str = "store-credentials";

/// Where the default store's credentials come from, and what the copies are
/// called: the Secret `name` in the operator's `namespace`, copied under the
/// same name.
#[derive(Clone, Debug)]
pub struct Source {
    pub namespace: String,
    pub name: String,
}

impl Source {
    /// The source of `default`'s credentials, when it names a Secret.
    pub fn of(default: Option<&ObjectStore>, operator_namespace: &str) -> Option<Self> {
        let name = default?.credentials_secret.clone()?;
        Some(Self {
            namespace: operator_namespace.to_owned(),
            name,
        })
    }
}

/// What every pass of one scope shares.
pub struct Copier {
    pub ctx: Arc<Context>,
    pub source: Source,
    /// The scope's Databases (the controller's own cache): a copy is owned
    /// by each one of its namespace that uses the default store.
    databases: Store<DeserializeGuard<Database>>,
}

/// The controller of one scope (`api`), until `shutdown`.
pub fn run(
    client: &Client,
    api: Api<DeserializeGuard<Database>>,
    secrets: Api<Secret>,
    ctx: Arc<Context>,
    source: Source,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) -> BoxFuture<'static, ()> {
    let copies = watcher::Config::default()
        .labels(&format!(
            "{}={}",
            decide::COPY_LABEL,
            decide::COPY_LABEL_VALUE
        ))
        .any_semantic();
    // A change of the source (created, rotated, deleted) revisits every
    // Database of the scope.
    let source_changes = watcher(
        Api::<Secret>::namespaced(client.clone(), &source.namespace),
        watcher::Config::default().fields(&format!("metadata.name={}", source.name)),
    )
    .default_backoff()
    .touched_objects()
    .filter_map(|event| async move {
        if let Err(error) = &event {
            warn!(controller = CONTROLLER, %error, "watching the default store's credentials");
        }
        event.ok().map(|_| ())
    });
    let controller = Controller::new(api, watcher::Config::default().any_semantic())
        .owns(secrets, copies)
        .reconcile_all_on(source_changes);
    let copier = Arc::new(Copier {
        ctx,
        source,
        databases: controller.store(),
    });
    controller
        .graceful_shutdown_on(stop)
        .run(
            reconcile,
            |guard, error, copier| error_policy(CONTROLLER, guard.as_ref(), error, &copier.ctx),
            copier,
        )
        .for_each(|result| async move {
            if let Err(error) = result {
                debug!(controller = CONTROLLER, %error, "controller event");
            }
        })
        .boxed()
}

/// One Database's pass: the copy of its namespace, as every Database there
/// that uses the default store wants it.
async fn reconcile(
    guard: Arc<DeserializeGuard<Database>>,
    copier: Arc<Copier>,
) -> Result<Action, Error> {
    // One that does not decode is the Database controller's to report.
    let Ok(db) = &guard.0 else {
        return Ok(Action::await_change());
    };
    let default = copier.ctx.build.default_store.as_ref();
    if !decide::needs_default_credentials(db, default) {
        return Ok(Action::await_change());
    }
    let namespace = namespace_of(db)?;
    let owners: Vec<_> = copier
        .databases
        .state()
        .iter()
        .filter_map(|guard| guard.0.as_ref().ok())
        .filter(|d| d.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|d| decide::needs_default_credentials(d, default))
        .filter_map(decide::owner)
        .collect();
    let client = &copier.ctx.client;
    let name = &copier.source.name;
    let source = Api::<Secret>::namespaced(client.clone(), &copier.source.namespace)
        .get_opt(name)
        .await
        .map_err(Error::kube(
            "reading the default store's credentials Secret",
        ))?;
    let secrets = Api::<Secret>::namespaced(client.clone(), &namespace);
    let existing = secrets
        .get_opt(name)
        .await
        .map_err(Error::kube("reading the store credentials Secret"))?;
    match decide::decide(source.as_ref(), existing.as_ref(), name, &namespace, owners) {
        Decision::Create(copy) => {
            secrets
                .create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.to_owned()),
                        ..PostParams::default()
                    },
                    &copy,
                )
                .await
                .map_err(Error::kube("creating the copy of the store credentials"))?;
            info!(%namespace, secret = %name, "copied the default store's credentials");
        }
        Decision::Refresh(copy) => {
            // The copy's resourceVersion is a precondition: a Secret replaced
            // since it was read is not overwritten.
            secrets
                .patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&copy),
                )
                .await
                .map_err(Error::kube("refreshing the copy of the store credentials"))?;
            info!(%namespace, secret = %name, "refreshed the default store's credentials");
        }
        Decision::NoSource => debug!(
            source = %format!("{}/{}", copier.source.namespace, name),
            "the default store's credentials Secret does not exist"
        ),
        Decision::LeaveUsers | Decision::UpToDate => {}
    }
    reconciled(guard.as_ref(), &copier.ctx);
    Ok(Action::await_change())
}
