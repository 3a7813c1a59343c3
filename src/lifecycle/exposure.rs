//! The Services of `spec.expose`: which to apply and which to delete, from
//! what was observed of them. Applying is an idempotent server-side apply of
//! the whole Service (source ranges, annotations and policy change in place,
//! the address survives), planned whenever one is missing or not as built;
//! a Service whose entry is gone is deleted, and so is one whose
//! `loadBalancerClass` differs from the one the spec names, which Kubernetes
//! refuses to change in place: the next pass, once it is gone, creates it
//! anew (with a new address).

use crate::api::expose::service_name;

use super::action::{Action, ExposureRemoval};
use super::context::Context;

/// The actions of this pass for the published Services: deletions first
/// (a removed entry's Service goes whatever else happens), then one apply of
/// those missing or drifted.
pub(super) fn plan(ctx: &Context) -> Vec<Action> {
    let observed = &ctx.observed.exposure;
    let db = &ctx.observed.database;
    let wanted: Vec<(String, Option<&String>)> = ctx
        .spec
        .expose
        .iter()
        .map(|e| {
            (
                service_name(db, e.target, e.type_),
                e.load_balancer_class.as_ref(),
            )
        })
        .collect();
    let mut actions: Vec<Action> = observed
        .iter()
        .filter(|s| !s.terminating && !wanted.iter().any(|(name, _)| *name == s.name))
        .map(|s| Action::DeleteExposure {
            name: s.name.clone(),
            reason: ExposureRemoval::Unlisted,
        })
        .collect();
    let mut apply = Vec::new();
    for (name, class) in wanted {
        match observed.iter().find(|s| s.name == name) {
            None => apply.push(name),
            Some(s) if s.terminating => {}
            // Only a class the spec names is enforced: unset, the cluster's
            // default stands, which an admission webhook may have written
            // into the Service (deleting it for that would never end).
            Some(s) if class.is_some() && s.load_balancer_class.as_ref() != class => {
                actions.push(Action::DeleteExposure {
                    name,
                    reason: ExposureRemoval::ClassChanged,
                });
            }
            Some(s) if !s.as_built => apply.push(name),
            Some(_) => {}
        }
    }
    if !apply.is_empty() {
        actions.push(Action::ApplyExposure { services: apply });
    }
    actions
}

#[cfg(test)]
#[path = "exposure_tests.rs"]
mod tests;
