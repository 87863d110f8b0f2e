//! The supervisor: one task that owns every local model's process and makes
//! every decision about it, so that starts, stops and swaps never race.
//!
//! Callers (on any runtime or thread) talk to it through an unbounded
//! channel of [`Command`]s; children report health and exits through an
//! internal channel. After each message, and at least once per tick, the
//! supervisor re-applies the policies to the whole state (idempotently) and
//! publishes every model's status on its watch channel.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::policy::replicas::desired_replicas;
use crate::policy::shared_gpu::{Demand, SharedMember};
use crate::policy::since;

use super::group::SharedGroup;
use super::health;
use super::process::{self, ChildProcess, ExitReport};
use super::report::ActuatorReport;
use super::shared::{Command, ModelCell, Shared};
use super::spec::{ActuatorConfig, LocalModelSpec};
use super::stray;
use crate::lifecycle::ModelStatus;

mod model;
mod publish;

use model::{AbortOnDrop, Model, Run, StopReason};

/// Longest wait the supervisor schedules (keeps `Instant` arithmetic finite).
/// How soon a start is tried again while a stray server of the model stops.
const STRAY_RECHECK: Duration = Duration::from_millis(200);
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// A report from a child's supervising tasks.
enum Event {
    Healthy {
        model: usize,
        run: u64,
    },
    Exited {
        model: usize,
        run: u64,
        report: ExitReport,
    },
}

/// What one step decides for one model.
enum Action {
    Nothing,
    Start,
    Stop(StopReason),
}

/// The supervisor task's state.
pub(crate) struct Supervisor {
    shared: Arc<Shared>,
    config: ActuatorConfig,
    models: Vec<Model>,
    groups: Vec<SharedGroup>,
    events: mpsc::UnboundedSender<Event>,
    next_run: u64,
    acks: Vec<oneshot::Sender<()>>,
    shutting_down: bool,
}

/// Builds the supervisor for validated `specs` and spawns it on `runtime`.
/// Returns what the handle needs: the shared state and the command sender.
pub(crate) fn spawn(
    specs: Vec<LocalModelSpec>,
    config: ActuatorConfig,
    runtime: &tokio::runtime::Handle,
) -> (Arc<Shared>, mpsc::UnboundedSender<Command>) {
    let boot = SystemTime::now();
    let mut groups: Vec<SharedGroup> = Vec::new();
    let mut models = Vec::with_capacity(specs.len());
    let mut cells = Vec::with_capacity(specs.len());
    let mut index = HashMap::with_capacity(specs.len());
    for (idx, spec) in specs.into_iter().enumerate() {
        let group = spec.shared_group.as_ref().map(|name| {
            let g = match groups.iter().position(|g| &g.name == name) {
                Some(g) => g,
                None => {
                    groups.push(SharedGroup::new(name.clone()));
                    groups.len() - 1
                }
            };
            groups[g].members.push(idx);
            g
        });
        // A member that must always run asks for its group's GPU at boot.
        let boot_demand = group.is_some() && spec.always_on();
        index.insert(spec.name.clone(), idx);
        cells.push(ModelCell::new(ModelStatus::idle(boot)));
        models.push(Model {
            endpoint: SocketAddr::from((Ipv4Addr::LOCALHOST, spec.port)),
            spec,
            group,
            run: Run::Stopped,
            pending: boot_demand,
            demand: boot_demand.then_some(Demand { depth: 1, at: boot }),
            queued: 0,
            failure: None,
            last_failure: None,
            consecutive_failures: 0,
            retry_at: None,
            stopped_because: None,
            starts: 0,
            failures: 0,
            stray: None,
        });
    }
    let shared = Arc::new(Shared {
        index,
        cells,
        report: watch::Sender::new(ActuatorReport::default()),
        running: watch::Sender::new(true),
    });
    let (events, events_rx) = mpsc::unbounded_channel();
    let (commands, commands_rx) = mpsc::unbounded_channel();
    let mut supervisor = Supervisor {
        shared: shared.clone(),
        config,
        models,
        groups,
        events,
        next_run: 0,
        acks: Vec::new(),
        shutting_down: false,
    };
    // Handles see every model in the report from the start.
    supervisor.publish(boot, Instant::now());
    runtime.spawn(supervisor.run(commands_rx, events_rx));
    (shared, commands)
}

impl Supervisor {
    /// The supervisor loop: apply the policies, publish, wait for the next
    /// message, tick or deadline. Ends after a shutdown (requested, or all
    /// handles dropped) once every child has exited.
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut events: mpsc::UnboundedReceiver<Event>,
    ) {
        let mut done = Vec::new();
        let mut commands_open = true;
        loop {
            let now = SystemTime::now();
            let instant = Instant::now();
            self.reconcile(now, instant);
            self.publish(now, instant);
            if self.shutting_down && self.models.iter().all(|m| !m.run.has_process()) {
                break;
            }
            let tick = after(instant, self.config.tick);
            let wake = self.next_deadline(instant).map_or(tick, |d| d.min(tick));
            tokio::select! {
                command = commands.recv(), if commands_open => match command {
                    Some(Command::Shutdown { done: finished }) => {
                        done.push(finished);
                        self.shutting_down = true;
                    }
                    Some(command) => self.handle(command),
                    None => {
                        commands_open = false;
                        self.shutting_down = true;
                    }
                },
                Some(event) = events.recv() => self.on_event(event, Instant::now()),
                () = tokio::time::sleep_until(wake) => {}
            }
        }
        tracing::info!("local actuator stopped");
        // Refuse further requests before telling anyone we are done.
        drop(commands);
        self.shared.running.send_replace(false);
        for finished in done {
            let _ = finished.send(());
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Activate { model, at, ack } => {
                if !self.shutting_down {
                    self.activate(model, at);
                }
                if let Some(ack) = ack {
                    self.acks.push(ack);
                }
            }
            Command::Demand { model, queued, at } => {
                let Some(m) = self.models.get_mut(model) else {
                    return;
                };
                m.queued = queued;
                m.demand = match (queued, m.demand) {
                    (0, _) => None,
                    (queued, Some(d)) if queued <= d.depth => Some(Demand { depth: queued, ..d }),
                    (depth, _) => Some(Demand { depth, at }),
                };
            }
            Command::Shutdown { .. } => {}
        }
    }

    /// Records an activation: a failed model gets another try (after its
    /// backoff), and in a shared group the request counts as demand.
    fn activate(&mut self, model: usize, at: SystemTime) {
        let Some(m) = self.models.get_mut(model) else {
            return;
        };
        if let Some(failure) = m.failure.take() {
            m.last_failure = Some(failure);
        }
        if !matches!(m.run, Run::Ready { .. }) {
            m.pending = true;
        }
        if m.group.is_some() {
            m.demand = Some(match m.demand {
                Some(d) => Demand {
                    depth: d.depth.max(1),
                    at: d.at.max(at),
                },
                None => Demand { depth: 1, at },
            });
        }
    }

    fn on_event(&mut self, event: Event, instant: Instant) {
        match event {
            Event::Healthy { model, run } => {
                let Some(m) = self.models.get_mut(model) else {
                    return;
                };
                m.run = match std::mem::replace(&mut m.run, Run::Stopped) {
                    Run::Starting { child, run: r, .. } if r == run => {
                        tracing::info!(model = %m.spec.name, pid = child.pid(), endpoint = %m.endpoint, "model server ready");
                        m.pending = false;
                        m.consecutive_failures = 0;
                        m.retry_at = None;
                        m.last_failure = None;
                        Run::Ready { child, run }
                    }
                    other => other,
                };
            }
            Event::Exited { model, run, report } => {
                let Some(m) = self.models.get_mut(model) else {
                    return;
                };
                if m.run.run_id() != Some(run) {
                    return;
                }
                let failure = match std::mem::replace(&mut m.run, Run::Stopped) {
                    Run::Starting { .. } => {
                        Some(format!("exited while loading: {}", report.describe()))
                    }
                    Run::Ready { .. } => Some(format!("exited: {}", report.describe())),
                    Run::Stopping {
                        reason: reason @ StopReason::StartupTimeout,
                        ..
                    } => Some(format!(
                        "{}; stopped it ({})",
                        reason.describe(&m.spec),
                        report.describe()
                    )),
                    Run::Stopping { reason, .. } => {
                        tracing::info!(model = %m.spec.name, %reason, "model server stopped");
                        m.stopped_because = Some(reason.describe(&m.spec));
                        None
                    }
                    Run::Stopped => None,
                };
                if let Some(failure) = failure {
                    self.fail(model, failure, instant);
                }
            }
        }
    }

    /// Applies the policies to every model: always-on retries, group leaders,
    /// then starts and stops.
    fn reconcile(&mut self, now: SystemTime, instant: Instant) {
        if self.shutting_down {
            for model in 0..self.models.len() {
                self.models[model].pending = false;
                if matches!(
                    self.models[model].run,
                    Run::Starting { .. } | Run::Ready { .. }
                ) {
                    self.stop(model, StopReason::Shutdown);
                }
            }
            return;
        }
        for m in &mut self.models {
            if m.failure.is_some() && m.spec.always_on() && m.retry_at.is_none_or(|t| t <= instant)
            {
                m.last_failure = m.failure.take();
                m.pending = true;
            }
        }
        for group in 0..self.groups.len() {
            self.decide_group(group, now);
        }
        for model in 0..self.models.len() {
            match self.action(model, now, instant) {
                Action::Nothing => {}
                Action::Start => self.start(model, instant),
                Action::Stop(reason) => self.stop(model, reason),
            }
        }
    }

    fn decide_group(&mut self, group: usize, now: SystemTime) {
        let members: Vec<SharedMember> = self.groups[group]
            .members
            .iter()
            .map(|&idx| {
                let m = &self.models[idx];
                SharedMember {
                    name: m.spec.name.clone(),
                    priority: m.spec.priority,
                    failed: m.failure.is_some(),
                    last_active: self.shared.cells[idx].last_active(),
                    demand: self.demand_now(idx, now),
                }
            })
            .collect();
        let g = &mut self.groups[group];
        if let Some(swap) = g.decide(&members, &self.config.group_policy, now) {
            tracing::info!(
                group = %g.name,
                from = swap.from.as_deref().unwrap_or("-"),
                to = %swap.to,
                reason = swap.reason_str(),
                "shared group leader changed"
            );
        }
    }

    /// Whether the policies want `model` running now (its group aside).
    ///
    /// A running model stays while it was active within its idle timeout;
    /// a stopped one starts only for an activation, queued requests, or
    /// `min_replicas` (activity alone, e.g. a late `touch`, never starts it).
    fn wants_to_run(&self, model: usize, now: SystemTime) -> bool {
        let m = &self.models[model];
        if m.failure.is_some() {
            return false;
        }
        let queued = self.demand_now(model, now).is_some_and(|d| {
            d.depth > 0 && since(now, d.at) <= self.config.group_policy.demand_window
        });
        let pending = m.pending || queued || matches!(m.run, Run::Starting { .. });
        let cell = &self.shared.cells[model];
        let last_active = if !m.run.has_process() {
            None
        } else if cell.in_flight() > 0 {
            // Serving a request is activity now, however long it runs.
            Some(now)
        } else {
            cell.last_active()
        };
        desired_replicas(&m.spec.serverless, last_active, pending, now) >= 1
    }

    /// The model's demand as the policies weigh it at `now`. Requests the
    /// gateway reports still queued are demand now, however long ago they
    /// arrived: they leave the queue when served or refused, so they never go
    /// stale, and a member whose requests wait longer than the demand window
    /// (for the cooldown to pass, say) must not lose its claim to the GPU.
    /// Other demand (implied by an activation) counts from its time.
    fn demand_now(&self, model: usize, now: SystemTime) -> Option<Demand> {
        let m = &self.models[model];
        m.demand.map(|d| {
            if m.queued > 0 {
                Demand { at: now, ..d }
            } else {
                d
            }
        })
    }

    fn action(&self, model: usize, now: SystemTime, instant: Instant) -> Action {
        let m = &self.models[model];
        let group = m.group.map(|g| &self.groups[g]);
        let may_run = group.is_none_or(|g| g.is_leader(&m.spec.name));
        match &m.run {
            Run::Stopping { .. } => Action::Nothing,
            Run::Starting { deadline, .. } if instant >= *deadline => {
                Action::Stop(StopReason::StartupTimeout)
            }
            Run::Starting { .. } | Run::Ready { .. } if !may_run => {
                let (group, by) = group
                    .map(|g| (g.name.clone(), g.state.leader.clone()))
                    .unwrap_or_default();
                Action::Stop(StopReason::Preempted { group, by })
            }
            Run::Ready { .. } if !self.wants_to_run(model, now) => Action::Stop(StopReason::Idle),
            Run::Stopped
                if may_run
                    && m.retry_at.is_none_or(|t| t <= instant)
                    && self.group_is_free(model)
                    && self.wants_to_run(model, now) =>
            {
                Action::Start
            }
            _ => Action::Nothing,
        }
    }

    /// Whether no other member of `model`'s group has a process.
    fn group_is_free(&self, model: usize) -> bool {
        let Some(g) = self.models[model].group else {
            return true;
        };
        self.groups[g]
            .members
            .iter()
            .all(|&other| other == model || !self.models[other].run.has_process())
    }

    fn start(&mut self, model: usize, instant: Instant) {
        let spec = &self.models[model].spec;
        // Something else answering on the port would look healthy.
        if let Err(e) = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, spec.port)) {
            if let Some(pid) = stray::own_listener(spec.port, &spec.name) {
                return self.reclaim(model, pid, instant);
            }
            let message = format!(
                "cannot start: port {} on 127.0.0.1 is not free ({e}); another server is using it",
                spec.port
            );
            return self.fail(model, message, instant);
        }
        self.next_run += 1;
        let run = self.next_run;
        let events = self.events.clone();
        let spawned = ChildProcess::spawn(spec, move |report| {
            let _ = events.send(Event::Exited { model, run, report });
        });
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let message = format!("cannot start `{}`: {e}", spec.command);
                return self.fail(model, message, instant);
            }
        };
        tracing::info!(model = %spec.name, pid = child.pid(), port = spec.port, "model server started");
        let health = tokio::spawn(wait_healthy(
            self.models[model].endpoint,
            spec.health_path.clone(),
            self.config.health_interval,
            self.events.clone(),
            model,
            run,
        ));
        let m = &mut self.models[model];
        m.starts += 1;
        m.stopped_because = None;
        m.stray = None;
        m.run = Run::Starting {
            child,
            run,
            deadline: after(instant, m.spec.startup_timeout),
            _health: AbortOnDrop(health),
        };
    }

    fn stop(&mut self, model: usize, reason: StopReason) {
        let m = &mut self.models[model];
        let grace = m.spec.stop_grace;
        m.run = match std::mem::replace(&mut m.run, Run::Stopped) {
            Run::Starting { mut child, run, .. } | Run::Ready { mut child, run } => {
                tracing::info!(model = %m.spec.name, pid = child.pid(), %reason, "stopping model server");
                child.stop(grace);
                Run::Stopping { child, run, reason }
            }
            other => other,
        };
    }

    /// A server of this model that an earlier gateway left running holds
    /// its port: stop it (SIGTERM, SIGKILL after the stop grace) and try
    /// the start again shortly, without counting a failure.
    fn reclaim(&mut self, model: usize, pid: u32, instant: Instant) {
        let m = &mut self.models[model];
        let since = match m.stray {
            Some((known, since)) if known == pid => since,
            _ => {
                tracing::warn!(
                    model = %m.spec.name, pid, port = m.spec.port,
                    "stopping a server of this model that an earlier gateway left running"
                );
                process::signal_group(pid, libc::SIGTERM);
                instant
            }
        };
        if instant.duration_since(since) >= m.spec.stop_grace {
            process::signal_group(pid, libc::SIGKILL);
        }
        m.stray = Some((pid, since));
        m.retry_at = Some(after(instant, STRAY_RECHECK));
    }

    fn fail(&mut self, model: usize, message: String, instant: Instant) {
        let m = &mut self.models[model];
        m.failures += 1;
        m.consecutive_failures = m.consecutive_failures.saturating_add(1);
        m.retry_at = Some(after(
            instant,
            self.config.retry_delay(m.consecutive_failures),
        ));
        m.pending = false;
        m.last_failure = None;
        tracing::warn!(model = %m.spec.name, "model failed: {message}");
        m.failure = Some(message);
    }

    /// The earliest startup deadline or retry time still ahead.
    fn next_deadline(&self, instant: Instant) -> Option<Instant> {
        self.models
            .iter()
            .filter_map(|m| match &m.run {
                Run::Starting { deadline, .. } => Some(*deadline),
                Run::Stopped => m.retry_at.filter(|&t| t > instant),
                _ => None,
            })
            .min()
    }
}

/// Probes the child's health path until it answers 2xx, then reports once.
async fn wait_healthy(
    endpoint: SocketAddr,
    path: String,
    interval: Duration,
    events: mpsc::UnboundedSender<Event>,
    model: usize,
    run: u64,
) {
    loop {
        if health::probe(endpoint, &path).await {
            let _ = events.send(Event::Healthy { model, run });
            return;
        }
        tokio::time::sleep(interval).await;
    }
}

/// `instant + wait`, with the wait capped at [`MAX_WAIT`].
fn after(instant: Instant, wait: Duration) -> Instant {
    instant.checked_add(wait.min(MAX_WAIT)).unwrap_or(instant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_capped() {
        let now = Instant::now();
        assert_eq!(after(now, Duration::MAX), now + MAX_WAIT);
        assert_eq!(
            after(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }
}
