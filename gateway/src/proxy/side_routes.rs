//! `/healthz`, `/readyz` and `/metrics`: one implementation, served on the
//! proxy listener and on the admin listener, without an API key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::metrics::Metrics;

/// The gateway's own health and metrics routes.
#[derive(Clone)]
pub struct SideRoutes {
    metrics: Metrics,
    draining: Arc<AtomicBool>,
}

/// A side route's complete answer.
pub struct SideAnswer {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Bytes,
}

impl SideRoutes {
    /// Routes reporting `metrics`, and `/readyz` 503 once `draining` is set.
    pub fn new(metrics: Metrics, draining: Arc<AtomicBool>) -> Self {
        Self { metrics, draining }
    }

    /// Whether the gateway is draining (SIGTERM received).
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The answer for `path`, or `None` when it is not a side route.
    pub fn answer(&self, path: &str) -> Option<SideAnswer> {
        let (status, content_type, body) = match path {
            "/healthz" => (200, "text/plain", Bytes::from_static(b"ok")),
            "/readyz" if self.draining.load(Ordering::Relaxed) => {
                (503, "text/plain", Bytes::from_static(b"draining"))
            }
            "/readyz" => (200, "text/plain", Bytes::from_static(b"ok")),
            "/metrics" => (
                200,
                "text/plain; version=0.0.4",
                Bytes::from(self.metrics.render()),
            ),
            _ => return None,
        };
        Some(SideAnswer {
            status,
            content_type,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_turns_503_while_draining() {
        let draining = Arc::new(AtomicBool::new(false));
        let routes = SideRoutes::new(Metrics::new(), draining.clone());
        assert_eq!(routes.answer("/readyz").map(|a| a.status), Some(200));
        assert_eq!(routes.answer("/healthz").map(|a| a.status), Some(200));
        draining.store(true, Ordering::Relaxed);
        let answer = routes.answer("/readyz").expect("a side route");
        assert_eq!((answer.status, &answer.body[..]), (503, &b"draining"[..]));
        assert!(routes.answer("/v1/models").is_none());
        let metrics = routes.answer("/metrics").expect("metrics");
        assert!(metrics.content_type.starts_with("text/plain"));
    }
}
