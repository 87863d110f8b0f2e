//! The interface between [`super::LocalActuator`] handles and the
//! supervisor: state the handles read directly, and the commands they send.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, watch};

use super::report::ActuatorReport;
use crate::lifecycle::ModelStatus;

/// State the handles read without asking the supervisor.
pub(crate) struct Shared {
    /// Model name → index into `cells` (and the supervisor's models).
    pub index: HashMap<String, usize>,
    /// Per-model status channel and activity time.
    pub cells: Vec<ModelCell>,
    /// The latest report, replaced after every supervisor step.
    pub report: watch::Sender<ActuatorReport>,
    /// `true` until the supervisor has stopped every child and exited.
    pub running: watch::Sender<bool>,
}

/// What handles share with the supervisor about one model.
pub(crate) struct ModelCell {
    /// Status published by the supervisor.
    pub status: watch::Sender<ModelStatus>,
    /// Latest activity, in milliseconds since the Unix epoch (0: never).
    last_active: AtomicU64,
    /// Requests being served by the model right now.
    in_flight: AtomicU32,
}

impl ModelCell {
    /// Records activity at `at` (never moves backwards).
    pub fn touch(&self, at: SystemTime) {
        let millis = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .max(1);
        self.last_active.fetch_max(millis, Ordering::Relaxed);
    }

    /// One more request in flight.
    pub fn begin_request(&self, at: SystemTime) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.touch(at);
    }

    /// One request fewer in flight (never below zero).
    pub fn end_request(&self, at: SystemTime) {
        self.touch(at);
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Latest activity.
    pub fn last_active(&self) -> Option<SystemTime> {
        match self.last_active.load(Ordering::Relaxed) {
            0 => None,
            millis => UNIX_EPOCH.checked_add(Duration::from_millis(millis)),
        }
    }
}

/// A request from a handle.
pub(crate) enum Command {
    /// Demand for a model: start it (or retry it) as the policies allow.
    /// `ack` is answered once the resulting status is published.
    Activate {
        model: usize,
        at: SystemTime,
        ack: Option<oneshot::Sender<()>>,
    },
    /// Requests queued for a model, as the gateway counts them.
    Demand {
        model: usize,
        queued: u32,
        at: SystemTime,
    },
    /// Stop every child, then exit; `done` is answered at the end.
    Shutdown { done: oneshot::Sender<()> },
}

impl ModelCell {
    /// A cell with `status` and no activity yet.
    pub fn new(status: ModelStatus) -> Self {
        Self {
            status: watch::Sender::new(status),
            last_active: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_is_monotonic_and_starts_unknown() {
        let cell = ModelCell::new(ModelStatus::idle(UNIX_EPOCH));
        assert_eq!(cell.last_active(), None);
        let t = UNIX_EPOCH + Duration::from_secs(1_000);
        cell.touch(t);
        cell.touch(t - Duration::from_secs(5));
        assert_eq!(cell.last_active(), Some(t));
    }

    #[test]
    fn requests_in_flight_are_counted_and_touch() {
        let cell = ModelCell::new(ModelStatus::idle(UNIX_EPOCH));
        let t = UNIX_EPOCH + Duration::from_secs(10);
        cell.begin_request(t);
        cell.begin_request(t);
        assert_eq!(cell.in_flight(), 2);
        cell.end_request(t + Duration::from_secs(7));
        assert_eq!(cell.in_flight(), 1);
        assert_eq!(cell.last_active(), Some(t + Duration::from_secs(7)));
        cell.end_request(t);
        cell.end_request(t);
        assert_eq!(cell.in_flight(), 0, "an unmatched end never wraps");
    }
}
