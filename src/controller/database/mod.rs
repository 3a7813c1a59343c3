//! The Database controller: validate → pure plan → status, wrapped in the finalizer.

pub mod plan;
pub mod status;

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use tracing::{Span, field, info, instrument};

use super::{Context, FINALIZER, conditions, namespace_of, reconciled};
use crate::api::v1::Database;
use crate::error::Error;

pub const CONTROLLER: &str = "database";

#[instrument(skip_all, fields(database = %db.name_any(), namespace = field::Empty, generation = field::Empty))]
pub async fn reconcile(db: Arc<Database>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(CONTROLLER);
    let namespace = namespace_of(db.as_ref())?;
    Span::current().record("namespace", namespace.as_str());
    if let Some(generation) = db.metadata.generation {
        Span::current().record("generation", generation);
    }
    let api: Api<Database> = Api::namespaced(ctx.client.clone(), &namespace);
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
    let name = db.name_any();
    let errors = plan::validate(db);
    let plan = plan::plan(db, &errors);
    let now = Time(Timestamp::now());
    let next = status::build(db, &plan, &now);
    status::apply(api, &name, &next).await?;

    let before = db.status.clone().unwrap_or_default();
    for changed in conditions::transitions(&before.conditions, &next.conditions) {
        let type_ = if changed.type_ == conditions::READY && changed.reason == "InvalidSpec" {
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
    reconciled(db, ctx);
    info!(phase = ?next.phase, valid = errors.is_empty(), "reconciled");
    // Valid or not, nothing changes until the object does.
    Ok(Action::await_change())
}

async fn cleanup(db: &Database, ctx: &Context) -> Result<Action, Error> {
    // Everything Tusk creates carries an owner reference and is garbage-collected
    // with the Database; the final backup joins this step with the backup feature.
    ctx.publish(
        db,
        EventType::Normal,
        "Deleting",
        "Delete",
        "releasing the Database".to_owned(),
    )
    .await;
    info!("released");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests;
