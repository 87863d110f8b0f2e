//! Shutdown on signals: SIGTERM drains, SIGINT stops at once.
//!
//! On SIGTERM `/readyz` answers 503 `draining` while the proxy keeps
//! serving. With an explicit drain delay (`--shutdown-drain-delay`) the
//! gateway keeps serving for that long even when idle, so that load
//! balancers polling `/readyz` stop sending before the listener closes;
//! then requests still in flight get up to the graceful-shutdown timeout.
//! Without one, it stops the moment nothing is in flight (at once when
//! idle), waiting at most [`DEFAULT_DRAIN_DELAY`] plus the timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::server::{ShutdownSignal, ShutdownSignalWatch};
use tokio::sync::Notify;

/// The wait for requests in flight before the graceful-shutdown timeout
/// starts, when no drain delay is set.
pub const DEFAULT_DRAIN_DELAY: Duration = Duration::from_secs(5);

/// How often the requests in flight are counted while draining.
const DRAIN_POLL: Duration = Duration::from_millis(25);

/// How SIGTERM drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainPolicy {
    /// `--shutdown-drain-delay`, when set: served through even when idle.
    pub delay: Option<Duration>,
    /// `--graceful-shutdown-timeout`: further time for requests in flight.
    pub graceful_timeout: Duration,
}

impl DrainPolicy {
    /// The time kept serving whatever happens, then the longest further
    /// wait for requests in flight.
    pub fn phases(&self) -> (Duration, Duration) {
        match self.delay {
            Some(delay) => (delay, self.graceful_timeout),
            None => (Duration::ZERO, DEFAULT_DRAIN_DELAY + self.graceful_timeout),
        }
    }
}

/// Turns signals into Pingora shutdown requests (see the module docs).
pub struct SignalWatch {
    draining: Arc<AtomicBool>,
    policy: DrainPolicy,
    stop: Option<Arc<Notify>>,
    /// Told at SIGTERM, before the drain: the embedded controllers hand
    /// their leadership over at once.
    step_down: Option<Arc<Notify>>,
    /// Requests the proxy holds now: queued, waiting for a cold start or
    /// being proxied.
    in_flight: fn() -> usize,
}

impl SignalWatch {
    /// A watch that sets `draining` on SIGTERM (`/readyz` answers 503 while
    /// it is) and drains by `policy`; `stop`, when notified, stops at once
    /// (for a server run in-process).
    pub fn new(draining: Arc<AtomicBool>, policy: DrainPolicy, stop: Option<Arc<Notify>>) -> Self {
        Self {
            draining,
            policy,
            stop,
            step_down: None,
            in_flight: crate::proxy::requests_in_progress,
        }
    }

    /// Notifies `step_down` at SIGTERM, before the drain (the embedded
    /// controllers release their Lease, so that a new pod of a rolling
    /// update leads while this one drains).
    pub fn with_step_down(mut self, step_down: Option<Arc<Notify>>) -> Self {
        self.step_down = step_down;
        self
    }

    fn in_flight(&self) -> usize {
        (self.in_flight)()
    }

    /// Waits until nothing is in flight or `limit` passes.
    async fn idle_within(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(DRAIN_POLL.min(limit)).await;
        }
    }

    /// The drain after SIGTERM: the fixed delay, then requests in flight.
    async fn drain(&self) {
        let (serve, in_flight) = self.policy.phases();
        tokio::time::sleep(serve).await;
        self.idle_within(in_flight).await;
    }
}

#[async_trait]
impl ShutdownSignalWatch for SignalWatch {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            std::future::pending::<()>().await;
            return ShutdownSignal::FastShutdown;
        };
        let stop = self.stop.clone();
        let test_stop = async move {
            match stop {
                Some(n) => n.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = int.recv() => ShutdownSignal::FastShutdown,
            _ = term.recv() => {
                self.draining.store(true, Ordering::SeqCst);
                if let Some(step_down) = &self.step_down {
                    step_down.notify_one();
                }
                let (serve, in_flight) = self.policy.phases();
                tracing::info!(
                    in_flight = self.in_flight(),
                    serve_for = %humantime::format_duration(serve),
                    then_wait_up_to = %humantime::format_duration(in_flight),
                    "SIGTERM: draining before shutdown"
                );
                tokio::select! {
                    _ = self.drain() => ShutdownSignal::GracefulTerminate,
                    _ = int.recv() => ShutdownSignal::FastShutdown,
                }
            }
            _ = test_stop => ShutdownSignal::FastShutdown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_delay_is_served_through_the_default_is_not() {
        let timeout = Duration::from_secs(30);
        let explicit = DrainPolicy {
            delay: Some(Duration::from_secs(3)),
            graceful_timeout: timeout,
        };
        assert_eq!(explicit.phases(), (Duration::from_secs(3), timeout));
        let default = DrainPolicy {
            delay: None,
            graceful_timeout: timeout,
        };
        assert_eq!(
            default.phases(),
            (Duration::ZERO, DEFAULT_DRAIN_DELAY + timeout)
        );
    }

    /// Requests in flight for [`a_drain_serves_the_delay_then_waits_for_requests`].
    static BUSY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn watch(delay: Option<Duration>) -> SignalWatch {
        SignalWatch {
            in_flight: || BUSY.load(Ordering::SeqCst),
            ..SignalWatch::new(
                Arc::new(AtomicBool::new(true)),
                DrainPolicy {
                    delay,
                    graceful_timeout: Duration::from_secs(600),
                },
                None,
            )
        }
    }

    /// How long `watch`'s drain takes.
    async fn drain_time(watch: SignalWatch) -> Duration {
        let started = std::time::Instant::now();
        watch.drain().await;
        started.elapsed()
    }

    #[tokio::test]
    async fn a_drain_serves_the_delay_then_waits_for_requests() {
        let delay = Duration::from_millis(300);
        let idle_explicit = drain_time(watch(Some(delay))).await;
        assert!(
            idle_explicit >= delay && idle_explicit < delay * 3,
            "{idle_explicit:?}"
        );
        let idle_default = drain_time(watch(None)).await;
        assert!(
            idle_default < Duration::from_millis(100),
            "{idle_default:?}"
        );

        BUSY.store(1, Ordering::SeqCst);
        let finish = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            BUSY.store(0, Ordering::SeqCst);
        });
        let busy_default = drain_time(watch(None)).await;
        finish.await.unwrap();
        assert!(
            busy_default >= Duration::from_millis(400) && busy_default < Duration::from_secs(2),
            "{busy_default:?}"
        );
    }
}
