//! A real node beside a control plane of its own: Debian's containerd and
//! runc, the CNI bridge, host-local and loopback plugins, kubelet and
//! kube-proxy (iptables) built from their Go modules, CoreDNS as a
//! Deployment serving `cluster.local`, and a local registry the images come
//! from (nothing can be pulled from the internet).
//!
//! The host quirks (`docs` of the lane: ../shared TESTING facts, measured):
//! the host is cgroup v1 (`failCgroupV1: false`, cgroupfs); root lacks
//! CAP_SYS_RESOURCE (containerd's `restrict_oom_score_adj`); the pause
//! image is a small static program of ours.
//!
//! A node changes the host (sysctls, nftables rules, the CNI bridge and
//! veths, mounts, cgroups). [`RealNode::stop`] deletes every pod through
//! the kubelet, stops the processes, puts the host back as
//! [`HostState`] captured it before the start and returns what still
//! differs (nothing, when all went well).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::host::{HostState, Scope};
use super::{spawn_for_life, ControlPlane, KUBELET_TOKEN, PROXY_TOKEN};

/// The variable naming the folder of CoreDNS and the pause program
/// (`scripts/real-node.sh`).
pub const BINARIES_VAR: &str = "FLEXINFER_REAL_NODE";
/// Set to `1` to make a missing real node a failure instead of a skip.
pub const REQUIRE_VAR: &str = "FLEXINFER_REQUIRE_REAL_NODE";
/// The node's name.
pub const NODE: &str = "flexinfer-node";
/// The cluster DNS Service's address.
pub const DNS_IP: &str = "10.96.0.10";
/// The pods' address range (the CNI bridge's host-local range).
pub const POD_CIDR: &str = "10.244.0.0/24";
const BRIDGE: &str = "flexcni0";
const NETWORK: &str = "flexinfer-node";
const STATE: &str = "/run/flexinfer-node-containerd";

/// What the lane needs, when all of it was built: the control plane's
/// binaries (kubelet and kube-proxy among them), CoreDNS and the pause
/// program, and the registry the images were pushed to.
#[derive(Clone, Debug)]
pub struct NodeParts {
    /// The control plane's binaries (`FLEXINFER_CONTROL_PLANE`).
    pub plane: PathBuf,
    /// `<registry>/flexinfer`, where the images are (`FLEXINFER_IMAGE_REGISTRY`).
    pub images: String,
    /// The registry's configuration (`FLEXINFER_REGISTRY_CONFIG`).
    pub registry_config: PathBuf,
}

impl NodeParts {
    /// The parts, or `None` (the lane is skipped) when one is missing.
    ///
    /// # Panics
    /// When one is missing and [`REQUIRE_VAR`] is `1` (CI).
    pub fn find() -> Option<NodeParts> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let plane = super::binaries()
            .filter(|b| b.join("kubelet").is_file() && b.join("kube-proxy").is_file());
        let parts = match (
            plane,
            var(BINARIES_VAR),
            var("FLEXINFER_IMAGE_REGISTRY"),
            var("FLEXINFER_REGISTRY_CONFIG"),
        ) {
            (Some(plane), Some(_), Some(images), Some(config)) if which("containerd") => {
                Some(NodeParts {
                    plane,
                    images,
                    registry_config: PathBuf::from(config),
                })
            }
            _ => None,
        };
        if parts.is_none() {
            assert!(
                std::env::var(REQUIRE_VAR).as_deref() != Ok("1"),
                "{REQUIRE_VAR}=1 but the real node's parts are missing: run scripts/control-plane.sh, \
                 scripts/real-node.sh and scripts/images.sh (eval their output)"
            );
        }
        parts
    }
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The host's address towards its default route: what pods reach the API
/// server on.
fn host_ip() -> String {
    let out = Command::new("ip")
        .args(["-4", "route", "get", "1.1.1.1"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut words = out.split_whitespace();
    while let Some(w) = words.next() {
        if w == "src" {
            if let Some(ip) = words.next() {
                return ip.to_owned();
            }
        }
    }
    panic!("no host address on a default route: {out}")
}

/// One node at a time per test binary: nodes share the host's kubelet
/// port, the CNI bridge and containerd's state folder.
static BUSY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The turn of one node; the next may start when it is dropped.
struct Turn;

impl Turn {
    fn take() -> Turn {
        use std::sync::atomic::Ordering;
        while BUSY
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        Turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        BUSY.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// A running node and its control plane.
pub struct RealNode {
    /// The control plane (the API server reachable from pods).
    pub plane: ControlPlane,
    /// Where the images are: `<registry>/flexinfer`.
    pub images: String,
    plane_bin: PathBuf,
    dir: PathBuf,
    before: HostState,
    processes: Vec<(String, Child)>,
    stopped: bool,
    _turn: Turn,
}

impl RealNode {
    /// Starts the registry, the control plane, containerd, kubelet,
    /// kube-proxy and CoreDNS, and waits until the Node is Ready and DNS
    /// serves.
    pub fn start(parts: &NodeParts) -> RealNode {
        let turn = Turn::take();
        let started = Instant::now();
        let before = HostState::capture();
        let plane = ControlPlane::start_for_node(&parts.plane, &host_ip(), NODE);
        let dir = plane.dir().join("node");
        std::fs::create_dir_all(dir.join("cni")).expect("node folder");
        let mut node = RealNode {
            plane,
            images: parts.images.clone(),
            plane_bin: parts.plane.clone(),
            dir,
            before,
            processes: Vec::new(),
            stopped: false,
            _turn: turn,
        };
        node.start_registry(&parts.registry_config);
        node.start_containerd();
        node.start_kubelet(&parts.plane);
        node.start_kube_proxy(&parts.plane);
        node.wait_ready();
        node.start_dns();
        eprintln!(
            "real node Ready with DNS in {:.1} s ({})",
            started.elapsed().as_secs_f64(),
            node.dir.display()
        );
        node
    }

    fn spawn(&mut self, name: &str, program: &Path, args: &[String]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        let child = spawn_for_life(cmd).unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.processes.push((name.to_owned(), child));
    }

    /// The log of a node process, for failure messages.
    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    fn start_registry(&mut self, config: &Path) {
        let url = format!("http://{}/v2/", self.registry());
        let up = move || {
            Command::new("curl")
                .args(["-fs", "-o", "/dev/null", &url])
                .status()
                .is_ok_and(|s| s.success())
        };
        if up() {
            return;
        }
        // The previous lane's registry may still hold the port as it exits:
        // a registry that could not bind exits at once, and is started again.
        let args = ["serve".to_owned(), config.display().to_string()];
        self.spawn("registry", Path::new("/usr/bin/docker-registry"), &args);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !up() {
            let exited = self
                .processes
                .iter_mut()
                .rfind(|(n, _)| n == "registry")
                .is_some_and(|(_, child)| matches!(child.try_wait(), Ok(Some(_))));
            if Instant::now() >= deadline {
                let log = std::fs::read_to_string(self.log("registry")).unwrap_or_default();
                panic!("the local registry did not start:\n{log}");
            }
            if exited {
                self.processes.retain(|(n, _)| n != "registry");
                std::thread::sleep(Duration::from_millis(500));
                self.spawn("registry", Path::new("/usr/bin/docker-registry"), &args);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `kubectl` of this control plane as the admin, to run as a process
    /// of its own (`port-forward`, ...).
    pub fn kubectl_command(&self) -> Command {
        let mut cmd = Command::new(self.plane_bin.join("kubectl"));
        cmd.arg(format!(
            "--kubeconfig={}",
            self.plane.admin_kubeconfig.display()
        ));
        cmd
    }

    /// `host:port` of the registry.
    pub fn registry(&self) -> String {
        self.images.split('/').next().unwrap_or_default().to_owned()
    }

    fn start_containerd(&mut self) {
        let registry = self.registry();
        std::fs::write(
            self.dir.join("cni/10-flexinfer.conflist"),
            serde_json::json!({
                "cniVersion": "1.0.0", "name": NETWORK,
                "plugins": [
                    {"type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": true,
                     "hairpinMode": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                              "routes": [{"dst": "0.0.0.0/0"}],
                              "dataDir": self.dir.join("cni-ipam").display().to_string()}},
                    {"type": "portmap", "capabilities": {"portMappings": true}}
                ]
            })
            .to_string(),
        )
        .expect("CNI configuration");
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{STATE}"
[grpc]
  address = "{STATE}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images}/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{registry}"]
    endpoint = ["http://{registry}"]
  # GAIE's conformance suite names its backends' images on gcr.io and
  # registry.k8s.io: the lane's registry holds them (scripts/images.sh).
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."gcr.io"]
    endpoint = ["http://{registry}"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.k8s.io"]
    endpoint = ["http://{registry}"]
"#,
            root = self.dir.join("containerd").display(),
            images = self.images,
            cni = self.dir.join("cni").display(),
        );
        let path = self.dir.join("containerd.toml");
        std::fs::write(&path, config).expect("containerd configuration");
        self.spawn(
            "containerd",
            Path::new("containerd"),
            &["--config".into(), path.display().to_string()],
        );
    }

    fn start_kubelet(&mut self, bin: &Path) {
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             failCgroupV1: false\n\
             cgroupDriver: cgroupfs\n\
             authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: true}}, x509: {{clientCAFile: {ca}}}}}\n\
             authorization: {{mode: Webhook}}\n\
             clusterDNS: [{DNS_IP}]\n\
             clusterDomain: cluster.local\n\
             containerRuntimeEndpoint: unix://{STATE}/containerd.sock\n\
             failSwapOn: false\n\
             serializeImagePulls: false\n\
             podCIDR: {POD_CIDR}\n\
             resolvConf: /etc/resolv.conf\n\
             enforceNodeAllocatable: []\n\
             imageGCHighThresholdPercent: 100\n\
             evictionHard: {{}}\n",
            ca = self.plane.dir().join("ca.crt").display(),
        );
        let path = self.dir.join("kubelet.yaml");
        std::fs::write(&path, config).expect("kubelet configuration");
        let kubeconfig = self.dir.join("kubelet.kubeconfig");
        self.plane.write_kubeconfig(&kubeconfig, KUBELET_TOKEN);
        let args = vec![
            format!("--config={}", path.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--root-dir={}", self.dir.join("kubelet").display()),
            format!("--cert-dir={}", self.dir.join("kubelet-pki").display()),
            format!("--hostname-override={NODE}"),
            format!("--node-ip={}", host_ip()),
        ];
        self.spawn("kubelet", &bin.join("kubelet"), &args);
    }

    fn start_kube_proxy(&mut self, bin: &Path) {
        let kubeconfig = self.dir.join("kube-proxy.kubeconfig");
        self.plane.write_kubeconfig(&kubeconfig, PROXY_TOKEN);
        let args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--hostname-override={NODE}"),
            "--proxy-mode=iptables".into(),
            format!("--cluster-cidr={POD_CIDR}"),
            "--bind-address=127.0.0.1".into(),
            format!("--metrics-bind-address=127.0.0.1:{}", super::free_port()),
            format!("--healthz-bind-address=127.0.0.1:{}", super::free_port()),
        ];
        self.spawn("kube-proxy", &bin.join("kube-proxy"), &args);
    }

    fn check_alive(&mut self) {
        for (name, child) in &mut self.processes {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!("{name} exited ({status}):\n{}", tail.join("\n"));
            }
        }
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.check_alive();
            let ready = self
                .plane
                .kubectl(&[
                    "get",
                    "node",
                    NODE,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ])
                .unwrap_or_default();
            if ready == "True" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the node was not Ready within 60 s: {}",
                self.log("kubelet").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Applies `yaml` as the admin (server-side).
    pub fn apply(&self, yaml: &str) {
        let path = self.dir.join(format!("apply-{}.yaml", rand_suffix()));
        std::fs::write(&path, yaml).expect("manifest");
        self.plane
            .kubectl(&["apply", "--server-side", "-f", &path.display().to_string()])
            .unwrap_or_else(|e| panic!("apply: {e}"));
    }

    fn start_dns(&mut self) {
        let image = format!("{}/coredns:latest", self.images);
        self.apply(&coredns_manifest(&image));
        self.wait_rollout("kube-system", "deployment/coredns");
    }

    /// Waits until `object` of `namespace` rolled out (`kubectl rollout
    /// status`), within two minutes.
    pub fn wait_rollout(&self, namespace: &str, object: &str) {
        self.plane
            .kubectl(&[
                "rollout",
                "status",
                "-n",
                namespace,
                object,
                "--timeout=120s",
            ])
            .unwrap_or_else(|e| {
                panic!(
                    "{namespace}/{object} did not roll out: {e}\n{}",
                    self.plane
                        .kubectl(&["get", "pods", "-A", "-o", "wide"])
                        .unwrap_or_default()
                )
            });
    }

    /// Deletes every pod through the kubelet, stops the node and its
    /// control plane, puts the host back, and returns what still differs
    /// from the host before the start (empty when nothing does).
    pub fn stop(mut self) -> Vec<String> {
        self.teardown();
        self.before
            .differences(&HostState::capture(), &self.scope())
    }

    /// What the node makes: the CNI bridge and pod veths, mounts under its
    /// folders, the kubelet's cgroups.
    fn scope(&self) -> Scope {
        Scope {
            links: vec![BRIDGE.into(), "veth".into()],
            mounts: vec![
                self.dir.display().to_string(),
                STATE.into(),
                "/run/netns/cni-".into(),
            ],
            cgroups: vec!["kubepods".into()],
        }
    }

    fn teardown(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        // Pods first, through the kubelet, while it runs: CNI frees each
        // address and veth, volumes are unmounted. Controllers may make
        // new ones meanwhile; whatever is left is killed below.
        let _ = self.plane.kubectl(&[
            "delete",
            "deployments,daemonsets,statefulsets,jobs,pods",
            "--all",
            "-A",
            "--wait=false",
        ]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let left = self
                .plane
                .kubectl(&["get", "pods", "-A", "-o", "name"])
                .unwrap_or_default();
            if left.trim().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        for name in ["kube-proxy", "kubelet"] {
            self.stop_process(name);
        }
        // Containers the kubelet did not stop: their shims, then every
        // process left in the pods' cgroups.
        let _ = Command::new("pkill")
            .args([
                "-KILL",
                "-f",
                &format!("containerd-shim-runc-v2 .*-address {STATE}/"),
            ])
            .status();
        for _ in 0..20 {
            if kill_cgroup_tasks("kubepods") == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        for name in ["containerd", "registry"] {
            self.stop_process(name);
        }
        self.before.restore(&self.scope());
        for netns in std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = netns.file_name().to_string_lossy().into_owned();
            if name.starts_with("cni-")
                && !self.before.has_mount(&netns.path().display().to_string())
            {
                let _ = std::fs::remove_file(netns.path());
            }
        }
        let _ = std::fs::remove_dir_all(STATE);
    }

    fn stop_process(&mut self, name: &str) {
        if let Some((_, child)) = self.processes.iter_mut().find(|(n, _)| n == name) {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends SIGKILL to every process in the cgroup folders named `name` (and
/// below) of every controller; how many there were.
fn kill_cgroup_tasks(name: &str) -> usize {
    fn walk(dir: &Path, pids: &mut std::collections::BTreeSet<String>) {
        if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            pids.extend(text.split_whitespace().map(str::to_owned));
        }
        for child in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if child.path().is_dir() {
                walk(&child.path(), pids);
            }
        }
    }
    let mut pids = std::collections::BTreeSet::new();
    for controller in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        walk(&controller.path().join(name), &mut pids);
    }
    for pid in &pids {
        let _ = Command::new("kill").args(["-KILL", pid]).status();
    }
    pids.len()
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn rand_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{nanos:09}")
}

/// CoreDNS as clusters run it: a ServiceAccount allowed to list and watch
/// Services, EndpointSlices, Pods and Namespaces, its Corefile, one
/// replica (as the image's user, on port 1053: no capability needed) and
/// the `kube-dns` Service on [`DNS_IP`].
fn coredns_manifest(image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: coredns, namespace: kube-system}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "system:coredns"}}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "system:coredns"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}}
subjects: [{{kind: ServiceAccount, name: coredns, namespace: kube-system}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: coredns, namespace: kube-system}}
data:
  Corefile: |
    .:1053 {{
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {{
           pods insecure
           fallthrough in-addr.arpa ip6.arpa
        }}
        forward . /etc/resolv.conf
        cache 30
        loop
        loadbalance
    }}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: coredns, namespace: kube-system, labels: {{k8s-app: kube-dns}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{k8s-app: kube-dns}}}}
  template:
    metadata: {{labels: {{k8s-app: kube-dns}}}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      containers:
      - name: coredns
        image: {image}
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {{containerPort: 1053, name: dns, protocol: UDP}}
        - {{containerPort: 1053, name: dns-tcp, protocol: TCP}}
        readinessProbe: {{httpGet: {{path: /ready, port: 8181}}, periodSeconds: 1}}
        securityContext:
          readOnlyRootFilesystem: true
          allowPrivilegeEscalation: false
          runAsNonRoot: true
          capabilities: {{drop: [ALL]}}
          seccompProfile: {{type: RuntimeDefault}}
        volumeMounts: [{{name: config, mountPath: /etc/coredns, readOnly: true}}]
      volumes: [{{name: config, configMap: {{name: coredns}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: kube-dns, namespace: kube-system, labels: {{k8s-app: kube-dns}}}}
spec:
  selector: {{k8s-app: kube-dns}}
  clusterIP: {DNS_IP}
  ports:
  - {{name: dns, port: 53, targetPort: 1053, protocol: UDP}}
  - {{name: dns-tcp, port: 53, targetPort: 1053, protocol: TCP}}
"#
    )
}
