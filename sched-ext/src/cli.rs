//! The `flexinfer-sched` command line, reachable from the library so that
//! documentation can be generated from it.

use clap::Parser;

use crate::config::ExtenderConfig;

/// kube-scheduler extender that places model pods on the GPU node that serves them best
#[derive(Parser, Debug)]
#[command(name = "flexinfer-sched", version, about, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Extender settings.
    #[command(flatten)]
    pub config: ExtenderConfig,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    pub log_format: String,
}

const LONG_ABOUT: &str = "Serves the kube-scheduler extender v1 API: /filter rejects nodes without a GPU vendor label, without enough free VRAM, or with an architecture the backend does not support; /prioritize (alias /score) scores the remaining nodes by measured tokens/s, utilisation, cost, KV-cache pressure and free VRAM (weights from SCHED_* env vars), normalised to 0-10. Benchmark ConfigMaps (and, when enabled, Nodes and Pods) are watched and cached. Also serves /healthz and /metrics.";
