//! An endpoint's shared counters, and the guard that counts one request
//! in flight there.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::backend_load::BackendLoad;
use super::health::{Change, EndpointHealth, OutlierPolicy};
use super::pick_share::PickCount;

/// One endpoint's shared state, on a cache line of its own so that requests
/// on different pods do not contend: its requests in flight, its health and
/// its share of recent cache-aware picks.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct EndpointState {
    pub(super) in_flight: AtomicUsize,
    pub(super) health: EndpointHealth,
    pub(super) backend: BackendLoad,
    pub(super) picks: PickCount,
}

impl EndpointState {
    pub(super) fn get(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// A request counted as in flight on one endpoint; the count drops when this
/// guard does.
///
/// Keep it in the per-request context from the moment the peer is chosen
/// until the request is done (it is `Send + 'static`), so least-loaded and
/// bounded-load routing see the real load, including while streaming.
#[derive(Debug)]
#[must_use = "the request counts as in flight only while the guard is alive"]
pub struct InFlight {
    pub(super) state: Arc<EndpointState>,
    /// This request is the endpoint's trial after an ejection.
    pub(super) trial: bool,
    /// An outcome was recorded.
    pub(super) settled: bool,
}

impl InFlight {
    /// Whether this request is the endpoint's trial after an ejection.
    pub fn is_trial(&self) -> bool {
        self.trial
    }

    /// The connection to the endpoint failed (refused, timed out, or
    /// closed before any answer).
    pub fn failed(&mut self, policy: &OutlierPolicy) -> Change {
        self.settled = true;
        self.state.health.record_failure(policy, self.trial)
    }

    /// The endpoint answered.
    pub fn succeeded(&mut self) -> Change {
        self.settled = true;
        self.state.health.record_success(self.trial)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.trial && !self.settled {
            self.state.health.release_trial();
        }
    }
}
