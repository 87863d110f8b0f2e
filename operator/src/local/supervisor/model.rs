//! What the supervisor keeps per model: its process state and the facts
//! the policies read.

use std::fmt;
use std::net::SocketAddr;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::policy::shared_gpu::Demand;

use crate::local::process::ChildProcess;
use crate::local::spec::LocalModelSpec;

/// Why a child is being stopped.
pub(super) enum StopReason {
    Idle,
    Preempted { group: String, by: Option<String> },
    StartupTimeout,
    Shutdown,
}

impl StopReason {
    /// The status message while stopping and after.
    pub(super) fn describe(&self, spec: &LocalModelSpec) -> String {
        match self {
            StopReason::Idle => format!(
                "stopped after {:?} without requests",
                spec.serverless.idle_timeout
            ),
            StopReason::Preempted {
                group,
                by: Some(by),
            } => {
                format!("preempted by {by} in shared group {group}")
            }
            StopReason::Preempted { group, by: None } => {
                format!("stopped: shared group {group} has no leader")
            }
            StopReason::StartupTimeout => {
                format!("not healthy within {:?}", spec.startup_timeout)
            }
            StopReason::Shutdown => "stopped: the local actuator shut down".into(),
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Idle => "idle",
            StopReason::Preempted { .. } => "preempted",
            StopReason::StartupTimeout => "startup timeout",
            StopReason::Shutdown => "shutdown",
        })
    }
}

/// Aborts a task when dropped.
pub(super) struct AbortOnDrop(pub(super) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The process side of a model. Every variant but `Stopped` owns a child;
/// `run` tells its reports apart from those of earlier children.
pub(super) enum Run {
    Stopped,
    Starting {
        child: ChildProcess,
        run: u64,
        deadline: Instant,
        _health: AbortOnDrop,
    },
    Ready {
        child: ChildProcess,
        run: u64,
    },
    Stopping {
        child: ChildProcess,
        run: u64,
        reason: StopReason,
    },
}

impl Run {
    pub(super) fn has_process(&self) -> bool {
        !matches!(self, Run::Stopped)
    }

    pub(super) fn run_id(&self) -> Option<u64> {
        match self {
            Run::Stopped => None,
            Run::Starting { run, .. } | Run::Ready { run, .. } | Run::Stopping { run, .. } => {
                Some(*run)
            }
        }
    }

    pub(super) fn pid(&self) -> Option<u32> {
        match self {
            Run::Stopped => None,
            Run::Starting { child, .. }
            | Run::Ready { child, .. }
            | Run::Stopping { child, .. } => Some(child.pid()),
        }
    }
}

/// Everything the supervisor knows about one model.
pub(super) struct Model {
    pub(super) spec: LocalModelSpec,
    pub(super) endpoint: SocketAddr,
    pub(super) group: Option<usize>,
    pub(super) run: Run,
    /// An activation is waiting to be satisfied (cleared on Ready or failure).
    pub(super) pending: bool,
    /// Requests waiting, as reported (or implied by an activation in a group).
    pub(super) demand: Option<Demand>,
    /// Requests the gateway last reported queued (0: none, or never reported).
    pub(super) queued: u32,
    /// Set while `Failed`.
    pub(super) failure: Option<String>,
    /// The failure an activation cleared, for the message while retrying.
    pub(super) last_failure: Option<String>,
    pub(super) consecutive_failures: u32,
    /// No start before this (backoff after a failure).
    pub(super) retry_at: Option<Instant>,
    /// Why the last child stopped, for the `Idle` message.
    pub(super) stopped_because: Option<String>,
    pub(super) starts: u64,
    pub(super) failures: u64,
    /// A server of this model left by an earlier gateway, being stopped:
    /// its pid and when that began.
    pub(super) stray: Option<(u32, Instant)>,
}
