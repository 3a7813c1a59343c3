//! Lossless conversion between `v1` and `v1alpha1`, as pure functions.
//!
//! `v1alpha1` is flat and small. Converting `v1 → v1alpha1` keeps whatever the flat
//! form cannot hold as JSON in the [`V1_FIELDS_ANNOTATION`] annotation, and
//! `v1alpha1 → v1` merges it back, so `v1 → v1alpha1 → v1` is the identity (and so is
//! `v1alpha1 → v1 → v1alpha1` for every object the first direction can produce,
//! which includes every v1alpha1 object written without the annotation).
//! Property tests in this module prove both.

use std::collections::BTreeMap;

use kube::core::ObjectMeta;
use serde_json::{Map, Value};

use super::{v1, v1alpha1};

/// Annotation that carries the v1 fields a v1alpha1 object cannot hold. Reserved:
/// Tusk overwrites it on every conversion to v1alpha1 and removes it on conversion to v1.
pub const V1_FIELDS_ANNOTATION: &str = "conversion.tusk.dev/v1-fields";

pub const GROUP: &str = "tusk.dev";
pub const V1: &str = "tusk.dev/v1";
pub const V1ALPHA1: &str = "tusk.dev/v1alpha1";

#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    #[error(
        "annotation {V1_FIELDS_ANNOTATION} of {name} does not hold a JSON object of v1 fields: {source}"
    )]
    Annotation {
        name: String,
        source: serde_json::Error,
    },
    #[error("{name} cannot be represented in {to}: {source}")]
    Shape {
        name: String,
        to: &'static str,
        source: serde_json::Error,
    },
    #[error("object has no {0}")]
    Missing(&'static str),
    #[error("tusk does not serve {kind} in {api_version}")]
    Unsupported { kind: String, api_version: String },
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_else(|| "<unnamed>".to_owned())
}

fn to_object<T: serde::Serialize>(
    value: &T,
    name: &str,
    to: &'static str,
) -> Result<Map<String, Value>, ConversionError> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ConversionError::Missing("spec object")),
        Err(source) => Err(ConversionError::Shape {
            name: name.to_owned(),
            to,
            source,
        }),
    }
}

/// Stores `rest` in the reserved annotation (or removes the annotation when there is nothing to keep).
fn stash(meta: &ObjectMeta, rest: &Map<String, Value>) -> ObjectMeta {
    let mut meta = meta.clone();
    let mut annotations = meta.annotations.take().unwrap_or_default();
    if rest.is_empty() {
        annotations.remove(V1_FIELDS_ANNOTATION);
    } else {
        // A Map serializes without error: it holds only JSON values.
        let json = Value::Object(rest.clone()).to_string();
        annotations.insert(V1_FIELDS_ANNOTATION.to_owned(), json);
    }
    meta.annotations = (!annotations.is_empty()).then_some(annotations);
    meta
}

/// Takes the reserved annotation out of `meta`, returning the fields it held.
fn unstash(meta: &ObjectMeta) -> Result<(ObjectMeta, Map<String, Value>), ConversionError> {
    let mut meta = meta.clone();
    let mut annotations: BTreeMap<String, String> = meta.annotations.take().unwrap_or_default();
    let rest = match annotations.remove(V1_FIELDS_ANNOTATION) {
        None => Map::new(),
        Some(json) => {
            serde_json::from_str(&json).map_err(|source| ConversionError::Annotation {
                name: name_of(&meta),
                source,
            })?
        }
    };
    meta.annotations = (!annotations.is_empty()).then_some(annotations);
    Ok((meta, rest))
}

/// Returns the object at `key`, creating it; fails when `key` holds something else.
fn object_entry<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
    name: &str,
) -> Result<&'a mut Map<String, Value>, ConversionError> {
    match map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()))
    {
        Value::Object(inner) => Ok(inner),
        _ => Err(ConversionError::Annotation {
            name: name.to_owned(),
            source: serde::de::Error::custom(format!("`{key}` must be an object")),
        }),
    }
}

pub fn database_to_v1alpha1(db: &v1::Database) -> Result<v1alpha1::Database, ConversionError> {
    let name = name_of(&db.metadata);
    let mut rest = to_object(&db.spec, &name, V1ALPHA1)?;
    rest.remove("version");
    rest.remove("instances");
    if let Some(Value::Object(storage)) = rest.get_mut("storage") {
        storage.remove("size");
        if storage.is_empty() {
            rest.remove("storage");
        }
    }
    if let Some(Value::Object(backup)) = rest.get_mut("backup") {
        // `backup: {schedule}` alone is rebuilt from `backupSchedule`; an empty
        // `backup: {}` without a schedule must be kept to come back as `Some`.
        if backup.remove("schedule").is_some() && backup.is_empty() {
            rest.remove("backup");
        }
    }
    Ok(v1alpha1::Database {
        metadata: stash(&db.metadata, &rest),
        spec: v1alpha1::DatabaseSpec {
            version: db.spec.version.clone(),
            replicas: db.spec.instances,
            storage_size: db.spec.storage.size.clone(),
            backup_schedule: db.spec.backup.as_ref().and_then(|b| b.schedule.clone()),
        },
        status: db.status.clone(),
    })
}

pub fn database_to_v1(db: &v1alpha1::Database) -> Result<v1::Database, ConversionError> {
    let name = name_of(&db.metadata);
    let (metadata, mut spec) = unstash(&db.metadata)?;
    spec.insert("version".into(), Value::from(db.spec.version.clone()));
    spec.insert("instances".into(), Value::from(db.spec.replicas));
    object_entry(&mut spec, "storage", &name)?
        .insert("size".into(), Value::from(db.spec.storage_size.clone()));
    if let Some(schedule) = &db.spec.backup_schedule {
        object_entry(&mut spec, "backup", &name)?
            .insert("schedule".into(), Value::from(schedule.clone()));
    }
    let spec = decode(Value::Object(spec), &name, V1)?;
    Ok(v1::Database {
        metadata,
        spec,
        status: db.status.clone(),
    })
}

pub fn backup_to_v1alpha1(backup: &v1::Backup) -> Result<v1alpha1::Backup, ConversionError> {
    let name = name_of(&backup.metadata);
    let mut rest = to_object(&backup.spec, &name, V1ALPHA1)?;
    rest.remove("database");
    Ok(v1alpha1::Backup {
        metadata: stash(&backup.metadata, &rest),
        spec: v1alpha1::BackupSpec {
            database: backup.spec.database.clone(),
        },
        status: backup.status.clone(),
    })
}

pub fn backup_to_v1(backup: &v1alpha1::Backup) -> Result<v1::Backup, ConversionError> {
    let name = name_of(&backup.metadata);
    let (metadata, mut spec) = unstash(&backup.metadata)?;
    spec.insert("database".into(), Value::from(backup.spec.database.clone()));
    let spec = decode(Value::Object(spec), &name, V1)?;
    Ok(v1::Backup {
        metadata,
        spec,
        status: backup.status.clone(),
    })
}

/// A Drill has the same fields in both versions: v1alpha1 takes what it can
/// hold, and whatever v1 holds beyond it (fields added to v1 later) travels in
/// the annotation.
pub fn drill_to_v1alpha1(drill: &v1::Drill) -> Result<v1alpha1::Drill, ConversionError> {
    let name = name_of(&drill.metadata);
    let full = to_object(&drill.spec, &name, V1ALPHA1)?;
    let spec: v1alpha1::DrillSpec = decode(Value::Object(full.clone()), &name, V1ALPHA1)?;
    let held = to_object(&spec, &name, V1ALPHA1)?;
    let rest: Map<String, Value> = full
        .into_iter()
        .filter(|(key, value)| held.get(key) != Some(value))
        .collect();
    Ok(v1alpha1::Drill {
        metadata: stash(&drill.metadata, &rest),
        spec,
        status: drill.status.clone(),
    })
}

pub fn drill_to_v1(drill: &v1alpha1::Drill) -> Result<v1::Drill, ConversionError> {
    let name = name_of(&drill.metadata);
    let (metadata, mut spec) = unstash(&drill.metadata)?;
    // v1alpha1's own fields win: they are what a v1alpha1 client edited.
    spec.extend(to_object(&drill.spec, &name, V1)?);
    let spec = decode(Value::Object(spec), &name, V1)?;
    Ok(v1::Drill {
        metadata,
        spec,
        status: drill.status.clone(),
    })
}

fn decode<T: serde::de::DeserializeOwned>(
    value: Value,
    name: &str,
    to: &'static str,
) -> Result<T, ConversionError> {
    serde_json::from_value(value).map_err(|source| ConversionError::Shape {
        name: name.to_owned(),
        to,
        source,
    })
}

fn encode<T: serde::Serialize>(
    object: &T,
    api_version: &'static str,
) -> Result<Value, ConversionError> {
    serde_json::to_value(object).map_err(|source| ConversionError::Shape {
        name: "object".to_owned(),
        to: api_version,
        source,
    })
}

/// Converts one raw object (as a ConversionReview carries it) to `desired_api_version`.
/// An object already in that version is returned unchanged.
pub fn convert_object(object: Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(ConversionError::Missing("apiVersion"))?
        .to_owned();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ConversionError::Missing("kind"))?
        .to_owned();
    let unsupported = |api_version: &str| ConversionError::Unsupported {
        kind: kind.clone(),
        api_version: api_version.to_owned(),
    };
    for version in [api_version.as_str(), desired_api_version] {
        if version != V1 && version != V1ALPHA1 {
            return Err(unsupported(version));
        }
    }
    if api_version == desired_api_version {
        return Ok(object);
    }
    match (kind.as_str(), desired_api_version) {
        ("Database", V1) => encode(&database_to_v1(&decode(object, "object", V1ALPHA1)?)?, V1),
        ("Database", _) => encode(
            &database_to_v1alpha1(&decode(object, "object", V1)?)?,
            V1ALPHA1,
        ),
        ("Backup", V1) => encode(&backup_to_v1(&decode(object, "object", V1ALPHA1)?)?, V1),
        ("Backup", _) => encode(
            &backup_to_v1alpha1(&decode(object, "object", V1)?)?,
            V1ALPHA1,
        ),
        ("Drill", V1) => encode(&drill_to_v1(&decode(object, "object", V1ALPHA1)?)?, V1),
        ("Drill", _) => encode(
            &drill_to_v1alpha1(&decode(object, "object", V1)?)?,
            V1ALPHA1,
        ),
        _ => Err(unsupported(&api_version)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn database_v1_round_trip_is_identity(db in arbitrary::database_v1()) {
            let alpha = database_to_v1alpha1(&db).unwrap();
            let back = database_to_v1(&alpha).unwrap();
            prop_assert_eq!(back, db);
        }

        #[test]
        fn database_v1alpha1_round_trip_is_identity(db in arbitrary::database_v1(), fresh in arbitrary::database_v1alpha1()) {
            // Objects Tusk converted, then edited through v1alpha1's own fields.
            let mut alpha = database_to_v1alpha1(&db).unwrap();
            alpha.spec.version = fresh.spec.version.clone();
            alpha.spec.replicas = fresh.spec.replicas;
            alpha.spec.storage_size = fresh.spec.storage_size.clone();
            let back = database_to_v1alpha1(&database_to_v1(&alpha).unwrap()).unwrap();
            prop_assert_eq!(back, alpha);
            // Objects written directly as v1alpha1.
            let back = database_to_v1alpha1(&database_to_v1(&fresh).unwrap()).unwrap();
            prop_assert_eq!(back, fresh);
        }

        #[test]
        fn backup_round_trips_are_identity(backup in arbitrary::backup_v1(), database in "[a-z]{1,20}") {
            let alpha = backup_to_v1alpha1(&backup).unwrap();
            prop_assert_eq!(&backup_to_v1(&alpha).unwrap(), &backup);
            let mut edited = alpha.clone();
            edited.spec.database = database;
            prop_assert_eq!(backup_to_v1alpha1(&backup_to_v1(&edited).unwrap()).unwrap(), edited);
        }

        #[test]
        fn drill_v1_round_trip_is_identity(drill in arbitrary::drill_v1()) {
            let alpha = drill_to_v1alpha1(&drill).unwrap();
            prop_assert_eq!(drill_to_v1(&alpha).unwrap(), drill);
        }

        #[test]
        fn drill_v1alpha1_round_trip_is_identity(drill in arbitrary::drill_v1(), fresh in arbitrary::drill_v1()) {
            // Objects Tusk converted, then edited through v1alpha1's fields.
            let mut alpha = drill_to_v1alpha1(&drill).unwrap();
            let edit = drill_to_v1alpha1(&fresh).unwrap();
            alpha.spec = edit.spec.clone();
            prop_assert_eq!(drill_to_v1alpha1(&drill_to_v1(&alpha).unwrap()).unwrap(), alpha);
            // Objects written directly as v1alpha1 (no annotation).
            let mut written = edit;
            written.metadata.annotations = None;
            prop_assert_eq!(drill_to_v1alpha1(&drill_to_v1(&written).unwrap()).unwrap(), written);
        }

        #[test]
        fn raw_drill_conversion_round_trips(drill in arbitrary::drill_v1()) {
            let raw = serde_json::to_value(&drill).unwrap();
            let alpha = convert_object(raw.clone(), V1ALPHA1).unwrap();
            prop_assert_eq!(alpha.get("apiVersion").and_then(Value::as_str), Some(V1ALPHA1));
            prop_assert_eq!(alpha.get("kind").and_then(Value::as_str), Some("Drill"));
            prop_assert_eq!(&alpha["spec"], &raw["spec"]);
            let back = convert_object(alpha, V1).unwrap();
            prop_assert_eq!(back, raw);
        }

        #[test]
        fn raw_conversion_round_trips(db in arbitrary::database_v1()) {
            let raw = serde_json::to_value(&db).unwrap();
            let alpha = convert_object(raw.clone(), V1ALPHA1).unwrap();
            prop_assert_eq!(alpha.get("apiVersion").and_then(Value::as_str), Some(V1ALPHA1));
            let back = convert_object(alpha, V1).unwrap();
            prop_assert_eq!(back, raw);
        }
    }

    #[test]
    fn flat_fields_map_onto_v1() {
        let alpha: v1alpha1::Database = serde_json::from_value(serde_json::json!({
            "apiVersion": V1ALPHA1, "kind": "Database",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"version": "15", "replicas": 3, "storageSize": "10Gi", "backupSchedule": "0 2 * * *"}
        }))
        .unwrap();
        let db = database_to_v1(&alpha).unwrap();
        assert_eq!(db.spec.version, "15");
        assert_eq!(db.spec.instances, 3);
        assert_eq!(db.spec.storage.size, "10Gi");
        assert_eq!(
            db.spec.backup.unwrap().schedule.as_deref(),
            Some("0 2 * * *")
        );
        assert!(db.metadata.annotations.is_none());
    }

    #[test]
    fn v1_only_fields_travel_in_the_annotation() {
        let mut db = arbitrary::sample_database();
        db.spec.storage.storage_class_name = Some("fast".into());
        db.spec.primary = Some("orders-2".into());
        let alpha = database_to_v1alpha1(&db).unwrap();
        let note = &alpha.metadata.annotations.as_ref().unwrap()[V1_FIELDS_ANNOTATION];
        let fields: Value = serde_json::from_str(note).unwrap();
        assert_eq!(fields["storage"]["storageClassName"], "fast");
        assert_eq!(fields["primary"], "orders-2");
        assert!(
            fields.get("version").is_none(),
            "flat fields are not duplicated: {note}"
        );
    }

    #[test]
    fn a_broken_annotation_is_a_clear_failure() {
        let mut alpha = database_to_v1alpha1(&arbitrary::sample_database()).unwrap();
        alpha
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(V1_FIELDS_ANNOTATION.into(), "{not json".into());
        let err = database_to_v1(&alpha).unwrap_err().to_string();
        assert!(err.contains(V1_FIELDS_ANNOTATION), "{err}");
    }

    #[test]
    fn unknown_versions_and_kinds_are_refused() {
        let raw = serde_json::json!({"apiVersion": "tusk.dev/v2", "kind": "Database"});
        assert!(matches!(
            convert_object(raw, V1),
            Err(ConversionError::Unsupported { .. })
        ));
        let raw =
            serde_json::json!({"apiVersion": V1, "kind": "Cluster", "metadata": {}, "spec": {}});
        assert!(matches!(
            convert_object(raw, V1ALPHA1),
            Err(ConversionError::Unsupported { .. })
        ));
    }
}
