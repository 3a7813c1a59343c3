//! The probe's HTTP side: the report while it writes, and the finish that
//! stops the writer, reads every id back and answers the same final report
//! to every later call (a restarted operator may ask again).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::{OnceCell, watch};
use tokio::task::JoinHandle;

use crate::contract::drill::{ProbeReport, probe_path};

use super::record::Record;
use super::target::Target;
use super::{Error, writer};

/// How long the finish keeps trying to read the table back (the Database
/// may still be settling after the fault).
const READ_BACK_FOR: Duration = Duration::from_secs(30);

struct Probe {
    target: Target,
    record: Arc<Mutex<Record>>,
    stop: watch::Sender<bool>,
    writing: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    finished: OnceCell<ProbeReport>,
}

/// Starts writing and serves the report on `listen` until SIGTERM.
pub async fn serve(target: Target, listen: SocketAddr, interval: Duration) -> Result<(), Error> {
    let record = Arc::new(Mutex::new(Record::default()));
    let (stop, stopped) = watch::channel(false);
    let writing = tokio::spawn(writer::write(
        target.clone(),
        record.clone(),
        interval,
        stopped,
    ));
    let probe = Arc::new(Probe {
        target,
        record,
        stop,
        writing: tokio::sync::Mutex::new(Some(writing)),
        finished: OnceCell::new(),
    });
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(probe_path::REPORT, get(report))
        .route(probe_path::FINISH, post(finish))
        .with_state(probe);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| Error::Listen {
            addr: listen,
            source,
        })?;
    tracing::info!(%listen, "the drill probe is writing and serving its report");
    axum::serve(listener, router)
        .with_graceful_shutdown(terminated())
        .await
        .map_err(Error::Serve)
}

/// As PID 1 the probe gets no default SIGTERM handling: stop on it.
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut signal) => {
            signal.recv().await;
        }
        Err(err) => {
            tracing::warn!(%err, "cannot watch SIGTERM");
            std::future::pending::<()>().await;
        }
    }
}

async fn report(State(probe): State<Arc<Probe>>) -> Json<ProbeReport> {
    if let Some(done) = probe.finished.get() {
        return Json(done.clone());
    }
    let record = probe.record.lock().unwrap_or_else(PoisonError::into_inner);
    Json(record.report())
}

async fn finish(State(probe): State<Arc<Probe>>) -> Json<ProbeReport> {
    Json(
        probe
            .finished
            .get_or_init(|| finishing(&probe))
            .await
            .clone(),
    )
}

async fn finishing(probe: &Probe) -> ProbeReport {
    let _ = probe.stop.send(true);
    if let Some(writing) = probe.writing.lock().await.take()
        && let Err(err) = writing.await
    {
        tracing::warn!(%err, "the writer ended abnormally");
    }
    let record = probe
        .record
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let deadline = Instant::now() + READ_BACK_FOR;
    loop {
        match writer::read_back(&probe.target).await {
            Ok(present) => return record.finished(&present),
            Err(err) if Instant::now() < deadline => {
                tracing::warn!(%err, "cannot read the probe's writes back yet");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(err) => {
                return record.unverified(format!("reading the acknowledged writes back: {err}"));
            }
        }
    }
}
