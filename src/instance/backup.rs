//! Base backups the operator asks this instance for (`POST /backups`): one
//! at a time, run in the background, their outcome kept until the operator
//! has read it (`GET /backups`). The taking itself is [`crate::backup::take`].
//!
//! What is kept lives in memory only: a manager that restarts forgets its
//! runs, and the operator, asking again, learns that the run is gone and
//! fails the Backup (the session that held the backup died with it; nothing
//! was committed, as the manifest comes last).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;

use super::{Shared, sql};
use crate::backup::manifest::{backup_id, id_second};
use crate::backup::take::{self, Progress, Stage};
use crate::contract::{BackupRun, BackupStage, BackupState};
use crate::objectstore::{Configured, Layout, Store};
use crate::wal;

/// Finished runs kept for the operator to read.
const KEPT: usize = 16;
/// How long the WAL a backup ends in may take to reach the archive.
const WAL_TIMEOUT: Duration = Duration::from_secs(300);

struct Run {
    backup: String,
    started_at: Timestamp,
    /// The second its id names ([`id_second`]).
    id_at: Timestamp,
    location: Option<String>,
    progress: Arc<Progress>,
    outcome: Option<Result<crate::backup::manifest::Manifest, String>>,
}

impl Run {
    fn state(&self) -> BackupState {
        let stage = match self.progress.stage() {
            Stage::Starting => BackupStage::Starting,
            Stage::Streaming => BackupStage::Streaming,
            Stage::WaitingForWal => BackupStage::WaitingForWal,
            Stage::Done => BackupStage::Done,
        };
        let load = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed);
        let mut state = BackupState {
            backup: self.backup.clone(),
            run: BackupRun::Running,
            stage,
            started_at: self.started_at.to_string(),
            completed_at: None,
            begin_lsn: None,
            end_lsn: None,
            estimated_bytes: load(&self.progress.estimated_bytes),
            raw_bytes: load(&self.progress.raw_bytes),
            stored_bytes: load(&self.progress.stored_bytes),
            location: self.location.clone(),
            error: None,
        };
        match &self.outcome {
            None => {}
            Some(Ok(manifest)) => {
                state.run = BackupRun::Completed;
                state.completed_at = Some(manifest.completed_at.to_string());
                state.begin_lsn = Some(manifest.begin_lsn);
                state.end_lsn = Some(manifest.end_lsn);
                state.raw_bytes = manifest.raw_bytes;
                state.stored_bytes = manifest.stored_bytes;
            }
            Some(Err(error)) => {
                state.run = BackupRun::Failed;
                state.error = Some(error.clone());
            }
        }
        state
    }
}

/// The runs of this manager: at most one running, then the finished ones.
#[derive(Default)]
pub(crate) struct Registry {
    runs: Mutex<VecDeque<Run>>,
}

/// Why a backup cannot start here.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("backup {0} is running on this instance; one at a time")]
    Busy(String),
    #[error("{0}")]
    NotConfigured(String),
    #[error("{0}")]
    Failed(String),
}

impl Registry {
    pub fn states(&self) -> Vec<BackupState> {
        self.lock().iter().map(Run::state).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Run>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, backup: &str, outcome: Result<crate::backup::manifest::Manifest, String>) {
        let mut runs = self.lock();
        if let Some(run) = runs.iter_mut().find(|r| r.backup == backup) {
            run.outcome = Some(outcome);
        }
    }
}

/// The object store this pod names, and the Database name of its key layout.
fn store_settings(shared: &Shared) -> Result<(Configured, String), Refused> {
    let configured = Configured::from_env(|name| std::env::var(name).ok())
        .map_err(|e| Refused::NotConfigured(e.to_string()))?;
    let database = shared
        .config
        .database
        .clone()
        .ok_or_else(|| Refused::NotConfigured("TUSK_DATABASE is not set".into()))?;
    Ok((configured, database))
}

/// Starts the backup `backup` unless it ran already (then its state is the
/// answer) or another one is running.
pub(crate) fn start(shared: &Arc<Shared>, backup: &str) -> Result<BackupState, Refused> {
    let (configured, database) = store_settings(shared)?;
    let mut runs = shared.backups.lock();
    if let Some(run) = runs.iter().find(|r| r.backup == backup) {
        return Ok(run.state());
    }
    if let Some(running) = runs.iter().find(|r| r.outcome.is_none()) {
        return Err(Refused::Busy(running.backup.clone()));
    }
    let started_at = Timestamp::now();
    let id_at = id_second(started_at, runs.iter().map(|r| r.id_at).max());
    let id = backup_id(id_at);
    let system = wal::system_identifier(&shared.config.pgdata).ok();
    let location = system.map(|system| {
        let layout = Layout::new(configured.path.as_deref(), &database, system);
        format!(
            "s3://{}/{}{id}/",
            configured.store.bucket,
            layout.base_prefix()
        )
    });
    let progress = Arc::new(Progress::default());
    runs.push_front(Run {
        backup: backup.to_owned(),
        started_at,
        id_at,
        location,
        progress: progress.clone(),
        outcome: None,
    });
    runs.truncate(KEPT);
    let state = runs.front().map(Run::state);
    drop(runs);

    let task_shared = shared.clone();
    let name = backup.to_owned();
    tokio::spawn(async move {
        let outcome = run(
            &task_shared,
            &configured,
            &database,
            &name,
            started_at,
            &id,
            progress,
        )
        .await
        .map_err(|e| e.to_string());
        match &outcome {
            Ok(manifest) => tracing::info!(backup = %name, id = %manifest.id, "backup completed"),
            Err(error) => tracing::warn!(backup = %name, %error, "backup failed"),
        }
        task_shared.backups.finish(&name, outcome);
    });
    state.ok_or_else(|| Refused::NotConfigured("the run was not recorded".into()))
}

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error(transparent)]
    Store(#[from] crate::objectstore::Error),
    #[error(transparent)]
    Wal(#[from] wal::Error),
    #[error("connecting to PostgreSQL: {0}")]
    Connect(#[source] tokio_postgres::Error),
    #[error(transparent)]
    Take(#[from] take::Error),
}

async fn run(
    shared: &Shared,
    configured: &Configured,
    database: &str,
    backup: &str,
    started_at: Timestamp,
    id: &str,
    progress: Arc<Progress>,
) -> Result<crate::backup::manifest::Manifest, RunError> {
    let config = &shared.config;
    let store = Store::new(&configured.store)?;
    let system = wal::system_identifier(&config.pgdata)?;
    let layout = Layout::new(configured.path.as_deref(), database, system);
    let client = sql::connect_local(&config.socket_dir, config.port)
        .await
        .map_err(RunError::Connect)?;
    let request = take::Request {
        client,
        pgdata: &config.pgdata,
        store: &store,
        layout: &layout,
        backup,
        database,
        instance: &config.instance,
        wal_timeout: WAL_TIMEOUT,
        started_at,
        id,
    };
    Ok(take::take(request, progress).await?)
}

/// `POST /retention`: prunes this system's backups and WAL to the recovery
/// window. Runs on whichever instance is asked (the operator asks the
/// primary); a pass beside another does no harm, both delete the same keys.
pub(crate) async fn prune(
    shared: &Shared,
    window: Duration,
) -> Result<crate::contract::RetentionReport, Refused> {
    let (configured, database) = store_settings(shared)?;
    let system = wal::system_identifier(&shared.config.pgdata)
        .map_err(|e| Refused::Failed(e.to_string()))?;
    let store = Store::new(&configured.store).map_err(|e| Refused::Failed(e.to_string()))?;
    let layout = Layout::new(configured.path.as_deref(), &database, system);
    let plan = crate::backup::prune::prune(&store, &layout, system, window, Timestamp::now())
        .await
        .map_err(|e| Refused::Failed(e.to_string()))?;
    Ok(crate::contract::RetentionReport {
        deleted: plan.delete.len(),
        removed: plan.removed,
        kept: plan.kept,
        interrupted_removed: plan.interrupted_removed,
        wal_removed: plan.wal_removed,
    })
}
