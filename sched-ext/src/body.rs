//! Reading request bodies into reused buffers.
//!
//! A request with 1,000 full Nodes is about 6 MiB. Collecting it into a
//! fresh buffer each time costs, besides the copy, a page fault for every
//! 4 KiB of that buffer; the buffers here are kept after their request is
//! answered and reused, sized from `Content-Length` up front. A body is
//! handed out as [`Bytes`] (the filter answer keeps slices of it until it
//! is sent); its buffer returns to the pool when the last slice is
//! dropped.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;

/// Buffers kept for reuse.
const KEEP_BUFFERS: usize = 4;

/// Largest buffer kept for reuse; larger ones are freed.
const KEEP_BYTES: usize = 32 * 1024 * 1024;

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// The body is larger than the limit (bytes).
    TooLarge(usize),
    /// The connection failed while reading.
    Read(String),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge(limit) => {
                write!(
                    f,
                    "request body larger than {limit} bytes (--max-body-bytes)"
                )
            }
            BodyError::Read(err) => write!(f, "failed to read the request body: {err}"),
        }
    }
}

impl std::error::Error for BodyError {}

/// Request body buffers, shared by all requests of one server.
#[derive(Debug, Default)]
pub struct BodyPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BodyPool {
    /// An empty pool.
    pub fn new() -> Arc<Self> {
        Arc::new(BodyPool::default())
    }

    /// Reads `body` (announced as `content_length` bytes, if known) into a
    /// pooled buffer; at most `limit` bytes.
    pub async fn read(
        self: &Arc<Self>,
        mut body: Body,
        content_length: Option<usize>,
        limit: usize,
    ) -> Result<Bytes, BodyError> {
        if content_length.is_some_and(|length| length > limit) {
            return Err(BodyError::TooLarge(limit));
        }
        let mut buffer = self.take();
        buffer.reserve(content_length.unwrap_or(0));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|err| BodyError::Read(err.to_string()))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            if buffer.len() + data.len() > limit {
                return Err(BodyError::TooLarge(limit));
            }
            buffer.extend_from_slice(&data);
        }
        Ok(Bytes::from_owner(Pooled {
            buffer,
            pool: self.clone(),
        }))
    }

    /// Buffers waiting for reuse.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    fn take(&self) -> Vec<u8> {
        self.lock().pop().unwrap_or_default()
    }

    fn give_back(&self, mut buffer: Vec<u8>) {
        if buffer.capacity() > KEEP_BYTES {
            return;
        }
        let mut free = self.lock();
        if free.len() < KEEP_BUFFERS {
            buffer.clear();
            free.push(buffer);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A body's buffer; back to its pool when dropped.
struct Pooled {
    buffer: Vec<u8>,
    pool: Arc<BodyPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(parts: &[&'static [u8]]) -> Body {
        let frames = parts
            .iter()
            .map(|part| Ok::<_, std::io::Error>(Bytes::from_static(part)));
        Body::from_stream(futures::stream::iter(frames.collect::<Vec<_>>()))
    }

    #[tokio::test]
    async fn bodies_are_read_whole_and_buffers_reused() {
        let pool = BodyPool::new();
        let body = pool
            .read(chunked(&[b"{\"Pod\":", b"{}}"]), None, 1024)
            .await
            .unwrap();
        assert_eq!(&body[..], b"{\"Pod\":{}}");
        let slice = body.slice(1..5);
        drop(body);
        // A slice still holds the buffer.
        assert_eq!(pool.idle(), 0);
        assert_eq!(&slice[..], b"\"Pod");
        drop(slice);
        assert_eq!(pool.idle(), 1);
        let again = pool.read(chunked(&[b"abc"]), Some(3), 1024).await.unwrap();
        assert_eq!(&again[..], b"abc");
        assert_eq!(pool.idle(), 0, "the kept buffer was taken");
    }

    #[tokio::test]
    async fn bodies_over_the_limit_are_refused() {
        let pool = BodyPool::new();
        assert_eq!(
            pool.read(chunked(&[b"12345"]), Some(5), 4).await,
            Err(BodyError::TooLarge(4))
        );
        // Without (or with a false) Content-Length, counted while reading.
        assert_eq!(
            pool.read(chunked(&[b"123", b"45"]), None, 4).await,
            Err(BodyError::TooLarge(4))
        );
        assert_eq!(
            pool.read(chunked(&[b"123", b"45"]), Some(2), 4).await,
            Err(BodyError::TooLarge(4))
        );
    }
}
