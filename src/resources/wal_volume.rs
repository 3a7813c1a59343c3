//! The WAL volume (`spec.walStorage`) in the pods Tusk builds: the instance
//! pod mounts the instance's WAL PVC at [`WAL_MOUNT`] and tells the manager
//! [`WALDIR`] (`TUSK_WALDIR`), where a new cluster's WAL goes; the upgrade
//! Jobs mount it beside the data volume (PGDATA's `pg_wal` is a symlink into
//! it); the verification Job keeps its WAL inside its own emptyDir
//! ([`remove_from`]). Without `spec.walStorage` every function here adds
//! nothing, so such pods (and their spec hashes) are unchanged.

use k8s_openapi::api::core::v1::{
    EnvVar, PersistentVolumeClaimVolumeSource, PodSpec, Volume, VolumeMount,
};

use super::container::{WAL_MOUNT, WAL_VOLUME, WALDIR, value_env};
use super::names;
use crate::api::model::ValidatedDatabase;
use crate::contract::env;

/// The pod volume of instance `instance`'s WAL PVC.
pub(super) fn volume(db: &ValidatedDatabase, instance: &str) -> Option<Volume> {
    db.wal_storage
        .as_ref()
        .map(|_| claim_volume(instance, false))
}

/// The WAL PVC of `instance` as a pod volume, read-only when asked.
pub(super) fn claim_volume(instance: &str, read_only: bool) -> Volume {
    Volume {
        name: WAL_VOLUME.to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: names::wal_pvc(instance),
            read_only: read_only.then_some(true),
        }),
        ..Volume::default()
    }
}

/// The instance container's mount of the WAL volume.
pub(super) fn mount(db: &ValidatedDatabase) -> Option<VolumeMount> {
    db.wal_storage
        .as_ref()
        .map(|_| super::container::mount(WAL_VOLUME, WAL_MOUNT, false))
}

/// `TUSK_WALDIR` for the instance manager (and `tusk upgrade`).
pub(super) fn env(db: &ValidatedDatabase) -> Option<EnvVar> {
    db.wal_storage
        .as_ref()
        .map(|_| value_env(env::WALDIR, WALDIR))
}

/// Takes the WAL volume, its mounts and `TUSK_WALDIR` out of a pod built
/// as an instance's: the verification Job restores into an emptyDir and
/// keeps its WAL there (a throwaway, with no PVC of the instance's).
pub(super) fn remove_from(spec: &mut PodSpec) {
    if let Some(volumes) = &mut spec.volumes {
        volumes.retain(|v| v.name != WAL_VOLUME);
    }
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if let Some(mounts) = &mut container.volume_mounts {
            mounts.retain(|m| m.name != WAL_VOLUME);
        }
        if let Some(vars) = &mut container.env {
            vars.retain(|v| v.name != env::WALDIR);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::status::InstanceRole;
    use crate::api::v1::{Database, WalStorageSpec};
    use crate::resources::tests::{config, pod_of};
    use crate::resources::{PGDATA, POSTGRES_CONTAINER};

    fn with_wal() -> Database {
        let mut db = sample_database();
        db.spec.wal_storage = Some(WalStorageSpec {
            size: "2Gi".into(),
            storage_class_name: None,
        });
        db
    }

    fn postgres_of(spec: &PodSpec) -> k8s_openapi::api::core::v1::Container {
        spec.containers
            .iter()
            .find(|c| c.name == POSTGRES_CONTAINER)
            .cloned()
            .unwrap_or_default()
    }

    fn waldir_env(spec: &PodSpec) -> Option<String> {
        postgres_of(spec)
            .env
            .unwrap_or_default()
            .into_iter()
            .find(|v| v.name == env::WALDIR)
            .and_then(|v| v.value)
    }

    #[test]
    fn an_instance_mounts_its_own_wal_claim_and_tells_the_manager_where_wal_goes() {
        for (serial, role) in [(1, InstanceRole::Primary), (2, InstanceRole::Replica)] {
            let pod = pod_of(&with_wal(), serial, role, &config());
            let spec = pod.spec.unwrap_or_default();
            let wal: Vec<_> = spec
                .volumes
                .iter()
                .flatten()
                .filter(|v| v.name == "wal")
                .collect();
            assert_eq!(wal.len(), 1);
            assert_eq!(
                wal[0]
                    .persistent_volume_claim
                    .as_ref()
                    .map(|c| c.claim_name.clone()),
                Some(format!("orders-{serial}-wal"))
            );
            let mount = postgres_of(&spec)
                .volume_mounts
                .unwrap_or_default()
                .into_iter()
                .find(|m| m.name == "wal");
            assert_eq!(
                mount.map(|m| (m.mount_path, m.read_only)),
                Some(("/var/lib/postgresql/wal".to_owned(), None))
            );
            assert_eq!(
                waldir_env(&spec).as_deref(),
                Some("/var/lib/postgresql/wal/pg_wal")
            );
            // The WAL directory is on its own mount, outside PGDATA's volume.
            assert!(!WALDIR.starts_with(&format!("{}/", crate::resources::DATA_MOUNT)));
            assert!(!WALDIR.starts_with(PGDATA));
        }
    }

    #[test]
    fn without_wal_storage_the_pod_is_unchanged() {
        let pod = pod_of(&sample_database(), 1, InstanceRole::Primary, &config());
        let spec = pod.spec.unwrap_or_default();
        assert!(spec.volumes.iter().flatten().all(|v| v.name != "wal"));
        assert!(
            postgres_of(&spec)
                .volume_mounts
                .iter()
                .flatten()
                .all(|m| m.name != "wal")
        );
        assert_eq!(waldir_env(&spec), None);
    }

    #[test]
    fn the_wal_volume_is_part_of_the_spec_hash() {
        let plain = pod_of(&sample_database(), 1, InstanceRole::Primary, &config());
        let wal = pod_of(&with_wal(), 1, InstanceRole::Primary, &config());
        let hash = |pod: &k8s_openapi::api::core::v1::Pod| {
            crate::resources::spec_hash(&pod.spec.clone().unwrap_or_default())
        };
        assert_ne!(hash(&plain), hash(&wal));
    }

    #[test]
    fn removing_it_leaves_an_instance_pod_without_wal_volume() {
        let with = pod_of(&with_wal(), 1, InstanceRole::Primary, &config());
        let without = pod_of(&sample_database(), 1, InstanceRole::Primary, &config());
        let mut spec = with.spec.unwrap_or_default();
        remove_from(&mut spec);
        let expected = without.spec.unwrap_or_default();
        assert_eq!(spec, expected);
        assert_eq!(waldir_env(&spec), None);
    }
}
