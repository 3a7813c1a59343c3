//! Requests this build cannot carry out (yet). Each is a `Blocked` verdict that
//! names the field; nothing is done for it, and the rest of the spec still is.
//! A restore whose source cannot be resolved creates nothing at all. (A
//! larger `spec.storage.size` is carried out: see `growth`.)

use super::context::Context;
use super::verdict::Verdict;

pub(super) struct Requests {
    /// A new cluster must not be created: its restore source cannot be resolved.
    pub hold_bootstrap: bool,
    pub verdicts: Vec<Verdict>,
}

pub(super) fn plan(ctx: &Context) -> Requests {
    let spec = ctx.spec;
    let verdicts = Vec::new();
    // The topology says why (the message names the field) while it holds.
    let recovery = spec
        .bootstrap
        .as_ref()
        .is_some_and(|b| b.recovery.is_some());
    let unrestorable = recovery && ctx.observed.restore.unresolved.is_some();
    Requests {
        hold_bootstrap: unrestorable,
        verdicts,
    }
}
