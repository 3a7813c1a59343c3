//! Each instance's volumes read off the snapshot (pure): the PVC's request,
//! capacity and resize conditions, its StorageClass's `allowVolumeExpansion`,
//! and the filesystem its manager measured; for the growth planner and for
//! `status.instances[].volumes`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;

use super::Snapshot;
use crate::api::quantity;
use crate::api::status::VolumeStatus;
use crate::contract::VolumeKind;
use crate::lifecycle::growth::{Kind, Volume};
use crate::resources::names;

/// PVC conditions that say a resize is under way (or stuck).
const RESIZE_CONDITIONS: [&str; 4] = [
    "Resizing",
    "FileSystemResizePending",
    "ControllerResizeError",
    "NodeResizeError",
];

/// The instance and volume PVC `claim` of Database `db` holds.
fn volume_of(db: &str, claim: &str) -> Option<(u32, VolumeKind)> {
    let (instance_part, kind) = match claim.strip_suffix("-wal") {
        Some(data) => (data, VolumeKind::Wal),
        None => (claim, VolumeKind::Data),
    };
    let serial = names::serial_of(db, instance_part)?;
    let instance = names::instance_name(db, serial);
    let expected = match kind {
        VolumeKind::Data => names::pvc(&instance),
        VolumeKind::Wal => names::wal_pvc(&instance),
    };
    (expected == claim).then_some((serial, kind))
}

/// Every instance's volumes, by serial, in kind order.
pub fn volumes(db: &str, snapshot: &Snapshot) -> BTreeMap<u32, Vec<Volume>> {
    let mut by_serial: BTreeMap<u32, Vec<Volume>> = BTreeMap::new();
    for pvc in &snapshot.pvcs {
        let name = pvc.name_any();
        let Some((serial, kind)) = volume_of(db, &name) else {
            continue;
        };
        let instance = names::instance_name(db, serial);
        let class = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone());
        let expansion = class.as_ref().and_then(|c| snapshot.storage_classes.get(c));
        let usage = snapshot
            .volumes
            .get(&instance)
            .and_then(|v| v.volumes.iter().find(|u| u.volume == kind).copied());
        by_serial.entry(serial).or_default().push(Volume {
            kind: Kind(kind),
            pvc: name,
            requested: bytes(requested(pvc)).unwrap_or(0),
            capacity: bytes(capacity(pvc)),
            resizing: resizing(pvc),
            expandable: matches!(expansion, Some(Ok(true))),
            class_unreadable: expansion.and_then(|e| e.clone().err()),
            class,
            usage,
        });
    }
    for volumes in by_serial.values_mut() {
        volumes.sort_by_key(|v| v.kind);
    }
    by_serial
}

/// `status.instances[].volumes` of instance `instance`.
pub fn volume_statuses(db: &str, instance: &str, snapshot: &Snapshot) -> Vec<VolumeStatus> {
    let Some(serial) = names::serial_of(db, instance) else {
        return Vec::new();
    };
    let usage = snapshot.volumes.get(instance);
    snapshot
        .pvcs
        .iter()
        .filter_map(|pvc| {
            let (of, kind) = volume_of(db, &pvc.name_any())?;
            if of != serial {
                return None;
            }
            let seen = usage.and_then(|u| u.volumes.iter().find(|v| v.volume == kind));
            Some(VolumeStatus {
                volume: kind.as_str().to_owned(),
                pvc: pvc.name_any(),
                requested: requested(pvc),
                capacity: capacity(pvc),
                resizing: resizing(pvc),
                filesystem_bytes: seen.map(|s| i64::try_from(s.total_bytes).unwrap_or(i64::MAX)),
                available_bytes: seen.map(|s| i64::try_from(s.available_bytes).unwrap_or(i64::MAX)),
                used_percent: seen.map(|s| i32::from(s.used_percent())),
            })
        })
        .collect()
}

fn bytes(text: Option<String>) -> Option<u64> {
    quantity::parse_bytes(&text?)
        .ok()
        .map(|b| u64::try_from(b).unwrap_or(u64::MAX))
}

fn requested(pvc: &PersistentVolumeClaim) -> Option<String> {
    Some(
        pvc.spec
            .as_ref()?
            .resources
            .as_ref()?
            .requests
            .as_ref()?
            .get("storage")?
            .0
            .clone(),
    )
}

/// The capacity of a bound claim.
fn capacity(pvc: &PersistentVolumeClaim) -> Option<String> {
    let status = pvc.status.as_ref()?;
    if status.phase.as_deref() != Some("Bound") {
        return None;
    }
    Some(status.capacity.as_ref()?.get("storage")?.0.clone())
}

/// What the claim says of a resize under way or failed: a condition
/// (`Resizing: …`), or the storage's allocated-resource status.
fn resizing(pvc: &PersistentVolumeClaim) -> Option<String> {
    let status = pvc.status.as_ref()?;
    let condition = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.status == "True" && RESIZE_CONDITIONS.contains(&c.type_.as_str()));
    if let Some(c) = condition {
        return Some(match c.message.as_deref().filter(|m| !m.is_empty()) {
            Some(message) => format!("{}: {message}", c.type_),
            None => c.type_.clone(),
        });
    }
    status
        .allocated_resource_statuses
        .as_ref()?
        .get("storage")
        .map(|s| format!("allocatedResourceStatuses: {s}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{VolumeUsage, Volumes};
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimCondition, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
        VolumeResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    fn claim(name: &str, requested: &str, capacity: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some("tusk-expandable".into()),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_owned(),
                        Quantity(requested.into()),
                    )])),
                    limits: None,
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Bound".into()),
                capacity: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(capacity.into()),
                )])),
                ..PersistentVolumeClaimStatus::default()
            }),
        }
    }

    #[test]
    fn a_claim_its_class_and_the_managers_measure_make_one_volume() {
        let mut pending = claim("orders-2", "1536Mi", "1Gi");
        pending.status.as_mut().unwrap().conditions = Some(vec![PersistentVolumeClaimCondition {
            type_: "FileSystemResizePending".into(),
            status: "True".into(),
            ..PersistentVolumeClaimCondition::default()
        }]);
        let usage = VolumeUsage {
            volume: VolumeKind::Data,
            total_bytes: 1 << 30,
            available_bytes: 1 << 20,
        };
        let snapshot = Snapshot {
            pvcs: vec![
                claim("orders-1", "1Gi", "1Gi"),
                pending,
                claim("other-1", "1Gi", "1Gi"),
            ],
            volumes: BTreeMap::from([(
                "orders-1".to_owned(),
                Volumes {
                    volumes: vec![usage],
                },
            )]),
            storage_classes: BTreeMap::from([("tusk-expandable".to_owned(), Ok(true))]),
            ..Snapshot::default()
        };
        let all = volumes("orders", &snapshot);
        assert_eq!(all.len(), 2, "{all:?}");
        let first = &all[&1][0];
        assert_eq!(first.requested, 1 << 30);
        assert_eq!(first.capacity, Some(1 << 30));
        assert!(first.expandable);
        assert_eq!(first.usage, Some(usage));
        assert!(first.full());
        let second = &all[&2][0];
        assert_eq!(second.resizing.as_deref(), Some("FileSystemResizePending"));
        assert!(second.resize_pending());

        let statuses = volume_statuses("orders", "orders-2", &snapshot);
        assert_eq!(statuses.len(), 1);
        assert_eq!(statuses[0].requested.as_deref(), Some("1536Mi"));
        assert_eq!(statuses[0].capacity.as_deref(), Some("1Gi"));
        assert_eq!(
            statuses[0].filesystem_bytes, None,
            "orders-2 did not answer"
        );
        assert_eq!(
            volume_statuses("orders", "orders-1", &snapshot)[0].used_percent,
            Some(100)
        );
    }
}
