//! What every pod Tusk builds shares: the layout of an instance's volumes
//! and binaries, the `tusk` init container, the restricted security
//! contexts and the environment helpers. Used by the instance pod and by the
//! Jobs that run on an instance's data or image (upgrade, verification,
//! restore).

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, KeyToPath, ObjectFieldSelector,
    PodSecurityContext, SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};

use super::BuildConfig;
use crate::api::v1::ObjectStore;
use crate::contract::env;

/// The instance manager's bearer token for mutating requests.
pub use crate::contract::env::INSTANCE_TOKEN as INSTANCE_TOKEN_ENV;
/// Where the instance's PVC is mounted.
pub const DATA_MOUNT: &str = "/var/lib/postgresql/data";
/// The data directory: a subdirectory of the mount, because the root of many
/// volumes holds `lost+found` and initdb refuses a non-empty directory.
pub const PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// Where an instance's WAL PVC (`spec.walStorage`) is mounted.
pub const WAL_MOUNT: &str = "/var/lib/postgresql/wal";
/// The WAL directory on the WAL volume: a subdirectory of the mount for the
/// same reason as [`PGDATA`]; PGDATA's `pg_wal` is a symlink to it.
pub const WALDIR: &str = "/var/lib/postgresql/wal/pg_wal";
/// The emptyDir the init container copies `tusk` into.
pub const TUSK_BIN: &str = "/tusk/bin";
/// PostgreSQL's port (container port `postgresql`).
pub const POSTGRES_PORT: i32 = 5432;
/// The container that runs the instance manager and PostgreSQL.
pub const POSTGRES_CONTAINER: &str = "postgres";

/// The instance manager's HTTP port (container port `tusk`): probes, API, metrics.
pub const HEALTH_PORT: i32 = crate::contract::PORT as i32;
pub use crate::contract::env::{
    APP_PASSWORD as APP_PASSWORD_ENV, REPLICATION_PASSWORD as REPLICATION_PASSWORD_ENV,
    SUPERUSER_PASSWORD as SUPERUSER_PASSWORD_ENV,
};

/// The uid and gid of `postgres` in the official images; the data directory must
/// belong to it.
pub(super) const POSTGRES_UID: i64 = 999;
pub(super) const DATA_VOLUME: &str = "data";
pub(super) const WAL_VOLUME: &str = "wal";
pub(super) const TUSK_BIN_VOLUME: &str = "tusk-bin";
pub(super) const RUN_VOLUME: &str = "run";
pub(super) const TMP_VOLUME: &str = "tmp";

pub(super) fn bootstrap_container(config: &BuildConfig) -> Container {
    Container {
        name: "bootstrap-tusk".to_owned(),
        image: Some(config.tusk_image.clone()),
        image_pull_policy: config.image_pull_policy.clone(),
        // The operator image has no shell: `tusk` copies its own executable.
        args: Some(vec!["copy-binary".to_owned(), format!("{TUSK_BIN}/tusk")]),
        volume_mounts: Some(vec![mount(TUSK_BIN_VOLUME, TUSK_BIN, false)]),
        // An instance pod gives it the instance's own (see `super::compute`).
        resources: Some(super::compute::job(super::compute::JobKind::CopyBinary, 0)),
        security_context: Some(container_security_context()),
        ..Container::default()
    }
}

/// The volume of an instance's store credentials, and where it is mounted.
pub(super) const STORE_CREDENTIALS_VOLUME: &str = "store-credentials";
pub(super) const STORE_CREDENTIALS_MOUNT: &str = "/var/run/tusk/store-credentials";

/// A Job's or a restore source's store, `spec.backup.objectStore` as
/// variables: the credentials stay in their Secret and the kubelet resolves
/// them, so the container waits for the Secret (it cannot work without it).
pub(super) fn objectstore_env(store: &ObjectStore) -> Vec<EnvVar> {
    let mut vars = objectstore_settings_env(store);
    if let Some(secret) = &store.credentials_secret {
        for key in [env::ACCESS_KEY_ID, env::SECRET_ACCESS_KEY] {
            vars.push(EnvVar {
                name: key.to_owned(),
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.clone(),
                        key: key.to_owned(),
                        optional: None,
                    }),
                    ..EnvVarSource::default()
                }),
            });
        }
    }
    vars
}

/// An instance's store, for `tusk wal-archive`, `wal-restore` and base
/// backups; its presence turns WAL archiving on. The credentials are files
/// of an optional Secret volume ([`store_credentials_volume`]), read at each
/// use: an instance serves without them (PostgreSQL keeps the WAL it cannot
/// archive) and archives once the Secret is there, without a restart.
pub(super) fn instance_objectstore_env(store: &ObjectStore) -> Vec<EnvVar> {
    let mut vars = objectstore_settings_env(store);
    if let Some(secret) = &store.credentials_secret {
        vars.push(value_env(
            env::OBJECTSTORE_CREDENTIALS_DIR,
            STORE_CREDENTIALS_MOUNT,
        ));
        vars.push(value_env(env::OBJECTSTORE_CREDENTIALS_SECRET, secret));
    }
    vars
}

/// The optional Secret volume of [`instance_objectstore_env`], when the store
/// names a credentials Secret.
pub(super) fn store_credentials_volume(store: &ObjectStore) -> Option<Volume> {
    let secret = store.credentials_secret.as_ref()?;
    Some(Volume {
        name: STORE_CREDENTIALS_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.clone()),
            // Only the two keys the store needs, readable by the pod's group
            // (fsGroup) alone.
            items: Some(
                [env::ACCESS_KEY_ID, env::SECRET_ACCESS_KEY]
                    .into_iter()
                    .map(|key| KeyToPath {
                        key: key.to_owned(),
                        path: key.to_owned(),
                        mode: None,
                    })
                    .collect(),
            ),
            default_mode: Some(0o440),
            optional: Some(true),
        }),
        ..Volume::default()
    })
}

/// The store's bucket, path, endpoint and region.
fn objectstore_settings_env(store: &ObjectStore) -> Vec<EnvVar> {
    let mut vars = vec![value_env(env::OBJECTSTORE_BUCKET, &store.bucket)];
    let optional = [
        (env::OBJECTSTORE_PATH, &store.path),
        (env::OBJECTSTORE_ENDPOINT, &store.endpoint),
        (env::OBJECTSTORE_REGION, &store.region),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            vars.push(value_env(name, value));
        }
    }
    vars
}

pub(super) fn value_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

pub(super) fn field_env(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: field_path.to_owned(),
            }),
            ..EnvVarSource::default()
        }),
    }
}

pub(super) fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// Pod Security "restricted" at the pod level, as the official image's `postgres`
/// user so the data directory has the owner PostgreSQL insists on.
pub(super) fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(POSTGRES_UID),
        run_as_group: Some(POSTGRES_UID),
        fs_group: Some(POSTGRES_UID),
        // A large data volume would otherwise be chowned file by file on every
        // mount, delaying each restart by minutes.
        fs_group_change_policy: Some("OnRootMismatch".to_owned()),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}

/// Pod Security "restricted" for each container. The root file system is
/// read-only: PostgreSQL writes only to its data volume, its socket directory and
/// /tmp, each an explicit volume.
pub(super) fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..SecurityContext::default()
    }
}
