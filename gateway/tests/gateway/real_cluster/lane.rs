//! The chart scenarios' [`Cluster`] on the real control plane: the chart
//! installed by the real `helm` into a namespace of its own, its gateway
//! a process on its own ServiceAccount's token, and a simulated kubelet
//! (an API client of the real server) running that namespace's model pods
//! on a GPU Node of its own. kube-controller-manager makes the ReplicaSets,
//! Pods and EndpointSlices and collects the garbage.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flexinfer_testkube::real::{ControlPlane, KubeletConfig, KubeletPod, PodNetwork, RealKubelet};
use serde_json::{json, Value};

use super::{plane, Release};
use crate::chart_scenarios::cluster::Cluster;
use crate::chart_scenarios::lane::{sim_process, SimFlags, MODEL_LABEL};

/// One release on the real control plane, with its kubelet.
pub struct RealLane {
    plane: &'static ControlPlane,
    release: Release,
    kubelet: RealKubelet,
    flags: SimFlags,
    client: kube::Client,
}

impl RealLane {
    /// Installs the chart with `values` as release `name` into namespace
    /// `flexinfer-<name>`, with a kubelet on Node `<name>-node` for that
    /// namespace's model pods; `None` when the control plane was not built
    /// (the scenario is skipped).
    pub async fn install(name: &str, values: Value) -> Option<RealLane> {
        let plane = plane()?;
        let namespace = format!("flexinfer-{name}");
        let values_file = plane.dir().join(format!("{name}-values.json"));
        std::fs::write(&values_file, values.to_string()).expect("values file");
        let flags = SimFlags::default();
        let kubelet = release_kubelet(plane, &format!("{name}-node"), &namespace, &flags).await;
        let values_path = values_file.display().to_string();
        let release = Release::install(plane, name, &namespace, &["-f", &values_path]).await;
        Some(RealLane {
            plane,
            release,
            kubelet,
            flags,
            client: plane.client().await,
        })
    }

    /// The control plane it runs on.
    pub fn plane(&self) -> &'static ControlPlane {
        self.plane
    }

    /// Asserts that the API server refused no account of the release's
    /// namespace anything during the scenario, then uninstalls the release.
    pub fn finish(self) {
        let accounts = format!("system:serviceaccount:{}:", self.release.namespace);
        let refused: Vec<_> = self
            .plane
            .forbidden()
            .into_iter()
            .filter(|f| f.user.starts_with(&accounts))
            .collect();
        assert!(
            refused.is_empty(),
            "the API server refused the release {} request(s): {refused:#?}\ngateway log: {}",
            refused.len(),
            self.release.log.display()
        );
        drop(self.kubelet);
        self.release.uninstall(self.plane);
    }
}

/// A simulated kubelet on a one-GPU NVIDIA Node `node` (labelled as the
/// node agent would) that binds and runs every model pod of `namespace`.
async fn release_kubelet(
    plane: &ControlPlane,
    node: &str,
    namespace: &str,
    flags: &SimFlags,
) -> RealKubelet {
    let logs = plane.dir().join(format!("pods-{node}"));
    std::fs::create_dir_all(&logs).expect("log folder");
    let flags = flags.clone();
    RealKubelet::start(
        plane.client().await,
        KubeletConfig {
            node: node.into(),
            node_labels: json!({
                "kubernetes.io/hostname": node,
                "flexinfer.ai/gpu.vendor": "nvidia",
                "flexinfer.ai/gpu.arch": "sm_89",
                "flexinfer.ai/gpu.vram": "24Gi",
                "flexinfer.ai/gpu.count": "1"}),
            capacity: json!({"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "1", "pods": "110"}),
            selector: MODEL_LABEL.into(),
            namespace: Some(namespace.into()),
            bind_unscheduled: true,
            runner: Arc::new(move |pod, ip| sim_process(pod, ip, &flags, &logs)),
            network: Some(Arc::new(
                PodNetwork::create().expect("a network namespace for pods (needs root and `ip`)"),
            )),
        },
    )
    .await
    .expect("kubelet")
}

impl Cluster for RealLane {
    fn namespace(&self) -> &str {
        &self.release.namespace
    }

    fn gateway_url(&self, path: &str) -> String {
        self.release.gateway.url("http", path)
    }

    fn logs(&self) -> &Path {
        self.plane.dir()
    }

    fn sim_flags(&self, model: &str, flags: &[&str]) {
        self.flags.lock().unwrap().insert(
            model.to_string(),
            flags.iter().map(|f| f.to_string()).collect(),
        );
    }

    fn client(&self) -> kube::Client {
        self.client.clone()
    }

    fn pods(&self) -> Vec<KubeletPod> {
        self.kubelet.pods()
    }

    async fn terminate_gateway(&mut self, limit: Duration) -> bool {
        self.release.gateway.terminate(limit).await
    }

    async fn start_gateway(&mut self) {
        self.release.gateway.start().await;
    }
}
