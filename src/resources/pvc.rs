//! The PersistentVolumeClaims of one instance: its data volume, and the same
//! claim at a larger size when the volume grows.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{labels, names, object_meta};
use crate::api::model::ValidatedDatabase;
use crate::contract::VolumeKind;

/// The volume of instance `instance_name` (from [`names::instance_name`]):
/// ReadWriteOnce, `spec.storage.size`, and `spec.storage.storageClassName` when
/// set (else the cluster's default class).
///
/// Only `resources.requests.storage` may change on an existing claim (growing, when
/// the class allows expansion); the rest of a PVC spec is immutable, and validation
/// refuses a class change for that reason.
pub fn pvc(db: &ValidatedDatabase, instance_name: &str) -> PersistentVolumeClaim {
    let db_name = db.name.clone();
    PersistentVolumeClaim {
        metadata: object_meta(
            db,
            names::pvc(instance_name),
            labels::instance(&db_name, instance_name),
        ),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(db.storage.size.clone()),
                )])),
                limits: None,
            }),
            storage_class_name: db.storage.storage_class_name.clone(),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// Instance `instance_name`'s claim for `volume`, as built at creation;
/// `None` when the Database has no such volume.
pub fn volume_claim(
    db: &ValidatedDatabase,
    instance_name: &str,
    volume: VolumeKind,
) -> Option<PersistentVolumeClaim> {
    match volume {
        VolumeKind::Data => Some(pvc(db, instance_name)),
        VolumeKind::Wal => None,
    }
}

/// The claim of [`volume_claim`] asking for `bytes` of storage: applied over
/// the existing PVC, it grows the volume. Only the request differs, so the
/// apply changes nothing immutable.
pub fn grown(
    db: &ValidatedDatabase,
    instance_name: &str,
    volume: VolumeKind,
    bytes: u64,
) -> Option<PersistentVolumeClaim> {
    let mut claim = volume_claim(db, instance_name, volume)?;
    let requests = claim
        .spec
        .as_mut()?
        .resources
        .as_mut()?
        .requests
        .get_or_insert_with(BTreeMap::new);
    requests.insert("storage".to_owned(), Quantity(binary_quantity(bytes)));
    Some(claim)
}

/// `bytes` as a person would write it: the largest binary suffix that
/// divides it (`1536Mi`, `2Gi`), else plain bytes.
fn binary_quantity(bytes: u64) -> String {
    const SUFFIXES: [(&str, u32); 4] = [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];
    SUFFIXES
        .iter()
        .find(|(_, shift)| bytes != 0 && bytes.is_multiple_of(1u64 << shift))
        .map_or_else(
            || bytes.to_string(),
            |(suffix, shift)| format!("{}{suffix}", bytes >> shift),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::resources::tests::model;

    #[test]
    fn size_modes_and_labels() {
        let db = sample_database();
        let claim = pvc(&model(&db), "orders-2");
        assert_eq!(claim.metadata.name.as_deref(), Some("orders-2"));
        assert_eq!(claim.metadata.namespace.as_deref(), Some("shop"));
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels[labels::TUSK_INSTANCE], "orders-2");
        assert_eq!(labels[labels::DATABASE], "orders");
        assert!(!labels.contains_key(labels::ROLE));
        assert_eq!(
            claim.metadata.owner_references,
            super::super::owner_reference(&db).map(|o| vec![o])
        );
        let spec = claim.spec.unwrap_or_default();
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
        assert_eq!(
            spec.resources.and_then(|r| r.requests).unwrap_or_default()["storage"],
            Quantity("1Gi".into())
        );
        assert_eq!(spec.storage_class_name, None);
    }

    #[test]
    fn storage_class_when_set() {
        let mut db = sample_database();
        db.spec.storage.storage_class_name = Some("fast".into());
        db.spec.storage.size = "20Gi".into();
        let spec = pvc(&model(&db), "orders-1").spec.unwrap_or_default();
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            spec.resources.and_then(|r| r.requests).unwrap_or_default()["storage"],
            Quantity("20Gi".into())
        );
    }

    #[test]
    fn grown_sizes_read_as_quantities() {
        assert_eq!(binary_quantity(2 << 30), "2Gi");
        assert_eq!(binary_quantity(1536 << 20), "1536Mi");
        assert_eq!(binary_quantity(1000), "1000");
        assert_eq!(binary_quantity(0), "0");
    }

    #[test]
    fn a_grown_claim_differs_only_in_its_request() {
        let db = model(&sample_database());
        let built = pvc(&db, "orders-1");
        let grown = grown(&db, "orders-1", VolumeKind::Data, 1_610_612_736).unwrap();
        assert_eq!(
            grown
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .map(|r| r["storage"].clone()),
            Some(Quantity("1536Mi".into()))
        );
        let mut same = grown.clone();
        same.spec.as_mut().unwrap().resources = built.spec.as_ref().unwrap().resources.clone();
        assert_eq!(same, built);
        assert!(
            volume_claim(&db, "orders-1", VolumeKind::Wal).is_none(),
            "no WAL volume in this spec"
        );
    }
}
