//! `tusk operator`: leader election, the controllers, and the HTTP endpoints.

mod error;
pub mod http;
pub mod leader;

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::{BoxFuture, join_all};
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PartialObjectMeta};
use kube::core::DeserializeGuard;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::api::expose::NodePortRange;
use crate::api::v1::{Backup, Database, Drill, ObjectStore};
use crate::controller::caches::{Caches, ScopeFeeds};
use crate::controller::in_flight::InFlightLayer;
use crate::controller::lane::Lane;
use crate::controller::passes::Passes;
use crate::controller::{self, Context, backup, database, drill, guarded, store_credentials};
use crate::resources::{BuildConfig, labels};
use crate::telemetry::{self, metrics::Metrics};
use crate::webhook::rotation::{self, RotationConfig};
use crate::webhook::{self, WebhookState};
pub use error::Error;

#[derive(clap::Args, Debug, Clone)]
pub struct OperatorConfig {
    /// Namespaces to watch, comma separated; all namespaces when empty.
    #[arg(
        long,
        env = "TUSK_WATCH_NAMESPACES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub namespaces: Vec<String>,

    /// Address of the health and metrics endpoints.
    #[arg(long, env = "TUSK_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Elect a leader among operator replicas through a Lease (turn off only for a single local process).
    #[arg(long, env = "TUSK_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,

    /// Namespace of the leader Lease (the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "tusk-system")]
    pub lease_namespace: String,

    /// Name of the leader Lease.
    #[arg(long, env = "TUSK_LEASE_NAME", default_value = "tusk-operator")]
    pub lease_name: String,

    /// This replica's identity in the Lease and in Events (the Pod name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Serve the conversion and validation webhooks (HTTPS).
    #[arg(long, env = "TUSK_WEBHOOKS", default_value_t = true, action = clap::ArgAction::Set)]
    pub webhooks: bool,

    /// Address of the HTTPS webhook server.
    #[arg(long, env = "TUSK_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    pub webhook_addr: SocketAddr,

    /// Service through which the API server reaches the webhooks (in the lease namespace).
    #[arg(long, env = "TUSK_WEBHOOK_SERVICE", default_value = "tusk-webhook")]
    pub webhook_service: String,

    /// Secret holding the self-managed webhook CA and serving certificate.
    #[arg(long, env = "TUSK_WEBHOOK_SECRET", default_value = "tusk-webhook-cert")]
    pub webhook_secret: String,

    /// ValidatingWebhookConfiguration whose caBundle Tusk keeps current.
    #[arg(
        long,
        env = "TUSK_VALIDATING_WEBHOOK",
        default_value = "tusk-validating"
    )]
    pub validating_webhook: String,

    /// Directory holding `tls.crt` and `tls.key` issued by someone else
    /// (cert-manager, OLM). When set, Tusk serves these files and reloads them
    /// as they change, and manages neither the Secret nor any caBundle.
    #[arg(long, env = "TUSK_WEBHOOK_CERT_DIR")]
    pub webhook_cert_dir: Option<std::path::PathBuf>,

    /// How often to check the webhook certificate, in seconds.
    #[arg(long, env = "TUSK_CERT_CHECK_SECONDS", default_value_t = 60)]
    pub cert_check_seconds: u64,

    /// Repository of the PostgreSQL image when a Database sets no `spec.image`;
    /// the major version is the tag.
    #[arg(long, env = "TUSK_POSTGRES_REPOSITORY", default_value = "postgres")]
    pub postgres_repository: String,

    /// The image holding the `tusk` binary, copied into every PostgreSQL pod
    /// (the operator's own image).
    #[arg(long, env = "TUSK_IMAGE", default_value = "tusk:latest")]
    pub tusk_image: String,

    /// `imagePullPolicy` of the containers Tusk creates; the cluster default when unset.
    #[arg(long, env = "TUSK_IMAGE_PULL_POLICY")]
    pub image_pull_policy: Option<String>,

    #[command(flatten)]
    pub default_store: DefaultStoreArgs,

    /// The cluster's node-port range (kube-apiserver's
    /// `--service-node-port-range`): `spec.expose[].nodePort` must be in it.
    #[arg(long, env = "TUSK_NODE_PORT_RANGE", default_value = "30000-32767")]
    pub node_port_range: NodePortRange,

    /// Let each instance manager label its own pod `primary` after a
    /// promotion (and `replica` after a switchover's hand-over): the
    /// managers' Role then grants `patch` on the Database's instance pods.
    /// Turn on only where the ValidatingAdmissionPolicy
    /// `tusk-instance-self-label` (the chart's) confines a manager to that
    /// one label of its own pod.
    #[arg(long, env = "TUSK_INSTANCE_SELF_LABEL", default_value_t = false, action = clap::ArgAction::Set)]
    pub instance_self_label: bool,

    /// Passes each controller runs at once, across every watched namespace;
    /// the others wait their turn in the order they asked
    /// (`controller::passes`). Every pass makes API requests, each in flight
    /// on a connection of its own: unbounded, a thousand Databases passing at
    /// once (as at an operator's start) held some 950 connections to the API
    /// server and their buffers, and overloaded it.
    #[arg(long, env = "TUSK_CONCURRENCY", default_value_t = 32,
        value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Requests to the API server in flight at once in each lane (a pass's
    /// requests are in its lane), the others waiting their turn in the order
    /// they were sent (`controller::in_flight`). Each one in flight holds a
    /// connection of its own, which stays open once the burst is over.
    #[arg(long, env = "TUSK_API_REQUESTS", default_value_t = 32,
        value_parser = clap::value_parser!(u16).range(1..))]
    pub api_requests: u16,
}

/// The object store of Databases that set `spec.backup.schedule` or
/// `retention` without `objectStore`; none when the bucket is empty.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DefaultStoreArgs {
    /// Bucket of the default object store.
    #[arg(
        long = "default-store-bucket",
        env = "TUSK_DEFAULT_OBJECTSTORE_BUCKET",
        default_value = ""
    )]
    pub bucket: String,
    /// Key prefix; each namespace's Databases go under `<prefix>/<namespace>`.
    #[arg(long = "default-store-path", env = "TUSK_DEFAULT_OBJECTSTORE_PATH")]
    pub path: Option<String>,
    /// Endpoint URL (S3-compatible stores other than AWS).
    #[arg(
        long = "default-store-endpoint",
        env = "TUSK_DEFAULT_OBJECTSTORE_ENDPOINT"
    )]
    pub endpoint: Option<String>,
    /// Region of the bucket.
    #[arg(long = "default-store-region", env = "TUSK_DEFAULT_OBJECTSTORE_REGION")]
    pub region: Option<String>,
    /// Secret with `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, in the
    /// operator's namespace: Tusk copies it, under the same name, into each
    /// namespace whose Databases use the default store (pods read it there),
    /// and never over a Secret of that name it did not create.
    #[arg(
        long = "default-store-credentials-secret",
        env = "TUSK_DEFAULT_OBJECTSTORE_CREDENTIALS_SECRET"
    )]
    pub credentials_secret: Option<String>,
}

impl DefaultStoreArgs {
    pub fn store(&self) -> Option<ObjectStore> {
        let set = |value: &Option<String>| value.clone().filter(|v| !v.is_empty());
        (!self.bucket.is_empty()).then(|| ObjectStore {
            bucket: self.bucket.clone(),
            path: set(&self.path),
            endpoint: set(&self.endpoint),
            region: set(&self.region),
            credentials_secret: set(&self.credentials_secret),
        })
    }
}

impl OperatorConfig {
    fn build_config(&self) -> BuildConfig {
        BuildConfig {
            postgres_repository: self.postgres_repository.clone(),
            tusk_image: self.tusk_image.clone(),
            image_pull_policy: self.image_pull_policy.clone().filter(|p| !p.is_empty()),
            instance_env: instance_otel_env(|name| std::env::var(name).ok()),
            default_store: self.default_store.store(),
            node_ports: self.node_port_range,
            instance_self_label: self.instance_self_label,
        }
    }
}

/// The OpenTelemetry settings instance managers inherit from the operator;
/// only the ones set (and non-empty) are passed, so without tracing nothing
/// changes in the pods (and their spec hash).
fn instance_otel_env(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    const INHERITED: &[&str] = &[
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
    ];
    let mut env: Vec<(String, String)> = INHERITED
        .iter()
        .filter_map(|name| {
            get(name)
                .filter(|v| !v.is_empty())
                .map(|v| ((*name).to_owned(), v))
        })
        .collect();
    if !env.is_empty() {
        env.push(("OTEL_SERVICE_NAME".to_owned(), "tusk-instance".to_owned()));
    }
    env
}

/// Resolves when `shutdown` turns true (or its sender is gone).
async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

async fn on_signal(stop: watch::Sender<bool>) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => info!("interrupted, shutting down"),
        _ = terminate => info!("SIGTERM, shutting down"),
    }
    let _ = stop.send(true);
}

fn apis<K>(client: &Client, namespaces: &[String]) -> Vec<Api<K>>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    let namespaces: Vec<&String> = namespaces.iter().filter(|n| !n.is_empty()).collect();
    if namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        namespaces
            .into_iter()
            .map(|n| Api::namespaced(client.clone(), n))
            .collect()
    }
}

/// The same scope (all namespaces or one) as `like`, for another kind.
fn same_scope<K>(client: &Client, like: &Api<Database>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match like.namespace() {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// The Database controller of one scope, and its cache (for the sampled metrics).
///
/// Databases are watched through [`DeserializeGuard`]: one that does not
/// decode is reported and skipped, never the end of the watch.
fn run_database(
    client: Client,
    api: Api<Database>,
    feeds: ScopeFeeds,
    ctx: Arc<Context>,
    passes: Passes,
    shutdown: watch::Receiver<bool>,
) -> (Store<DeserializeGuard<Database>>, BoxFuture<'static, ()>) {
    // What Tusk creates wakes its Database as it changes: a pod becoming ready
    // is the usual next step, and an edited Service or PDB or a deleted Secret
    // is drift to correct now rather than at the next steady requeue. Only
    // Tusk's own are watched (or, for the Services and Secrets a pass finds
    // by name, only those a Database owns wake one). The Services, Secrets
    // and budgets come through the caches a pass reads
    // (`controller::caches`).
    let owned = crate::controller::caches::tusks_own();
    let guarded = same_scope::<DeserializeGuard<Database>>(&client, &api);
    // A primary's pod going also raises an alarm: the Database's next pass
    // takes the failover lane (`database::urgency`).
    let alarms = ctx.alarms.clone();
    let pods = watcher(
        same_scope::<PartialObjectMeta<Pod>>(&client, &api),
        owned.clone(),
    )
    .default_backoff()
    .map_ok(move |event| {
        let (pod, deleted) = match &event {
            watcher::Event::Delete(pod) => (pod, true),
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => (pod, false),
            watcher::Event::Init | watcher::Event::InitDone => return event,
        };
        let owner = pod
            .owner_references()
            .iter()
            .find(|o| o.kind == Database::kind(&()));
        if let (Some(owner), Some(namespace)) = (owner, pod.namespace())
            && database::urgency::primary_going(&pod.metadata, deleted)
        {
            alarms.raise(&namespace, &owner.name);
        }
        event
    })
    .touched_objects();
    let controller = slimmed(guarded)
        .owns_stream(pods)
        .owns(same_scope::<PersistentVolumeClaim>(&client, &api), owned)
        .owns_stream(feeds.services)
        .owns_stream(feeds.secrets)
        .owns_stream(feeds.budgets)
        // Any Backup of a Database wakes it: `status.lastBackup`, the next
        // scheduled run, retention after a backup, a final backup's end.
        .watches(
            same_scope::<Backup>(&client, &api),
            watcher::Config::default().any_semantic(),
            |backup: Backup| {
                backup
                    .namespace()
                    .map(|namespace| ObjectRef::new(&backup.spec.database).within(&namespace))
            },
        );
    // The `-rw`/`-ro` endpoints moving wakes their Database: Ready waits for
    // the Services to route, and a switchover's pause ends there. The
    // EndpointSlice controller copies the Service's labels onto its slices.
    let controller = controller.watches_stream(feeds.slices, |slice: EndpointSlice| {
        let namespace = slice.namespace()?;
        let database = slice.labels().get(labels::DATABASE)?;
        Some(ObjectRef::new(database).within(&namespace))
    });
    // The Secret cert-manager fills for `spec.tls.certManager` wakes its
    // Database when it is issued or renewed: the new certificate is then
    // copied to the instances and reloaded at once, not at the next steady
    // requeue. cert-manager labels it as the Certificate's `secretTemplate`
    // asks (`resources::cert_manager`); it is not Tusk's, so not owned.
    let controller = controller.watches(
        same_scope::<Secret>(&client, &api),
        watcher::Config::default()
            .labels(&format!(
                "{}={},{}",
                labels::COMPONENT,
                crate::resources::cert_manager::SECRET_COMPONENT,
                labels::DATABASE
            ))
            .any_semantic(),
        |secret: Secret| {
            let namespace = secret.namespace()?;
            let database = secret.labels().get(labels::DATABASE)?;
            Some(ObjectRef::new(database).within(&namespace))
        },
    );
    // A primary lease that stops changing, or changes hands, wakes its
    // Database at once: the failover clock starts there.
    let controller = controller.reconcile_on(
        crate::controller::leases::triggers(same_scope::<Lease>(&client, &api), ctx.leases.clone())
            .map(|db| guarded_ref(&db)),
    );
    let store = controller.store();
    let run = controller
        .graceful_shutdown_on(stopped(shutdown))
        .run(
            move |guard, ctx| {
                let passes = passes.clone();
                let lane = database_lane(&guard, &ctx);
                async move {
                    let pass = guarded::reconcile_decoded(
                        database::CONTROLLER,
                        guard,
                        ctx,
                        database::reconcile,
                    );
                    passes.run(lane, pass).await
                }
            },
            |guard, error, ctx| {
                controller::error_policy(database::CONTROLLER, guard.as_ref(), error, &ctx)
            },
            ctx,
        )
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(controller = database::CONTROLLER, %error, "controller event");
            }
        });
    (store, run.boxed())
}

/// The lane a pass over the Database in `guard` waits in; taking its alarm.
fn database_lane(guard: &DeserializeGuard<Database>, ctx: &Context) -> Lane {
    let Ok(db) = &guard.0 else {
        return Lane::Routine;
    };
    let (namespace, name) = (db.namespace().unwrap_or_default(), db.name_any());
    let alarmed = ctx.alarms.take(&namespace, &name);
    let troubled = ctx
        .leases
        .troubled(&namespace, &crate::resources::names::primary_lease(&name));
    database::urgency::lane(db, troubled, alarmed)
}

/// A controller of every `K` in `api`'s scope whose cache keeps no managed
/// fields (as the caches a pass reads): no pass reads them, and they are a
/// good part of every object held, thousands of Databases and their Backups.
/// Its concurrency is left unbounded here: [`Passes`] bounds it, fairly.
fn slimmed<K>(api: Api<K>) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (cache, writer) = reflector::store();
    let changes = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(|object: &mut K| crate::controller::caches::slim(object.meta_mut()))
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(changes, cache)
}

/// `db`'s reference as the guarded Database controller knows it.
fn guarded_ref(db: &ObjectRef<Database>) -> ObjectRef<DeserializeGuard<Database>> {
    let object = ObjectRef::new(&db.name);
    match &db.namespace {
        Some(namespace) => object.within(namespace),
        None => object,
    }
}

/// The Backup controller of one scope, and its cache (for the sampled metrics).
fn run_backup(
    backups: Api<Backup>,
    databases: Api<DeserializeGuard<Database>>,
    ctx: Arc<Context>,
    passes: Passes,
    shutdown: watch::Receiver<bool>,
) -> (Store<Backup>, BoxFuture<'static, ()>) {
    let controller = slimmed(backups);
    let store = controller.store();
    let cache = store.clone();
    // A Backup that names a Database not created yet is revisited when it appears.
    let run = controller
        // Only the Database's name is needed: one that does not decode still
        // names its Backups, and never ends the watch.
        .watches(
            databases,
            watcher::Config::default().any_semantic(),
            move |db: DeserializeGuard<Database>| {
                let namespace = db.namespace();
                let name = db.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|b| b.namespace() == namespace && b.spec.database == name)
                    .map(|b| ObjectRef::from_obj(b.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stopped(shutdown))
        .run(
            move |b, ctx| {
                let passes = passes.clone();
                async move { passes.run(Lane::Routine, backup::reconcile(b, ctx)).await }
            },
            |b, error, ctx| controller::error_policy(backup::CONTROLLER, b.as_ref(), error, &ctx),
            ctx,
        )
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(controller = backup::CONTROLLER, %error, "controller event");
            }
        });
    (cache, run.boxed())
}

/// The Drill controller of one scope. A drill's state is only its status;
/// its probe pod (owned, labelled with the Drill) wakes it as it starts and
/// ends, and a change of its Database wakes the Drills on that Database (a
/// run waits for Ready again; a waiting scheduled run for its guards).
fn run_drill(
    drills: Api<Drill>,
    pods: Api<Pod>,
    databases: Api<DeserializeGuard<Database>>,
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let controller = Controller::new(drills, watcher::Config::default().any_semantic());
    let store = controller.store();
    controller
        .owns(
            pods,
            watcher::Config::default()
                .labels(crate::resources::DRILL_LABEL)
                .any_semantic(),
        )
        .watches(
            databases,
            watcher::Config::default().any_semantic(),
            move |db: DeserializeGuard<Database>| {
                let namespace = db.namespace();
                let name = db.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|d| d.namespace() == namespace && d.spec.database == name)
                    .map(|d| ObjectRef::from_obj(d.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stopped(shutdown))
        .run(
            drill::reconcile,
            |d, error, ctx| controller::error_policy(drill::CONTROLLER, d.as_ref(), error, &ctx),
            ctx,
        )
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(controller = drill::CONTROLLER, %error, "controller event");
            }
        })
        .boxed()
}

/// Issues or loads the webhook certificate (or reads one issued elsewhere), then
/// serves the webhooks and keeps the certificate current in the background.
async fn start_webhooks(
    client: &Client,
    config: &OperatorConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let rotation = RotationConfig {
        namespace: config.lease_namespace.clone(),
        secret: config.webhook_secret.clone(),
        service: config.webhook_service.clone(),
        crds: crate::api::crd::NAMES.map(str::to_owned).to_vec(),
        validating_webhook: config.validating_webhook.clone(),
        interval: std::time::Duration::from_secs(config.cert_check_seconds.max(1)),
    };
    let tls = match config
        .webhook_cert_dir
        .as_deref()
        .filter(|d| !d.as_os_str().is_empty())
    {
        Some(dir) => {
            let (tls, pair) = webhook::files::initial(dir).await?;
            // Reading two small files is cheap; polling often keeps the gap
            // between a renewal on disk and its use short.
            tokio::spawn(webhook::files::watch(
                dir.to_owned(),
                tls.clone(),
                pair,
                rotation.interval.min(std::time::Duration::from_secs(10)),
                shutdown.clone(),
            ));
            tls
        }
        None => {
            let (tls, bundle) = rotation::initial(client, &rotation).await?;
            tokio::spawn(rotation::run(
                client.clone(),
                rotation,
                tls.clone(),
                bundle,
                shutdown.clone(),
            ));
            tls
        }
    };
    let state = WebhookState {
        client: Some(client.clone()),
        default_store: config.default_store.store(),
        node_ports: config.node_port_range,
    };
    let addr = config.webhook_addr;
    tokio::spawn(async move {
        if let Err(error) = webhook::serve(addr, tls, state, shutdown).await {
            error!(%error, "webhook server failed");
        }
    });
    Ok(())
}

/// The Database and Backup controllers of every scope, and their samplers,
/// once this replica leads; until `shutdown`. With a default store whose
/// credentials Secret is named, also the controller that copies that Secret
/// from `operator_namespace` into the namespaces that use the store.
async fn run_controllers(
    client: Client,
    metrics: Metrics,
    reporter: Reporter,
    config: &OperatorConfig,
    mut leading: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    if leading.wait_for(|l| *l).await.is_err() {
        return;
    }
    let namespaces = &config.namespaces;
    let operator_namespace = &config.lease_namespace;
    let build = config.build_config();
    info!("leading: starting the controllers");
    let mut caches = Caches::default();
    let scopes: Vec<(Api<Database>, ScopeFeeds)> = apis::<Database>(&client, namespaces)
        .into_iter()
        .map(|api| {
            let feeds = caches.add_scope(
                same_scope(&client, &api),
                same_scope(&client, &api),
                same_scope(&client, &api),
                same_scope(&client, &api),
            );
            (api, feeds)
        })
        .collect();
    let db_ctx = Context::for_databases(
        client.clone(),
        metrics.clone(),
        reporter.clone(),
        build.clone(),
        caches,
    );
    let backup_ctx = Context::new(
        client.clone(),
        metrics.clone(),
        reporter.clone(),
        build.clone(),
    );
    let mut tasks = Vec::new();
    if let Some(source) =
        store_credentials::Source::of(build.default_store.as_ref(), operator_namespace)
    {
        info!(namespace = %source.namespace, secret = %source.name,
            "copying the default store's credentials into the namespaces that use it");
        let copy_ctx = Context::new(
            client.clone(),
            metrics.clone(),
            reporter.clone(),
            build.clone(),
        );
        for (databases, secrets) in apis::<DeserializeGuard<Database>>(&client, namespaces)
            .into_iter()
            .zip(apis::<Secret>(&client, namespaces))
        {
            tasks.push(store_credentials::run(
                &client,
                databases,
                secrets,
                copy_ctx.clone(),
                source.clone(),
                stopped(shutdown.clone()),
            ));
        }
    }
    let db_passes = Passes::new(usize::from(config.concurrency));
    let backup_passes = Passes::new(usize::from(config.concurrency));
    let mut db_stores = Vec::new();
    for (api, feeds) in scopes {
        let (store, run) = run_database(
            client.clone(),
            api,
            feeds,
            db_ctx.clone(),
            db_passes.clone(),
            shutdown.clone(),
        );
        db_stores.push(store);
        tasks.push(run);
    }
    let mut backup_stores = Vec::new();
    for (backups, databases) in
        apis::<Backup>(&client, namespaces)
            .into_iter()
            .zip(apis::<DeserializeGuard<Database>>(&client, namespaces))
    {
        let (store, run) = run_backup(
            backups,
            databases,
            backup_ctx.clone(),
            backup_passes.clone(),
            shutdown.clone(),
        );
        backup_stores.push(store);
        tasks.push(run);
    }
    let drill_ctx = Context::new(
        client.clone(),
        metrics.clone(),
        reporter.clone(),
        build.clone(),
    );
    for ((drills, pods), databases) in apis::<Drill>(&client, namespaces)
        .into_iter()
        .zip(apis::<Pod>(&client, namespaces))
        .zip(apis::<DeserializeGuard<Database>>(&client, namespaces))
    {
        tasks.push(run_drill(
            drills,
            pods,
            databases,
            drill_ctx.clone(),
            shutdown.clone(),
        ));
    }
    tasks.push(database::sample(db_stores, db_ctx.clone(), shutdown.clone()).boxed());
    tasks.push(backup::sample(backup_stores, backup_ctx.clone(), shutdown.clone()).boxed());
    join_all(tasks).await;
}

/// The client of the inferred configuration, its requests counted by
/// `tusk_kube_requests_total`, at most `in_flight` at once in each lane.
async fn counted_client(
    requests: &telemetry::kube_requests::KubeRequests,
    in_flight: u16,
) -> Result<Client, Error> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| Error::KubeConfig(kube::Error::InferConfig(e)))?;
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(Error::KubeConfig)?
        .with_layer(&requests.layer())
        .with_layer(&InFlightLayer::new(usize::from(in_flight)))
        .build())
}

pub async fn run(config: OperatorConfig) -> Result<(), Error> {
    telemetry::init_logging()?;
    // One process-wide TLS provider (ring, as kube uses) for the webhook server.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut registry = Registry::default();
    let kube_requests = telemetry::kube_requests::KubeRequests::default();
    kube_requests.register(registry.sub_registry_with_prefix("tusk"));
    let client = counted_client(&kube_requests, config.api_requests).await?;
    let identity = config
        .identity
        .clone()
        .unwrap_or_else(|| format!("tusk-{}", std::process::id()));
    info!(%identity, namespaces = ?config.namespaces, "starting the operator");

    let metrics = Metrics::register(&mut registry);
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(on_signal(stop.clone()));
    let state = http::HttpState {
        registry: Arc::new(registry),
    };
    // Webhooks first: once /readyz answers, the Service may send API server traffic here.
    if config.webhooks {
        start_webhooks(&client, &config, shutdown.clone()).await?;
    }
    let server = tokio::spawn(http::serve(config.metrics_addr, state, shutdown.clone()));

    let (leading_tx, leading) = watch::channel(!config.leader_election);
    let election = if config.leader_election {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &config.lease_namespace);
        let leader = leader::LeaderConfig::new(config.lease_name.clone(), identity.clone());
        leader::run(
            leases,
            leader,
            leading_tx,
            metrics.clone(),
            shutdown.clone(),
        )
        .boxed()
    } else {
        metrics.set_leader(true);
        futures::future::pending().boxed()
    };

    let reporter = Reporter {
        controller: "tusk".to_owned(),
        instance: Some(identity),
    };
    let controllers = run_controllers(
        client.clone(),
        metrics,
        reporter,
        &config,
        leading,
        shutdown.clone(),
    );

    let outcome = tokio::select! {
        result = election => result,
        _ = controllers => Ok(()),
        _ = stopped(shutdown.clone()) => Ok(()),
    };
    // Whatever ended first, stop everything and let the server drain.
    let _ = stop.send(true);
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!(error = %e, "HTTP server failed"),
        Err(e) => error!(error = %e, "HTTP server task panicked"),
    }
    if let Err(e) = &outcome {
        error!(error = %e, "operator stopping");
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_inherit_only_the_tracing_settings_that_are_set() {
        assert!(instance_otel_env(|_| None).is_empty());
        let env = instance_otel_env(|name| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://collector:4318".into()),
            "OTEL_TRACES_SAMPLER" => Some(String::new()),
            _ => None,
        });
        assert_eq!(
            env,
            [
                (
                    "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
                    "http://collector:4318".to_owned()
                ),
                ("OTEL_SERVICE_NAME".to_owned(), "tusk-instance".to_owned()),
            ]
        );
    }
}
