//! The request path's view of cluster models: readiness from the watches,
//! and activation, demand and activity handed to background tasks.
//!
//! Every method of [`ModelLifecycle`] here is a map lookup plus, at most, a
//! message on a channel: no Kubernetes call and no lock is ever held by a
//! request. Activation is single-flight per model (one patch however many
//! requests queue), touches are throttled per model. A request counts as
//! activity for as long as it runs: [`KubeLifecycle::keep_active`] touches
//! models with requests in flight (a minutes-long answer is not scaled to
//! zero under its client) and those whose last request ended after their
//! last touch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use flexinfer_operator::lifecycle::{ModelStatus, Phase};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use super::models::{ClusterModel, Target};
use crate::activation::ModelLifecycle;

/// Work for the background tasks that talk to the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Scale the model up (single-flight: sent once per activation).
    Activate(String),
    /// Requests waiting for the model now.
    Demand(String, u32),
    /// The model served traffic (throttled before it is sent).
    Touch(String),
}

/// Per-model state shared by the request path and the background tasks.
struct Entry {
    status: watch::Sender<ModelStatus>,
    activating: AtomicBool,
    last_touch_ms: AtomicU64,
    grouped: AtomicBool,
    target: ArcSwap<(Target, Duration)>,
    endpoints: AtomicU64,
    queued: AtomicU64,
    /// Requests being served now.
    in_flight: AtomicU64,
    /// A request ended while touches were throttled: its end is still to
    /// be recorded.
    end_untouched: AtomicBool,
    /// Least time between two touches: the touch interval, or a third of
    /// the model's idle timeout when that is shorter, so that a model
    /// serving a request never looks idle for its whole timeout.
    touch_every_ms: AtomicU64,
}

/// [`ModelLifecycle`] for models found in the cluster.
pub struct KubeLifecycle {
    entries: ArcSwap<HashMap<String, Arc<Entry>>>,
    commands: mpsc::UnboundedSender<Command>,
    touch_interval: Duration,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

fn status_of(m: &ClusterModel) -> ModelStatus {
    ModelStatus {
        phase: m.phase,
        endpoint: m.config.upstreams.first().map(|u| u.addr),
        message: m.message.clone(),
        since: SystemTime::now(),
    }
}

impl KubeLifecycle {
    /// A lifecycle sending its work to `commands`; traffic touches a model
    /// at most once per `touch_interval`.
    pub fn new(commands: mpsc::UnboundedSender<Command>, touch_interval: Duration) -> Self {
        Self {
            entries: ArcSwap::from_pointee(HashMap::new()),
            commands,
            touch_interval,
        }
    }

    /// Replaces the known models (after the registry got the same set, so
    /// that a request released by a readiness change finds its endpoints).
    /// Readiness receivers of removed models see their channel close.
    pub fn update(&self, models: &[ClusterModel]) {
        let old = self.entries.load();
        let mut next: HashMap<String, Arc<Entry>> = HashMap::with_capacity(models.len());
        for m in models {
            let name = &m.config.name;
            let status = status_of(m);
            let entry = match old.get(name) {
                Some(e) => {
                    e.status.send_if_modified(|cur| {
                        let changed = cur.phase != status.phase
                            || cur.endpoint != status.endpoint
                            || cur.message != status.message;
                        if changed {
                            *cur = status;
                        }
                        changed
                    });
                    e.clone()
                }
                None => Arc::new(Entry {
                    status: watch::channel(status).0,
                    activating: AtomicBool::new(false),
                    last_touch_ms: AtomicU64::new(0),
                    grouped: AtomicBool::new(false),
                    target: ArcSwap::from_pointee((m.target.clone(), m.cold_start)),
                    endpoints: AtomicU64::new(0),
                    queued: AtomicU64::new(0),
                    in_flight: AtomicU64::new(0),
                    end_untouched: AtomicBool::new(false),
                    touch_every_ms: AtomicU64::new(0),
                }),
            };
            entry
                .touch_every_ms
                .store(self.touch_every(m.idle_timeout), Ordering::Relaxed);
            entry
                .grouped
                .store(m.target.gpu_group.is_some(), Ordering::Relaxed);
            entry
                .endpoints
                .store(m.config.upstreams.len() as u64, Ordering::Relaxed);
            let target = entry.target.load();
            if target.0 != m.target || target.1 != m.cold_start {
                entry
                    .target
                    .store(Arc::new((m.target.clone(), m.cold_start)));
            }
            next.insert(name.clone(), entry);
        }
        self.entries.store(Arc::new(next));
    }

    /// Milliseconds between touches of a model with `idle_timeout`.
    fn touch_every(&self, idle_timeout: Duration) -> u64 {
        let third = idle_timeout / 3;
        let every = if third.is_zero() {
            self.touch_interval
        } else {
            self.touch_interval.min(third)
        };
        every.as_millis() as u64
    }

    fn entry(&self, model: &str) -> Option<Arc<Entry>> {
        self.entries.load().get(model).cloned()
    }

    /// The object behind `model` and its cold-start timeout.
    pub fn target(&self, model: &str) -> Option<(Target, Duration)> {
        self.entry(model).map(|e| e.target.load().as_ref().clone())
    }

    /// Ends the activation of `model`, so the next request may start another.
    pub fn finish_activation(&self, model: &str) {
        if let Some(e) = self.entry(model) {
            e.activating.store(false, Ordering::SeqCst);
        }
    }

    /// Reports a failed activation to the requests waiting for `model`.
    pub fn fail(&self, model: &str, message: String) {
        if let Some(e) = self.entry(model) {
            e.status.send_replace(ModelStatus {
                phase: Phase::Failed,
                endpoint: None,
                message: Some(message),
                since: SystemTime::now(),
            });
        }
    }

    /// Touches every model with a request in flight, or whose last
    /// request ended untouched, as often as its touches are allowed (see
    /// [`Entry::touch_every_ms`]), until stopped.
    pub async fn keep_active(self: Arc<Self>) {
        let period = (self.touch_interval / 2)
            .min(Duration::from_millis(250))
            .max(Duration::from_millis(50));
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let entries = self.entries.load();
            for (model, e) in entries.iter() {
                let busy = e.in_flight.load(Ordering::Relaxed) > 0;
                if (busy || e.end_untouched.load(Ordering::Relaxed)) && self.touch_entry(model, e) {
                    e.end_untouched.store(false, Ordering::Relaxed);
                }
            }
        }
    }

    /// Sends a touch of `model` unless one was sent within the interval;
    /// tells whether it sent one.
    fn touch_entry(&self, model: &str, e: &Entry) -> bool {
        let now = now_ms();
        let last = e.last_touch_ms.load(Ordering::Relaxed);
        let interval = e.touch_every_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < interval {
            return false;
        }
        let won = e
            .last_touch_ms
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if won {
            self.send(Command::Touch(model.to_string()));
        }
        won
    }

    fn send(&self, command: Command) {
        if self.commands.send(command).is_err() {
            tracing::warn!("Kubernetes background tasks stopped; command dropped");
        }
    }
}

impl ModelLifecycle for KubeLifecycle {
    fn status(&self, model: &str) -> Option<watch::Receiver<ModelStatus>> {
        self.entries.load().get(model).map(|e| e.status.subscribe())
    }

    fn activate(&self, model: &str) {
        let Some(e) = self.entry(model) else {
            return;
        };
        // The activation patch sets the activity time itself.
        e.last_touch_ms.store(now_ms(), Ordering::Relaxed);
        if !e.activating.swap(true, Ordering::SeqCst) {
            self.send(Command::Activate(model.to_string()));
        }
    }

    fn demand(&self, model: &str, queued: u32) {
        let entries = self.entries.load();
        let Some(e) = entries.get(model) else {
            return;
        };
        e.queued.store(u64::from(queued), Ordering::Relaxed);
        if e.grouped.load(Ordering::Relaxed) {
            self.send(Command::Demand(model.to_string(), queued));
        }
    }

    fn touch(&self, model: &str) {
        if let Some(e) = self.entries.load().get(model) {
            self.touch_entry(model, e);
        }
    }

    fn request_started(&self, model: &str) {
        if let Some(e) = self.entries.load().get(model) {
            e.in_flight.fetch_add(1, Ordering::Relaxed);
            self.touch_entry(model, e);
        }
    }

    fn request_finished(&self, model: &str) {
        if let Some(e) = self.entries.load().get(model) {
            let _ = e
                .in_flight
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            if !self.touch_entry(model, e) {
                e.end_untouched.store(true, Ordering::Relaxed);
            }
        }
    }

    fn phase(&self, model: &str) -> Option<String> {
        let e = self.entry(model)?;
        let phase = e.status.borrow().phase;
        Some(phase.as_str().to_string())
    }

    fn report(&self) -> Value {
        let entries = self.entries.load();
        let mut names: Vec<&String> = entries.keys().collect();
        names.sort();
        let models: Vec<Value> = names
            .into_iter()
            .map(|name| {
                let e = &entries[name];
                let status = e.status.borrow().clone();
                let target = e.target.load();
                let last = e.last_touch_ms.load(Ordering::Relaxed);
                json!({
                    "name": name,
                    "namespace": target.0.namespace,
                    "object": target.0.name,
                    "kind": target.0.kind.as_str(),
                    "phase": status.phase.as_str(),
                    "message": status.message,
                    "endpoints": e.endpoints.load(Ordering::Relaxed),
                    "queueDepth": e.queued.load(Ordering::Relaxed),
                    "inFlight": e.in_flight.load(Ordering::Relaxed),
                    "gpuGroup": target.0.gpu_group,
                    "activating": e.activating.load(Ordering::Relaxed),
                    "lastTouch": (last > 0).then(|| humantime::format_rfc3339_millis(
                        UNIX_EPOCH + Duration::from_millis(last)).to_string()),
                })
            })
            .collect();
        json!({ "models": models, "groups": [] })
    }
}
