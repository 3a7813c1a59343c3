//! Component test: a real `tusk instance` with `OTEL_EXPORTER_OTLP_ENDPOINT` set
//! exports its operation spans over OTLP/HTTP to a real receiver on loopback,
//! continuing the trace the caller sent, and flushes them when it stops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: its helpers assert too

mod instance_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::post;
use instance_support::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The caller's span, as an operator's reconcile would send it.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// One exported span, flattened with what it was exported with.
#[derive(Debug, Clone)]
struct Received {
    service: Option<String>,
    scope: String,
    name: String,
    trace_id: String,
    parent_span_id: String,
    attributes: BTreeMap<String, String>,
    status: i32,
}

type Store = Arc<Mutex<Vec<Received>>>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

/// `POST /v1/traces` of an OTLP/HTTP receiver: decode the protobuf request
/// and keep every span.
async fn receive(
    State(store): State<Store>,
    body: Bytes,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(_) => {
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "text/plain")],
                Vec::new(),
            );
        }
    };
    let mut received = store.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            let scope = scope_spans.scope.map(|s| s.name).unwrap_or_default();
            for span in scope_spans.spans {
                received.push(Received {
                    service: resource.get("service.name").cloned(),
                    scope: scope.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    status: span.status.map_or(0, |s| s.code),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        Vec::new(),
    )
}

async fn start_receiver() -> (u16, Store) {
    let store = Store::default();
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(store.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let port = listener.local_addr().expect("receiver address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, store)
}

/// `GET path` carrying a W3C `traceparent`; returns the status code.
async fn get_with_traceparent(port: u16, path: &str, traceparent: &str) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the manager");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\ntraceparent: {traceparent}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response))
        .await
        .expect("answer in time")
        .expect("read the answer");
    let text = String::from_utf8_lossy(&response);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"))
}

/// Starts `tusk instance` as the harness does, plus the OTLP environment.
fn start_exporting_manager(pg: &Pg, dir: &TestDir, otlp_port: u16) -> Manager {
    Manager::start(
        dir,
        Options {
            env: vec![(
                "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
                format!("http://127.0.0.1:{otlp_port}"),
            )],
            ..Options::primary(pg, "orders-1")
        },
    )
}

async fn instance_operations_are_exported_as_spans_over_otlp(pg: Pg) {
    let (otlp_port, store) = start_receiver().await;
    let dir = TestDir::new(&format!("otlp{}", pg.major));
    let mut manager = start_exporting_manager(&pg, &dir, otlp_port);
    manager.wait_ready(Duration::from_secs(60)).await;

    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
    assert_eq!(
        get_with_traceparent(manager.http_port, "/status", &traceparent).await,
        200
    );
    let (code, body) = http(manager.http_port, "POST", "/reload", Some(TOKEN), None)
        .await
        .expect("POST /reload");
    assert_eq!(code, 200, "{body}");
    let (code, _) = http(manager.http_port, "POST", "/promote", Some("wrong"), None)
        .await
        .expect("POST /promote");
    assert_eq!(code, 401);

    // The batch goes out every 5 s by default; stopping at once leaves these
    // spans to the flush on exit.
    let stopped = manager.stop().expect("the manager was running");
    assert!(stopped.success(), "{}", manager.logs());
    let spans = store.lock().unwrap().clone();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let find = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span among {names:?}\n{}", manager.logs()))
    };

    let status = find("instance.status");
    assert_eq!(status.service.as_deref(), Some("tusk-instance"));
    assert_eq!(status.scope, "tusk");
    // It continues the caller's trace, under the caller's span.
    assert_eq!(status.trace_id, TRACE_ID);
    assert_eq!(status.parent_span_id, PARENT_SPAN_ID);
    assert_eq!(status.attributes["http.response.status_code"], "200");

    let reload = find("instance.reload");
    assert_eq!(reload.service.as_deref(), Some("tusk-instance"));
    assert_eq!(reload.attributes["http.response.status_code"], "200");
    // Without a traceparent it is a trace of its own.
    assert_ne!(reload.trace_id, TRACE_ID);
    assert_eq!(reload.parent_span_id, "");
    assert_ne!(reload.status, SpanStatus::Error as i32);

    // A refused request is an answered request, not a failed operation.
    let promote = find("instance.promote");
    assert_eq!(promote.attributes["http.response.status_code"], "401");
    assert_ne!(promote.status, SpanStatus::Error as i32);

    // Kubelet's probes stay out of the traces at the default level.
    assert!(!names.contains(&"instance.readyz"), "{names:?}");
}
per_major!(instance_operations_are_exported_as_spans_over_otlp);
