//! `--local` mode: one `flexinfer-sim` and one `flexinfer-gateway` process on
//! free loopback ports, with a generated model file, stopped when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};

use super::http::{Call, Target};
use crate::sim::process::SimProcess;

/// Environment variable naming the gateway binary for `--local`.
pub const GATEWAY_BINARY_ENV: &str = "FLEXINFER_GATEWAY_BIN";
/// The model clients ask for in `--local` mode.
pub const MODEL: &str = "conformance-model";
/// Its alias in the generated model file.
pub const ALIAS: &str = "conformance-alias";
/// The name the simulator serves it under (the model file's `backendModel`).
pub const BACKEND_MODEL: &str = "conformance-backend";
/// How long the gateway may take to answer after it starts.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A simulator behind a gateway, both on loopback.
pub struct LocalStack {
    sim: Option<SimProcess>,
    gateway: Child,
    gateway_url: String,
    dir: PathBuf,
}

impl LocalStack {
    /// Starts the simulator, writes the model file, starts the gateway and
    /// waits until it lists [`MODEL`].
    pub async fn start() -> Result<Self> {
        let sim_bin = SimProcess::binary().context("finding flexinfer-sim")?;
        let gateway_bin = gateway_binary()?;
        let sim = SimProcess::spawn(&sim_bin, ["--model", BACKEND_MODEL])
            .with_context(|| format!("starting {}", sim_bin.display()))?;
        let dir = std::env::temp_dir().join(format!(
            "flexinfer-conformance-{}-{}",
            std::process::id(),
            sim.addr().port()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let config = dir.join("models.yaml");
        std::fs::write(&config, model_file(&sim.base_url()))
            .with_context(|| format!("writing {}", config.display()))?;
        let listen = format!("127.0.0.1:{}", free_port()?);
        let gateway = Command::new(&gateway_bin)
            .arg("--config")
            .arg(&config)
            .args(["--listen", &listen])
            .args(["--threads", "2", "--shutdown-drain-delay", "0s"])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", gateway_bin.display()))?;
        let mut stack = Self {
            sim: Some(sim),
            gateway,
            gateway_url: format!("http://{listen}"),
            dir,
        };
        stack.wait_ready().await?;
        Ok(stack)
    }

    /// The gateway's base URL.
    pub fn gateway_url(&self) -> &str {
        &self.gateway_url
    }

    /// The simulator's base URL.
    pub fn sim_url(&self) -> String {
        self.sim
            .as_ref()
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
            match Call::get("/v1/models").send(&target, None).await {
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
        if let Some(sim) = self.sim.take() {
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
    fn model_file_names_the_backend() {
        let yaml = model_file("http://127.0.0.1:9");
        assert!(yaml.contains("name: conformance-model"));
        assert!(yaml.contains("backendModel: conformance-backend"));
        assert!(yaml.contains("- http://127.0.0.1:9"));
    }
}
