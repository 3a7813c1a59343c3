//! Logging (JSON lines through `tracing`) and Prometheus metrics.

pub mod metrics;

use tracing_subscriber::{EnvFilter, prelude::*};

use crate::error::Error;

/// Installs the global subscriber: JSON lines on stdout, filtered by `RUST_LOG`
/// (default `info`).
pub fn init_logging() -> Result<(), Error> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_target(true);
    tracing_subscriber::registry()
        .with(filter)
        .with(json)
        .try_init()
        .map_err(|e| Error::Logging(e.to_string()))
}
