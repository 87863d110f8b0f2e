//! Placement through the real kube-scheduler calling the extender: the
//! chart installed with `scheduler.enabled=true`, the extender
//! (`flexinfer-sched`) run from its rendered Deployment on its own
//! ServiceAccount's token, and the real `kube-scheduler` run with the
//! chart's `KubeSchedulerConfiguration` (from the stored ConfigMap) on the
//! second scheduler's own ServiceAccount's token. Simulated GPU nodes
//! differ in what the extender filters and scores; the real kube-scheduler
//! asks the extender and binds the model pod, a simulated kubelet runs it,
//! and the gateway answers a chat request for it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flexinfer_testkube::real::{ControlPlane, KubeletConfig, PodNetwork, RealKubelet};
use serde_json::{json, Value};

use super::{create, kubectl, plane, wait_phase, Release};
use crate::chart_scenarios::lane::{fresh_client, sim_process, Component, SimFlags, MODEL_LABEL};

/// One second kube-scheduler at a time: every kube-scheduler whose profile
/// is `flexinfer-scheduler` places every pod naming it, whichever release
/// ran it, so two scenarios at once would place each other's pods.
static ONE_SCHEDULER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The estimate the scenario's Model declares (`gpu.vramEstimateMB`), which
/// the operator puts on its pods for the extender's VRAM check.
const VRAM_ESTIMATE_MB: u64 = 8000;

/// A simulated GPU node of the scenario: what the node agent would have
/// labelled (`gpu.arch`) and annotated (free VRAM, utilisation).
struct GpuNode {
    /// Suffix of the Node's name (after the scenario's pool).
    suffix: &'static str,
    arch: &'static str,
    free_mb: u64,
    util: u64,
}

/// The scenario's nodes, all NVIDIA with one 24 GiB GPU:
/// - `roomy`: most free VRAM, nearly idle: the extender's choice;
/// - `busy`: passes the filter but has less free VRAM and a busy GPU;
/// - `full`: less free VRAM than the Model's estimate (Insufficient VRAM);
/// - `old`: the most free VRAM of all, but a GPU architecture (sm_52) vLLM
///   does not run on (Unsupported arch): it would win on score alone.
const NODES: [GpuNode; 4] = [
    GpuNode {
        suffix: "roomy",
        arch: "sm_89",
        free_mb: 22_000,
        util: 5,
    },
    GpuNode {
        suffix: "busy",
        arch: "sm_89",
        free_mb: 12_000,
        util: 60,
    },
    GpuNode {
        suffix: "full",
        arch: "sm_89",
        free_mb: 2_000,
        util: 0,
    },
    GpuNode {
        suffix: "old",
        arch: "sm_52",
        free_mb: 24_000,
        util: 0,
    },
];
const PREFERRED: &str = "roomy";
const FILTERED: [&str; 2] = ["full", "old"];

/// Node label that keeps the scenario's Model on the scenario's nodes:
/// other tests of the lane register GPU nodes of their own on the same
/// control plane (some without a kubelet).
const POOL_LABEL: &str = "flexinfer.test/placement-pool";

/// Starts a simulated kubelet per node of `NODES`, named `<pool>-<suffix>`,
/// that runs the pods kube-scheduler binds to it (it binds none itself),
/// and annotates each Node as the node agent would.
async fn start_nodes(plane: &ControlPlane, pool: &str, flags: &SimFlags) -> Vec<RealKubelet> {
    let network =
        Arc::new(PodNetwork::create().expect("a network namespace for pods (needs root and `ip`)"));
    let logs = plane.dir().join(format!("pods-{pool}"));
    std::fs::create_dir_all(&logs).expect("log folder");
    let mut kubelets = Vec::new();
    for node in &NODES {
        let name = format!("{pool}-{}", node.suffix);
        let (flags, logs) = (flags.clone(), logs.clone());
        let kubelet = RealKubelet::start(
            plane.client().await,
            KubeletConfig {
                node: name.clone(),
                node_labels: json!({
                    "kubernetes.io/hostname": name,
                    POOL_LABEL: pool,
                    "flexinfer.ai/gpu.vendor": "nvidia",
                    "flexinfer.ai/gpu.arch": node.arch,
                    "flexinfer.ai/gpu.vram": "24Gi",
                    "flexinfer.ai/gpu.count": "1"}),
                capacity: json!({"cpu": "16", "memory": "64Gi",
                    "nvidia.com/gpu": "1", "pods": "110"}),
                selector: MODEL_LABEL.to_owned(),
                // Pods bound to its Node only, whichever namespace.
                namespace: None,
                bind_unscheduled: false,
                runner: Arc::new(move |pod, ip| sim_process(pod, ip, &flags, &logs)),
                network: Some(network.clone()),
            },
        )
        .await
        .expect("kubelet");
        kubectl(
            plane,
            &[
                "annotate",
                "node",
                &name,
                "--overwrite",
                &format!("flexinfer.ai/gpu-free-memory={}", node.free_mb),
                &format!("flexinfer.ai/gpu.util={}", node.util),
            ],
        );
        kubelets.push(kubelet);
    }
    kubelets
}

/// The release's Deployment of `component` (its
/// `app.kubernetes.io/component` label), as stored.
fn deployment(plane: &ControlPlane, namespace: &str, component: &str) -> Value {
    let list: Value = serde_json::from_str(&kubectl(
        plane,
        &[
            "get",
            "deployments",
            "-n",
            namespace,
            "-l",
            &format!("app.kubernetes.io/component={component}"),
            "-o",
            "json",
        ],
    ))
    .expect("JSON");
    list["items"][0].clone()
}

/// The ServiceAccount a Deployment's pods run under.
fn account_of(deployment: &Value) -> String {
    deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("a ServiceAccount of its own")
        .to_owned()
}

/// Starts the release's component `component` (one of ours) from its
/// Deployment, on its own ServiceAccount's token; with that account.
pub(super) async fn start_component(
    plane: &ControlPlane,
    namespace: &str,
    component: &str,
) -> (Component, String) {
    let deployment = deployment(plane, namespace, component);
    let account = account_of(&deployment);
    let kubeconfig = plane.kubeconfig_for(namespace, &account);
    let log = plane.dir().join(format!("{namespace}-{component}.log"));
    let mut process = Component::of(&deployment, &kubeconfig, log).expect("a FlexInfer component");
    process.mount_secrets(&super::secrets(plane, namespace), plane.dir());
    process.start().await;
    (process, account)
}

/// The real kube-scheduler, killed on drop.
struct KubeScheduler {
    child: Child,
    log: PathBuf,
}

impl Drop for KubeScheduler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chart's `KubeSchedulerConfiguration` (`chart`, YAML) changed only
/// where a process on loopback must differ from the chart's pod:
/// - `clientConnection.kubeconfig`: the pod reaches the API server with its
///   in-cluster configuration (its mounted ServiceAccount token); a process
///   has none, and with `--config` kube-scheduler ignores `--kubeconfig`:
///   `kubeconfig`, which holds the second scheduler's own ServiceAccount
///   token;
/// - each extender's `urlPrefix`: the chart names the extender's Service
///   (`expected_service`, a `*.svc` DNS name nothing resolves here); the
///   extender process listens on `extender_url` instead.
///
/// Panics when the chart's `urlPrefix` is not `expected_service`.
fn lane_scheduler_config(
    chart: &str,
    expected_service: &str,
    extender_url: &str,
    kubeconfig: &Path,
) -> String {
    let mut config: Value = serde_yaml::from_str(chart).expect("KubeSchedulerConfiguration");
    config["clientConnection"]["kubeconfig"] = json!(kubeconfig.display().to_string());
    let extenders = config["extenders"]
        .as_array_mut()
        .expect("the configuration calls the extender");
    for extender in extenders {
        assert_eq!(
            extender["urlPrefix"], expected_service,
            "the chart points kube-scheduler at the extender's Service"
        );
        extender["urlPrefix"] = json!(extender_url);
    }
    serde_yaml::to_string(&config).expect("YAML")
}

impl KubeScheduler {
    /// Runs `$FLEXINFER_CONTROL_PLANE/kube-scheduler` as the release's
    /// kube-scheduler Deployment runs it, from the stored ConfigMap it
    /// mounts (see [`lane_scheduler_config`]), calling `extender`.
    fn start(plane: &ControlPlane, namespace: &str, extender: &Component) -> (Self, String) {
        let deployment = deployment(plane, namespace, "kube-scheduler");
        let account = account_of(&deployment);
        let pod = &deployment["spec"]["template"]["spec"];
        let config_map = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|v| v["configMap"]["name"].as_str())
            .expect("the configuration volume");
        let stored: Value = serde_json::from_str(&kubectl(
            plane,
            &[
                "get",
                "configmap",
                config_map,
                "-n",
                namespace,
                "-o",
                "json",
            ],
        ))
        .expect("JSON");
        let extender_service = extender_service_url(plane, namespace);
        let kubeconfig = plane.kubeconfig_for(namespace, &account);
        let config = lane_scheduler_config(
            stored["data"]["scheduler-config.yaml"]
                .as_str()
                .expect("scheduler-config.yaml"),
            &extender_service,
            &extender.url("http", ""),
            &kubeconfig,
        );
        let config_path = plane
            .dir()
            .join(format!("{namespace}-scheduler-config.yaml"));
        std::fs::write(&config_path, config).expect("configuration file");
        let args = lane_scheduler_args(&pod["containers"][0], &config_path, &kubeconfig);
        let bin = flexinfer_testkube::real::binaries().expect("control plane binaries");
        let log = plane.dir().join(format!("{namespace}-kube-scheduler.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(bin.join("kube-scheduler"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("kube-scheduler");
        (KubeScheduler { child, log }, account)
    }

    /// Whether the process still runs.
    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// `http://<extender Service>.<namespace>.svc:<port>`, from the stored
/// Service of the extender.
fn extender_service_url(plane: &ControlPlane, namespace: &str) -> String {
    let list: Value = serde_json::from_str(&kubectl(
        plane,
        &[
            "get",
            "services",
            "-n",
            namespace,
            "-l",
            "app.kubernetes.io/component=scheduler-extender",
            "-o",
            "json",
        ],
    ))
    .expect("JSON");
    let service = &list["items"][0];
    format!(
        "http://{}.{namespace}.svc:{}",
        service["metadata"]["name"].as_str().expect("Service name"),
        service["spec"]["ports"][0]["port"]
    )
}

/// The kube-scheduler container's command without the binary, changed
/// only where a process must differ from the pod:
/// - `--config`: the ConfigMap volume's path in the pod; here the file
///   written from it;
/// - `--secure-port`, `--bind-address`: the pod has an address of its own
///   for port 10259; here a free loopback port;
/// - `--authentication-kubeconfig`, `--authorization-kubeconfig`: the pod
///   checks callers of its secure port (TokenReview, SubjectAccessReview)
///   through its in-cluster configuration; here through the same
///   ServiceAccount's kubeconfig.
///
/// Every other argument (`--v`, `--authentication-skip-lookup`) is the
/// chart's.
fn lane_scheduler_args(container: &Value, config: &Path, kubeconfig: &Path) -> Vec<String> {
    let command: Vec<&str> = container["command"]
        .as_array()
        .expect("command")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(command.first(), Some(&"kube-scheduler"), "{command:?}");
    let mut args: Vec<String> = command[1..]
        .iter()
        .map(|arg| match arg.split_once('=') {
            Some(("--config", _)) => format!("--config={}", config.display()),
            _ => (*arg).to_owned(),
        })
        .collect();
    assert!(
        args.iter().any(|a| a.starts_with("--config=")),
        "the chart runs kube-scheduler with --config: {command:?}"
    );
    args.extend([
        format!("--secure-port={}", crate::support::free_port()),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--authentication-kubeconfig={}", kubeconfig.display()),
        format!("--authorization-kubeconfig={}", kubeconfig.display()),
    ]);
    args
}

/// The sum of the samples of `metric` whose labels include every
/// `key="value"` of `labels`, from Prometheus text.
fn sample(text: &str, metric: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| {
            line.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| labels.iter().all(|l| line.contains(l)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The extender's `/metrics` text.
async fn extender_metrics(extender: &Component) -> String {
    fresh_client()
        .get(extender.url("http", "/metrics"))
        .send()
        .await
        .expect("extender /metrics")
        .text()
        .await
        .expect("metrics text")
}

/// The pods of Model `model` in `namespace`.
fn model_pods(plane: &ControlPlane, namespace: &str, model: &str) -> Vec<Value> {
    let list: Value = serde_json::from_str(&kubectl(
        plane,
        &[
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            &format!("{MODEL_LABEL}={model}"),
            "-o",
            "json",
        ],
    ))
    .expect("JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// A running scenario: the release with its gateway, the extender, the
/// real kube-scheduler and the simulated nodes.
struct Placement {
    rel: Release,
    extender: Component,
    extender_account: String,
    scheduler: KubeScheduler,
    scheduler_account: String,
    pool: String,
    _kubelets: Vec<RealKubelet>,
    _flags: SimFlags,
}

impl Placement {
    /// Installs `release` in `namespace` with the extender on (and
    /// `values`), and starts every process of the scenario.
    async fn start(plane: &ControlPlane, release: &str, namespace: &str, values: &[&str]) -> Self {
        let pool = release.to_owned();
        let flags = SimFlags::default();
        let kubelets = start_nodes(plane, &pool, &flags).await;
        let mut all = vec!["--set", "scheduler.enabled=true"];
        all.extend_from_slice(values);
        let rel = Release::install(plane, release, namespace, &all).await;
        let (extender, extender_account) =
            start_component(plane, namespace, "scheduler-extender").await;
        let (scheduler, scheduler_account) = KubeScheduler::start(plane, namespace, &extender);
        Placement {
            rel,
            extender,
            extender_account,
            scheduler,
            scheduler_account,
            pool,
            _kubelets: kubelets,
            _flags: flags,
        }
    }

    fn namespace(&self) -> &str {
        &self.rel.namespace
    }

    fn node(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.pool)
    }

    /// Creates a GPU Model that asks for `VRAM_ESTIMATE_MB` and runs on
    /// the scenario's nodes only.
    fn create_model(&self, plane: &ControlPlane, name: &str) {
        let model = json!({
            "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
            "metadata": {"name": name, "namespace": self.namespace()},
            "spec": {"backend": "vllm", "source": format!("hf://org/{name}"),
                     "gpu": {"vendor": "nvidia", "vramEstimateMB": VRAM_ESTIMATE_MB},
                     "nodeSelector": {POOL_LABEL: self.pool},
                     "cache": {"strategy": "None"}, "serverless": {"enabled": false}},
        });
        create(plane, &model).expect("Model created");
    }

    /// Waits until a pod of `model` is bound to a node; the pod.
    async fn bound_pod(&mut self, plane: &ControlPlane, model: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let pods = model_pods(plane, self.namespace(), model);
            if let Some(pod) = pods
                .iter()
                .find(|p| p["spec"]["nodeName"].as_str().is_some())
            {
                return pod.clone();
            }
            assert!(
                self.scheduler.running(),
                "kube-scheduler exited: {}",
                self.scheduler.log.display()
            );
            assert!(
                Instant::now() < deadline,
                "no pod of {model} was bound in 90 s\npods: {pods:#?}\nevents: {}\n\
                 kube-scheduler log: {}\nextender log: {}\ngateway log: {}",
                kubectl(plane, &["get", "events", "-n", self.namespace()]),
                self.scheduler.log.display(),
                plane
                    .dir()
                    .join(format!("{}-scheduler-extender.log", self.namespace()))
                    .display(),
                self.rel.log.display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Everything the scenario asserts for `model`: its pod names the
    /// FlexInfer scheduler and is bound by kube-scheduler to the node the
    /// extender prefers, never to one it filters out; the pod runs and
    /// the gateway answers a chat request for it.
    async fn place_and_serve(&mut self, plane: &ControlPlane, model: &str) {
        self.create_model(plane, model);
        let pod = self.bound_pod(plane, model).await;
        assert_eq!(
            pod["spec"]["schedulerName"], "flexinfer-scheduler",
            "{}",
            pod["spec"]
        );
        assert_eq!(
            pod["spec"]["nodeName"],
            self.node(PREFERRED).as_str(),
            "kube-scheduler follows the extender's scores; kube-scheduler log: {}",
            self.scheduler.log.display()
        );
        self.assert_scheduled_by_kube_scheduler(plane, &pod);
        wait_phase(plane, &self.rel, model, "Ready", 90).await;
        let resp = fresh_client()
            .post(self.rel.gateway.url("http", "/v1/chat/completions"))
            .json(&crate::support::chat(model))
            .send()
            .await
            .expect("chat request");
        let status = resp.status();
        assert_eq!(status, 200, "{}", resp.text().await.unwrap_or_default());
        for pod in model_pods(plane, self.namespace(), model) {
            let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
            for filtered in FILTERED {
                assert_ne!(node, self.node(filtered), "a filtered node got the pod");
            }
        }
    }

    /// The pod's `Scheduled` event was reported by the second scheduler
    /// (its profile's name), not by anything binding pods directly.
    fn assert_scheduled_by_kube_scheduler(&self, plane: &ControlPlane, pod: &Value) {
        let name = pod["metadata"]["name"].as_str().expect("pod name");
        let events: Value = serde_json::from_str(&kubectl(
            plane,
            &[
                "get",
                "events.events.k8s.io",
                "-n",
                self.namespace(),
                "-o",
                "json",
            ],
        ))
        .expect("JSON");
        let scheduled: Vec<&Value> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == "Scheduled" && e["regarding"]["name"] == name)
            .collect();
        assert!(
            scheduled
                .iter()
                .any(|e| e["reportingController"] == "flexinfer-scheduler"),
            "no Scheduled event from flexinfer-scheduler: {scheduled:#?}"
        );
    }

    /// The extender's metrics: it answered filter and prioritize calls,
    /// and rejected the `full` node for VRAM and the `old` one for its
    /// architecture.
    async fn assert_extender_was_asked(&self) -> String {
        let text = extender_metrics(&self.extender).await;
        let calls = |verb: &str| {
            sample(
                &text,
                "flexinfer_scheduler_requests_total",
                &[&format!("verb=\"{verb}\""), "result=\"ok\""],
            )
        };
        assert!(calls("filter") >= 1.0, "{text}");
        assert!(calls("prioritize") >= 1.0, "{text}");
        assert_eq!(
            sample(
                &text,
                "flexinfer_scheduler_requests_total",
                &["result=\"error\""]
            ),
            0.0,
            "{text}"
        );
        for reason in ["insufficient_vram", "unsupported_arch"] {
            assert!(
                sample(
                    &text,
                    "flexinfer_scheduler_rejections_total",
                    &[&format!("reason=\"{reason}\"")]
                ) >= 1.0,
                "{reason}: {text}"
            );
        }
        text
    }

    /// The requests the API server refused the gateway, the extender and
    /// kube-scheduler.
    fn refused(&self, plane: &ControlPlane) -> Vec<flexinfer_testkube::real::Forbidden> {
        let users: Vec<String> = [
            &self.rel.account,
            &self.extender_account,
            &self.scheduler_account,
        ]
        .iter()
        .map(|a| format!("system:serviceaccount:{}:{a}", self.namespace()))
        .collect();
        plane
            .forbidden()
            .into_iter()
            .filter(|f| users.contains(&f.user))
            .collect()
    }

    fn uninstall(self, plane: &ControlPlane) {
        drop(self.scheduler);
        drop(self.extender);
        self.rel.uninstall(plane);
    }
}

/// A GPU Model's pod is placed by the real kube-scheduler, which asks the
/// chart's extender: it lands on the node with the most free VRAM and the
/// idlest GPU, never on a node with less free VRAM than the Model's
/// estimate nor on one whose GPU architecture its backend does not run on
/// (though that one has the most free VRAM of all); it runs, the gateway
/// answers for it, and the API server refuses nothing to the gateway, the
/// extender or kube-scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_kube_scheduler_places_a_model_where_the_extender_prefers() {
    let Some(plane) = plane() else { return };
    let _one = ONE_SCHEDULER.lock().await;
    let started = Instant::now();
    let mut scenario = Placement::start(plane, "placement", "flexinfer-placement", &[]).await;
    scenario.place_and_serve(plane, "placed").await;
    let metrics = scenario.assert_extender_was_asked().await;
    // kube-scheduler sent whole Node objects (not nodeCacheCapable).
    assert!(
        sample(&metrics, "flexinfer_scheduler_node_metadata_total", &[]) >= 1.0,
        "{metrics}"
    );
    let refused = scenario.refused(plane);
    assert!(refused.is_empty(), "refused: {refused:#?}");
    eprintln!(
        "placement through the real kube-scheduler in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    scenario.uninstall(plane);
}

/// With `scheduler.extender.nodeCache=true` the chart's configuration is
/// `nodeCacheCapable`: kube-scheduler sends node names only, the extender
/// answers them from its Node cache (on the chart's grant to list and
/// watch Nodes), and the pod is placed as with whole Nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_node_cache_kube_scheduler_sends_names_and_placement_holds() {
    let Some(plane) = plane() else { return };
    let _one = ONE_SCHEDULER.lock().await;
    let started = Instant::now();
    let mut scenario = Placement::start(
        plane,
        "nodecache",
        "flexinfer-nodecache",
        &["--set", "scheduler.extender.nodeCache=true"],
    )
    .await;
    let config = std::fs::read_to_string(
        plane
            .dir()
            .join(format!("{}-scheduler-config.yaml", scenario.namespace())),
    )
    .expect("configuration");
    assert!(config.contains("nodeCacheCapable: true"), "{config}");
    scenario.place_and_serve(plane, "cached-nodes").await;
    let metrics = scenario.assert_extender_was_asked().await;
    // No Node object came in a request: names only.
    assert_eq!(
        sample(&metrics, "flexinfer_scheduler_node_metadata_total", &[]),
        0.0,
        "{metrics}"
    );
    let refused = scenario.refused(plane);
    assert!(refused.is_empty(), "refused: {refused:#?}");
    eprintln!(
        "placement with the node cache in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    scenario.uninstall(plane);
}
