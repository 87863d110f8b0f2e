//! A simulated kubelet for the real API server: it registers a Node and
//! runs the Pods bound to it as local processes, as `sim::kubelet` does
//! for the in-memory server, but entirely through the API.
//!
//! - Its Node is registered Ready and without the `not-ready` taint the
//!   API server's admission puts on a new Node (see
//!   `lift_not_ready_taint`), so that a scheduler may place Pods on it.
//! - Pods matching its label selector that name no node are bound to its
//!   Node (`pods/binding`), as the default scheduler would, unless a
//!   scheduler is to place them (`bind_unscheduled: false`).
//! - A Pod on its Node gets an address of its own in the kubelet's
//!   [`PodNetwork`] (the real API server refuses loopback addresses in
//!   EndpointSlices) and a process from the [`PodRunner`], run inside that
//!   network; its status (phase, `podIP`, conditions,
//!   container state) is written through `pods/status`, `Ready` once the
//!   first container's readiness probe answers. A process that exits is
//!   restarted after 500 ms (`restartCount`).
//! - A Pod marked for deletion has its process killed, then is deleted
//!   with grace period 0, which is how a kubelet confirms termination.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::sim::kubelet::{
    lock, next_ip, readiness_probe, supervise, KubeletPod, PodState, ReadinessProbe, Running,
};
use crate::sim::{PodProcess, PodRunner};

use super::netns::PodNetwork;

/// What the kubelet serves.
#[derive(Clone)]
pub struct KubeletConfig {
    /// Node name; the Node is created (labels, GPU capacity) if missing.
    pub node: String,
    /// Labels of the Node.
    pub node_labels: Value,
    /// `status.capacity` (and allocatable) of the Node.
    pub capacity: Value,
    /// Label selector of the Pods it runs (`key=value`).
    pub selector: String,
    /// Namespace of the Pods it runs; `None`: every namespace.
    pub namespace: Option<String>,
    /// Bind Pods that name no node to this Node.
    pub bind_unscheduled: bool,
    /// Maps a Pod to its process.
    pub runner: PodRunner,
    /// Where Pods get their addresses; `None`: loopback addresses, which
    /// EndpointSlices refuse.
    pub network: Option<Arc<PodNetwork>>,
}

/// A running kubelet; dropping it stops it and kills its processes.
pub struct RealKubelet {
    task: JoinHandle<()>,
    running: Running,
}

impl Drop for RealKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RealKubelet {
    /// Registers the Node and starts serving its Pods.
    pub async fn start(client: kube::Client, config: KubeletConfig) -> kube::Result<Self> {
        register_node(&client, &config).await?;
        let running = Running::default();
        let task = tokio::spawn(run(client, config, running.clone()));
        Ok(Self { task, running })
    }

    /// The Pods it runs now, with their addresses and process ids.
    pub fn pods(&self) -> Vec<KubeletPod> {
        let mut pods: Vec<KubeletPod> = lock(&self.running).values().cloned().collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        pods
    }
}

async fn register_node(client: &kube::Client, config: &KubeletConfig) -> kube::Result<()> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": config.node, "labels": config.node_labels},
    });
    let pp = PatchParams::apply("simulated-kubelet").force();
    nodes.patch(&config.node, &pp, &Patch::Apply(&node)).await?;
    let now = now();
    let status = json!({"status": {
        "capacity": config.capacity,
        "allocatable": config.capacity,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                      {"type": "Hostname", "address": config.node}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "simulated kubelet", "lastHeartbeatTime": now,
                        "lastTransitionTime": now}],
    }});
    nodes
        .patch_status(
            &config.node,
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await?;
    lift_not_ready_taint(&nodes, &config.node).await
}

/// The taint the API server's `TaintNodesByCondition` admission puts on
/// every new Node.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// Removes [`NOT_READY_TAINT`] from the Node, as kube-controller-manager's
/// node lifecycle controller does once the kubelet reports it Ready (that
/// controller does not run here: it would mark Nodes without heartbeats
/// unreachable). A scheduler refuses a Node that keeps it.
async fn lift_not_ready_taint(
    nodes: &Api<k8s_openapi::api::core::v1::Node>,
    name: &str,
) -> kube::Result<()> {
    let node = nodes.get(name).await?;
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    let kept: Vec<_> = taints
        .iter()
        .filter(|t| t.key != NOT_READY_TAINT)
        .cloned()
        .collect();
    if kept.len() == taints.len() {
        return Ok(());
    }
    let patch = json!({"spec": {"taints": kept}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn now() -> String {
    crate::meta::now()
}

async fn run(client: kube::Client, config: KubeletConfig, running: Running) {
    let pods: Api<Pod> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let watch = watcher::watcher(pods, watcher::Config::default().labels(&config.selector));
    let mut tasks = PodTasks {
        tasks: HashMap::new(),
        running,
    };
    let mut stream = std::pin::pin!(watch);
    while let Some(event) = stream.next().await {
        let pods: Vec<Pod> = match event {
            Ok(Event::Apply(p) | Event::InitApply(p)) => vec![p],
            Ok(Event::Delete(p)) => {
                if let Some(uid) = p.metadata.uid.as_ref() {
                    tasks.stop(uid);
                }
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "simulated kubelet watch");
                continue;
            }
        };
        for pod in pods {
            handle(&client, &config, &mut tasks, pod).await;
        }
    }
}

async fn handle(client: &kube::Client, config: &KubeletConfig, tasks: &mut PodTasks, pod: Pod) {
    let (Some(uid), Some(name), Some(ns)) = (
        pod.metadata.uid.clone(),
        pod.metadata.name.clone(),
        pod.metadata.namespace.clone(),
    ) else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    if pod.metadata.deletion_timestamp.is_some() {
        tasks.stop(&uid);
        // The process is gone: confirm, as a kubelet does.
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let _ = api.delete(&name, &dp).await;
        return;
    }
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    match node {
        None if config.bind_unscheduled => {
            let binding = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": config.node}});
            let body = serde_json::to_vec(&binding).unwrap_or_default();
            let req =
                axum::http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/binding"))
                    .header("content-type", "application/json")
                    .body(body);
            if let Ok(req) = req {
                let _ = client.request_text(req).await;
            }
        }
        Some(n) if n == config.node && !tasks.tasks.contains_key(&uid) => {
            let value = serde_json::to_value(&pod).unwrap_or_default();
            let ip = match &config.network {
                None => next_ip(),
                Some(net) => match net.next_ip() {
                    Ok(ip) => ip,
                    Err(e) => {
                        tracing::warn!(error = %e, pod = %name, "simulated kubelet: no pod address");
                        return;
                    }
                },
            };
            let Some(process) = (config.runner)(&value, ip) else {
                tasks.tasks.insert(uid, tokio::spawn(async {}));
                return;
            };
            let process = match &config.network {
                Some(net) => net.wrap(process),
                None => process,
            };
            lock(&tasks.running).insert(
                uid.clone(),
                KubeletPod {
                    namespace: ns,
                    name: name.clone(),
                    uid: uid.clone(),
                    ip,
                    pid: None,
                },
            );
            let task = PodTask {
                api,
                name,
                uid: uid.clone(),
                running: tasks.running.clone(),
                ip,
                container: value
                    .pointer("/spec/containers/0/name")
                    .and_then(Value::as_str)
                    .unwrap_or("main")
                    .to_owned(),
                probe: readiness_probe(&value),
                started: now(),
            };
            tasks.tasks.insert(uid, tokio::spawn(task.run(process)));
        }
        _ => {}
    }
}

/// The per-Pod tasks and what they run: dropping them (the kubelet
/// stopped) aborts them, which kills their processes.
struct PodTasks {
    tasks: HashMap<String, JoinHandle<()>>,
    running: Running,
}

impl PodTasks {
    /// Stops the Pod `uid`'s task, killing its process.
    fn stop(&mut self, uid: &str) {
        if let Some(task) = self.tasks.remove(uid) {
            task.abort();
        }
        lock(&self.running).remove(uid);
    }
}

impl Drop for PodTasks {
    fn drop(&mut self) {
        for (_, task) in self.tasks.drain() {
            task.abort();
        }
        lock(&self.running).clear();
    }
}

struct PodTask {
    api: Api<Pod>,
    name: String,
    uid: String,
    running: Running,
    ip: Ipv4Addr,
    container: String,
    probe: ReadinessProbe,
    started: String,
}

impl PodTask {
    async fn run(self, process: PodProcess) {
        let report =
            |s: PodState| self.write_status(s.ready, s.restarts, s.failed.then_some("Failed"));
        let on_pid = |pid| {
            if let Some(p) = lock(&self.running).get_mut(&self.uid) {
                p.pid = pid;
            }
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

    /// Writes phase, address and readiness through `pods/status`, for this
    /// Pod only (a uid precondition).
    async fn write_status(&self, ready: bool, restarts: u32, phase: Option<&str>) {
        let ready_text = if ready { "True" } else { "False" };
        let now = now();
        let condition = |kind: &str, status: &str| json!({"type": kind, "status": status, "lastTransitionTime": now});
        let status = json!({
            "metadata": {"uid": self.uid},
            "status": {
                "phase": phase.unwrap_or("Running"),
                "podIP": self.ip.to_string(),
                "podIPs": [{"ip": self.ip.to_string()}],
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "startTime": self.started,
                "conditions": [
                    condition("PodScheduled", "True"),
                    condition("Initialized", "True"),
                    condition("ContainersReady", ready_text),
                    condition("Ready", ready_text),
                ],
                "containerStatuses": [{
                    "name": self.container,
                    "image": "flexinfer-sim",
                    "imageID": "",
                    "ready": ready,
                    "started": phase.is_none(),
                    "restartCount": restarts,
                    "state": if phase.is_none() {
                        json!({"running": {"startedAt": self.started}})
                    } else {
                        json!({"terminated": {"exitCode": 1}})
                    },
                }],
            },
        });
        if let Err(e) = self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            tracing::debug!(error = %e, pod = %self.name, "simulated kubelet status write");
        }
    }
}
