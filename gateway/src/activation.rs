//! Cold-start queueing: requests for a model that is not ready wait in a
//! bounded per-model queue while the model is activated, and are released in
//! arrival order the moment it reports ready.
//!
//! Readiness arrives as a notification (`watch` channel) from whoever runs the
//! model (the embedded local actuator today); nothing polls.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flexinfer_operator::lifecycle::{ModelStatus, Phase};
use tokio::sync::{oneshot, watch};

use crate::errors::ApiError;

/// Seconds a client is told to wait after a full queue.
pub const QUEUE_FULL_RETRY_AFTER: u64 = 5;

/// Whoever starts, stops and reports on models.
pub trait ModelLifecycle: Send + Sync + 'static {
    /// Readiness of a managed model; `None` when the model is not managed (always ready).
    fn status(&self, model: &str) -> Option<watch::Receiver<ModelStatus>>;
    /// Asks for the model to run (idempotent; one activation at a time).
    fn activate(&self, model: &str);
    /// Reports how many requests wait for the model.
    fn demand(&self, model: &str, queued: u32);
    /// Records that the model served a request now.
    fn touch(&self, model: &str);
    /// A request for the model starts being served (default: a touch).
    fn request_started(&self, model: &str) {
        self.touch(model);
    }
    /// The request begun with [`Self::request_started`] ended (default: a touch).
    fn request_finished(&self, model: &str) {
        self.touch(model);
    }
    /// Phase of a managed model (`Idle`, `Loading`, `Ready`, `Stopping`, `Failed`).
    fn phase(&self, model: &str) -> Option<String>;
    /// State of every managed model and group, for `GET /admin/models`.
    fn report(&self) -> serde_json::Value;
}

/// One request being served by a managed model; dropping it reports the
/// end of the request.
pub struct ActiveRequest {
    lifecycle: Arc<dyn ModelLifecycle>,
    model: Arc<str>,
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        self.lifecycle.request_finished(&self.model);
    }
}

/// Queue settings.
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    /// Requests allowed to wait per model (`PROXY_MAX_QUEUE_SIZE`).
    pub max_queue: usize,
    /// Longest wait in the queue (`PROXY_QUEUE_TIMEOUT`).
    pub queue_timeout: Duration,
    /// Default wait for readiness (`PROXY_COLD_START_TIMEOUT`).
    pub cold_start_timeout: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            max_queue: 100,
            queue_timeout: Duration::from_secs(60),
            cold_start_timeout: Duration::from_secs(60),
        }
    }
}

type Outcome = Result<(), ApiError>;

#[derive(Default)]
struct ModelQueue {
    waiters: Mutex<VecDeque<(u64, oneshot::Sender<Outcome>)>>,
    watcher_running: AtomicBool,
}

impl ModelQueue {
    fn len(&self) -> usize {
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Releases every waiter, oldest first.
    fn release(&self, outcome: &Outcome) {
        let drained: Vec<_> = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        for (_, tx) in drained {
            let _ = tx.send(outcome.clone());
        }
    }

    fn remove(&self, ticket: u64) -> usize {
        let mut w = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        w.retain(|(t, _)| *t != ticket);
        w.len()
    }

    /// Watches the model's readiness while anyone waits, releasing the queue
    /// in arrival order when it turns ready (or failed). A failure that was
    /// already reported when watching began is stale: the activation that
    /// queued these requests retries it, so only a new failure counts.
    async fn watch(self: Arc<Self>, model: String, mut status: watch::Receiver<ModelStatus>) {
        let mut first = true;
        loop {
            let (phase, message) = {
                let now = status.borrow_and_update();
                (now.phase, now.message.clone())
            };
            match phase {
                Phase::Ready => self.release(&Ok(())),
                Phase::Failed if !first => self.release(&Err(ApiError::activation_failed(
                    &model,
                    message.as_deref().unwrap_or("the model process failed"),
                ))),
                _ => {}
            }
            first = false;
            if self.len() == 0 {
                self.watcher_running.store(false, Ordering::SeqCst);
                // A waiter may have queued after the emptiness check but
                // before the flag was cleared; keep watching for it.
                if self.len() == 0 || self.watcher_running.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
            // A request that saw the model not ready just before it turned
            // ready may have queued after the release above; no change will
            // come to wake it, so release it now.
            if status.borrow().phase == Phase::Ready {
                continue;
            }
            if status.changed().await.is_err() {
                self.release(&Err(ApiError::activation_failed(
                    &model,
                    "model was removed",
                )));
                self.watcher_running.store(false, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// The per-model queues in front of a [`ModelLifecycle`].
pub struct ActivationQueues {
    lifecycle: Arc<dyn ModelLifecycle>,
    settings: QueueSettings,
    queues: Mutex<HashMap<String, Arc<ModelQueue>>>,
    tickets: AtomicU64,
}

/// What happened to a request that had to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The model was ready; no waiting.
    Ready,
    /// The request waited this long for the model.
    Waited(Duration),
}

/// Removes a waiter from its queue when its request goes away, and updates
/// the demand the lifecycle sees.
struct Slot<'a> {
    queues: &'a ActivationQueues,
    queue: Arc<ModelQueue>,
    model: &'a str,
    ticket: u64,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let left = self.queue.remove(self.ticket);
        self.queues.lifecycle.demand(self.model, left as u32);
    }
}

impl ActivationQueues {
    /// Queues in front of `lifecycle`.
    pub fn new(lifecycle: Arc<dyn ModelLifecycle>, settings: QueueSettings) -> Self {
        Self {
            lifecycle,
            settings,
            queues: Mutex::new(HashMap::new()),
            tickets: AtomicU64::new(0),
        }
    }

    /// The lifecycle behind the queues.
    pub fn lifecycle(&self) -> &Arc<dyn ModelLifecycle> {
        &self.lifecycle
    }

    /// Marks a request for `model` as being served until the guard drops,
    /// so that the model is not stopped for idleness under it; `None` for
    /// models that are not managed (always ready).
    pub fn active_request(&self, model: &str) -> Option<ActiveRequest> {
        self.lifecycle.status(model)?;
        self.lifecycle.request_started(model);
        Some(ActiveRequest {
            lifecycle: self.lifecycle.clone(),
            model: Arc::from(model),
        })
    }

    fn queue(&self, model: &str) -> Arc<ModelQueue> {
        let mut map = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(model.to_string()).or_default().clone()
    }

    /// Requests waiting for `model` now.
    pub fn depth(&self, model: &str) -> usize {
        let map = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(model).map_or(0, |q| q.len())
    }

    /// Admits a background request (the benchmarker's, marked with the
    /// workload-class header): served only when `model` is already Ready,
    /// without counting as activity; never queued and never a reason to
    /// start the model.
    pub fn admit_background(&self, model: &str) -> Result<(), ApiError> {
        match self.lifecycle.status(model) {
            Some(status) if status.borrow().phase != Phase::Ready => Err(ApiError::unavailable(
                format!("background request requires model \"{model}\" to already be Ready"),
            )),
            _ => Ok(()),
        }
    }

    /// Waits until `model` is ready, activating it if needed.
    ///
    /// `cold_start` is the model's own cold-start timeout, if it has one; the
    /// wait is bounded by the largest of it, the queue timeout and the default
    /// cold-start timeout.
    pub async fn admit(
        &self,
        model: &str,
        cold_start: Option<Duration>,
    ) -> Result<Admission, ApiError> {
        let Some(status) = self.lifecycle.status(model) else {
            return Ok(Admission::Ready);
        };
        if status.borrow().phase == Phase::Ready {
            self.lifecycle.touch(model);
            return Ok(Admission::Ready);
        }
        let started = Instant::now();
        let queue = self.queue(model);
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        let (tx, mut done) = oneshot::channel();
        let depth = {
            let mut w = queue.waiters.lock().unwrap_or_else(PoisonError::into_inner);
            if w.len() >= self.settings.max_queue {
                let mut e = ApiError::queue_full();
                e.retry_after = Some(QUEUE_FULL_RETRY_AFTER);
                return Err(e);
            }
            w.push_back((ticket, tx));
            w.len()
        };
        let _slot = Slot {
            queues: self,
            queue: queue.clone(),
            model,
            ticket,
        };
        self.lifecycle.demand(model, depth as u32);
        self.lifecycle.activate(model);

        let wait = self
            .settings
            .queue_timeout
            .max(self.settings.cold_start_timeout)
            .max(cold_start.unwrap_or_default());
        if !queue.watcher_running.swap(true, Ordering::SeqCst) {
            tokio::spawn(queue.clone().watch(model.to_string(), status));
        }
        match tokio::time::timeout(wait, &mut done).await {
            Ok(Ok(Ok(()))) => {
                self.lifecycle.touch(model);
                Ok(Admission::Waited(started.elapsed()))
            }
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(ApiError::internal("activation queue closed")),
            Err(_) => Err(ApiError::activation_timeout(wait)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A lifecycle whose phase the test sets by hand.
    struct Manual {
        tx: watch::Sender<ModelStatus>,
        activations: AtomicUsize,
        demand: Mutex<Vec<u32>>,
    }

    impl Manual {
        fn new(phase: Phase) -> Arc<Self> {
            Arc::new(Self {
                tx: watch::channel(status(phase)).0,
                activations: AtomicUsize::new(0),
                demand: Mutex::new(Vec::new()),
            })
        }
    }

    fn status(phase: Phase) -> ModelStatus {
        ModelStatus {
            phase,
            endpoint: None,
            message: Some("boom".into()),
            since: std::time::SystemTime::now(),
        }
    }

    impl ModelLifecycle for Manual {
        fn status(&self, model: &str) -> Option<watch::Receiver<ModelStatus>> {
            (model == "m").then(|| self.tx.subscribe())
        }
        fn activate(&self, _model: &str) {
            self.activations.fetch_add(1, Ordering::SeqCst);
        }
        fn demand(&self, _model: &str, queued: u32) {
            self.demand.lock().unwrap().push(queued);
        }
        fn touch(&self, _model: &str) {}
        fn phase(&self, _model: &str) -> Option<String> {
            None
        }
        fn report(&self) -> serde_json::Value {
            serde_json::Value::Null
        }
    }

    fn queues(l: Arc<Manual>, max_queue: usize, timeout_ms: u64) -> Arc<ActivationQueues> {
        Arc::new(ActivationQueues::new(
            l,
            QueueSettings {
                max_queue,
                queue_timeout: Duration::from_millis(timeout_ms),
                cold_start_timeout: Duration::from_millis(timeout_ms),
            },
        ))
    }

    #[tokio::test]
    async fn unmanaged_and_ready_models_pass_without_queueing() {
        let l = Manual::new(Phase::Ready);
        let q = queues(l.clone(), 1, 100);
        assert_eq!(q.admit("other", None).await, Ok(Admission::Ready));
        assert_eq!(q.admit("m", None).await, Ok(Admission::Ready));
        assert_eq!(l.activations.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn waiters_are_released_in_arrival_order_when_ready() {
        let l = Manual::new(Phase::Idle);
        let q = queues(l.clone(), 10, 5_000);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..5 {
            let (qc, order) = (q.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let r = qc.admit("m", None).await;
                order.lock().unwrap().push(i);
                r
            }));
            while q.depth("m") < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        l.tx.send_replace(status(Phase::Ready));
        for t in tasks {
            assert!(matches!(t.await.unwrap(), Ok(Admission::Waited(_))));
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert_eq!(q.depth("m"), 0);
        assert_eq!(*l.demand.lock().unwrap().last().unwrap(), 0);
    }

    #[tokio::test]
    async fn full_queue_timeout_and_failure() {
        let l = Manual::new(Phase::Idle);
        let q = queues(l.clone(), 1, 200);
        let first = {
            let q = q.clone();
            tokio::spawn(async move { q.admit("m", None).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        let full = q.admit("m", None).await.unwrap_err();
        assert_eq!((full.status, full.code), (503, "queue_full"));
        assert_eq!(full.retry_after, Some(QUEUE_FULL_RETRY_AFTER));
        let timed_out = first.await.unwrap().unwrap_err();
        assert_eq!(
            (timed_out.status, timed_out.code),
            (503, "activation_timeout")
        );
        assert_eq!(q.depth("m"), 0, "a timed-out request leaves the queue");

        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.admit("m", Some(Duration::from_secs(5))).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        l.tx.send_replace(status(Phase::Failed));
        let failed = waiter.await.unwrap().unwrap_err();
        assert_eq!((failed.status, failed.code), (503, "activation_failed"));
        assert!(failed.message.contains("boom"), "{}", failed.message);
    }

    #[tokio::test]
    async fn a_failure_reported_before_queueing_is_retried_not_returned() {
        let l = Manual::new(Phase::Failed);
        let q = queues(l.clone(), 5, 5_000);
        let t = {
            let q = q.clone();
            tokio::spawn(async move { q.admit("m", None).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(l.activations.load(Ordering::SeqCst), 1);
        l.tx.send_replace(status(Phase::Loading));
        l.tx.send_replace(status(Phase::Ready));
        assert!(matches!(t.await.unwrap(), Ok(Admission::Waited(_))));
    }

    #[tokio::test]
    async fn dropped_request_leaves_the_queue() {
        let l = Manual::new(Phase::Idle);
        let q = queues(l.clone(), 5, 5_000);
        let t = {
            let q = q.clone();
            tokio::spawn(async move { q.admit("m", None).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        t.abort();
        let _ = t.await;
        assert_eq!(q.depth("m"), 0);
    }
}
