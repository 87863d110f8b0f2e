//! The embedded operator: models with a `command` in the model file run as
//! local child processes, started on demand and stopped when idle by the
//! operator's local actuator, which applies the same scale-to-zero and
//! shared-GPU policies as the Kubernetes operator.

use std::sync::Arc;
use std::time::SystemTime;

use flexinfer_operator::lifecycle::{ModelStatus, Phase};
use flexinfer_operator::local::{LocalActuator, LocalModelSpec};
use flexinfer_operator::policy::shared_gpu::SharedGroupPolicy;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::activation::ModelLifecycle;
use crate::config::ModelTable;
use crate::runtime_thread::RuntimeThread;

/// What clients waiting for a local model that failed to start are told:
/// its status message (the engine's last stderr lines, which may hold its
/// environment) goes to the gateway's logs and `/admin/models` only.
pub const START_FAILED: &str =
    "the model server failed to start; ask the gateway's operator (the reason is in its logs)";

/// The local actuator, running on its own runtime thread so that child
/// processes are supervised independently of the proxy's runtimes.
pub struct EmbeddedOperator {
    actuator: LocalActuator,
    thread: RuntimeThread,
}

impl EmbeddedOperator {
    /// Starts the actuator for every model of `table` that has a command;
    /// `None` when there is none.
    pub fn start(table: &ModelTable) -> anyhow::Result<Option<Self>> {
        let specs: Vec<LocalModelSpec> = table
            .models
            .iter()
            .filter_map(|m| m.local.as_ref().map(spec))
            .collect();
        if specs.is_empty() {
            return Ok(None);
        }
        let policy = SharedGroupPolicy {
            demand_window: table.sharing.demand_window,
            swap_cooldown: table.sharing.swap_cooldown,
            ..SharedGroupPolicy::default()
        };
        let (thread, actuator) =
            RuntimeThread::start("flexinfer-operator", 1, move |ready, stop| async move {
                match LocalActuator::start(specs, policy) {
                    Ok(actuator) => {
                        let _ = ready.send(Ok(actuator.clone()));
                        let _ = stop.await;
                        actuator.shutdown().await;
                    }
                    Err(e) => {
                        let _ = ready.send(Err(anyhow::anyhow!("local models: {e}")));
                    }
                }
            })?;
        Ok(Some(Self { actuator, thread }))
    }

    /// The actuator, as the request path's model lifecycle.
    pub fn lifecycle(&self) -> Arc<dyn ModelLifecycle> {
        Arc::new(self.actuator.clone())
    }

    /// Stops every child process and waits for them to exit.
    pub fn shutdown(self) {
        self.thread.stop();
    }
}

/// The model's process spec with its command resolved.
fn spec(local: &LocalModelSpec) -> LocalModelSpec {
    LocalModelSpec {
        command: resolve_command(&local.command),
        ..local.clone()
    }
}

/// A bare program name is looked up on `PATH`, then next to the gateway's own
/// binary, so `command: flexinfer-sim` works from a build directory.
fn resolve_command(command: &str) -> String {
    if command.contains('/') || on_path(command) {
        return command.to_string();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(command)))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| command.to_string())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// RFC 3339 with milliseconds: phase changes and swaps are often well under
/// a second apart.
fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

impl ModelLifecycle for LocalActuator {
    fn status(&self, model: &str) -> Option<watch::Receiver<ModelStatus>> {
        LocalActuator::status(self, model)
    }

    fn activate(&self, model: &str) {
        if let Err(e) = LocalActuator::activate(self, model) {
            tracing::warn!(model, error = %e, "activation not accepted");
        }
    }

    fn demand(&self, model: &str, queued: u32) {
        let _ = LocalActuator::demand(self, model, queued);
    }

    fn touch(&self, model: &str) {
        let _ = LocalActuator::touch(self, model);
    }

    fn request_started(&self, model: &str) {
        let _ = LocalActuator::begin_request(self, model);
    }

    fn request_finished(&self, model: &str) {
        let _ = LocalActuator::end_request(self, model);
    }

    fn phase(&self, model: &str) -> Option<String> {
        let status = LocalActuator::status(self, model)?;
        let phase: Phase = status.borrow().phase;
        Some(phase.as_str().to_string())
    }

    fn failure_for_clients(&self, _model: &str, _message: &str) -> String {
        START_FAILED.to_owned()
    }

    fn report(&self) -> Value {
        let report = self.snapshot();
        let models: Vec<Value> = report
            .models
            .iter()
            .map(|m| {
                json!({
                    "name": m.name,
                    "phase": m.phase.as_str(),
                    "endpoint": m.endpoint.map(|e| e.to_string()),
                    "message": m.message,
                    "since": rfc3339(m.since),
                    "pid": m.pid,
                    "lastActiveTime": m.last_active.map(rfc3339),
                    "queueDepth": m.queue_depth,
                    "group": m.group,
                    "groupLeader": m.group_leader,
                    "starts": m.starts,
                    "failures": m.failures,
                })
            })
            .collect();
        let groups: Vec<Value> = report
            .groups
            .iter()
            .map(|g| {
                json!({
                    "name": g.name,
                    "members": g.members,
                    "active": g.leader,
                    "lastSwap": g.last_swap.map(rfc3339),
                    "swaps": g.swaps.iter().map(|s| json!({
                        "at": rfc3339(s.at),
                        "from": s.from,
                        "to": s.to,
                        "reason": s.reason_str(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({ "models": models, "groups": groups })
    }
}
