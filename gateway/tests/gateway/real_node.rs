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
