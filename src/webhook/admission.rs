//! Validating admission for Database, Backup and Drill: the same checks the
//! reconciler runs (`crate::api::validate`; [`validate::validated`] for a new
//! Database; `crate::api::validate_drill` for a Drill), answered as AdmissionReview responses. The
//! webhook is registered for v1 only with `matchPolicy: Equivalent`, so the API
//! server converts v1alpha1 requests to v1 before they arrive here.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::de::DeserializeOwned;

use crate::api::expose::{self, NodePortRange};
use crate::api::model::Defaults;
use crate::api::store;
use crate::api::v1::{Backup, Database, Drill, ObjectStore};
use crate::api::validate::{self, FieldError};
use crate::api::validate_drill;

fn decode<T: DeserializeOwned>(object: Option<&DynamicObject>, what: &str) -> Result<T, String> {
    let object = object.ok_or_else(|| format!("the request carries no {what}"))?;
    let value = serde_json::to_value(object).map_err(|e| format!("cannot read the {what}: {e}"))?;
    serde_json::from_value(value)
        .map_err(|e| format!("the {what} is not a valid tusk.dev/v1 object: {e}"))
}

fn deny(response: AdmissionResponse, errors: &[FieldError]) -> AdmissionResponse {
    let mut response = response.deny(validate::summary(errors));
    response.result.code = 422;
    response.result.reason = "Invalid".to_owned();
    response
}

fn with_warnings(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// How recent a base backup must be for a major upgrade not to warn.
const RECENT_BACKUP: SignedDuration = SignedDuration::from_hours(24);

/// Legal changes that deserve a second look. `new` has the operator's
/// default store filled in ([`store::with_default`]), and `now` dates the
/// last backup.
pub fn database_warnings(old: &Database, new: &Database, now: Timestamp) -> Vec<String> {
    let mut warnings = Vec::new();
    if new.spec.instances < old.spec.instances {
        warnings.push(format!(
            "spec.instances goes from {} to {}: the highest-numbered replicas and their volumes will be removed",
            old.spec.instances, new.spec.instances
        ));
    }
    if let (Ok(before), Ok(after)) = (
        old.spec.version.parse::<validate::PgVersion>(),
        new.spec.version.parse::<validate::PgVersion>(),
    ) && after.major > before.major
    {
        warnings.push(format!(
            "spec.version goes from major {} to {}: a major upgrade runs pg_upgrade and cannot be undone once the upgraded server accepts writes",
            before.major, after.major
        ));
        warnings.extend(backup_warning(old, new, before.major, after.major, now));
    }
    if new.spec.instances == 1 && old.spec.instances > 1 {
        warnings.push(
            "spec.instances is 1: the database will have no replica to fail over to".to_owned(),
        );
    }
    warnings.extend(creation_warnings(new));
    warnings
}

/// What deserves a second look in a Database on its own, created or
/// updated: a published endpoint open to every address.
fn creation_warnings(db: &Database) -> Vec<String> {
    expose::warnings(
        db.metadata.name.as_deref().unwrap_or_default(),
        &db.spec.expose,
    )
}

/// A major upgrade without a recent base backup to go back to. The last
/// backup is read from `old`'s status: the stored one, whatever the request
/// carries.
fn backup_warning(
    old: &Database,
    db: &Database,
    from: u32,
    to: u32,
    now: Timestamp,
) -> Option<String> {
    let upgrade = format!("spec.version: major upgrade {from} → {to}");
    let has_store = db
        .spec
        .backup
        .as_ref()
        .is_some_and(|b| b.object_store.is_some());
    if !has_store {
        return Some(format!(
            "{upgrade} of a Database without an object store: no base backup is taken first; \
             set spec.backup.objectStore to have one"
        ));
    }
    let completed = old
        .status
        .as_ref()
        .and_then(|s| s.last_backup.as_ref())
        .and_then(|b| b.completed_at.as_ref())
        .map(|t| t.0);
    if completed.is_some_and(|at| now.duration_since(at) <= RECENT_BACKUP) {
        return None;
    }
    Some(if db.spec.upgrade.backup_first {
        format!(
            "{upgrade} without a base backup in the last 24 h; Tusk takes one first unless spec.upgrade.backupFirst is false"
        )
    } else {
        format!(
            "{upgrade} without a base backup in the last 24 h, and spec.upgrade.backupFirst is false: none is taken first"
        )
    })
}

/// The decision for one Database request (pure), `default_store` being the
/// operator's default object store and `node_ports` the cluster's node-port
/// range.
pub fn review_database(
    request: &AdmissionRequest<DynamicObject>,
    default_store: Option<&ObjectStore>,
    node_ports: NodePortRange,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    match request.operation {
        Operation::Create => match decode::<Database>(request.object.as_ref(), "object") {
            Ok(db) => {
                // The reconciler's validation: only its verdict matters here,
                // so the model's image needs no repository.
                let defaults = Defaults {
                    store: default_store,
                    node_ports,
                    ..Defaults::default()
                };
                match validate::validated(&db, &defaults) {
                    Ok(_) => with_warnings(response, creation_warnings(&db)),
                    Err(errors) => deny(response, &errors),
                }
            }
            Err(message) => response.deny(message),
        },
        Operation::Update => {
            let new = decode::<Database>(request.object.as_ref(), "object");
            let old = decode::<Database>(request.old_object.as_ref(), "old object");
            match (old, new) {
                (Ok(old), Ok(new)) => {
                    // Status and metadata-only updates never need a spec check.
                    if request.sub_resource.is_some() || old.spec == new.spec {
                        return response;
                    }
                    let old = store::with_default(&old, default_store);
                    let new = store::with_default(&new, default_store);
                    let mut errors = validate::database_update(&old, &new);
                    errors.extend(expose::node_port_errors(&new.spec.expose, node_ports));
                    if errors.is_empty() {
                        with_warnings(response, database_warnings(&old, &new, Timestamp::now()))
                    } else {
                        deny(response, &errors)
                    }
                }
                (Err(message), _) | (_, Err(message)) => response.deny(message),
            }
        }
        Operation::Delete | Operation::Connect => response,
    }
}

/// The decision for one Backup request, given the Database it names as looked up
/// in the request's namespace (pure).
pub fn review_backup(
    request: &AdmissionRequest<DynamicObject>,
    database: Option<&Database>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if request.operation != Operation::Create {
        return response;
    }
    match decode::<Backup>(request.object.as_ref(), "object") {
        Ok(backup) => {
            let errors = validate::backup(&backup, database);
            if errors.is_empty() {
                response
            } else {
                deny(response, &errors)
            }
        }
        Err(message) => response.deny(message),
    }
}

/// The decision for one Drill request, given the Database it names as looked
/// up in the request's namespace (pure). An update that leaves the spec alone
/// (status, finalizers, labels) is never checked: a Drill whose Database is
/// gone can still be finalized and deleted.
pub fn review_drill(
    request: &AdmissionRequest<DynamicObject>,
    database: Option<&Database>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let drill = match request.operation {
        Operation::Create => decode::<Drill>(request.object.as_ref(), "object"),
        Operation::Update => {
            let new = decode::<Drill>(request.object.as_ref(), "object");
            let old = decode::<Drill>(request.old_object.as_ref(), "old object");
            match (old, new) {
                (Ok(old), Ok(new)) if request.sub_resource.is_some() || old.spec == new.spec => {
                    return response;
                }
                (Ok(_), new) => new,
                (Err(message), _) => Err(message),
            }
        }
        Operation::Delete | Operation::Connect => return response,
    };
    match drill {
        Ok(drill) => {
            let errors = validate_drill::errors(&drill, database);
            if errors.is_empty() {
                with_warnings(response, validate_drill::warnings(&drill))
            } else {
                deny(response, &errors)
            }
        }
        Err(message) => response.deny(message),
    }
}

/// Unwraps a review into its request; the error is the answer for an unusable review.
pub fn request_of(
    review: AdmissionReview<DynamicObject>,
) -> Result<AdmissionRequest<DynamicObject>, String> {
    review
        .try_into()
        .map_err(|e| format!("not an AdmissionReview request: {e}"))
}

/// The name of the Database a Backup or Drill request names, to look up
/// before [`review_backup`] or [`review_drill`].
pub fn backup_database_name(request: &AdmissionRequest<DynamicObject>) -> Option<String> {
    request
        .object
        .as_ref()
        .and_then(|o| o.data.get("spec"))
        .and_then(|s| s.get("database"))
        .and_then(|d| d.as_str())
        .map(str::to_owned)
}

/// The answer to a review that carried no usable request.
pub fn unusable(message: String) -> AdmissionReview<DynamicObject> {
    AdmissionResponse::invalid(message).into_review()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary::sample_database;
    use serde_json::{Value, json};

    fn review(
        operation: &str,
        object: Value,
        old: Option<Value>,
    ) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "tusk.dev", "version": "v1", "kind": "Database"},
                "resource": {"group": "tusk.dev", "version": "v1", "resource": "databases"},
                "requestKind": {"group": "tusk.dev", "version": "v1", "kind": "Database"},
                "requestResource": {"group": "tusk.dev", "version": "v1", "resource": "databases"},
                "name": "orders", "namespace": "shop",
                "operation": operation,
                "userInfo": {"username": "admin"},
                "object": object,
                "oldObject": old,
                "dryRun": false
            }
        }))
        .unwrap();
        request_of(review).unwrap()
    }

    fn db_json(mutate: impl FnOnce(&mut Database)) -> Value {
        let mut db = sample_database();
        mutate(&mut db);
        serde_json::to_value(db).unwrap()
    }

    #[test]
    fn a_valid_create_is_allowed() {
        let response = review_database(
            &review("CREATE", db_json(|_| {}), None),
            None,
            NodePortRange::default(),
        );
        assert!(response.allowed);
        assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
    }

    #[test]
    fn an_invalid_create_is_denied_naming_the_field() {
        let response = review_database(
            &review(
                "CREATE",
                db_json(|db| {
                    db.spec
                        .postgresql
                        .parameters
                        .insert("port".into(), "6543".into());
                }),
                None,
            ),
            None,
            NodePortRange::default(),
        );
        assert!(!response.allowed);
        assert_eq!(response.result.code, 422);
        assert!(
            response
                .result
                .message
                .contains("spec.postgresql.parameters.port"),
            "{}",
            response.result.message
        );
    }

    /// The four recovery refusals, as a create reaches the handler: denied
    /// (422), the message naming the field.
    #[test]
    fn each_recovery_refusal_is_denied_naming_the_field() {
        use crate::api::v1::{BootstrapSpec, ObjectStore, RecoverySpec};
        let recovering = |recovery: RecoverySpec| {
            db_json(|db| {
                db.spec.bootstrap = Some(BootstrapSpec {
                    initdb: None,
                    recovery: Some(recovery),
                })
            })
        };
        let by_name = || RecoverySpec {
            source_name: Some("orders".into()),
            ..Default::default()
        };
        let cases = [
            (
                RecoverySpec {
                    target_time: Some("22/11/2026 10:00".into()),
                    ..by_name()
                },
                "spec.bootstrap.recovery.targetTime: \"22/11/2026 10:00\" is not an RFC 3339 time",
            ),
            (
                RecoverySpec {
                    backup: Some("nightly".into()),
                    ..by_name()
                },
                "spec.bootstrap.recovery: must name exactly one of backup, source or sourceName",
            ),
            (
                RecoverySpec {
                    source: Some("orders".into()),
                    object_store: Some(ObjectStore {
                        bucket: "b".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "spec.bootstrap.recovery.objectStore: is not used with source",
            ),
            (
                RecoverySpec {
                    target_time: Some("2026-11-22T10:00:00Z".into()),
                    target_lsn: Some("0/3000000".into()),
                    ..by_name()
                },
                "spec.bootstrap.recovery: may set targetTime or targetLsn, not both",
            ),
        ];
        let wrong: Vec<String> = cases
            .into_iter()
            .filter_map(|(recovery, named)| {
                let response = review_database(
                    &review("CREATE", recovering(recovery), None),
                    None,
                    NodePortRange::default(),
                );
                let denied = !response.allowed
                    && response.result.code == 422
                    && response.result.message.contains(named);
                (!denied).then(|| format!("not denied with {named:?}: {:?}", response.result))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
        let response = review_database(
            &review("CREATE", recovering(by_name()), None),
            None,
            NodePortRange::default(),
        );
        assert!(response.allowed, "{}", response.result.message);
    }

    #[test]
    fn downgrades_and_shrinking_are_denied_on_update() {
        let old = db_json(|_| {});
        let new = db_json(|db| {
            db.spec.version = "15".into();
            db.spec.storage.size = "100Mi".into();
        });
        let response = review_database(
            &review("UPDATE", new, Some(old)),
            None,
            NodePortRange::default(),
        );
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .contains("spec.version: cannot go down"),
            "{}",
            response.result.message
        );
        assert!(
            response
                .result
                .message
                .contains("spec.storage.size: cannot shrink"),
            "{}",
            response.result.message
        );
    }

    #[test]
    fn scaling_down_is_allowed_with_a_warning() {
        let old = db_json(|_| {});
        let new = db_json(|db| db.spec.instances = 1);
        let response = review_database(
            &review("UPDATE", new, Some(old)),
            None,
            NodePortRange::default(),
        );
        assert!(response.allowed);
        let warnings = response.warnings.unwrap();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("spec.instances goes from 3 to 1")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("no replica")),
            "{warnings:?}"
        );
    }

    fn upgrade(
        store: bool,
        backup_first: bool,
        completed: Option<Timestamp>,
    ) -> (Database, Database) {
        let mut old = sample_database();
        old.spec.version = "15".into();
        if store {
            old.spec.backup = Some(crate::api::v1::BackupConfig {
                object_store: Some(ObjectStore {
                    bucket: "backups".into(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        old.status = Some(crate::api::status::DatabaseStatus {
            last_backup: completed.map(|at| crate::api::status::LastBackup {
                name: "orders-1".into(),
                completed_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at)),
            }),
            ..Default::default()
        });
        let mut new = old.clone();
        new.spec.version = "17".into();
        new.spec.upgrade.backup_first = backup_first;
        (old, new)
    }

    fn now() -> Timestamp {
        "2026-11-24T12:00:00Z".parse().unwrap()
    }

    fn backup_warnings(old: &Database, new: &Database) -> Vec<String> {
        database_warnings(old, new, now())
            .into_iter()
            .filter(|w| w.starts_with("spec.version: major upgrade"))
            .collect()
    }

    #[test]
    fn a_major_upgrade_without_a_recent_backup_warns() {
        let day_and_a_bit = now() - SignedDuration::from_hours(25);
        for completed in [None, Some(day_and_a_bit)] {
            let (old, new) = upgrade(true, true, completed);
            assert_eq!(
                backup_warnings(&old, &new),
                [
                    "spec.version: major upgrade 15 → 17 without a base backup in the last 24 h; \
                  Tusk takes one first unless spec.upgrade.backupFirst is false"
                ],
                "{completed:?}"
            );
        }
        let (old, new) = upgrade(true, false, None);
        assert_eq!(
            backup_warnings(&old, &new),
            [
                "spec.version: major upgrade 15 → 17 without a base backup in the last 24 h, \
              and spec.upgrade.backupFirst is false: none is taken first"
            ]
        );
    }

    #[test]
    fn a_major_upgrade_with_a_recent_backup_does_not_warn_about_backups() {
        let (old, new) = upgrade(true, true, Some(now() - SignedDuration::from_hours(3)));
        assert_eq!(backup_warnings(&old, &new), Vec::<String>::new());
        // Still the warning that it is a major upgrade.
        assert!(
            database_warnings(&old, &new, now())
                .iter()
                .any(|w| w.contains("runs pg_upgrade"))
        );
        // A minor change is no major upgrade.
        let mut minor = old.clone();
        minor.spec.version = "15.9".into();
        assert_eq!(database_warnings(&old, &minor, now()), Vec::<String>::new());
    }

    #[test]
    fn a_major_upgrade_without_an_object_store_warns() {
        let (old, new) = upgrade(false, true, None);
        assert_eq!(
            backup_warnings(&old, &new),
            [
                "spec.version: major upgrade 15 → 17 of a Database without an object store: \
              no base backup is taken first; set spec.backup.objectStore to have one"
            ]
        );
    }

    #[test]
    fn the_review_carries_the_backup_warning() {
        let old = db_json(|db| db.spec.version = "15".into());
        let new = db_json(|db| db.spec.version = "17".into());
        let response = review_database(
            &review("UPDATE", new, Some(old)),
            None,
            NodePortRange::default(),
        );
        assert!(response.allowed);
        let warnings = response.warnings.unwrap_or_default();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("without an object store")),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_migration_without_an_image_is_denied_naming_the_field() {
        let response = review_database(
            &review(
                "CREATE",
                db_json(|db| {
                    db.spec.migrations = Some(crate::api::v1::MigrationsSpec {
                        version: "2026.11".into(),
                        image: String::new(),
                        ..Default::default()
                    })
                }),
                None,
            ),
            None,
            NodePortRange::default(),
        );
        assert!(!response.allowed);
        assert!(
            response.result.message.contains("spec.migrations.image"),
            "{}",
            response.result.message
        );
    }

    #[test]
    fn a_major_change_keeping_a_pinned_image_is_denied_naming_spec_image() {
        let old = db_json(|db| {
            db.spec.version = "15".into();
            db.spec.image = Some("postgres:15".into());
        });
        let new = db_json(|db| {
            db.spec.version = "17".into();
            db.spec.image = Some("postgres:15".into());
        });
        let response = review_database(
            &review("UPDATE", new, Some(old)),
            None,
            NodePortRange::default(),
        );
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .starts_with("spec.image: is still postgres:15"),
            "{}",
            response.result.message
        );
    }

    #[test]
    fn deletes_are_always_allowed() {
        assert!(
            review_database(
                &review("DELETE", Value::Null, Some(db_json(|_| {}))),
                None,
                NodePortRange::default()
            )
            .allowed
        );
    }

    #[test]
    fn a_backup_of_a_missing_database_is_denied() {
        let backup = json!({
            "apiVersion": "tusk.dev/v1", "kind": "Backup",
            "metadata": {"name": "b", "namespace": "shop"},
            "spec": {"database": "orders"}
        });
        let request = review("CREATE", backup, None);
        assert_eq!(backup_database_name(&request).as_deref(), Some("orders"));
        let response = review_backup(&request, None);
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .contains("spec.database: no Database \"orders\"")
        );
    }

    fn drill_request(
        operation: &str,
        drill: &Drill,
        old: Option<&Drill>,
    ) -> AdmissionRequest<DynamicObject> {
        let mut request = review(
            operation,
            serde_json::to_value(drill).unwrap(),
            old.map(|o| serde_json::to_value(o).unwrap()),
        );
        request.kind.kind = "Drill".into();
        request
    }

    #[test]
    fn a_drill_is_denied_naming_the_field_and_warned_about_what_it_ignores() {
        use crate::api::arbitrary::sample_drill;
        let mut drill = sample_drill();
        drill.spec.schedule = Some("sometimes".into());
        let request = drill_request("CREATE", &drill, None);
        assert_eq!(backup_database_name(&request).as_deref(), Some("orders"));
        let response = review_drill(&request, Some(&sample_database()));
        assert!(!response.allowed);
        assert_eq!(response.result.code, 422);
        assert!(
            response.result.message.starts_with("spec.schedule: "),
            "{}",
            response.result.message
        );
        let response = review_drill(&drill_request("CREATE", &sample_drill(), None), None);
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .starts_with("spec.database: no Database \"orders\""),
            "{}",
            response.result.message
        );
        let mut ignored = sample_drill();
        ignored.spec.duration_seconds = Some(30);
        let response = review_drill(
            &drill_request("CREATE", &ignored, None),
            Some(&sample_database()),
        );
        assert!(response.allowed, "{}", response.result.message);
        assert!(
            response
                .warnings
                .unwrap_or_default()
                .iter()
                .any(|w| w.starts_with("spec.durationSeconds (30) is ignored")),
        );
    }

    #[test]
    fn a_drill_update_is_checked_only_when_its_spec_changes() {
        use crate::api::arbitrary::sample_drill;
        let old = sample_drill();
        let mut finalized = old.clone();
        finalized.metadata.finalizers = Some(vec!["tusk.dev/cleanup".into()]);
        // The Database is gone: a metadata update still passes.
        assert!(review_drill(&drill_request("UPDATE", &finalized, Some(&old)), None).allowed);
        let mut rescheduled = old.clone();
        rescheduled.spec.schedule = Some("0 3 * * *".into());
        assert!(
            review_drill(
                &drill_request("UPDATE", &rescheduled, Some(&old)),
                Some(&sample_database())
            )
            .allowed
        );
        rescheduled.spec.schedule = Some("0 25 * * *".into());
        let response = review_drill(
            &drill_request("UPDATE", &rescheduled, Some(&old)),
            Some(&sample_database()),
        );
        assert!(!response.allowed);
        assert!(response.result.message.starts_with("spec.schedule: "));
    }

    #[test]
    fn an_object_of_the_wrong_shape_is_denied_not_panicked_on() {
        let response = review_database(
            &review(
                "CREATE",
                json!({"apiVersion": "tusk.dev/v1", "kind": "Database", "metadata": {"name": "x"}, "spec": {"version": 17}}),
                None,
            ),
            None,
            NodePortRange::default(),
        );
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .contains("not a valid tusk.dev/v1 object"),
            "{}",
            response.result.message
        );
    }

    fn exposed(ranges: &[&str], node_port: Option<i32>) -> Value {
        use crate::api::expose::{ExposeSpec, ExposeTarget, ExposeType};
        let ranges: Vec<String> = ranges.iter().map(|r| (*r).to_owned()).collect();
        db_json(|db| {
            db.spec.expose = vec![
                ExposeSpec {
                    target: ExposeTarget::Rw,
                    type_: ExposeType::LoadBalancer,
                    allowed_source_ranges: ranges,
                    annotations: Default::default(),
                    hostname: None,
                    load_balancer_class: None,
                    external_traffic_policy: None,
                    node_port: None,
                },
                ExposeSpec {
                    target: ExposeTarget::Ro,
                    type_: ExposeType::NodePort,
                    allowed_source_ranges: Vec::new(),
                    annotations: Default::default(),
                    hostname: None,
                    load_balancer_class: None,
                    external_traffic_policy: None,
                    node_port,
                },
            ];
        })
    }

    #[test]
    fn a_load_balancer_open_to_everyone_is_admitted_with_a_warning() {
        for operation in ["CREATE", "UPDATE"] {
            let old = (operation == "UPDATE").then(|| db_json(|_| {}));
            let request = review(operation, exposed(&["0.0.0.0/0"], None), old);
            let response = review_database(&request, None, NodePortRange::default());
            assert!(response.allowed, "{operation}: {}", response.result.message);
            let warnings = response.warnings.unwrap_or_default();
            assert!(
                warnings.iter().any(|w| w.starts_with(
                    "spec.expose[0].allowedSourceRanges[0] is 0.0.0.0/0: Service orders-rw-lb"
                )),
                "{operation}: {warnings:?}"
            );
        }
        let narrow = review("CREATE", exposed(&["192.0.2.0/24"], None), None);
        let response = review_database(&narrow, None, NodePortRange::default());
        assert!(response.allowed);
        assert_eq!(response.warnings, None);
    }

    #[test]
    fn bad_exposure_is_denied_naming_the_field_on_create_and_update() {
        let narrow: NodePortRange = "31000-31999".parse().expect("a range");
        for operation in ["CREATE", "UPDATE"] {
            let old = || (operation == "UPDATE").then(|| db_json(|_| {}));
            let bad_cidr = review(operation, exposed(&["192.0.2.0/33"], None), old());
            let response = review_database(&bad_cidr, None, narrow);
            assert!(!response.allowed, "{operation}");
            assert!(
                response.result.message.contains(
                    "spec.expose[0].allowedSourceRanges[0]: \"192.0.2.0/33\" is not a CIDR"
                ),
                "{operation}: {}",
                response.result.message
            );
            let outside = review(operation, exposed(&["192.0.2.0/24"], Some(30_100)), old());
            let response = review_database(&outside, None, narrow);
            assert!(!response.allowed, "{operation}");
            assert_eq!(
                response.result.message,
                "spec.expose[1].nodePort: 30100 is outside the cluster's node-port range 31000-31999",
                "{operation}"
            );
            let inside = review(operation, exposed(&["192.0.2.0/24"], Some(31_100)), old());
            assert!(
                review_database(&inside, None, narrow).allowed,
                "{operation}"
            );
        }
    }
}
