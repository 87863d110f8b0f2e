//! The lane: the chart rendered by `helm/tests/check_chart.py --render`,
//! an in-memory API server with the simulated Deployment controller,
//! kubelet and EndpointSlice controller, the rendered FlexInfer components
//! as real processes, and model pods as real `flexinfer-sim` processes.

use flexinfer_conformance::python::interpreter;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flexinfer_testkube::sim::{KubeletPod, PodProcess};
use flexinfer_testkube::TestApiServer;
use serde_json::{json, Value};

use super::cluster::Cluster;
use crate::support::{free_port, SimProcess};

/// Namespace the chart installs into (and, by default, watches).
pub const NAMESPACE: &str = "flexinfer-system";
/// Label the operator puts on model pods; the simulated kubelet runs only
/// those.
pub const MODEL_LABEL: &str = "flexinfer.ai/model";
/// Exit status of `check_chart.py` when a Python package is missing.
const MISSING_PACKAGES: i32 = 3;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Renders the chart with `values` as `helm install` would; `None` (the
/// scenario is skipped, saying why) when Python or its packages are
/// missing outside CI.
pub fn render(values: &Value, out: &Path) -> Option<Vec<Value>> {
    let script = repo_root().join("helm/tests/check_chart.py");
    let output = Command::new(interpreter())
        .arg(&script)
        .arg("--render")
        .arg(out)
        .arg("--values")
        .arg(values.to_string())
        .output();
    let output = match output {
        Ok(o) => o,
        Err(e) => {
            assert!(!in_ci(), "cannot run Python for the chart: {e} (CI=true)");
            eprintln!("skipped: cannot run Python: {e}; run scripts/setup.sh");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(MISSING_PACKAGES) {
        assert!(!in_ci(), "CI=true but the chart cannot render: {stderr}");
        eprintln!("skipped: {stderr}");
        return None;
    }
    assert!(output.status.success(), "chart render failed: {stderr}");
    let text = std::fs::read_to_string(out).expect("rendered objects");
    Some(serde_json::from_str(&text).expect("rendered objects are JSON"))
}

/// Per-model `flexinfer-sim` flags (load time, token rate), keyed by Model
/// name; every model pod gets `--startup-delay 1s` unless set here.
pub type SimFlags = Arc<Mutex<HashMap<String, Vec<String>>>>;

/// Maps a model pod's engine container (vLLM or llama.cpp args as the
/// operator renders them) onto a `flexinfer-sim` command on `ip`.
pub fn sim_process(pod: &Value, ip: Ipv4Addr, flags: &SimFlags, logs: &Path) -> Option<PodProcess> {
    let model = pod["metadata"]["labels"][MODEL_LABEL].as_str()?;
    let pod_name = pod["metadata"]["name"].as_str()?;
    let container = &pod["spec"]["containers"][0];
    let engine: Vec<&str> = container["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let flag = |name: &str| {
        engine
            .iter()
            .position(|a| *a == name)
            .and_then(|i| engine.get(i + 1))
            .map(|v| v.to_string())
    };
    let served = flag("--served-model-name")
        .or_else(|| flag("--alias"))
        .unwrap_or_else(|| model.to_string());
    let port = flag("--port").or_else(|| {
        container["ports"][0]["containerPort"]
            .as_u64()
            .map(|p| p.to_string())
    })?;
    let mut args = vec![
        "--host".to_string(),
        ip.to_string(),
        "--port".into(),
        port,
        "--model".into(),
        served,
        "--pod-name".into(),
        pod_name.to_string(),
    ];
    for passed in ["--max-num-seqs", "--max-model-len"] {
        if let Some(v) = flag(passed) {
            args.extend([passed.to_string(), v]);
        }
    }
    let extra = flags
        .lock()
        .unwrap()
        .get(model)
        .cloned()
        .unwrap_or_default();
    if !extra.iter().any(|a| a == "--startup-delay") {
        args.extend(["--startup-delay".into(), "1s".into()]);
    }
    args.extend(extra);
    Some(PodProcess {
        program: SimProcess::binary().expect("flexinfer-sim (cargo build --workspace --bins)"),
        args,
        env: vec![("RUST_LOG".into(), "warn".into())],
        clear_env: true,
        log: Some(logs.join(format!("pod-{pod_name}.log"))),
    })
}

/// A FlexInfer component started from its rendered Deployment.
pub struct Component {
    /// The rendered Deployment.
    deployment: Value,
    binary: PathBuf,
    kubeconfig: PathBuf,
    log: PathBuf,
    /// Container port -> loopback port.
    ports: HashMap<u16, u16>,
    /// Mount path of a Secret volume -> the folder holding its files.
    mounts: Vec<(String, PathBuf)>,
    /// The pod: its name and Node (`spec.nodeName`); a new name per start
    /// when unset.
    pod: Option<(String, String)>,
    /// Env values set over the rendered ones (what the cluster's DNS
    /// would resolve, e.g.).
    env: Vec<(String, String)>,
    child: Option<Child>,
}

fn random_suffix() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos()
        ^ std::process::id();
    let chars = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|i| chars[((n >> (i * 5)) as usize) % chars.len()] as char)
        .collect()
}

impl Component {
    /// The FlexInfer binary of a chart's `deployment`, to run as a process
    /// that reaches the API server through `kubeconfig` and logs to `log`;
    /// `None` when the Deployment runs none of ours.
    pub fn of(deployment: &Value, kubeconfig: &Path, log: PathBuf) -> Option<Component> {
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let binary = binary_of(container)?;
        let ports = container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["containerPort"].as_u64())
            .map(|p| (p as u16, free_port()))
            .collect();
        Some(Component {
            deployment: deployment.clone(),
            binary: binary_path(binary),
            kubeconfig: kubeconfig.to_path_buf(),
            log,
            ports,
            mounts: Vec::new(),
            pod: None,
            env: Vec::new(),
            child: None,
        })
    }

    /// Sets env `name` to `value` over the rendered value.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.retain(|(n, _)| n != name);
        self.env.push((name.to_owned(), value.to_owned()));
    }

    /// Runs as Pod `pod` on Node `node` (what the downward API gives it),
    /// e.g. a DaemonSet's pod created for one Node.
    pub fn as_pod(&mut self, pod: &str, node: &str) {
        self.pod = Some((pod.to_owned(), node.to_owned()));
    }

    /// Mounts the pod's Secret volumes as the kubelet would: each volume's
    /// items (or every key) written as files into a folder under `dir`,
    /// and args and env values under its mount path pointed there.
    /// `secrets` are the Secret objects the volumes may name.
    pub fn mount_secrets(&mut self, secrets: &[Value], dir: &Path) {
        use base64::Engine as _;
        let pod = &self.deployment["spec"]["template"]["spec"];
        let volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
        let mounts = self.container()["volumeMounts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for mount in &mounts {
            let name = mount["name"].as_str().unwrap_or_default();
            let Some(volume) = volumes.iter().find(|v| v["name"] == name) else {
                continue;
            };
            let Some(secret_name) = volume["secret"]["secretName"].as_str() else {
                continue;
            };
            let secret = secrets
                .iter()
                .find(|s| s["metadata"]["name"] == secret_name)
                .unwrap_or_else(|| panic!("Secret {secret_name} of volume {name} not found"));
            let folder = dir.join(format!("volume-{name}-{}", random_suffix()));
            std::fs::create_dir_all(&folder).expect("volume folder");
            let data = secret["data"].as_object().cloned().unwrap_or_default();
            let items: Vec<(String, String)> = match volume["secret"]["items"].as_array() {
                Some(items) => items
                    .iter()
                    .map(|i| {
                        let key = i["key"].as_str().unwrap_or_default().to_owned();
                        let path = i["path"].as_str().unwrap_or(&key).to_owned();
                        (key, path)
                    })
                    .collect(),
                None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
            };
            for (key, path) in items {
                let encoded = data[&key].as_str().unwrap_or_default();
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .expect("Secret data is base64");
                std::fs::write(folder.join(path), bytes).expect("volume file");
            }
            let mount_path = mount["mountPath"].as_str().unwrap_or_default().to_owned();
            self.mounts.push((mount_path, folder));
        }
    }

    fn container(&self) -> &Value {
        &self.deployment["spec"]["template"]["spec"]["containers"][0]
    }

    /// The loopback port standing in for the container port called `name`
    /// (or numbered so).
    pub fn port(&self, name: &str) -> u16 {
        let container_port = self.container()["ports"]
            .as_array()
            .and_then(|ps| {
                ps.iter().find(|p| {
                    p["name"] == name || name.parse::<u64>().ok() == p["containerPort"].as_u64()
                })
            })
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("no container port {name}"))
            as u16;
        self.ports[&container_port]
    }

    /// `http://127.0.0.1:<port of name><path>`.
    pub fn url(&self, port: &str, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port(port))
    }

    /// Rewrites `0.0.0.0:<container port>` to the component's loopback
    /// port, and a path under a mounted Secret volume to its folder.
    fn rewrite(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (from, to) in &self.ports {
            out = out.replace(&format!("0.0.0.0:{from}"), &format!("127.0.0.1:{to}"));
        }
        for (mount_path, folder) in &self.mounts {
            if let Some(rest) = out.strip_prefix(mount_path.as_str()) {
                out = format!("{}{rest}", folder.display());
            }
        }
        out
    }

    /// Args and env of the container as the kubelet would start it: env
    /// values with ports rewritten, downward-API fields filled in for a
    /// new pod, and the API server reached through `KUBECONFIG` instead of
    /// the in-cluster configuration.
    fn command(&self) -> Command {
        let container = self.container();
        let (pod_name, node) = self.pod.clone().unwrap_or_else(|| {
            let name = format!(
                "{}-{}",
                self.deployment["metadata"]["name"]
                    .as_str()
                    .unwrap_or("pod"),
                random_suffix()
            );
            (name, "node-1".to_owned())
        });
        let namespace = self.deployment["metadata"]["namespace"]
            .as_str()
            .unwrap_or(NAMESPACE);
        let sa = self.deployment["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        let mut cmd = Command::new(&self.binary);
        cmd.env_clear();
        for arg in container["args"].as_array().into_iter().flatten() {
            cmd.arg(self.rewrite(arg.as_str().unwrap_or_default()));
        }
        for e in container["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or_default();
            let value = if let Some(v) = e["value"].as_str() {
                match v.parse::<u16>().ok().and_then(|p| self.ports.get(&p)) {
                    // A port given alone (`..._PORT: "9100"`).
                    Some(port) if name.ends_with("_PORT") => port.to_string(),
                    _ => self.rewrite(v),
                }
            } else if let Some(path) = e.pointer("/valueFrom/fieldRef/fieldPath") {
                match path.as_str().unwrap_or_default() {
                    "metadata.namespace" => namespace.to_string(),
                    "metadata.name" => pod_name.clone(),
                    "status.podIP" | "status.hostIP" => "127.0.0.1".into(),
                    "spec.nodeName" => node.clone(),
                    "spec.serviceAccountName" => sa.into(),
                    other => panic!("downward-API field {other} of {name} not simulated"),
                }
            } else if e.get("valueFrom").is_none() {
                // `value: ""`, which the API server stores without `value`
                // (an omitted value is the empty string).
                String::new()
            } else {
                panic!("env {name} needs a Secret or ConfigMap the lane does not provide");
            };
            cmd.env(name, value);
        }
        for (name, value) in &self.env {
            cmd.env(name, value);
        }
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("component log");
        cmd.stdout(log.try_clone().expect("log")).stderr(log);
        cmd
    }

    /// Starts the process and waits until its readiness probe answers 200.
    pub async fn start(&mut self) {
        let child = self.command().spawn().expect("start component");
        self.child = Some(child);
        self.wait_ready().await;
    }

    async fn wait_ready(&mut self) {
        let probe = &self.container()["readinessProbe"]["httpGet"];
        let port = match &probe["port"] {
            Value::String(name) => self.port(name),
            Value::Number(n) => self.ports[&(n.as_u64().unwrap_or(0) as u16)],
            _ => panic!("readiness probe without a port"),
        };
        let url = format!(
            "http://127.0.0.1:{port}{}",
            probe["path"].as_str().unwrap_or("/")
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = crate::support::client();
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!(
                    "{} exited during start-up ({status}); log: {}",
                    self.binary.display(),
                    self.log.display()
                );
            }
            if client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{url} never answered 200; log: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM (as the kubelet does on pod deletion) and waits up to
    /// `limit` for the process to exit; whether it did.
    pub async fn terminate(&mut self, limit: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Which binary runs a rendered FlexInfer container (`None`: not one of
/// ours, e.g. kube-scheduler).
fn binary_of(container: &Value) -> Option<&'static str> {
    let image = container["image"].as_str().unwrap_or_default();
    let name = image.rsplit('/').next()?.split(':').next()?;
    match (container["name"].as_str(), name) {
        (Some("gateway"), _) | (_, "flexinfer-gateway") => Some("flexinfer-gateway"),
        (_, "flexinfer-sched") => Some("flexinfer-sched"),
        (_, "flexinfer-operator") => Some("flexinfer-operator"),
        (_, "flexinfer-agent") => Some("flexinfer-agent"),
        _ => None,
    }
}

fn binary_path(name: &str) -> PathBuf {
    if name == "flexinfer-gateway" {
        return PathBuf::from(env!("CARGO_BIN_EXE_flexinfer-gateway"));
    }
    let sim = SimProcess::binary().expect("target/<profile>/flexinfer-sim");
    let path = sim.with_file_name(name);
    assert!(
        path.is_file(),
        "{} missing: run cargo build --workspace --bins",
        path.display()
    );
    path
}

/// One installed release: API server, simulated cluster, components.
pub struct Lane {
    /// The API server every component talks to.
    pub server: TestApiServer,
    /// Rendered objects.
    pub objects: Vec<Value>,
    /// Running components by binary name (`flexinfer-gateway`, ...).
    pub components: HashMap<&'static str, Component>,
    sim_flags: SimFlags,
    /// Logs of components and pods.
    pub logs: PathBuf,
}

impl Lane {
    /// Renders the chart with `values`, starts the cluster and every
    /// FlexInfer Deployment of the release as a process; `None` when the
    /// chart cannot be rendered here (skipped). `name` names the log
    /// folder under the target's tmp directory.
    pub async fn install(name: &str, values: Value) -> Option<Lane> {
        let logs = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("chart-scenarios")
            .join(name);
        let _ = std::fs::remove_dir_all(&logs);
        std::fs::create_dir_all(&logs).expect("log folder");
        let objects = render(&values, &logs.join("rendered.json"))?;

        let server = TestApiServer::builder()
            .bookmark_interval(Duration::from_millis(200))
            .start()
            .await
            .expect("API server");
        server
            .insert(&json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": NAMESPACE}, "status": {"phase": "Active"}}))
            .expect("namespace");
        // One GPU node, labelled as the node agent labels it.
        server
            .insert(&json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "node-1", "labels": {
                    "kubernetes.io/hostname": "node-1",
                    "flexinfer.ai/gpu.vendor": "nvidia",
                    "flexinfer.ai/gpu.arch": "sm_89",
                    "flexinfer.ai/gpu.vram": "24Gi",
                    "flexinfer.ai/gpu.count": "1"}},
                "status": {
                    "capacity": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "1"},
                    "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "1"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("node");
        server.enable_deployment_controller(Duration::ZERO);
        server.enable_endpoint_slices();
        let sim_flags = SimFlags::default();
        let (flags, pod_logs) = (sim_flags.clone(), logs.clone());
        server.enable_kubelet(MODEL_LABEL, move |pod, ip| {
            sim_process(pod, ip, &flags, &pod_logs)
        });

        let mut lane = Lane {
            server,
            objects,
            components: HashMap::new(),
            sim_flags,
            logs,
        };
        lane.apply_release().await;
        for d in lane.objects.clone() {
            if d["kind"] != "Deployment" {
                continue;
            }
            let container = &d["spec"]["template"]["spec"]["containers"][0];
            let Some(binary) = binary_of(container) else {
                continue;
            };
            let log = lane.logs.join(format!("{binary}.log"));
            let Some(mut component) = Component::of(&d, lane.server.kubeconfig_path(), log) else {
                continue;
            };
            let secrets: Vec<Value> = lane
                .objects
                .iter()
                .filter(|o| o["kind"] == "Secret")
                .cloned()
                .collect();
            component.mount_secrets(&secrets, &lane.logs);
            component.start().await;
            lane.components.insert(binary, component);
        }
        assert!(
            lane.components.contains_key("flexinfer-gateway"),
            "the release runs no gateway"
        );
        Some(lane)
    }

    /// Creates the objects of the release that are data rather than
    /// workloads or permissions (Services, ConfigMaps, FlexInfer custom
    /// resources); the workloads run as processes instead, and the test
    /// API server does not authorize.
    async fn apply_release(&self) {
        for obj in &self.objects {
            let kind = obj["kind"].as_str().unwrap_or_default();
            let api_version = obj["apiVersion"].as_str().unwrap_or_default();
            if matches!(kind, "Service" | "ConfigMap") || api_version.starts_with("ai.flexinfer/") {
                self.apply(obj.clone()).await;
            }
        }
    }

    /// The gateway component.
    pub fn gateway(&mut self) -> &mut Component {
        self.components
            .get_mut("flexinfer-gateway")
            .expect("gateway")
    }
}

impl Cluster for Lane {
    fn namespace(&self) -> &str {
        NAMESPACE
    }

    fn gateway_url(&self, path: &str) -> String {
        self.components["flexinfer-gateway"].url("http", path)
    }

    fn logs(&self) -> &Path {
        &self.logs
    }

    fn sim_flags(&self, model: &str, flags: &[&str]) {
        self.sim_flags.lock().unwrap().insert(
            model.to_string(),
            flags.iter().map(|f| f.to_string()).collect(),
        );
    }

    fn client(&self) -> kube::Client {
        self.server.client()
    }

    fn pods(&self) -> Vec<KubeletPod> {
        self.server.kubelet_pods()
    }

    async fn terminate_gateway(&mut self, limit: Duration) -> bool {
        self.gateway().terminate(limit).await
    }

    async fn start_gateway(&mut self) {
        self.gateway().start().await;
    }
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client without pooled connections (each request opens its own, as a
/// client behind a Service would see after a gateway restart).
pub fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}
