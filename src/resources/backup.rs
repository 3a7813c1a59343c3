//! The Backup objects the Database controller creates: a scheduled run's, a
//! major upgrade's, and the final one of a deletion. The annotations say
//! which, so that later passes recognise their own.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::{labels, owner_reference};
use crate::api::v1::{Backup, BackupSpec, BackupTarget, Database};

/// On a Backup the schedule created: the run it is for (RFC 3339). The
/// newest one is where the schedule resumes.
pub const SCHEDULED_AT: &str = "tusk.dev/scheduled-at";
/// On the Backup taken because its Database is deleted: the Database's uid.
pub const FINAL_FOR: &str = "tusk.dev/final-backup-for";
/// Marks the Backups a major upgrade takes.
pub const BEFORE_UPGRADE: &str = "tusk.dev/before-upgrade";

/// Backup `name` for the scheduled run at `at`, owned by the Database (it
/// goes with it; its data stays in the store). `None` for a Database never
/// stored (no uid).
pub fn scheduled_backup(db: &Database, name: &str, at: jiff::Timestamp) -> Option<Backup> {
    let owner = owner_reference(db)?;
    Some(backup(
        db,
        name,
        (SCHEDULED_AT, at.to_string()),
        Some(owner),
    ))
}

/// Backup `name` a major upgrade takes, owned by the Database like a
/// scheduled one.
pub fn upgrade_backup(db: &Database, name: &str) -> Option<Backup> {
    let owner = owner_reference(db)?;
    Some(backup(
        db,
        name,
        (BEFORE_UPGRADE, "true".to_owned()),
        Some(owner),
    ))
}

/// The final Backup `name` of a Database being deleted, owned by nothing,
/// so the record of the last backup outlives the Database.
pub fn final_backup(db: &Database, name: &str) -> Option<Backup> {
    let uid = db.uid()?;
    Some(backup(db, name, (FINAL_FOR, uid), None))
}

fn backup(
    db: &Database,
    name: &str,
    annotation: (&str, String),
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
) -> Backup {
    let mut backup = Backup::new(
        name,
        BackupSpec {
            database: db.name_any(),
            target: BackupTarget::default(),
        },
    );
    backup.metadata = ObjectMeta {
        name: Some(name.to_owned()),
        namespace: db.namespace(),
        labels: Some(BTreeMap::from([
            (
                labels::MANAGED_BY.to_owned(),
                labels::MANAGED_BY_VALUE.to_owned(),
            ),
            (labels::DATABASE.to_owned(), db.name_any()),
        ])),
        annotations: Some(BTreeMap::from([(annotation.0.to_owned(), annotation.1)])),
        owner_references: owner.map(|o| vec![o]),
        ..ObjectMeta::default()
    };
    backup
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;

    fn stored() -> Database {
        let mut db = sample_database();
        db.metadata.namespace = Some("shop".into());
        db.metadata.uid = Some("uid-1".into());
        db
    }

    #[test]
    fn a_scheduled_backup_is_owned_and_marked_with_its_run() {
        let at: jiff::Timestamp = "2026-11-22T02:00:00Z".parse().unwrap();
        let backup = scheduled_backup(&stored(), "orders-20261122020000", at).unwrap();
        assert_eq!(backup.annotations()[SCHEDULED_AT], "2026-11-22T02:00:00Z");
        assert_eq!(backup.owner_references()[0].uid, "uid-1");
        assert_eq!(backup.spec.database, "orders");
        assert_eq!(backup.namespace().as_deref(), Some("shop"));
        assert_eq!(backup.labels()[labels::DATABASE], "orders");
    }

    #[test]
    fn the_final_backup_is_owned_by_nothing_and_names_the_database_uid() {
        let backup = final_backup(&stored(), "orders-final-x").unwrap();
        assert!(backup.owner_references().is_empty());
        assert_eq!(backup.annotations()[FINAL_FOR], "uid-1");
    }

    #[test]
    fn a_database_never_stored_gets_none() {
        let mut db = stored();
        db.metadata.uid = None;
        assert!(upgrade_backup(&db, "x").is_none());
        assert!(final_backup(&db, "x").is_none());
    }
}
