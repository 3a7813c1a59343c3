//! The PersistentVolumeClaims of one instance: its data volume and, with
//! `spec.walStorage`, its WAL volume; and the same claims at a larger size
//! when a volume grows.

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
    claim(
        db,
        instance_name,
        names::pvc(instance_name),
        &db.storage.size,
        db.storage.storage_class_name.as_deref(),
    )
}

/// The WAL volume of instance `instance_name` (`spec.walStorage`), built
/// like its data volume (same labels and owner, so it is listed, kept and
/// deleted with it), named [`names::wal_pvc`]; `None` without a WAL volume.
pub fn wal_pvc(db: &ValidatedDatabase, instance_name: &str) -> Option<PersistentVolumeClaim> {
    let wal = db.wal_storage.as_ref()?;
    Some(claim(
        db,
        instance_name,
        names::wal_pvc(instance_name),
        &wal.size,
        wal.storage_class_name.as_deref(),
    ))
}

/// Every PVC of instance `instance_name`, in the order of
/// [`names::instance_pvcs`]: created together when the instance is added,
/// grown together, deleted together when it is removed.
pub fn instance_pvcs(db: &ValidatedDatabase, instance_name: &str) -> Vec<PersistentVolumeClaim> {
    std::iter::once(pvc(db, instance_name))
        .chain(wal_pvc(db, instance_name))
        .collect()
}

fn claim(
    db: &ValidatedDatabase,
    instance_name: &str,
    name: String,
    size: &str,
    class: Option<&str>,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: object_meta(db, name, labels::instance(&db.name, instance_name)),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(size.to_owned()),
                )])),
                limits: None,
            }),
            storage_class_name: class.map(str::to_owned),
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
        VolumeKind::Wal => wal_pvc(db, instance_name),
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

    fn with_wal(class: Option<&str>) -> crate::api::v1::Database {
        let mut db = sample_database();
        db.spec.wal_storage = Some(crate::api::v1::WalStorageSpec {
            size: "2Gi".into(),
            storage_class_name: class.map(str::to_owned),
        });
        db
    }

    #[test]
    fn no_wal_volume_without_wal_storage() {
        let db = model(&sample_database());
        assert_eq!(wal_pvc(&db, "orders-1"), None);
        let names: Vec<_> = instance_pvcs(&db, "orders-1")
            .into_iter()
            .map(|c| c.metadata.name.unwrap_or_default())
            .collect();
        assert_eq!(names, ["orders-1"]);
    }

    #[test]
    fn the_wal_volume_is_built_like_the_data_volume_with_its_own_size_and_class() {
        let db = with_wal(Some("wal-class"));
        let data = pvc(&model(&db), "orders-2");
        let Some(wal) = wal_pvc(&model(&db), "orders-2") else {
            panic!("a WAL PVC with spec.walStorage");
        };
        assert_eq!(wal.metadata.name.as_deref(), Some("orders-2-wal"));
        assert_eq!(wal.metadata.namespace, data.metadata.namespace);
        assert_eq!(wal.metadata.labels, data.metadata.labels);
        assert_eq!(
            wal.metadata.owner_references,
            data.metadata.owner_references
        );
        assert!(wal.metadata.owner_references.is_some());
        let spec = wal.spec.unwrap_or_default();
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
        assert_eq!(
            spec.resources.and_then(|r| r.requests).unwrap_or_default()["storage"],
            Quantity("2Gi".into())
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some("wal-class"));
        // The data volume keeps spec.storage's size and class.
        let data_spec = data.spec.unwrap_or_default();
        assert_eq!(data_spec.storage_class_name, None);
        let names: Vec<_> = instance_pvcs(&model(&db), "orders-2")
            .into_iter()
            .map(|c| c.metadata.name.unwrap_or_default())
            .collect();
        assert_eq!(names, names::instance_pvcs("orders-2", true));
    }

    #[test]
    fn the_wal_volume_uses_the_default_class_when_unset() {
        let db = with_wal(None);
        let spec = wal_pvc(&model(&db), "orders-1")
            .and_then(|c| c.spec)
            .unwrap_or_default();
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
