//! The Job that verifies a backup: `tusk verify-backup` in a throwaway pod
//! built like an instance (same image, the `tusk` binary copied in, the same
//! restricted security context) but with an emptyDir for data, bounded
//! resources, no probes, no ports, no store of its own (nothing is archived)
//! and the restore variables of the backup, replayed to its end LSN. With
//! `spec.walStorage` it still keeps its WAL inside the emptyDir. It mounts no
//! instance's TLS Secret and serves no TLS: only the Job itself connects to
//! the restored server, through its local socket.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PodTemplateSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::compute::{self, JobKind};
use super::container::{DATA_VOLUME, POSTGRES_CONTAINER, TUSK_BIN};
use super::{
    BuildConfig, PlannedInstance, RestoreSource, inherited, instance_pod, template_meta,
    with_restore,
};
use crate::api::model::ValidatedDatabase;
use crate::api::status::InstanceRole;
use crate::api::v1::Backup;
use crate::contract::{Bootstrap, env};

/// Label on the verification Job and its pod: the Backup it proves.
pub const BACKUP_LABEL: &str = "tusk.dev/backup";
/// A verification that takes longer than this fails.
const DEADLINE_SECONDS: i64 = 3600;

/// The verification Job's name for Backup `backup`.
pub fn verify_job_name(backup: &str) -> String {
    let name = format!("{backup}-verify");
    if name.len() <= 63 {
        return name;
    }
    // Job names become a label value (`job-name`): 63 at most.
    format!("{}-verify", &backup[..56].trim_end_matches('-'))
}

/// The Job verifying `backup` of `db` from `source` (its store, system, id
/// and end LSN as the target). Owned by the Backup.
pub fn verify_job(
    db: &ValidatedDatabase,
    backup: &Backup,
    source: &RestoreSource,
    config: &BuildConfig,
) -> Job {
    let name = verify_job_name(&backup.name_any());
    let pod = with_restore(
        instance_pod(
            db,
            &PlannedInstance {
                serial: 1,
                role: InstanceRole::Primary,
                bootstrap: Bootstrap::Restore,
                image: &db.image,
            },
            config,
        ),
        source,
    );
    let mut spec = pod.spec.unwrap_or_default();
    spec.hostname = None;
    // Not an instance: it neither keeps apart from them nor counts in
    // their spread; node selection, tolerations and priority stay.
    spec.affinity = None;
    spec.topology_spread_constraints = None;
    spec.restart_policy = Some("Never".to_owned());
    // The WAL stays inside the emptyDir: a throwaway restore needs no
    // volume of the instance's.
    super::wal_volume::remove_from(&mut spec);
    // Nor TLS: nobody but the Job itself connects to the restored server.
    super::tls::remove_from(&mut spec);
    for volume in spec.volumes.iter_mut().flatten() {
        if volume.name == DATA_VOLUME {
            volume.persistent_volume_claim = None;
            volume.empty_dir = Some(EmptyDirVolumeSource::default());
        }
    }
    for container in spec
        .containers
        .iter_mut()
        .filter(|c| c.name == POSTGRES_CONTAINER)
    {
        verify_in(
            container,
            backup,
            &name,
            compute::job(JobKind::Verification, db.resources.memory_bytes()),
        );
    }
    for container in spec.init_containers.iter_mut().flatten() {
        container.resources = Some(compute::job(JobKind::CopyBinary, 0));
    }
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "tusk-verify".to_owned(),
        ),
        ("app.kubernetes.io/managed-by".to_owned(), "tusk".to_owned()),
        (BACKUP_LABEL.to_owned(), backup.name_any()),
    ]);
    Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: backup.namespace(),
            labels: Some(inherited::merged(&db.inherited.labels, labels.clone())),
            annotations: inherited::annotations(&db.inherited),
            owner_references: backup.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(template_meta(db, labels)),
                spec: Some(spec),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// Turns the instance's PostgreSQL `container` into the one that verifies
/// `backup` in Job `name`: `tusk verify-backup`, bounded, without probes or ports.
fn verify_in(
    container: &mut Container,
    backup: &Backup,
    name: &str,
    resources: ResourceRequirements,
) {
    // A backup taken before a major upgrade is restored by its own major.
    if let Some(image) = backup.status.as_ref().and_then(|s| s.image.clone()) {
        container.image = Some(image);
    }
    container.command = Some(vec![format!("{TUSK_BIN}/tusk"), "verify-backup".to_owned()]);
    container.ports = None;
    container.readiness_probe = None;
    container.liveness_probe = None;
    container.startup_probe = None;
    container.resources = Some(resources);
    let vars = container.env.take().unwrap_or_default();
    container.env = Some(verification_env(vars, name));
}

/// The instance's environment for a verification: without this Database's
/// own store (a verification archives nothing), the bootstrap fixed to
/// `restore`, its own instance name.
fn verification_env(vars: Vec<EnvVar>, name: &str) -> Vec<EnvVar> {
    let own_store = |n: &str| {
        (n.starts_with("TUSK_OBJECTSTORE_") || n.starts_with("AWS_"))
            && !n.starts_with(env::RESTORE_PREFIX)
    };
    let value = |n: &str, v: &str| EnvVar {
        name: n.to_owned(),
        value: Some(v.to_owned()),
        value_from: None,
    };
    // No password of the Database's: nothing connects over TCP (the restore
    // postmaster listens on its socket only), and a final backup's Job must
    // start after the Database and its Secrets went.
    let unused = [env::APP_PASSWORD, env::INSTANCE_TOKEN];
    vars.into_iter()
        .filter(|v| !own_store(&v.name) && !unused.contains(&v.name.as_str()))
        .map(|v| match v.name.as_str() {
            env::BOOTSTRAP => value(env::BOOTSTRAP, Bootstrap::Restore.as_str()),
            env::INSTANCE => value(env::INSTANCE, name),
            env::SUPERUSER_PASSWORD | env::REPLICATION_PASSWORD => value(&v.name, "unused"),
            _ => v,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::{BackupConfig, BackupSpec, ObjectStore};
    use crate::resources::tests::model_of;

    #[test]
    fn the_job_restores_into_its_own_volume_and_archives_nothing() {
        let mut db = sample_database();
        let store = ObjectStore {
            bucket: "b".into(),
            credentials_secret: Some("s3".into()),
            ..Default::default()
        };
        db.spec.backup = Some(BackupConfig {
            object_store: Some(store.clone()),
            ..Default::default()
        });
        let mut backup = Backup::new(
            "orders-20261124020000",
            BackupSpec {
                database: "orders".into(),
                target: Default::default(),
            },
        );
        backup.metadata.namespace = Some("shop".into());
        backup.metadata.uid = Some("b-uid".into());
        let source = RestoreSource {
            store,
            database: "orders".into(),
            system: Some("7441".into()),
            backup: Some("20261124T020000Z".into()),
            target_time: None,
            target_lsn: Some("0/3000120".into()),
        };
        let config = BuildConfig {
            postgres_repository: "postgres".into(),
            tusk_image: "localhost/tusk:dev".into(),
            image_pull_policy: None,
            instance_env: Vec::new(),
            default_store: None,
            node_ports: Default::default(),
            instance_self_label: false,
        };
        let job = verify_job(&model_of(&db, &config), &backup, &source, &config);
        assert_eq!(job.name_any(), "orders-20261124020000-verify");
        let owner = &job.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Backup", "b-uid")
        );
        let spec = job.spec.expect("spec");
        assert_eq!(spec.backoff_limit, Some(0));
        let pod = spec.template.spec.expect("pod spec");
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let data = pod
            .volumes
            .clone()
            .unwrap_or_default()
            .into_iter()
            .find(|v| v.name == DATA_VOLUME)
            .expect("data volume");
        assert!(data.empty_dir.is_some() && data.persistent_volume_claim.is_none());
        // No instance's TLS Secret: nobody but the Job connects to its server.
        assert!(
            pod.volumes.iter().flatten().all(|v| v.name != "tls"),
            "{:?}",
            pod.volumes
        );
        assert!(
            pod.containers[0]
                .env
                .iter()
                .flatten()
                .all(|v| !v.name.starts_with("TUSK_TLS_")),
            "{:?}",
            pod.containers[0].env
        );
        let postgres = &pod.containers[0];
        assert_eq!(
            postgres.command.clone().unwrap_or_default()[1],
            "verify-backup"
        );
        assert!(
            postgres
                .resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_some()
        );
        assert!(postgres.readiness_probe.is_none());
        let vars = postgres.env.clone().unwrap_or_default();
        let value = |n: &str| {
            vars.iter()
                .find(|v| v.name == n)
                .and_then(|v| v.value.clone())
        };
        assert_eq!(value("TUSK_BOOTSTRAP").as_deref(), Some("restore"));
        assert_eq!(
            value("TUSK_RESTORE_TARGET_LSN").as_deref(),
            Some("0/3000120")
        );
        assert_eq!(
            value("TUSK_RESTORE_OBJECTSTORE_BUCKET").as_deref(),
            Some("b")
        );
        // Nothing of its own to archive to.
        assert!(
            !vars
                .iter()
                .any(|v| v.name == "TUSK_OBJECTSTORE_BUCKET" || v.name == "AWS_ACCESS_KEY_ID")
        );
        assert!(
            vars.iter()
                .any(|v| v.name == "TUSK_RESTORE_AWS_ACCESS_KEY_ID")
        );
        assert_eq!(verify_job_name(&"x".repeat(80)).len(), 63);
        assert_eq!(
            postgres.image,
            Some(model_of(&db, &config).image),
            "no image recorded: the Database's"
        );

        // Taken on 15, verified after the Database moved to 17: 15 restores it.
        backup.status = Some(crate::api::status::BackupStatus {
            image: Some("localhost/postgres:15".into()),
            ..Default::default()
        });
        let job = verify_job(&model_of(&db, &config), &backup, &source, &config);
        let pod = job.spec.and_then(|s| s.template.spec).expect("pod spec");
        let postgres = pod
            .containers
            .iter()
            .find(|c| c.name == POSTGRES_CONTAINER)
            .expect("postgres");
        assert_eq!(postgres.image.as_deref(), Some("localhost/postgres:15"));
    }
}
