//! The Database controller, wrapped in the finalizer. One pass is a
//! pipeline: validate (an invalid spec touches nothing) → snapshot (list and
//! poll) → reduce (pure) → the lifecycle's plan (pure: every decision of the
//! pass) → execute its actions in order → one status write, then the
//! plan's Events. A Database being deleted takes the same road with what a
//! deletion looks at, until the plan releases it.

mod apply;
pub mod backups;
mod client_pool;
pub mod history;
pub mod instances;
mod migration_jobs;
pub mod observe;
pub mod outage;
pub mod plan;
pub mod restore;
pub mod status;
pub mod urgency;

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::Store;
use std::time::Duration;
use tokio::sync::watch;

use tracing::{Span, debug, field, info, instrument, warn};

use super::{
    Change, Context, FIELD_MANAGER, FINALIZER, conditions, key_of, namespace_of, reconciled,
};
use crate::api::model::ValidatedDatabase;
use crate::api::status::{DatabasePhase, HistoryEntry, LastFailover};
use crate::api::store;
use crate::api::v1::Database;
use crate::controller::Error;
use crate::lifecycle::{self, Verdict};
use crate::telemetry;

pub const CONTROLLER: &str = "database";

/// How often a status write that only refreshes LSNs and lag may happen.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(30);
/// How often a switchover's hand-over looks whether `-rw` reaches the new
/// primary yet (a second or two, once per switchover).
const ROUTE_POLL: Duration = Duration::from_millis(200);

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
    if let Some(action) = hold(&db, &api, &ctx, &namespace).await? {
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

/// A pass over a live Database.
async fn apply(db: &Database, api: &Api<Database>, ctx: &Context) -> Result<Action, Error> {
    // Everything below (validation, pods, backups) sees the store in effect.
    let db = &store::with_default(db, ctx.build.default_store.as_ref());
    let namespace = namespace_of(db)?;
    ctx.metrics.track_database(&namespace, &db.name_any());
    let model = match plan::validate(db, &ctx.build.defaults()) {
        Ok(model) => model,
        Err(errors) => {
            let next = plan::invalid(db, &errors);
            write_status(db, api, ctx, &next, Announce::Transitions).await?;
            reconciled(db, ctx);
            info!(valid = false, "reconciled");
            // Nothing changes until the object does.
            return Ok(Action::await_change());
        }
    };
    let mut snapshot = observe::live(ctx, db, &namespace).await?;
    let mut observed = observe::reduce(db, &model, &snapshot, &ctx.build);
    let recorded = db
        .status
        .as_ref()
        .and_then(|s| s.tls.as_ref())
        .map(|t| t.stage)
        .unwrap_or_default();
    // The published addresses first: the server certificates must name them.
    observe::endpoints::services(&model, &snapshot, &mut observed);
    observe::tls::observe(&ctx.client, &model, &mut snapshot, &mut observed, recorded).await?;
    if let Some(tls) = observed.tls.as_mut() {
        let source = db.status.as_ref().and_then(|s| s.tls.as_ref()?.source);
        let uid = db.metadata.uid.as_deref();
        tls.settings.leftover_certificate =
            observe::cert_manager::leftover(&ctx.client, &model, source, uid).await?;
    }
    observe::endpoints::probe_and_secret(&ctx.client, &model, &mut snapshot, &mut observed).await?;
    if let Some(tls) = &observed.tls {
        observe::tls::set_metrics(&ctx.metrics, &namespace, &model.name, tls);
    }
    let mut decision = lifecycle::plan(&db.spec, db.status.as_ref(), &observed);
    debug!(actions = ?decision.actions, "planned");
    let key = key_of(db);
    let lost = ctx.outage(&key, |o| {
        o.observe(
            serving_primary(&observed)
                .as_ref()
                .map(|(n, l)| (n.as_str(), *l)),
            std::time::Instant::now(),
        )
    });
    if let Some(primary) = lost {
        // The failover's first step on record (bench/failover reads it).
        info!(%primary, "the primary stopped serving");
    }
    let run = Run {
        ctx,
        db,
        model: Some(&model),
        api,
        namespace: &namespace,
        snapshot: &snapshot,
        observed: &observed,
    };
    let executed = run.execute(&mut decision).await;
    // A switchover waiting for `-rw` to reach its new primary: ask as a
    // client would, each pass, until it does.
    let awaited = ctx.outage(&key, |o| o.awaiting_route().map(str::to_owned));
    let reached = match &awaited {
        // A user's (or cert-manager's) server certificate need not name
        // the instance: then the EndpointSlice is the closest Tusk can tell.
        Some(to) if model.tls.source.served_secret().is_some() => {
            observed.routing.rw == [to.clone()]
        }
        Some(to) => observe::route::rw_reaches(&model.name, &snapshot, to)
            .await
            .unwrap_or_else(|| observed.routing.rw == [to.clone()]),
        None => false,
    };
    let mut next = run.next_status(&decision);
    next.history = run.history(&model, &next, executed.history, reached);
    next.last_failover = executed.last_failover;
    write_status(db, api, ctx, &next, Announce::Transitions).await?;
    run.publish_notes(&decision).await;
    count_failover(ctx, db, &key, next.current_primary.as_deref());
    if let Some(error) = executed.failure {
        return Err(error);
    }
    reconciled(db, ctx);
    info!(phase = ?decision.phase, actions = decision.actions.len(), "reconciled");
    if ctx.outage(&key, |o| o.awaiting_route().is_some()) {
        // Nothing signals kube-proxy's rules changing: look again soon.
        return Ok(Action::requeue(ROUTE_POLL));
    }
    Ok(requeue(&decision))
}

/// A pass over a Database being deleted, before the finalizer may release
/// it: `Some` while the plan holds it (its final backup runs or failed).
async fn hold(
    db: &Database,
    api: &Api<Database>,
    ctx: &Context,
    namespace: &str,
) -> Result<Option<Action>, Error> {
    if db.metadata.deletion_timestamp.is_none() || !db.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(None);
    }
    let db = &store::with_default(db, ctx.build.default_store.as_ref());
    let snapshot = observe::deletion_snapshot(ctx, db, namespace).await?;
    let observed = observe::reduce_deletion(db, &snapshot);
    let mut decision = lifecycle::plan(&db.spec, db.status.as_ref(), &observed);
    let run = Run {
        ctx,
        db,
        model: None,
        api,
        namespace,
        snapshot: &snapshot,
        observed: &observed,
    };
    if decision.release {
        run.publish_notes(&decision).await;
        return Ok(None);
    }
    let failure = run.execute(&mut decision).await.failure;
    let announce = Announce::Ready {
        warning: decision.alarm,
        action: "Delete",
    };
    write_status(db, api, ctx, &plan::deleting(db, &decision), announce).await?;
    run.publish_notes(&decision).await;
    if let Some(error) = failure {
        return Err(error);
    }
    Ok(Some(requeue(&decision)))
}

/// What carrying a plan out did.
struct Executed {
    /// The action that failed, which stopped the rest.
    failure: Option<Error>,
    /// The failover that completed.
    last_failover: Option<LastFailover>,
    /// The failovers and switchovers that completed, for `status.history`.
    history: Vec<HistoryEntry>,
}

/// One pass's inputs, to carry its plan out.
struct Run<'a> {
    ctx: &'a Context,
    db: &'a Database,
    /// `None` while the Database is deleted: its spec may be invalid, and
    /// the plan then asks for nothing but the final Backup.
    model: Option<&'a ValidatedDatabase>,
    api: &'a Api<Database>,
    namespace: &'a str,
    snapshot: &'a observe::Snapshot,
    observed: &'a lifecycle::Observed,
}

/// Whether the status must name the new primary (`next`, not the `stored`
/// one) before `actions` run: one of them takes the stored primary's pod
/// away (a rolling update's last step, a deletion).
fn primary_first(stored: Option<&str>, next: Option<&str>, actions: &[lifecycle::Action]) -> bool {
    let Some(stored) = stored else {
        return false;
    };
    next.is_some_and(|next| next != stored)
        && actions.iter().any(|action| match action {
            lifecycle::Action::RollPod { name, .. } | lifecycle::Action::DeletePod { name, .. } => {
                name == stored
            }
            _ => false,
        })
}

impl Run<'_> {
    /// Applies the plan's actions in order, stopping at the first failure:
    /// later actions may rely on earlier ones (pods on their Secrets and
    /// PVCs, PVC deletion on the pod's). A refusal that repeating will not
    /// change becomes a blocking verdict, so the pass waits for a change
    /// instead of retrying forever.
    ///
    /// A switchover's write pause runs from asking the primary to hand over
    /// to the `-rw` Service routing to the new primary: the hand-over is
    /// remembered ([`outage::Outage::handed_over`]) and a later pass that
    /// sees the routing records it (an EndpointSlice change wakes that pass).
    /// If the promotion fails after the hand-over, the outage is marked as
    /// begun at the hand-over, so the failover that completes it in a later
    /// pass is measured from there.
    async fn execute(&self, decision: &mut lifecycle::Plan) -> Executed {
        let applier = self.model.map(|model| apply::Applier {
            ctx: self.ctx,
            client: &self.ctx.client,
            instances: self.ctx.instances.as_ref(),
            build: &self.ctx.build,
            db: self.db,
            model,
            namespace: self.namespace,
            snapshot: self.snapshot,
        });
        let mut last_failover = None;
        let mut history = Vec::new();
        let stored = self
            .db
            .status
            .as_ref()
            .and_then(|s| s.current_primary.as_deref());
        let next = self.next_status(decision);
        if primary_first(stored, next.current_primary.as_deref(), &decision.actions) {
            // The status names the new primary before the old one's pod
            // goes: a reader never sees the pod of the primary on record
            // replaced.
            if let Err(error) =
                write_status(self.db, self.api, self.ctx, &next, Announce::Transitions).await
            {
                return Executed {
                    failure: Some(error),
                    last_failover: None,
                    history: Vec::new(),
                };
            }
        }
        for action in &decision.actions {
            let started = std::time::Instant::now();
            if let lifecycle::Action::Switchover { .. } = action {
                self.ctx
                    .outage(&key_of(self.db), |o| o.observe(None, started));
            }
            let result = match action {
                lifecycle::Action::RecordTargetPrimary { .. } => {
                    let early = self.next_status(decision);
                    write_status(self.db, self.api, self.ctx, &early, Announce::Transitions)
                        .await
                        .map(|()| None)
                }
                lifecycle::Action::TakeBackup { name, purpose } => {
                    apply::take_backup(self.ctx, self.db, name, purpose).await
                }
                action => match &applier {
                    Some(applier) => applier.apply(action).await,
                    None => Err(Error::MissingField("a valid spec to act on")),
                },
            };
            match result {
                Ok(Some(done)) => {
                    match action {
                        lifecycle::Action::Promote { name: to, from, .. } => {
                            let record = self.failed_over(from, to);
                            history.push(history::failover(&record));
                            last_failover = Some(record);
                        }
                        lifecycle::Action::Switchover { from, to, .. } => {
                            let promoted = started.elapsed();
                            info!(%from, %to, ?promoted, "switched over");
                            self.ctx.outage(&key_of(self.db), |o| {
                                o.handed_over(from, to, started, promoted);
                            });
                        }
                        _ => {}
                    }
                    self.publish_done(action, done).await;
                }
                Ok(None) => {}
                Err(error) => {
                    warn!(%error, ?action, "action failed");
                    if !error.category().is_transient() {
                        let (reason, message) = refusal(action, &error);
                        decision.add(Verdict::blocked(reason, message));
                    }
                    return Executed {
                        failure: Some(error),
                        last_failover,
                        history,
                    };
                }
            }
        }
        Executed {
            failure: None,
            last_failover,
            history,
        }
    }

    /// What this pass adds to `status.history`: `executed` (failovers and
    /// switchovers), the Backups that ended, the upgrade that did, and the
    /// restart that is done.
    fn history(
        &self,
        model: &ValidatedDatabase,
        next: &plan::NextStatus,
        mut executed: Vec<HistoryEntry>,
        reached: bool,
    ) -> Vec<HistoryEntry> {
        let previous = self.db.status.clone().unwrap_or_default();
        let now = self.snapshot.now;
        let switched = self.ctx.outage(&key_of(self.db), |o| {
            o.routed(reached, std::time::Instant::now())
        });
        if let Some(switched) = switched {
            info!(from = %switched.from, to = %switched.to, routed = ?switched.routed, "switchover routed");
            executed.push(history::switchover(&switched, now));
        }
        executed.extend(history::backups(&previous.history, &self.snapshot.backups));
        executed.extend(history::upgrade(
            previous.upgrade.as_ref(),
            next.upgrade.as_ref(),
            now,
        ));
        if let Some(asked) = model.restarted_at.as_deref() {
            let carrying = self
                .snapshot
                .pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| {
                    p.annotations().get(history::RESTARTED_AT_ANNOTATION) == Some(&asked.to_owned())
                })
                .count();
            let restart = history::Restart {
                asked,
                replaced: carrying >= usize::try_from(model.instances).unwrap_or(usize::MAX),
                ready: next.phase == DatabasePhase::Ready,
            };
            executed.extend(history::restart(&previous.history, restart, now));
        }
        executed
    }

    /// The status the plan names, with what was observed of the instances.
    fn next_status(&self, decision: &lifecycle::Plan) -> plan::NextStatus {
        let mut next = plan::accepted(
            decision,
            observe::instance_statuses(self.db, self.snapshot),
            observe::applied(self.db, self.snapshot),
        );
        next.resources = self.model.map(ValidatedDatabase::resources_status);
        next
    }

    /// The Event of an applied action, related to the pod it touched.
    async fn publish_done(&self, action: &lifecycle::Action, done: apply::Done) {
        let name = self.db.name_any();
        let related = action
            .target(|serial| crate::resources::names::instance_name(&name, serial))
            .map(|pod| k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: Some(pod),
                namespace: Some(self.namespace.to_owned()),
                ..Default::default()
            });
        self.ctx
            .publish_about(
                self.db,
                related,
                EventType::Normal,
                done.reason,
                "Reconcile",
                done.note,
            )
            .await;
    }

    /// The Events the plan asks for beside its actions and conditions.
    async fn publish_notes(&self, decision: &lifecycle::Plan) {
        for note in &decision.notes {
            let type_ = if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.ctx
                .publish(
                    self.db,
                    type_,
                    note.reason,
                    note.action,
                    note.message.clone(),
                )
                .await;
        }
    }

    /// A promotion that just completed, measured, counted and recorded.
    fn failed_over(&self, from: &str, to: &str) -> LastFailover {
        let failed = failed_over(self.ctx, self.observed, &key_of(self.db), from, to);
        self.ctx.metrics.failed_over(
            self.namespace,
            &self.db.name_any(),
            failed.duration,
            failed.wal_gap_bytes,
        );
        failed.record
    }
}

/// When to look again: the plan's delay, or when the change is seen.
fn requeue(decision: &lifecycle::Plan) -> Action {
    match decision.requeue_after_seconds {
        Some(after) => Action::requeue(Duration::from_secs(after)),
        None => Action::await_change(),
    }
}

/// Counts a move of the primary once the status holds it, so a failed write
/// is counted when a later pass records it, not twice.
fn count_failover(ctx: &Context, db: &Database, key: &str, primary: Option<&str>) {
    let Some(primary) = primary else {
        return;
    };
    let stored = db
        .status
        .as_ref()
        .and_then(|s| s.current_primary.as_deref());
    if let Change::From(previous) = ctx.remember(key, stored, primary) {
        ctx.metrics
            .failover(&db.namespace().unwrap_or_default(), &db.name_any());
        info!(%previous, %primary, "the primary moved");
    }
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
    record: LastFailover,
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
        record: LastFailover {
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

/// The condition reason and message of an action that failed for good.
fn refusal(action: &lifecycle::Action, error: &Error) -> (&'static str, String) {
    match (action, error) {
        (lifecycle::Action::RunMigration { .. }, _) => {
            ("MigrationRefused", format!("spec.migrations: {error}"))
        }
        (_, Error::Instance { .. }) => ("InstanceRefused", error.to_string()),
        _ => ("ApiRefused", error.to_string()),
    }
}

/// Writes the status and publishes an Event for every condition or phase change.
/// Which Events a status write publishes.
#[derive(Clone, Copy)]
enum Announce {
    /// One for every condition that changed (a warning for a Ready that is
    /// Blocked, and for Degraded), and one for a new phase.
    Transitions,
    /// Only a change of Ready, with its reason and message.
    Ready { warning: bool, action: &'static str },
}

/// Writes the status and publishes the Events `announce` asks for.
async fn write_status(
    db: &Database,
    api: &Api<Database>,
    ctx: &Context,
    plan: &plan::NextStatus,
    announce: Announce,
) -> Result<(), Error> {
    let now = Time(Timestamp::now());
    let next = status::build(db, plan, &now);
    let mut before = db.status.clone().unwrap_or_default();
    // `LastDrill` is the Drill controller's, under its own field manager:
    // not part of what this pass computes (nor removed by its apply).
    before
        .conditions
        .retain(|c| c.type_ != crate::controller::drill::act::LAST_DRILL);
    if before == next {
        return Ok(());
    }
    let key = format!("{}/{}", db.namespace().unwrap_or_default(), db.name_any());
    if status::without_progress(&before) == status::without_progress(&next)
        && !ctx.progress_due(&key, PROGRESS_INTERVAL)
    {
        return Ok(());
    }
    api.patch_status(
        &db.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(status::patch_body(&next)),
    )
    .await
    .map_err(Error::kube("writing the Database status"))?;
    ctx.progress_written(&key);
    let changed = conditions::transitions(&before.conditions, &next.conditions);
    match announce {
        Announce::Ready { warning, action } => {
            if let Some(ready) = changed.iter().find(|c| c.type_ == conditions::READY) {
                let type_ = if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                ctx.publish(db, type_, &ready.reason, action, ready.message.clone())
                    .await;
            }
        }
        Announce::Transitions => {
            for changed in changed {
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
        }
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
    // The final backup is done (or not wanted) by now: `hold` runs first. Everything Tusk creates carries an owner reference and is
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
