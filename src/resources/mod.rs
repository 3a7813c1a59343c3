//! Pure builders for every Kubernetes object Tusk creates for a Database.
//!
//! Each builder takes the Database (already validated by
//! [`crate::api::validate::database`]) plus explicit inputs and returns the object
//! to apply. Nothing here does I/O, talks to the API server, reads the clock or
//! draws random numbers: passwords and other generated values come in as
//! arguments, so every builder is a deterministic function that unit tests and
//! fixtures can pin down.
//!
//! Every object gets the Database's namespace, the [`labels::common`] labels and a
//! controller [`owner_reference`] to the Database, so garbage collection removes
//! them with it and orphans can be found by label.

mod access;
pub mod compare;
mod hash;
mod job;
pub mod labels;
mod migration;
pub mod names;
mod pdb;
mod pod;
mod pvc;
mod restore;
mod secret;
mod service;
pub mod upgrade;
mod verify;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::api::v1::Database;
use crate::api::validate::PgVersion;

pub use access::{instance_account, instance_role, instance_role_binding, primary_lease};
pub use job::terminated;
pub use migration::{
    MIGRATION_BACKOFF_LIMIT, MIGRATION_COMPONENT, MIGRATION_CONTAINER, MIGRATION_DEADLINE_SECONDS,
    MIGRATION_UID, MIGRATION_VERSION_ANNOTATION, migration_job, migration_job_name,
    migration_labels, migration_selector,
};
pub use pdb::pod_disruption_budgets;
pub use pod::{
    APP_PASSWORD_ENV, BOOTSTRAP_ANNOTATION, DATA_MOUNT, HEALTH_PORT, INSTANCE_TOKEN_ENV, PGDATA,
    POSTGRES_CONTAINER, POSTGRES_PORT, REPLICATION_PASSWORD_ENV, SPEC_HASH_ANNOTATION,
    SUPERUSER_PASSWORD_ENV, TUSK_BIN, instance_pod, instance_pod_with, postgres_image, spec_hash,
};
pub use pvc::pvc;
pub use restore::{RestoreSource, with_restore};
pub use secret::{
    APP_USERNAME_DEFAULT, INSTANCE_TOKEN_USERNAME, PASSWORD_KEY, REPLICATION_USERNAME,
    SUPERUSER_USERNAME, SecretKind, secret,
};
pub use service::services;
pub use upgrade::{
    UpgradeJobInput, UpgradeJobOutcome, check_job, outcome, rollback_job, upgrade_job,
    upgrade_job_name,
};
pub use verify::{BACKUP_LABEL, verify_job, verify_job_name};

/// Operator-wide settings the builders need besides the Database itself (from the
/// operator's command line or environment).
#[derive(Clone, Debug, PartialEq)]
pub struct BuildConfig {
    /// Repository of the PostgreSQL image when `spec.image` is unset, without a
    /// tag: `postgres`, `docker.io/library/postgres`, `localhost/postgres`. The
    /// tag is the major version.
    pub postgres_repository: String,
    /// Image holding the `tusk` binary (the operator image), copied into every
    /// PostgreSQL pod by its init container; for example `localhost/tusk:dev`.
    pub tusk_image: String,
    /// `imagePullPolicy` of every container Tusk builds; the cluster default
    /// (which depends on the tag) when `None`.
    pub image_pull_policy: Option<String>,
    /// Extra environment for every instance manager, in order: the operator's
    /// OpenTelemetry settings, so instance operations join the operator's traces.
    pub instance_env: Vec<(String, String)>,
    /// The operator's default object store (see [`crate::api::store`]).
    pub default_store: Option<crate::api::v1::ObjectStore>,
}

/// The controller owner reference every child of `db` carries. `blockOwnerDeletion`
/// makes foreground deletion of the Database wait for its children; it needs the
/// operator to have `update` on `databases/finalizers` where the
/// OwnerReferencesPermissionEnforcement admission plugin is on.
///
/// `None` when the Database has no name or uid yet (it was never stored): children
/// must not be created for it then.
pub fn owner_reference(db: &Database) -> Option<OwnerReference> {
    let mut owner = db.controller_owner_ref(&())?;
    owner.block_owner_deletion = Some(true);
    Some(owner)
}

/// The PostgreSQL image of `db`: `spec.image` when set, else
/// `<postgres_repository>:<version>`: `"17"` gives `postgres:17` (the official
/// images tag each major with its latest minor) and `"17.2"` gives
/// `postgres:17.2` (and each minor with itself), so naming a minor pins it and
/// changing it is a rolling update.
///
/// A version that does not parse never reaches a builder in practice (validation
/// runs first); rather than fail, the text before the first dot is used as the tag
/// so the resulting image at least names what the user wrote.
pub fn image(db: &Database, config: &BuildConfig) -> String {
    if let Some(image) = db.spec.image.as_deref().filter(|i| !i.is_empty()) {
        return image.to_owned();
    }
    let tag = match db.spec.version.parse::<PgVersion>() {
        Ok(PgVersion {
            major,
            minor: Some(minor),
        }) => format!("{major}.{minor}"),
        Ok(version) => version.major.to_string(),
        Err(_) => db
            .spec
            .version
            .split('.')
            .next()
            .unwrap_or_default()
            .to_owned(),
    };
    format!("{}:{tag}", config.postgres_repository)
}

/// Metadata shared by every child: `name`, the Database's namespace, `labels`,
/// and the owner reference.
fn object_meta(db: &Database, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: db.namespace(),
        labels: Some(labels),
        owner_references: owner_reference(db).map(|owner| vec![owner]),
        ..ObjectMeta::default()
    }
}
