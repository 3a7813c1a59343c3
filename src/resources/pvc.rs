//! The PersistentVolumeClaim of one instance.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{labels, names, object_meta};
use crate::api::model::ValidatedDatabase;

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
}
