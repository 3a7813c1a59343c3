//! Scenario tests of the reconcile shell against a mocked API server: they pin the
//! exact API calls one pass makes.

use std::sync::Arc;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::events::Reporter;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::{primary_first, reconcile};
use crate::api::arbitrary::sample_database;
use crate::api::v1::Database;
use crate::controller::{Context, FINALIZER};
use crate::telemetry::metrics::Metrics;

pub(super) type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// A Context whose client talks to a mock API server (the returned handle).
pub(super) fn context() -> (Arc<Context>, Handle) {
    context_with(crate::controller::caches::Caches::default())
}

/// [`context`] whose passes read `caches`.
fn context_with(caches: crate::controller::caches::Caches) -> (Arc<Context>, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let metrics = Metrics::register(&mut Registry::default());
    let reporter = Reporter {
        controller: "tusk".into(),
        instance: Some("test".into()),
    };
    let build = crate::resources::BuildConfig {
        postgres_repository: "localhost/postgres".into(),
        tusk_image: "localhost/tusk:dev".into(),
        image_pull_policy: Some("IfNotPresent".into()),
        instance_env: Vec::new(),
        default_store: None,
        instance_self_label: false,
        node_ports: Default::default(),
    };
    (
        Context::for_databases(client, metrics, reporter, build, caches),
        handle,
    )
}

/// Waits for the next request, checks its method and path, and answers with `reply`.
async fn expect(handle: &mut Handle, method: Method, path: &str, reply: Value) -> Value {
    expect_code(handle, method, path, 200, reply).await
}

/// [`expect`] answering with status `code`.
async fn expect_code(
    handle: &mut Handle,
    method: Method,
    path: &str,
    code: u16,
    reply: Value,
) -> Value {
    let (request, send) = handle
        .next_request()
        .await
        .expect("the reconciler made no further request");
    assert_eq!(request.method(), method, "{}", request.uri());
    assert_eq!(request.uri().path(), path);
    let bytes = request.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    send.send_response(
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&reply).unwrap()))
            .unwrap(),
    );
    body
}

const DB_PATH: &str = "/apis/tusk.dev/v1/namespaces/shop/databases/orders";

#[tokio::test]
async fn first_pass_adds_the_finalizer_and_nothing_else() {
    let (ctx, mut handle) = context();
    let db = sample_database();
    let server = tokio::spawn(async move {
        let patch = expect(
            &mut handle,
            Method::PATCH,
            DB_PATH,
            serde_json::to_value(sample_database()).unwrap(),
        )
        .await;
        assert!(patch.to_string().contains(FINALIZER), "{patch}");
        handle
    });
    reconcile(Arc::new(db), ctx).await.unwrap();
    let mut handle = server.await.unwrap();
    // No status write and no event before the finalizer is in place.
    let extra =
        tokio::time::timeout(std::time::Duration::from_millis(100), handle.next_request()).await;
    assert!(
        matches!(extra, Err(_) | Ok(None)),
        "unexpected extra request"
    );
}

fn with_finalizer(mut db: Database) -> Database {
    db.metadata.finalizers = Some(vec![FINALIZER.into()]);
    db
}

/// Answers every request like an empty namespace would: lists are empty, and
/// creates and applies echo the object. Returns each request's method, path and body.
async fn serve_empty_namespace(handle: Handle, db: Value) -> Vec<(Method, String, Value)> {
    serve_namespace(handle, db, |_, _| None).await
}

/// [`serve_empty_namespace`], except for the requests `answer` answers
/// itself (with a status code and a body).
async fn serve_namespace(
    mut handle: Handle,
    db: Value,
    answer: impl Fn(&Method, &str) -> Option<(u16, Value)>,
) -> Vec<(Method, String, Value)> {
    let mut seen = Vec::new();
    while let Ok(Some((request, send))) =
        tokio::time::timeout(std::time::Duration::from_secs(2), handle.next_request()).await
    {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let bytes = request.into_body().collect().await.unwrap().to_bytes();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        if let Some((code, reply)) = answer(&method, &path) {
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap(),
            );
            seen.push((method, path, body));
            continue;
        }
        let named = [
            "/leases/",
            "/serviceaccounts/",
            "/roles/",
            "/rolebindings/",
            "/secrets/",
            "/services/",
        ]
        .iter()
        .any(|kind| path.contains(kind));
        if method == Method::GET && named {
            let status = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": "NotFound", "code": 404, "message": "not found" });
            send.send_response(
                Response::builder()
                    .status(404)
                    .body(Body::from(serde_json::to_vec(&status).unwrap()))
                    .unwrap(),
            );
            seen.push((method, path, body));
            continue;
        }
        let reply = if method == Method::GET {
            json!({ "apiVersion": "v1", "kind": "List", "metadata": {}, "items": [] })
        } else if path.ends_with("/status") {
            db.clone()
        } else {
            body.clone()
        };
        send.send_response(
            Response::builder()
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap(),
        );
        seen.push((method, path, body));
    }
    seen
}

#[tokio::test]
async fn a_first_pass_creates_credentials_services_and_the_first_volume_then_writes_status() {
    let (ctx, handle) = context();
    let mut db = with_finalizer(sample_database());
    db.metadata.generation = Some(4);
    db.metadata.uid = Some("uid-orders".into());
    let server = tokio::spawn(serve_empty_namespace(
        handle,
        serde_json::to_value(&db).unwrap(),
    ));
    let action = reconcile(Arc::new(db), ctx).await.unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(5))
    );
    let seen = server.await.unwrap();
    let calls: Vec<String> = seen
        .iter()
        .filter(|(_, path, _)| !path.contains("/events"))
        .map(|(method, path, _)| format!("{method} {path}"))
        .collect();
    let ns = "/api/v1/namespaces/shop";
    assert_eq!(
        calls,
        [
            format!("GET {ns}/persistentvolumeclaims"),
            "GET /apis/batch/v1/namespaces/shop/jobs".to_owned(),
            format!("GET {ns}/pods"),
            // The operator's client material, before the managers are polled.
            format!("GET {ns}/secrets/orders-ca"),
            "GET /apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-primary".to_owned(),
            format!("GET {ns}/serviceaccounts/orders-instance"),
            "GET /apis/rbac.authorization.k8s.io/v1/namespaces/shop/roles/orders-instance"
                .to_owned(),
            "GET /apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings/orders-instance"
                .to_owned(),
            // TLS: `<db>-app` (the role's certificate) observed, with the
            // `<db>-ca` read above (each Secret once a pass), then `<db>-ca`
            // made (read again before the write).
            format!("GET {ns}/secrets/orders-app"),
            format!("POST {ns}/secrets"),
            format!("POST {ns}/secrets"),
            format!("POST {ns}/secrets"),
            format!("POST {ns}/secrets"),
            format!("PATCH {ns}/services/orders-rw"),
            format!("PATCH {ns}/services/orders-ro"),
            format!("PATCH {ns}/services/orders-r"),
            format!("PATCH {ns}/serviceaccounts/orders-instance"),
            "PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/shop/roles/orders-instance"
                .to_owned(),
            "PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings/orders-instance"
                .to_owned(),
            "PATCH /apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-primary".to_owned(),
            format!("GET {ns}/secrets/orders-ca"),
            format!("PATCH {ns}/secrets/orders-ca"),
            format!("PATCH {ns}/persistentvolumeclaims/orders-1"),
            format!("PATCH {DB_PATH}/status"),
        ]
    );
    // No pod yet: the first primary waits for its volume's pass.
    assert!(!calls.iter().any(|c| c.contains("/pods/")));
    let secrets: Vec<&str> = seen
        .iter()
        .filter(|(m, p, _)| m == Method::POST && p.ends_with("/secrets"))
        .map(|(_, _, body)| body["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        secrets,
        [
            "orders-superuser",
            "orders-app",
            "orders-replication",
            "orders-token"
        ]
    );
    let passwords: std::collections::BTreeSet<&str> = seen
        .iter()
        .filter(|(m, p, _)| m == Method::POST && p.ends_with("/secrets"))
        .map(|(_, _, body)| body["data"]["password"].as_str().unwrap())
        .collect();
    assert_eq!(passwords.len(), 4, "every Secret gets its own password");
    let (_, _, status) = seen
        .iter()
        .find(|(_, p, _)| p.ends_with("/status"))
        .unwrap();
    assert_eq!(status["status"]["observedGeneration"], 4);
    assert_eq!(status["status"]["phase"], "Provisioning");
    let conditions = status["status"]["conditions"].as_array().unwrap();
    let types: Vec<_> = conditions
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Ready", "Progressing", "Degraded", "Certificates"]);
    assert!(conditions.iter().all(|c| c["observedGeneration"] == 4));
    let reasons: Vec<&str> = seen
        .iter()
        .filter(|(m, p, _)| m == Method::POST && p.ends_with("/events"))
        .map(|(_, _, body)| body["reason"].as_str().unwrap())
        .collect();
    assert!(reasons.contains(&"CreatedSecrets"), "{reasons:?}");
    assert!(reasons.contains(&"CreatedVolume"), "{reasons:?}");
    assert!(reasons.contains(&"Provisioning"), "{reasons:?}");
    // A new Database is progress: nothing it publishes is a warning.
    let warnings: Vec<&Value> = seen
        .iter()
        .filter(|(m, p, body)| {
            m == Method::POST && p.ends_with("/events") && body["type"] != "Normal"
        })
        .map(|(_, _, body)| body)
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}

#[tokio::test]
async fn a_published_endpoint_is_reported_until_it_has_an_address() {
    let (ctx, handle) = context();
    let mut db = with_finalizer(sample_database());
    db.metadata.uid = Some("uid-orders".into());
    db.spec.expose = vec![
        serde_json::from_value(json!({
            "target": "rw", "type": "LoadBalancer", "allowedSourceRanges": ["192.0.2.0/24"]
        }))
        .unwrap(),
    ];
    let server = tokio::spawn(serve_empty_namespace(
        handle,
        serde_json::to_value(&db).unwrap(),
    ));
    reconcile(Arc::new(db), ctx).await.unwrap();
    let seen = server.await.unwrap();
    let calls: Vec<String> = seen
        .iter()
        .filter(|(_, path, _)| !path.contains("/events"))
        .map(|(method, path, _)| format!("{method} {path}"))
        .collect();
    let ns = "/api/v1/namespaces/shop";
    let at = |call: &str| {
        calls
            .iter()
            .position(|c| c == call)
            .unwrap_or_else(|| panic!("no {call} in {calls:#?}"))
    };
    // The Service comes from the snapshot's list (no GET of its own); the
    // credentials are read after the TLS observation (its CAs go in the Secret).
    assert!(
        !calls
            .iter()
            .any(|c| c.ends_with("/services/orders-rw-lb") && c.starts_with("GET")),
        "{calls:#?}"
    );
    let tls_observed = at(&format!("GET {ns}/secrets/orders-app"));
    assert!(tls_observed < at(&format!("GET {ns}/secrets/orders-app-external")));
    // No address: nothing to publish in a Secret yet.
    assert!(
        !calls
            .iter()
            .any(|c| !c.starts_with("GET") && c.contains("orders-app-external")),
        "{calls:#?}"
    );
    let (_, _, status) = seen
        .iter()
        .find(|(_, p, _)| p.ends_with("/status"))
        .unwrap();
    assert_eq!(
        status["status"]["endpoints"],
        json!([{
            "service": "orders-rw-lb", "target": "rw", "type": "LoadBalancer",
            "reached": false, "message": "the Service orders-rw-lb does not exist yet"
        }])
    );
    let exposed = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Exposed")
        .expect("an Exposed condition");
    assert_eq!(exposed["status"], "False");
    assert_eq!(exposed["reason"], "AddressPending");
    assert_eq!(
        exposed["message"],
        "spec.expose[0] (Service orders-rw-lb): the Service orders-rw-lb does not exist yet"
    );
}

#[tokio::test]
async fn an_invalid_spec_becomes_a_condition_and_a_warning() {
    let (ctx, mut handle) = context();
    let mut db = with_finalizer(sample_database());
    db.spec
        .postgresql
        .parameters
        .insert("wal_level".into(), "minimal".into());
    let reply = serde_json::to_value(&db).unwrap();
    let server = tokio::spawn(async move {
        let status = expect(
            &mut handle,
            Method::PATCH,
            &format!("{DB_PATH}/status"),
            reply,
        )
        .await;
        let ready = &status["status"]["conditions"][0];
        assert_eq!(ready["reason"], "InvalidSpec");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("spec.postgresql.parameters.wal_level")
        );
        let event = expect(
            &mut handle,
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/shop/events",
            json!({}),
        )
        .await;
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["reason"], "InvalidSpec");
    });
    reconcile(Arc::new(db), ctx).await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn deletion_runs_cleanup_and_removes_the_finalizer() {
    let (ctx, mut handle) = context();
    let mut db = with_finalizer(sample_database());
    db.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    let reply = serde_json::to_value(&db).unwrap();
    let server = tokio::spawn(async move {
        let event = expect(
            &mut handle,
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/shop/events",
            json!({}),
        )
        .await;
        assert_eq!(event["reason"], "Deleting");
        let patch = expect(&mut handle, Method::PATCH, DB_PATH, reply).await;
        assert!(patch.to_string().contains("remove"), "{patch}");
    });
    reconcile(Arc::new(db), ctx).await.unwrap();
    server.await.unwrap();
}

const BACKUPS_PATH: &str = "/apis/tusk.dev/v1/namespaces/shop/backups";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

fn deleted_with_a_store() -> Database {
    let mut db = with_finalizer(sample_database());
    db.metadata.uid = Some("uid-1".into());
    db.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    db.spec.backup = Some(crate::api::v1::BackupConfig {
        object_store: Some(crate::api::v1::ObjectStore {
            bucket: "backups".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    db
}

fn no_backups() -> Value {
    json!({"apiVersion": "tusk.dev/v1", "kind": "BackupList", "metadata": {}, "items": []})
}

#[tokio::test]
async fn deletion_with_a_store_takes_a_final_backup_and_keeps_the_finalizer() {
    let (ctx, mut handle) = context();
    let db = deleted_with_a_store();
    let stored = serde_json::to_value(&db).unwrap();
    let server = tokio::spawn(async move {
        expect(&mut handle, Method::GET, BACKUPS_PATH, no_backups()).await;
        // The namespace is not going: the dry run passes, the Backup is made.
        let backup = json!({"apiVersion": "tusk.dev/v1", "kind": "Backup",
            "metadata": {"name": "orders-final"}, "spec": {"database": "orders"}});
        let probe = expect(&mut handle, Method::POST, BACKUPS_PATH, backup.clone()).await;
        assert_eq!(
            probe["metadata"]["annotations"]["tusk.dev/final-backup-for"],
            "uid-1"
        );
        let created = expect(&mut handle, Method::POST, BACKUPS_PATH, backup).await;
        assert_eq!(created["spec"]["database"], "orders");
        assert!(
            created["metadata"]["ownerReferences"].is_null(),
            "{created}"
        );
        let event = expect(&mut handle, Method::POST, EVENTS_PATH, json!({})).await;
        assert_eq!(event["reason"], "FinalBackup");
        let status = expect(
            &mut handle,
            Method::PATCH,
            &format!("{DB_PATH}/status"),
            stored,
        )
        .await;
        assert_eq!(status["status"]["phase"], "Deleting");
        assert_eq!(
            status["status"]["conditions"][0]["reason"],
            "FinalBackupRunning"
        );
        expect(&mut handle, Method::POST, EVENTS_PATH, json!({})).await;
        handle
    });
    reconcile(Arc::new(db), ctx).await.unwrap();
    // No finalizer removal: the handle saw no PATCH of the Database itself.
    drop(server.await.unwrap());
}

#[tokio::test]
async fn deletion_in_a_terminating_namespace_releases_without_a_final_backup() {
    let (ctx, mut handle) = context();
    let db = deleted_with_a_store();
    let reply = serde_json::to_value(&db).unwrap();
    let server = tokio::spawn(async move {
        expect(&mut handle, Method::GET, BACKUPS_PATH, no_backups()).await;
        let refusal = json!({
            "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "backups.tusk.dev \"orders-final\" is forbidden: unable to create new content in namespace shop because it is being terminated"
        });
        expect_code(&mut handle, Method::POST, BACKUPS_PATH, 403, refusal).await;
        let event = expect(&mut handle, Method::POST, EVENTS_PATH, json!({})).await;
        assert_eq!(event["reason"], "FinalBackupSkipped");
        let event = expect(&mut handle, Method::POST, EVENTS_PATH, json!({})).await;
        assert_eq!(event["reason"], "Deleting");
        let patch = expect(&mut handle, Method::PATCH, DB_PATH, reply).await;
        assert!(patch.to_string().contains("remove"), "{patch}");
    });
    reconcile(Arc::new(db), ctx).await.unwrap();
    server.await.unwrap();
}

/// The Services of `spec.expose` go out with the in-cluster ones, by
/// server-side apply as `tusk`; one whose entry is gone (this Database's,
/// by label and owner) is deleted by uid, and nothing else is.
#[tokio::test]
async fn a_pass_applies_the_exposure_services_and_deletes_an_unlisted_one() {
    use crate::api::expose::{ExposeSpec, ExposeTarget, ExposeType};
    let mut db = with_finalizer(sample_database());
    db.metadata.uid = Some("uid-orders".into());
    db.spec.expose = vec![ExposeSpec {
        target: ExposeTarget::Rw,
        type_: ExposeType::LoadBalancer,
        allowed_source_ranges: vec!["192.0.2.0/24".into()],
        annotations: Default::default(),
        hostname: None,
        load_balancer_class: None,
        external_traffic_policy: None,
        node_port: None,
    }];
    let service = |name: &str, target: &str, uid: &str| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                "labels": { "tusk.dev/database": "orders", "tusk.dev/exposed": target },
                "ownerReferences": [{ "apiVersion": "tusk.dev/v1", "kind": "Database",
                    "name": "orders", "uid": uid, "controller": true }],
            },
            "spec": { "type": "NodePort" },
        })
    };
    let services = [
        service("orders-ro-nodeport", "ro", "uid-orders"),
        // Another Database's of the same name, gone and recreated: not ours.
        service("orders-r-nodeport", "r", "uid-previous-orders"),
    ]
    .into_iter()
    .map(|s| serde_json::from_value(s).unwrap())
    .collect();
    let (ctx, handle) = context_with(crate::controller::caches::Caches::filled(
        services,
        Vec::new(),
    ));
    let server = tokio::spawn(serve_empty_namespace(
        handle,
        serde_json::to_value(&db).unwrap(),
    ));
    reconcile(Arc::new(db), ctx).await.unwrap();
    let seen = server.await.unwrap();
    let services: Vec<String> = seen
        .iter()
        .filter(|(_, path, _)| path.contains("/services/"))
        .map(|(method, path, _)| format!("{method} {path}"))
        .collect();
    let ns = "/api/v1/namespaces/shop";
    assert_eq!(
        services,
        [
            format!("PATCH {ns}/services/orders-rw"),
            format!("PATCH {ns}/services/orders-ro"),
            format!("PATCH {ns}/services/orders-r"),
            format!("DELETE {ns}/services/orders-ro-nodeport"),
            format!("PATCH {ns}/services/orders-rw-lb"),
        ]
    );
    let (_, _, deleted) = seen
        .iter()
        .find(|(method, _, _)| method == Method::DELETE)
        .unwrap();
    assert_eq!(deleted["preconditions"]["uid"], "uid-orders-ro-nodeport");
    let (_, _, applied) = seen
        .iter()
        .find(|(_, path, _)| path.ends_with("/services/orders-rw-lb"))
        .unwrap();
    assert_eq!(applied["spec"]["type"], "LoadBalancer");
    assert_eq!(
        applied["spec"]["loadBalancerSourceRanges"][0],
        "192.0.2.0/24"
    );
    assert_eq!(applied["metadata"]["labels"]["tusk.dev/exposed"], "rw");
}

#[tokio::test]
async fn a_secrets_labels_are_reapplied_only_to_the_secret_seen_and_a_deleted_one_is_not_recreated()
{
    let db = with_finalizer(sample_database());
    let secrets = crate::resources::SecretKind::ALL
        .iter()
        .map(|kind| {
            let name = kind.secret_name("orders");
            kube::api::ObjectMeta {
                uid: Some(format!("uid-{name}")),
                name: Some(name),
                namespace: Some("shop".into()),
                ..Default::default()
            }
        })
        .collect();
    let (ctx, handle) = context_with(crate::controller::caches::Caches::filled(
        Vec::new(),
        secrets,
    ));
    // The superuser Secret was deleted after the cache saw it: the API
    // server refuses the apply that names its old uid.
    let server = tokio::spawn(serve_namespace(
        handle,
        serde_json::to_value(&db).unwrap(),
        |method, path| {
            let gone = method == Method::PATCH && path.ends_with("/secrets/orders-superuser");
            gone.then(|| {
                let status = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "Conflict", "code": 409,
                    "message": "uid mismatch: no existing object was found" });
                (409, status)
            })
        },
    ));
    reconcile(Arc::new(db), ctx).await.unwrap();
    let credentials: Vec<String> = crate::resources::SecretKind::ALL
        .iter()
        .map(|kind| {
            format!(
                "/api/v1/namespaces/shop/secrets/{}",
                kind.secret_name("orders")
            )
        })
        .collect();
    let applied: Vec<(String, Value)> = server
        .await
        .unwrap()
        .into_iter()
        .filter(|(method, path, _)| method == Method::PATCH && credentials.contains(path))
        .map(|(_, path, body)| (path, body))
        .collect();
    assert_eq!(
        applied.len(),
        crate::resources::SecretKind::ALL.len(),
        "{applied:?}"
    );
    for (path, body) in &applied {
        let name = path.rsplit('/').next().unwrap();
        assert_eq!(body["metadata"]["uid"], format!("uid-{name}"), "{path}");
    }
}

#[test]
fn the_new_primary_is_on_record_before_the_old_primarys_pod_goes() {
    use crate::lifecycle::{Action, DeleteReason};
    let roll = |name: &str| Action::RollPod {
        name: name.into(),
        evict: true,
        updated: 2,
        total: 3,
    };
    assert!(primary_first(Some("pg-1"), Some("pg-2"), &[roll("pg-1")]));
    assert!(primary_first(
        Some("pg-1"),
        Some("pg-2"),
        &[Action::DeletePod {
            name: "pg-1".into(),
            reason: DeleteReason::PodFailed
        }]
    ));
    // Nothing to write first: the record is current, or the old primary's
    // pod stays, or nothing is on record yet.
    assert!(!primary_first(Some("pg-2"), Some("pg-2"), &[roll("pg-2")]));
    assert!(!primary_first(Some("pg-1"), Some("pg-2"), &[roll("pg-3")]));
    assert!(!primary_first(None, Some("pg-2"), &[roll("pg-1")]));
}
