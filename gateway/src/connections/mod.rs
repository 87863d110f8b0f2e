//! Client connections before the request path sees them: how many may be
//! open (in all, and per client address), and how long and how large a
//! request header may be. Pingora alone reads a header for as long as
//! bytes keep coming, up to 1 MiB, on any number of connections; a client
//! that sends a byte every few seconds would hold memory and a task for
//! free.
//!
//! [`GuardedApp`] wraps the proxy service: it admits or refuses each new
//! connection ([`ConnectionLimits`]) and hands the proxy a [`GuardedStream`]
//! that enforces the header deadline and size while a request header is
//! awaited. The request path tells the connection when a header has been
//! read ([`header_received`]) and when a request ended ([`request_ended`]),
//! through a task-local: one HTTP/1 connection is one task. The gateway's
//! other listeners (admin, peers) get the same guards ([`guarded_http`]).

mod app;
mod http_app;
mod limits;
mod stream;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use app::GuardedApp;
pub use http_app::{guarded_http, Tracked};
pub use limits::{ConnectionLimits, Permit};
pub use stream::GuardedStream;

/// Settings of client connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    /// Longest time from the first byte of a request header to its end
    /// (408 beyond).
    pub header_timeout: Duration,
    /// Largest request header, request line included (431 beyond).
    pub max_header_bytes: usize,
    /// Open client connections allowed at once (0: no limit).
    pub max_connections: usize,
    /// Open connections allowed per client address (0: no limit).
    pub max_connections_per_client: usize,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            max_header_bytes: 32 * 1024,
            max_connections: 16_384,
            max_connections_per_client: 0,
        }
    }
}

/// What the request path and the stream of one connection share: whether
/// a request header is awaited, and which one.
#[derive(Debug)]
pub struct ConnectionState {
    awaiting_header: AtomicBool,
    /// Counts requests, so that the stream notices a new header wait even
    /// if it saw none of the phases in between.
    request: AtomicU64,
    /// The connection is closed with a request body still coming: close
    /// it lingeringly ([`linger_on_close`]).
    linger: AtomicBool,
}

impl ConnectionState {
    fn new() -> Self {
        Self {
            awaiting_header: AtomicBool::new(true),
            request: AtomicU64::new(0),
            linger: AtomicBool::new(false),
        }
    }

    /// The header wait the stream should enforce now, if any.
    fn header_wait(&self) -> Option<u64> {
        self.awaiting_header
            .load(Ordering::Acquire)
            .then(|| self.request.load(Ordering::Acquire))
    }
}

tokio::task_local! {
    static CONNECTION: Arc<ConnectionState>;
}

/// The request header of this connection's current request was read:
/// no header deadline or size limit applies until the request ends.
pub fn header_received() {
    let _ = CONNECTION.try_with(|c| c.awaiting_header.store(false, Ordering::Release));
}

/// This connection's request ended: the next bytes start a new header.
pub fn request_ended() {
    let _ = CONNECTION.try_with(|c| {
        c.request.fetch_add(1, Ordering::AcqRel);
        c.awaiting_header.store(true, Ordering::Release);
    });
}

/// This connection is answered and closed while the client may still be
/// sending its request body (a refusal before the body was read): when it
/// closes, the gateway stops writing but reads and discards what the client
/// still sends, for up to [`LINGER_TIME`], as nginx's `lingering_close`
/// does. Closing at once would make the kernel reset the connection over
/// the unread bytes, and a client that writes its whole body before reading
/// (Python's `http.client`, many SDKs) would see the reset, not the answer.
pub fn linger_on_close() {
    let _ = CONNECTION.try_with(|c| c.linger.store(true, Ordering::Release));
}

/// Longest time a closing connection keeps reading what the client sends.
pub const LINGER_TIME: Duration = Duration::from_secs(5);

/// Most sockets closing lingeringly at once; beyond it a refused
/// connection closes at once, so that a flood of refused requests cannot
/// hold sockets and buffers (8 KiB each) for [`LINGER_TIME`] without bound.
pub const MAX_LINGERING: usize = 1024;
