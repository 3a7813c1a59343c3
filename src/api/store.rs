//! The object store a Database's backups go to: the one its spec names, or the
//! operator's default when the spec asks for backups (a schedule or a
//! retention) without naming one.

use super::v1::{Database, ObjectStore};

/// The store `db` uses, if any. Databases of different namespaces share the
/// default store under a prefix per namespace (the key layout then adds the
/// Database's name and system identifier).
pub fn effective(db: &Database, default: Option<&ObjectStore>) -> Option<ObjectStore> {
    let backup = db.spec.backup.as_ref()?;
    if let Some(own) = &backup.object_store {
        return Some(own.clone());
    }
    if backup.schedule.is_none() && backup.retention.is_none() {
        return None;
    }
    namespaced_default(db, default)
}

/// The operator's default store as `db`'s namespace sees it (under a prefix
/// per namespace), whether or not `db` asks for backups: where a restore
/// reads when nothing else is named.
pub fn namespaced_default(db: &Database, default: Option<&ObjectStore>) -> Option<ObjectStore> {
    let default = default?;
    let namespace = db.metadata.namespace.as_deref().unwrap_or("default");
    let path = match default.path.as_deref().map(|p| p.trim_matches('/')) {
        Some(prefix) if !prefix.is_empty() => format!("{prefix}/{namespace}"),
        _ => namespace.to_owned(),
    };
    Some(ObjectStore {
        path: Some(path),
        ..default.clone()
    })
}

/// `db` with the default store written into `spec.backup.objectStore` where it
/// applies: what the reconciler and the webhook work from, so that pods,
/// validation and backups all see the same store.
pub fn with_default(db: &Database, default: Option<&ObjectStore>) -> Database {
    let mut db = db.clone();
    if let Some(store) = effective(&db, default)
        && let Some(backup) = db.spec.backup.as_mut()
    {
        backup.object_store = Some(store);
    }
    db
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use crate::api::v1::BackupConfig;

    fn default_store() -> ObjectStore {
        ObjectStore {
            bucket: "fleet".into(),
            path: Some("/pg/".into()),
            endpoint: Some("http://s3.storage:7070".into()),
            region: None,
            credentials_secret: Some("s3-creds".into()),
        }
    }

    fn scheduled(store: Option<ObjectStore>) -> Database {
        let mut db = sample_database();
        db.metadata.namespace = Some("shop".into());
        db.spec.backup = Some(BackupConfig {
            schedule: Some("@daily".into()),
            retention: None,
            object_store: store,
            verify: None,
        });
        db
    }

    #[test]
    fn the_default_serves_a_schedule_without_a_store_under_the_namespace() {
        let db = with_default(&scheduled(None), Some(&default_store()));
        let store = db
            .spec
            .backup
            .and_then(|b| b.object_store)
            .expect("a store");
        assert_eq!(store.bucket, "fleet");
        assert_eq!(store.path.as_deref(), Some("pg/shop"));
        assert_eq!(store.credentials_secret.as_deref(), Some("s3-creds"));
    }

    #[test]
    fn an_own_store_wins_and_no_request_gets_none() {
        let own = ObjectStore {
            bucket: "mine".into(),
            ..Default::default()
        };
        let db = scheduled(Some(own.clone()));
        assert_eq!(effective(&db, Some(&default_store())), Some(own));

        let mut plain = sample_database();
        plain.spec.backup = None;
        assert_eq!(effective(&plain, Some(&default_store())), None);
        plain.spec.backup = Some(BackupConfig::default());
        assert_eq!(effective(&plain, Some(&default_store())), None);
    }

    #[test]
    fn without_a_default_nothing_is_filled_in() {
        let db = with_default(&scheduled(None), None);
        assert_eq!(db.spec.backup.and_then(|b| b.object_store), None);
    }
}
