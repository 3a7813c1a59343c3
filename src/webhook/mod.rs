//! The operator's HTTPS webhook server: `/convert` (CRD conversion) and
//! `/validate/database`, `/validate/backup`, `/validate/drill` (admission). Every operator replica
//! serves it; only the leader reconciles.

pub mod admission;
pub mod certs;
pub mod conversion;
mod error;
pub mod files;
pub mod rotation;

use std::net::SocketAddr;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use axum_server::tls_rustls::RustlsConfig;
use kube::Client;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use kube::core::conversion::ConversionReview;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::expose::NodePortRange;
use crate::api::store;
use crate::api::v1::{Database, ObjectStore};
pub use error::Error;

#[derive(Clone)]
pub struct WebhookState {
    /// Reads the Database a Backup or Drill names; `None` in tests without an API server.
    pub client: Option<Client>,
    /// The operator's default object store: a schedule or retention without
    /// `objectStore` is valid when there is one.
    pub default_store: Option<ObjectStore>,
    /// The cluster's node-port range: `spec.expose[].nodePort` must be in it.
    pub node_ports: NodePortRange,
}

pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/convert", post(convert))
        .route("/validate/database", post(validate_database))
        .route("/validate/backup", post(validate_backup))
        .route("/validate/drill", post(validate_drill))
        .with_state(state)
}

async fn convert(Json(review): Json<ConversionReview>) -> Json<ConversionReview> {
    Json(conversion::review(review))
}

async fn validate_database(
    State(state): State<WebhookState>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    Json(match admission::request_of(review) {
        Ok(request) => {
            admission::review_database(&request, state.default_store.as_ref(), state.node_ports)
                .into_review()
        }
        Err(message) => admission::unusable(message),
    })
}

async fn validate_backup(
    State(state): State<WebhookState>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request = match admission::request_of(review) {
        Ok(request) => request,
        Err(message) => return Json(admission::unusable(message)),
    };
    match named_database(&state, &request).await {
        Ok(database) => Json(admission::review_backup(&request, database.as_ref()).into_review()),
        Err(answer) => Json(answer),
    }
}

async fn validate_drill(
    State(state): State<WebhookState>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request = match admission::request_of(review) {
        Ok(request) => request,
        Err(message) => return Json(admission::unusable(message)),
    };
    match named_database(&state, &request).await {
        Ok(database) => Json(admission::review_drill(&request, database.as_ref()).into_review()),
        Err(answer) => Json(answer),
    }
}

/// The Database `spec.database` of a Backup or Drill request names, with the
/// operator's default store folded in; `None` when it does not exist (or
/// there is no API server, in tests). A failed read is the review's answer.
async fn named_database(
    state: &WebhookState,
    request: &kube::core::admission::AdmissionRequest<DynamicObject>,
) -> Result<Option<Database>, AdmissionReview<DynamicObject>> {
    let (Some(client), Some(name), Some(namespace)) = (
        &state.client,
        admission::backup_database_name(request),
        request.namespace.as_deref(),
    ) else {
        return Ok(None);
    };
    let api: Api<Database> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(&name).await {
        Ok(db) => Ok(db.map(|db| store::with_default(&db, state.default_store.as_ref()))),
        Err(e) => {
            warn!(error = %e, kind = %request.kind.kind, "cannot read the Database a request names");
            let response = kube::core::admission::AdmissionResponse::from(request)
                .deny(format!("cannot check spec.database right now: {e}"));
            Err(response.into_review())
        }
    }
}

/// Serves HTTPS on `addr` with `tls` (reloaded in place on rotation) until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    tls: RustlsConfig,
    state: WebhookState,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
        stopper.graceful_shutdown(Some(std::time::Duration::from_secs(10)));
    });
    info!(%addr, "serving webhooks");
    axum_server::bind_rustls(addr, tls)
        .handle(handle)
        .serve(router(state).into_make_service())
        .await
        .map_err(Error::Serve)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::jiff::Timestamp;
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};

    use super::*;
    use crate::api::arbitrary::sample_database;

    /// POSTs `body` over TLS, trusting only `ca`, to the name the API server would use.
    async fn post(addr: SocketAddr, ca: &str, path: &str, body: &Value) -> Value {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("tusk-webhook.tusk-system.svc").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: tusk-webhook.tusk-system.svc\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        tls.read_to_string(&mut response).await.unwrap();
        let (head, json) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str(json).unwrap()
    }

    #[tokio::test]
    async fn the_server_answers_reviews_over_https_and_reloads_its_certificate() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let bundle = certs::generate("tusk-webhook", "tusk-system", Timestamp::now()).unwrap();
        let tls = RustlsConfig::from_pem(
            bundle.tls_cert.clone().into_bytes(),
            bundle.tls_key.clone().into_bytes(),
        )
        .await
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let (stop, shutdown) = watch::channel(false);
        let server = tokio::spawn(serve(
            addr,
            tls.clone(),
            WebhookState {
                client: None,
                default_store: None,
                node_ports: Default::default(),
            },
            shutdown,
        ));
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }

        let db = serde_json::to_value(sample_database()).unwrap();
        let conversion = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u1", "desiredAPIVersion": "tusk.dev/v1alpha1", "objects": [db]}
        });
        let answer = post(addr, &bundle.ca_cert, "/convert", &conversion).await;
        assert_eq!(
            answer["response"]["convertedObjects"][0]["spec"]["replicas"],
            3
        );

        let mut bad = sample_database();
        bad.spec.version = "11".into();
        let admission = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u2", "operation": "CREATE", "name": "orders", "namespace": "shop",
                "kind": {"group": "tusk.dev", "version": "v1", "kind": "Database"},
                "resource": {"group": "tusk.dev", "version": "v1", "resource": "databases"},
                "userInfo": {}, "object": serde_json::to_value(bad).unwrap(), "dryRun": false
            }
        });
        let answer = post(addr, &bundle.ca_cert, "/validate/database", &admission).await;
        assert_eq!(answer["response"]["allowed"], false);
        assert!(
            answer["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .starts_with("spec.version:")
        );

        // The Drill path is served: without an API server no Database is
        // found, and the answer names the field.
        let drill = serde_json::to_value(crate::api::arbitrary::sample_drill()).unwrap();
        let admission = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u3", "operation": "CREATE", "name": "orders-switchover", "namespace": "shop",
                "kind": {"group": "tusk.dev", "version": "v1", "kind": "Drill"},
                "resource": {"group": "tusk.dev", "version": "v1", "resource": "drills"},
                "userInfo": {}, "object": drill, "dryRun": false
            }
        });
        let answer = post(addr, &bundle.ca_cert, "/validate/drill", &admission).await;
        assert_eq!(answer["response"]["allowed"], false);
        assert!(
            answer["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .starts_with("spec.database: no Database \"orders\""),
            "{answer}"
        );

        // A renewed certificate under the same CA is served without a restart.
        let renewed =
            certs::renew(&bundle, "tusk-webhook", "tusk-system", Timestamp::now()).unwrap();
        tls.reload_from_pem(renewed.tls_cert.into_bytes(), renewed.tls_key.into_bytes())
            .await
            .unwrap();
        let answer = post(addr, &bundle.ca_cert, "/convert", &conversion).await;
        assert_eq!(answer["response"]["uid"], "u1");

        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }
}

/// Fuzz-style properties: no input, however malformed, makes a handler panic. (A
/// cargo-fuzz target needs a nightly toolchain this project's machines do not
/// have; proptest drives the same entry points with arbitrary JSON instead.)
///
/// A generated review the server would turn away before any handler (not even
/// an AdmissionReview) proves nothing, so the inputs are built to be reviews:
/// well-formed envelopes around real Databases, Databases with one field
/// replaced by arbitrary JSON, and arbitrary JSON objects. Each property counts
/// the cases that reach the handler, and the ones that reach validation
/// (the object decodes as a Database), and asserts a floor for both.
#[cfg(test)]
mod fuzz {
    use std::sync::atomic::{AtomicU32, Ordering};

    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use serde_json::{Value, json};

    use super::*;
    use crate::api::arbitrary;

    const CASES: u32 = 2000;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
            prop_oneof![
                Just("tusk.dev/v1"),
                Just("tusk.dev/v1alpha1"),
                Just("Database"),
                Just("Backup"),
                Just("CREATE"),
                Just("UPDATE")
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                json_object(inner),
            ]
        })
    }

    fn json_object(inner: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
        proptest::collection::btree_map(
            prop_oneof![
                Just("apiVersion".to_owned()),
                Just("kind".to_owned()),
                Just("metadata".to_owned()),
                Just("spec".to_owned()),
                Just("request".to_owned()),
                Just("objects".to_owned()),
                Just("object".to_owned()),
                Just("oldObject".to_owned()),
                Just("operation".to_owned()),
                Just("desiredAPIVersion".to_owned()),
                Just("uid".to_owned()),
                "[a-z]{1,6}"
            ],
            inner,
            0..6,
        )
        .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    /// A field path of a Database's spec, to replace with arbitrary JSON.
    const SPEC_FIELDS: &[&[&str]] = &[
        &["version"],
        &["instances"],
        &["storage"],
        &["storage", "size"],
        &["replication"],
        &["replication", "minSyncReplicas"],
        &["postgresql", "parameters"],
        &["bootstrap"],
        &["bootstrap", "recovery"],
        &["backup"],
        &["backup", "schedule"],
        &["primary"],
        &["migrations"],
        &["failover", "delaySeconds"],
    ];

    /// A Database's spec: as generated (most often, so that most cases get
    /// past decoding to the validator), with one field replaced by arbitrary
    /// JSON, or arbitrary JSON altogether.
    fn spec() -> BoxedStrategy<Value> {
        let real = || {
            arbitrary::database_v1()
                .prop_map(|db| serde_json::to_value(db.spec).unwrap_or_default())
        };
        let mutated = (real(), proptest::sample::select(SPEC_FIELDS), json()).prop_map(
            |(mut spec, path, value)| {
                let (last, parents) = path.split_last().unwrap_or((&"version", &[]));
                let mut at = &mut spec;
                for key in parents {
                    at = &mut at[*key];
                }
                if at.is_object() || at.is_null() {
                    at[*last] = value;
                }
                spec
            },
        );
        prop_oneof![6 => real(), 3 => mutated, 1 => json()].boxed()
    }

    /// A Database as an admission request carries it.
    fn object() -> BoxedStrategy<Value> {
        spec()
            .prop_map(|spec| {
                json!({
                    "apiVersion": "tusk.dev/v1", "kind": "Database",
                    "metadata": {"name": "x", "namespace": "n"}, "spec": spec
                })
            })
            .boxed()
    }

    fn count(counter: &AtomicU32) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The runner of a property: deep generated trees need more than a test
    /// thread's stack in a debug build, so it runs on a thread of its own.
    fn run_on_big_stack(property: impl FnOnce() + Send + 'static) {
        let outcome = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(property)
            .expect("spawn the property's thread")
            .join();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    fn runner() -> TestRunner {
        TestRunner::new(Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        })
    }

    /// Asserts that at least `percent` % of the cases were `counted`.
    fn at_least(what: &str, counted: &AtomicU32, percent: u32) {
        let counted = counted.load(Ordering::Relaxed);
        assert!(
            counted * 100 >= CASES * percent,
            "{what}: {counted} of {CASES} cases, below the floor of {percent} %"
        );
    }

    #[test]
    fn conversion_never_panics_and_converts_most_databases() {
        run_on_big_stack(conversion_property);
    }

    fn conversion_property() {
        let reached = AtomicU32::new(0);
        let converted = AtomicU32::new(0);
        let objects = proptest::collection::vec(
            prop_oneof![
                3 => arbitrary::database_v1().prop_map(|db| serde_json::to_value(db).unwrap_or_default()),
                3 => arbitrary::database_v1alpha1().prop_map(|db| serde_json::to_value(db).unwrap_or_default()),
                1 => json(),
            ],
            0..3,
        );
        let desired = prop_oneof![
            4 => Just("tusk.dev/v1".to_owned()),
            4 => Just("tusk.dev/v1alpha1".to_owned()),
            1 => ".{0,4}",
        ];
        let mut runner = runner();
        let outcome = runner.run(&(objects, desired), |(objects, desired)| {
            let review = json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": "u", "desiredAPIVersion": desired, "objects": objects}
            });
            let review: ConversionReview = serde_json::from_value(review)
                .map_err(|e| TestCaseError::fail(format!("not a ConversionReview: {e}")))?;
            count(&reached);
            let answer = serde_json::to_value(conversion::review(review))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&answer["response"]["uid"], "u");
            if answer["response"]["result"]["status"] == "Success" {
                count(&converted);
            }
            Ok(())
        });
        if let Err(e) = outcome {
            panic!("{e}");
        }
        eprintln!(
            "conversion: {} of {CASES} reviews reached the handler, {} converted",
            reached.load(Ordering::Relaxed),
            converted.load(Ordering::Relaxed)
        );
        at_least("reviews reaching the handler", &reached, 100);
        at_least("reviews converted", &converted, 50);
    }

    #[test]
    fn admission_never_panics_and_most_reviews_reach_validation() {
        run_on_big_stack(admission_property);
    }

    fn admission_property() {
        let reached = AtomicU32::new(0);
        let decoded = AtomicU32::new(0);
        let old = prop_oneof![1 => Just(Value::Null), 3 => object()];
        let operation = prop_oneof![
            4 => Just("CREATE"),
            4 => Just("UPDATE"),
            1 => Just("DELETE"),
            1 => Just("CONNECT"),
        ];
        let mut runner = runner();
        let outcome = runner.run(&(object(), old, operation), |(object, old, operation)| {
            let review = json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {
                    "uid": "u", "operation": operation, "name": "x", "namespace": "n", "userInfo": {},
                    "kind": {"group": "tusk.dev", "version": "v1", "kind": "Database"},
                    "resource": {"group": "tusk.dev", "version": "v1", "resource": "databases"},
                    "object": object, "oldObject": old, "dryRun": false
                }
            });
            // The server answers a body that is no AdmissionReview with a 4xx
            // before any handler runs: such a case is not counted.
            let Ok(review) = serde_json::from_value::<AdmissionReview<DynamicObject>>(review) else {
                return Ok(());
            };
            let Ok(request) = admission::request_of(review) else {
                return Ok(());
            };
            count(&reached);
            let response = admission::review_database(&request, None, NodePortRange::default());
            prop_assert_eq!(&response.uid, "u");
            // A create or update whose objects decode is judged by the
            // validator; the others are answered before it.
            let message = &response.result.message;
            if matches!(operation, "CREATE" | "UPDATE")
                && !message.contains("is not a valid tusk.dev/v1 object")
                && !message.contains("carries no")
            {
                count(&decoded);
            }
            let _ = admission::review_backup(&request, None);
            let _ = admission::review_drill(&request, None);
            Ok(())
        });
        if let Err(e) = outcome {
            panic!("{e}");
        }
        eprintln!(
            "admission: {} of {CASES} reviews reached the handler, {} the validator",
            reached.load(Ordering::Relaxed),
            decoded.load(Ordering::Relaxed)
        );
        at_least("reviews reaching the handler", &reached, 90);
        at_least("reviews reaching validation", &decoded, 35);
    }
}
