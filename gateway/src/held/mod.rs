//! Held streams: a streaming request that waits for its model (a cold
//! start, a swap on a shared GPU, a full set of slots) gets its response
//! head and periodic SSE comments while it waits, so that idle-timeout
//! proxies and load balancers in front of the gateway do not cut it; the
//! engine's stream then continues on the same connection.
//!
//! SSE comments (lines starting with `:`) are ignored by every client by
//! the SSE specification, the official SDKs included. Once the head is
//! out, the status code can no longer say how the request ended: a
//! failure is sent as an `error` event in the shape the request's API
//! uses for errors (OpenAI's `{"error": {…}}`, Anthropic's
//! `{"type": "error", …}`), which the SDKs raise as an API error.
//!
//! Requests that do not stream keep today's behaviour (they wait in
//! silence and get their status code): a JSON answer cannot carry progress
//! without sending its status before it is known.

mod events;

pub use events::{error_event, head, progress_comment, upstream_error_event};

use std::time::Duration;

/// Default time between two progress comments, and before the first.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// Paths whose streams are answered with progress while held: the
/// generation APIs whose clients read SSE.
const STREAMING_PATHS: [&str; 4] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
];

/// Whether a request to `path` (as the engine's router matches it) asking
/// to stream is held with progress.
pub fn streams_progress(path: &str, stream: bool) -> bool {
    stream && STREAMING_PATHS.contains(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_generation_streams_are_held_with_progress() {
        assert!(streams_progress("/v1/chat/completions", true));
        assert!(streams_progress("/v1/messages", true));
        assert!(!streams_progress("/v1/chat/completions", false));
        assert!(!streams_progress("/v1/embeddings", true));
        assert!(!streams_progress("/v1/chat/completions/x", true));
    }
}
