//! A simulated kubelet (opt-in) that runs Pods as local processes.
//!
//! For every Pod matching its label selector it asks a caller-supplied
//! [`PodRunner`] for a command, runs it as a child process and gives the
//! Pod its own loopback address (`127.0.x.y`; Linux routes all of
//! 127.0.0.0/8 to `lo`, so every Pod can listen on the same container port,
//! as on a cluster). The Pod goes `Running` with that `podIP` and turns
//! `Ready` only when its first container's `readinessProbe` (`httpGet` or
//! `tcpSocket`, named ports resolved) answers, probed every 100 ms; a Pod
//! without a probe is ready once its process runs. A process that exits is
//! restarted after 500 ms (`restartCount` counts), as with
//! `restartPolicy: Always`. When the Pod is deleted (or marked for
//! deletion) the process is killed.
//!
//! With the simulated Deployment controller on, Pods it creates that match
//! the kubelet's selector start `Pending` without an address, and their
//! status is left to the kubelet.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use crate::fields::Scope;
use crate::meta;
use crate::registry::ResourceType;
use crate::selector::LabelSelector;
use crate::store::Store;

const MANAGER: &str = "kubelet";
const PROBE_PERIOD: Duration = Duration::from_millis(100);
const RESTART_DELAY: Duration = Duration::from_millis(500);

/// The process the kubelet runs for one Pod.
#[derive(Clone, Debug, Default)]
pub struct PodProcess {
    /// Executable.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment (added to the kubelet's own unless `clear_env`).
    pub env: Vec<(String, String)>,
    /// Start from an empty environment.
    pub clear_env: bool,
    /// File that receives stdout and stderr (appended); discarded if unset.
    pub log: Option<PathBuf>,
}

/// Maps a Pod (as stored) and the address it was given to the process
/// that runs it; `None` leaves the Pod alone (it stays `Pending`).
pub type PodRunner = Arc<dyn Fn(&Value, Ipv4Addr) -> Option<PodProcess> + Send + Sync>;

/// A Pod the kubelet runs, as reported by
/// [`TestApiServer::kubelet_pods`](crate::TestApiServer::kubelet_pods).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The Pod's address.
    pub ip: Ipv4Addr,
    /// Process id of the current process, `None` between restarts.
    pub pid: Option<u32>,
}

/// Pods being run, by UID.
pub(crate) type Running = Arc<Mutex<HashMap<String, KubeletPod>>>;

/// Next loopback address: `127.0.x.y` with x and y in 1..=254, starting at
/// an offset derived from the process id so that concurrent test processes
/// rarely share addresses.
pub(crate) fn next_ip() -> Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const SPAN: u32 = 254 * 254;
    let start = std::process::id().wrapping_mul(977) % SPAN;
    let i = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
    Ipv4Addr::new(127, 0, (i / 254 + 1) as u8, (i % 254 + 1) as u8)
}

/// Runs the kubelet until `shutdown` flips; child processes are killed
/// when it stops.
pub(crate) async fn run(
    store: Arc<Store>,
    selector: LabelSelector,
    runner: PodRunner,
    running: Running,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let Some(pod_rt) = store.registry.lookup("", "v1", "pods").cloned() else {
        return;
    };
    let mut changes = store.subscribe();
    let mut tasks = PodTasks {
        tasks: HashMap::new(),
        running: running.clone(),
    };
    loop {
        let pods = store.with_state(|_, st| st.objects_of(&pod_rt.group_resource()));
        let mut live = Vec::new();
        for (_, pod) in &pods {
            let Some(uid) = meta::meta_str(pod, "uid").map(str::to_string) else {
                continue;
            };
            let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
            if meta::is_deleting(pod) || !selector.matches(labels) {
                continue;
            }
            live.push(uid.clone());
            if tasks.tasks.contains_key(&uid) {
                continue;
            }
            let ip = next_ip();
            let Some(process) = runner(pod, ip) else {
                // Not ours to run; remember it so the runner is asked once.
                tasks.tasks.insert(uid, tokio::spawn(async {}));
                continue;
            };
            let pod_task = PodTask {
                store: store.clone(),
                pod_rt: pod_rt.clone(),
                namespace: meta::meta_str(pod, "namespace")
                    .unwrap_or_default()
                    .to_string(),
                name: meta::meta_str(pod, "name").unwrap_or_default().to_string(),
                uid: uid.clone(),
                ip,
                probe: readiness_probe(pod),
                running: running.clone(),
            };
            lock(&running).insert(
                uid.clone(),
                KubeletPod {
                    namespace: pod_task.namespace.clone(),
                    name: pod_task.name.clone(),
                    uid: uid.clone(),
                    ip,
                    pid: None,
                },
            );
            tasks.tasks.insert(uid, tokio::spawn(pod_task.run(process)));
        }
        tasks.tasks.retain(|uid, task| {
            let keep = live.contains(uid);
            if !keep {
                task.abort();
                lock(&running).remove(uid);
            }
            keep
        });
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            _ = shutdown.changed() => break,
        }
    }
}

/// The per-Pod tasks; dropping them (the kubelet stopped or was aborted)
/// aborts them, which kills their processes.
struct PodTasks {
    tasks: HashMap<String, JoinHandle<()>>,
    running: Running,
}

impl Drop for PodTasks {
    fn drop(&mut self) {
        for (_, task) in self.tasks.drain() {
            task.abort();
        }
        lock(&self.running).clear();
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the readiness probe checks.
#[derive(Clone, Debug)]
pub(crate) enum ReadinessProbe {
    Http { port: u16, path: String },
    Tcp { port: u16 },
    None,
}

/// The first container's readiness probe, named ports resolved.
pub(crate) fn readiness_probe(pod: &Value) -> ReadinessProbe {
    let Some(container) = pod.pointer("/spec/containers/0") else {
        return ReadinessProbe::None;
    };
    let port_of = |p: &Value| -> Option<u16> {
        match p {
            Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
            Value::String(name) => container["ports"]
                .as_array()?
                .iter()
                .find(|cp| cp["name"] == name.as_str())?["containerPort"]
                .as_u64()
                .and_then(|n| u16::try_from(n).ok()),
            _ => None,
        }
    };
    let probe = &container["readinessProbe"];
    if let Some(get) = probe.get("httpGet") {
        if let Some(port) = port_of(&get["port"]) {
            let path = get["path"].as_str().unwrap_or("/").to_string();
            return ReadinessProbe::Http { port, path };
        }
    }
    if let Some(port) = probe.get("tcpSocket").and_then(|t| port_of(&t["port"])) {
        return ReadinessProbe::Tcp { port };
    }
    ReadinessProbe::None
}

struct PodTask {
    store: Arc<Store>,
    pod_rt: ResourceType,
    namespace: String,
    name: String,
    uid: String,
    ip: Ipv4Addr,
    probe: ReadinessProbe,
    running: Running,
}

/// What a Pod's supervision reports: readiness, restarts, and `Failed`
/// when its process could not start.
pub(crate) struct PodState {
    pub(crate) ready: bool,
    pub(crate) restarts: u32,
    pub(crate) failed: bool,
}

/// Runs a Pod's process as `restartPolicy: Always` would: started again
/// 500 ms after each exit, readiness probed every 100 ms (3 failures to
/// turn unready). `report` hears each change of state; `on_pid` the
/// process id of each start (`None` at each exit).
pub(crate) async fn supervise<F, Fut>(
    process: PodProcess,
    ip: Ipv4Addr,
    probe_of: ReadinessProbe,
    name: &str,
    mut on_pid: impl FnMut(Option<u32>),
    mut report: F,
) where
    F: FnMut(PodState) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut restarts = 0u32;
    let state = |ready, restarts, failed| PodState {
        ready,
        restarts,
        failed,
    };
    loop {
        let mut child = match spawn(&process) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, pod = %name, "simulated kubelet could not start a process");
                report(state(false, restarts, true)).await;
                return;
            }
        };
        on_pid(child.id());
        report(state(false, restarts, false)).await;
        let mut ready = false;
        let mut failures = 0;
        let exited = loop {
            tokio::select! {
                status = child.wait() => break status,
                _ = tokio::time::sleep(PROBE_PERIOD) => {}
            }
            let ok = probe(ip, &probe_of).await;
            failures = if ok { 0 } else { failures + 1 };
            if ok != ready && (ok || failures >= 3) {
                ready = ok;
                report(state(ready, restarts, false)).await;
            }
        };
        tracing::debug!(pod = %name, status = ?exited, "simulated pod process exited");
        on_pid(None);
        restarts += 1;
        report(state(false, restarts, false)).await;
        tokio::time::sleep(RESTART_DELAY).await;
    }
}

impl PodTask {
    async fn run(self, process: PodProcess) {
        let on_pid = |pid| {
            if let Some(p) = lock(&self.running).get_mut(&self.uid) {
                p.pid = pid;
            }
        };
        let report = |s: PodState| {
            self.write_status(s.ready, s.restarts, s.failed.then_some("Failed"));
            std::future::ready(())
        };
        supervise(
            process,
            self.ip,
            self.probe.clone(),
            &self.name,
            on_pid,
            report,
        )
        .await;
    }

    /// Writes phase, address and readiness, unless the Pod is gone or
    /// replaced.
    fn write_status(&self, ready: bool, restarts: u32, phase: Option<&str>) {
        let key = (self.namespace.clone(), self.name.clone());
        self.store.with_state(|store, st| {
            let Some(current) = st.get(&self.pod_rt.group_resource(), &key).cloned() else {
                return;
            };
            if meta::meta_str(&current, "uid") != Some(self.uid.as_str())
                || meta::is_deleting(&current)
            {
                return;
            }
            let ready_text = if ready { "True" } else { "False" };
            let container = current
                .pointer("/spec/containers/0/name")
                .cloned()
                .unwrap_or(json!("main"));
            let mut new = current.clone();
            let start = current
                .pointer("/status/startTime")
                .cloned()
                .unwrap_or_else(|| json!(meta::now()));
            new["status"] = json!({
                "phase": phase.unwrap_or("Running"),
                "podIP": self.ip.to_string(),
                "podIPs": [{"ip": self.ip.to_string()}],
                "hostIP": "127.0.0.1",
                "startTime": start,
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "ContainersReady", "status": ready_text},
                    {"type": "Ready", "status": ready_text},
                ],
                "containerStatuses": [{
                    "name": container,
                    "ready": ready,
                    "started": phase.is_none(),
                    "restartCount": restarts,
                    "state": if phase.is_none() { json!({"running": {}}) } else { json!({"terminated": {"exitCode": 1}}) },
                }],
            });
            if new != current {
                if let Err(e) = store.update_internal(
                    st,
                    &self.pod_rt,
                    current,
                    new,
                    Scope::Status,
                    MANAGER,
                ) {
                    tracing::warn!(error = %e, pod = %self.name, "simulated kubelet could not write pod status");
                }
            }
        });
    }
}

/// Whether `probe` succeeds against `ip` now (as kubelet: 2xx and 3xx
/// answers count, within a second).
pub(crate) async fn probe(ip: Ipv4Addr, probe: &ReadinessProbe) -> bool {
    let connect = |port: u16| {
        tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect((ip, port)),
        )
    };
    match probe {
        ReadinessProbe::None => true,
        ReadinessProbe::Tcp { port } => matches!(connect(*port).await, Ok(Ok(_))),
        ReadinessProbe::Http { port, path } => {
            let Ok(Ok(mut stream)) = connect(*port).await else {
                return false;
            };
            let request = format!(
                    "GET {path} HTTP/1.1\r\nHost: {}:{port}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n",
                    ip
                );
            if stream.write_all(request.as_bytes()).await.is_err() {
                return false;
            }
            let mut head = [0u8; 12];
            let read = tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut head));
            let Ok(Ok(_)) = read.await else {
                return false;
            };
            // "HTTP/1.1 200": 2xx and 3xx count as success, as for kubelet.
            matches!(head[9], b'2' | b'3')
        }
    }
}

pub(crate) fn spawn(process: &PodProcess) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&process.program);
    cmd.args(&process.args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if process.clear_env {
        cmd.env_clear();
    }
    cmd.envs(process.env.iter().map(|(k, v)| (k, v)));
    match &process.log {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            cmd.stdout(file.try_clone()?).stderr(file);
        }
        None => {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
    }
    cmd.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_loopback_addresses() {
        let a = next_ip();
        let b = next_ip();
        assert_ne!(a, b);
        for ip in [a, b] {
            assert!(ip.is_loopback());
            assert_ne!(ip.octets()[2], 0);
            assert!(!matches!(ip.octets()[3], 0 | 255));
        }
    }

    #[test]
    fn named_probe_ports_resolve() {
        let pod = json!({"spec": {"containers": [{
            "ports": [{"name": "http", "containerPort": 8000}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
        }]}});
        assert!(matches!(
            readiness_probe(&pod),
            ReadinessProbe::Http { port: 8000, ref path } if path == "/health"
        ));
    }
}
