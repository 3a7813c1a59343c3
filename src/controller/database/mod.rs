//! The Database controller, wrapped in the finalizer: validate (an invalid spec
//! touches nothing) → observe → the lifecycle's pure plan → apply its actions in
//! order → status.

mod apply;
pub mod backups;
mod finalize;
pub mod instances;
pub mod migrations;
pub mod observe;
pub mod outage;
pub mod plan;
mod policy;
pub mod restore;
pub mod status;

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::Store;
use std::time::Duration;
use tokio::sync::watch;

use tracing::{Span, debug, field, info, instrument, warn};

use super::{Change, Context, FINALIZER, conditions, key_of, namespace_of, reconciled};
use crate::api::status::DatabasePhase;
use crate::api::store;
use crate::api::v1::Database;
use crate::controller::Error;
use crate::lifecycle::{self, Verdict};
use crate::telemetry;

pub const CONTROLLER: &str = "database";

/// How often a status write that only refreshes LSNs and lag may happen.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(30);

/// One pass over a Database in a `reconcile` span, the root of the pass's trace
/// (instance calls and their managers' work are its children), which carries
/// the error when the pass fails.
#[instrument(
    name = "reconcile",
    skip_all,
    fields(
        controller = CONTROLLER,
        database = %db.name_any(),
        namespace = field::Empty,
        generation = field::Empty,
        error = field::Empty,
    )
)]
pub async fn reconcile(db: Arc<Database>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = pass(db, ctx).await;
    if let Err(error) = &result {
        telemetry::record_error(&Span::current(), error);
    }
    result
}

async fn pass(db: Arc<Database>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _pass = ctx.pass(CONTROLLER, db.as_ref());
    let namespace = namespace_of(db.as_ref())?;
    Span::current().record("namespace", namespace.as_str());
    if let Some(generation) = db.metadata.generation {
        Span::current().record("generation", generation);
    }
    let api: Api<Database> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(action) = finalize::hold(&db, &api, &ctx).await? {
        reconciled(db.as_ref(), &ctx);
        return Ok(action);
    }
    let action = finalizer(&api, FINALIZER, db, |event| async {
        match event {
            Finalizer::Apply(db) => apply(&db, &api, &ctx).await,
            Finalizer::Cleanup(db) => cleanup(&db, &ctx).await,
        }
    })
    .await
    .map_err(|source| Error::Finalizer {
        name: format!("{namespace}/Database"),
        source: Box::new(source),
    })?;
    Ok(action)
}

async fn apply(db: &Database, api: &Api<Database>, ctx: &Context) -> Result<Action, Error> {
    // Everything below (validation, pods, backups) sees the store in effect.
    let db = &store::with_default(db, ctx.build.default_store.as_ref());
    let name = db.name_any();
    let namespace = namespace_of(db)?;
    ctx.metrics.track_database(&namespace, &name);
    let model = match plan::validate(db, &ctx.build.defaults()) {
        Ok(model) => model,
        Err(errors) => {
            let plan = plan::invalid(db, &errors);
            write_status(db, api, ctx, &plan).await?;
            reconciled(db, ctx);
            info!(valid = false, "reconciled");
            // Nothing changes until the object does.
            return Ok(Action::await_change());
        }
    };

    let mut snapshot = observe::snapshot(
        &ctx.client,
        ctx.instances.as_ref(),
        db,
        &namespace,
        ctx.build.default_store.as_ref(),
    )
    .await?;
    snapshot.lease = ctx.leases.state(
        &namespace,
        &crate::resources::names::primary_lease(&db.name_any()),
    );
    // Backups need a store; a Database without one has none to look at.
    let all_backups = match store::effective(db, None) {
        Some(_) => policy::list(ctx, &namespace).await?,
        None => Vec::new(),
    };
    let own_backups = backups::of_database(db, &all_backups);
    let last_backup = backups::last_backup(&own_backups);
    let mut observed = observe::reduce(db, &model, &snapshot, &ctx.build);
    observed.backups_possible = store::effective(db, None).is_some();
    observed.backups = own_backups
        .iter()
        .map(|b| (b.name_any(), backups::state(b)))
        .collect();
    let mut decision = lifecycle::plan(&db.spec, db.status.as_ref(), &observed);
    debug!(actions = ?decision.actions, "planned");
    let key = key_of(db);
    let now = std::time::Instant::now();
    ctx.outage(&key, |o| {
        o.observe(
            serving_primary(&observed)
                .as_ref()
                .map(|(n, l)| (n.as_str(), *l)),
            now,
        )
    });
    // The instance about to be promoted is recorded first: a promotion takes
    // seconds, and `targetPrimary` is how a reader sees it under way.
    let recorded_target = db.status.as_ref().and_then(|s| s.target_primary.as_deref());
    if decision.actions.iter().any(|a| a.new_primary().is_some())
        && decision.target_primary.as_deref() != recorded_target
    {
        let early = plan::accepted(
            &decision,
            observe::instance_statuses(db, &snapshot),
            observe::applied(db, &snapshot),
            last_backup.clone(),
        );
        write_status(db, api, ctx, &early).await?;
    }
    let applier = apply::Applier {
        client: &ctx.client,
        instances: ctx.instances.as_ref(),
        build: &ctx.build,
        db,
        model: &model,
        namespace: &namespace,
        snapshot: &snapshot,
    };
    // In order, stopping at the first failure: later actions may rely on
    // earlier ones (pods on their Secrets and PVCs, PVC deletion on the pod's).
    let mut failure = None;
    let mut last_failover = None;
    for action in &decision.actions {
        match applier.apply(action).await {
            Ok(Some(done)) => {
                if let lifecycle::Action::Promote { name: to, from, .. } = action {
                    last_failover = Some(failed_over(ctx, &observed, &key, from, to));
                    ctx.metrics.failed_over(
                        &namespace,
                        &name,
                        last_failover.as_ref().and_then(|f| f.duration),
                        last_failover.as_ref().and_then(|f| f.wal_gap_bytes),
                    );
                }
                let related = action
                    .target(|serial| crate::resources::names::instance_name(&name, serial))
                    .map(|pod| k8s_openapi::api::core::v1::ObjectReference {
                        api_version: Some("v1".to_owned()),
                        kind: Some("Pod".to_owned()),
                        name: Some(pod),
                        namespace: Some(namespace.clone()),
                        ..Default::default()
                    });
                ctx.publish_about(
                    db,
                    related,
                    EventType::Normal,
                    done.reason,
                    "Reconcile",
                    done.note,
                )
                .await;
            }
            Ok(None) => {}
            Err(error) => {
                warn!(%error, ?action, "action failed");
                failure = Some(error);
                break;
            }
        }
    }
    // A refusal that repeating will not change is shown as such, and the
    // pass waits for a change instead of retrying forever.
    if let Some(error) = &failure
        && !error.category().is_transient()
    {
        decision.add(Verdict::blocked(refusal_reason(error), error.to_string()));
    }
    // Schema migrations start only on a settled Database (phase Ready).
    let migration = migrations::step(
        ctx,
        db,
        &model,
        &namespace,
        decision.phase == DatabasePhase::Ready,
    )
    .await;
    migration.weigh(&mut decision);
    failure = failure.or(migration.error);
    let mut plan = plan::accepted(
        &decision,
        observe::instance_statuses(db, &snapshot),
        observe::applied(db, &snapshot),
        last_backup.clone(),
    );
    plan.last_failover = last_failover.map(|f| f.record);
    plan.migrations = migration.status;
    write_status(db, api, ctx, &plan).await?;
    let next_run = policy::schedule(ctx, db, &namespace, &own_backups).await?;
    policy::retention(
        ctx,
        db,
        &namespace,
        &snapshot,
        &own_backups,
        last_backup.as_ref(),
    )
    .await?;
    // Counted once the status holds the new primary, so a failed write is
    // counted when a later pass records it, not twice.
    if let Some(primary) = plan.current_primary.as_deref() {
        let stored = db
            .status
            .as_ref()
            .and_then(|s| s.current_primary.as_deref());
        if let Change::From(previous) = ctx.remember(&key, stored, primary) {
            ctx.metrics.failover(&namespace, &name);
            info!(%previous, %primary, "the primary moved");
        }
    }
    if let Some(error) = failure {
        return Err(error);
    }
    reconciled(db, ctx);
    info!(
        database = %name,
        phase = ?decision.phase,
        actions = decision.actions.len(),
        "reconciled"
    );
    let requeue = decision.requeue_after_seconds.map(Duration::from_secs);
    Ok(match requeue.into_iter().chain(next_run).min() {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// The primary that serves in `observed`, and its WAL position. A primary
/// whose pod is being deleted does not: it is shutting down, and refuses new
/// connections from the start.
fn serving_primary(observed: &lifecycle::Observed) -> Option<(String, u64)> {
    observed.instances.iter().find_map(|(serial, instance)| {
        let pod = instance.pod.as_ref()?;
        let status = instance.status()?;
        (status.role == crate::api::status::InstanceRole::Primary
            && status.ready
            && pod.phase != lifecycle::PodPhase::Terminating)
            .then(|| (observed.name(*serial), status.received_lsn))
    })
}

/// A promotion that just completed, measured.
struct FailedOver {
    record: crate::api::status::LastFailover,
    duration: Option<Duration>,
    wal_gap_bytes: Option<u64>,
}

fn failed_over(
    ctx: &Context,
    observed: &lifecycle::Observed,
    key: &str,
    from: &str,
    to: &str,
) -> FailedOver {
    let received = observed
        .serial_of(to)
        .and_then(|s| observed.instances.get(&s))
        .and_then(lifecycle::Instance::status)
        .map(|s| s.received_lsn);
    let heard = observed
        .instances
        .values()
        .filter_map(|i| i.pod.as_ref()?.ha.as_ref()?.primary_end.clone())
        .filter(|(instance, _)| instance == from)
        .map(|(_, lsn)| lsn)
        .max();
    let cost = ctx.outage(key, |o| {
        o.promoted(from, to, received, heard, std::time::Instant::now())
    });
    info!(%from, %to, duration = ?cost.duration, wal_gap_bytes = ?cost.wal_gap_bytes, "failed over");
    FailedOver {
        record: crate::api::status::LastFailover {
            from: from.to_owned(),
            to: to.to_owned(),
            time: Time(Timestamp::now()),
            duration_milliseconds: cost
                .duration
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            wal_gap_bytes: cost
                .wal_gap_bytes
                .map(|g| i64::try_from(g).unwrap_or(i64::MAX)),
        },
        duration: cost.duration,
        wal_gap_bytes: cost.wal_gap_bytes,
    }
}

/// The condition reason of an action that failed for good.
fn refusal_reason(error: &Error) -> &'static str {
    match error {
        Error::Instance { .. } => "InstanceRefused",
        _ => "ApiRefused",
    }
}

/// Writes the status and publishes an Event for every condition or phase change.
async fn write_status(
    db: &Database,
    api: &Api<Database>,
    ctx: &Context,
    plan: &plan::Plan,
) -> Result<(), Error> {
    let now = Time(Timestamp::now());
    let next = status::build(db, plan, &now);
    let before = db.status.clone().unwrap_or_default();
    if before == next {
        return Ok(());
    }
    let key = format!("{}/{}", db.namespace().unwrap_or_default(), db.name_any());
    if status::without_progress(&before) == status::without_progress(&next)
        && !ctx.progress_due(&key, PROGRESS_INTERVAL)
    {
        return Ok(());
    }
    status::apply(api, &db.name_any(), &next).await?;
    ctx.progress_written(&key);
    for changed in conditions::transitions(&before.conditions, &next.conditions) {
        let type_ = if changed.type_ == conditions::READY
            && next.phase == Some(DatabasePhase::Blocked)
            || changed.type_ == conditions::DEGRADED && changed.status == "True"
        {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!(
            "{} is {}: {}",
            changed.type_, changed.status, changed.message
        );
        ctx.publish(db, type_, &changed.reason, "Reconcile", note)
            .await;
    }
    if before.phase != next.phase
        && let Some(phase) = next.phase
    {
        ctx.publish(
            db,
            EventType::Normal,
            phase.as_str(),
            "Reconcile",
            format!("phase is now {}", phase.as_str()),
        )
        .await;
    }
    Ok(())
}

/// Keeps the gauges computed from the Database cache current: the work-queue
/// depth and `tusk_databases` by phase. `stores` are the caches of every
/// Database controller (one per watched namespace).
pub async fn sample(
    stores: Vec<Store<DeserializeGuard<Database>>>,
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    super::guarded::sample_decoded(stores, shutdown, |databases| {
        ctx.metrics
            .set_queue_depth(CONTROLLER, ctx.queue_depth(databases));
        ctx.metrics.set_databases(
            databases
                .iter()
                .map(|db| db.status.as_ref().and_then(|s| s.phase)),
        );
        ctx.metrics.set_last_backups(backups::last_successes(
            databases,
            ctx.build.default_store.as_ref(),
        ));
        ctx.metrics
            .set_schedule_periods(backups::schedule_periods(databases, Timestamp::now()));
    })
    .await;
}

async fn cleanup(db: &Database, ctx: &Context) -> Result<Action, Error> {
    // The final backup is done (or not wanted) by now: `finalize::hold` runs
    // first. Everything Tusk creates carries an owner reference and is
    // garbage-collected with the Database; the data in the store stays.
    ctx.publish(
        db,
        EventType::Normal,
        "Deleting",
        "Delete",
        "releasing the Database".to_owned(),
    )
    .await;
    if let Some(namespace) = db.namespace() {
        ctx.metrics.forget_database(&namespace, &db.name_any());
    }
    ctx.forget(&key_of(db));
    info!("released");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod trace_tests;
