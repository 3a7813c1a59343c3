//! Requests this build cannot carry out yet. Each is a `Blocked` verdict that
//! names the field; nothing is done for it (a bootstrap from a backup creates
//! nothing at all), and the rest of the spec still is.

use super::context::Context;
use super::verdict::Verdict;

pub(super) struct Requests {
    /// A new cluster must not be created: its bootstrap cannot be carried out.
    pub hold_bootstrap: bool,
    pub verdicts: Vec<Verdict>,
}

pub(super) fn plan(ctx: &Context) -> Requests {
    let spec = ctx.spec;
    let mut verdicts = Vec::new();
    let recovery = spec
        .bootstrap
        .as_ref()
        .is_some_and(|b| b.recovery.is_some());
    if recovery {
        verdicts.push(Verdict::blocked(
            "RestoreNotSupported",
            "spec.bootstrap.recovery: restoring from a backup is not supported by this build; nothing is created",
        ));
    }
    if let Some(primary) = &spec.primary {
        let current = ctx.previous.and_then(|s| s.current_primary.as_deref());
        if current != Some(primary.as_str()) {
            verdicts.push(Verdict::blocked(
                "SwitchoverNotSupported",
                format!(
                    "spec.primary: switchover is not supported by this build; {} stays primary",
                    current.unwrap_or("the current primary")
                ),
            ));
        }
    }
    if !ctx.observed.short_volumes.is_empty() {
        verdicts.push(Verdict::blocked(
            "VolumeExpansionNotSupported",
            format!(
                "spec.storage.size: {} asks for more than {} hold; growing volumes is not supported by this build",
                spec.storage.size,
                ctx.observed.short_volumes.join(", ")
            ),
        ));
    }
    Requests {
        hold_bootstrap: recovery,
        verdicts,
    }
}
