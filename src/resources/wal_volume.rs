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
    use crate::api::v1::{Backup, BackupConfig, BackupSpec, ObjectStore};
    use crate::api::v1::{Database, WalStorageSpec};
    use crate::contract::UpgradeJob;
    use crate::resources::tests::{config, model_of, pod_of};
    use crate::resources::upgrade::{self, UpgradeJobInput};
    use crate::resources::verify::verify_job;
    use crate::resources::{PGDATA, POSTGRES_CONTAINER, RestoreSource};

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

    fn upgrade_job(db: &Database, step: UpgradeJob) -> PodSpec {
        let config = config();
        let model = model_of(db, &config);
        let input = UpgradeJobInput {
            db: &model,
            config: &config,
            old_image: "postgres:15".into(),
            new_image: "postgres:17".into(),
            old_major: 15,
            new_major: 17,
            claim: "orders-1".into(),
            node: None,
            primary_host: None,
            primary_tls: false,
        };
        upgrade::job(&input, step)
            .spec
            .and_then(|s| s.template.spec)
            .unwrap_or_default()
    }

    /// (the pod's WAL claim, the main container's WAL mount, its TUSK_WALDIR)
    fn wal_parts(spec: &PodSpec) -> (Option<String>, Option<String>, Option<String>) {
        let claim = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == WAL_VOLUME)
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.clone());
        let main = &spec.containers[0];
        let mount = main
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == WAL_VOLUME)
            .filter(|m| m.read_only.is_none())
            .map(|m| m.mount_path.clone());
        let waldir = main
            .env
            .iter()
            .flatten()
            .find(|v| v.name == env::WALDIR)
            .and_then(|v| v.value.clone());
        (claim, mount, waldir)
    }

    #[test]
    fn upgrade_jobs_mount_the_wal_volume_where_they_open_the_cluster() {
        let claim = Some("orders-1-wal".to_owned());
        let mount = Some(WAL_MOUNT.to_owned());
        let waldir = Some(WALDIR.to_owned());
        // The check reads a shadow of the data directory: no WAL volume.
        assert_eq!(
            wal_parts(&upgrade_job(&with_wal(), UpgradeJob::Check)),
            (None, None, None)
        );
        // pg_upgrade opens the old cluster (its pg_wal links into the WAL
        // volume) and puts the new cluster's WAL beside it.
        assert_eq!(
            wal_parts(&upgrade_job(&with_wal(), UpgradeJob::Upgrade)),
            (claim.clone(), mount.clone(), waldir)
        );
        // A rollback removes the new cluster with its WAL.
        assert_eq!(
            wal_parts(&upgrade_job(&with_wal(), UpgradeJob::Rollback)),
            (claim, mount, None)
        );
        for step in [UpgradeJob::Check, UpgradeJob::Upgrade, UpgradeJob::Rollback] {
            assert_eq!(
                wal_parts(&upgrade_job(&sample_database(), step)),
                (None, None, None),
                "{step:?} without spec.walStorage"
            );
        }
    }

    #[test]
    fn the_verification_job_keeps_its_wal_in_its_own_empty_dir() {
        let mut db = with_wal();
        let store = ObjectStore {
            bucket: "b".into(),
            ..Default::default()
        };
        db.spec.backup = Some(BackupConfig {
            object_store: Some(store.clone()),
            ..Default::default()
        });
        let backup = Backup::new(
            "orders-1",
            BackupSpec {
                database: "orders".into(),
                target: Default::default(),
            },
        );
        let source = RestoreSource {
            store,
            database: "orders".into(),
            system: None,
            backup: None,
            target_time: None,
            target_lsn: None,
        };
        let config = config();
        let job = verify_job(&model_of(&db, &config), &backup, &source, &config);
        let spec = job.spec.and_then(|s| s.template.spec).unwrap_or_default();
        assert_eq!(wal_parts(&spec), (None, None, None));
        // Its data volume is an emptyDir, as without a WAL volume.
        assert!(
            spec.volumes
                .iter()
                .flatten()
                .all(|v| v.persistent_volume_claim.is_none())
        );
    }

    #[test]
    fn removing_it_leaves_an_instance_pod_without_wal_volume() {
        let with = pod_of(&with_wal(), 1, InstanceRole::Primary, &config());
        let without = pod_of(&sample_database(), 1, InstanceRole::Primary, &config());
        let mut spec = with.spec.unwrap_or_default();
        remove_from(&mut spec);
        let mut expected = without.spec.unwrap_or_default();
        // The derived max_wal_size follows the volume that holds pg_wal, so
        // the parameters differ; everything else must not.
        for s in [&mut spec, &mut expected] {
            for c in &mut s.containers {
                if let Some(env) = &mut c.env {
                    env.retain(|e| e.name != crate::contract::env::PARAMETERS);
                }
            }
        }
        assert_eq!(spec, expected);
        assert_eq!(waldir_env(&spec), None);
    }
}
