//! The local actuator against real child processes: the simulated model
//! server `flexinfer-sim` (build it first with
//! `cargo build -p flexinfer-conformance --bin flexinfer-sim`) and `sh`.
//!
//! The actuator runs on its own runtime thread, as in the gateway, and the
//! tests call it from theirs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flexinfer_conformance::sim::process::SimProcess;
use flexinfer_operator::local::{
    ActuatorConfig, ActuatorError, LocalActuator, LocalModelSpec, ModelStatus, Phase,
};
use flexinfer_operator::policy::replicas::ServerlessPolicy;
use flexinfer_operator::policy::shared_gpu::{LeaderReason, SharedGroupPolicy};
use tokio::sync::watch;

/// Slack for a loaded two-core machine.
const SLACK: Duration = Duration::from_secs(5);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(&addr(port), Duration::from_millis(200)).is_ok()
}

/// Status code of `GET <path>` on the port, by hand (no client dependency).
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr(port), Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// A `flexinfer-sim` model on `port` that loads for `startup_delay`.
fn sim(name: &str, port: u16, startup_delay: &str) -> LocalModelSpec {
    let binary = SimProcess::binary().expect("flexinfer-sim binary");
    let args = [
        "--port",
        &port.to_string(),
        "--model",
        name,
        "--startup-delay",
        startup_delay,
        "--pod-name",
        name,
        "--shutdown-grace",
        "1s",
    ];
    LocalModelSpec {
        args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![("RUST_LOG".into(), "warn".into())],
        startup_timeout: Duration::from_secs(20),
        stop_grace: Duration::from_secs(3),
        ..LocalModelSpec::new(name, binary.to_string_lossy(), port)
    }
}

/// A model run by `sh -c script`.
fn shell(name: &str, script: &str) -> LocalModelSpec {
    LocalModelSpec {
        args: vec!["-c".into(), script.into()],
        startup_timeout: Duration::from_secs(10),
        stop_grace: Duration::from_secs(1),
        ..LocalModelSpec::new(name, "sh", free_port())
    }
}

fn fast_config() -> ActuatorConfig {
    ActuatorConfig {
        tick: Duration::from_millis(100),
        health_interval: Duration::from_millis(50),
        ..ActuatorConfig::default()
    }
}

/// The actuator on a dedicated runtime thread, like the gateway runs it.
struct Harness {
    actuator: LocalActuator,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Harness {
    fn start(specs: Vec<LocalModelSpec>, config: ActuatorConfig) -> Self {
        let (started, actuator) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let _ = started.send(LocalActuator::start_with_config(specs, config));
                let _ = stopped.await;
            });
        });
        let actuator = actuator
            .recv()
            .expect("actuator thread")
            .expect("valid specs");
        Self {
            actuator,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl std::ops::Deref for Harness {
    type Target = LocalActuator;
    fn deref(&self) -> &LocalActuator {
        &self.actuator
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn wait_phase(
    status: &mut watch::Receiver<ModelStatus>,
    phase: Phase,
    within: Duration,
) -> ModelStatus {
    let settled = tokio::time::timeout(within, status.wait_for(|s| s.phase == phase))
        .await
        .map(|r| r.map(|s| s.clone()));
    match settled {
        Ok(Ok(s)) => s,
        _ => panic!(
            "no {phase} within {within:?}; status: {:?}",
            *status.borrow()
        ),
    }
}

/// Samples two ports until stopped; returns (both open at once, a seen open, b seen open).
struct PortSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(usize, bool, bool)>,
}

impl PortSampler {
    fn start(a: u16, b: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut both, mut seen_a, mut seen_b) = (0, false, false);
            while !flag.load(Ordering::Relaxed) {
                let open_a = port_open(a);
                let open_b = port_open(b);
                both += usize::from(open_a && open_b);
                seen_a |= open_a;
                seen_b |= open_b;
                std::thread::sleep(Duration::from_millis(5));
            }
            (both, seen_a, seen_b)
        });
        Self { stop, thread }
    }

    fn finish(self) -> (usize, bool, bool) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_activations_start_exactly_one_process() {
    let port = free_port();
    let actuator = Harness::start(vec![sim("m", port, "1s")], fast_config());
    let mut status = actuator.status("m").expect("known model");
    assert_eq!(status.borrow().phase, Phase::Idle);

    let begun = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let actuator = actuator.actuator.clone();
        tasks.push(tokio::spawn(async move { actuator.activate("m") }));
    }
    let mut waiters = Vec::new();
    for _ in 0..8 {
        let actuator = actuator.actuator.clone();
        waiters.push(tokio::spawn(async move { actuator.ready("m").await }));
    }
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let actuator = actuator.actuator.clone();
            std::thread::spawn(move || (0..16).try_for_each(|_| actuator.activate("m")))
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for thread in threads {
        thread.join().unwrap().unwrap();
    }

    let ready = wait_phase(&mut status, Phase::Ready, Duration::from_secs(1) + SLACK).await;
    let took = begun.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "ready after {took:?}, before the startup delay"
    );
    assert_eq!(ready.endpoint, Some(addr(port)));
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), Ok(addr(port)));
    }
    actuator.activate("m").unwrap();
    assert_eq!(actuator.ready("m").await, Ok(addr(port)));

    let report = actuator.snapshot();
    let m = report.model("m").unwrap();
    assert_eq!((m.phase, m.starts, m.failures), (Phase::Ready, 1, 0));
    assert!(m.pid.is_some() && m.last_active.is_some());
    assert_eq!(http_status(port, "/health"), Some(200));

    actuator.shutdown().await;
    assert!(!port_open(port));
    assert_eq!(actuator.snapshot().model("m").unwrap().starts, 1);
}

#[tokio::test]
async fn idle_timeout_stops_the_process() {
    let port = free_port();
    let mut spec = sim("m", port, "0s");
    spec.serverless.idle_timeout = Duration::from_secs(1);
    let actuator = Harness::start(vec![spec], fast_config());
    let mut status = actuator.status("m").unwrap();
    actuator.ready("m").await.unwrap();

    // Requests keep it alive past the idle timeout.
    let mut last_touch = Instant::now();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(status.borrow().phase, Phase::Ready);
        actuator.touch("m").unwrap();
        last_touch = Instant::now();
    }
    let idle = wait_phase(&mut status, Phase::Idle, Duration::from_secs(1) + SLACK).await;
    let quiet = last_touch.elapsed();
    assert!(
        quiet >= Duration::from_millis(900),
        "stopped after only {quiet:?}"
    );
    assert!(idle.message.unwrap().contains("without requests"));
    assert!(!port_open(port));
    assert_eq!(actuator.snapshot().model("m").unwrap().pid, None);

    // The next activation starts it again.
    assert_eq!(actuator.ready("m").await, Ok(addr(port)));
    assert_eq!(actuator.snapshot().model("m").unwrap().starts, 2);
    actuator.shutdown().await;
}

#[tokio::test]
async fn killed_process_fails_and_the_next_activation_restarts_it() {
    let port = free_port();
    let actuator = Harness::start(vec![sim("m", port, "0s")], fast_config());
    let mut status = actuator.status("m").unwrap();
    actuator.ready("m").await.unwrap();
    let pid = actuator.snapshot().model("m").unwrap().pid.unwrap();

    // SAFETY: kill(2) with plain integers; `pid` is our child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    let failed = wait_phase(&mut status, Phase::Failed, SLACK).await;
    let failed_at = Instant::now();
    let message = failed.message.unwrap();
    assert!(
        message.contains("exited") && message.contains("SIGKILL"),
        "{message}"
    );
    let report = actuator.snapshot();
    let m = report.model("m").unwrap();
    assert_eq!((m.failures, m.consecutive_failures, m.pid), (1, 1, None));

    // Nothing restarts it on its own.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(status.borrow().phase, Phase::Failed);
    assert!(!port_open(port));

    assert_eq!(actuator.ready("m").await, Ok(addr(port)));
    assert!(
        failed_at.elapsed() >= Duration::from_secs(1),
        "retried before the backoff"
    );
    let report = actuator.snapshot();
    let m = report.model("m").unwrap();
    assert_eq!((m.starts, m.consecutive_failures), (2, 0));
    assert_eq!(http_status(port, "/health"), Some(200));
    actuator.shutdown().await;
}

#[tokio::test]
async fn crash_reports_exit_status_and_retry_waits_for_the_backoff() {
    let spec = shell(
        "m",
        "echo loading >&2; echo 'CUDA out of memory' >&2; exit 3",
    );
    let actuator = Harness::start(vec![spec], fast_config());
    let mut status = actuator.status("m").unwrap();
    let Err(ActuatorError::Failed { message, .. }) = actuator.ready("m").await else {
        panic!("a crashing server must fail");
    };
    assert_eq!(
        message,
        "exited while loading: exit status: 3; last stderr lines:\nloading\nCUDA out of memory"
    );
    let first = status.borrow_and_update().clone();
    assert_eq!(first.phase, Phase::Failed);

    // The next activation waits one second after the failure, then retries.
    actuator.activate("m").unwrap();
    let waiting = wait_phase(&mut status, Phase::Idle, SLACK).await;
    let message = waiting.message.unwrap();
    assert!(
        message.contains("backoff of 1s") && message.contains("exit status: 3"),
        "{message}"
    );
    let second = wait_phase(&mut status, Phase::Failed, SLACK).await;
    let gap = second.since.duration_since(first.since).unwrap();
    assert!(
        gap >= Duration::from_secs(1),
        "retried {gap:?} after the failure"
    );
    let m = actuator.snapshot().models.remove(0);
    assert_eq!((m.starts, m.failures, m.consecutive_failures), (2, 2, 2));
    actuator.shutdown().await;
}

#[tokio::test]
async fn startup_timeout_fails_and_stops_the_process() {
    let port = free_port();
    let mut spec = sim("m", port, "60s");
    spec.startup_timeout = Duration::from_millis(500);
    let actuator = Harness::start(vec![spec], fast_config());
    let begun = Instant::now();
    let Err(ActuatorError::Failed { message, .. }) = actuator.ready("m").await else {
        panic!("a server that never gets healthy must fail");
    };
    assert!(message.contains("not healthy within 500ms"), "{message}");
    assert!(begun.elapsed() >= Duration::from_millis(500));
    assert!(begun.elapsed() < SLACK);
    assert!(!port_open(port));
    actuator.shutdown().await;
}

#[tokio::test]
async fn missing_command_fails_with_a_clear_message() {
    let mut spec = shell("m", "");
    spec.command = "/nonexistent/flexinfer-model-server".into();
    let actuator = Harness::start(vec![spec], fast_config());
    let Err(ActuatorError::Failed { model, message }) = actuator.ready("m").await else {
        panic!("a missing program must fail");
    };
    assert_eq!(model, "m");
    assert!(
        message.contains("cannot start `/nonexistent/flexinfer-model-server`")
            && message.contains("No such file"),
        "{message}"
    );
    let m = actuator.snapshot().models.remove(0);
    assert_eq!((m.phase, m.starts, m.failures), (Phase::Failed, 0, 1));
    actuator.shutdown().await;
}

#[tokio::test]
async fn activity_alone_never_starts_a_model_but_queued_requests_do() {
    let spec = shell("m", "exec sleep 30");
    let actuator = Harness::start(vec![spec], fast_config());
    let mut status = actuator.status("m").unwrap();
    actuator.touch("m").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = actuator.snapshot().models.remove(0);
    assert_eq!((m.phase, m.starts), (Phase::Idle, 0));
    assert!(m.last_active.is_some());

    actuator.demand("m", 2).unwrap();
    wait_phase(&mut status, Phase::Loading, SLACK).await;
    let m = actuator.snapshot().models.remove(0);
    assert_eq!((m.starts, m.queue_depth), (1, 2));
    actuator.shutdown().await;
    assert_eq!(status.borrow().phase, Phase::Idle);
}

#[tokio::test]
async fn busy_port_fails_instead_of_probing_a_stranger() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let actuator = Harness::start(vec![sim("m", port, "0s")], fast_config());
    let Err(ActuatorError::Failed { message, .. }) = actuator.ready("m").await else {
        panic!("a taken port must fail");
    };
    assert!(message.contains(&format!("port {port}")), "{message}");
    actuator.shutdown().await;
}

#[tokio::test]
async fn shared_group_swap_stops_the_old_leader_before_starting_the_new() {
    let (port_a, port_b) = (free_port(), free_port());
    let member = |name, port, priority| LocalModelSpec {
        shared_group: Some("gpu0".into()),
        priority,
        ..sim(name, port, "300ms")
    };
    let config = ActuatorConfig {
        group_policy: SharedGroupPolicy {
            swap_cooldown: Duration::ZERO,
            ..SharedGroupPolicy::default()
        },
        ..fast_config()
    };
    let actuator = Harness::start(vec![member("a", port_a, 0), member("b", port_b, 1)], config);
    let sampler = PortSampler::start(port_a, port_b);
    assert_eq!(actuator.ready("a").await, Ok(addr(port_a)));
    let mut a = actuator.status("a").unwrap();

    // Higher priority takes the GPU: a stops before b starts.
    assert_eq!(actuator.ready("b").await, Ok(addr(port_b)));
    let (both, seen_a, seen_b) = sampler.finish();
    assert_eq!(both, 0, "both members listened at once");
    assert!(seen_a && seen_b);
    let a_status = a.borrow_and_update().clone();
    assert_eq!(a_status.phase, Phase::Idle);
    assert_eq!(
        a_status.message.as_deref(),
        Some("preempted by b in shared group gpu0")
    );
    assert!(!port_open(port_a));

    // The lower-priority member now waits for the GPU.
    actuator.activate("a").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = a.borrow().clone();
    assert_eq!(waiting.phase, Phase::Idle);
    assert_eq!(
        waiting.message.as_deref(),
        Some("waiting for shared group gpu0: b holds the GPU")
    );

    let report = actuator.snapshot();
    let group = report.group("gpu0").unwrap();
    assert_eq!(group.leader.as_deref(), Some("b"));
    let swaps: Vec<_> = group
        .swaps
        .iter()
        .map(|s| (s.from.as_deref(), s.to.as_str(), s.reason))
        .collect();
    assert_eq!(
        swaps,
        [
            (None, "a", LeaderReason::FirstDemand),
            (Some("a"), "b", LeaderReason::DemandPreemption)
        ]
    );
    let a = report.model("a").unwrap();
    assert_eq!((a.group_leader.as_deref(), a.queue_depth), (Some("b"), 1));
    assert_eq!(report.model("b").unwrap().phase, Phase::Ready);
    actuator.shutdown().await;
    assert!(!port_open(port_a) && !port_open(port_b));
}

#[tokio::test]
async fn alternating_demand_swaps_no_faster_than_the_cooldown() {
    let (port_a, port_b) = (free_port(), free_port());
    let member = |name, port| LocalModelSpec {
        shared_group: Some("gpu0".into()),
        stop_grace: Duration::from_secs(1),
        ..sim(name, port, "0s")
    };
    let cooldown = Duration::from_millis(1500);
    let config = ActuatorConfig {
        group_policy: SharedGroupPolicy {
            demand_window: Duration::from_millis(200),
            swap_cooldown: cooldown,
            queue_threshold: 1,
        },
        tick: Duration::from_millis(50),
        ..fast_config()
    };
    let actuator = Harness::start(vec![member("a", port_a), member("b", port_b)], config);
    let sampler = PortSampler::start(port_a, port_b);
    // Each member asks in turn every 250 ms while the other goes quiet:
    // without the cooldown, every turn would be a swap.
    for turn in 0..14 {
        let (asker, other) = if turn % 2 == 0 {
            ("a", "b")
        } else {
            ("b", "a")
        };
        actuator.activate(asker).unwrap();
        actuator.demand(other, 0).unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (both, _, _) = sampler.finish();
    assert_eq!(both, 0, "both members listened at once");

    let report = actuator.snapshot();
    let swaps = &report.group("gpu0").unwrap().swaps;
    assert!(
        swaps.len() >= 2,
        "cooldown never let a swap through: {swaps:?}"
    );
    for pair in swaps.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at).unwrap();
        assert!(gap >= cooldown, "swaps {gap:?} apart: {swaps:?}");
    }
    let starts: u64 = report.models.iter().map(|m| m.starts).sum();
    assert!(
        starts <= swaps.len() as u64,
        "{starts} starts for {} swaps",
        swaps.len()
    );
    actuator.shutdown().await;
}

#[tokio::test]
async fn always_on_models_start_at_boot_and_shutdown_stops_everything() {
    let (port_p, port_q) = (free_port(), free_port());
    let mut pinned = sim("pinned", port_p, "0s");
    pinned.serverless = ServerlessPolicy {
        idle_timeout: Duration::from_millis(200),
        min_replicas: 1,
        ..ServerlessPolicy::default()
    };
    let on_demand = sim("on-demand", port_q, "0s");
    let actuator = Harness::start(vec![pinned, on_demand], fast_config());
    let mut status = actuator.status("pinned").unwrap();
    wait_phase(&mut status, Phase::Ready, SLACK).await;
    actuator.ready("on-demand").await.unwrap();

    // Never stopped for idleness.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(status.borrow().phase, Phase::Ready);
    let pids: Vec<u32> = actuator
        .snapshot()
        .models
        .iter()
        .map(|m| m.pid.unwrap())
        .collect();

    actuator.shutdown().await;
    for port in [port_p, port_q] {
        assert!(!port_open(port));
    }
    for pid in pids {
        // SAFETY: signal 0 only checks existence; the children were reaped.
        assert_ne!(unsafe { libc::kill(pid as libc::pid_t, 0) }, 0);
    }
    let report = actuator.snapshot();
    for m in &report.models {
        assert_eq!(m.phase, Phase::Idle);
        assert_eq!(
            m.message.as_deref(),
            Some("stopped: the local actuator shut down")
        );
    }
    assert_eq!(actuator.activate("pinned"), Err(ActuatorError::ShutDown));
    assert_eq!(
        actuator.ready("on-demand").await,
        Err(ActuatorError::ShutDown)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_an_earlier_gateway_left_running_is_stopped_and_replaced() {
    let port = free_port();
    // What a SIGKILLed gateway leaves behind: a server of the model, with
    // the marker every server the actuator starts carries.
    let binary = SimProcess::binary().expect("flexinfer-sim binary");
    let mut stray = std::process::Command::new(binary)
        .args(["--port", &port.to_string(), "--model", "m"])
        .env(flexinfer_operator::local::stray::MANAGED_MODEL_ENV, "m")
        .env("RUST_LOG", "warn")
        .process_group(0)
        .spawn()
        .expect("start the stray server");
    let deadline = Instant::now() + SLACK;
    while !port_open(port) {
        assert!(Instant::now() < deadline, "the stray server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }

    let actuator = Harness::start(vec![sim("m", port, "0s")], fast_config());
    let mut status = actuator.status("m").expect("known model");
    actuator.activate("m").unwrap();
    let ready = wait_phase(&mut status, Phase::Ready, Duration::from_secs(20)).await;
    assert_eq!(ready.endpoint, Some(addr(port)));
    let exit = stray.try_wait().expect("wait for the stray");
    assert!(exit.is_some(), "the stray server still runs");
    let report = actuator.snapshot();
    let model = report.models.iter().find(|m| m.name == "m").unwrap();
    assert_ne!(
        model.pid,
        Some(stray.id()),
        "the model runs in a new process"
    );
    assert_eq!(model.failures, 0, "reclaiming the port is not a failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_server_on_the_port_is_left_alone_and_reported() {
    let foreign = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = foreign.local_addr().unwrap().port();
    let actuator = Harness::start(vec![sim("m", port, "0s")], fast_config());
    let mut status = actuator.status("m").expect("known model");
    actuator.activate("m").unwrap();
    let failed = wait_phase(&mut status, Phase::Failed, SLACK).await;
    let message = failed.message.unwrap_or_default();
    assert!(message.contains("is not free"), "{message}");
    // Still ours to use: the gateway did not touch it.
    assert!(foreign.local_addr().is_ok() && port_open(port));
}
