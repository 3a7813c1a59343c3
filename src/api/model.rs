//! The validated model of a Database: what [`super::validate::validated`]
//! returns once a spec passed every rule, and the only input the builders in
//! `crate::resources` take about the Database.
//!
//! Everything in it is resolved: the version parsed, the image chosen, the
//! operator's default object store folded in. A builder that holds one
//! cannot meet an unparsed version or a store that is not in effect, so none
//! needs a fallback for an invalid spec.

use std::collections::BTreeMap;

use super::placement::Placement;
use super::resources::InstanceResources;
use super::store;
use super::tls::TlsSettings;
use super::v1::{
    Database, InheritedMetadata, InitdbSpec, ObjectStore, ReplicationSpec, StorageSpec,
    WalStorageSpec,
};
use super::version::PgVersion;
use crate::postgres::memory;

/// The operator-wide settings validation resolves a Database against (from
/// the operator's command line or environment).
#[derive(Clone, Copy, Debug, Default)]
pub struct Defaults<'a> {
    /// The operator's default object store (see [`super::store`]).
    pub store: Option<&'a ObjectStore>,
    /// Repository of the PostgreSQL image when `spec.image` is unset, without
    /// a tag (see [`image`]).
    pub postgres_repository: &'a str,
    /// The cluster's node-port range: `spec.expose[].nodePort` must be in it.
    pub node_ports: super::expose::NodePortRange,
}

/// The annotation that restarts a Database (`kubectl tusk restart` sets it
/// to the time, like `kubectl rollout restart`): every instance pod carries
/// its value, and a new value replaces them all, replicas first, then the
/// primary after a switchover. An RFC 3339 time, for `status.history`.
pub const RESTARTED_AT_ANNOTATION: &str = "tusk.dev/restartedAt";

/// A Database whose spec passed validation, resolved for the builders.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedDatabase {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`; `None` only for an object never stored.
    pub namespace: Option<String>,
    /// `metadata.uid`; children get no owner reference without it.
    pub uid: Option<String>,
    /// `spec.version`, parsed.
    pub version: PgVersion,
    /// The PostgreSQL image the spec asks for (see [`image`]).
    pub image: String,
    /// `spec.instances` (1 to 16).
    pub instances: i32,
    /// `spec.storage`.
    pub storage: StorageSpec,
    /// `spec.walStorage`: each instance's WAL on its own volume when set.
    pub wal_storage: Option<WalStorageSpec>,
    /// `spec.replication`.
    pub replication: ReplicationSpec,
    /// `spec.postgresql.parameters`.
    pub parameters: BTreeMap<String, String>,
    /// The application database and its owner: `spec.bootstrap.initdb`, or
    /// the defaults (`app`, `app`) when the Database is restored or says
    /// nothing.
    pub initdb: InitdbSpec,
    /// The object store in effect: the spec's, or the operator's default
    /// when the spec asks for backups without naming one.
    pub object_store: Option<ObjectStore>,
    /// `spec.affinity`, `spec.topologySpreadConstraints` and
    /// `spec.priorityClassName`, resolved.
    pub placement: Placement,
    /// `spec.inheritedMetadata`.
    pub inherited: InheritedMetadata,
    /// `spec.resources`, defaults folded in.
    pub resources: InstanceResources,
    /// The memory and WAL settings derived from `resources` and the volume
    /// (see [`crate::postgres::memory`]), whether or not the user overrides them.
    pub derived: memory::Derived,
    /// `spec.tls`, resolved (defaults folded in, durations parsed).
    pub tls: TlsSettings,
    /// `spec.expose`, as validated.
    pub expose: Vec<super::expose::ExposeSpec>,
    /// The [`RESTARTED_AT_ANNOTATION`] value: part of each pod's spec hash.
    pub restarted_at: Option<String>,
}

impl ValidatedDatabase {
    /// The model of `db`, whose version parsed as `version`, whose
    /// `spec.resources` resolved as `resources`, whose `spec.tls` resolved as
    /// `tls`, and whose spec
    /// passed every rule (only [`super::validate::validated`] calls this).
    pub(super) fn new(
        db: &Database,
        version: PgVersion,
        resources: InstanceResources,
        tls: TlsSettings,
        defaults: &Defaults<'_>,
    ) -> Self {
        let spec = &db.spec;
        let derived = derive(
            &resources,
            &spec.storage,
            spec.wal_storage.as_ref(),
            &spec.postgresql.parameters,
        );
        Self {
            name: db.metadata.name.clone().unwrap_or_default(),
            namespace: db.metadata.namespace.clone(),
            uid: db.metadata.uid.clone(),
            version,
            image: image(spec.image.as_deref(), version, defaults.postgres_repository),
            instances: spec.instances,
            storage: spec.storage.clone(),
            wal_storage: spec.wal_storage.clone(),
            replication: spec.replication.clone(),
            parameters: spec.postgresql.parameters.clone(),
            initdb: spec
                .bootstrap
                .as_ref()
                .and_then(|b| b.initdb.clone())
                .unwrap_or_default(),
            object_store: store::effective(db, defaults.store),
            placement: Placement::of(spec),
            inherited: spec.inherited_metadata.clone(),
            resources,
            derived,
            tls,
            expose: spec.expose.clone(),
            restarted_at: db
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(RESTARTED_AT_ANNOTATION))
                .cloned(),
        }
    }

    /// `status.resources` for this model.
    pub fn resources_status(&self) -> super::resources::ResourcesStatus {
        super::resources::status(
            &self.resources,
            memory::not_overridden(&self.derived, &self.parameters),
        )
    }

    /// The parameters PostgreSQL is given: the derived settings the user
    /// does not set, then `spec.postgresql.parameters`.
    pub fn effective_parameters(&self) -> BTreeMap<String, String> {
        memory::effective(&self.derived, &self.parameters)
    }
}

/// The settings derived for `resources` and the volume holding `pg_wal`:
/// the WAL volume of `spec.walStorage` when there is one, else the data
/// volume (`spec.storage.size`), which it then shares with the data.
fn derive(
    resources: &InstanceResources,
    storage: &StorageSpec,
    wal_storage: Option<&WalStorageSpec>,
    parameters: &BTreeMap<String, String>,
) -> memory::Derived {
    let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    let size = wal_storage.map_or(&storage.size, |w| &w.size);
    memory::derive(&memory::Inputs {
        memory_bytes: clamp(resources.memory_bytes()),
        wal_volume: memory::WalVolume {
            bytes: clamp(super::quantity::parse_bytes(size).unwrap_or(0)),
            dedicated: wal_storage.is_some(),
        },
        max_connections: memory::max_connections(parameters),
    })
}

/// The PostgreSQL image: `custom` (`spec.image`) when set, else
/// `<repository>:<version>`: `17` gives `postgres:17` (the official images
/// tag each major with its latest minor) and `17.2` gives `postgres:17.2`
/// (and each minor with itself), so naming a minor pins it and changing it
/// is a rolling update.
pub fn image(custom: Option<&str>, version: PgVersion, repository: &str) -> String {
    if let Some(image) = custom.filter(|i| !i.is_empty()) {
        return image.to_owned();
    }
    match version.minor {
        Some(minor) => format!("{repository}:{}.{minor}", version.major),
        None => format!("{repository}:{}", version.major),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_wal_size_is_derived_from_the_volume_that_holds_pg_wal() {
        let mut db = crate::api::arbitrary::sample_database();
        db.spec.storage.size = "1Gi".into();
        let defaults = Defaults {
            store: None,
            postgres_repository: "postgres",
            node_ports: Default::default(),
        };
        let shared =
            crate::api::validate::validated(&db, &defaults).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            shared.derived.max_wal_size,
            256 << 20,
            "a quarter of a data volume that also holds the data"
        );
        db.spec.wal_storage = Some(WalStorageSpec {
            size: "4Gi".into(),
            storage_class_name: None,
        });
        let own =
            crate::api::validate::validated(&db, &defaults).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            own.derived.max_wal_size,
            2 << 30,
            "half of a volume of its own (spec.walStorage.size)"
        );
    }

    fn version(major: u32, minor: Option<u32>) -> PgVersion {
        PgVersion { major, minor }
    }

    #[test]
    fn the_image_is_the_spec_s_or_the_repository_tagged_with_the_version() {
        assert_eq!(image(None, version(17, None), "postgres"), "postgres:17");
        assert_eq!(
            image(None, version(17, Some(2)), "localhost/postgres"),
            "localhost/postgres:17.2"
        );
        assert_eq!(
            image(Some(""), version(16, None), "postgres"),
            "postgres:16",
            "an empty spec.image is unset"
        );
        assert_eq!(
            image(
                Some("registry.example/pg:17.6"),
                version(17, None),
                "postgres"
            ),
            "registry.example/pg:17.6"
        );
    }
}
