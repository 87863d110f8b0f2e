//! [`LocalActuator`]: the handle the gateway embeds. Cheap to clone, usable
//! from any thread or Tokio runtime; it never blocks.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{mpsc, oneshot, watch};

use crate::policy::shared_gpu::SharedGroupPolicy;

use super::report::ActuatorReport;
use super::shared::{Command, Shared};
use super::spec::{validate, ActuatorConfig, LocalModelSpec, StartError};
use super::supervisor;
use crate::lifecycle::{ModelStatus, Phase};

/// Why a call on the actuator did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActuatorError {
    /// No spec has this name.
    #[error("no local model named {0:?}")]
    UnknownModel(String),
    /// The actuator was shut down (or its runtime went away).
    #[error("the local actuator has shut down")]
    ShutDown,
    /// The model failed while this activation waited.
    #[error("model {model:?} failed: {message}")]
    Failed {
        /// The model.
        model: String,
        /// Its status message (exit status and stderr tail, or start error).
        message: String,
    },
}

/// Runs local model servers as child processes: starts them on demand,
/// stops them when idle, and lets only one member of a shared-GPU group run
/// at a time, following the operator's policies.
///
/// One supervisor task owns every child; this handle sends it requests over
/// a channel and reads its published state, so every method is non-blocking
/// and may be called from any thread or runtime.
#[derive(Clone)]
pub struct LocalActuator {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

impl fmt::Debug for LocalActuator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalActuator")
            .field("models", &self.shared.cells.len())
            .field("running", &*self.shared.running.borrow())
            .finish()
    }
}

impl LocalActuator {
    /// Validates `specs` and starts the supervisor on the current Tokio
    /// runtime, with the default tick, health interval and retry backoff.
    /// Models that must always run (`min_replicas` ≥ 1 or serverless
    /// disabled) start right away; the others wait for [`Self::activate`].
    pub fn start(
        specs: Vec<LocalModelSpec>,
        group_policy: SharedGroupPolicy,
    ) -> Result<Self, StartError> {
        Self::start_with_config(
            specs,
            ActuatorConfig {
                group_policy,
                ..ActuatorConfig::default()
            },
        )
    }

    /// [`Self::start`] with every setting given.
    pub fn start_with_config(
        specs: Vec<LocalModelSpec>,
        config: ActuatorConfig,
    ) -> Result<Self, StartError> {
        validate(&specs)?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        let (shared, commands) = supervisor::spawn(specs, config, &runtime);
        Ok(Self { shared, commands })
    }

    /// The model's status channel: the current status, and a notification on
    /// every change (no polling). `None` for an unknown model.
    pub fn status(&self, model: &str) -> Option<watch::Receiver<ModelStatus>> {
        let idx = *self.shared.index.get(model)?;
        Some(self.shared.cells[idx].status.subscribe())
    }

    /// Signals demand for `model` and counts as activity. Starts it if it
    /// is idle (exactly one process however many callers), retries it if it
    /// failed (after a backoff of 1 s, 2 s, 4 s… since its last failure), and
    /// in a shared group records demand for the leader choice, which decides
    /// when it runs. Returns at once; watch [`Self::status`], or use
    /// [`Self::ready`] to wait without missing a transition.
    pub fn activate(&self, model: &str) -> Result<(), ActuatorError> {
        let idx = self.index(model)?;
        self.send_activate(idx, None)
    }

    /// Activates `model` and waits until it is `Ready` (its endpoint) or
    /// fails (the `Failed` message). A `Failed` status from before this call
    /// does not count: the activation retries it first. Never times out on
    /// its own (a shared-group member may wait for the GPU indefinitely);
    /// wrap it in `tokio::time::timeout`.
    pub async fn ready(&self, model: &str) -> Result<SocketAddr, ActuatorError> {
        let idx = self.index(model)?;
        let (ack, acked) = oneshot::channel();
        self.send_activate(idx, Some(ack))?;
        // The supervisor answers after publishing the activation's effect.
        acked.await.map_err(|_| ActuatorError::ShutDown)?;
        let mut status = self.shared.cells[idx].status.subscribe();
        let mut running = self.shared.running.subscribe();
        tokio::select! {
            settled = status.wait_for(|s| matches!(s.phase, Phase::Ready | Phase::Failed)) => {
                let settled = settled.map_err(|_| ActuatorError::ShutDown)?;
                match (settled.phase, settled.endpoint) {
                    (Phase::Ready, Some(endpoint)) => Ok(endpoint),
                    _ => Err(ActuatorError::Failed {
                        model: model.to_owned(),
                        message: settled.message.clone().unwrap_or_default(),
                    }),
                }
            }
            _ = running.wait_for(|running| !*running) => Err(ActuatorError::ShutDown),
        }
    }

    /// Reports how many requests are queued for `model` (0 once drained).
    /// Queued requests (while the latest arrived within the group policy's
    /// demand window) count as demand: they keep a model from idling and
    /// start a stopped one, like [`Self::activate`] but without retrying a
    /// `Failed` model. In a shared group they are what the leader choice
    /// weighs, and the group is re-evaluated at once. A rising depth counts
    /// as a new request at this time.
    pub fn demand(&self, model: &str, queued: u32) -> Result<(), ActuatorError> {
        let idx = self.index(model)?;
        self.commands
            .send(Command::Demand {
                model: idx,
                queued,
                at: SystemTime::now(),
            })
            .map_err(|_| ActuatorError::ShutDown)
    }

    /// Records activity on `model` now: the idle timeout counts from the
    /// latest touch or activation. Call it when a proxied request starts and
    /// when it ends (and now and then during long streams). It never starts a
    /// stopped model. Lock-free; no message to the supervisor.
    pub fn touch(&self, model: &str) -> Result<(), ActuatorError> {
        let idx = self.index(model)?;
        self.shared.cells[idx].touch(SystemTime::now());
        Ok(())
    }

    /// A request for `model` starts being served: the model counts as
    /// active until the matching [`Self::end_request`], however long the
    /// request takes (a long generation is never cut by the idle timeout).
    pub fn begin_request(&self, model: &str) -> Result<(), ActuatorError> {
        let idx = self.index(model)?;
        self.shared.cells[idx].begin_request(SystemTime::now());
        Ok(())
    }

    /// The request begun with [`Self::begin_request`] ended; the idle
    /// timeout counts from now.
    pub fn end_request(&self, model: &str) -> Result<(), ActuatorError> {
        let idx = self.index(model)?;
        self.shared.cells[idx].end_request(SystemTime::now());
        Ok(())
    }

    /// Every model and shared group as of the supervisor's latest step
    /// (activity times as of now).
    pub fn snapshot(&self) -> ActuatorReport {
        let mut report = self.shared.report.borrow().clone();
        for model in &mut report.models {
            if let Some(&idx) = self.shared.index.get(&model.name) {
                model.last_active = self.shared.cells[idx].last_active();
            }
        }
        report
    }

    /// Stops every child (SIGTERM to its process group, SIGKILL after its
    /// stop grace), waits for them to exit, and ends the supervisor. Later
    /// calls return at once; activations fail with
    /// [`ActuatorError::ShutDown`].
    pub async fn shutdown(&self) {
        let (done, finished) = oneshot::channel();
        if self.commands.send(Command::Shutdown { done }).is_ok() {
            let _ = finished.await;
        }
    }

    fn index(&self, model: &str) -> Result<usize, ActuatorError> {
        self.shared
            .index
            .get(model)
            .copied()
            .ok_or_else(|| ActuatorError::UnknownModel(model.to_owned()))
    }

    fn send_activate(
        &self,
        idx: usize,
        ack: Option<oneshot::Sender<()>>,
    ) -> Result<(), ActuatorError> {
        let at = SystemTime::now();
        self.shared.cells[idx].touch(at);
        self.commands
            .send(Command::Activate {
                model: idx,
                at,
                ack,
            })
            .map_err(|_| ActuatorError::ShutDown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}

    #[test]
    fn handle_is_send_sync_and_clone() {
        assert_send_sync::<LocalActuator>();
    }

    #[test]
    fn start_needs_a_runtime_and_valid_specs() {
        let spec = LocalModelSpec::new("a", "true", 1);
        let err = LocalActuator::start(vec![spec.clone()], SharedGroupPolicy::default());
        assert_eq!(err.unwrap_err(), StartError::NoRuntime);
        let err = LocalActuator::start(vec![spec.clone(), spec], SharedGroupPolicy::default());
        assert_eq!(err.unwrap_err(), StartError::DuplicateName("a".into()));
    }

    #[tokio::test]
    async fn unknown_models_and_shutdown() {
        let spec = LocalModelSpec::new("a", "true", 1);
        let actuator = LocalActuator::start(vec![spec], SharedGroupPolicy::default()).unwrap();
        assert!(actuator.status("b").is_none());
        assert_eq!(
            actuator.activate("b"),
            Err(ActuatorError::UnknownModel("b".into()))
        );
        assert_eq!(actuator.snapshot().models.len(), 1);
        actuator.shutdown().await;
        actuator.shutdown().await;
        assert_eq!(actuator.activate("a"), Err(ActuatorError::ShutDown));
        assert_eq!(actuator.ready("a").await, Err(ActuatorError::ShutDown));
    }
}
