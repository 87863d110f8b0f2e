//! The real-node lane, first part: FlexInfer's container images, built from
//! `docker/Dockerfile` by `scripts/images.sh` (stand-in bases, host-built
//! binaries, pushed to a local registry), run in a real container runtime
//! as the chart runs them: as the image's user with a read-only root
//! filesystem, no capabilities and no privilege escalation, `/tmp` an
//! empty directory. Skipped, saying so, where the images were not built
//! (`eval "$(scripts/images.sh)"` exports `FLEXINFER_IMAGE_REGISTRY`); CI
//! requires them (`FLEXINFER_REQUIRE_IMAGES=1`).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{chat, free_port};

const DOCKER: &str = "/usr/bin/docker";
const DOCKERD: &str = "/usr/sbin/dockerd";
const SOCKET: &str = "/run/flexinfer-docker-lane.sock";

/// Every runtime target of the Dockerfile and its entrypoint binary.
const TARGETS: [&str; 8] = [
    "flexinfer-gateway",
    "flexinfer-operator",
    "flexinfer-sched",
    "flexinfer-agent",
    "flexinfer-flashload",
    "flexinfer-bench",
    "flexinfer-sim",
    "flexinfer-conformance",
];

/// The images' registry path and tag, or `None` (skipped) when they were
/// not built.
fn images() -> Option<(String, String)> {
    match (
        std::env::var("FLEXINFER_IMAGE_REGISTRY"),
        std::env::var("FLEXINFER_IMAGE_TAG"),
    ) {
        (Ok(registry), Ok(tag)) if !registry.is_empty() => Some((registry, tag)),
        _ => {
            assert!(
                std::env::var("FLEXINFER_REQUIRE_IMAGES").as_deref() != Ok("1"),
                "FLEXINFER_REQUIRE_IMAGES=1 but no images were built (eval \"$(scripts/images.sh)\")"
            );
            eprintln!("skipped: no images built (run `eval \"$(scripts/images.sh)\"`)");
            None
        }
    }
}

/// Debian's Docker daemon on a socket of its own, over the data
/// `scripts/images.sh` left (the images are there), changing nothing on
/// the host (no iptables rules, no bridge); stopped when dropped.
struct Daemon {
    child: std::process::Child,
    root: PathBuf,
}

impl Daemon {
    fn start() -> Daemon {
        let cache =
            PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/flexinfer/docker");
        let root = std::env::temp_dir().join(format!("flexinfer-dockerd-{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("exec root");
        let log = std::fs::File::create(root.join("dockerd.log")).expect("log");
        let child = Command::new(DOCKERD)
            .arg(format!("--data-root={}", cache.join("data").display()))
            .arg(format!("--exec-root={}", root.join("exec").display()))
            .arg(format!("--pidfile={}", root.join("dockerd.pid").display()))
            .arg(format!("--host=unix://{SOCKET}"))
            .args([
                "--iptables=false",
                "--ip-forward=false",
                "--ip-masq=false",
                "--bridge=none",
            ])
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("dockerd");
        let daemon = Daemon { child, root };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !daemon.docker(&["info"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "dockerd did not start: {}",
                daemon.root.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        daemon
    }

    fn docker(&self, args: &[&str]) -> Output {
        Command::new(DOCKER)
            .env("DOCKER_HOST", format!("unix://{SOCKET}"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("docker")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        assert!(
            out.status.success(),
            "docker {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let running = self.docker(&["ps", "-q"]);
        for id in String::from_utf8_lossy(&running.stdout).split_whitespace() {
            let _ = self.docker(&["rm", "-f", id]);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The daemon's network namespace mount under its exec root.
        let prefix = self.root.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        ours.sort_unstable_by(|a, b| b.cmp(a));
        for mount in ours {
            let _ = Command::new("umount").args(["-l", mount]).status();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `docker run` as the chart runs a FlexInfer container.
fn restricted(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--read-only",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        "--tmpfs=/tmp:size=64m",
        "--network=host",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_run_as_nonroot_read_only_and_the_gateway_image_serves() {
    let Some((registry, tag)) = images() else {
        return;
    };
    let docker = Daemon::start();
    let image = |target: &str| format!("{registry}/{target}:{tag}");

    // Every image: runs as 65532 (not root, as the chart's
    // runAsNonRoot requires), and its binary starts in it.
    for target in TARGETS {
        let name = image(target);
        let user = docker.ok(&["image", "inspect", "-f", "{{.Config.User}}", &name]);
        assert_eq!(user, "65532:65532", "{target} runs as {user:?}");
        let size = docker.ok(&["image", "inspect", "-f", "{{.Size}}", &name]);
        eprintln!(
            "{name}: {} MiB",
            size.parse::<u64>().unwrap_or(0) / (1 << 20)
        );
        let args = restricted(&["--rm", &name, "--help"]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let help = docker.ok(&refs);
        assert!(
            help.to_lowercase().contains("usage"),
            "{target} --help: {help}"
        );
    }

    // The gateway image serves a model of the simulator image, both as
    // the chart runs them (here on the host's network).
    let (sim_port, gw_port, metrics_port) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().expect("temp dir");
    let models = dir.path().join("models.yaml");
    std::fs::write(
        &models,
        format!(
            "models:\n  - name: m\n    backendModel: sim\n    endpoints: ['http://127.0.0.1:{sim_port}']\n"
        ),
    )
    .expect("models file");
    // The container's user reads the mounted file.
    let _ = Command::new("chmod").arg("a+rx").arg(dir.path()).status();
    let _ = Command::new("chmod").arg("a+r").arg(&models).status();
    let sim = restricted(&[
        "-d",
        &image("flexinfer-sim"),
        "--port",
        &sim_port.to_string(),
        "--model",
        "sim",
    ]);
    let refs: Vec<&str> = sim.iter().map(String::as_str).collect();
    docker.ok(&refs);
    let mount = format!(
        "--volume={}:/etc/flexinfer/models.yaml:ro",
        models.display()
    );
    let gw = restricted(&[
        "-d",
        &mount,
        &image("flexinfer-gateway"),
        "--config",
        "/etc/flexinfer/models.yaml",
        "--listen",
        &format!("127.0.0.1:{gw_port}"),
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
    ]);
    let refs: Vec<&str> = gw.iter().map(String::as_str).collect();
    let gw_id = docker.ok(&refs);
    let client = crate::support::client();
    let deadline = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let resp = client
            .post(format!("http://127.0.0.1:{gw_port}/v1/chat/completions"))
            .json(&chat("m"))
            .send()
            .await;
        match resp {
            Ok(r) if r.status() == 200 => break r.text().await.unwrap_or_default(),
            other => {
                assert!(
                    Instant::now() < deadline,
                    "the gateway container never answered: {other:?}\n{}",
                    String::from_utf8_lossy(&docker.docker(&["logs", &gw_id]).stderr)
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(answer.contains("chat.completion"), "{answer}");
    let ready = client
        .get(format!("http://127.0.0.1:{metrics_port}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 200);
}

/// The real node: a Deployment of the simulator image, pulled from the
/// local registry, runs under Pod Security `restricted` (enforced on its
/// namespace), answers through its ClusterIP Service from the host and by
/// Service name from another pod (cluster DNS), and the host is left as
/// it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_from_the_local_registry_serves_through_a_cluster_ip_and_dns() {
    use flexinfer_testkube::real::node::{NodeParts, RealNode};
    let Some(parts) = NodeParts::find() else {
        eprintln!("skipped: the real node's parts were not built");
        return;
    };
    let node = tokio::task::spawn_blocking(move || RealNode::start(&parts))
        .await
        .expect("node");
    let sim = format!(
        "{}/flexinfer-sim:{}",
        node.images,
        std::env::var("FLEXINFER_IMAGE_TAG").unwrap_or_default()
    );
    node.apply(&format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: lane
  labels: {{pod-security.kubernetes.io/enforce: restricted}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: sim, namespace: lane}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: sim}}}}
  template:
    metadata: {{labels: {{app: sim}}}}
    spec:
      containers:
      - name: sim
        image: {sim}
        args: [--host, 0.0.0.0, --port, "8000", --model, sim]
        ports: [{{containerPort: 8000}}]
        readinessProbe: {{httpGet: {{path: /health, port: 8000}}, periodSeconds: 1}}
        securityContext:
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          allowPrivilegeEscalation: false
          capabilities: {{drop: [ALL]}}
          seccompProfile: {{type: RuntimeDefault}}
---
apiVersion: v1
kind: Service
metadata: {{name: sim, namespace: lane}}
spec:
  selector: {{app: sim}}
  ports: [{{port: 80, targetPort: 8000}}]
"#
    ));
    node.wait_rollout("lane", "deployment/sim");
    let ip = node
        .plane
        .kubectl(&[
            "get",
            "svc",
            "sim",
            "-n",
            "lane",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
        .expect("service");
    // From the host, through kube-proxy's rules.
    let deadline = Instant::now() + Duration::from_secs(30);
    let models = loop {
        match crate::support::client()
            .get(format!("http://{ip}/v1/models"))
            .send()
            .await
        {
            Ok(r) if r.status() == 200 => break r.text().await.unwrap_or_default(),
            other => {
                assert!(Instant::now() < deadline, "ClusterIP {ip}: {other:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(models.contains("\"sim\""), "{models}");
    // The kubelet serves logs to the API server.
    let logs = node
        .plane
        .kubectl(&["logs", "-n", "lane", "deployment/sim", "--tail=5"])
        .expect("kubectl logs through the kubelet");
    assert!(logs.contains("listening"), "{logs}");
    // From a pod, by the Service's name through cluster DNS: the bench
    // image loads the simulator for two requests.
    let tag = std::env::var("FLEXINFER_IMAGE_TAG").unwrap_or_default();
    node.apply(&format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: probe, namespace: lane}}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: probe
        image: {images}/flexinfer-bench:{tag}
        args: [load, --url, "http://sim.lane.svc.cluster.local", --model, sim, -c, "1", -n, "2", --warmup, "0", --json]
        securityContext:
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          allowPrivilegeEscalation: false
          capabilities: {{drop: [ALL]}}
          seccompProfile: {{type: RuntimeDefault}}
"#,
        images = node.images
    ));
    let done = node.plane.kubectl(&[
        "wait",
        "-n",
        "lane",
        "job/probe",
        "--for=condition=Complete",
        "--timeout=90s",
    ]);
    let probe_log = node
        .plane
        .kubectl(&["logs", "-n", "lane", "job/probe"])
        .unwrap_or_default();
    assert!(done.is_ok(), "the probe Job failed: {done:?}\n{probe_log}");
    let differences = tokio::task::spawn_blocking(move || node.stop())
        .await
        .expect("stop");
    assert!(
        differences.is_empty(),
        "the host was not restored: {differences:#?}"
    );
}

/// The pod IPs of the chart's gateway replicas.
fn gateway_ips(node: &flexinfer_testkube::real::node::RealNode, namespace: &str) -> Vec<String> {
    node.plane
        .kubectl(&[
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            "app.kubernetes.io/component=gateway",
            "-o",
            "jsonpath={.items[*].status.podIP}",
        ])
        .expect("gateway pods")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Every pod of `namespace`: its name, whether Ready, and its containers'
/// restarts.
fn pods_of(
    node: &flexinfer_testkube::real::node::RealNode,
    namespace: &str,
) -> Vec<(String, bool, u64)> {
    let list: serde_json::Value = serde_json::from_str(
        &node
            .plane
            .kubectl(&["get", "pods", "-n", namespace, "-o", "json"])
            .expect("pods"),
    )
    .expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        // A Job's pod that ran to completion is done, not unready.
        .filter(|p| p["status"]["phase"] != "Succeeded")
        .map(|p| {
            let ready = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let restarts = p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["restartCount"].as_u64())
                .sum();
            (
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                ready,
                restarts,
            )
        })
        .collect()
}

/// The chart with its defaults on the real node, images from the local
/// registry (`image.registry` set as a user with a private registry
/// does), in a namespace enforcing Pod Security `restricted`: every
/// component Ready by its own probes with no restart, the two gateway
/// replicas sharing routing state, a Model of the simulator image answering
/// from zero through the gateway's ClusterIP, and the host left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_on_the_real_node_with_its_defaults() {
    use flexinfer_testkube::real::node::{NodeParts, RealNode};
    let Some(parts) = NodeParts::find() else {
        eprintln!("skipped: the real node's parts were not built");
        return;
    };
    let node = tokio::task::spawn_blocking(move || RealNode::start(&parts))
        .await
        .expect("node");
    let namespace = "flexinfer-system";
    node.plane
        .kubectl(&["create", "namespace", namespace])
        .expect("namespace");
    node.plane
        .kubectl(&[
            "label",
            "namespace",
            namespace,
            "pod-security.kubernetes.io/enforce=restricted",
        ])
        .expect("label");
    let started = Instant::now();
    let registry = format!("image.registry={}", node.images);
    let out = node
        .plane
        .helm()
        .args([
            "install",
            "flexinfer",
            "helm/flexinfer",
            "--namespace",
            namespace,
            "--set",
            &registry,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR").trim_end_matches("/gateway"))
        .output()
        .expect("helm");
    assert!(
        out.status.success(),
        "helm install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.wait_rollout(namespace, "deployment/flexinfer-proxy");
    node.wait_rollout(namespace, "daemonset/flexinfer-agent");
    let pods = pods_of(&node, namespace);
    eprintln!(
        "Ready {:.1} s after helm install: {pods:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        pods.iter()
            .all(|(_, ready, restarts)| *ready && *restarts == 0),
        "{pods:?}"
    );

    // The node agent labelled the Node from what it read through its
    // mounts (the CPU path).
    let labels = node
        .plane
        .kubectl(&[
            "get",
            "node",
            flexinfer_testkube::real::node::NODE,
            "-o",
            "jsonpath={.metadata.labels}",
        ])
        .expect("node");
    eprintln!("node labels: {labels}");
    assert!(
        labels.contains("flexinfer.ai/"),
        "the agent set no label: {labels}"
    );

    // The two replicas found each other through the headless Service (by
    // DNS) and share: each merged the other's snapshot.
    let client = crate::support::client();
    let ips = gateway_ips(&node, namespace);
    assert_eq!(ips.len(), 2, "{ips:?}");
    for ip in &ips {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = client
                .get(format!("http://{ip}:9090/metrics"))
                .send()
                .await
                .ok();
            let text = match text {
                Some(r) => r.text().await.unwrap_or_default(),
                None => String::new(),
            };
            let peers = crate::support::metric_value(&text, "flexinfer_proxy_routing_peers ");
            let applied = crate::support::metric_value(
                &text,
                "flexinfer_proxy_routing_peer_snapshots_total{result=\"applied\"}",
            );
            if peers == 1.0 && applied >= 1.0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {ip} shares with no peer: peers {peers}, snapshots {applied}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    // A CPU Model on the simulator image (llama.cpp's backend: the image
    // gets the args llama-server gets), from zero, through the gateway's
    // ClusterIP Service.
    let tag = std::env::var("FLEXINFER_IMAGE_TAG").unwrap_or_default();
    node.apply(&format!(
        r#"apiVersion: ai.flexinfer/v1alpha2
kind: Model
metadata:
  name: sim-m
  namespace: {namespace}
  annotations: {{flexinfer.ai/routing: cache-aware}}
spec:
  backend: llamacpp
  source: hf://flexinfer/sim-m
  image: {images}/flexinfer-sim:{tag}
  cache: {{strategy: None}}
  securityContext: {{runAsNonRoot: true}}
  serverless: {{enabled: true, idleTimeout: 60s, coldStartTimeout: 120s}}
  resources: {{requests: {{cpu: 100m, memory: 64Mi}}, limits: {{memory: 256Mi}}}}
"#,
        images = node.images
    ));
    let proxy = node
        .plane
        .kubectl(&[
            "get",
            "svc",
            "flexinfer-proxy",
            "-n",
            namespace,
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
        .expect("proxy service");
    let from_zero = Instant::now();
    let resp = client
        .post(format!("http://{proxy}/v1/chat/completions"))
        .json(&chat("sim-m"))
        .timeout(Duration::from_secs(150))
        .send()
        .await
        .expect("chat through the ClusterIP");
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(
        status,
        200,
        "{body}\n{}\n{}",
        node.plane
            .kubectl(&[
                "get",
                "pods,models.ai.flexinfer",
                "-n",
                namespace,
                "-o",
                "wide"
            ])
            .unwrap_or_default(),
        node.plane
            .kubectl(&["get", "events", "-n", namespace])
            .unwrap_or_default()
    );
    eprintln!(
        "from zero through the ClusterIP in {:.1} s",
        from_zero.elapsed().as_secs_f64()
    );
    // From a client pod too, by the gateway's Service name.
    node.apply(&format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: client, namespace: {namespace}}}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      securityContext: {{runAsNonRoot: true, seccompProfile: {{type: RuntimeDefault}}}}
      containers:
      - name: client
        image: {images}/flexinfer-bench:{tag}
        args: [load, --url, "http://flexinfer-proxy.{namespace}.svc", --model, sim-m, -c, "1", -n, "2", --warmup, "0", --json]
        securityContext: {{readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
"#,
        images = node.images
    ));
    let done = node.plane.kubectl(&[
        "wait",
        "-n",
        namespace,
        "job/client",
        "--for=condition=Complete",
        "--timeout=90s",
    ]);
    assert!(
        done.is_ok(),
        "the client pod's requests failed: {done:?}\n{}",
        node.plane
            .kubectl(&["logs", "-n", namespace, "job/client"])
            .unwrap_or_default()
    );
    let report: serde_json::Value = serde_json::from_str(
        &node
            .plane
            .kubectl(&["logs", "-n", namespace, "job/client"])
            .expect("the client's report"),
    )
    .expect("the client's report is JSON");
    let level = &report["levels"][0];
    assert_eq!(
        (level["succeeded"].as_u64(), level["failed"].as_u64()),
        (Some(2), Some(0)),
        "{report}"
    );
    eprintln!(
        "from a client pod by the Service's name: 2 answers, TTFT p50 {} ms",
        level["ttft_ms"]["p50"]
    );

    // A gateway pod deleted under traffic: no failed request.
    let victim = node
        .plane
        .kubectl(&[
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            "app.kubernetes.io/component=gateway",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .expect("gateway pod");
    let traffic = {
        let client = client.clone();
        let url = format!("http://{proxy}/v1/chat/completions");
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            let until = Instant::now() + Duration::from_secs(15);
            while Instant::now() < until {
                match client.post(&url).json(&chat("sim-m")).send().await {
                    Ok(r) if r.status() == 200 => ok += 1,
                    Ok(r) => failed.push(r.status().to_string()),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    node.plane
        .kubectl(&["delete", "pod", "-n", namespace, &victim, "--wait=false"])
        .expect("delete a gateway pod");
    let (ok, failed) = traffic.await.expect("traffic");
    eprintln!(
        "gateway pod deleted under traffic: {ok} served, {} failed: {failed:?}",
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:?}");
    node.wait_rollout(namespace, "deployment/flexinfer-proxy");
    // The replicas shared what their picks learnt (sim-m is cache-aware):
    // the prompt blocks each received from the other, merged.
    let (mut applied, mut sent) = (0.0, 0.0);
    for ip in gateway_ips(&node, namespace) {
        let text = match client.get(format!("http://{ip}:9090/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        applied += crate::support::metric_value(
            &text,
            "flexinfer_proxy_routing_peer_blocks_total{result=\"applied\"}",
        );
        sent += crate::support::metric_value(
            &text,
            "flexinfer_proxy_routing_peer_batches_total{result=\"sent\"}",
        );
    }
    eprintln!("records exchanged by the replicas: {sent} batches sent, {applied} blocks merged");
    assert!(applied > 0.0, "no record was exchanged");

    // GPU-aware placement on, as docs/quickstart.md §2.6 turns it on: the
    // extender and the second kube-scheduler (its image from the local
    // registry, under the tag the chart derives from the cluster's
    // version); a new Model's pod is placed by that scheduler, which asks
    // the extender.
    let kube_scheduler = format!(
        "scheduler.kubeScheduler.repository={}/kube-scheduler",
        node.images
    );
    let out = node
        .plane
        .helm()
        .args([
            "upgrade",
            "flexinfer",
            "helm/flexinfer",
            "--namespace",
            namespace,
            "--reuse-values",
            "--set",
            "scheduler.enabled=true",
            "--set",
            &kube_scheduler,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR").trim_end_matches("/gateway"))
        .output()
        .expect("helm");
    assert!(
        out.status.success(),
        "helm upgrade: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for deployment in ["flexinfer-sched", "flexinfer-scheduler", "flexinfer-proxy"] {
        node.wait_rollout(namespace, &format!("deployment/{deployment}"));
    }
    let pods = pods_of(&node, namespace);
    assert!(
        pods.iter()
            .all(|(_, ready, restarts)| *ready && *restarts == 0),
        "{pods:?}"
    );
    // The upgraded controllers lead: the old pods handed their Lease over
    // at SIGTERM, not after their drain.
    let handed_over = Instant::now();
    let deadline = handed_over + Duration::from_secs(60);
    loop {
        let holder = node
            .plane
            .kubectl(&[
                "get",
                "lease",
                "flexinfer-operator",
                "-n",
                namespace,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .unwrap_or_default();
        let pods: serde_json::Value = serde_json::from_str(
            &node
                .plane
                .kubectl(&[
                    "get",
                    "pods",
                    "-n",
                    namespace,
                    "-l",
                    "app.kubernetes.io/component=gateway",
                    "-o",
                    "json",
                ])
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        let upgraded: Vec<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| {
                p["spec"]["containers"][0]["env"]
                    .to_string()
                    .contains("FLEXINFER_SCHEDULER_NAME")
            })
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        if !holder.is_empty() && upgraded.iter().any(|p| holder.contains(p.as_str())) {
            eprintln!(
                "an upgraded pod leads {:.1} s after the rollout",
                handed_over.elapsed().as_secs_f64()
            );
            // Before the old pods' preStop sleep (5 s) and drain delay (5 s)
            // are over: they stepped down at SIGTERM.
            assert!(
                handed_over.elapsed() < Duration::from_secs(10),
                "the old leader kept its Lease through its drain"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Lease stayed with {holder:?}; upgraded pods: {upgraded:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let listed_by = Instant::now() + Duration::from_secs(20);
    node.apply(&format!(
        r#"apiVersion: ai.flexinfer/v1alpha2
kind: Model
metadata: {{name: placed, namespace: {namespace}}}
spec:
  backend: llamacpp
  source: hf://flexinfer/placed
  image: {images}/flexinfer-sim:{tag}
  cache: {{strategy: None}}
  securityContext: {{runAsNonRoot: true}}
  serverless: {{enabled: true, idleTimeout: 60s, coldStartTimeout: 120s}}
  resources: {{requests: {{cpu: 100m, memory: 64Mi}}, limits: {{memory: 256Mi}}}}
"#,
        images = node.images
    ));
    // The gateway replicas see a new Model through their watches, a
    // moment after it is created.
    let resp = loop {
        let resp = client
            .post(format!("http://{proxy}/v1/chat/completions"))
            .json(&chat("placed"))
            .timeout(Duration::from_secs(150))
            .send()
            .await
            .expect("chat");
        if resp.status() != 404 || Instant::now() > listed_by {
            break resp;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(
        status,
        200,
        "{body}\n{}",
        node.plane
            .kubectl(&["get", "events", "-n", namespace])
            .unwrap_or_default()
    );
    let scheduled = node
        .plane
        .kubectl(&[
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "reason=Scheduled",
            "-o",
            "json",
        ])
        .unwrap_or_default();
    let scheduled: serde_json::Value = serde_json::from_str(&scheduled).unwrap_or_default();
    let by: Vec<String> = scheduled["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["involvedObject"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("placed-"))
        })
        .map(|e| {
            format!(
                "{}{}",
                e["reportingComponent"].as_str().unwrap_or(""),
                e["source"]["component"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert!(
        !by.is_empty() && by.iter().all(|c| c.contains("flexinfer-scheduler")),
        "the placed Model's pod was scheduled by {by:?}"
    );
    eprintln!("the placed Model's pod was scheduled by {by:?}");

    // And back to zero once idle (its idleTimeout is 60 s).
    let idle = Instant::now();
    let deadline = idle + Duration::from_secs(150);
    loop {
        let replicas = node
            .plane
            .kubectl(&[
                "get",
                "deployment",
                "sim-m",
                "-n",
                namespace,
                "-o",
                "jsonpath={.spec.replicas}",
            ])
            .unwrap_or_default();
        if replicas.trim() == "0" {
            eprintln!(
                "sim-m back to zero {:.0} s after the checks above",
                idle.elapsed().as_secs_f64()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sim-m still has {replicas} replicas"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // A real engine in a container: llama.cpp's server (an image laid out
    // as the official ones, its entrypoint llama-server) serving SmolLM2
    // from a volume, through the gateway.
    llama_cpp_answers(&node, namespace, &proxy).await;

    let differences = tokio::task::spawn_blocking(move || node.stop())
        .await
        .expect("stop");
    assert!(
        differences.is_empty(),
        "the host was not restored: {differences:#?}"
    );
}

/// A Model of the llama.cpp server image, the SmolLM2 GGUF of the
/// real-backend lane on a PersistentVolume (`pvc://`), answers a chat
/// through the gateway's ClusterIP. Skipped where the image or the model
/// file was not built.
async fn llama_cpp_answers(
    node: &flexinfer_testkube::real::node::RealNode,
    namespace: &str,
    proxy: &str,
) {
    let Some(model) = std::env::var_os("FLEXINFER_LLAMA_MODEL").map(std::path::PathBuf::from)
    else {
        eprintln!("llama.cpp step skipped: no FLEXINFER_LLAMA_MODEL (scripts/real-backend.sh)");
        return;
    };
    let registry = node.registry();
    let image_there = std::process::Command::new("curl")
        .args([
            "-fsS",
            "-o",
            "/dev/null",
            &format!("http://{registry}/v2/flexinfer/llama.cpp/manifests/server"),
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !image_there {
        assert!(
            std::env::var("FLEXINFER_REQUIRE_REAL_NODE").as_deref() != Ok("1"),
            "no llama.cpp image in the registry (scripts/real-node.sh builds llama-server, scripts/images.sh the image)"
        );
        eprintln!("llama.cpp step skipped: no llama.cpp image in the registry");
        return;
    }
    let dir = model.parent().expect("model folder").display().to_string();
    let file = model
        .file_name()
        .expect("model file")
        .to_string_lossy()
        .into_owned();
    node.apply(&format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: smollm}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadOnlyMany]
  storageClassName: ""
  persistentVolumeReclaimPolicy: Retain
  hostPath: {{path: "{dir}", type: Directory}}
  claimRef: {{namespace: {namespace}, name: smollm}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: smollm, namespace: {namespace}}}
spec:
  accessModes: [ReadOnlyMany]
  storageClassName: ""
  volumeName: smollm
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: ai.flexinfer/v1alpha2
kind: Model
metadata: {{name: smollm, namespace: {namespace}}}
spec:
  backend: llamacpp
  source: pvc://smollm/{file}
  image: {registry}/flexinfer/llama.cpp:server
  config: {{contextSize: 2048}}
  securityContext: {{runAsNonRoot: true}}
  serverless: {{enabled: true, idleTimeout: 60s, coldStartTimeout: 180s}}
  resources: {{requests: {{cpu: 500m, memory: 256Mi}}, limits: {{memory: 1Gi}}}}
"#
    ));
    let started = Instant::now();
    let resp = crate::support::client()
        .post(format!("http://{proxy}/v1/chat/completions"))
        .json(&serde_json::json!({
            "model": "smollm",
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8
        }))
        .timeout(Duration::from_secs(200))
        .send()
        .await
        .expect("chat to llama.cpp");
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(
        status,
        200,
        "{body}\n{}\n{}",
        node.plane
            .kubectl(&[
                "get",
                "pods,pvc,models.ai.flexinfer",
                "-n",
                namespace,
                "-o",
                "wide"
            ])
            .unwrap_or_default(),
        node.plane
            .kubectl(&["logs", "-n", namespace, "deployment/smollm", "--tail=20"])
            .unwrap_or_default()
    );
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON answer");
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(!text.trim().is_empty(), "{body}");
    eprintln!(
        "llama.cpp in a container answered through the gateway in {:.1} s from zero: {text:?}",
        started.elapsed().as_secs_f64()
    );

    // docs/quickstart.md §2.3 and §2.5 as written: the CRDs' category, and
    // the gateway through `kubectl port-forward` (the kubelet's streaming).
    let resources = node
        .plane
        .kubectl(&["api-resources", "--categories=flexinfer", "-o", "name"])
        .expect("api-resources");
    assert!(resources.contains("models.ai.flexinfer"), "{resources}");
    let port = free_port();
    let mut forward = node
        .kubectl_command()
        .args([
            "-n",
            namespace,
            "port-forward",
            "svc/flexinfer-proxy",
            &format!("{port}:80"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl port-forward");
    let client = crate::support::client();
    let deadline = Instant::now() + Duration::from_secs(20);
    let listed = loop {
        match client
            .get(format!("http://127.0.0.1:{port}/v1/models"))
            .send()
            .await
        {
            Ok(r) if r.status() == 200 => break r.text().await.unwrap_or_default(),
            other => {
                assert!(Instant::now() < deadline, "port-forward: {other:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(listed.contains("smollm"), "{listed}");
    let resp = client
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .json(&serde_json::json!({
            "model": "smollm",
            "messages": [{"role": "user", "content": "Say hi"}],
            "max_tokens": 16
        }))
        .send()
        .await
        .expect("chat through port-forward");
    assert_eq!(resp.status(), 200);
    let _ = forward.kill();
    let _ = forward.wait();
}

#[path = "real_node/gaie_conformance.rs"]
mod gaie_conformance;
