//! Where a restore reads from: `spec.bootstrap.recovery` resolved against the
//! Backup or Database it names into the store, the source's name in it and,
//! when known, its system and backup. Needed only to create the first
//! instance; afterwards its source may go without consequence.

use kube::ResourceExt;
use kube::api::Api;

use crate::api::status::BackupPhase;
use crate::api::store;
use crate::api::v1::{Backup, Database, ObjectStore, RecoverySpec};
use crate::controller::Error;
pub use crate::resources::RestoreSource;

/// What the resolution found, or why not (a message that names the field).
pub type Resolved = Result<RestoreSource, String>;

/// The Backup or Database `recovery` names, as read from the API server.
#[derive(Clone, Debug, Default)]
pub struct Named {
    pub backup: Option<Backup>,
    pub source: Option<Database>,
    /// The Database the named Backup is of, when it still exists.
    pub backup_database: Option<Database>,
}

/// Reads what `db`'s recovery names (nothing for other Databases).
pub async fn fetch(client: &kube::Client, db: &Database, namespace: &str) -> Result<Named, Error> {
    let Some(recovery) = recovery_of(db) else {
        return Ok(Named::default());
    };
    let backups: Api<Backup> = Api::namespaced(client.clone(), namespace);
    let databases: Api<Database> = Api::namespaced(client.clone(), namespace);
    let mut named = Named::default();
    if let Some(name) = &recovery.backup {
        named.backup = backups
            .get_opt(name)
            .await
            .map_err(Error::kube("reading the Backup to restore"))?;
        if let Some(backup) = &named.backup {
            named.backup_database = databases
                .get_opt(&backup.spec.database)
                .await
                .map_err(Error::kube("reading the Database of the Backup to restore"))?;
        }
    }
    if let Some(name) = &recovery.source {
        named.source = databases
            .get_opt(name)
            .await
            .map_err(Error::kube("reading the Database to restore from"))?;
    }
    Ok(named)
}

fn recovery_of(db: &Database) -> Option<&RecoverySpec> {
    db.spec.bootstrap.as_ref()?.recovery.as_ref()
}

/// Resolves `db`'s recovery (pure); `None` when it has none. `default` is the
/// operator's default store.
pub fn resolve(db: &Database, named: &Named, default: Option<&ObjectStore>) -> Option<Resolved> {
    let recovery = recovery_of(db)?;
    let own = store::effective(db, default);
    // Where to read when the spec does not say: this Database's store, else
    // the default one (a restore needs no schedule of its own).
    let fallback = || {
        recovery
            .object_store
            .clone()
            .or_else(|| own.clone())
            .or_else(|| store::namespaced_default(db, default))
    };
    let (store, database, system, backup) = if let Some(name) = &recovery.backup {
        let field = "spec.bootstrap.recovery.backup";
        let Some(found) = &named.backup else {
            return Some(Err(format!(
                "{field}: Backup {name} does not exist in this namespace"
            )));
        };
        let status = found.status.clone().unwrap_or_default();
        if status.phase != Some(BackupPhase::Completed) {
            let phase = status.phase.map_or("not started", |p| p.as_str());
            return Some(Err(format!(
                "{field}: Backup {name} is {phase}, not Completed"
            )));
        }
        let Some((system, id)) = status.location.as_deref().and_then(location_parts) else {
            return Some(Err(format!(
                "{field}: Backup {name} has no location in its status"
            )));
        };
        let store = recovery.object_store.clone().or_else(|| {
            named
                .backup_database
                .as_ref()
                .and_then(|source| store::effective(source, default))
        });
        let Some(store) = store.or_else(fallback) else {
            return Some(Err(no_store(field)));
        };
        (store, found.spec.database.clone(), Some(system), Some(id))
    } else if let Some(name) = &recovery.source {
        let field = "spec.bootstrap.recovery.source";
        let Some(source) = &named.source else {
            return Some(Err(format!(
                "{field}: Database {name} does not exist in this namespace (a deleted Database is read by sourceName)"
            )));
        };
        let Some(store) = store::effective(source, default) else {
            return Some(Err(format!("{field}: Database {name} has no object store")));
        };
        // Every instance reports the same system; a new Database has none yet.
        let system = source
            .status
            .as_ref()
            .and_then(|s| s.instances.iter().find_map(|i| i.system_identifier.clone()));
        (store, name.clone(), system, None)
    } else if let Some(name) = &recovery.source_name {
        let Some(store) = fallback() else {
            return Some(Err(no_store("spec.bootstrap.recovery.objectStore")));
        };
        (store, name.clone(), None, None)
    } else {
        return Some(Err(
            "spec.bootstrap.recovery: names none of backup, source or sourceName".to_owned(),
        ));
    };
    if database == db.name_any() && own.as_ref().is_some_and(|own| same_place(own, &store)) {
        return Some(Err(format!(
            "spec.backup.objectStore.path: {} would archive where its source's WAL is (bucket {}, path {}); give the restored Database another name or another path",
            database,
            store.bucket,
            store.path.as_deref().unwrap_or("")
        )));
    }
    Some(Ok(RestoreSource {
        store,
        database,
        system,
        backup,
        target_time: recovery.target_time.clone(),
        target_lsn: recovery.target_lsn.clone(),
    }))
}

fn no_store(field: &str) -> String {
    format!(
        "{field}: no object store to read from: set spec.bootstrap.recovery.objectStore, spec.backup.objectStore, or the operator's default store"
    )
}

/// Two stores that write to the same keys.
fn same_place(a: &ObjectStore, b: &ObjectStore) -> bool {
    let path = |s: &ObjectStore| s.path.as_deref().unwrap_or("").trim_matches('/').to_owned();
    a.bucket == b.bucket && a.endpoint == b.endpoint && path(a) == path(b)
}

/// The system identifier and backup id in a Backup's location
/// (`s3://<bucket>/<path>/<database>/<system>/base/<id>/`).
pub fn location_parts(location: &str) -> Option<(String, String)> {
    let mut parts = location.trim_end_matches('/').rsplit('/');
    let id = parts.next()?;
    if parts.next()? != "base" {
        return None;
    }
    let system = parts.next()?;
    system.parse::<u64>().ok()?;
    Some((system.to_owned(), id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::status::{BackupStatus, DatabaseStatus, InstanceStatus};
    use crate::api::v1::{BackupConfig, BackupSpec, BootstrapSpec};

    fn restoring(name: &str, recovery: RecoverySpec) -> Database {
        let mut db = sample_database();
        db.metadata.name = Some(name.into());
        db.metadata.namespace = Some("shop".into());
        db.spec.backup = None;
        db.spec.bootstrap = Some(BootstrapSpec {
            initdb: None,
            recovery: Some(recovery),
        });
        db
    }

    fn store(bucket: &str, path: &str) -> ObjectStore {
        ObjectStore {
            bucket: bucket.into(),
            path: Some(path.into()),
            credentials_secret: Some("s3".into()),
            ..Default::default()
        }
    }

    fn with_store(mut db: Database, store: ObjectStore) -> Database {
        db.spec.backup = Some(BackupConfig {
            object_store: Some(store),
            ..Default::default()
        });
        db
    }

    fn completed(name: &str, database: &str) -> Backup {
        let mut backup = Backup::new(
            name,
            BackupSpec {
                database: database.into(),
                target: Default::default(),
            },
        );
        backup.status = Some(BackupStatus {
            phase: Some(BackupPhase::Completed),
            location: Some("s3://b/team/orders/7441/base/20261124T100000Z/".into()),
            ..Default::default()
        });
        backup
    }

    #[test]
    fn a_backup_resolves_to_its_database_store_system_and_id() {
        let db = restoring(
            "copy",
            RecoverySpec {
                backup: Some("nightly".into()),
                target_lsn: Some("0/3000000".into()),
                ..Default::default()
            },
        );
        let named = Named {
            backup: Some(completed("nightly", "orders")),
            backup_database: Some(with_store(sample_database(), store("b", "team"))),
            ..Default::default()
        };
        let resolved = resolve(&db, &named, None)
            .expect("a recovery")
            .expect("resolved");
        assert_eq!(resolved.store, store("b", "team"));
        assert_eq!(resolved.database, "orders");
        assert_eq!(resolved.system.as_deref(), Some("7441"));
        assert_eq!(resolved.backup.as_deref(), Some("20261124T100000Z"));
        assert_eq!(resolved.target_lsn.as_deref(), Some("0/3000000"));

        // Its Database gone: this Database's store (here the default) is read.
        let named = Named {
            backup: Some(completed("nightly", "orders")),
            ..Default::default()
        };
        let resolved = resolve(&db, &named, Some(&store("fleet", "pg")))
            .expect("a recovery")
            .expect("resolved");
        assert_eq!(resolved.store.path.as_deref(), Some("pg/shop"));
    }

    #[test]
    fn what_cannot_be_resolved_names_the_field() {
        let db = restoring(
            "copy",
            RecoverySpec {
                backup: Some("nightly".into()),
                ..Default::default()
            },
        );
        let message = |named: &Named| {
            resolve(&db, named, None)
                .expect("a recovery")
                .expect_err("refused")
        };
        assert!(
            message(&Named::default())
                .starts_with("spec.bootstrap.recovery.backup: Backup nightly does not exist")
        );
        let mut running = completed("nightly", "orders");
        running.status.as_mut().expect("status").phase = Some(BackupPhase::Running);
        let named = Named {
            backup: Some(running),
            ..Default::default()
        };
        assert!(message(&named).contains("is Running, not Completed"));
        let named = Named {
            backup: Some(completed("nightly", "orders")),
            ..Default::default()
        };
        assert!(message(&named).contains("no object store to read from"));

        let by_source = restoring(
            "copy",
            RecoverySpec {
                source: Some("orders".into()),
                ..Default::default()
            },
        );
        let refused = resolve(&by_source, &Named::default(), None).expect("a recovery");
        assert!(refused.expect_err("refused").contains("sourceName"));
    }

    #[test]
    fn a_source_database_gives_its_store_and_system() {
        let db = restoring(
            "copy",
            RecoverySpec {
                source: Some("orders".into()),
                target_time: Some("2026-11-24T10:01:00Z".into()),
                ..Default::default()
            },
        );
        let mut source = with_store(sample_database(), store("b", "team"));
        source.status = Some(DatabaseStatus {
            instances: vec![InstanceStatus {
                system_identifier: Some("7441".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        let named = Named {
            source: Some(source),
            ..Default::default()
        };
        let resolved = resolve(&db, &named, None)
            .expect("a recovery")
            .expect("resolved");
        assert_eq!(
            (resolved.database.as_str(), resolved.system.as_deref()),
            ("orders", Some("7441"))
        );
        assert_eq!(
            resolved.target_time.as_deref(),
            Some("2026-11-24T10:01:00Z")
        );
    }

    #[test]
    fn a_source_name_reads_the_own_store_but_never_writes_into_the_source() {
        let by_name = |name: &str| {
            restoring(
                name,
                RecoverySpec {
                    source_name: Some("orders".into()),
                    ..Default::default()
                },
            )
        };
        let default = store("fleet", "pg");
        let resolved = resolve(&by_name("orders-back"), &Named::default(), Some(&default))
            .expect("a recovery")
            .expect("resolved");
        assert_eq!(resolved.store.path.as_deref(), Some("pg/shop"));
        assert_eq!(resolved.database, "orders");

        // Same name, same store it would archive to: refused, naming the path.
        let same = with_store(by_name("orders"), store("fleet", "pg/shop"));
        let refused = resolve(&same, &Named::default(), Some(&default))
            .expect("a recovery")
            .expect_err("refused");
        assert!(
            refused.starts_with("spec.backup.objectStore.path: "),
            "{refused}"
        );
        // Another path for the restored Database's own archive is fine.
        let elsewhere = with_store(by_name("orders"), store("fleet", "pg/shop-v2"));
        let mut recovery = elsewhere.spec.bootstrap.clone().expect("bootstrap");
        recovery.recovery.as_mut().expect("recovery").object_store =
            Some(store("fleet", "pg/shop"));
        let mut elsewhere = elsewhere;
        elsewhere.spec.bootstrap = Some(recovery);
        assert!(
            resolve(&elsewhere, &Named::default(), None)
                .expect("a recovery")
                .is_ok()
        );
        assert!(resolve(&sample_database(), &Named::default(), None).is_none());
    }

    #[test]
    fn a_location_gives_system_and_id() {
        assert_eq!(
            location_parts("s3://b/team/orders/7441/base/20261124T100000Z/"),
            Some(("7441".into(), "20261124T100000Z".into()))
        );
        assert_eq!(location_parts("s3://b/orders/x/base/1/"), None);
        assert_eq!(location_parts("s3://b/orders/7441/wal/1/"), None);
    }
}
