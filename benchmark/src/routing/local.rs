//! `routing --local`: fresh `flexinfer-sim` pods (cold caches) and, for
//! the strategies a gateway implements, a `flexinfer-gateway` in file mode
//! in front of them, all on loopback. Every child is killed when its handle
//! is dropped, so an error or an early return never leaves one running.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::client::Client;
use crate::target::Target;

use super::peer::{self, PeerCommand, Readiness};

/// Environment variable naming the simulator binary.
pub const SIM_BINARY_ENV: &str = "FLEXINFER_SIM_BIN";
/// Environment variable naming the gateway binary.
pub const GATEWAY_BINARY_ENV: &str = "FLEXINFER_GATEWAY_BIN";
/// The simulator's first line on stdout, before its address.
pub const LISTENING_PREFIX: &str = "flexinfer-sim listening on ";
/// How long a process may take to answer after it starts.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between readiness probes.
const POLL: Duration = Duration::from_millis(50);
/// Attempts at starting the gateway (a free port can be taken before it binds).
const GATEWAY_ATTEMPTS: usize = 3;

/// How every simulated pod behaves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimSettings {
    /// Model the pods serve.
    pub model: String,
    /// Tokens per prefix-cache block.
    pub block_size: u32,
    /// Prefix-cache capacity per pod, in blocks (LRU; 0 disables the cache).
    pub prefix_cache_blocks: u64,
    /// Prefill speed: TTFT grows by uncached prompt tokens ÷ this.
    pub prefill_tokens_per_second: f64,
    /// Fixed part of the time to first token, milliseconds.
    pub ttft_ms: f64,
    /// Decode speed per request.
    pub tokens_per_second: f64,
    /// Requests generating at once per pod (more wait in a queue).
    pub max_num_seqs: u32,
}

impl SimSettings {
    /// The flags of pod `index`, without the port.
    pub fn args(&self, index: usize) -> Vec<String> {
        vec![
            "--model".into(),
            self.model.clone(),
            "--pod-name".into(),
            format!("routing-pod-{index}"),
            "--host".into(),
            "127.0.0.1".into(),
            "--port".into(),
            "0".into(),
            "--block-size".into(),
            self.block_size.to_string(),
            "--prefix-cache-blocks".into(),
            self.prefix_cache_blocks.to_string(),
            "--prefill-tokens-per-second".into(),
            self.prefill_tokens_per_second.to_string(),
            "--ttft".into(),
            format!("{}us", (self.ttft_ms * 1000.0).round() as u64),
            "--tokens-per-second".into(),
            self.tokens_per_second.to_string(),
            "--max-num-seqs".into(),
            self.max_num_seqs.to_string(),
            "--recorder-capacity".into(),
            "0".into(),
        ]
    }
}

/// The default prefix-cache size: room for three tenants' system prompts
/// and a third of one more for conversation tails, rounded up to a multiple
/// of 16 (224 blocks for 1,000-token prompts and 16-token blocks). With
/// eight tenants on four pods, a router that keeps each tenant on one pod
/// (two per pod) keeps its prompts cached; one that spreads every tenant
/// over every pod keeps evicting them.
pub fn default_prefix_cache_blocks(system_tokens: u32, block_size: u32) -> u64 {
    let per_prompt = u64::from(system_tokens).div_ceil(u64::from(block_size.max(1)));
    (10 * per_prompt).div_ceil(3).div_ceil(16).max(1) * 16
}

/// The gateway's model file: one model, its strategy and the pods.
pub fn model_file(model: &str, routing: &str, endpoints: &[String]) -> String {
    let quoted: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
    format!(
        "models:\n  - name: {model:?}\n    routing: {routing}\n    endpoints: [{}]\n",
        quoted.join(", ")
    )
}

/// A binary: `given` (a flag or its environment variable), else `name` in
/// the directory of this executable or up to two above it (so a test
/// executable in `target/<profile>/deps` finds `target/<profile>/<name>`).
pub fn find_binary(given: Option<&Path>, name: &str, package: &str) -> Result<PathBuf> {
    if let Some(path) = given {
        if !path.is_file() {
            bail!("{} is not a file", path.display());
        }
        return Ok(path.to_owned());
    }
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    exe.ancestors()
        .skip(1)
        .take(3)
        .map(|dir| dir.join(&file))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            anyhow!(
                "{name} not found next to {}; build it with `cargo build -p {package}` or pass its path",
                exe.display()
            )
        })
}

/// The address in the simulator's `flexinfer-sim listening on http://ADDR` line.
pub fn parse_listening_line(line: &str) -> Option<String> {
    let addr = line
        .trim()
        .strip_prefix(LISTENING_PREFIX)?
        .strip_prefix("http://")?;
    addr.parse::<std::net::SocketAddr>()
        .ok()
        .map(|a| format!("http://{a}"))
}

/// A free loopback port (bound, then released).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A directory for the model file and the children's logs, removed on drop.
#[derive(Debug)]
struct RunDir(PathBuf);

impl RunDir {
    fn create() -> Result<RunDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "flexinfer-bench-routing-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(RunDir(path))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The last lines of a log file, as ` (log: ...)` for error messages;
/// empty when it has none.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let start = lines.len().saturating_sub(5);
    format!(" (log: {})", lines[start..].join(" | "))
}

fn command(binary: &Path, log: &Path) -> Result<Command> {
    let log = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut command = Command::new(binary);
    command
        .stdin(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        );
    Ok(command)
}

/// A running child that answers at `url`.
#[derive(Debug)]
pub struct Process {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Process {
    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Polls `GET path` until it answers 2xx (and `accept` holds for the body).
async fn wait_until(
    child: &mut Child,
    url: &str,
    path: &str,
    accept: impl Fn(&[u8]) -> bool,
) -> Result<()> {
    let target = Target::parse(url)?;
    let client = Client::new(target.clone(), None, None, Duration::from_secs(1))?;
    let path = target.root_path(path);
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("exited ({status})");
        }
        if let Ok((status, body)) = client
            .fetch(client.get(&path), Duration::from_secs(2))
            .await
        {
            if status.is_success() && accept(&body) {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            bail!("GET {url}{path} did not succeed within {READY_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn start_sim(
    binary: &Path,
    settings: &SimSettings,
    index: usize,
    dir: &RunDir,
) -> Result<Process> {
    let log = dir.file(&format!("sim-{index}.log"));
    let mut child = command(binary, &log)?
        .args(settings.args(index))
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(READY_TIMEOUT, lines.next_line()).await;
    let url = match first {
        Ok(Ok(Some(line))) => {
            parse_listening_line(&line).ok_or_else(|| anyhow!("unexpected first line {line:?}"))
        }
        Ok(Ok(None)) => Err(anyhow!("exited before listening")),
        Ok(Err(e)) => Err(anyhow!("reading its stdout: {e}")),
        Err(_) => Err(anyhow!("no listening line within {READY_TIMEOUT:?}")),
    };
    let url = match url {
        Ok(url) => url,
        Err(e) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            bail!("pod {index} failed to start: {e}{}", tail(&log));
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    if let Err(e) = wait_until(&mut child, &url, "/health", |_| true).await {
        let _ = child.start_kill();
        bail!("pod {index} at {url} is not healthy: {e}{}", tail(&log));
    }
    Ok(Process { child, url })
}

/// The shared secret of benchmark replicas.
const REPLICA_SECRET: &str = "flexinfer-bench-routing-replicas";

/// Flags of replica `index` of `ports.len()` (peer listener ports), each
/// naming all the others as peers; none for a single gateway or without
/// sharing.
pub fn replica_args(ports: &[u16], index: usize, sharing: bool) -> Vec<String> {
    if ports.len() < 2 || !sharing {
        return Vec::new();
    }
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, port)| format!("127.0.0.1:{port}"))
        .collect();
    vec![
        "--routing-peer-listen".into(),
        format!("127.0.0.1:{}", ports[index]),
        "--routing-peers".into(),
        peers.join(","),
        "--routing-peer-secret".into(),
        REPLICA_SECRET.into(),
    ]
}

async fn start_gateway(
    binary: &Path,
    (model, routing): (&str, &str),
    endpoints: &[String],
    dir: &RunDir,
    (index, extra, fixed_port): (usize, &[String], Option<u16>),
) -> Result<Process> {
    let config = dir.file(&format!("models-{index}.yaml"));
    std::fs::write(&config, model_file(model, routing, endpoints))
        .with_context(|| format!("writing {}", config.display()))?;
    let mut last = anyhow!("not started");
    for attempt in 0..GATEWAY_ATTEMPTS {
        let log = (0..)
            .map(|run| dir.file(&format!("gateway-{index}-{run}-{attempt}.log")))
            .find(|path| !path.exists())
            .unwrap_or_else(|| dir.file("gateway.log"));
        let port = match fixed_port {
            Some(port) => port,
            None => free_port()?,
        };
        let url = format!("http://127.0.0.1:{port}");
        let mut child = command(binary, &log)?
            .arg("--config")
            .arg(&config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let wanted = format!("\"{model}\"");
        let ready = async {
            wait_until(&mut child, &url, "/healthz", |_| true).await?;
            wait_until(&mut child, &url, "/v1/models", |body| {
                String::from_utf8_lossy(body).contains(&wanted)
            })
            .await
        };
        match ready.await {
            Ok(()) => return Ok(Process { child, url }),
            Err(e) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                let log = tail(&log);
                last = anyhow!("gateway (routing: {routing}) failed to start: {e}{log}");
                if !log.to_ascii_lowercase().contains("in use") {
                    break;
                }
            }
        }
    }
    Err(last)
}

/// The binaries a local run starts.
#[derive(Debug, Clone, Serialize)]
pub struct Binaries {
    /// `flexinfer-sim`.
    pub sim: PathBuf,
    /// `flexinfer-gateway`, when a strategy needs it.
    pub gateway: Option<PathBuf>,
}

/// Pods and, unless the oracle routes, a gateway.
#[derive(Debug)]
pub struct Stack {
    /// The pods, in the gateway's endpoint order.
    pub pods: Vec<Process>,
    /// The gateway replicas (none when the oracle routes).
    pub gateways: Vec<Process>,
    /// How each gateway replica was started, to start it again.
    launches: Vec<Launch>,
    dir: RunDir,
}

/// What starts one gateway replica again, at the same addresses.
#[derive(Debug, Clone)]
struct Launch {
    binary: PathBuf,
    model: String,
    routing: String,
    endpoints: Vec<String>,
    extra: Vec<String>,
    port: u16,
}

impl Stack {
    /// Starts `pods` simulators and, with `routing`, `replicas` gateways
    /// using that strategy in front of them (sharing routing state with
    /// each other when `sharing`); waits until all answer.
    pub async fn start(
        binaries: &Binaries,
        settings: &SimSettings,
        pods: usize,
        routing: Option<&str>,
        (replicas, sharing): (usize, bool),
    ) -> Result<Stack> {
        let dir = RunDir::create()?;
        let mut stack = Stack {
            pods: Vec::with_capacity(pods),
            gateways: Vec::new(),
            launches: Vec::new(),
            dir,
        };
        for index in 0..pods {
            let pod = start_sim(&binaries.sim, settings, index, &stack.dir).await?;
            stack.pods.push(pod);
        }
        if let Some(routing) = routing {
            let binary = binaries.gateway.as_deref().context("no gateway binary")?;
            let endpoints = stack.pod_urls();
            let ports = (0..replicas.max(1))
                .map(|_| free_port())
                .collect::<Result<Vec<u16>>>()?;
            for index in 0..ports.len() {
                let extra = replica_args(&ports, index, sharing);
                let gateway = start_gateway(
                    binary,
                    (&settings.model, routing),
                    &endpoints,
                    &stack.dir,
                    (index, &extra, None),
                )
                .await?;
                let port = Target::parse(&gateway.url)?.connect_addr().1;
                stack.launches.push(Launch {
                    binary: binary.to_owned(),
                    model: settings.model.clone(),
                    routing: routing.to_owned(),
                    endpoints: endpoints.clone(),
                    extra,
                    port,
                });
                stack.gateways.push(gateway);
            }
        }
        Ok(stack)
    }

    /// Starts a peer router in front of the pods (as the only gateway)
    /// and waits until it is ready.
    pub async fn start_peer(&mut self, router: &PeerCommand) -> Result<()> {
        let workers = self.pod_urls();
        let mut last = anyhow!("not started");
        for attempt in 0..GATEWAY_ATTEMPTS {
            let log = self.dir.file(&format!("peer-{attempt}.log"));
            let port = free_port()?;
            let url = format!("http://127.0.0.1:{port}");
            let (program, args) = router.render(port, &workers);
            let mut child = command(&program, &log)?
                .args(&args)
                .stdout(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot start {}", program.display()))?;
            let pods = workers.len();
            let ready = match router.ready {
                Readiness::Models => wait_until(&mut child, &url, "/v1/models", |_| true).await,
                Readiness::SglangWorkers => {
                    wait_until(&mut child, &url, "/readiness", |body| {
                        peer::sglang_ready(body, pods)
                    })
                    .await
                }
            };
            match ready {
                Ok(()) => {
                    self.gateways.push(Process { child, url });
                    return Ok(());
                }
                Err(e) => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    let log = tail(&log);
                    last = anyhow!("{} failed to start: {e}{log}", program.display());
                    if !log.to_ascii_lowercase().contains("in use") {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    /// Kills gateway replica `index` with SIGKILL and waits for it.
    pub async fn kill_gateway(&mut self, index: usize) -> Result<()> {
        let gateway = self
            .gateways
            .get_mut(index)
            .with_context(|| format!("no gateway replica {index}"))?;
        gateway.child.start_kill()?;
        gateway.child.wait().await?;
        Ok(())
    }

    /// Starts gateway replica `index` again with its flags and addresses,
    /// and waits until it answers.
    pub async fn restart_gateway(&mut self, index: usize) -> Result<()> {
        let launch = self
            .launches
            .get(index)
            .with_context(|| format!("no gateway replica {index}"))?
            .clone();
        let gateway = start_gateway(
            &launch.binary,
            (&launch.model, &launch.routing),
            &launch.endpoints,
            &self.dir,
            (index, &launch.extra, Some(launch.port)),
        )
        .await?;
        if let Some(slot) = self.gateways.get_mut(index) {
            *slot = gateway;
        }
        Ok(())
    }

    /// The pods' base URLs.
    pub fn pod_urls(&self) -> Vec<String> {
        self.pods.iter().map(|p| p.url.clone()).collect()
    }

    /// Kills every process and waits for them.
    pub async fn stop(self) {
        for gateway in self.gateways {
            gateway.stop().await;
        }
        for pod in self.pods {
            pod.stop().await;
        }
        drop(self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cache_holds_three_system_prompts_and_a_third() {
        assert_eq!(default_prefix_cache_blocks(1000, 16), 224);
        assert_eq!(default_prefix_cache_blocks(200, 16), 48);
        assert_eq!(default_prefix_cache_blocks(1, 16), 16);
        assert_eq!(default_prefix_cache_blocks(1000, 0), 3344);
    }

    #[test]
    fn replicas_name_each_other_as_peers() {
        assert!(replica_args(&[9000], 0, true).is_empty());
        assert!(replica_args(&[9000, 9001], 0, false).is_empty());
        let args = replica_args(&[9000, 9001, 9002], 1, true).join(" ");
        assert!(
            args.contains("--routing-peer-listen 127.0.0.1:9001"),
            "{args}"
        );
        assert!(
            args.contains("--routing-peers 127.0.0.1:9000,127.0.0.1:9002"),
            "{args}"
        );
        assert!(args.contains("--routing-peer-secret "), "{args}");
    }

    #[test]
    fn model_files_name_the_strategy_and_pods() {
        let yaml = model_file(
            "m",
            "least-loaded",
            &["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
        );
        assert_eq!(
            yaml,
            "models:\n  - name: \"m\"\n    routing: least-loaded\n    endpoints: [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"]\n"
        );
    }

    #[test]
    fn listening_lines() {
        assert_eq!(
            parse_listening_line("flexinfer-sim listening on http://127.0.0.1:4321\n"),
            Some("http://127.0.0.1:4321".into())
        );
        assert_eq!(
            parse_listening_line("flexinfer-sim listening on nowhere"),
            None
        );
        assert_eq!(parse_listening_line("hello"), None);
    }

    #[test]
    fn sim_flags() {
        let settings = SimSettings {
            model: "m".into(),
            block_size: 16,
            prefix_cache_blocks: 320,
            prefill_tokens_per_second: 4000.0,
            ttft_ms: 20.0,
            tokens_per_second: 100.0,
            max_num_seqs: 8,
        };
        let args = settings.args(2).join(" ");
        assert!(args.contains("--pod-name routing-pod-2"), "{args}");
        assert!(args.contains("--port 0"));
        assert!(args.contains("--prefix-cache-blocks 320"));
        assert!(args.contains("--prefill-tokens-per-second 4000"));
        assert!(args.contains("--ttft 20000us"));
        assert!(args.contains("--max-num-seqs 8"));
    }

    #[test]
    fn explicit_binaries_must_exist() {
        let err = find_binary(Some(Path::new("/nonexistent/sim")), "flexinfer-sim", "x");
        assert!(err.is_err());
        let err = find_binary(None, "flexinfer-surely-absent", "pkg").unwrap_err();
        assert!(err.to_string().contains("cargo build -p pkg"), "{err}");
    }
}
