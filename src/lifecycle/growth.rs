//! Growing volumes, and a volume that filled: one plan row per volume of
//! each instance (the data volume, and the WAL volume of `spec.walStorage`).
//!
//! A volume grows to `spec.storage.size` (`spec.walStorage.size`) when that
//! is larger than its PVC's request, and the data volume by `autoGrow.step` (never past `autoGrow.limit`) when the
//! filesystem the instance sees is `autoGrow.threshold` percent used. It
//! never shrinks, never grows while a resize is under way, and never grows
//! where its StorageClass does not allow expansion (that is `Blocked`,
//! naming the field and the class). A full volume is `Degraded`, naming the
//! instance, the volume and what to do.

use std::fmt::Write as _;

use crate::api::autogrow::{self, AutoGrow};
use crate::api::quantity;
use crate::api::v1::DatabaseSpec;
use crate::contract::VolumeKind;

use super::action::{Action, GrowReason};
use super::context::Context;
use super::verdict::Verdict;
pub use super::volume::{Kind, Volume};

/// What to do with one volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Its size is what is asked for.
    Steady,
    /// Not bound yet: nothing to grow.
    Unbound,
    /// Grow its PVC to `to` bytes.
    Grow { to: u64, reason: GrowReason },
    /// It should reach `to`, once the resize under way has finished.
    Waiting { to: u64 },
    /// It should reach `to`, and its StorageClass cannot expand it.
    NotExpandable { to: u64 },
}

/// The size `spec` asks for volume `kind`, in bytes; `None` when the spec
/// has no such volume.
pub fn wanted(spec: &DatabaseSpec, kind: VolumeKind) -> Option<u64> {
    let text = match kind {
        VolumeKind::Data => &spec.storage.size,
        VolumeKind::Wal => &spec.wal_storage.as_ref()?.size,
    };
    quantity::parse_bytes(text)
        .ok()
        .map(|b| u64::try_from(b).unwrap_or(u64::MAX))
}

/// The decision for `volume`, given the size the spec asks for (`wanted`)
/// and `autoGrow`. Pure; the properties: the target is never below the
/// request (no shrink), an auto-grow never passes `limit`, and nothing
/// grows while a resize is pending.
pub fn decide(volume: &Volume, wanted: u64, auto: Option<&AutoGrow>) -> Decision {
    if volume.capacity.is_none() {
        return Decision::Unbound;
    }
    let current = volume.requested;
    let by_spec = wanted.max(current);
    let by_auto = auto
        .filter(|a| {
            volume
                .usage
                .is_some_and(|u| u.used_percent() >= a.threshold || u.full())
        })
        .filter(|a| current < a.limit)
        .map(|a| current.saturating_add(a.step.bytes(current)).min(a.limit))
        .unwrap_or(current);
    let to = by_spec.max(by_auto);
    if to <= current {
        return Decision::Steady;
    }
    if volume.resize_pending() {
        return Decision::Waiting { to };
    }
    if !volume.expandable {
        return Decision::NotExpandable { to };
    }
    let reason = if by_spec >= by_auto {
        GrowReason::Spec
    } else {
        GrowReason::AutoGrow {
            used_percent: volume.usage.map_or(100, |u| u.used_percent()),
        }
    };
    Decision::Grow { to, reason }
}

/// How often to look at the volumes while `autoGrow` is set: the managers
/// are polled, so a threshold crossed is seen at the next pass.
pub const AUTO_GROW_POLL_SECONDS: u64 = 10;
/// How often to look while a resize is under way, or a volume is full.
pub const RESIZE_POLL_SECONDS: u64 = 3;

/// The growth sub-planner's part of the plan.
#[derive(Debug, Default)]
pub(super) struct Growth {
    pub actions: Vec<Action>,
    pub verdicts: Vec<Verdict>,
    /// The next pass should come this soon.
    pub poll_seconds: Option<u64>,
}

/// One row per volume of each instance.
pub(super) fn plan(ctx: &Context) -> Growth {
    let auto = autogrow::resolve(&ctx.spec.storage).ok().flatten();
    let mut growth = Growth::default();
    let mut not_expandable = Vec::new();
    let mut waiting = Vec::new();
    let mut full = Vec::new();
    for serial in &ctx.members {
        let Some(instance) = ctx.instance(*serial) else {
            continue;
        };
        let name = ctx.name(*serial);
        for volume in &instance.volumes {
            let Some(wanted) = wanted(ctx.spec, volume.kind.0) else {
                continue;
            };
            if volume.full() {
                full.push((name.clone(), volume));
            }
            // autoGrow is spec.storage's: it sizes the data volume only.
            let auto = auto.as_ref().filter(|_| volume.kind.0 == VolumeKind::Data);
            match decide(volume, wanted, auto) {
                Decision::Steady | Decision::Unbound => {}
                Decision::Grow { to, reason } => growth.actions.push(Action::GrowVolume {
                    instance: name.clone(),
                    volume: volume.kind.0,
                    pvc: volume.pvc.clone(),
                    from: volume.requested,
                    to,
                    reason,
                }),
                Decision::Waiting { to } => waiting.push((volume, to)),
                Decision::NotExpandable { to } => not_expandable.push((volume, to)),
            }
        }
    }
    if let Some(verdict) = not_expandable_verdict(&not_expandable, auto.is_some()) {
        growth.verdicts.push(verdict);
    }
    let spec_growing = growth.actions.iter().any(|a| {
        matches!(
            a,
            Action::GrowVolume {
                reason: GrowReason::Spec,
                ..
            }
        )
    }) || waiting.iter().any(|(v, _)| {
        let asked = wanted(ctx.spec, v.kind.0).unwrap_or(0);
        v.capacity.is_some_and(|c| c < asked)
    });
    if spec_growing {
        growth.verdicts.push(Verdict::progress(
            "ExpandingVolumes",
            progress_message(&growth.actions, &waiting),
        ));
    }
    if !full.is_empty() {
        growth.verdicts.push(full_verdict(
            &full,
            auto.as_ref(),
            &growth.actions,
            &waiting,
        ));
    }
    growth.poll_seconds = if !growth.actions.is_empty() || !waiting.is_empty() || !full.is_empty() {
        Some(RESIZE_POLL_SECONDS)
    } else {
        auto.map(|_| AUTO_GROW_POLL_SECONDS)
    };
    growth
}

fn not_expandable_verdict(rows: &[(&Volume, u64)], auto: bool) -> Option<Verdict> {
    let (volume, to) = rows.first()?;
    let class = volume.class.as_deref().unwrap_or("(none)");
    let why = match &volume.class_unreadable {
        Some(why) => {
            format!("StorageClass {class} cannot be told to allow volume expansion: {why}")
        }
        None => format!(
            "StorageClass {class} does not allow volume expansion (allowVolumeExpansion is not true)"
        ),
    };
    let field = if volume.kind.0 == VolumeKind::Wal {
        "spec.walStorage.size"
    } else if auto {
        "spec.storage.size or spec.storage.autoGrow"
    } else {
        "spec.storage.size"
    };
    let pvcs: Vec<&str> = rows.iter().map(|(v, _)| v.pvc.as_str()).collect();
    Some(Verdict::blocked(
        "VolumeExpansionNotSupported",
        format!(
            "{field}: PVC {} needs {} but {why}; use a class that allows it for new Databases, or grow the volumes outside Tusk",
            pvcs.join(", "),
            bytes(*to),
        ),
    ))
}

fn progress_message(actions: &[Action], waiting: &[(&Volume, u64)]) -> String {
    let mut parts = Vec::new();
    for action in actions {
        if let Action::GrowVolume { pvc, from, to, .. } = action {
            parts.push(format!(
                "growing PVC {pvc} from {} to {}",
                bytes(*from),
                bytes(*to)
            ));
        }
    }
    for (volume, to) in waiting {
        let stage = volume
            .resizing
            .clone()
            .unwrap_or_else(|| "waiting for the node to grow the filesystem".to_owned());
        parts.push(format!(
            "PVC {} on its way to {}: {stage}",
            volume.pvc,
            bytes(*to)
        ));
    }
    let wal = actions.iter().any(|a| {
        matches!(
            a,
            Action::GrowVolume {
                volume: VolumeKind::Wal,
                ..
            }
        )
    }) || waiting.iter().any(|(v, _)| v.kind.0 == VolumeKind::Wal);
    let data = actions.iter().any(|a| {
        matches!(
            a,
            Action::GrowVolume {
                volume: VolumeKind::Data,
                ..
            }
        )
    }) || waiting.iter().any(|(v, _)| v.kind.0 == VolumeKind::Data);
    let fields = match (data, wal) {
        (true, true) => "spec.storage.size and spec.walStorage.size",
        (false, true) => "spec.walStorage.size",
        _ => "spec.storage.size",
    };
    format!("{fields}: {}", parts.join("; "))
}

fn full_verdict(
    full: &[(String, &Volume)],
    auto: Option<&AutoGrow>,
    actions: &[Action],
    waiting: &[(&Volume, u64)],
) -> Verdict {
    let mut message = String::new();
    for (instance, volume) in full {
        let free = volume.usage.map_or(0, |u| u.available_bytes);
        let total = volume.usage.map_or(0, |u| u.total_bytes);
        let _ = write!(
            message,
            "instance {instance}: its {} volume (PVC {}) is full ({} free of {}); PostgreSQL fails every write that needs more room. ",
            volume.kind.0.as_str(),
            volume.pvc,
            bytes(free),
            bytes(total),
        );
        let growing = actions
            .iter()
            .any(|a| matches!(a, Action::GrowVolume { pvc, .. } if *pvc == volume.pvc))
            || waiting.iter().any(|(v, _)| v.pvc == volume.pvc);
        let advice = match auto {
            _ if growing => {
                "It is being grown; writes resume once the filesystem is larger.".to_owned()
            }
            _ if volume.kind.0 == VolumeKind::Wal => {
                "Grow spec.walStorage.size (or lower max_wal_size in spec.postgresql.parameters)."
                    .to_owned()
            }
            Some(a) if volume.requested >= a.limit => format!(
                "spec.storage.autoGrow.limit ({}) is reached: raise it, or grow spec.storage.size.",
                bytes(a.limit)
            ),
            _ => "Grow spec.storage.size (or set spec.storage.autoGrow).".to_owned(),
        };
        message.push_str(&advice);
        message.push(' ');
    }
    Verdict::degraded("VolumeFull", message.trim_end().to_owned())
}

/// Bytes as a person reads them: `1.5 GiB`, `512 MiB`.
pub fn bytes(value: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut scaled = value as f64;
    let mut unit = 0;
    while scaled >= 1024.0 && unit + 1 < UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    if unit == 0 || scaled.fract() == 0.0 {
        format!("{scaled:.0} {}", UNITS[unit])
    } else {
        format!("{scaled:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
#[path = "growth_tests.rs"]
mod tests;
