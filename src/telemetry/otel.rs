//! OpenTelemetry: spans exported over OTLP (HTTP/protobuf) when the standard
//! environment asks for it, and W3C trace context carried between the operator
//! and the instance managers.
//!
//! The exporter only exists when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the
//! traces-only `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: without it no layer
//! is installed and tracing costs what it did before.

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Status, TraceContextExt, TracerProvider as _};
use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{
    OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_EXPORTER_OTLP_TIMEOUT_DEFAULT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, Protocol,
    WithExportConfig, WithHttpConfig,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::runtime;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::{Span, Subscriber};
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::registry::LookupSpan;

/// The instrumentation scope every Tusk span is reported under.
const SCOPE: &str = "tusk";

/// The only OTLP protocol this build speaks.
const HTTP_PROTOBUF: &str = "http/protobuf";

#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error("cannot load the CA certificates for an https OTLP endpoint: {0}")]
    Roots(#[source] std::io::Error),
    #[error("cannot build the OTLP span exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// What the environment asks of the exporter, read once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The per-request deadline (`OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT`, in ms).
    pub timeout: Duration,
    /// A protocol other than HTTP/protobuf that the environment asked for; the
    /// exporter still speaks HTTP/protobuf, and says so.
    pub unsupported_protocol: Option<String>,
}

impl Settings {
    /// `None` when nothing asks for export: no endpoint is set, or the SDK or the
    /// traces exporter is switched off (`OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER=none`).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Settings> {
        let set = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        if set(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).is_none()
            && set(OTEL_EXPORTER_OTLP_ENDPOINT).is_none()
        {
            return None;
        }
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        if set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none")) {
            return None;
        }
        let timeout = set(OTEL_EXPORTER_OTLP_TRACES_TIMEOUT)
            .or_else(|| set(OTEL_EXPORTER_OTLP_TIMEOUT))
            .and_then(|ms| ms.trim().parse().ok())
            .map_or(OTEL_EXPORTER_OTLP_TIMEOUT_DEFAULT, Duration::from_millis);
        let unsupported_protocol = set(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
            .or_else(|| set(OTEL_EXPORTER_OTLP_PROTOCOL))
            .filter(|protocol| protocol.trim() != HTTP_PROTOBUF);
        Some(Settings {
            timeout,
            unsupported_protocol,
        })
    }
}

/// A tracer provider that batches spans on the tokio runtime and sends them
/// to the endpoint the environment names. Must be called inside the runtime.
pub fn provider(settings: &Settings, service: &str) -> Result<SdkTracerProvider, OtelError> {
    // The connector takes both schemes: plain HTTP for an in-cluster collector,
    // TLS (ring, the system's roots) otherwise. hyper-rustls is already linked
    // for kube, so https costs no new TLS stack.
    let ring = Arc::new(rustls::crypto::ring::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(ring.clone())
    {
        Ok(builder) => builder,
        // An image without CA certificates can still export to a plain-HTTP
        // collector; an https one then fails its handshake, which the
        // exporter reports on every batch.
        Err(error) => {
            tracing::warn!(%error, "no CA certificates: an https OTLP endpoint cannot be verified");
            let tls = rustls::ClientConfig::builder_with_provider(ring)
                .with_safe_default_protocol_versions()
                .map_err(|e| OtelError::Roots(std::io::Error::other(e)))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls)
        }
    };
    let connector = builder.https_or_http().enable_http1().build();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(HyperClient::new(connector, settings.timeout, None))
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(settings.timeout)
        .build()?;
    // The async-runtime processor, not the SDK's default thread: the hyper
    // client needs the tokio runtime to send.
    let processor = BatchSpanProcessor::builder(exporter, runtime::Tokio).build();
    // The sampler is left to the SDK, which reads OTEL_TRACES_SAMPLER(_ARG).
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource(service))
        .build())
}

/// The resource every span carries: `service.name` as the environment names it
/// (`OTEL_SERVICE_NAME`, or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`), else
/// `default_service`; and the build's version.
pub fn resource(default_service: &str) -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let builder = Resource::builder().with_attribute(KeyValue::new(
        "service.version",
        Value::from(env!("CARGO_PKG_VERSION")),
    ));
    if named {
        builder.build()
    } else {
        builder
            .with_service_name(default_service.to_owned())
            .build()
    }
}

/// The `tracing` layer that turns spans into OpenTelemetry spans of `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> OpenTelemetryLayer<S, SdkTracer>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SCOPE))
        // Thread ids say nothing about a task that hops between workers.
        .with_threads(false)
}

/// Writes the current span's W3C trace context (`traceparent`) into the headers
/// of an outgoing request, so that the callee's span joins the caller's trace.
/// Without an OpenTelemetry layer the current context is empty and nothing is written.
pub fn inject_trace_context(headers: &mut HeaderMap) {
    let context = Span::current().context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
    }
}

/// Makes `span` a child of the caller's span when the request carries a W3C
/// `traceparent`. Call it before `span` is first entered: a started span keeps
/// the parent it had.
pub fn continue_trace(span: &Span, headers: &HeaderMap) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        // Fails only without an OpenTelemetry layer, when there is no trace to join.
        let _ = span.set_parent(parent);
    }
}

/// Marks `span` failed: the `error` field (declared `field::Empty` by the span)
/// for the logs, and the OpenTelemetry status for trace backends.
pub fn record_error(span: &Span, error: &dyn Display) {
    let message = error.to_string();
    span.record("error", message.as_str());
    span.set_status(Status::error(message));
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Option<Settings> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_env(|name| vars.get(name).cloned())
    }

    #[test]
    fn export_needs_an_endpoint() {
        assert_eq!(settings(&[]), None);
        assert_eq!(settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]), None);
        assert_eq!(settings(&[("OTEL_SERVICE_NAME", "x")]), None);
        let general = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]);
        assert_eq!(
            general,
            Some(Settings {
                timeout: Duration::from_secs(10),
                unsupported_protocol: None,
            })
        );
        let traces_only = settings(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://collector:4318/v1/traces",
        )]);
        assert!(traces_only.is_some());
    }

    #[test]
    fn export_can_be_switched_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(settings(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]), None);
        assert_eq!(
            settings(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            None
        );
        assert!(settings(&[endpoint, ("OTEL_SDK_DISABLED", "false")]).is_some());
        assert!(settings(&[endpoint, ("OTEL_TRACES_EXPORTER", "otlp")]).is_some());
    }

    #[test]
    fn the_traces_timeout_wins_over_the_general_one() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        let both = settings(&[
            endpoint,
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "500"),
        ])
        .unwrap();
        assert_eq!(both.timeout, Duration::from_millis(500));
        let general = settings(&[endpoint, ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")]).unwrap();
        assert_eq!(general.timeout, Duration::from_secs(2));
        let garbage = settings(&[endpoint, ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")]).unwrap();
        assert_eq!(garbage.timeout, Duration::from_secs(10));
    }

    #[test]
    fn a_grpc_request_is_reported_not_followed() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317");
        let grpc = settings(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap();
        assert_eq!(grpc.unsupported_protocol.as_deref(), Some("grpc"));
        let proto = settings(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]);
        assert_eq!(proto.unwrap().unsupported_protocol, None);
    }

    #[test]
    fn trace_context_goes_out_and_comes_back_in() {
        use opentelemetry::trace::TraceId;
        use opentelemetry_sdk::trace::InMemorySpanExporter;
        use tracing_subscriber::prelude::*;

        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let mut headers = HeaderMap::new();
            let caller = tracing::info_span!("caller");
            caller.in_scope(|| inject_trace_context(&mut headers));
            let traceparent = headers["traceparent"].to_str().unwrap().to_owned();
            let caller_trace = caller.context().span().span_context().trace_id();
            assert_ne!(caller_trace, TraceId::INVALID);
            assert!(
                traceparent.contains(&caller_trace.to_string()),
                "{traceparent}"
            );

            let callee = tracing::info_span!("callee");
            continue_trace(&callee, &headers);
            callee.in_scope(|| {});
            assert_eq!(
                callee.context().span().span_context().trace_id(),
                caller_trace
            );
        });
        // Outside any span nothing is injected.
        let mut headers = HeaderMap::new();
        inject_trace_context(&mut headers);
        assert!(headers.is_empty());
    }
}
