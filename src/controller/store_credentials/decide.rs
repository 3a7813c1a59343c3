//! What the store-credentials controller decides (pure): Tusk's copy of the
//! default object store's credentials in a Database's namespace. The operator's default store (`--default-store-*`) keeps its
//! credentials Secret in the operator's own namespace; the pods of a
//! Database that uses that store read a Secret of the same name in their own
//! namespace, which Tusk keeps as a copy of the source: owned by the
//! Databases that use it (garbage-collected with the last of them) and
//! labelled as Tusk's, so that a user's own Secret of that name is never
//! written over.
//!
//! Here: which Databases need the copy, what the copy is, and whether to
//! create it, refresh it or leave what is there alone.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::v1::{Database, ObjectStore};
use crate::contract::env;
use crate::resources::labels;

/// The label that marks Tusk's copy; only a Secret carrying it is ever
/// updated.
pub const COPY_LABEL: &str = "tusk.dev/store-credentials";
/// [`COPY_LABEL`]'s value: a copy of the default store's credentials.
pub const COPY_LABEL_VALUE: &str = "default-store";

/// The keys copied: the ones the store needs, nothing else of the source.
const KEYS: [&str; 2] = [env::ACCESS_KEY_ID, env::SECRET_ACCESS_KEY];

/// Whether `db` may use the default store, and so needs its credentials in
/// its namespace: it asks for backups without naming a store, or restores
/// without naming one (the default is then where it may read).
pub fn needs_default_credentials(db: &Database, default: Option<&ObjectStore>) -> bool {
    if default
        .and_then(|d| d.credentials_secret.as_ref())
        .is_none()
    {
        return false;
    }
    let backup = db.spec.backup.as_ref();
    if backup.is_some_and(|b| b.object_store.is_some()) {
        return false;
    }
    let asks_for_backups = backup.is_some_and(|b| b.schedule.is_some() || b.retention.is_some());
    let restores_from_default = db
        .spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.recovery.as_ref())
        .is_some_and(|r| r.object_store.is_none());
    asks_for_backups || restores_from_default
}

/// The owner reference a copy carries for `db` (not a controller: several
/// Databases of a namespace share one copy). `None` for a Database the API
/// server has not given a uid yet.
pub fn owner(db: &Database) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "tusk.dev/v1".to_owned(),
        kind: "Database".to_owned(),
        name: db.metadata.name.clone()?,
        uid: db.metadata.uid.clone()?,
        controller: None,
        block_owner_deletion: None,
    })
}

/// The copy of `source` named `name` in `namespace`, owned by `owners`.
pub fn copy(source: &Secret, name: &str, namespace: &str, owners: Vec<OwnerReference>) -> Secret {
    let data: BTreeMap<String, ByteString> = KEYS
        .iter()
        .filter_map(|key| {
            let value = source.data.as_ref()?.get(*key)?;
            Some(((*key).to_owned(), value.clone()))
        })
        .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                (
                    labels::MANAGED_BY.to_owned(),
                    labels::MANAGED_BY_VALUE.to_owned(),
                ),
                (COPY_LABEL.to_owned(), COPY_LABEL_VALUE.to_owned()),
            ])),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        },
        data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// What to do about the copy in one namespace.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// The source does not exist (yet): nothing to copy; a copy made
    /// earlier stays until the source is back.
    NoSource,
    /// No Secret of that name: create the copy.
    Create(Secret),
    /// Tusk's copy, out of date (credentials or owners): replace it, on the
    /// condition that it is still the version read (`resourceVersion`).
    Refresh(Secret),
    /// Tusk's copy, current.
    UpToDate,
    /// A Secret of that name that is not Tusk's copy: the user's, never
    /// touched.
    LeaveUsers,
}

/// What to do in `namespace`, given the `source` Secret, the Secret named
/// `name` there (`existing`) and the Databases there that need the copy
/// (`owners`, none: nothing to do).
pub fn decide(
    source: Option<&Secret>,
    existing: Option<&Secret>,
    name: &str,
    namespace: &str,
    owners: Vec<OwnerReference>,
) -> Decision {
    if let Some(existing) = existing
        && !is_copy(existing)
    {
        return Decision::LeaveUsers;
    }
    if owners.is_empty() {
        return Decision::UpToDate;
    }
    let Some(source) = source else {
        return Decision::NoSource;
    };
    let wanted = copy(source, name, namespace, owners);
    let Some(existing) = existing else {
        return Decision::Create(wanted);
    };
    if existing.data == wanted.data && same_owners(existing, &wanted) {
        return Decision::UpToDate;
    }
    let mut refreshed = wanted;
    refreshed.metadata.resource_version = existing.metadata.resource_version.clone();
    Decision::Refresh(refreshed)
}

/// Whether `secret` is Tusk's copy (by its label).
pub fn is_copy(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(COPY_LABEL))
        .is_some_and(|v| v == COPY_LABEL_VALUE)
}

fn same_owners(existing: &Secret, wanted: &Secret) -> bool {
    let uids = |s: &Secret| {
        let mut uids: Vec<String> = s
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| o.uid.clone())
            .collect();
        uids.sort();
        uids
    };
    uids(existing) == uids(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::{BackupConfig, BootstrapSpec, RecoverySpec};

    fn default_store() -> ObjectStore {
        ObjectStore {
            bucket: "fleet".into(),
            credentials_secret: Some("s3-creds".into()),
            ..ObjectStore::default()
        }
    }

    fn secret(data: &[(&str, &str)], label: bool) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("s3-creds".into()),
                resource_version: Some("7".into()),
                labels: label.then(|| {
                    BTreeMap::from([(COPY_LABEL.to_owned(), COPY_LABEL_VALUE.to_owned())])
                }),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    fn source() -> Secret {
        secret(
            &[
                ("AWS_ACCESS_KEY_ID", "id"),
                ("AWS_SECRET_ACCESS_KEY", "key"),
                ("ACCESS_SECRET_KEY", "key"),
            ],
            false,
        )
    }

    fn owned_by(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "tusk.dev/v1".into(),
            kind: "Database".into(),
            name: format!("db-{uid}"),
            uid: uid.into(),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn only_a_database_that_may_use_the_default_store_needs_the_copy() {
        let store = default_store();
        let mut db = sample_database();
        db.spec.backup = Some(BackupConfig {
            schedule: Some("0 2 * * *".into()),
            ..BackupConfig::default()
        });
        assert!(needs_default_credentials(&db, Some(&store)));
        // No default, or a default without credentials: nothing to copy.
        assert!(!needs_default_credentials(&db, None));
        let anonymous = ObjectStore {
            credentials_secret: None,
            ..store.clone()
        };
        assert!(!needs_default_credentials(&db, Some(&anonymous)));
        // Its own store: the default is not used.
        if let Some(backup) = db.spec.backup.as_mut() {
            backup.object_store = Some(ObjectStore {
                bucket: "mine".into(),
                ..ObjectStore::default()
            });
        }
        assert!(!needs_default_credentials(&db, Some(&store)));
        // No backups asked for.
        db.spec.backup = None;
        assert!(!needs_default_credentials(&db, Some(&store)));
        // A restore that names no store may read the default.
        db.spec.bootstrap = Some(BootstrapSpec {
            initdb: None,
            recovery: Some(RecoverySpec::default()),
        });
        assert!(needs_default_credentials(&db, Some(&store)));
    }

    #[test]
    fn the_copy_holds_the_store_keys_only_is_labelled_and_owned() {
        let copied = copy(&source(), "s3-creds", "shop", vec![owned_by("a")]);
        let keys: Vec<&String> = copied.data.iter().flatten().map(|(k, _)| k).collect();
        assert_eq!(keys, ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]);
        assert!(is_copy(&copied));
        assert_eq!(copied.metadata.namespace.as_deref(), Some("shop"));
        let owners = copied.metadata.owner_references.expect("owners");
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].controller, None, "several Databases share it");
    }

    #[test]
    fn a_missing_copy_is_created_a_stale_one_refreshed_a_current_one_left() {
        let owners = || vec![owned_by("a")];
        let create = decide(Some(&source()), None, "s3-creds", "shop", owners());
        let Decision::Create(created) = create else {
            panic!("not created: {create:?}")
        };
        assert_eq!(created.metadata.resource_version, None);

        let mut current = created.clone();
        current.metadata.resource_version = Some("7".into());
        let same = decide(
            Some(&source()),
            Some(&current),
            "s3-creds",
            "shop",
            owners(),
        );
        assert_eq!(same, Decision::UpToDate);

        // The source's key changed: refreshed, on the version read.
        let rotated = secret(
            &[
                ("AWS_ACCESS_KEY_ID", "id"),
                ("AWS_SECRET_ACCESS_KEY", "new"),
            ],
            false,
        );
        let refresh = decide(Some(&rotated), Some(&current), "s3-creds", "shop", owners());
        let Decision::Refresh(refreshed) = refresh else {
            panic!("not refreshed: {refresh:?}")
        };
        assert_eq!(refreshed.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            refreshed
                .data
                .and_then(|d| d.get("AWS_SECRET_ACCESS_KEY").cloned()),
            Some(ByteString(b"new".to_vec()))
        );

        // A second Database of the namespace: one more owner.
        let more = decide(
            Some(&source()),
            Some(&current),
            "s3-creds",
            "shop",
            vec![owned_by("a"), owned_by("b")],
        );
        assert!(matches!(more, Decision::Refresh(_)), "{more:?}");
    }

    #[test]
    fn a_users_secret_of_that_name_is_never_touched() {
        let users = secret(&[("AWS_ACCESS_KEY_ID", "theirs")], false);
        for source in [Some(source()), None] {
            assert_eq!(
                decide(
                    source.as_ref(),
                    Some(&users),
                    "s3-creds",
                    "shop",
                    vec![owned_by("a")]
                ),
                Decision::LeaveUsers
            );
        }
    }

    #[test]
    fn without_a_source_or_a_user_nothing_is_written() {
        assert_eq!(
            decide(None, None, "s3-creds", "shop", vec![owned_by("a")]),
            Decision::NoSource
        );
        let copy = secret(&[("AWS_ACCESS_KEY_ID", "id")], true);
        assert_eq!(
            decide(None, Some(&copy), "s3-creds", "shop", vec![owned_by("a")]),
            Decision::NoSource
        );
        assert_eq!(
            decide(Some(&source()), None, "s3-creds", "shop", Vec::new()),
            Decision::UpToDate
        );
    }
}
