//! Taking a base backup of a running PostgreSQL, primary or standby, to the
//! object store: a non-exclusive backup on one session (`pg_backup_start` …
//! `pg_backup_stop`), the data directory streamed as tar → zstd → multipart
//! upload without staging anything on disk, then `backup_label` and
//! `tablespace_map` at the end of the same tar, then `manifest.json` once
//! the WAL the backup needs is in the archive.
//!
//! The order is what makes a failure harmless: the data object only appears
//! when its upload completes (a failed stream aborts it, with an error, never
//! an early end), and the manifest — what makes a backup a backup — is
//! written last. Closing the session ends the backup in PostgreSQL too.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use jiff::Timestamp;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Client;

use super::manifest::{FORMAT, Manifest};
use crate::contract::Lsn;
use crate::objectstore::{self, Layout, Store, WalFile};

/// zstd level of base backups: level 1 with two workers keeps up with a
/// local disk read, and data files still shrink several times over.
const ZSTD_LEVEL: i32 = 1;
/// Compression workers beside the reading thread.
const ZSTD_WORKERS: u32 = 2;
/// Bytes handed from the compressing thread to the upload at a time, and how
/// many such chunks may wait: memory stays bounded whatever the data size.
const CHUNK: usize = 1 << 20;
const CHUNKS_IN_FLIGHT: usize = 8;
/// Parts uploaded in parallel.
const PARALLEL_PARTS: usize = 4;

/// Directories whose contents PostgreSQL rebuilds or that belong to the
/// running server only: kept empty in the backup (as `pg_basebackup` does).
const EMPTIED: &[&str] = &[
    "pg_wal",
    "pg_dynshmem",
    "pg_notify",
    "pg_replslot",
    "pg_serial",
    "pg_snapshots",
    "pg_stat_tmp",
    "pg_subtrans",
];
/// Files of the running server, or that a restore writes itself.
const LEFT_OUT: &[&str] = &[
    "postmaster.pid",
    "postmaster.opts",
    "backup_label",
    "backup_label.old",
    "tablespace_map",
    "standby.signal",
    "recovery.signal",
    "postgresql.auto.conf.tmp",
    "pg_internal.init",
];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Sql {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing the backup stream: {0}")]
    Stream(#[source] io::Error),
    #[error(transparent)]
    Store(#[from] objectstore::Error),
    #[error("PostgreSQL's backup label does not say {0}")]
    Label(&'static str),
    #[error("the WAL the backup ends in ({file}) was not archived within {waited:?}")]
    WalNotArchived { file: String, waited: Duration },
    #[error("the backup stream ended early: {0}")]
    Aborted(String),
}

impl Error {
    fn sql(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Self {
        move |source| Self::Sql { context, source }
    }
}

/// Where a running backup is, read by the manager's status endpoint while
/// the backup runs.
#[derive(Debug, Default)]
pub struct Progress {
    stage: AtomicU8,
    /// Bytes of the data directory to read, measured at the start.
    pub estimated_bytes: AtomicU64,
    /// Bytes of the tar stream so far (before compression).
    pub raw_bytes: AtomicU64,
    /// Bytes handed to the upload so far (after compression).
    pub stored_bytes: AtomicU64,
}

/// What a running backup is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Starting,
    /// Reading the data directory into the store.
    Streaming,
    /// The data is stored; waiting for the WAL the backup ends in to be
    /// archived (on a standby, the primary must switch to a new segment).
    WaitingForWal,
    Done,
}

impl Progress {
    pub fn stage(&self) -> Stage {
        match self.stage.load(Ordering::Relaxed) {
            0 => Stage::Starting,
            1 => Stage::Streaming,
            2 => Stage::WaitingForWal,
            _ => Stage::Done,
        }
    }

    fn set_stage(&self, stage: Stage) {
        let value = match stage {
            Stage::Starting => 0,
            Stage::Streaming => 1,
            Stage::WaitingForWal => 2,
            Stage::Done => 3,
        };
        self.stage.store(value, Ordering::Relaxed);
    }
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

/// What `pg_backup_start` and the server say before the data is read.
struct Started {
    begin_lsn: Lsn,
    standby: bool,
    version: u32,
    system_identifier: u64,
    segment_size: u64,
}

/// Takes one base backup; returns its manifest, already stored.
pub async fn take(request: Request<'_>, progress: Arc<Progress>) -> Result<Manifest, Error> {
    let started_at = request.started_at;
    let id = request.id.to_owned();
    let client = &request.client;
    let label = format!("tusk {} {}", request.backup, id);
    progress.set_stage(Stage::Starting);
    let started = start(client, &label).await?;
    tracing::info!(backup = request.backup, %id, begin = %started.begin_lsn, standby = started.standby, "backup started");

    let estimated = tokio::task::spawn_blocking({
        let pgdata = request.pgdata.to_owned();
        move || estimate(&pgdata)
    })
    .await
    .unwrap_or(0);
    progress.estimated_bytes.store(estimated, Ordering::Relaxed);
    progress.set_stage(Stage::Streaming);

    // The tar is written by a blocking thread; once the data directory is in
    // it, the thread says so and waits for the label, which only
    // pg_backup_stop gives.
    let (chunks, receiver) = mpsc::channel::<io::Result<Bytes>>(CHUNKS_IN_FLIGHT);
    let (walked_tx, walked_rx) = oneshot::channel::<()>();
    let (label_tx, label_rx) = oneshot::channel::<Labels>();
    let writer = tokio::task::spawn_blocking({
        let pgdata = request.pgdata.to_owned();
        let progress = progress.clone();
        move || write_tar(&pgdata, chunks, walked_tx, label_rx, &progress)
    });

    let data_key = request.layout.backup_data_key(&id);
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
        let labels = stop(client, started.standby).await?;
        let end_lsn = labels.end_lsn;
        // The thread is gone only after an error the upload reports.
        let _ = label_tx.send(labels.clone());
        Ok::<_, Error>((labels, end_lsn))
    };
    let (uploaded, stopped) = tokio::join!(upload, stop);
    let written = writer.await.map_err(|e| Error::Aborted(e.to_string()))?;
    let stopped = stopped?;
    let written = written?;
    let stored_bytes = uploaded?;
    let (labels, end_lsn) = stopped;

    let timeline = labels.timeline()?;
    let begin_wal = labels.begin_wal()?;
    let end_wal = WalFile::ending_at(timeline, end_lsn.0, started.segment_size)
        .ok_or(Error::Label("where the backup ends"))?;
    progress.set_stage(Stage::WaitingForWal);
    wait_for_wal(request.store, request.layout, &end_wal, request.wal_timeout).await?;

    let manifest = Manifest {
        format: FORMAT,
        id: id.clone(),
        backup: request.backup.to_owned(),
        database: request.database.to_owned(),
        instance: request.instance.to_owned(),
        from_standby: started.standby,
        system_identifier: started.system_identifier,
        pg_version: started.version,
        timeline,
        begin_lsn: started.begin_lsn,
        end_lsn,
        begin_wal,
        end_wal: end_wal.name().to_owned(),
        started_at,
        completed_at: Timestamp::now(),
        raw_bytes: written.raw_bytes,
        stored_bytes,
        sha256: written.sha256,
        files: written.files,
    };
    request
        .store
        .put(
            &request.layout.backup_manifest_key(&id),
            manifest.to_json(),
            &[],
        )
        .await?;
    progress.set_stage(Stage::Done);
    tracing::info!(backup = request.backup, %id, end = %end_lsn, stored_bytes, "backup completed");
    Ok(manifest)
}

async fn start(client: &Client, label: &str) -> Result<Started, Error> {
    let row = client
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('server_version_num')::int, \
                    (SELECT system_identifier::text FROM pg_control_system()), \
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')",
            &[],
        )
        .await
        .map_err(Error::sql("reading the server's identity"))?;
    let standby: bool = row.get(0);
    let version: i32 = row.get(1);
    let system: String = row.get(2);
    let segment_size: i64 = row.get(3);
    // fast => true: an immediate checkpoint, as a backup someone asked for
    // now should not wait for the next scheduled one.
    let begin: String = client
        .query_one("SELECT pg_backup_start($1, true)::text", &[&label])
        .await
        .map_err(Error::sql("pg_backup_start"))?
        .get(0);
    Ok(Started {
        begin_lsn: begin.parse().map_err(|_| Error::Label("where it starts"))?,
        standby,
        version: u32::try_from(version).unwrap_or_default(),
        system_identifier: system
            .parse()
            .map_err(|_| Error::Label("the system identifier"))?,
        segment_size: u64::try_from(segment_size).unwrap_or_default(),
    })
}

/// What `pg_backup_stop` returns.
#[derive(Clone, Debug)]
struct Labels {
    end_lsn: Lsn,
    label: String,
    tablespace_map: String,
}

impl Labels {
    fn field(&self, name: &str) -> Option<&str> {
        self.label
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
    }

    fn timeline(&self) -> Result<u32, Error> {
        self.field("START TIMELINE")
            .and_then(|t| t.trim().parse().ok())
            .ok_or(Error::Label("START TIMELINE"))
    }

    /// `START WAL LOCATION: 0/2000028 (file 000000010000000000000002)`.
    fn begin_wal(&self) -> Result<String, Error> {
        self.field("START WAL LOCATION")
            .and_then(|v| v.split_once("(file ")?.1.strip_suffix(')'))
            .map(str::to_owned)
            .ok_or(Error::Label("START WAL LOCATION"))
    }
}

async fn stop(client: &Client, standby: bool) -> Result<Labels, Error> {
    // Not waiting for the archive here: on a standby PostgreSQL could not
    // (archive_mode=on archives on the primary only), and on a primary it
    // would wait forever while the store is down. `wait_for_wal` bounds it.
    let row = client
        .query_one(
            "SELECT lsn::text, labelfile, coalesce(spcmapfile, '') FROM pg_backup_stop(false)",
            &[],
        )
        .await
        .map_err(Error::sql("pg_backup_stop"))?;
    let end: String = row.get(0);
    let labels = Labels {
        end_lsn: end.parse().map_err(|_| Error::Label("where it ends"))?,
        label: row.get(1),
        tablespace_map: row.get(2),
    };
    if !standby {
        // The segment the backup ends in is complete only when the server
        // moves on; archive it now rather than at archive_timeout.
        client
            .execute("SELECT pg_switch_wal()", &[])
            .await
            .map_err(Error::sql("pg_switch_wal"))?;
    }
    Ok(labels)
}

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

/// The size of what the backup will read, for progress: the data directory
/// without the contents of the emptied directories.
fn estimate(pgdata: &Path) -> u64 {
    let mut total = 0;
    let mut dirs = vec![pgdata.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !(dir == pgdata && EMPTIED.iter().any(|e| entry.file_name() == *e)) {
                    dirs.push(entry.path());
                }
            } else if kind.is_file() {
                total += entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    total
}

/// What the tar thread wrote.
struct Written {
    raw_bytes: u64,
    sha256: String,
    files: u64,
}

/// The blocking half: tar → zstd → checksum → chunks for the upload. An
/// error is also sent down the channel, so the upload fails rather than
/// storing a short object.
fn write_tar(
    pgdata: &Path,
    chunks: mpsc::Sender<io::Result<Bytes>>,
    walked: oneshot::Sender<()>,
    labels: oneshot::Receiver<Labels>,
    progress: &Progress,
) -> Result<Written, Error> {
    let sink = ChunkSink::new(chunks.clone(), progress);
    let outcome = (|| -> Result<Written, Error> {
        let mut encoder = zstd::Encoder::new(sink, ZSTD_LEVEL).map_err(Error::Stream)?;
        encoder.multithread(ZSTD_WORKERS).map_err(Error::Stream)?;
        let counted = Counting {
            inner: encoder,
            progress,
        };
        let mut tar = tar::Builder::new(counted);
        tar.mode(tar::HeaderMode::Complete);
        tar.follow_symlinks(false);
        let mut files = 0;
        add_dir(&mut tar, pgdata, Path::new(""), &mut files, true)?;
        // pg_control last, as pg_basebackup does: a copy of it from after
        // every data file was read can only be newer than the backup start.
        add_file(
            &mut tar,
            &pgdata.join("global/pg_control"),
            Path::new("global/pg_control"),
        )?;
        files += 1;
        let _ = walked.send(());
        let labels = labels
            .blocking_recv()
            .map_err(|_| Error::Aborted("the backup was not stopped".into()))?;
        append_text(&mut tar, "backup_label", &labels.label)?;
        files += 1;
        if !labels.tablespace_map.is_empty() {
            append_text(&mut tar, "tablespace_map", &labels.tablespace_map)?;
            files += 1;
        }
        let counted = tar.into_inner().map_err(Error::Stream)?;
        let sink = counted.inner.finish().map_err(Error::Stream)?;
        let (sha256, _) = sink.finish().map_err(Error::Stream)?;
        Ok(Written {
            raw_bytes: progress.raw_bytes.load(Ordering::Relaxed),
            sha256,
            files,
        })
    })();
    if let Err(error) = &outcome {
        let _ = chunks.blocking_send(Err(io::Error::other(error.to_string())));
    }
    outcome
}

type Tar<'p> = tar::Builder<Counting<'p, zstd::Encoder<'static, ChunkSink<'p>>>>;

fn add_dir(
    tar: &mut Tar<'_>,
    dir: &Path,
    relative: &Path,
    files: &mut u64,
    top: bool,
) -> Result<(), Error> {
    for entry in sorted_entries(dir)? {
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        let path = entry.path();
        let inner = relative.join(&name);
        if LEFT_OUT.contains(&name_str.as_ref()) || name_str.starts_with("pgsql_tmp") {
            continue;
        }
        if top && name_str == "global" {
            // Everything but pg_control, which goes last.
            add_directory_entry(tar, &path, &inner)?;
            for child in sorted_entries(&path)? {
                if child.file_name() == "pg_control" {
                    continue;
                }
                add_entry(tar, &child.path(), &inner.join(child.file_name()), files)?;
            }
            continue;
        }
        if top && EMPTIED.contains(&name_str.as_ref()) {
            add_directory_entry(tar, &path, &inner)?;
            if name_str == "pg_wal" {
                add_directory_entry(tar, &path, &inner.join("archive_status"))?;
            }
            continue;
        }
        add_entry(tar, &path, &inner, files)?;
    }
    Ok(())
}

fn sorted_entries(dir: &Path) -> Result<Vec<std::fs::DirEntry>, Error> {
    let read = |source| Error::Read {
        path: dir.to_owned(),
        source,
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(read)?
        .collect::<Result<_, _>>()
        .map_err(read)?;
    entries.sort_by_key(|e| e.file_name());
    Ok(entries)
}

fn add_entry(tar: &mut Tar<'_>, path: &Path, inner: &Path, files: &mut u64) -> Result<(), Error> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        // Dropped or truncated away while we read: WAL replay recreates it.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    if meta.is_dir() {
        add_directory_entry(tar, path, inner)?;
        return add_dir(tar, path, inner, files, false);
    }
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata(&meta);
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        return tar
            .append_link(&mut header, inner, target)
            .map_err(Error::Stream);
    }
    if meta.is_file() {
        add_file(tar, path, inner)?;
        *files += 1;
    }
    Ok(())
}

fn add_directory_entry(tar: &mut Tar<'_>, path: &Path, inner: &Path) -> Result<(), Error> {
    let mut header = tar::Header::new_gnu();
    match std::fs::metadata(path) {
        Ok(meta) => header.set_metadata(&meta),
        Err(_) => header.set_mode(0o700),
    }
    header.set_entry_type(tar::EntryType::Directory);
    header.set_size(0);
    tar.append_data(&mut header, inner, io::empty())
        .map_err(Error::Stream)
}

/// A file as it is now: the size in the header is the size when it was
/// opened; a file that grows is cut there, one that shrinks is padded with
/// zeros (WAL replay from the backup's start repairs both, as for any torn
/// read of a running server's files).
fn add_file(tar: &mut Tar<'_>, path: &Path, inner: &Path) -> Result<(), Error> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let meta = file.metadata().map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let len = meta.len();
    let mut header = tar::Header::new_gnu();
    header.set_metadata(&meta);
    header.set_size(len);
    let exact = file.take(len).chain(io::repeat(0)).take(len);
    tar.append_data(&mut header, inner, ReadError::new(exact, path))
        .map_err(
            |e| match e.get_ref().and_then(|r| r.downcast_ref::<ReadFailure>()) {
                Some(failure) => Error::Read {
                    path: failure.path.clone(),
                    source: io::Error::new(e.kind(), failure.message.clone()),
                },
                None => Error::Stream(e),
            },
        )
}

fn append_text(tar: &mut Tar<'_>, name: &str, text: &str) -> Result<(), Error> {
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o600);
    header.set_size(text.len() as u64);
    header.set_mtime(Timestamp::now().as_second().try_into().unwrap_or_default());
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, name, text.as_bytes())
        .map_err(Error::Stream)
}

/// Tells a read error of a data file from a write error of the stream.
#[derive(Debug)]
struct ReadFailure {
    path: PathBuf,
    message: String,
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reading {}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for ReadFailure {}

struct ReadError<R> {
    inner: R,
    path: PathBuf,
}

impl<R> ReadError<R> {
    fn new(inner: R, path: &Path) -> Self {
        Self {
            inner,
            path: path.to_owned(),
        }
    }
}

impl<R: Read> Read for ReadError<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            io::Error::new(
                e.kind(),
                ReadFailure {
                    path: self.path.clone(),
                    message: e.to_string(),
                },
            )
        })
    }
}

/// Counts the tar stream's bytes before compression.
struct Counting<'p, W> {
    inner: W,
    progress: &'p Progress,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.progress
            .raw_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The compressed stream: hashed, counted, and handed to the upload in
/// chunks through a bounded channel (the reading thread waits when the
/// upload falls behind).
struct ChunkSink<'p> {
    chunks: mpsc::Sender<io::Result<Bytes>>,
    buffer: Vec<u8>,
    hash: Sha256,
    progress: &'p Progress,
}

impl<'p> ChunkSink<'p> {
    fn new(chunks: mpsc::Sender<io::Result<Bytes>>, progress: &'p Progress) -> Self {
        Self {
            chunks,
            buffer: Vec::with_capacity(CHUNK),
            hash: Sha256::new(),
            progress,
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK));
        self.chunks
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload stopped"))
    }

    /// Sends what is left; the stream ends when the sender is dropped.
    fn finish(mut self) -> io::Result<(String, u64)> {
        self.send()?;
        let digest = self.hash.finalize();
        let hex = digest.iter().map(|b| format!("{b:02x}")).collect();
        Ok((hex, self.progress.stored_bytes.load(Ordering::Relaxed)))
    }
}

impl Write for ChunkSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hash.update(buf);
        self.buffer.extend_from_slice(buf);
        self.progress
            .stored_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The upload's side of the channel, as an `AsyncRead`; an error sent by the
/// tar thread becomes a read error, so the upload is aborted.
pub(crate) struct ChannelReader {
    receiver: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl ChannelReader {
    pub(crate) fn new(receiver: mpsc::Receiver<io::Result<Bytes>>) -> Self {
        Self {
            receiver,
            current: Bytes::new(),
        }
    }
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while self.current.is_empty() {
            match self.receiver.poll_recv(cx) {
                Poll::Ready(Some(Ok(chunk))) => self.current = chunk,
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Err(error)),
                // Every sender gone: the end of the stream.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.current.len().min(buf.remaining());
        let chunk = self.current.split_to(n);
        buf.put_slice(&chunk);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_names_the_start_wal_and_timeline() {
        let labels = Labels {
            end_lsn: Lsn(0x3000120),
            label: "START WAL LOCATION: 0/3000028 (file 000000010000000000000003)\n\
                    CHECKPOINT LOCATION: 0/3000060\n\
                    BACKUP METHOD: streamed\n\
                    BACKUP FROM: standby\n\
                    START TIME: 2026-11-24 10:15:00 UTC\n\
                    LABEL: tusk b 20261124T101500Z\n\
                    START TIMELINE: 2\n"
                .into(),
            tablespace_map: String::new(),
        };
        assert_eq!(labels.timeline().expect("timeline"), 2);
        assert_eq!(
            labels.begin_wal().expect("begin"),
            "000000010000000000000003"
        );
        let empty = Labels {
            label: String::new(),
            ..labels
        };
        assert!(matches!(empty.timeline(), Err(Error::Label(_))));
    }

    #[tokio::test]
    async fn an_error_in_the_stream_fails_the_reader_instead_of_ending_it() {
        use tokio::io::AsyncReadExt;
        let (sender, receiver) = mpsc::channel(4);
        sender
            .send(Ok(Bytes::from_static(b"some")))
            .await
            .expect("send");
        sender
            .send(Err(io::Error::other("disk gone")))
            .await
            .expect("send");
        drop(sender);
        let mut reader = ChannelReader::new(receiver);
        let mut out = Vec::new();
        let error = reader.read_to_end(&mut out).await.expect_err("an error");
        assert_eq!(error.to_string(), "disk gone");
        assert_eq!(out, b"some");
    }
}
