//! Publishing: each model's status on its watch channel, the report, and
//! the acknowledgements of activations.

use std::net::SocketAddr;
use std::time::SystemTime;

use tokio::time::Instant;

use super::model::Run;
use super::Supervisor;
use crate::lifecycle::{ModelStatus, Phase};
use crate::local::report::{ActuatorReport, ModelReport};

impl Supervisor {
    fn status_of(
        &self,
        model: usize,
        instant: Instant,
    ) -> (Phase, Option<SocketAddr>, Option<String>) {
        let m = &self.models[model];
        match &m.run {
            Run::Starting { .. } => (Phase::Loading, None, None),
            Run::Ready { .. } => (Phase::Ready, Some(m.endpoint), None),
            Run::Stopping { reason, .. } => (Phase::Stopping, None, Some(reason.describe(&m.spec))),
            Run::Stopped => match &m.failure {
                Some(failure) => (Phase::Failed, None, Some(failure.clone())),
                None => (Phase::Idle, None, self.idle_message(model, instant)),
            },
        }
    }

    /// What an idle model waits for, or why it stopped.
    fn idle_message(&self, model: usize, instant: Instant) -> Option<String> {
        let m = &self.models[model];
        if !m.pending {
            return m.stopped_because.clone();
        }
        if let Some(g) = m.group.map(|g| &self.groups[g]) {
            match &g.state.leader {
                None => return Some(format!("waiting for shared group {}", g.name)),
                Some(leader) if leader != &m.spec.name => {
                    return Some(format!(
                        "waiting for shared group {}: {leader} holds the GPU",
                        g.name
                    ))
                }
                Some(_) => {}
            }
            let busy = g
                .members
                .iter()
                .find(|&&other| other != model && self.models[other].run.has_process());
            if let Some(&other) = busy {
                return Some(format!(
                    "waiting for {} to stop",
                    self.models[other].spec.name
                ));
            }
        }
        if let Some((pid, _)) = m.stray {
            return Some(format!(
                "stopping a server of this model (pid {pid}) that an earlier gateway left running"
            ));
        }
        if m.retry_at.is_some_and(|t| t > instant) {
            let delay = self.config.retry_delay(m.consecutive_failures);
            let last = m.last_failure.as_deref().unwrap_or("unknown");
            return Some(format!(
                "restarting after a backoff of {delay:?}; last failure: {last}"
            ));
        }
        m.stopped_because.clone()
    }

    /// Publishes the report and changed statuses, then answers
    /// acknowledgements. The report goes first, so that whoever sees a
    /// status finds a report at least as recent.
    pub(super) fn publish(&mut self, now: SystemTime, instant: Instant) {
        let statuses: Vec<ModelStatus> = (0..self.models.len())
            .map(|model| {
                let (phase, endpoint, message) = self.status_of(model, instant);
                let current = self.shared.cells[model].status.borrow();
                let since = if current.phase == phase {
                    current.since
                } else {
                    now
                };
                ModelStatus {
                    phase,
                    endpoint,
                    message,
                    since,
                }
            })
            .collect();
        let report = self.report(&statuses);
        self.shared.report.send_replace(report);
        for (cell, status) in self.shared.cells.iter().zip(statuses) {
            cell.status.send_if_modified(|current| {
                let changed = *current != status;
                if changed {
                    *current = status;
                }
                changed
            });
        }
        for ack in self.acks.drain(..) {
            let _ = ack.send(());
        }
    }

    fn report(&self, statuses: &[ModelStatus]) -> ActuatorReport {
        let models = self
            .models
            .iter()
            .zip(statuses)
            .enumerate()
            .map(|(idx, (m, status))| {
                let cell = &self.shared.cells[idx];
                let status = status.clone();
                let group = m.group.map(|g| &self.groups[g]);
                ModelReport {
                    name: m.spec.name.clone(),
                    phase: status.phase,
                    endpoint: status.endpoint,
                    message: status.message,
                    since: status.since,
                    pid: m.run.pid(),
                    last_active: cell.last_active(),
                    queue_depth: m.demand.map_or(0, |d| d.depth),
                    group: group.map(|g| g.name.clone()),
                    group_leader: group.and_then(|g| g.state.leader.clone()),
                    starts: m.starts,
                    failures: m.failures,
                    consecutive_failures: m.consecutive_failures,
                }
            })
            .collect();
        let groups = self
            .groups
            .iter()
            .map(|g| {
                let names = g
                    .members
                    .iter()
                    .map(|&idx| self.models[idx].spec.name.clone())
                    .collect();
                g.report(names)
            })
            .collect();
        ActuatorReport { models, groups }
    }
}
