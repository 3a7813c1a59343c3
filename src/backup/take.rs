//! Taking a base backup of a running PostgreSQL, primary or standby, to the
//! object store: a non-exclusive backup on one session (`pg_backup_start` …
//! `pg_backup_stop`, in `session`), the data directory streamed as tar →
//! zstd (`tar_walk`) → multipart upload (`pipe` bridges the blocking writer
//! and the upload) without staging anything on disk, then `backup_label` and
//! `tablespace_map` at the end of the same tar, then `manifest.json` once the
//! WAL the backup needs is in the archive. This file puts those steps in
//! order.
//!
//! The order is what makes a failure harmless: the data object only appears
//! when its upload completes (a failed stream aborts it, with an error, never
//! an early end), and the manifest — what makes a backup a backup — is
//! written last. Closing the session ends the backup in PostgreSQL too.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Client;

use super::manifest::{FORMAT, Manifest};
use super::pipe::{CHUNKS_IN_FLIGHT, ChannelReader, Chunk};
use super::session::{self, Labels, Started};
use super::tar_walk::{self, Trailer, Written};
use crate::objectstore::{self, Layout, Store, WalFile};

pub use super::progress::{Progress, Stage};

/// Parts uploaded in parallel.
const PARALLEL_PARTS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Session(#[from] session::Error),
    #[error(transparent)]
    Tar(#[from] tar_walk::Error),
    #[error(transparent)]
    Store(#[from] objectstore::Error),
    #[error("PostgreSQL's backup label does not say {0}")]
    Label(&'static str),
    #[error("the WAL the backup ends in ({file}) was not archived within {waited:?}")]
    WalNotArchived { file: String, waited: Duration },
    #[error("the backup stream ended early: {0}")]
    Aborted(String),
    #[error("a backup named {id} is already stored ({key}); not writing over it")]
    Taken { id: String, key: String },
}

/// What to back up and where.
pub struct Request<'a> {
    /// A dedicated session to the local server as a superuser: the backup
    /// lives and dies with it.
    pub client: Client,
    pub pgdata: &'a Path,
    pub store: &'a Store,
    pub layout: &'a Layout,
    /// The Backup object, the Database and the instance, for the manifest.
    pub backup: &'a str,
    pub database: &'a str,
    pub instance: &'a str,
    /// How long the WAL the backup ends in may take to reach the archive.
    pub wal_timeout: Duration,
    /// When the run started, and its id ([`super::manifest::backup_id`] of it).
    pub started_at: Timestamp,
    pub id: &'a str,
}

/// Takes one base backup; returns its manifest, already stored.
pub async fn take(request: Request<'_>, progress: Arc<Progress>) -> Result<Manifest, Error> {
    let id = request.id;
    let label = format!("tusk {} {}", request.backup, id);
    progress.set_stage(Stage::Starting);
    refuse_taken(request.store, request.layout, id).await?;
    let started = session::start(&request.client, &label).await?;
    tracing::info!(backup = request.backup, %id, begin = %started.begin_lsn, standby = started.standby, "backup started");

    let estimated = tokio::task::spawn_blocking({
        let pgdata = request.pgdata.to_owned();
        move || tar_walk::estimate(&pgdata)
    })
    .await
    .unwrap_or(0);
    progress.estimated_bytes.store(estimated, Ordering::Relaxed);
    progress.set_stage(Stage::Streaming);
    let streamed = stream(&request, &started, &progress).await?;

    let end_lsn = streamed.labels.end_lsn;
    let wal = Wal {
        timeline: streamed.labels.timeline()?,
        begin: streamed.labels.begin_wal()?,
        end: WalFile::ending_at(streamed.labels.timeline()?, end_lsn.0, started.segment_size)
            .ok_or(Error::Label("where the backup ends"))?,
    };
    progress.set_stage(Stage::WaitingForWal);
    wait_for_wal(request.store, request.layout, &wal.end, request.wal_timeout).await?;

    let manifest = manifest_of(&request, &started, &streamed, wal);
    request
        .store
        .put(
            &request.layout.backup_manifest_key(id),
            manifest.to_json(),
            &[],
        )
        .await?;
    progress.set_stage(Stage::Done);
    tracing::info!(backup = request.backup, %id, end = %end_lsn, stored_bytes = streamed.stored_bytes, "backup completed");
    Ok(manifest)
}

/// Fails when a completed backup already has the id `id`: its manifest is
/// there. The manager gives its own runs distinct ids; this guards the
/// backups of another instance, or of this one before a restart, taken in
/// the same second. Data without a manifest is an interrupted run's and may
/// be written over.
pub async fn refuse_taken(store: &Store, layout: &Layout, id: &str) -> Result<(), Error> {
    let key = layout.backup_manifest_key(id);
    match store.head(&key).await? {
        Some(_) => Err(Error::Taken {
            id: id.to_owned(),
            key,
        }),
        None => Ok(()),
    }
}

/// What streaming the data left: the tar's figures, the bytes stored, and
/// what stopping the backup returned.
struct Streamed {
    written: Written,
    stored_bytes: u64,
    labels: Labels,
}

/// Streams the data directory to the store while the backup runs, and stops
/// the backup once the directory is read.
async fn stream(
    request: &Request<'_>,
    started: &Started,
    progress: &Arc<Progress>,
) -> Result<Streamed, Error> {
    // The tar is written by a blocking thread; once the data directory is in
    // it, the thread says so and waits for the label, which only
    // pg_backup_stop gives.
    let (chunks, receiver) = mpsc::channel::<Chunk>(CHUNKS_IN_FLIGHT);
    let (walked_tx, walked_rx) = oneshot::channel::<()>();
    let (trailer_tx, trailer_rx) = oneshot::channel::<Trailer>();
    let writer = tokio::task::spawn_blocking({
        let pgdata = request.pgdata.to_owned();
        let progress = progress.clone();
        move || tar_walk::write_tar(&pgdata, chunks, walked_tx, trailer_rx, &progress)
    });

    let data_key = request.layout.backup_data_key(request.id);
    let metadata = [("tusk-backup", request.backup)];
    let upload = request.store.upload(
        &data_key,
        ChannelReader::new(receiver),
        PARALLEL_PARTS,
        &metadata,
    );
    let stop = async {
        // The tar thread ends early only on an error, which the upload sees.
        if walked_rx.await.is_err() {
            return Err(Error::Aborted(
                "the data directory could not be read".into(),
            ));
        }
        let labels = session::stop(&request.client, started.standby).await?;
        // The thread is gone only after an error the upload reports.
        let _ = trailer_tx.send(Trailer {
            label: labels.label.clone(),
            tablespace_map: labels.tablespace_map.clone(),
        });
        Ok::<_, Error>(labels)
    };
    let (uploaded, stopped) = tokio::join!(upload, stop);
    let written = writer.await.map_err(|e| Error::Aborted(e.to_string()))?;
    let labels = stopped?;
    let written = written?;
    let stored_bytes = uploaded?;
    Ok(Streamed {
        written,
        stored_bytes,
        labels,
    })
}

/// The WAL the backup needs, from its label and where it ended.
struct Wal {
    timeline: u32,
    begin: String,
    end: WalFile,
}

/// The manifest of the backup, complete now.
fn manifest_of(
    request: &Request<'_>,
    started: &Started,
    streamed: &Streamed,
    wal: Wal,
) -> Manifest {
    Manifest {
        format: FORMAT,
        id: request.id.to_owned(),
        backup: request.backup.to_owned(),
        database: request.database.to_owned(),
        instance: request.instance.to_owned(),
        from_standby: started.standby,
        system_identifier: started.system_identifier,
        pg_version: started.version,
        timeline: wal.timeline,
        begin_lsn: started.begin_lsn,
        end_lsn: streamed.labels.end_lsn,
        begin_wal: wal.begin,
        end_wal: wal.end.name().to_owned(),
        started_at: request.started_at,
        completed_at: Timestamp::now(),
        raw_bytes: streamed.written.raw_bytes,
        stored_bytes: streamed.stored_bytes,
        sha256: streamed.written.sha256.clone(),
        files: streamed.written.files,
    }
}

/// Waits, up to `timeout`, for `file` to be in the archive.
async fn wait_for_wal(
    store: &Store,
    layout: &Layout,
    file: &WalFile,
    timeout: Duration,
) -> Result<(), Error> {
    let key = layout.wal_key(file);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if store.head(&key).await?.is_some() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::WalNotArchived {
                file: file.name().to_owned(),
                waited: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
