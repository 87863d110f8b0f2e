//! A model's lifecycle as the request path sees it, whoever runs the model:
//! the local actuator (child processes) or the Kubernetes path (pods of a
//! Deployment, as the gateway reads them from the cluster). The gateway's
//! cold-start queue waits on a [`ModelStatus`] channel from either.

use std::fmt;
use std::net::SocketAddr;
use std::time::SystemTime;

/// Lifecycle phase of a model.
///
/// Waiters keep waiting through `Idle`, `Loading` and `Stopping`; `Ready`
/// means the endpoint serves, and `Failed` means nothing more happens until
/// the next activation (models that must always run are retried on their own
/// after the backoff).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Nothing runs: never started, scaled to zero for idleness, preempted
    /// in its shared group, or waiting for a retry or for the group's GPU.
    Idle,
    /// The server runs (a process, or scheduled pods) and does not pass its
    /// health check yet.
    Loading,
    /// The server passes its health check and serves.
    Ready,
    /// The server was asked to stop and has not yet.
    Stopping,
    /// The server could not start, crashed, or was not healthy in time.
    Failed,
}

impl Phase {
    /// The name used in status reports (`"Idle"`, `"Loading"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Idle => "Idle",
            Phase::Loading => "Loading",
            Phase::Ready => "Ready",
            Phase::Stopping => "Stopping",
            Phase::Failed => "Failed",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a waiter learns from a model's watch channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelStatus {
    /// Current phase.
    pub phase: Phase,
    /// Where it serves while `Ready` (local: `127.0.0.1:<port>`), otherwise
    /// `None`.
    pub endpoint: Option<SocketAddr>,
    /// Why the model is in this phase: for `Failed`, the exit status and the
    /// last stderr lines (or the start error); for `Idle`, what it waits for.
    pub message: Option<String>,
    /// When the phase last changed.
    pub since: SystemTime,
}

impl ModelStatus {
    /// The status of a model that never ran.
    pub fn idle(since: SystemTime) -> Self {
        Self {
            phase: Phase::Idle,
            endpoint: None,
            message: None,
            since,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_names() {
        let all = [
            Phase::Idle,
            Phase::Loading,
            Phase::Ready,
            Phase::Stopping,
            Phase::Failed,
        ];
        let names: Vec<_> = all.iter().map(|p| p.to_string()).collect();
        assert_eq!(names, ["Idle", "Loading", "Ready", "Stopping", "Failed"]);
    }
}
