//! Growth decisions as plan rows: table tests and the properties (never past
//! `limit`, never a shrink, never while a resize is pending).

use proptest::prelude::*;

use super::*;
use crate::api::autogrow::Step;
use crate::api::v1::AutoGrowSpec;
use crate::contract::VolumeUsage;
use crate::lifecycle::observed::{InstanceState, Observed};
use crate::lifecycle::tests::{async_spec, primary, routed};
use crate::lifecycle::verdict::{DEGRADED, READY};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

fn volume(requested: u64, used: u64) -> Volume {
    Volume {
        kind: Kind(VolumeKind::Data),
        pvc: "orders-1".into(),
        requested,
        capacity: Some(requested),
        resizing: None,
        class: Some("tusk-expandable".into()),
        expandable: true,
        class_unreadable: None,
        usage: Some(VolumeUsage {
            volume: VolumeKind::Data,
            total_bytes: requested,
            available_bytes: requested.saturating_sub(used),
        }),
    }
}

fn auto(threshold: u8, step: Step, limit: u64) -> AutoGrow {
    AutoGrow {
        threshold,
        step,
        limit,
    }
}

#[test]
fn a_larger_spec_size_grows_the_volume() {
    assert_eq!(
        decide(&volume(GI, 0), 3 * GI / 2, None),
        Decision::Grow {
            to: 3 * GI / 2,
            reason: GrowReason::Spec
        }
    );
    assert_eq!(decide(&volume(GI, 0), GI, None), Decision::Steady);
}

#[test]
fn a_smaller_spec_size_never_shrinks() {
    assert_eq!(decide(&volume(2 * GI, 0), GI, None), Decision::Steady);
}

#[test]
fn auto_grow_starts_at_the_threshold_and_stops_at_the_limit() {
    let policy = auto(80, Step::Percent(50), 2 * GI);
    assert_eq!(
        decide(&volume(GI, GI * 79 / 100), GI, Some(&policy)),
        Decision::Steady
    );
    assert_eq!(
        decide(&volume(GI, GI * 80 / 100), GI, Some(&policy)),
        Decision::Grow {
            to: 3 * GI / 2,
            reason: GrowReason::AutoGrow { used_percent: 80 }
        }
    );
    assert_eq!(
        decide(&volume(7 * GI / 4, 7 * GI / 4), GI, Some(&policy)),
        Decision::Grow {
            to: 2 * GI,
            reason: GrowReason::AutoGrow { used_percent: 100 }
        },
        "the last step stops at the limit"
    );
    assert_eq!(
        decide(&volume(2 * GI, 2 * GI), GI, Some(&policy)),
        Decision::Steady,
        "at the limit: nothing more"
    );
}

#[test]
fn nothing_grows_while_a_resize_is_pending() {
    let policy = auto(80, Step::Bytes(512 * MI), 4 * GI);
    let mut resizing = volume(GI, GI);
    resizing.resizing = Some("FileSystemResizePending".into());
    assert_eq!(
        decide(&resizing, GI, Some(&policy)),
        Decision::Waiting { to: GI + 512 * MI }
    );
    let mut short = volume(2 * GI, GI);
    short.capacity = Some(GI);
    assert_eq!(
        decide(&short, 3 * GI, None),
        Decision::Waiting { to: 3 * GI }
    );
    let mut filesystem_behind = volume(2 * GI, 2 * GI);
    filesystem_behind.usage = Some(VolumeUsage {
        volume: VolumeKind::Data,
        total_bytes: GI,
        available_bytes: 0,
    });
    assert!(
        matches!(
            decide(&filesystem_behind, GI, Some(&policy)),
            Decision::Waiting { .. }
        ),
        "the PVC has grown and the filesystem not yet: it is not grown again"
    );
}

#[test]
fn a_class_without_expansion_is_reported_not_grown() {
    let mut fixed = volume(GI, 0);
    fixed.expandable = false;
    assert_eq!(
        decide(&fixed, 2 * GI, None),
        Decision::NotExpandable { to: 2 * GI }
    );
    let mut unbound = volume(GI, 0);
    unbound.capacity = None;
    assert_eq!(decide(&unbound, 2 * GI, None), Decision::Unbound);
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1u64..4 * GI).prop_map(Step::Bytes),
        (1u32..200).prop_map(Step::Percent)
    ]
}

fn arb_volume() -> impl Strategy<Value = Volume> {
    (
        1u64..8 * GI,
        0u64..8 * GI,
        proptest::option::of(0u64..8 * GI),
        any::<bool>(),
        any::<bool>(),
        0u64..8 * GI,
    )
        .prop_map(
            |(requested, capacity, usage_total, resizing, expandable, used)| {
                let mut v = volume(requested, 0);
                v.capacity = Some(capacity);
                v.resizing = resizing.then(|| "Resizing".to_owned());
                v.expandable = expandable;
                v.usage = usage_total.map(|total| VolumeUsage {
                    volume: VolumeKind::Data,
                    total_bytes: total,
                    available_bytes: total.saturating_sub(used),
                });
                v
            },
        )
}

proptest! {
    #[test]
    fn growth_never_shrinks_never_passes_the_limit_never_races_a_resize(
        v in arb_volume(),
        wanted in 1u64..8 * GI,
        threshold in 1u8..100,
        step in arb_step(),
        limit_over in 0u64..8 * GI,
        with_auto in any::<bool>(),
    ) {
        // Admission keeps the limit at or above spec.storage.size.
        let policy = auto(threshold, step, wanted + limit_over);
        let policy = with_auto.then_some(policy);
        match decide(&v, wanted, policy.as_ref()) {
            Decision::Grow { to, reason } => {
                prop_assert!(to > v.requested, "never shrinks: {to} <= {}", v.requested);
                prop_assert!(!v.resize_pending(), "grew while a resize was pending");
                prop_assert!(v.expandable);
                if let Some(p) = policy {
                    prop_assert!(to <= p.limit.max(v.requested), "{to} past limit {}", p.limit);
                }
                if reason == GrowReason::Spec {
                    prop_assert_eq!(to, wanted, "a grow for the spec goes to the spec's size");
                }
            }
            Decision::Waiting { to } | Decision::NotExpandable { to } => {
                prop_assert!(to > v.requested);
                if let Some(p) = policy {
                    prop_assert!(to <= p.limit.max(v.requested));
                }
            }
            Decision::Steady | Decision::Unbound => {}
        }
    }
}

/// One ready primary, routed, whose data volume on an expandable class (or
/// local-path) has `used` of `size`.
fn observed_with(size: u64, used: u64, expandable: bool) -> Observed {
    let mut v = volume(size, used);
    v.expandable = expandable;
    v.class = Some(
        if expandable {
            "tusk-expandable"
        } else {
            "local-path"
        }
        .into(),
    );
    let mut instance = primary(true);
    instance.volumes = vec![v];
    routed(crate::lifecycle::tests::observed(vec![(1, instance)]))
}

fn one_instance(size: &str, auto_grow: Option<AutoGrowSpec>) -> DatabaseSpec {
    let mut spec = async_spec(1);
    spec.storage.size = size.into();
    spec.storage.auto_grow = auto_grow;
    spec
}

#[test]
fn the_plan_grows_a_volume_and_is_not_ready_until_it_has() {
    let spec = one_instance("1536Mi", None);
    let observed = observed_with(GI, 0, true);
    let ctx = Context::new(&spec, None, &observed);
    assert!(matches!(
        ctx.instance(1).map(|i| i.state()),
        Some(InstanceState::Known(_))
    ));
    let growth = plan(&ctx);
    assert_eq!(
        growth.actions,
        vec![Action::GrowVolume {
            instance: "orders-1".into(),
            volume: VolumeKind::Data,
            pvc: "orders-1".into(),
            from: GI,
            to: 1536 * MI,
            reason: GrowReason::Spec,
        }]
    );
    assert!(matches!(
        &growth.verdicts[..],
        [Verdict::Progress { reason: "ExpandingVolumes", message }]
            if message.starts_with("spec.storage.size: growing PVC orders-1 from 1 GiB to 1.5 GiB")
    ));
}

#[test]
fn a_larger_wal_storage_size_grows_the_wal_volume_alone() {
    let mut spec = one_instance("1Gi", None);
    spec.wal_storage = Some(crate::api::v1::WalStorageSpec {
        size: "3Gi".into(),
        storage_class_name: None,
    });
    spec.storage.auto_grow = Some(AutoGrowSpec {
        threshold: 50,
        step: "1Gi".into(),
        limit: "10Gi".into(),
    });
    let mut observed = observed_with(GI, 0, true);
    let mut wal = volume(2 * GI, 2 * GI - 10 * MI);
    wal.kind = Kind(VolumeKind::Wal);
    wal.pvc = "orders-1-wal".into();
    if let Some(usage) = &mut wal.usage {
        usage.volume = VolumeKind::Wal;
    }
    if let Some((_, instance)) = observed.instances.iter_mut().next() {
        instance.volumes.push(wal);
    }
    let ctx = Context::new(&spec, None, &observed);
    let growth = plan(&ctx);
    assert_eq!(
        growth.actions,
        vec![Action::GrowVolume {
            instance: "orders-1".into(),
            volume: VolumeKind::Wal,
            pvc: "orders-1-wal".into(),
            from: 2 * GI,
            to: 3 * GI,
            reason: GrowReason::Spec,
        }],
        "the WAL volume grows to spec.walStorage.size; spec.storage.autoGrow sizes the data volume only"
    );
    assert!(
        growth.verdicts.iter().any(|v| matches!(
            v,
            Verdict::Progress { reason: "ExpandingVolumes", message }
                if message.starts_with("spec.walStorage.size: growing PVC orders-1-wal from 2 GiB to 3 GiB")
        )),
        "{:?}",
        growth.verdicts
    );
}

#[test]
fn a_class_that_cannot_expand_is_named_with_the_field() {
    let spec = one_instance("1536Mi", None);
    let observed = observed_with(GI, 0, false);
    let plan = crate::lifecycle::plan(&spec, None, &observed);
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::GrowVolume { .. }))
    );
    let ready = plan.conditions.iter().find(|c| c.type_ == READY).unwrap();
    assert!(!ready.status);
    assert_eq!(ready.reason, "VolumeExpansionNotSupported");
    assert!(
        ready.message.starts_with("spec.storage.size: PVC orders-1 needs 1.5 GiB but StorageClass local-path does not allow volume expansion"),
        "{}",
        ready.message
    );
}

#[test]
fn a_full_volume_is_degraded_with_what_to_do() {
    let spec = one_instance("1Gi", None);
    let observed = observed_with(GI, GI - MI, true);
    let plan = crate::lifecycle::plan(&spec, None, &observed);
    let degraded = plan
        .conditions
        .iter()
        .find(|c| c.type_ == DEGRADED)
        .unwrap();
    assert!(degraded.status);
    assert_eq!(degraded.reason, "VolumeFull");
    assert_eq!(
        degraded.message,
        "instance orders-1: its data volume (PVC orders-1) is full (1 MiB free of 1 GiB); PostgreSQL fails every write that needs more room. Grow spec.storage.size (or set spec.storage.autoGrow)."
    );

    let limited = one_instance(
        "1Gi",
        Some(AutoGrowSpec {
            threshold: 80,
            step: "20%".into(),
            limit: "1Gi".into(),
        }),
    );
    let plan = crate::lifecycle::plan(&limited, None, &observed);
    let degraded = plan
        .conditions
        .iter()
        .find(|c| c.type_ == DEGRADED)
        .unwrap();
    assert!(
        degraded.message.ends_with(
            "spec.storage.autoGrow.limit (1 GiB) is reached: raise it, or grow spec.storage.size."
        ),
        "{}",
        degraded.message
    );
}

#[test]
fn auto_grow_grows_a_full_volume_and_says_so() {
    let spec = one_instance(
        "1Gi",
        Some(AutoGrowSpec {
            threshold: 80,
            step: "512Mi".into(),
            limit: "2Gi".into(),
        }),
    );
    let observed = observed_with(GI, GI - MI, true);
    let plan = crate::lifecycle::plan(&spec, None, &observed);
    assert!(plan.actions.contains(&Action::GrowVolume {
        instance: "orders-1".into(),
        volume: VolumeKind::Data,
        pvc: "orders-1".into(),
        from: GI,
        to: GI + 512 * MI,
        reason: GrowReason::AutoGrow { used_percent: 100 },
    }));
    let degraded = plan
        .conditions
        .iter()
        .find(|c| c.type_ == DEGRADED)
        .unwrap();
    assert!(
        degraded
            .message
            .ends_with("It is being grown; writes resume once the filesystem is larger.")
    );
    assert!(plan.requeue_after_seconds <= Some(RESIZE_POLL_SECONDS));
}

#[test]
fn bytes_read_like_a_person_writes_them() {
    assert_eq!(bytes(GI), "1 GiB");
    assert_eq!(bytes(1536 * MI), "1.5 GiB");
    assert_eq!(bytes(12), "12 B");
}
