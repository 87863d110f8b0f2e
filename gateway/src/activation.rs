//! Admission: requests for a model that is not ready wait in a bounded
//! per-model queue while the model is activated, and are let in the moment
//! it reports ready; requests for a model whose concurrency is bounded wait
//! in the same queue for a free slot. The queue serves by priority class
//! and, between tenants of one class, in turns ([`crate::flow`]).
//!
//! Readiness arrives as a notification (`watch` channel) from whoever runs the
//! model (the embedded local actuator today); nothing polls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flexinfer_operator::lifecycle::{ModelStatus, Phase};
use tokio::sync::{oneshot, watch};

use crate::errors::ApiError;
use crate::flow::{Class, FairQueue, UsageBands, Waiter};
use crate::kube::backoff::ActivationBackoff;

/// Seconds a client is told to wait after a full queue when no start is
/// under way with a known duration.
pub const QUEUE_FULL_RETRY_AFTER: u64 = 5;

/// Longest `Retry-After` a full queue gives, in seconds.
pub const RETRY_AFTER_CAP: u64 = 300;

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
    /// What clients waiting for `model` are told when its activation fails
    /// with `message` (its status message). The default passes the message
    /// on, for lifecycles whose messages are written for clients; one whose
    /// messages may hold secrets (an engine's stderr) says less.
    fn failure_for_clients(&self, model: &str, message: &str) -> String {
        let _ = model;
        message.to_owned()
    }
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

/// What a waiter is told: admitted (with its slot, when the model's
/// concurrency is bounded), or why not.
type Outcome = Result<Option<FlowPermit>, ApiError>;

/// Requests of one model: those waiting (for readiness or for a slot, in
/// one queue) and the slots held.
#[derive(Default)]
struct ModelQueue {
    state: Mutex<QueueState>,
    watcher_running: AtomicBool,
}

#[derive(Default)]
struct QueueState {
    waiting: FairQueue<oneshot::Sender<Outcome>>,
    /// Slots held by admitted requests (counted while `capacity` is set).
    in_flight: usize,
    /// Requests the model serves at once; unbounded when `None`.
    capacity: Option<usize>,
    /// Whether the model can serve (unmanaged models always can).
    ready: bool,
    /// When the start that requests wait for now began.
    start_began: Option<tokio::time::Instant>,
    /// How long the model's last start took, from the first request that
    /// asked for it to Ready: what the next start is expected to take.
    last_start: Option<Duration>,
}

impl QueueState {
    fn has_room(&self) -> bool {
        self.capacity.is_none_or(|c| self.in_flight < c)
    }

    /// Time left until the start under way is expected to be done, when
    /// one is under way and an earlier start was timed.
    fn start_eta(&self) -> Option<Duration> {
        let began = self.start_began?;
        Some(self.last_start?.saturating_sub(began.elapsed()))
    }
}

/// Where a waiting request stands, for the progress a held stream is sent
/// ([`crate::held`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// What it waits for: `starting` (nothing runs yet, e.g. waiting for
    /// the GPU its group shares), `loading`, `stopping` (a swap: the model
    /// goes down before it comes back), `retrying` (after a failed start)
    /// or `queued` (the model serves; a slot is awaited).
    pub phase: &'static str,
    /// Requests waiting for the model, this one included.
    pub waiting: usize,
    /// Expected time left until the start under way is done (from the
    /// model's last start), when known.
    pub eta: Option<Duration>,
}

/// A slot of a model whose concurrency is bounded, held while the request
/// is served; dropping it lets the next waiter in.
pub struct FlowPermit {
    /// `None` once the slot was given back another way.
    queue: Option<Arc<ModelQueue>>,
}

impl std::fmt::Debug for FlowPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlowPermit")
    }
}

impl PartialEq for FlowPermit {
    fn eq(&self, other: &Self) -> bool {
        match (&self.queue, &other.queue) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl Drop for FlowPermit {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            let mut st = queue.lock();
            st.in_flight = st.in_flight.saturating_sub(1);
            queue.dispatch(&mut st);
        }
    }
}

impl ModelQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// A slot for a request admitted now (counted when bounded).
    fn take_slot(self: &Arc<Self>, st: &mut QueueState) -> Option<FlowPermit> {
        st.capacity?;
        st.in_flight += 1;
        Some(FlowPermit {
            queue: Some(self.clone()),
        })
    }

    /// Lets in waiters, in queue order, while the model is ready and has
    /// room. A permit that does not reach its waiter (gone meanwhile) gives
    /// its slot back at once.
    fn dispatch(self: &Arc<Self>, st: &mut QueueState) {
        while st.ready && st.has_room() {
            let Some((_, tx)) = st.waiting.pop() else {
                break;
            };
            let permit = self.take_slot(st);
            if let Err(Ok(Some(mut permit))) = tx.send(Ok(permit)) {
                st.in_flight -= 1;
                permit.queue = None;
            }
        }
    }

    /// Answers every waiter with `err`.
    fn fail_all(&self, err: &ApiError) {
        let drained: Vec<_> = {
            let mut st = self.lock();
            std::iter::from_fn(|| st.waiting.pop()).collect()
        };
        for (_, tx) in drained {
            let _ = tx.send(Err(err.clone()));
        }
    }

    fn remove(&self, ticket: u64) -> usize {
        let mut st = self.lock();
        st.waiting.remove(ticket);
        st.waiting.len()
    }

    fn set_ready(self: &Arc<Self>, ready: bool) {
        let mut st = self.lock();
        st.ready = ready;
        if ready {
            if let Some(began) = st.start_began.take() {
                st.last_start = Some(began.elapsed());
            }
        } else if st.start_began.is_none() {
            st.start_began = Some(tokio::time::Instant::now());
        }
        self.dispatch(&mut st);
    }

    /// Watches the model's readiness while anyone waits, letting waiters in
    /// when it turns ready (or failing them when it fails). A failure that
    /// was already reported when watching began is stale: the activation
    /// that queued these requests retries it, so only a new failure counts.
    ///
    /// With `backoff` (`--backoff-enabled`), a failed activation is
    /// started again after a backoff wait, up to its retries, while the
    /// requests keep waiting (each within its own timeout). Waiters of a
    /// failed activation are told what `lifecycle` lets clients see.
    async fn watch(
        self: Arc<Self>,
        model: String,
        mut status: watch::Receiver<ModelStatus>,
        lifecycle: Arc<dyn ModelLifecycle>,
        backoff: Option<ActivationBackoff>,
    ) {
        let mut first = true;
        let mut attempt = 0;
        loop {
            let (phase, message) = {
                let now = status.borrow_and_update();
                (now.phase, now.message.clone())
            };
            let message = || message.as_deref().unwrap_or("the model process failed");
            match (phase, &backoff) {
                (Phase::Ready, _) => self.set_ready(true),
                (Phase::Failed, Some(backoff))
                    if !first && attempt < backoff.retries && self.len() > 0 =>
                {
                    let pause = backoff.wait(attempt, ActivationBackoff::jitter());
                    tracing::warn!(
                        model,
                        error = message(),
                        retry = attempt + 1,
                        of = backoff.retries,
                        wait_ms = crate::logging::millis(pause),
                        "activation failed; retrying"
                    );
                    backoff.record(&model, pause);
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                    lifecycle.activate(&model);
                }
                (Phase::Failed, _) if !first => {
                    tracing::warn!(
                        model,
                        error = message(),
                        waiting = self.len(),
                        "activation failed; answering the waiting requests"
                    );
                    let told = lifecycle.failure_for_clients(&model, message());
                    self.lock().start_began = None;
                    self.fail_all(&ApiError::activation_failed(&model, &told))
                }
                _ => self.set_ready(false),
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
            // Waiters left while ready wait for a slot, not for this watch.
            if status.borrow().phase == Phase::Ready {
                self.watcher_running.store(false, Ordering::SeqCst);
                return;
            }
            if status.changed().await.is_err() {
                self.fail_all(&ApiError::activation_failed(&model, "model was removed"));
                self.watcher_running.store(false, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// The per-model queues in front of the models: requests wait here for a
/// cold start ([`ModelLifecycle`]) and, when a model's concurrency is
/// bounded, for a free slot, served by priority class and fair share
/// between tenants ([`crate::flow`]).
pub struct ActivationQueues {
    lifecycle: Option<Arc<dyn ModelLifecycle>>,
    /// How a failed activation is retried here, when it is.
    backoff: Option<ActivationBackoff>,
    settings: QueueSettings,
    queues: Mutex<HashMap<String, Arc<ModelQueue>>>,
    tickets: AtomicU64,
    /// Tenants' usage bands, when tenants' fleet usage orders the turns.
    bands: Option<UsageBands>,
}

/// What happened to a request that had to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The model was ready; no waiting.
    Ready,
    /// The request waited this long for the model.
    Waited(Duration),
}

/// One request asking to be served.
#[derive(Debug, Clone)]
pub struct AdmitRequest<'a> {
    /// The model.
    pub model: &'a str,
    /// The model's own cold-start bound, if it has one.
    pub cold_start: Option<Duration>,
    /// Requests the model serves at once, when bounded.
    pub capacity: Option<usize>,
    /// Its class and tenant.
    pub who: Waiter,
}

/// An admitted request: how long it waited and the slot it holds.
#[derive(Debug, PartialEq)]
pub struct Admitted {
    /// Whether and how long it waited.
    pub admission: Admission,
    /// Its slot, when the model's concurrency is bounded.
    pub permit: Option<FlowPermit>,
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
        if let Some(l) = &self.queues.lifecycle {
            l.demand(self.model, left as u32);
        }
    }
}

impl ActivationQueues {
    /// Queues in front of `lifecycle` (none: every model is always ready,
    /// and only bounded concurrency makes requests wait).
    pub fn new(lifecycle: Option<Arc<dyn ModelLifecycle>>, settings: QueueSettings) -> Self {
        Self {
            lifecycle,
            backoff: None,
            settings,
            queues: Mutex::new(HashMap::new()),
            tickets: AtomicU64::new(0),
            bands: None,
        }
    }

    /// Gives the turns between tenants by their usage `bands` ([`crate::flow`]).
    pub fn with_usage_bands(mut self, bands: Option<UsageBands>) -> Self {
        self.bands = bands;
        self
    }

    /// Retries a failed activation with `backoff` while its requests wait
    /// (for lifecycles that do not retry on their own: local models).
    pub fn with_backoff(mut self, backoff: Option<ActivationBackoff>) -> Self {
        self.backoff = backoff;
        self
    }

    /// The lifecycle behind the queues, when models are run on demand.
    pub fn lifecycle(&self) -> Option<&Arc<dyn ModelLifecycle>> {
        self.lifecycle.as_ref()
    }

    fn status(&self, model: &str) -> Option<watch::Receiver<ModelStatus>> {
        self.lifecycle.as_ref()?.status(model)
    }

    /// Marks a request for `model` as being served until the guard drops,
    /// so that the model is not stopped for idleness under it; `None` for
    /// models that are not managed (always ready).
    pub fn active_request(&self, model: &str) -> Option<ActiveRequest> {
        let lifecycle = self.lifecycle.as_ref()?;
        lifecycle.status(model)?;
        lifecycle.request_started(model);
        Some(ActiveRequest {
            lifecycle: lifecycle.clone(),
            model: Arc::from(model),
        })
    }

    fn queue(&self, model: &str) -> Arc<ModelQueue> {
        let mut map = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(model.to_string())
            .or_insert_with(|| {
                let queue = ModelQueue::default();
                queue.lock().waiting = FairQueue::with_bands(self.bands.clone());
                Arc::new(queue)
            })
            .clone()
    }

    /// Requests waiting for `model` now.
    pub fn depth(&self, model: &str) -> usize {
        let map = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(model).map_or(0, |q| q.len())
    }

    /// Where requests waiting for `model` stand now.
    pub fn progress(&self, model: &str) -> Progress {
        let phase = match self.status(model).map(|s| s.borrow().phase) {
            None | Some(Phase::Ready) => "queued",
            Some(Phase::Idle) => "starting",
            Some(Phase::Loading) => "loading",
            Some(Phase::Stopping) => "stopping",
            Some(Phase::Failed) => "retrying",
        };
        let queue = self.queue(model);
        let st = queue.lock();
        Progress {
            phase,
            waiting: st.waiting.len(),
            eta: st.start_eta(),
        }
    }

    /// Waiting requests and held slots of every model, by class and tenant,
    /// for `/admin/tenants`.
    pub fn report(&self) -> serde_json::Value {
        let map = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let mut models: Vec<_> = map
            .iter()
            .map(|(model, q)| {
                let st = q.lock();
                let waiting: Vec<_> = st
                    .waiting
                    .depths()
                    .into_iter()
                    .map(|(class, tenant, n)| {
                        serde_json::json!({"class": class.as_str(), "tenant": &*tenant, "waiting": n})
                    })
                    .collect();
                serde_json::json!({
                    "model": model,
                    "inFlight": st.in_flight,
                    "capacity": st.capacity,
                    "waiting": waiting,
                })
            })
            .collect();
        models.sort_by(|a, b| a["model"].as_str().cmp(&b["model"].as_str()));
        serde_json::Value::Array(models)
    }

    /// Admits a request: at once when its model is ready and has room;
    /// otherwise it waits, activating the model if it is not running.
    ///
    /// The wait is bounded by the largest of the model's own cold-start
    /// bound, the queue timeout and the default cold-start timeout while
    /// the model is not ready, by the queue timeout while it waits for a
    /// slot. A background request never starts a model: it is refused
    /// unless the model is Ready, and waits for a slot behind every other
    /// class. When the queue is full, a request that ranks above a waiter
    /// takes that waiter's place (the youngest of the lowest class, which
    /// is told the queue is full).
    pub async fn admit(&self, req: AdmitRequest<'_>) -> Result<Admitted, ApiError> {
        let model = req.model;
        let background = req.who.class == Class::Background;
        let status = self.status(model);
        let ready = status
            .as_ref()
            .is_none_or(|s| s.borrow().phase == Phase::Ready);
        if background && !ready {
            return Err(ApiError::unavailable(format!(
                "background request requires model \"{model}\" to already be Ready"
            )));
        }
        let managed = status.is_some();
        let touch = |this: &Self| {
            if let (Some(l), false, true) = (&this.lifecycle, background, managed) {
                l.touch(model);
            }
        };
        if ready && req.capacity.is_none() {
            touch(self);
            return Ok(Admitted {
                admission: Admission::Ready,
                permit: None,
            });
        }
        let started = Instant::now();
        let queue = self.queue(model);
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        let (tx, mut done) = oneshot::channel();
        let (depth, evicted) = {
            let mut st = queue.lock();
            st.capacity = req.capacity;
            st.ready = ready;
            if ready && st.waiting.is_empty() && st.has_room() {
                let permit = queue.take_slot(&mut st);
                drop(st);
                touch(self);
                return Ok(Admitted {
                    admission: Admission::Ready,
                    permit,
                });
            }
            if !ready && st.start_began.is_none() {
                st.start_began = Some(tokio::time::Instant::now());
            }
            let evicted = if st.waiting.len() >= self.settings.max_queue {
                match st.waiting.evict_below(req.who.class) {
                    Some((_, tx)) => Some(tx),
                    None => return Err(queue_full(st.start_eta())),
                }
            } else {
                None
            };
            st.waiting.push(&req.who, ticket, tx);
            (st.waiting.len(), evicted)
        };
        if let Some(tx) = evicted {
            let _ = tx.send(Err(queue_full(queue.lock().start_eta())));
        }
        let _slot = Slot {
            queues: self,
            queue: queue.clone(),
            model,
            ticket,
        };
        let wait = if ready {
            self.settings.queue_timeout
        } else {
            // Not ready means managed: the status came from the lifecycle.
            if let Some(lifecycle) = &self.lifecycle {
                lifecycle.demand(model, depth as u32);
                lifecycle.activate(model);
            }
            if let (Some(status), Some(lifecycle)) = (status, &self.lifecycle) {
                if !queue.watcher_running.swap(true, Ordering::SeqCst) {
                    tokio::spawn(queue.clone().watch(
                        model.to_string(),
                        status,
                        lifecycle.clone(),
                        self.backoff.clone(),
                    ));
                }
            }
            self.settings
                .queue_timeout
                .max(self.settings.cold_start_timeout)
                .max(req.cold_start.unwrap_or_default())
        };
        match tokio::time::timeout(wait, &mut done).await {
            Ok(Ok(Ok(permit))) => {
                touch(self);
                Ok(Admitted {
                    admission: Admission::Waited(started.elapsed()),
                    permit,
                })
            }
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(ApiError::internal("activation queue closed")),
            Err(_) if ready => Err(ApiError::queue_timeout(model, wait)),
            Err(_) => Err(ApiError::activation_timeout(wait)),
        }
    }
}

/// 503 for a full queue, with the time to retry after: when the model
/// is starting and its last start was timed, the time that start is
/// expected to take still (at least 1 s, at most [`RETRY_AFTER_CAP`]),
/// so that a herd refused together comes back once it can be served, not
/// all at once while it cannot; else [`QUEUE_FULL_RETRY_AFTER`].
fn queue_full(eta: Option<Duration>) -> ApiError {
    let mut e = ApiError::queue_full();
    e.retry_after = Some(eta.map_or(QUEUE_FULL_RETRY_AFTER, |left| {
        left.as_secs_f64().ceil().clamp(1.0, RETRY_AFTER_CAP as f64) as u64
    }));
    e
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
        /// Whether its failure messages are kept from clients.
        private: AtomicBool,
    }

    impl Manual {
        fn new(phase: Phase) -> Arc<Self> {
            Arc::new(Self {
                tx: watch::channel(status(phase)).0,
                activations: AtomicUsize::new(0),
                demand: Mutex::new(Vec::new()),
                private: AtomicBool::new(false),
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
        fn failure_for_clients(&self, _model: &str, message: &str) -> String {
            if self.private.load(Ordering::SeqCst) {
                "ask the operator".to_owned()
            } else {
                message.to_owned()
            }
        }
    }

    fn normal(tenant: &str) -> Waiter {
        Waiter {
            class: Class::Normal,
            tenant: Arc::from(tenant),
        }
    }

    async fn admit(
        q: &ActivationQueues,
        model: &str,
        cold_start: Option<Duration>,
    ) -> Result<Admission, ApiError> {
        let request = AdmitRequest {
            model,
            cold_start,
            capacity: None,
            who: normal(""),
        };
        q.admit(request).await.map(|a| a.admission)
    }

    fn queues(l: Arc<Manual>, max_queue: usize, timeout_ms: u64) -> Arc<ActivationQueues> {
        Arc::new(ActivationQueues::new(
            Some(l),
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
        assert_eq!(admit(&q, "other", None).await, Ok(Admission::Ready));
        assert_eq!(admit(&q, "m", None).await, Ok(Admission::Ready));
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
                let r = admit(&qc, "m", None).await;
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
            tokio::spawn(async move { admit(&q, "m", None).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        let full = admit(&q, "m", None).await.unwrap_err();
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
            tokio::spawn(async move { admit(&q, "m", Some(Duration::from_secs(5))).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        l.tx.send_replace(status(Phase::Failed));
        let failed = waiter.await.unwrap().unwrap_err();
        assert_eq!((failed.status, failed.code), (503, "activation_failed"));
        assert!(failed.message.contains("boom"), "{}", failed.message);
    }

    /// The progress a held stream is sent, and the `Retry-After` of a full
    /// queue, come from the model's last start once one was timed.
    #[tokio::test(start_paused = true)]
    async fn a_timed_start_gives_progress_its_estimate_and_a_full_queue_its_retry_after() {
        let l = Manual::new(Phase::Idle);
        let q = queues(l.clone(), 1, 60_000);
        let unknown = Progress {
            phase: "starting",
            waiting: 0,
            eta: None,
        };
        assert_eq!(q.progress("m"), unknown);
        let first = {
            let q = q.clone();
            tokio::spawn(async move { admit(&q, "m", None).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        l.tx.send_replace(status(Phase::Loading));
        tokio::time::sleep(Duration::from_secs(20)).await;
        let p = q.progress("m");
        assert_eq!((p.phase, p.waiting, p.eta), ("loading", 1, None));
        l.tx.send_replace(status(Phase::Ready));
        first.await.unwrap().unwrap();
        assert_eq!(q.progress("m").phase, "queued");

        // Down again; the next start is expected to take 20 s as well.
        l.tx.send_replace(status(Phase::Idle));
        let second = {
            let q = q.clone();
            tokio::spawn(async move { admit(&q, "m", None).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(7_500)).await;
        let p = q.progress("m");
        assert_eq!(p.eta, Some(Duration::from_millis(12_500)), "{p:?}");
        let full = admit(&q, "m", None).await.unwrap_err();
        assert_eq!(full.code, "queue_full");
        assert_eq!(full.retry_after, Some(13), "the seconds left, rounded up");
        // Past the estimate: come back in a second, not never.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(q.progress("m").eta, Some(Duration::ZERO));
        let full = admit(&q, "m", None).await.unwrap_err();
        assert_eq!(full.retry_after, Some(1));
        l.tx.send_replace(status(Phase::Ready));
        second.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn waiters_of_a_failed_activation_are_told_what_the_lifecycle_allows() {
        let l = Manual::new(Phase::Idle);
        l.private.store(true, Ordering::SeqCst);
        let q = queues(l.clone(), 1, 5_000);
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { admit(&q, "m", None).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        l.tx.send_replace(status(Phase::Failed));
        let failed = waiter.await.unwrap().unwrap_err();
        assert_eq!((failed.status, failed.code), (503, "activation_failed"));
        assert_eq!(
            failed.message,
            "Failed to activate model 'm': ask the operator"
        );
    }

    #[tokio::test]
    async fn a_failure_reported_before_queueing_is_retried_not_returned() {
        let l = Manual::new(Phase::Failed);
        let q = queues(l.clone(), 5, 5_000);
        let t = {
            let q = q.clone();
            tokio::spawn(async move { admit(&q, "m", None).await })
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
            tokio::spawn(async move { admit(&q, "m", None).await })
        };
        while q.depth("m") < 1 {
            tokio::task::yield_now().await;
        }
        t.abort();
        let _ = t.await;
        assert_eq!(q.depth("m"), 0);
    }

    fn bounded<'a>(model: &'a str, class: Class, tenant: &str) -> AdmitRequest<'a> {
        AdmitRequest {
            model,
            cold_start: None,
            capacity: Some(1),
            who: Waiter {
                class,
                tenant: Arc::from(tenant),
            },
        }
    }

    /// Queues a bounded request in a task; returns when it waits.
    async fn queued(
        q: &Arc<ActivationQueues>,
        class: Class,
        tenant: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> tokio::task::JoinHandle<Result<(), ApiError>> {
        let before = q.depth("free");
        let (q2, order) = (q.clone(), order.clone());
        let task = tokio::spawn(async move {
            let admitted = q2.admit(bounded("free", class, tenant)).await?;
            order.lock().unwrap().push(tenant);
            drop(admitted);
            Ok(())
        });
        while q.depth("free") == before {
            tokio::task::yield_now().await;
        }
        task
    }

    #[tokio::test]
    async fn a_bounded_model_lets_waiters_in_by_class_then_in_tenant_turns() {
        let q = queues(Manual::new(Phase::Ready), 100, 5_000);
        let held = q.admit(bounded("free", Class::Normal, "a")).await.unwrap();
        assert!(held.permit.is_some());
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for tenant in ["a1", "a1", "a1", "b1"] {
            tasks.push(queued(&q, Class::Low, tenant, &order).await);
        }
        tasks.push(queued(&q, Class::Background, "bench", &order).await);
        tasks.push(queued(&q, Class::High, "c1", &order).await);
        drop(held);
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["c1", "a1", "b1", "a1", "a1", "bench"]
        );
    }

    #[tokio::test]
    async fn a_full_queue_makes_room_for_a_higher_class_and_times_out_slots() {
        let q = queues(Manual::new(Phase::Ready), 2, 300);
        let _held = q.admit(bounded("free", Class::Normal, "a")).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let old = queued(&q, Class::Low, "old", &order).await;
        let young = queued(&q, Class::Low, "young", &order).await;
        let full = q.admit(bounded("free", Class::Low, "x")).await.unwrap_err();
        assert_eq!(
            (full.code, full.retry_after),
            ("queue_full", Some(QUEUE_FULL_RETRY_AFTER))
        );
        let high = {
            let q = q.clone();
            tokio::spawn(
                async move { q.admit(bounded("free", Class::High, "h")).await.map(|_| ()) },
            )
        };
        let evicted = young.await.unwrap().unwrap_err();
        assert_eq!(
            evicted.code, "queue_full",
            "the youngest of the lowest class made room"
        );
        let timed_out = high.await.unwrap().unwrap_err();
        assert_eq!((timed_out.status, timed_out.code), (503, "queue_timeout"));
        assert!(old.await.unwrap().is_err());
        assert_eq!(q.depth("free"), 0);
    }

    #[tokio::test]
    async fn background_requests_never_start_a_model() {
        let l = Manual::new(Phase::Idle);
        let q = queues(l.clone(), 10, 1_000);
        let err = q
            .admit(bounded("m", Class::Background, ""))
            .await
            .unwrap_err();
        assert_eq!(err.status, 503);
        assert_eq!(
            err.message,
            "background request requires model \"m\" to already be Ready"
        );
        assert_eq!(l.activations.load(Ordering::SeqCst), 0);
    }
}
