//! The data directory as a base backup's stream, written by a blocking
//! thread: a tar (as `pg_basebackup` writes it: the server's own runtime
//! directories empty, its runtime files left out, `global/pg_control` last)
//! → zstd → [`ChunkSink`] to the upload; then `backup_label` and
//! `tablespace_map` at the end of the same tar, once the backup is stopped.
//!
//! A file that changes while it is read is cut or padded to the size it had
//! when opened; WAL replay from the backup's start repairs it, as for any
//! torn read of a running server's files.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};

use super::pipe::{Chunk, ChunkSink};
use super::progress::Progress;

/// zstd level of base backups: level 1 with two workers keeps up with a
/// local disk read, and data files still shrink several times over.
const ZSTD_LEVEL: i32 = 1;
/// Compression workers beside the reading thread.
const ZSTD_WORKERS: u32 = 2;

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
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing the backup stream: {0}")]
    Stream(#[source] io::Error),
    #[error("the backup stream ended early: {0}")]
    Aborted(String),
}

/// The size of what the backup will read, for progress: the data directory
/// without the contents of the emptied directories.
pub fn estimate(pgdata: &Path) -> u64 {
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

/// What ends the tar: PostgreSQL's files for the stopped backup.
pub struct Trailer {
    /// `backup_label`.
    pub label: String,
    /// `tablespace_map`; left out when empty.
    pub tablespace_map: String,
}

/// What the tar thread wrote.
pub struct Written {
    pub raw_bytes: u64,
    pub sha256: String,
    pub files: u64,
}

/// The blocking half: tar → zstd → checksum → chunks for the upload. Says
/// on `walked` when the data directory is in the stream, then waits for the
/// trailer, which only stopping the backup gives. An error is also sent down
/// the channel, so the upload fails rather than storing a short object.
pub fn write_tar(
    pgdata: &Path,
    chunks: mpsc::Sender<Chunk>,
    walked: oneshot::Sender<()>,
    trailer: oneshot::Receiver<Trailer>,
    progress: &Progress,
) -> Result<Written, Error> {
    let sink = ChunkSink::new(chunks.clone(), &progress.stored_bytes);
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
        let mut files = add_data_directory(&mut tar, pgdata)?;
        let _ = walked.send(());
        let trailer = trailer
            .blocking_recv()
            .map_err(|_| Error::Aborted("the backup was not stopped".into()))?;
        append_text(&mut tar, "backup_label", &trailer.label)?;
        files += 1;
        if !trailer.tablespace_map.is_empty() {
            append_text(&mut tar, "tablespace_map", &trailer.tablespace_map)?;
            files += 1;
        }
        let counted = tar.into_inner().map_err(Error::Stream)?;
        let sink = counted.inner.finish().map_err(Error::Stream)?;
        let sha256 = sink.finish().map_err(Error::Stream)?;
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

/// The data directory, `global/pg_control` last; returns the files added.
fn add_data_directory(tar: &mut Tar<'_>, pgdata: &Path) -> Result<u64, Error> {
    let mut files = 0;
    add_dir(tar, pgdata, Path::new(""), &mut files, true)?;
    // pg_control last, as pg_basebackup does: a copy of it from after
    // every data file was read can only be newer than the backup start.
    add_file(
        tar,
        &pgdata.join("global/pg_control"),
        Path::new("global/pg_control"),
    )?;
    Ok(files + 1)
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
