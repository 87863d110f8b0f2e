//! A real Kubernetes control plane for tests: etcd, kube-apiserver and
//! kube-controller-manager (and kube-scheduler on request) as processes on
//! loopback, built from their published Go modules by
//! `scripts/control-plane.sh`, which prints `FLEXINFER_CONTROL_PLANE`.
//!
//! The API server runs as a cluster's does: RBAC (`Node,RBAC`), admission
//! plugins at their defaults, a ServiceAccount token issuer with its own
//! signing key, TLS with a CA of its own, and an audit log of every
//! request's user, verb, resource and status, from which
//! [`ControlPlane::forbidden`] reads the 403s. The test itself is an admin
//! (a static token in `system:masters`); a component under test should
//! talk with its own ServiceAccount's token ([`ControlPlane::kubeconfig_for`]).
//!
//! [`ControlPlane::shared`] starts one per test binary, on first use; its
//! processes die with the test binary (parent-death signal), and its folder
//! is removed by the OS's temp cleaning, not by the tests.

pub mod host;
pub mod kubelet;
pub mod netns;
pub mod node;

pub use crate::sim::KubeletPod;
pub use kubelet::{KubeletConfig, RealKubelet};
pub use netns::PodNetwork;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The variable naming the folder of the built binaries.
pub const BINARIES_VAR: &str = "FLEXINFER_CONTROL_PLANE";
/// Set to `1` to make a missing control plane a failure instead of a skip.
pub const REQUIRE_VAR: &str = "FLEXINFER_REQUIRE_CONTROL_PLANE";

const ADMIN_TOKEN: &str = "flexinfer-test-admin";
/// The static token of a real node's kubelet.
pub(crate) const KUBELET_TOKEN: &str = "flexinfer-test-kubelet";
/// The static token of a real node's kube-proxy.
pub(crate) const PROXY_TOKEN: &str = "flexinfer-test-kube-proxy";
const READY_WITHIN: Duration = Duration::from_secs(120);

/// The folder of the control plane's binaries, when it was built.
///
/// # Panics
/// When it was not and [`REQUIRE_VAR`] is `1` (CI).
pub fn binaries() -> Option<PathBuf> {
    let dir = std::env::var_os(BINARIES_VAR).map(PathBuf::from);
    let found = dir.filter(|d| {
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
            "helm",
        ]
        .iter()
        .all(|b| d.join(b).is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var(REQUIRE_VAR).as_deref() != Ok("1"),
            "{REQUIRE_VAR}=1 but {BINARIES_VAR} names no built control plane: run \
             `eval \"$(scripts/control-plane.sh)\"`"
        );
    }
    found
}

/// A request the API server refused (403, 422, ...), from its audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    /// Who asked (`system:serviceaccount:ns:name`, ...).
    pub user: String,
    /// The verb (`get`, `list`, `watch`, `create`, `patch`, ...).
    pub verb: String,
    /// `group/resource[/subresource]`, `""` group for the core API.
    pub resource: String,
    /// The namespace, when namespaced.
    pub namespace: String,
    /// The request URI.
    pub uri: String,
}

/// A running control plane.
pub struct ControlPlane {
    dir: PathBuf,
    bin: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    ca: PathBuf,
    /// An admin kubeconfig (the tests' own identity).
    pub admin_kubeconfig: PathBuf,
    audit_log: PathBuf,
    children: Mutex<Vec<(String, Child)>>,
    /// The host address the API server listens on for pods and a node
    /// (see [`ControlPlane::start_for_node`]); loopback only when `None`.
    reach: Option<String>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ControlPlane({})", self.server)
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a serving certificate for 127.0.0.1 and localhost signed by it,
/// and an RSA key pair for ServiceAccount tokens, in `dir`.
fn make_keys(dir: &Path, reach: Option<&str>) {
    let ossl = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(dir));
    ossl(&["genrsa", "-out", "ca.key", "2048"]);
    ossl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=flexinfer-test-ca",
        "-days",
        "30",
        "-out",
        "ca.crt",
    ]);
    ossl(&["genrsa", "-out", "serving.key", "2048"]);
    ossl(&[
        "req",
        "-new",
        "-key",
        "serving.key",
        "-subj",
        "/CN=kube-apiserver",
        "-out",
        "serving.csr",
    ]);
    let extra = reach.map_or(String::new(), |ip| {
        format!(",IP:{ip},IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc.cluster.local")
    });
    std::fs::write(
        dir.join("san.ext"),
        format!(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc{extra}\n\
             extendedKeyUsage=serverAuth\n"
        ),
    )
    .expect("san.ext");
    ossl(&[
        "x509",
        "-req",
        "-in",
        "serving.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        "san.ext",
        "-out",
        "serving.crt",
    ]);
    ossl(&["genrsa", "-out", "sa.key", "2048"]);
    ossl(&["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
    // The API server's client certificate towards kubelets (logs, exec,
    // port-forward).
    ossl(&["genrsa", "-out", "kubelet-client.key", "2048"]);
    ossl(&[
        "req",
        "-new",
        "-key",
        "kubelet-client.key",
        "-subj",
        "/CN=kube-apiserver-kubelet-client/O=system:masters",
        "-out",
        "kubelet-client.csr",
    ]);
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("client.ext");
    ossl(&[
        "x509",
        "-req",
        "-in",
        "kubelet-client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        "client.ext",
        "-out",
        "kubelet-client.crt",
    ]);
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Starts `cmd` so that it is killed when the test binary exits: from a
/// thread that lives as long as the process (a parent-death signal fires
/// when the spawning *thread* ends, and each test runs on a thread of its
/// own).
pub(crate) fn spawn_for_life(mut cmd: Command) -> std::io::Result<Child> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("control-plane-keeper".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // Every sender is static: never reached while the process runs.
                loop {
                    std::thread::park();
                }
            })
            .expect("keeper thread");
        Mutex::new(tx)
    });
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (reply, answer) = mpsc::channel();
    keeper
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply))
        .map_err(|_| std::io::Error::other("keeper thread gone"))?;
    answer
        .recv()
        .map_err(|_| std::io::Error::other("keeper thread gone"))?
}

/// Records every request with its user, verb, resource and answer.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

impl ControlPlane {
    /// The control plane of this test binary, started on first use; `None`
    /// when it was not built (the caller says the test is skipped).
    pub fn shared() -> Option<&'static ControlPlane> {
        static SHARED: OnceLock<Option<ControlPlane>> = OnceLock::new();
        SHARED
            .get_or_init(|| binaries().map(|bin| ControlPlane::start(&bin)))
            .as_ref()
    }

    /// Starts etcd, kube-apiserver and kube-controller-manager from the
    /// binaries in `bin`, and waits until the API server is ready and the
    /// `default` ServiceAccount exists.
    pub fn start(bin: &Path) -> Self {
        Self::start_with(bin, None)
    }

    /// A control plane for a real node ([`node::RealNode`]): the API server
    /// listens on `ip` (a host address pods reach through the `kubernetes`
    /// Service, which kube-proxy maps to it) with that address, the
    /// Service's `10.96.0.1` and its DNS names in its certificate; every
    /// controller of kube-controller-manager runs (but the cloud's and
    /// node IPAM), kube-scheduler too, and static tokens name the node's
    /// kubelet (`system:node:<node>`) and kube-proxy.
    pub fn start_for_node(bin: &Path, ip: &str, node: &str) -> Self {
        let plane = Self::start_with(bin, Some((ip, node)));
        let kcm = plane.dir.join("kcm.kubeconfig");
        let args = [
            format!("--kubeconfig={}", kcm.display()),
            format!("--authentication-kubeconfig={}", kcm.display()),
            format!("--authorization-kubeconfig={}", kcm.display()),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        plane.spawn("kube-scheduler", &args);
        plane
    }

    fn start_with(bin: &Path, node: Option<(&str, &str)>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("flexinfer-control-plane-")
            .tempdir()
            .expect("tempdir")
            .keep();
        make_keys(&dir, node.map(|(ip, _)| ip));
        let plane = ControlPlane {
            server: String::new(),
            ca: dir.join("ca.crt"),
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            audit_log: dir.join("audit.log"),
            bin: bin.to_path_buf(),
            dir,
            children: Mutex::new(Vec::new()),
            reach: node.map(|(ip, _)| ip.to_owned()),
        };
        plane.boot(node.map_or("", |(_, n)| n))
    }

    fn boot(mut self, node: &str) -> Self {
        let started = Instant::now();
        let (client, peer, api) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client}");
        self.spawn(
            "etcd",
            &[
                "--name=test",
                &format!("--data-dir={}", self.dir.join("etcd").display()),
                &format!("--listen-client-urls={etcd_url}"),
                &format!("--advertise-client-urls={etcd_url}"),
                &format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                &format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                &format!("--initial-cluster=test=http://127.0.0.1:{peer}"),
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        );
        let mut tokens = format!("{ADMIN_TOKEN},flexinfer-test-admin,1,\"system:masters\"\n");
        if self.reach.is_some() {
            tokens.push_str(&format!(
                "{KUBELET_TOKEN},system:node:{node},2,\"system:nodes\"\n\
                 {PROXY_TOKEN},system:kube-proxy,3,\"\"\n"
            ));
        }
        std::fs::write(self.dir.join("tokens.csv"), tokens).expect("token file");
        std::fs::write(self.dir.join("audit-policy.yaml"), AUDIT_POLICY).expect("audit policy");
        let d = |name: &str| self.dir.join(name).display().to_string();
        let (bind, advertise) = match &self.reach {
            Some(ip) => ("0.0.0.0", ip.clone()),
            None => ("127.0.0.1", "127.0.0.1".to_owned()),
        };
        self.server = format!("https://{advertise}:{api}");
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--bind-address={bind}"),
            format!("--advertise-address={advertise}"),
            format!("--secure-port={api}"),
            format!("--tls-cert-file={}", d("serving.crt")),
            format!("--tls-private-key-file={}", d("serving.key")),
            format!("--client-ca-file={}", d("ca.crt")),
            format!("--token-auth-file={}", d("tokens.csv")),
            "--authorization-mode=Node,RBAC".into(),
            format!("--service-account-issuer={}", self.server),
            format!("--service-account-key-file={}", d("sa.pub")),
            format!("--service-account-signing-key-file={}", d("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            format!("--audit-policy-file={}", d("audit-policy.yaml")),
            format!("--audit-log-path={}", d("audit.log")),
            "--audit-log-format=json".into(),
            "--audit-log-mode=blocking".into(),
            "--v=0".into(),
        ];
        if self.reach.is_some() {
            args.extend([
                format!("--kubelet-client-certificate={}", d("kubelet-client.crt")),
                format!("--kubelet-client-key={}", d("kubelet-client.key")),
                "--kubelet-preferred-address-types=InternalIP".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn("kube-apiserver", &args);
        self.write_kubeconfig(&self.admin_kubeconfig, ADMIN_TOKEN);
        self.wait_ready(started);
        let kcm_kubeconfig = self.dir.join("kcm.kubeconfig");
        self.write_kubeconfig(&kcm_kubeconfig, ADMIN_TOKEN);
        let kcm_args = [
            format!("--kubeconfig={}", kcm_kubeconfig.display()),
            format!("--authentication-kubeconfig={}", kcm_kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kcm_kubeconfig.display()),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()),
            match self.reach {
                // A real node: every controller but the cloud's and the
                // node IPAM's (the node's CNI range is static).
                Some(_) => "--controllers=*,-nodeipam,-cloud-node-lifecycle,\
                            -service-lb-controller,-node-route-controller"
                    .into(),
                None => "--controllers=deployment-controller,replicaset-controller,\
                         endpointslice-controller,garbage-collector-controller,\
                         serviceaccount-controller,serviceaccount-token-controller,\
                         namespace-controller,job-controller,ttl-after-finished-controller,\
                         persistentvolumeclaim-protection-controller,\
                         persistentvolume-protection-controller"
                    .into(),
            },
            format!("--service-account-private-key-file={}", d("sa.key")),
            format!("--root-ca-file={}", d("ca.crt")),
            "--use-service-account-credentials=true".into(),
            "--v=0".into(),
        ];
        let kcm_args: Vec<&str> = kcm_args.iter().map(String::as_str).collect();
        self.spawn("kube-controller-manager", &kcm_args);
        self.wait_for_default_service_account(started);
        eprintln!(
            "control plane ready at {} in {:.1} s ({})",
            self.server,
            started.elapsed().as_secs_f64(),
            self.dir.display()
        );
        self
    }

    /// Starts the binary `name` with `args`, its output in `<name>.log`.
    pub fn spawn(&self, name: &str, args: &[&str]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log file");
        let mut cmd = Command::new(self.bin.join(name));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        let child = spawn_for_life(cmd).unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_owned(), child));
    }

    /// Panics with the component's log when it exited.
    fn check_alive(&self) {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        for (name, child) in children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                panic!("{name} exited ({status}):\n{tail}");
            }
        }
    }

    fn wait_ready(&self, started: Instant) {
        loop {
            self.check_alive();
            if self.kubectl(&["get", "--raw", "/readyz"]).is_ok() {
                return;
            }
            assert!(
                started.elapsed() < READY_WITHIN,
                "kube-apiserver not ready within {READY_WITHIN:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn wait_for_default_service_account(&self, started: Instant) {
        loop {
            self.check_alive();
            if self
                .kubectl(&["get", "serviceaccount", "default", "-n", "default"])
                .is_ok()
            {
                return;
            }
            assert!(
                started.elapsed() < READY_WITHIN,
                "the default ServiceAccount did not appear within {READY_WITHIN:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Writes a kubeconfig for this server with `token`.
    pub fn write_kubeconfig(&self, path: &Path, token: &str) {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: user\n  user:\n    token: {token}\n\
             contexts:\n- name: test\n  context: {{cluster: test, user: user, namespace: default}}\n\
             current-context: test\n",
            self.server,
            self.ca.display()
        );
        std::fs::write(path, yaml).expect("kubeconfig");
    }

    /// `kubectl` as the admin: its stdout, or its stderr as the error.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(self.bin.join("kubectl"))
            .arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()))
            .args(args)
            .output()
            .map_err(|e| format!("cannot run kubectl: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The `helm` binary that was built with the control plane.
    pub fn helm(&self) -> Command {
        let mut cmd = Command::new(self.bin.join("helm"));
        cmd.env("KUBECONFIG", &self.admin_kubeconfig)
            .env("HELM_CACHE_HOME", self.dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.join("helm/data"));
        cmd
    }

    /// A kube client for the admin.
    pub async fn client(&self) -> kube::Client {
        self.client_from(&self.admin_kubeconfig).await
    }

    /// A kube client from a kubeconfig written by [`Self::kubeconfig_for`].
    pub async fn client_from(&self, kubeconfig: &Path) -> kube::Client {
        let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
            .await
            .expect("client config");
        kube::Client::try_from(config).expect("client")
    }

    /// A kubeconfig that authenticates as ServiceAccount `name` of
    /// `namespace`, with a token from the TokenRequest API (one hour).
    pub fn kubeconfig_for(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self
            .kubectl(&["create", "token", name, "-n", namespace, "--duration=1h"])
            .unwrap_or_else(|e| panic!("token for {namespace}/{name}: {e}"));
        let path = self.dir.join(format!("sa-{namespace}-{name}.kubeconfig"));
        self.write_kubeconfig(&path, token.trim());
        path
    }

    /// The folder holding logs, keys and kubeconfigs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every request the API server answered 403 so far, from its audit log.
    pub fn forbidden(&self) -> Vec<Forbidden> {
        self.answered(403)
    }

    /// Every request the API server answered with status `code` so far
    /// (422 for an invalid object or an immutable field changed, 409 for a
    /// conflict), from its audit log.
    pub fn answered(&self, code: u16) -> Vec<Forbidden> {
        let Ok(file) = std::fs::File::open(&self.audit_log) else {
            return Vec::new();
        };
        BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
            .filter(|e| e["stage"] == "ResponseComplete" && e["responseStatus"]["code"] == code)
            .map(|e| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                let r = &e["objectRef"];
                let mut resource = format!("{}/{}", s(&r["apiGroup"]), s(&r["resource"]));
                if let Some(sub) = r["subresource"].as_str() {
                    resource.push('/');
                    resource.push_str(sub);
                }
                Forbidden {
                    user: s(&e["user"]["username"]),
                    verb: s(&e["verb"]),
                    resource,
                    namespace: s(&r["namespace"]),
                    uri: s(&e["requestURI"]),
                }
            })
            .collect()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        for (_, child) in children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // A lane that passed leaves nothing behind (a real node's image
        // snapshots alone take most of a GiB); a failing one keeps its
        // logs and state for a look. Never while anything is mounted
        // below it: removing would reach into the mounted tree.
        if !std::thread::panicking() && !has_mounts_below(&self.dir) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Whether a file system is mounted at or below `dir` (`/proc/mounts`;
/// `true` when it cannot be read).
fn has_mounts_below(dir: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return true;
    };
    let dir = dir.to_string_lossy();
    mounts.lines().any(|line| {
        line.split_whitespace()
            .nth(1)
            .is_some_and(|point| point.starts_with(&*dir))
    })
}
