//! Validating admission for Database and Backup: the same checks the reconciler
//! runs (`crate::api::validate`), answered as AdmissionReview responses. The
//! webhook is registered for v1 only with `matchPolicy: Equivalent`, so the API
//! server converts v1alpha1 requests to v1 before they arrive here.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::de::DeserializeOwned;

use crate::api::store;
use crate::api::v1::{Backup, Database, ObjectStore};
use crate::api::validate::{self, FieldError};

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

/// Legal changes that deserve a second look.
pub fn database_warnings(old: &Database, new: &Database) -> Vec<String> {
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
            "spec.version goes from major {} to {}: a major upgrade runs pg_upgrade and cannot be undone",
            before.major, after.major
        ));
    }
    if new.spec.instances == 1 && old.spec.instances > 1 {
        warnings.push(
            "spec.instances is 1: the database will have no replica to fail over to".to_owned(),
        );
    }
    warnings
}

/// The decision for one Database request (pure), `default_store` being the
/// operator's default object store.
pub fn review_database(
    request: &AdmissionRequest<DynamicObject>,
    default_store: Option<&ObjectStore>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    match request.operation {
        Operation::Create => match decode::<Database>(request.object.as_ref(), "object") {
            Ok(db) => {
                let errors = validate::database(&store::with_default(&db, default_store));
                if errors.is_empty() {
                    response
                } else {
                    deny(response, &errors)
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
                    let errors = validate::database_update(
                        &store::with_default(&old, default_store),
                        &store::with_default(&new, default_store),
                    );
                    if errors.is_empty() {
                        with_warnings(response, database_warnings(&old, &new))
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

/// Unwraps a review into its request; the error is the answer for an unusable review.
pub fn request_of(
    review: AdmissionReview<DynamicObject>,
) -> Result<AdmissionRequest<DynamicObject>, String> {
    review
        .try_into()
        .map_err(|e| format!("not an AdmissionReview request: {e}"))
}

/// The name of the Database a Backup request names, to look up before [`review_backup`].
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
        let response = review_database(&review("CREATE", db_json(|_| {}), None), None);
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

    #[test]
    fn downgrades_and_shrinking_are_denied_on_update() {
        let old = db_json(|_| {});
        let new = db_json(|db| {
            db.spec.version = "15".into();
            db.spec.storage.size = "100Mi".into();
        });
        let response = review_database(&review("UPDATE", new, Some(old)), None);
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
        let response = review_database(&review("UPDATE", new, Some(old)), None);
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

    #[test]
    fn deletes_are_always_allowed() {
        assert!(
            review_database(&review("DELETE", Value::Null, Some(db_json(|_| {}))), None).allowed
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

    #[test]
    fn an_object_of_the_wrong_shape_is_denied_not_panicked_on() {
        let response = review_database(
            &review(
                "CREATE",
                json!({"apiVersion": "tusk.dev/v1", "kind": "Database", "metadata": {"name": "x"}, "spec": {"version": 17}}),
                None,
            ),
            None,
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
}
