//! `tusk wal-archive %p` and `tusk wal-restore %f %p`: PostgreSQL's
//! `archive_command` and `restore_command`, to and from the object store.
//!
//! Archiving is idempotent: a file already in the store with the same
//! content succeeds again (PostgreSQL retries after a crash between the
//! upload and its own bookkeeping); different content under the same name
//! fails loudly and never overwrites, which is what protects `.history`
//! files and everything else. For speed, one call also uploads up to
//! `parallel - 1` further files PostgreSQL has marked `.ready`, and leaves a
//! marker for each in a spool directory so that PostgreSQL's later call for
//! it succeeds at once. Restoring fetches the asked segment and, in
//! parallel, the next ones into a spool, so replay rarely waits on the store.
//!
//! [`dir`] keeps a data directory's WAL with it when `pg_wal` lives on its
//! own volume (`spec.walStorage`); [`outage`] points archiving at an
//! unreachable store for a drill.

pub mod dir;
pub mod outage;

use std::io;
use std::path::{Path, PathBuf};

use futures::stream::{self, StreamExt};

use crate::objectstore::{self, Layout, NotAWalFile, Store, WalFile, WalKind};

/// zstd level for WAL: fast, and WAL compresses well even so.
const ZSTD_LEVEL: i32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Name(#[from] NotAWalFile),
    #[error(transparent)]
    Config(#[from] objectstore::ConfigError),
    #[error(transparent)]
    Store(#[from] objectstore::Error),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{key} is already in the store with other content than {path}: refusing to overwrite it"
    )]
    Conflict { key: String, path: PathBuf },
    #[error("{key} in the store is not valid zstd: {source}")]
    Corrupt {
        key: String,
        #[source]
        source: io::Error,
    },
    #[error("{0} is not in the archive")]
    NotArchived(String),
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Error + use<> {
    let path = path.to_owned();
    move |source| Error::Io { what, path, source }
}

/// What both commands need: the data directory, where to keep their spool,
/// the store and the layout of this system in it.
pub struct Archive {
    pub pgdata: PathBuf,
    pub spool: PathBuf,
    pub store: Store,
    pub layout: Layout,
    pub parallel: usize,
}

/// The system identifier, the first field of `global/pg_control` (stored in
/// the machine's byte order, which is the one reading it).
pub fn system_identifier(pgdata: &Path) -> Result<u64, Error> {
    let path = pgdata.join("global/pg_control");
    let bytes = std::fs::read(&path).map_err(io_error("reading", &path))?;
    let first: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Error::Io {
            what: "reading",
            path: path.clone(),
            source: io::Error::new(io::ErrorKind::UnexpectedEof, "shorter than a control file"),
        })?;
    Ok(u64::from_ne_bytes(first))
}

/// The spool next to the data directory (on the same volume, so a prefetched
/// segment is renamed into place, not copied).
pub fn default_spool(pgdata: &Path) -> PathBuf {
    pgdata.parent().unwrap_or(pgdata).join("tusk-wal-spool")
}

/// The spool of `tusk wal-restore --source`: apart from [`default_spool`], so
/// that a segment prefetched from a restore's source is never taken later for
/// this Database's own segment of the same name.
pub fn source_spool(pgdata: &Path) -> PathBuf {
    pgdata
        .parent()
        .unwrap_or(pgdata)
        .join("tusk-wal-spool-source")
}

/// Where `tusk wal-archive` leaves the error of its last call while archiving
/// fails, for the instance manager to report; beside the data directory, so
/// base backups do not carry it.
pub fn archive_error_file(pgdata: &Path) -> PathBuf {
    pgdata
        .parent()
        .unwrap_or(pgdata)
        .join("tusk-wal-archive.error")
}

/// Leaves `error` in [`archive_error_file`] (best effort: the outcome for
/// PostgreSQL is the command's exit status, not the note).
pub fn record_archive_error(pgdata: &Path, error: &Error) {
    let _ = std::fs::write(archive_error_file(pgdata), error.to_string());
}

/// Compresses `data` for the store.
pub fn compress(data: &[u8]) -> io::Result<Vec<u8>> {
    zstd::bulk::compress(data, ZSTD_LEVEL)
}

fn decompress(key: &str, data: &[u8]) -> Result<Vec<u8>, Error> {
    zstd::stream::decode_all(data).map_err(|source| Error::Corrupt {
        key: key.to_owned(),
        source,
    })
}

/// A stored (compressed) `.history` file, parsed; the message says what is
/// wrong with it.
pub fn parse_history_file(
    key: &str,
    stored: &[u8],
) -> Result<Vec<crate::backup::select::Switch>, String> {
    let data = decompress(key, stored).map_err(|e| e.to_string())?;
    let text = String::from_utf8(data).map_err(|e| format!("{key} is not text: {e}"))?;
    crate::backup::select::parse_history(&text)
        .ok_or_else(|| format!("{key} is not a timeline history file"))
}

/// What one `wal-archive` call did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Archived {
    /// Files uploaded by this call (the asked one first, unless it was
    /// already in the store or spooled).
    pub uploaded: Vec<String>,
    /// The asked file was uploaded ahead by an earlier call.
    pub from_spool: bool,
}

impl Archive {
    fn archived_marker(&self, name: &str) -> PathBuf {
        self.spool.join("archived").join(name)
    }

    fn restored_file(&self, name: &str) -> PathBuf {
        self.spool.join("restored").join(name)
    }

    /// `archive_command`: `path` as PostgreSQL gives it (`%p`, relative to
    /// the data directory, or absolute). A failure's message is left in
    /// [`archive_error_file`] until a call succeeds.
    pub async fn archive(&self, path: &Path) -> Result<Archived, Error> {
        let result = self.archive_files(path).await;
        let record = archive_error_file(&self.pgdata);
        // Best effort: the outcome for PostgreSQL is the result, not the note.
        match &result {
            Ok(_) => {
                if record.exists() {
                    let _ = std::fs::remove_file(&record);
                }
            }
            Err(error) => record_archive_error(&self.pgdata, error),
        }
        result
    }

    async fn archive_files(&self, path: &Path) -> Result<Archived, Error> {
        let path = self.pgdata.join(path);
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| NotAWalFile(path.display().to_string()))?
            .to_owned();
        let asked = WalFile::parse(&name)?;
        let marker = self.archived_marker(&name);
        if marker.exists() {
            std::fs::remove_file(&marker).map_err(io_error("removing", &marker))?;
            return Ok(Archived {
                uploaded: Vec::new(),
                from_spool: true,
            });
        }
        let wal_dir = path.parent().unwrap_or(&self.pgdata).to_owned();
        let ahead: Vec<WalFile> = if self.parallel > 1 {
            ready_files(&wal_dir)?
                .into_iter()
                .filter(|f| f.name() != name && !self.archived_marker(f.name()).exists())
                .take(self.parallel - 1)
                .collect()
        } else {
            Vec::new()
        };
        let batch: Vec<WalFile> = std::iter::once(asked).chain(ahead).collect();
        let results: Vec<(WalFile, Result<bool, Error>)> = stream::iter(batch)
            .map(|file| {
                let wal_dir = &wal_dir;
                async move {
                    let result = self.upload_one(&wal_dir.join(file.name()), &file).await;
                    (file, result)
                }
            })
            .buffered(self.parallel.max(1))
            .collect()
            .await;
        let mut archived = Archived::default();
        for (index, (file, result)) in results.into_iter().enumerate() {
            match result {
                Ok(uploaded) => {
                    if uploaded {
                        archived.uploaded.push(file.name().to_owned());
                    }
                    if index > 0 {
                        self.mark_archived(file.name())?;
                    }
                }
                // The asked file's failure is the command's; one of the files
                // ahead failing only means PostgreSQL will ask for it itself.
                Err(error) if index == 0 => return Err(error),
                Err(error) => {
                    eprintln!(
                        "tusk wal-archive: {} will be archived when asked: {error}",
                        file.name()
                    );
                }
            }
        }
        Ok(archived)
    }

    fn mark_archived(&self, name: &str) -> Result<(), Error> {
        let marker = self.archived_marker(name);
        if let Some(dir) = marker.parent() {
            std::fs::create_dir_all(dir).map_err(io_error("creating", dir))?;
        }
        std::fs::write(&marker, b"").map_err(io_error("writing", &marker))
    }

    /// Uploads one file unless the store has it already; `Ok(false)` when it
    /// had the same content.
    async fn upload_one(&self, path: &Path, file: &WalFile) -> Result<bool, Error> {
        let data = tokio::fs::read(path)
            .await
            .map_err(io_error("reading", path))?;
        let key = self.layout.wal_key(file);
        if let Some(stored) = self.store.get(&key).await? {
            return if decompress(&key, &stored)? == data {
                Ok(false)
            } else {
                Err(Error::Conflict {
                    key,
                    path: path.to_owned(),
                })
            };
        }
        let compressed = compress(&data).map_err(io_error("compressing", path))?;
        let size = data.len().to_string();
        self.store
            .put(&key, compressed, &[("wal-size", size.as_str())])
            .await?;
        Ok(true)
    }

    /// `restore_command`: writes WAL file `name` to `destination` (relative to
    /// the data directory, or absolute). [`Error::NotArchived`] when the
    /// store does not have it, which is how recovery learns it reached the
    /// end of the archive.
    pub async fn restore(&self, name: &str, destination: &Path) -> Result<(), Error> {
        let file = WalFile::parse(name)?;
        let destination = self.pgdata.join(destination);
        let spooled = self.restored_file(name);
        if spooled.exists() {
            move_file(&spooled, &destination)?;
            self.prefetch(&file, None).await;
            return Ok(());
        }
        let key = self.layout.wal_key(&file);
        let stored = self
            .store
            .get(&key)
            .await?
            .ok_or_else(|| Error::NotArchived(name.to_owned()))?;
        let data = decompress(&key, &stored)?;
        write_atomically(&destination, &data)?;
        self.prefetch(&file, Some(data.len() as u64)).await;
        Ok(())
    }

    /// Fetches the segments after `file` into the spool, `parallel - 1` of
    /// them, stopping at the first the store does not have. Failures are
    /// only a missed speed-up: PostgreSQL asks for each segment anyway.
    async fn prefetch(&self, file: &WalFile, segment_size: Option<u64>) {
        if self.parallel < 2 || file.kind() != WalKind::Segment {
            return;
        }
        let size = segment_size.unwrap_or(DEFAULT_SEGMENT_SIZE);
        let mut next = Vec::new();
        let mut cursor = file.clone();
        while next.len() < self.parallel - 1 {
            match cursor.next_segment(size) {
                Some(following) => {
                    cursor = following.clone();
                    if !self.restored_file(following.name()).exists() {
                        next.push(following);
                    }
                }
                None => break,
            }
        }
        let dir = self.spool.join("restored");
        if let Err(error) = std::fs::create_dir_all(&dir) {
            eprintln!(
                "tusk wal-restore: no prefetch into {}: {error}",
                dir.display()
            );
            return;
        }
        stream::iter(next)
            .map(|file| async move {
                let key = self.layout.wal_key(&file);
                match self.store.get(&key).await {
                    Ok(Some(stored)) => match decompress(&key, &stored) {
                        Ok(data) => {
                            if let Err(error) =
                                write_atomically(&self.restored_file(file.name()), &data)
                            {
                                eprintln!("tusk wal-restore: prefetching {file}: {error}");
                            }
                        }
                        Err(error) => eprintln!("tusk wal-restore: prefetching {file}: {error}"),
                    },
                    Ok(None) => {}
                    Err(error) => eprintln!("tusk wal-restore: prefetching {file}: {error}"),
                }
            })
            .buffer_unordered(self.parallel)
            .collect::<Vec<()>>()
            .await;
    }
}

/// PostgreSQL's default (and Tusk's: it never sets `--wal-segsize`).
pub const DEFAULT_SEGMENT_SIZE: u64 = 16 * 1024 * 1024;

/// The `.ready` files of `wal_dir/archive_status`, oldest first (WAL file
/// names sort in WAL order within a timeline).
fn ready_files(wal_dir: &Path) -> Result<Vec<WalFile>, Error> {
    let status = wal_dir.join("archive_status");
    let entries = match std::fs::read_dir(&status) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("listing", &status)(e)),
    };
    let mut files: Vec<WalFile> = entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            WalFile::parse(name.strip_suffix(".ready")?).ok()
        })
        .collect();
    files.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(files)
}

/// Writes `path` through a temporary file and a rename, so a crash never
/// leaves a short file where PostgreSQL would read it.
/// Moves a prefetched segment from the spool to where PostgreSQL asked for
/// it. With a WAL volume of its own (`spec.walStorage`) `pg_wal` is on
/// another filesystem than the spool, where a rename fails (`EXDEV`): had
/// that failed the `restore_command`, recovery would have taken it for the
/// end of the archive and promoted early, without the rest of the WAL.
fn move_file(from: &Path, to: &Path) -> Result<(), Error> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
            let data = std::fs::read(from).map_err(io_error("reading", from))?;
            write_atomically(to, &data)?;
            std::fs::remove_file(from).map_err(io_error("removing", from))
        }
        other => other.map_err(io_error("moving", from)),
    }
}

fn write_atomically(path: &Path, data: &[u8]) -> Result<(), Error> {
    let tmp = path.with_extension("tusk-partial");
    std::fs::write(&tmp, data).map_err(io_error("writing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io_error("moving", &tmp))
}
