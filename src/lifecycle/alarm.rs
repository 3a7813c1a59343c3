//! When an instance that does not serve is an alarm (`Degraded=True`, a
//! Warning Event) and when it is progress. `Degraded` means that something
//! which was working is not; an instance started for the first time, or the
//! instances a switchover restarts, are progress, shown as such.
//!
//! The rule, for an instance that does not serve (no answer, not ready, a
//! replica not streaming):
//! - It is an alarm when it has served: a primary the previous status
//!   recorded ready, or any instance of a Database whose previous phase was
//!   `Ready` (then every instance served). An alarm holds while the
//!   previous phase was `Degraded` or `Degraded` was True, so it does not
//!   turn back into progress while the instance recovers (a recreated pod
//!   clones afresh, yet the Database lost an instance).
//! - It is an alarm when the kubelet reports a failure: its pod failed, or
//!   its `postgres` container restarted.
//! - It is an alarm when its pod is older than [`STARTUP_GRACE_SECONDS`]: a
//!   new instance that never manages to serve is not hidden for ever —
//!   unless the scheduler cannot place its pod: that is reported as such
//!   (reason `Unschedulable`, see `scheduling`), not as a failure.
//! - Otherwise it is *starting*: progress. An instance without a pod is
//!   starting only on the way to the first `Ready`.
//!
//! A replica's streaming is not recorded in the status, so a replica that
//! streamed and stopped again before its pod is ten minutes old, on a
//! Database not yet `Ready`, is reported once its pod is.
//!
//! A switchover's wake: from the pass that hands the primary role over
//! until every instance serves again, the old and the new primary
//! restarting are the switchover's progress (phase `SwitchingOver`), at most
//! [`SWITCHOVER_GRACE_SECONDS`] after `Progressing` turned True; after that
//! the rule above applies.

use jiff::Timestamp;

use crate::api::status::{DatabasePhase, InstanceRole};

use super::context::Context;
use super::observed::{Instance, PodPhase};
use super::verdict::{DEGRADED, PROGRESSING};

/// How long a new instance's pod may take to serve (a replica: to stream)
/// before it counts as degraded: time to pull an image, clone a database of
/// some gigabytes and replay what was written meanwhile.
pub const STARTUP_GRACE_SECONDS: i64 = 600;

/// How long a switchover may take to settle (the new primary ready, the old
/// one streaming from it) before what is still not serving counts as
/// degraded: a clean stop, a promotion and a restart as a replica take
/// seconds.
pub const SWITCHOVER_GRACE_SECONDS: i64 = 180;

/// Whether `serial`, which does not serve, is still starting (progress)
/// rather than degraded: see the module's rule.
pub(super) fn starting(ctx: &Context, serial: u32) -> bool {
    if alarm_raised(ctx) || ctx.previous.and_then(|s| s.phase) == Some(DatabasePhase::Ready) {
        return false;
    }
    let Some(pod) = ctx.instance(serial).and_then(|i: &Instance| i.pod.as_ref()) else {
        return ctx.bootstrapping;
    };
    if pod.phase == PodPhase::Failed || pod.restarts > 0 || served_as_primary(ctx, serial) {
        return false;
    }
    // Waiting for a node is not failing: the Unschedulable verdict says
    // why (see `scheduling`), for as long as it lasts.
    if pod.unschedulable.is_some() {
        return true;
    }
    pod.created
        .is_none_or(|created| seconds_since(ctx, created) < STARTUP_GRACE_SECONDS)
}

/// The previous pass raised the alarm.
fn alarm_raised(ctx: &Context) -> bool {
    ctx.previous.is_some_and(|s| {
        s.phase == Some(DatabasePhase::Degraded)
            || s.conditions
                .iter()
                .any(|c| c.type_ == DEGRADED && c.status == "True")
    })
}

/// The previous status recorded `serial` as a ready primary.
pub(super) fn served_as_primary(ctx: &Context, serial: u32) -> bool {
    let name = ctx.name(serial);
    ctx.previous.is_some_and(|s| {
        s.instances
            .iter()
            .any(|i| i.name == name && i.ready && i.role == Some(InstanceRole::Primary))
    })
}

/// A switchover asked for through `spec.primary` is under way, within its
/// grace: the previous pass showed `SwitchingOver`, and `Progressing` turned
/// True less than [`SWITCHOVER_GRACE_SECONDS`] ago.
pub(super) fn switchover_wake(ctx: &Context) -> bool {
    let Some(previous) = ctx.previous else {
        return false;
    };
    ctx.spec.primary.is_some()
        && previous.phase == Some(DatabasePhase::SwitchingOver)
        && previous
            .conditions
            .iter()
            .find(|c| c.type_ == PROGRESSING && c.status == "True")
            .is_some_and(|c| {
                seconds_since(ctx, c.last_transition_time.0) < SWITCHOVER_GRACE_SECONDS
            })
}

fn seconds_since(ctx: &Context, then: Timestamp) -> i64 {
    ctx.observed.now.duration_since(then).as_secs()
}
