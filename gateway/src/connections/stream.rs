//! The client stream as the proxy reads it: while a request header is
//! awaited, the header must arrive within the deadline (counted from its
//! first byte, so idle keep-alive time is Pingora's keep-alive timeout's
//! business) and within the size limit. Beyond either, the client gets 408
//! or 431 and the connection ends.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora_core::protocols::raw_connect::ProxyDigest;
use pingora_core::protocols::tls::{SslDigest, TlsRef};
use pingora_core::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use prometheus::IntCounterVec;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::ConnectionState;
use crate::errors::ApiError;

/// The header wait being enforced.
struct HeaderWait {
    /// The request it belongs to ([`ConnectionState`]'s counter).
    request: u64,
    /// Bytes read during the wait.
    bytes: usize,
    /// When the first byte came. The timer is only armed when the header
    /// is still incomplete at the next read: most headers arrive whole in
    /// one read and never need one.
    first_byte: Option<Instant>,
    /// `first_byte` plus the header timeout, once armed.
    deadline: Option<Pin<Box<Sleep>>>,
}

/// A client stream that enforces the header deadline and size limit.
pub struct GuardedStream {
    inner: Stream,
    state: Arc<ConnectionState>,
    timeout: Duration,
    max_header_bytes: usize,
    wait: Option<HeaderWait>,
    /// Counts ended header waits by reason (`timeout`, `too_large`, `closed`).
    aborts: IntCounterVec,
    /// The connection was refused; every later read fails.
    refused: bool,
}

impl GuardedStream {
    /// Guards `inner`, with the wait state shared with the request path.
    pub fn new(
        inner: Stream,
        state: Arc<ConnectionState>,
        timeout: Duration,
        max_header_bytes: usize,
        aborts: IntCounterVec,
    ) -> Self {
        Self {
            inner,
            state,
            timeout,
            max_header_bytes,
            wait: None,
            aborts,
            refused: false,
        }
    }

    /// Ends the connection with `err`'s answer (written if the socket takes
    /// it now; the client may be gone) and an error for the reader.
    fn refuse(&mut self, cx: &mut Context<'_>, err: ApiError, reason: &'static str) -> io::Error {
        self.refused = true;
        self.wait = None;
        self.aborts.with_label_values(&[reason]).inc();
        let answer = err.closing_response(match err.status {
            408 => "Request Timeout",
            _ => "Request Header Fields Too Large",
        });
        let _ = Pin::new(&mut self.inner).poll_write(cx, &answer);
        let _ = Pin::new(&mut self.inner).poll_flush(cx);
        let kind = if err.status == 408 {
            io::ErrorKind::TimedOut
        } else {
            io::ErrorKind::InvalidData
        };
        io::Error::new(kind, err.message)
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.refused {
            return Poll::Ready(Err(io::Error::from(io::ErrorKind::ConnectionAborted)));
        }
        let Some(request) = this.state.header_wait() else {
            this.wait = None;
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        };
        if this.wait.as_ref().is_none_or(|w| w.request != request) {
            this.wait = Some(HeaderWait {
                request,
                bytes: 0,
                first_byte: None,
                deadline: None,
            });
        }
        let limit = this.max_header_bytes;
        let timeout = this.timeout;
        let (bytes, expired) = match this.wait.as_mut() {
            Some(wait) => {
                if let (None, Some(first)) = (&wait.deadline, wait.first_byte) {
                    let at = tokio::time::Instant::from_std(first + timeout);
                    wait.deadline = Some(Box::pin(tokio::time::sleep_until(at)));
                }
                let expired = wait
                    .deadline
                    .as_mut()
                    .is_some_and(|d| d.as_mut().poll(cx).is_ready());
                (wait.bytes, expired)
            }
            None => (0, false),
        };
        if bytes > limit {
            let err = this.refuse(cx, ApiError::header_too_large(limit), "too_large");
            return Poll::Ready(Err(err));
        }
        if expired {
            let err = this.refuse(cx, ApiError::header_timeout(this.timeout), "timeout");
            return Poll::Ready(Err(err));
        }
        // Read no more than one byte past the limit while the header is
        // awaited, so that a header over it is caught on the next read.
        let room = limit + 1 - bytes;
        let read = if buf.remaining() > room {
            let mut limited = buf.take(room);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut limited))?;
            let n = limited.filled().len();
            // SAFETY: the inner reader initialised the `n` bytes it filled.
            unsafe { buf.assume_init(n) };
            buf.advance(n);
            n
        } else {
            let before = buf.filled().len();
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            buf.filled().len() - before
        };
        if let Some(wait) = this.wait.as_mut() {
            if read == 0 && wait.bytes > 0 {
                // The client gave up in the middle of a header.
                this.aborts.with_label_values(&["closed"]).inc();
            }
            wait.bytes += read;
            if read > 0 && wait.first_byte.is_none() {
                wait.first_byte = Some(Instant::now());
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Drop for GuardedStream {
    /// A connection refused here (408, 431) or by the request path before
    /// the request body was read closes lingeringly
    /// ([`super::linger_on_close`]): the socket is kept open by a copy of
    /// its descriptor, which stops writing and reads what still comes in
    /// the background.
    fn drop(&mut self) {
        if !(self.refused || self.state.linger.load(std::sync::atomic::Ordering::Acquire)) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(slot) = LingerSlot::take() else {
            return;
        };
        let Some(socket) = duplicate(self.inner.id()) else {
            return;
        };
        runtime.spawn(async move {
            linger(socket).await;
            drop(slot);
        });
    }
}

/// Sockets closing lingeringly now, at most [`super::MAX_LINGERING`].
static LINGERING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One of the [`super::MAX_LINGERING`] places, given back when dropped.
struct LingerSlot;

impl LingerSlot {
    fn take() -> Option<Self> {
        use std::sync::atomic::Ordering;
        LINGERING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < super::MAX_LINGERING).then_some(n + 1)
            })
            .ok()
            .map(|_| Self)
    }
}

impl Drop for LingerSlot {
    fn drop(&mut self) {
        LINGERING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A second descriptor of the client socket `fd`, as a Tokio stream.
fn duplicate(fd: UniqueIDType) -> Option<tokio::net::TcpStream> {
    use std::os::fd::BorrowedFd;
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is the descriptor of the stream being dropped, still
    // open while `drop` runs; it is only borrowed to duplicate it.
    let owned = unsafe { BorrowedFd::borrow_raw(fd) }
        .try_clone_to_owned()
        .ok()?;
    let std_stream = std::net::TcpStream::from(owned);
    std_stream.set_nonblocking(true).ok()?;
    tokio::net::TcpStream::from_std(std_stream).ok()
}

/// Stops writing (the answer is out) and discards what the client sends
/// until it closes or [`super::LINGER_TIME`] passes.
async fn linger(mut socket: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = socket.shutdown().await;
    let deadline = tokio::time::Instant::now() + super::LINGER_TIME;
    let mut buf = vec![0u8; 8 * 1024];
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, socket.read(&mut buf)).await {
        if n == 0 {
            break;
        }
    }
}

impl fmt::Debug for GuardedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedStream")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Shutdown for GuardedStream {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

impl UniqueID for GuardedStream {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for GuardedStream {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for GuardedStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for GuardedStream {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for GuardedStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl Peek for GuardedStream {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}
