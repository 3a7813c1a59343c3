//! The restore source on the first instance's pod: the `TUSK_RESTORE_*`
//! variables of a Database restored from a backup.
//!
//! They go only on the pod created with the `restore` bootstrap, after its
//! spec hash is taken: they describe where its data came from, not what the
//! pods must run, so the source going away later (a deleted Backup) never
//! makes the pods outdated.

use k8s_openapi::api::core::v1::{EnvVar, Pod};

use super::container::{POSTGRES_CONTAINER, objectstore_env};
use crate::api::v1::ObjectStore;
use crate::contract::env;

/// Where a restore reads: a store, the source's name in it and, when known,
/// its system and the backup to start from; and where recovery stops.
#[derive(Clone, Debug, PartialEq)]
pub struct RestoreSource {
    pub store: ObjectStore,
    /// The source's name in the store's key layout.
    pub database: String,
    pub system: Option<String>,
    pub backup: Option<String>,
    pub target_time: Option<String>,
    pub target_lsn: Option<String>,
}

/// `pod` with the variables of `source` on its PostgreSQL container.
pub fn with_restore(mut pod: Pod, source: &RestoreSource) -> Pod {
    let mut vars: Vec<EnvVar> = objectstore_env(&source.store)
        .into_iter()
        .map(|var| EnvVar {
            name: env::restore(&var.name),
            ..var
        })
        .collect();
    let optional = [
        (env::RESTORE_SOURCE, Some(&source.database)),
        (env::RESTORE_SYSTEM, source.system.as_ref()),
        (env::RESTORE_BACKUP, source.backup.as_ref()),
        (env::RESTORE_TARGET_TIME, source.target_time.as_ref()),
        (env::RESTORE_TARGET_LSN, source.target_lsn.as_ref()),
    ];
    vars.extend(optional.into_iter().filter_map(|(name, value)| {
        Some(EnvVar {
            name: name.to_owned(),
            value: Some(value?.clone()),
            value_from: None,
        })
    }));
    let containers = pod.spec.iter_mut().flat_map(|s| s.containers.iter_mut());
    for container in containers.filter(|c| c.name == POSTGRES_CONTAINER) {
        container
            .env
            .get_or_insert_with(Vec::new)
            .extend(vars.clone());
    }
    pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::status::InstanceRole;
    use crate::contract::Bootstrap;
    use crate::resources::tests::model_of;
    use crate::resources::{BuildConfig, PlannedInstance, instance_pod, spec_hash};

    #[test]
    fn the_restore_variables_go_on_postgres_and_not_into_the_hash() {
        let db = sample_database();
        let config = BuildConfig {
            postgres_repository: "postgres".into(),
            tusk_image: "localhost/tusk:dev".into(),
            image_pull_policy: None,
            instance_env: Vec::new(),
            default_store: None,
            node_ports: Default::default(),
            instance_self_label: false,
        };
        let model = model_of(&db, &config);
        let planned = PlannedInstance {
            serial: 1,
            role: InstanceRole::Primary,
            bootstrap: Bootstrap::Restore,
            image: &model.image,
        };
        let plain = instance_pod(&model, &planned, &config);
        let source = RestoreSource {
            store: ObjectStore {
                bucket: "b".into(),
                path: Some("team".into()),
                credentials_secret: Some("s3".into()),
                ..Default::default()
            },
            database: "orders".into(),
            system: Some("7441".into()),
            backup: None,
            target_time: Some("2026-11-24T10:01:00Z".into()),
            target_lsn: None,
        };
        let pod = with_restore(plain.clone(), &source);
        let vars = pod.spec.as_ref().expect("spec").containers[0]
            .env
            .clone()
            .unwrap_or_default();
        let value = |name: &str| {
            vars.iter()
                .find(|v| v.name == name)
                .and_then(|v| v.value.clone())
        };
        assert_eq!(
            value("TUSK_RESTORE_OBJECTSTORE_BUCKET").as_deref(),
            Some("b")
        );
        assert_eq!(
            value("TUSK_RESTORE_OBJECTSTORE_PATH").as_deref(),
            Some("team")
        );
        assert_eq!(value("TUSK_RESTORE_SOURCE").as_deref(), Some("orders"));
        assert_eq!(value("TUSK_RESTORE_SYSTEM").as_deref(), Some("7441"));
        assert_eq!(
            value("TUSK_RESTORE_TARGET_TIME").as_deref(),
            Some("2026-11-24T10:01:00Z")
        );
        assert_eq!(value("TUSK_RESTORE_BACKUP"), None);
        let secret = vars
            .iter()
            .find(|v| v.name == "TUSK_RESTORE_AWS_SECRET_ACCESS_KEY")
            .and_then(|v| v.value_from.as_ref()?.secret_key_ref.clone())
            .expect("from the Secret");
        assert_eq!(
            (secret.name.as_str(), secret.key.as_str()),
            ("s3", "AWS_SECRET_ACCESS_KEY")
        );
        // The annotation's hash is the plain pod's: the source never outdates it.
        let annotation = |p: &Pod| {
            p.metadata.annotations.clone().unwrap_or_default()
                [crate::resources::SPEC_HASH_ANNOTATION]
                .clone()
        };
        assert_eq!(annotation(&pod), annotation(&plain));
        assert_eq!(
            annotation(&plain),
            spec_hash(plain.spec.as_ref().expect("spec"))
        );
    }
}
