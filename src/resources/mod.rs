//! Pure builders for every Kubernetes object Tusk creates for a Database.
//!
//! Each builder takes the validated model of the Database
//! ([`ValidatedDatabase`], from [`crate::api::validate::validated`]) plus what
//! the plan resolved (serial, role, bootstrap, image…) and returns the object
//! to apply; none reads a raw spec. Nothing here does I/O, talks to the API server, reads the clock or
//! draws random numbers: passwords and other generated values come in as
//! arguments, so every builder is a deterministic function that unit tests and
//! fixtures can pin down.
//!
//! Every object gets the Database's namespace, the [`labels::common`] labels and a
//! controller [`owner_reference`] to the Database, so garbage collection removes
//! them with it and orphans can be found by label; and the labels and
//! annotations of `spec.inheritedMetadata` under Tusk's own ([`inherited`]).

mod access;
mod backup;
pub mod cert_manager;
pub mod compare;
pub mod compute;
mod container;
mod drill_restore;
mod expose;
mod external_secret;
mod hash;
pub mod inherited;
mod job;
pub mod labels;
mod migration;
pub mod names;
mod network_policy;
mod pdb;
mod placement;
mod pod;
mod probe;
mod probe_scheme;
mod pvc;
mod restore;
mod secret;
mod service;
pub mod tls;
pub mod upgrade;
mod verify;
mod wal_volume;

#[cfg(test)]
mod placement_tests;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::api::model::{Defaults, ValidatedDatabase};
use crate::api::v1::Database;

pub use access::{
    instance_account, instance_role, instance_role_binding, primary_lease, role_self_label_pods,
    self_label_pods,
};
pub use backup::{
    BEFORE_UPGRADE, FINAL_FOR, SCHEDULED_AT, final_backup, scheduled_backup, upgrade_backup,
};
pub use container::{
    APP_PASSWORD_ENV, DATA_MOUNT, HEALTH_PORT, INSTANCE_TOKEN_ENV, PGDATA, POSTGRES_CONTAINER,
    POSTGRES_PORT, REPLICATION_PASSWORD_ENV, SUPERUSER_PASSWORD_ENV, TUSK_BIN,
};
pub use drill_restore::{
    SKIP_FINAL_BACKUP as COPY_SKIPS_FINAL_BACKUP, check_pod, check_pod_name, restore_copy,
    short_hash,
};
pub use expose::{exposure_labels, exposure_services};
pub use external_secret::{AppCredentials, external_secret};
pub use job::terminated;
pub use migration::{
    MIGRATION_BACKOFF_LIMIT, MIGRATION_COMPONENT, MIGRATION_CONTAINER, MIGRATION_DEADLINE_SECONDS,
    MIGRATION_UID, MIGRATION_VERSION_ANNOTATION, migration_job, migration_job_name,
    migration_labels, migration_selector,
};
pub use network_policy::{DrillPolicy, canary_policy, drill_policy_name, partition_policy};
pub use pdb::pod_disruption_budgets;
pub use pod::{
    BOOTSTRAP_ANNOTATION, PlannedInstance, SPEC_HASH_ANNOTATION, instance_pod, instance_spec_hash,
    postgres_image, serves_tls, spec_hash,
};
pub use probe::{DRILL_LABEL, probe_pod, probe_pod_name};
pub use pvc::{grown as grown_pvc, instance_pvcs, pvc, wal_pvc};
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
    /// The cluster's node-port range (see [`crate::api::expose::NodePortRange`]).
    pub node_ports: crate::api::expose::NodePortRange,
    /// Instance managers label their own pod on a promotion or hand-over
    /// (`--instance-self-label`): their Role grants it.
    pub instance_self_label: bool,
}

impl BuildConfig {
    /// What validation resolves a Database against.
    pub fn defaults(&self) -> Defaults<'_> {
        Defaults {
            store: self.default_store.as_ref(),
            postgres_repository: &self.postgres_repository,
            node_ports: self.node_ports,
        }
    }
}

/// The controller owner reference every child of `db` carries. `blockOwnerDeletion`
/// makes foreground deletion of the Database wait for its children; it needs the
/// operator to have `update` on `databases/finalizers` where the
/// OwnerReferencesPermissionEnforcement admission plugin is on.
///
/// `None` when the Database has no name or uid yet (it was never stored): children
/// must not be created for it then. Takes the raw Database because the
/// controller owns Backups by it too; the builders use the model's.
pub fn owner_reference(db: &Database) -> Option<OwnerReference> {
    Some(controller_reference(
        db.metadata.name.as_deref()?,
        db.metadata.uid.as_deref()?,
    ))
}

/// [`owner_reference`] of the model.
fn model_owner(db: &ValidatedDatabase) -> Option<OwnerReference> {
    let name = Some(db.name.as_str()).filter(|n| !n.is_empty())?;
    Some(controller_reference(name, db.uid.as_deref()?))
}

fn controller_reference(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: Database::api_version(&()).into_owned(),
        kind: Database::kind(&()).into_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Metadata shared by every child: `name`, the Database's namespace,
/// `labels` over the inherited ones (`spec.inheritedMetadata`), the inherited
/// annotations (a builder adds its own with [`inherited::annotate`]) and the
/// owner reference.
fn object_meta(
    db: &ValidatedDatabase,
    name: String,
    labels: BTreeMap<String, String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: db.namespace.clone(),
        labels: Some(inherited::merged(&db.inherited.labels, labels)),
        annotations: inherited::annotations(&db.inherited),
        owner_references: model_owner(db).map(|owner| vec![owner]),
        ..ObjectMeta::default()
    }
}

/// Metadata of a Job's pod template: `labels` over the inherited ones and
/// the inherited annotations, so the Job's pods carry them too.
fn template_meta(db: &ValidatedDatabase, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        labels: Some(inherited::merged(&db.inherited.labels, labels)),
        annotations: inherited::annotations(&db.inherited),
        ..ObjectMeta::default()
    }
}
