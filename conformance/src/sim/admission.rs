//! Generation slots: at most `max_concurrency` requests generate at once, the
//! rest wait in FIFO order, and both counts feed the vLLM gauges.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Hands out [`Slot`]s and tracks the simulated KV-cache they reserve.
#[derive(Debug)]
pub struct Admission {
    /// `None` when concurrency is unlimited. Tokio's semaphore is fair, which
    /// gives the FIFO queue.
    slots: Option<Arc<Semaphore>>,
    running: IntGauge,
    waiting: IntGauge,
    kv_reserved: Arc<AtomicU64>,
    kv_capacity: u64,
}

/// Permission to generate. Dropping it (response finished, client gone)
/// frees the slot and its KV-cache reservation.
#[derive(Debug)]
pub struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
    running: IntGauge,
    kv_reserved: Arc<AtomicU64>,
    kv_tokens: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.running.dec();
        self.kv_reserved
            .fetch_sub(self.kv_tokens, Ordering::Relaxed);
    }
}

/// Decrements the waiting gauge even when a queued request is abandoned.
struct Waiting(IntGauge);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Admission {
    /// `max_concurrency == 0` admits everyone at once.
    pub fn new(
        max_concurrency: usize,
        kv_capacity: u64,
        running: IntGauge,
        waiting: IntGauge,
    ) -> Self {
        Self {
            slots: (max_concurrency > 0).then(|| Arc::new(Semaphore::new(max_concurrency))),
            running,
            waiting,
            kv_reserved: Arc::new(AtomicU64::new(0)),
            kv_capacity: kv_capacity.max(1),
        }
    }

    /// Waits for a slot (FIFO) and reserves `kv_tokens` of KV-cache while it is held.
    pub async fn admit(&self, kv_tokens: u64) -> Slot {
        let permit = match &self.slots {
            Some(slots) => {
                self.waiting.inc();
                let _waiting = Waiting(self.waiting.clone());
                // The semaphore is never closed, so acquiring cannot fail.
                Arc::clone(slots).acquire_owned().await.ok()
            }
            None => None,
        };
        self.running.inc();
        self.kv_reserved.fetch_add(kv_tokens, Ordering::Relaxed);
        Slot {
            _permit: permit,
            running: self.running.clone(),
            kv_reserved: Arc::clone(&self.kv_reserved),
            kv_tokens,
        }
    }

    /// Reserved KV-cache over capacity, capped at 1.
    pub fn cache_usage(&self) -> f64 {
        (self.kv_reserved.load(Ordering::Relaxed) as f64 / self.kv_capacity as f64).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn admission(max: usize) -> Admission {
        let running = IntGauge::new("r", "r").expect("gauge");
        let waiting = IntGauge::new("w", "w").expect("gauge");
        Admission::new(max, 100, running, waiting)
    }

    #[tokio::test]
    async fn queues_beyond_the_limit_in_order() {
        let admission = Arc::new(admission(1));
        let first = admission.admit(10).await;
        assert_eq!(admission.running.get(), 1);
        assert!((admission.cache_usage() - 0.1).abs() < 1e-9);

        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3 {
            let admission = Arc::clone(&admission);
            let tx = tx.clone();
            tokio::spawn(async move {
                let slot = admission.admit(1).await;
                let _ = tx.send(i);
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(slot);
            });
            // Let each task enqueue before the next one.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(admission.waiting.get(), 3);
        drop(first);
        let mut order = Vec::new();
        for _ in 0..3 {
            order.push(rx.recv().await.expect("admitted"));
        }
        assert_eq!(order, [0, 1, 2]);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(admission.waiting.get(), 0);
        assert_eq!(admission.running.get(), 0);
        assert_eq!(admission.cache_usage(), 0.0);
    }

    #[tokio::test]
    async fn abandoned_waiters_leave_the_queue() {
        let admission = admission(1);
        let _held = admission.admit(0).await;
        let waited = tokio::time::timeout(Duration::from_millis(10), admission.admit(0)).await;
        assert!(waited.is_err());
        assert_eq!(admission.waiting.get(), 0);
    }

    #[tokio::test]
    async fn unlimited_admits_at_once() {
        let admission = admission(0);
        let _a = admission.admit(500).await;
        let _b = admission.admit(0).await;
        assert_eq!(admission.running.get(), 2);
        assert_eq!(admission.cache_usage(), 1.0);
    }
}
