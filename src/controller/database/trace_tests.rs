//! The reconcile span as a trace backend sees it: one pass through the real
//! reconcile against a mocked API server, with the OpenTelemetry layer Tusk
//! installs writing to an in-memory exporter.

use std::sync::Arc;

use http::{Response, StatusCode};
use kube::client::Body;
use opentelemetry::Value;
use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tracing_subscriber::prelude::*;

use super::reconcile;
use super::tests::{Handle, context};
use crate::api::arbitrary::sample_database;
use crate::api::v1::Database;
use crate::controller::FINALIZER;

/// Answers every request with `status` and `body`, until the client goes away.
async fn answer_all(mut handle: Handle, status: StatusCode, body: serde_json::Value) {
    while let Some((_, send)) = handle.next_request().await {
        send.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
    }
}

/// Runs one reconcile of `db` with the OpenTelemetry layer installed, the API
/// answering every request with `status` and `body`; returns the pass's result
/// and the spans that ended.
async fn traced_pass(
    db: Database,
    status: StatusCode,
    body: serde_json::Value,
) -> (bool, Vec<SpanData>) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(crate::telemetry::otel_layer(&provider));
    let _default = tracing::subscriber::set_default(subscriber);
    let (ctx, handle) = context();
    let server = tokio::spawn(answer_all(handle, status, body));
    let ok = reconcile(Arc::new(db), ctx).await.is_ok();
    server.abort();
    provider.force_flush().unwrap();
    (ok, exporter.get_finished_spans().unwrap())
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn the_reconcile_span(spans: &[SpanData]) -> &SpanData {
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    let reconciles: Vec<&SpanData> = spans.iter().filter(|s| s.name == "reconcile").collect();
    assert_eq!(reconciles.len(), 1, "spans: {names:?}");
    reconciles[0]
}

#[tokio::test]
async fn a_pass_is_one_reconcile_span_naming_the_database() {
    let mut db = sample_database();
    db.metadata.finalizers = Some(vec![FINALIZER.into()]);
    db.metadata.generation = Some(3);
    // An invalid spec: the pass writes a status and an Event, then stops.
    db.spec
        .postgresql
        .parameters
        .insert("wal_level".into(), "minimal".into());
    let reply = serde_json::to_value(&db).unwrap();
    let (ok, spans) = traced_pass(db, StatusCode::OK, reply).await;
    assert!(ok);
    let span = the_reconcile_span(&spans);
    assert_eq!(
        attribute(span, "controller"),
        Some(&Value::from("database"))
    );
    assert_eq!(attribute(span, "database"), Some(&Value::from("orders")));
    assert_eq!(attribute(span, "namespace"), Some(&Value::from("shop")));
    assert_eq!(attribute(span, "generation"), Some(&Value::from(3_i64)));
    assert_eq!(attribute(span, "error"), None);
    assert_eq!(span.status, Status::Unset);
    assert!(span.parent_span_id == opentelemetry::trace::SpanId::INVALID);
    // The pass's log lines travel with the span.
    assert!(
        span.events.iter().any(|event| event.name == "reconciled"),
        "{:?}",
        span.events
    );
}

#[tokio::test]
async fn a_failed_pass_marks_its_span_failed_with_the_error() {
    let db = sample_database();
    let refusal = json!({
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "message": "etcdserver: request timed out",
        "reason": "InternalError",
        "code": 500,
    });
    let (ok, spans) = traced_pass(db, StatusCode::INTERNAL_SERVER_ERROR, refusal).await;
    assert!(!ok);
    let span = the_reconcile_span(&spans);
    assert_eq!(attribute(span, "database"), Some(&Value::from("orders")));
    let Status::Error { description } = &span.status else {
        panic!("status {:?}", span.status);
    };
    assert!(
        description.contains("etcdserver: request timed out"),
        "{description}"
    );
    let error = attribute(span, "error").expect("an error attribute");
    assert_eq!(error.as_str(), description.as_ref());
}
