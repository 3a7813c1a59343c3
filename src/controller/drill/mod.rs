//! The Drill controller: one pass observes the Drill, its Database, the
//! other Drills on it and the probe ([`observe`]), lets the pure state
//! machine ([`crate::drill`]) plan one step, writes the step's status (the
//! drill's whole state: a fault is on record before it is injected) and then
//! carries out its actions ([`act`]), folding the outcome of those that
//! change the state (an injection refused, an undo done) back into the
//! status with [`crate::drill::settle`].
//!
//! A Drill carries the finalizer: deleting one mid-run aborts it and undoes
//! its fault before the object goes (its probe pod, owned by the Drill,
//! goes with it).

pub mod act;
pub mod observe;
mod probe_client;

use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use serde_json::json;
use tracing::{Span, field, info, instrument, warn};

use crate::api::drill::DrillStatus;
use crate::api::v1::Drill;
use crate::controller::{Context, Error, FIELD_MANAGER, FINALIZER, namespace_of, reconciled};
use crate::drill::{self, Action, Outcome, Step};
use crate::telemetry;
use act::Act;

pub const CONTROLLER: &str = "drill";

/// How many actions one pass carries out at most, settled steps included:
/// a bound on a loop that the state machine ends in two or three.
const MAX_ACTIONS: usize = 32;

/// An undo that keeps failing is given up this long after the fault's
/// deadline when the instance manager holds the fault: it has undone it by
/// itself by then. A NetworkPolicy stays until Tusk removes it: never given
/// up (the Drill owns it, so deleting the Drill removes it too).
const UNDO_GRACE: SignedDuration = SignedDuration::from_secs(30);

/// One pass over a Drill in a `reconcile` span that carries the error when
/// the pass fails.
#[instrument(
    name = "reconcile",
    skip_all,
    fields(
        controller = CONTROLLER,
        drill = %drill.name_any(),
        namespace = drill.metadata.namespace.as_deref().unwrap_or_default(),
        error = field::Empty,
    )
)]
pub async fn reconcile(drill: Arc<Drill>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let result = pass(drill, ctx).await;
    if let Err(error) = &result {
        telemetry::record_error(&Span::current(), error);
    }
    result
}

async fn pass(drill: Arc<Drill>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let _pass = ctx.pass(CONTROLLER, drill.as_ref());
    let namespace = namespace_of(drill.as_ref())?;
    let api: Api<Drill> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, drill, |event| async {
        match event {
            Finalizer::Apply(drill) => step(&drill, &api, &ctx, &namespace).await,
            // The plan sees the deletion: it aborts the run and undoes its
            // fault; whatever could not be undone now, the instance manager
            // undoes at the fault's deadline.
            Finalizer::Cleanup(drill) => {
                step(&drill, &api, &ctx, &namespace).await?;
                Ok(Requeue::await_change())
            }
        }
    })
    .await
    .map_err(|source| Error::Finalizer {
        name: format!("{namespace}/Drill"),
        source: Box::new(source),
    })
}

/// Observe, plan, write the status, act, settle.
async fn step(
    drill: &Drill,
    api: &Api<Drill>,
    ctx: &Context,
    namespace: &str,
) -> Result<Requeue, Error> {
    let seen = observe::observe(ctx, drill, namespace).await?;
    let name = drill.name_any();
    let before = drill.status.clone().unwrap_or_default();
    let Step {
        status,
        actions,
        requeue_after,
    } = drill::plan(&name, &drill.spec, &before, &seen.observed);
    let mut status = status;
    if status != before {
        write_status(api, &name, &status).await?;
    }
    let act = Act {
        ctx,
        drill,
        namespace,
        seen: &seen,
    };
    let mut queue: std::collections::VecDeque<Action> = actions.into();
    let mut done = 0;
    while let Some(action) = queue.pop_front() {
        done += 1;
        if done > MAX_ACTIONS {
            warn!(
                ?action,
                "too many actions in one pass; the next pass goes on"
            );
            break;
        }
        let mut outcome = act.run(&action).await?;
        if let (Action::Undo { .. }, Outcome::Unknown(why) | Outcome::Refused(why)) =
            (&action, &outcome)
        {
            warn!(%why, "the fault could not be undone now");
            if drill.spec.scenario.undone_by_the_instance()
                && undo_given_up(&status, &seen.observed)
            {
                outcome = Outcome::Done;
            }
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        if let Some(next) = drill::settle(&name, &drill.spec, &status, &action, &outcome, now) {
            write_status(api, &name, &next.status).await?;
            status = next.status;
            queue.extend(next.actions);
        }
    }
    reconciled(drill, ctx);
    info!(phase = ?status.phase, "reconciled");
    Ok(requeue_after.map_or_else(Requeue::await_change, |after| {
        Requeue::requeue(after.max(Duration::from_millis(500)))
    }))
}

/// Whether the fault's deadline passed long enough ago that the instance
/// manager has undone it by itself.
fn undo_given_up(status: &DrillStatus, observed: &drill::Observed) -> bool {
    status
        .fault
        .as_ref()
        .and_then(|f| f.undo_by.as_ref())
        .is_some_and(|by| observed.now.duration_since(by.0) > UNDO_GRACE)
}

async fn write_status(api: &Api<Drill>, name: &str, status: &DrillStatus) -> Result<(), Error> {
    let body = json!({ "apiVersion": "tusk.dev/v1", "kind": "Drill", "status": status });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(Error::kube("writing the Drill status"))?;
    Ok(())
}
