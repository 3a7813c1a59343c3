//! Logging (JSON lines through `tracing`), OpenTelemetry span export, and
//! Prometheus metrics.

pub mod drill_metrics;
pub mod kube_requests;
pub mod metrics;
mod otel;

use std::time::Duration;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::{EnvFilter, prelude::*};

/// Logging could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up logging: {0}")]
pub struct Error(String);

#[cfg(test)]
pub(crate) use otel::layer as otel_layer;
pub use otel::{continue_trace, inject_trace_context, record_error};

/// How long the exit waits for the last spans to reach the collector: a pod
/// that is going away must not hang on an unreachable one.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// `service.name` of the operator's spans unless `OTEL_SERVICE_NAME` says otherwise.
pub const OPERATOR_SERVICE: &str = "tusk-operator";
/// `service.name` of the instance managers' spans unless `OTEL_SERVICE_NAME` says otherwise.
pub const INSTANCE_SERVICE: &str = "tusk-instance";
/// The drill probe's service name.
pub const PROBE_SERVICE: &str = "tusk-drill-probe";

/// Held by `main` while the process runs; [`Telemetry::shutdown`] sends the
/// spans still waiting in the batch.
#[must_use = "spans still in the batch are lost unless `shutdown` runs"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported over OTLP.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports what is batched and stops the exporter, waiting at most
    /// [`SHUTDOWN_WAIT`]. Call it inside the runtime, after the work is done.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        let (done, finished) = tokio::sync::oneshot::channel();
        // The SDK's shutdown blocks until the batch task on the runtime has
        // exported. On a thread of its own it leaves the runtime free to drive
        // that task, and a thread left behind by a slow collector does not keep
        // the process alive (a blocking task of the runtime would).
        let spawned = std::thread::Builder::new()
            .name("otel-shutdown".into())
            .spawn(move || {
                let _ = done.send(provider.shutdown());
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot flush the last spans");
            return;
        }
        match tokio::time::timeout(SHUTDOWN_WAIT, finished).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(%error, "flushing the last spans failed"),
            Ok(Err(_)) => tracing::warn!("flushing the last spans stopped without an answer"),
            Err(_) => tracing::warn!(
                wait = ?SHUTDOWN_WAIT,
                "the last spans were not exported in time"
            ),
        }
    }
}

/// Installs the global subscriber: JSON lines on stdout filtered by `RUST_LOG`
/// (default `info`), and, when `OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, the same spans exported over
/// OTLP/HTTP as `service` (unless `OTEL_SERVICE_NAME` names another).
///
/// Must run inside the tokio runtime: the span batch is sent from a task.
/// A broken exporter configuration is logged and leaves logging working: an
/// observability setting must not stop the operator or a database.
pub fn init(service: &str) -> Result<Telemetry, Error> {
    let settings = otel::Settings::from_env(|name| std::env::var(name).ok());
    let (provider, failure) = match settings.as_ref().map(|s| otel::provider(s, service)) {
        None => (None, None),
        Some(Ok(provider)) => (Some(provider), None),
        Some(Err(error)) => (None, Some(error)),
    };
    tracing_subscriber::registry()
        .with(env_filter())
        .with(json_layer())
        .with(provider.as_ref().map(otel::layer))
        .try_init()
        .map_err(|e| Error(e.to_string()))?;
    if let Some(error) = failure {
        tracing::warn!(%error, "spans are not exported");
    }
    if let Some(settings) = &settings
        && let Some(protocol) = &settings.unsupported_protocol
    {
        tracing::warn!(
            %protocol,
            "this build exports spans only as http/protobuf; the endpoint must accept OTLP/HTTP"
        );
    }
    if provider.is_some() {
        tracing::info!(service, "exporting spans over OTLP/HTTP");
    }
    Ok(Telemetry { provider })
}

/// Installs JSON logging alone, unless [`init`] has already installed the
/// subscriber (as `main` does for the operator and the instance manager), in
/// which case it leaves that one in place.
pub fn init_logging() -> Result<(), Error> {
    if tracing::dispatcher::has_been_set() {
        return Ok(());
    }
    tracing_subscriber::registry()
        .with(env_filter())
        .with(json_layer())
        .try_init()
        .map_err(|e| Error(e.to_string()))
}

fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

fn json_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_target(true)
}
