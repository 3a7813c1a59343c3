//! The bridge from the blocking thread that writes a backup stream to the
//! async upload that stores it: a bounded channel of chunks, written through
//! [`ChunkSink`] (which hashes and counts what passes) and read through
//! [`ChannelReader`] (an `AsyncRead`). The writing thread waits when the
//! upload falls behind, so memory stays bounded whatever the data size, and
//! an error sent down the channel fails the upload rather than ending it.

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// Bytes handed from the writing thread to the upload at a time, and how
/// many such chunks may wait.
const CHUNK: usize = 1 << 20;
pub const CHUNKS_IN_FLIGHT: usize = 8;

/// What goes down the channel: a chunk, or the error that ends the stream.
pub type Chunk = io::Result<Bytes>;

/// The writing side: hashed, counted into `stored`, and sent in chunks of
/// [`CHUNK`] bytes (the thread blocks while the channel is full).
pub struct ChunkSink<'p> {
    chunks: mpsc::Sender<Chunk>,
    buffer: Vec<u8>,
    hash: Sha256,
    stored: &'p AtomicU64,
}

impl<'p> ChunkSink<'p> {
    pub fn new(chunks: mpsc::Sender<Chunk>, stored: &'p AtomicU64) -> Self {
        Self {
            chunks,
            buffer: Vec::with_capacity(CHUNK),
            hash: Sha256::new(),
            stored,
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

    /// Sends what is left and returns the SHA-256 of everything written, in
    /// hex; the stream ends when every sender is dropped.
    pub fn finish(mut self) -> io::Result<String> {
        self.send()?;
        let digest = self.hash.finalize();
        Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
    }
}

impl Write for ChunkSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hash.update(buf);
        self.buffer.extend_from_slice(buf);
        self.stored.fetch_add(buf.len() as u64, Ordering::Relaxed);
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
/// writing thread becomes a read error, so the upload is aborted.
pub struct ChannelReader {
    receiver: mpsc::Receiver<Chunk>,
    current: Bytes,
}

impl ChannelReader {
    pub fn new(receiver: mpsc::Receiver<Chunk>) -> Self {
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

    #[test]
    fn what_the_sink_writes_arrives_whole_hashed_and_counted() {
        let (sender, mut receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
        let stored = AtomicU64::new(0);
        let mut sink = ChunkSink::new(sender, &stored);
        let data = vec![7u8; CHUNK + 10];
        sink.write_all(&data).expect("write");
        let hash = sink.finish().expect("finish");
        assert_eq!(stored.load(Ordering::Relaxed), data.len() as u64);
        let expected: String = Sha256::digest(&data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hash, expected);
        let mut received = Vec::new();
        while let Ok(chunk) = receiver.try_recv() {
            received.extend_from_slice(&chunk.expect("a chunk"));
        }
        assert_eq!(received, data);
    }
}
