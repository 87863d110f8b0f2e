//! Global mode, bodies beyond the retry buffer: a member's 5xx answer is
//! held back while another cluster is left to ask, and what has reached the
//! client of a subrequest's answer is tracked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header;
use pingora_core::protocols::http::HttpTask;

/// Global mode: holds back a member's 5xx answer, before anything was
/// relayed, while an endpoint is left untried.
pub(super) struct FailoverGate {
    /// Endpoints tried by the request's subrequests, a bit per index.
    pub(super) tried: Arc<AtomicU64>,
    /// Attempts allowed: the endpoints, up to the attempt limit.
    pub(super) limit: usize,
    /// The answer held back, as far as it came.
    pub(super) held: Option<Relayed>,
    /// Its tasks, relayed after all when no failover round is left.
    pub(super) held_tasks: Vec<HttpTask>,
}

impl FailoverGate {
    /// `task` when it is to be relayed; `None` when the gate (if any) holds
    /// it back.
    pub(super) fn pass(
        gate: &mut Option<FailoverGate>,
        task: HttpTask,
        relayed: &Relayed,
        start: Instant,
    ) -> Option<HttpTask> {
        match gate {
            Some(gate) if gate.holds(&task, relayed) => {
                gate.held
                    .get_or_insert_with(Relayed::default)
                    .observe(&task, start);
                gate.held_tasks.push(task);
                None
            }
            _ => Some(task),
        }
    }

    /// Whether `task` belongs to an answer held back: a 5xx header before
    /// anything was relayed, while an endpoint is left, and what follows it.
    fn holds(&self, task: &HttpTask, relayed: &Relayed) -> bool {
        if self.held.is_some() {
            return true;
        }
        let HttpTask::Header(header, _) = task else {
            return false;
        };
        let tried = self.tried.load(Ordering::Relaxed).count_ones() as usize;
        relayed.status == 0 && header.status.is_server_error() && tried < self.limit
    }

    /// Whether the whole held answer has arrived.
    pub(super) fn held_complete(&self) -> bool {
        self.held.as_ref().is_some_and(|h| h.complete)
    }
}

/// Longest wait for the rest of a failed subrequest's answer; it is normally
/// already queued when the failure is reported.
pub(super) const SUBREQUEST_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// What has been relayed to the client from a subrequest.
#[derive(Default)]
pub(super) struct Relayed {
    pub(super) status: u16,
    pub(super) ttfb: Option<Duration>,
    pub(super) bytes: u64,
    /// Content-Length of the answer, when it has one.
    pub(super) length: Option<u64>,
    /// The answer ended: marked so, or all of its Content-Length was
    /// relayed (a subrequest that failed never marks the end of the answer
    /// its `fail_to_proxy` wrote).
    pub(super) complete: bool,
}

impl Relayed {
    pub(super) fn observe(&mut self, task: &HttpTask, start: Instant) {
        match task {
            HttpTask::Header(h, end) => {
                // Interim (1xx) headers are not the answer.
                if !h.status.is_informational() {
                    self.status = h.status.as_u16();
                    self.ttfb.get_or_insert_with(|| start.elapsed());
                    self.length = h
                        .headers
                        .get(header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse().ok());
                    self.complete |= *end;
                }
            }
            HttpTask::Body(b, end) => {
                self.bytes += b.as_ref().map_or(0, |b| b.len() as u64);
                self.complete |= *end;
            }
            HttpTask::Trailer(_) | HttpTask::Done => self.complete = true,
            HttpTask::UpgradedBody(..) | HttpTask::Failed(_) => {}
        }
        if self.status != 0 && self.length.is_some_and(|n| self.bytes >= n) {
            self.complete = true;
        }
    }
}
