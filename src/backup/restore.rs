//! Unpacking a base backup into an empty data directory: the stored
//! `data.tar.zst` is streamed from the store, checked against its manifest
//! (size and SHA-256 of what is stored, size of the tar), decompressed and
//! unpacked as it arrives, with nothing staged on disk but the files
//! themselves. A backup that does not match its manifest is an error naming
//! the key; what was unpacked of it must not be started.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use bytes::Bytes;
use futures::stream::{self, StreamExt};
use sha2::{Digest, Sha256};

use super::manifest::Manifest;
use crate::objectstore::{Layout, Store};

/// Chunks in flight between the download and the unpacking thread.
const IN_FLIGHT: usize = 4;
/// The size of each ranged GET, and how many run at once.
pub const RANGE: u64 = 8 * 1024 * 1024;
const PARALLEL: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] crate::objectstore::Error),
    #[error("{key} is missing from the store")]
    Missing { key: String },
    #[error("downloading {key}: {message}")]
    Download { key: String, message: String },
    #[error("{key} does not match its manifest: {what}")]
    Mismatch { key: String, what: String },
    #[error("unpacking {key} into {}: {source}", .into.display())]
    Unpack {
        key: String,
        into: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{into} is not empty: a backup is only unpacked into an empty directory", into = .0.display())]
    NotEmpty(PathBuf),
}

/// What was unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unpacked {
    pub stored_bytes: u64,
    pub raw_bytes: u64,
}

/// The bytes of the download, as a blocking reader for zstd and tar.
struct Chunks {
    receiver: Receiver<Bytes>,
    current: Bytes,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.recv() {
                Ok(next) => self.current = next,
                // The sender is gone: the end, or a download that failed
                // (which the caller reports).
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Counts what passes through.
struct Counted<R> {
    inner: R,
    bytes: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// An error with its causes: the SDK's stream error alone says only
/// "streaming error" when, say, the object failed its stored checksum.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// Unpacks backup `manifest` of `layout` into `into`, which must be empty
/// or absent.
pub async fn unpack(
    store: &Store,
    layout: &Layout,
    manifest: &Manifest,
    into: &Path,
) -> Result<Unpacked, Error> {
    unpack_counting(store, layout, manifest, into, &AtomicU64::new(0), RANGE).await
}

/// [`unpack`] in ranged GETs of `range` bytes, adding the stored bytes
/// downloaded to `downloaded` as they arrive (for progress reports).
pub async fn unpack_counting(
    store: &Store,
    layout: &Layout,
    manifest: &Manifest,
    into: &Path,
    downloaded: &AtomicU64,
    range: u64,
) -> Result<Unpacked, Error> {
    let range = range.max(1);
    if std::fs::read_dir(into).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Error::NotEmpty(into.to_owned()));
    }
    let key = layout.backup_data_key(&manifest.id);
    if store.head(&key).await?.is_none() {
        return Err(Error::Missing { key: key.clone() });
    }
    let (sender, receiver): (SyncSender<Bytes>, _) = sync_channel(IN_FLIGHT);
    let unpacking = tokio::task::spawn_blocking({
        let (key, into) = (key.clone(), into.to_owned());
        move || unpack_stream(&key, &into, receiver)
    });
    let download = Download {
        store,
        key: &key,
        size: manifest.stored_bytes,
        range,
        downloaded,
    };
    let (downloaded, sha256, stored) = download.send_to(sender).await;
    let unpacked = unpacking.await.map_err(|join| Error::Unpack {
        key: key.clone(),
        into: into.to_owned(),
        source: io::Error::other(join.to_string()),
    });
    downloaded?;
    let raw_bytes = unpacked??;
    check(manifest, &key, stored, &sha256, raw_bytes)?;
    Ok(Unpacked {
        stored_bytes: stored,
        raw_bytes,
    })
}

/// The blocking half: decompresses and unpacks what the download sends into
/// `into`; returns the bytes of tar read.
fn unpack_stream(key: &str, into: &Path, receiver: Receiver<Bytes>) -> Result<u64, Error> {
    let failed = |source| Error::Unpack {
        key: key.to_owned(),
        into: into.to_owned(),
        source,
    };
    std::fs::create_dir_all(into).map_err(failed)?;
    let chunks = Chunks {
        receiver,
        current: Bytes::new(),
    };
    let decoder = zstd::stream::read::Decoder::new(chunks).map_err(failed)?;
    let mut raw = Counted {
        inner: decoder,
        bytes: 0,
    };
    let mut archive = tar::Archive::new(&mut raw);
    archive.set_preserve_permissions(true);
    archive.unpack(into).map_err(failed)?;
    // Whatever follows the tar's end (zero padding) counts too.
    io::copy(&mut raw, &mut io::sink()).map_err(failed)?;
    Ok(raw.bytes)
}

/// One stored object, fetched in ranges.
struct Download<'a> {
    store: &'a Store,
    key: &'a str,
    /// The object's size, as its manifest says.
    size: u64,
    range: u64,
    /// Where the bytes fetched so far are added up, for progress.
    downloaded: &'a AtomicU64,
}

impl Download<'_> {
    /// Sends the object to `sender` in order; returns how the download ended,
    /// the SHA-256 (in hex) and the size of what was sent.
    async fn send_to(self, sender: SyncSender<Bytes>) -> (Result<(), Error>, String, u64) {
        // Ranges of the object fetched PARALLEL at a time and consumed in
        // order: one connection's throughput no longer bounds the restore.
        let range = self.range;
        let ranges = (0..self.size.div_ceil(range)).map(|i| i * range);
        let mut body = stream::iter(ranges)
            .map(|start| async move {
                match self.store.get_range(self.key, start, range).await {
                    Ok(Some(bytes)) => Ok(bytes),
                    Ok(None) => Err(Error::Missing {
                        key: self.key.to_owned(),
                    }),
                    Err(error) => Err(Error::Download {
                        key: self.key.to_owned(),
                        message: with_causes(&error),
                    }),
                }
            })
            .buffered(PARALLEL);
        let mut digest = Sha256::new();
        let mut stored = 0u64;
        let mut download = Ok(());
        while let Some(next) = body.next().await {
            match next {
                Ok(chunk) => {
                    digest.update(&chunk);
                    stored += chunk.len() as u64;
                    self.downloaded
                        .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    if sender.send(chunk).is_err() {
                        // The unpacking stopped; its error says why.
                        break;
                    }
                }
                Err(error) => {
                    download = Err(error);
                    break;
                }
            }
        }
        let sha256 = digest
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        (download, sha256, stored)
    }
}

/// What was downloaded and unpacked against what the manifest says.
fn check(
    manifest: &Manifest,
    key: &str,
    stored: u64,
    sha256: &str,
    raw_bytes: u64,
) -> Result<(), Error> {
    let mismatch = |what: String| Error::Mismatch {
        key: key.to_owned(),
        what,
    };
    if stored != manifest.stored_bytes {
        return Err(mismatch(format!(
            "{stored} bytes stored, the manifest says {}",
            manifest.stored_bytes
        )));
    }
    if sha256 != manifest.sha256 {
        return Err(mismatch(format!(
            "SHA-256 {sha256}, the manifest says {}",
            manifest.sha256
        )));
    }
    if raw_bytes != manifest.raw_bytes {
        return Err(mismatch(format!(
            "{raw_bytes} bytes of tar, the manifest says {}",
            manifest.raw_bytes
        )));
    }
    Ok(())
}
