//! What the gateway keeps about one request while it passes through the
//! phases, and the request ids it hands out.

use crate::routing::Decision;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use prometheus::IntGauge;
use smallvec::SmallVec;

use super::plan::ForwardPlan;
use super::responses::Watch;
use super::stream_timing::StreamTiming;
use crate::errors::ApiError;
use crate::routing::InFlight;
use crate::tenants::Tenant;

/// Per-request state.
#[derive(Default)]
pub struct RequestCtx {
    pub(super) request_id: Option<Arc<str>>,
    pub(super) start: Option<Instant>,
    pub(super) model: Option<Arc<str>>,
    /// The model a Gateway API route sends the request to, in place of
    /// the one it names.
    pub(super) route_model: Option<Arc<str>>,
    /// The tenant the API key names.
    pub(super) tenant: Option<Arc<Tenant>>,
    /// Timing of a streamed answer.
    pub(super) stream_timing: Option<StreamTiming>,
    pub(super) plan: Option<Box<ForwardPlan>>,
    /// Indices of the endpoints tried so far, in order (a retry or two
    /// fit inline).
    pub(super) tried: SmallVec<[usize; 4]>,
    pub(super) lease: Option<EndpointLease>,
    /// Why cache-aware routing chose the current attempt's endpoint.
    pub(super) decision: Option<Decision>,
    pub(super) model_gauge: Option<IntGauge>,
    /// The answer decided in a phase that can only fail (e.g. no endpoint
    /// left), for `fail_to_proxy` to send.
    pub(super) error: Option<ApiError>,
    pub(super) status: u16,
    pub(super) request_bytes: u64,
    pub(super) response_bytes: u64,
    pub(super) ttfb_seen: bool,
    /// The current attempt's upstream answered with a response header.
    pub(super) upstream_answered: bool,
    pub(super) is_subrequest: bool,
    /// Pingora's upstream phases ran: a failure answered from here ends
    /// the client connection (Pingora does not reuse it).
    pub(super) proxied: bool,
    /// Responses API: the endpoint that created the response a follow-up
    /// route names.
    pub(super) pinned: Option<SocketAddr>,
    /// Responses API: what the answer is watched for (a created or deleted id).
    pub(super) response_watch: Option<Box<Watch>>,
    /// A held stream's head went out while it waited ([`crate::held`]):
    /// what follows is written as SSE, errors as `error` events.
    pub(super) held_head: bool,
    /// A held stream's engine answered an error status: its body, kept to
    /// be sent as an `error` event ([`crate::held::upstream_error_event`]).
    pub(super) held_error: Option<Box<(u16, Vec<u8>)>>,
    /// A stream whose engine failed mid-answer and that no other engine
    /// continues: the events that end it ([`crate::resume`]).
    pub(super) stream_end: Option<bytes::Bytes>,
    _in_progress: InProgress,
}

/// Requests the proxy holds now, from their head's arrival to the end of
/// their log line: waiting in a queue or for a cold start included.
static IN_PROGRESS: AtomicUsize = AtomicUsize::new(0);

/// Requests the proxy holds now (see [`IN_PROGRESS`]): what a draining
/// gateway waits for before it stops.
pub fn requests_in_progress() -> usize {
    IN_PROGRESS.load(Ordering::Acquire)
}

/// Counts its request in [`IN_PROGRESS`] while it lives.
struct InProgress;

impl Default for InProgress {
    fn default() -> Self {
        IN_PROGRESS.fetch_add(1, Ordering::AcqRel);
        Self
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        IN_PROGRESS.fetch_sub(1, Ordering::AcqRel);
    }
}

impl RequestCtx {
    /// The model's metrics label (`unknown` before it is known).
    pub(super) fn model_label(&self) -> &str {
        self.model.as_deref().unwrap_or("unknown")
    }
}

/// An endpoint slot held while a request is in flight there; it records
/// the attempt's outcome for the endpoint's health.
pub(super) struct EndpointLease {
    pub(super) in_flight: InFlight,
    pub(super) gauge: IntGauge,
}

impl Drop for EndpointLease {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Hands out `X-Request-ID`s: version-4-shaped UUIDs, the form model
/// servers that validate the header (e.g. llama-cpp-python's server)
/// accept. The low half is a counter, so ids are unique per process; the
/// high half a keyed hash of it, so nobody can tell the next request's id
/// from its own (an engine that keys its state by the id, as vLLM does,
/// would otherwise let one client collide with another's next request).
pub(super) struct RequestIds {
    counter: AtomicU64,
    keys: RandomState,
}

impl RequestIds {
    pub(super) fn new() -> Self {
        Self {
            counter: AtomicU64::new(0),
            keys: RandomState::new(),
        }
    }

    /// The client's id when it sent a usable one, else a new one.
    pub(super) fn for_request(&self, inbound: Option<&http::HeaderValue>) -> Arc<str> {
        match inbound
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= 128)
        {
            Some(id) => Arc::from(id),
            None => {
                let n = self.counter.fetch_add(1, Ordering::Relaxed);
                let mut text = [0u8; UUID_LEN];
                Arc::from(request_uuid(self.keys.hash_one(n), n, &mut text))
            }
        }
    }
}

/// Length of a UUID's text form.
const UUID_LEN: usize = 36;

/// Formats `high` and `counter` as a UUID with version 4 and the RFC 4122
/// variant (unique per gateway process for 2^62 requests), into `text`.
fn request_uuid(high: u64, counter: u64, text: &mut [u8; UUID_LEN]) -> &str {
    let hi = (high & !0xf000) | 0x4000;
    let lo = (counter & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hi.to_be_bytes());
    bytes[8..].copy_from_slice(&lo.to_be_bytes());
    let mut at = 0;
    for (i, group) in [0..4, 4..6, 6..8, 8..10, 10..16].into_iter().enumerate() {
        if i > 0 {
            text[at] = b'-';
            at += 1;
        }
        let end = at + 2 * group.len();
        // The slice is exactly twice the group's length: this cannot fail.
        let _ = hex::encode_to_slice(&bytes[group], &mut text[at..end]);
        at = end;
    }
    std::str::from_utf8(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_version_4_uuids() {
        let uuid = |seed, n| super::request_uuid(seed, n, &mut [0; 36]).to_string();
        assert_eq!(
            uuid(0xdead_beef_0123_4567, 5),
            "deadbeef-0123-4567-8000-000000000005"
        );
        assert_eq!(
            uuid(0xffff_ffff_ffff_ffff, u64::MAX),
            "ffffffff-ffff-4fff-bfff-ffffffffffff"
        );
        assert_ne!(uuid(1, 1), uuid(1, 2));
    }

    #[test]
    fn the_next_id_cannot_be_told_from_the_last() {
        let ids = super::RequestIds::new();
        let a = ids.for_request(None);
        let b = ids.for_request(None);
        // Consecutive counters, unrelated high halves.
        assert_eq!(a[19..], *"8000-000000000000");
        assert_eq!(b[19..], *"8000-000000000001");
        assert_ne!(a[..18], b[..18]);
    }
}
