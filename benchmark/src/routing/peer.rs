//! Peer routers: another project's router started by `routing --local` in
//! front of the same simulated pods, measured like the gateway. SGLang
//! Model Gateway (`sglang-router` on PyPI, policy `cache_aware`) is the
//! reference; any other router is a command template.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::Serialize;

/// Environment variable naming the Python that runs `sglang_router`.
pub const SGLANG_PYTHON_ENV: &str = "SGLANG_ROUTER_PYTHON";
/// Placeholder of the router's port in a command template.
pub const PORT: &str = "{port}";
/// Placeholder of the pods' base URLs (one argument each).
pub const WORKERS: &str = "{workers}";
/// Placeholder of the pods' base URLs, comma-separated, in one argument.
pub const WORKERS_CSV: &str = "{workers_csv}";

/// How a peer router is started and when it is ready.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerCommand {
    /// Program and arguments, with the placeholders.
    pub argv: Vec<String>,
    /// When it answers.
    pub ready: Readiness,
}

/// When a started peer router may take requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    /// `GET /v1/models` answers 2xx.
    Models,
    /// SGLang's `GET /readiness` counts every pod as a healthy worker.
    SglangWorkers,
}

impl PeerCommand {
    /// SGLang Model Gateway with `policy`, run by `python`; logs at `warn`,
    /// its Prometheus listener on `metrics_port` (loopback).
    pub fn sglang(python: &Path, policy: &str, metrics_port: u16) -> PeerCommand {
        let argv = [
            python.display().to_string().as_str(),
            "-m",
            "sglang_router.launch_router",
            "--host",
            "127.0.0.1",
            "--port",
            PORT,
            "--policy",
            policy,
            "--log-level",
            "warn",
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            &metrics_port.to_string(),
            "--worker-urls",
            WORKERS,
        ]
        .map(str::to_owned)
        .to_vec();
        PeerCommand {
            argv,
            ready: Readiness::SglangWorkers,
        }
    }

    /// A router given as a command line (split on whitespace; no quoting),
    /// which must contain `{port}` and `{workers}` or `{workers_csv}`.
    pub fn template(line: &str) -> Result<PeerCommand> {
        let argv: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        if argv.is_empty() {
            bail!("--peer-command is empty");
        }
        if !argv.iter().any(|a| a.contains(PORT)) {
            bail!("--peer-command must contain {PORT}");
        }
        if !argv
            .iter()
            .any(|a| a.contains(WORKERS) || a.contains(WORKERS_CSV))
        {
            bail!("--peer-command must contain {WORKERS} or {WORKERS_CSV}");
        }
        Ok(PeerCommand {
            argv,
            ready: Readiness::Models,
        })
    }

    /// The program and its arguments for `port` and `workers`.
    pub fn render(&self, port: u16, workers: &[String]) -> (PathBuf, Vec<String>) {
        let port = port.to_string();
        let csv = workers.join(",");
        let mut args = Vec::with_capacity(self.argv.len() + workers.len());
        for arg in &self.argv {
            if arg == WORKERS {
                args.extend(workers.iter().cloned());
            } else {
                args.push(arg.replace(PORT, &port).replace(WORKERS_CSV, &csv));
            }
        }
        let program = PathBuf::from(args.remove(0));
        (program, args)
    }
}

/// Whether SGLang's `/readiness` answer counts `pods` healthy workers.
pub fn sglang_ready(body: &[u8], pods: usize) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("healthy_workers")?.as_u64())
        .is_some_and(|n| n >= pods as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_gets_every_pod_and_the_port() {
        let cmd = PeerCommand::sglang(Path::new("/venv/bin/python"), "cache_aware", 9001);
        let workers = ["http://127.0.0.1:1".to_owned(), "http://127.0.0.1:2".into()];
        let (program, args) = cmd.render(7000, &workers);
        assert_eq!(program, PathBuf::from("/venv/bin/python"));
        let line = args.join(" ");
        assert!(line.starts_with("-m sglang_router.launch_router"), "{line}");
        assert!(line.contains("--port 7000 "), "{line}");
        assert!(line.contains("--policy cache_aware"), "{line}");
        assert!(line.contains("--prometheus-port 9001"), "{line}");
        assert!(
            line.ends_with("--worker-urls http://127.0.0.1:1 http://127.0.0.1:2"),
            "{line}"
        );
    }

    #[test]
    fn templates_need_a_port_and_the_workers() {
        let cmd =
            PeerCommand::template("router --listen 127.0.0.1:{port} --backends {workers_csv}")
                .unwrap();
        let (program, args) = cmd.render(80, &["http://a".into(), "http://b".into()]);
        assert_eq!(program, PathBuf::from("router"));
        assert_eq!(
            args,
            [
                "--listen",
                "127.0.0.1:80",
                "--backends",
                "http://a,http://b"
            ]
        );
        assert!(PeerCommand::template("").is_err());
        assert!(PeerCommand::template("router {workers}").is_err());
        assert!(PeerCommand::template("router --port {port}").is_err());
    }

    #[test]
    fn readiness_counts_healthy_workers() {
        let body = br#"{"status":"ready","healthy_workers":4,"total_workers":4}"#;
        assert!(sglang_ready(body, 4));
        assert!(!sglang_ready(body, 5));
        assert!(!sglang_ready(b"OK", 1));
    }
}
