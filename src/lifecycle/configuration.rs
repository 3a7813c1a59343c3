//! Configuration: `spec.postgresql.parameters` reloaded everywhere, then a
//! rolling restart for those that need one.

use crate::api::status::DatabasePhase;
use crate::postgres::params::Change;

use super::action::Action;
use super::context::Context;
use super::observed::ManagerStatus;
use super::shape::Topology;
use super::verdict::Verdict;

#[derive(Default)]
pub(super) struct Configuration {
    pub actions: Vec<Action>,
    pub verdicts: Vec<Verdict>,
}

/// Parameter changes, only in a serving steady state: reload every instance that
/// answers; then restart one instance reporting `pending_restart` at a time,
/// replicas first, the primary last, and only while everything else is ready
/// (the restarted instance is not ready until it is back, which holds the next).
/// An instance whose pod the rolling update will replace is not restarted.
pub(super) fn plan(ctx: &Context, topology: &Topology) -> Configuration {
    let mut out = Configuration::default();
    let Some((primary, _)) = topology.reporting_primary else {
        return out;
    };
    if !topology.serving {
        return out;
    }
    let observed = ctx.observed;
    let serving: Vec<(u32, ManagerStatus)> = std::iter::once(primary)
        .chain(topology.keep.iter().copied())
        .filter_map(|s| {
            let instance = observed.instances.get(&s)?;
            if instance.terminating() {
                return None;
            }
            Some((s, instance.status()?))
        })
        .collect();
    if observed.parameter_change != Change::Nothing {
        out.verdicts.push(Verdict::progress(
            "ApplyingParameters",
            "reloading spec.postgresql.parameters on every instance",
        ));
    }
    let pending: Vec<String> = serving
        .iter()
        .filter(|(_, status)| status.pending_restart)
        .map(|(s, _)| ctx.name(*s))
        .collect();
    if !pending.is_empty() {
        out.verdicts.push(Verdict::progress(
            "RestartingForParameters",
            format!(
                "a changed parameter takes effect after a restart of {}",
                pending.join(", ")
            ),
        ));
    }
    // In a switchover's wake (see `alarm`) the serving instances still reload.
    if !matches!(
        topology.phase,
        DatabasePhase::Ready | DatabasePhase::Degraded | DatabasePhase::SwitchingOver
    ) {
        return out;
    }
    if observed.parameter_change != Change::Nothing {
        for (serial, _) in &serving {
            out.actions.push(Action::Reload {
                name: ctx.name(*serial),
            });
        }
    }
    if topology.phase != DatabasePhase::Ready {
        return out;
    }
    // A pod the rolling update replaces starts with the new parameters
    // anyway (a memory change moves the derived `shared_buffers`): a
    // restart of it would only be one more pause.
    let restartable = |s: u32, status: &ManagerStatus| {
        status.pending_restart && !super::rollout::outdated(ctx, &ctx.name(s))
    };
    let replica = serving
        .iter()
        .find(|(s, status)| *s != primary && restartable(*s, status));
    let target = replica.or_else(|| {
        serving
            .iter()
            .find(|(s, status)| *s == primary && restartable(*s, status))
    });
    if let Some((serial, _)) = target {
        out.actions.push(Action::RestartInstance {
            name: ctx.name(*serial),
        });
    }
    out
}
