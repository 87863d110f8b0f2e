//! `--local` mode: `flexinfer-sim` processes and one `flexinfer-gateway` on
//! free loopback ports, with a generated model file, stopped when dropped.
//!
//! The quick profile needs one simulator behind the gateway. The full
//! profile adds three simulator pods shared by the routing and streaming
//! models, three scale-to-zero models the gateway runs itself (`command`:
//! `flexinfer-sim --startup-delay ...`), a rate-limited model, and turns auth
//! and rate limiting on. [`Break`] starts it deliberately misconfigured, to
//! prove that the checks can fail.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};

use super::http::{Call, Target};
use super::roles::Role;
use super::Profile;
use crate::sim::process::SimProcess;

/// Environment variable naming the gateway binary for `--local`.
pub const GATEWAY_BINARY_ENV: &str = "FLEXINFER_GATEWAY_BIN";
/// The model clients ask for in `--local` mode.
pub const MODEL: &str = "conformance-model";
/// Its alias in the generated model file.
pub const ALIAS: &str = "conformance-alias";
/// The name the simulator serves it under (the model file's `backendModel`).
pub const BACKEND_MODEL: &str = "conformance-backend";
/// The name the routing pods serve.
pub const ROUTING_BACKEND_MODEL: &str = "conformance-routing-backend";
/// Routing pods in the full topology.
pub const ROUTING_PODS: usize = 3;
/// Token pace of the routing pods: streamed chunks 50 ms apart.
pub const POD_TOKENS_PER_SECOND: u32 = 20;
/// The gateway's `--max-queue-size` in the full topology.
pub const MAX_QUEUE_SIZE: usize = 8;
/// The gateway's wait bound (`--queue-timeout`, `--cold-start-timeout`).
pub const WAIT_BOUND: &str = "1s";
/// How long the cold model loads.
pub const COLD_STARTUP: &str = "1s";
/// How long the queue model loads: every request of the queue-full check
/// must reach the gateway before it is up, even on a loaded machine.
pub const QUEUE_STARTUP: &str = "3s";
/// How long the slow model loads: well past the wait bound.
pub const SLOW_STARTUP: &str = "60s";
/// `rateLimit` of the limited model: requests per second and burst.
pub const LIMITED_RATE: (u32, u32) = (1, 3);
/// How long the gateway may take to answer after it starts.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A deliberate misconfiguration of the local stack (negative controls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Break {
    /// The routing models are written without their `routing` strategy.
    Routing,
    /// Rate limiting is off (`--rate-limit-enabled false`).
    Limits,
    /// Auth is off, while the suite still sends its key.
    Auth,
}

/// How to start the stack.
#[derive(Debug, Clone, Default)]
pub struct LocalOptions {
    /// The full topology, rather than one simulator.
    pub full: bool,
    /// Misconfigurations to apply.
    pub breaks: BTreeSet<Break>,
}

impl LocalOptions {
    /// The topology `profile` needs.
    pub fn for_profile(profile: Profile) -> Self {
        Self {
            full: profile == Profile::Full,
            breaks: BTreeSet::new(),
        }
    }
}

/// Simulators behind a gateway, all on loopback.
pub struct LocalStack {
    sims: Vec<SimProcess>,
    gateway: Child,
    gateway_url: String,
    api_key: Option<String>,
    max_queue_size: Option<usize>,
    dir: PathBuf,
}

impl LocalStack {
    /// Starts the simulators, writes the model file, starts the gateway and
    /// waits until it lists [`MODEL`].
    pub async fn start(options: &LocalOptions) -> Result<Self> {
        let sim_bin = SimProcess::binary().context("finding flexinfer-sim")?;
        let sim_bin = sim_bin.canonicalize().unwrap_or(sim_bin);
        let gateway_bin = gateway_binary()?;
        let spawn = |args: Vec<String>| {
            SimProcess::spawn(&sim_bin, args)
                .with_context(|| format!("starting {}", sim_bin.display()))
        };
        let mut sims = vec![spawn(vec!["--model".into(), BACKEND_MODEL.into()])?];
        let dir = std::env::temp_dir().join(format!(
            "flexinfer-conformance-{}-{}",
            std::process::id(),
            sims[0].addr().port()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut yaml = model_file(&sims[0].base_url());
        let mut flags: Vec<String> = Vec::new();
        let mut api_key = None;
        let mut max_queue_size = None;
        if options.full {
            for i in 0..ROUTING_PODS {
                sims.push(spawn(vec![
                    "--model".into(),
                    ROUTING_BACKEND_MODEL.into(),
                    "--pod-name".into(),
                    format!("conformance-pod-{i}"),
                    "--tokens-per-second".into(),
                    POD_TOKENS_PER_SECOND.to_string(),
                ])?);
            }
            let pods: Vec<String> = sims[1..].iter().map(SimProcess::base_url).collect();
            yaml.push_str(&full_models(
                &sims[0].base_url(),
                &pods,
                &sim_bin,
                &options.breaks,
            )?);
            flags.extend(
                [
                    "--max-queue-size",
                    &MAX_QUEUE_SIZE.to_string(),
                    "--queue-timeout",
                    WAIT_BOUND,
                    "--cold-start-timeout",
                    WAIT_BOUND,
                ]
                .map(str::to_owned),
            );
            max_queue_size = Some(MAX_QUEUE_SIZE);
            let key = format!("conformance-key-{}", std::process::id());
            if !options.breaks.contains(&Break::Auth) {
                flags.extend(["--auth-enabled", "true", "--auth-token", &key].map(str::to_owned));
            }
            api_key = Some(key);
            if !options.breaks.contains(&Break::Limits) {
                flags.extend(
                    [
                        "--rate-limit-enabled",
                        "true",
                        "--rate-limit-per-model",
                        "1000000",
                        "--rate-limit-burst",
                        "1000000",
                        "--rate-limit-global",
                        "0",
                    ]
                    .map(str::to_owned),
                );
            }
        }
        let config = dir.join("models.yaml");
        std::fs::write(&config, &yaml).with_context(|| format!("writing {}", config.display()))?;
        let listen = format!("127.0.0.1:{}", free_port()?);
        // The gateway's logs go to a file: a client dropping a stream on
        // purpose (the least-loaded check does) is logged as an error.
        let log_path = dir.join("gateway.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let gateway = Command::new(&gateway_bin)
            .arg("--config")
            .arg(&config)
            .args(["--listen", &listen])
            .args(["--threads", "2", "--shutdown-drain-delay", "0s"])
            .args(&flags)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", gateway_bin.display()))?;
        let mut stack = Self {
            sims,
            gateway,
            gateway_url: format!("http://{listen}"),
            api_key,
            max_queue_size,
            dir,
        };
        if let Err(e) = stack.wait_ready().await {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(anyhow!(
                "{e:#}\nthe last lines of the gateway's log:\n{}",
                tail.join("\n")
            ));
        }
        Ok(stack)
    }

    /// The API key the checks must send (the full topology has auth on).
    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    /// The gateway's `--max-queue-size`, when the stack sets it.
    pub fn max_queue_size(&self) -> Option<usize> {
        self.max_queue_size
    }

    /// The gateway's base URL.
    pub fn gateway_url(&self) -> &str {
        &self.gateway_url
    }

    /// The base URL of the simulator behind [`MODEL`].
    pub fn sim_url(&self) -> String {
        self.sims
            .first()
            .map(SimProcess::base_url)
            .unwrap_or_default()
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let target = Target::parse(&self.gateway_url)?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            if let Some(status) = self.gateway.try_wait()? {
                bail!("flexinfer-gateway exited before it was ready ({status})");
            }
            match Call::get("/v1/models")
                .send(&target, self.api_key.as_deref())
                .await
            {
                Ok(resp) if resp.status == 200 && resp.body_excerpt(usize::MAX).contains(MODEL) => {
                    return Ok(());
                }
                Ok(resp) => last = resp.describe(),
                Err(e) => last = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(anyhow!(
            "flexinfer-gateway at {} not ready within {READY_TIMEOUT:?}: {last}",
            self.gateway_url
        ))
    }

    /// Stops the gateway (SIGINT), then the simulator (SIGTERM).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Ok(None) = self.gateway.try_wait() {
            interrupt(&self.gateway);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.gateway.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.gateway.kill();
            let _ = self.gateway.wait();
        }
        for sim in self.sims.drain(..) {
            let _ = sim.terminate(Duration::from_secs(5));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for LocalStack {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The generated model file: [`MODEL`] (alias [`ALIAS`]) served by the
/// simulator at `sim_url` as [`BACKEND_MODEL`].
pub fn model_file(sim_url: &str) -> String {
    format!(
        "models:\n  - name: {MODEL}\n    aliases: [{ALIAS}]\n    backendModel: {BACKEND_MODEL}\n    \
         endpoints:\n      - {sim_url}\n"
    )
}

/// The full topology's extra models: routing and streaming models on the
/// `pods`, scale-to-zero models run from `sim_bin`, and a rate-limited model
/// on the simulator at `sim_url`.
pub fn full_models(
    sim_url: &str,
    pods: &[String],
    sim_bin: &Path,
    breaks: &BTreeSet<Break>,
) -> Result<String> {
    let mut yaml = String::new();
    let endpoints = pods.join(", ");
    for (role, strategy) in [
        (Role::Session, "session-affinity"),
        (Role::Prefix, "prefix"),
        (Role::LeastLoaded, "least-loaded"),
    ] {
        let _ = write!(
            yaml,
            "  - name: {}\n    backendModel: {ROUTING_BACKEND_MODEL}\n    endpoints: [{endpoints}]\n",
            role.well_known()
        );
        if !breaks.contains(&Break::Routing) {
            let _ = writeln!(yaml, "    routing: {strategy}");
        }
    }
    let _ = write!(
        yaml,
        "  - name: {}\n    backendModel: {ROUTING_BACKEND_MODEL}\n    endpoints: [{}]\n",
        Role::Stream.well_known(),
        pods.first().ok_or_else(|| anyhow!("no routing pods"))?
    );
    let (rps, burst) = LIMITED_RATE;
    let _ = write!(
        yaml,
        "  - name: {}\n    backendModel: {BACKEND_MODEL}\n    endpoints: [{sim_url}]\n    \
         rateLimit: {{requestsPerSecond: {rps}, burst: {burst}}}\n",
        Role::Limited.well_known()
    );
    for (role, startup, wait) in [
        (Role::Cold, COLD_STARTUP, Some("60s")),
        (Role::Queue, QUEUE_STARTUP, Some("60s")),
        (Role::Slow, SLOW_STARTUP, None),
    ] {
        let name = role.well_known();
        let port = free_port()?;
        let _ = write!(
            yaml,
            "  - name: {name}\n    command: {bin:?}\n    args: [--port, \"{port}\", --model, {name}, \
             --pod-name, {name}, --startup-delay, {startup}]\n    port: {port}\n    \
             health: /health\n    serverless: {{idleTimeout: 10m{extra}}}\n",
            bin = sim_bin.display().to_string(),
            extra = wait.map(|w| format!(", coldStartTimeout: {w}")).unwrap_or_default()
        );
    }
    Ok(yaml)
}

/// The gateway binary: `$FLEXINFER_GATEWAY_BIN`, else `flexinfer-gateway`
/// next to this executable in the Cargo target directory.
pub fn gateway_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(GATEWAY_BINARY_ENV) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "{GATEWAY_BINARY_ENV}={} is not a file; build the gateway with \
                 `cargo build -p flexinfer-gateway`",
                path.display()
            );
        }
        return Ok(path);
    }
    let exe = std::env::current_exe()?;
    find_near(&exe, "flexinfer-gateway").ok_or_else(|| {
        anyhow!(
            "flexinfer-gateway not found near {}; build it with `cargo build -p flexinfer-gateway` \
             or set {GATEWAY_BINARY_ENV}",
            exe.display()
        )
    })
}

fn find_near(exe: &Path, name: &str) -> Option<PathBuf> {
    let name = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    exe.ancestors()
        .skip(1)
        .take(3)
        .map(|dir| dir.join(&name))
        .find(|candidate| candidate.is_file())
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

#[cfg(unix)]
fn interrupt(child: &Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) only sends a signal to the given process id, which is our own child.
        unsafe {
            libc::kill(pid, libc::SIGINT);
        }
    }
}

#[cfg(not(unix))]
fn interrupt(_child: &Child) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_models_follow_the_breaks() {
        let pods = vec![
            "http://127.0.0.1:1".to_owned(),
            "http://127.0.0.1:2".to_owned(),
        ];
        let bin = Path::new("/bin/flexinfer-sim");
        let yaml = full_models("http://127.0.0.1:9", &pods, bin, &BTreeSet::new()).unwrap();
        assert!(yaml.contains("routing: session-affinity"));
        assert!(yaml.contains("routing: least-loaded"));
        assert!(yaml.contains("endpoints: [http://127.0.0.1:1, http://127.0.0.1:2]"));
        assert!(yaml.contains("rateLimit: {requestsPerSecond: 1, burst: 3}"));
        assert!(yaml.contains("command: \"/bin/flexinfer-sim\""));
        assert!(yaml.contains("--startup-delay, 60s]"));
        let broken = full_models(
            "http://127.0.0.1:9",
            &pods,
            bin,
            &BTreeSet::from([Break::Routing]),
        )
        .unwrap();
        assert!(!broken.contains("routing:"));
    }

    #[test]
    fn model_file_names_the_backend() {
        let yaml = model_file("http://127.0.0.1:9");
        assert!(yaml.contains("name: conformance-model"));
        assert!(yaml.contains("backendModel: conformance-backend"));
        assert!(yaml.contains("- http://127.0.0.1:9"));
    }
}
