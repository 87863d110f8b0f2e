//! The `flexinfer-agent` command line, reachable from the library so that
//! documentation can be generated from it.

use clap::Parser;

use crate::config::AgentConfig;

/// Node agent that discovers GPUs and labels the node
#[derive(Parser, Debug)]
#[command(name = "flexinfer-agent", version, about, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Agent settings.
    #[command(flatten)]
    pub config: AgentConfig,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    pub log_format: String,
}

const LONG_ABOUT: &str = "Discovers the node's accelerators (NVIDIA via NVML loaded at run time, AMD via sysfs/KFD, CPU features) every --interval and publishes them as flexinfer.ai/gpu.* labels and the flexinfer.ai/gpu-free-memory and flexinfer.ai/gpu.util annotations that the operator and scheduler extender read, patching its own Node (server-side apply) only when a value changes. Serves Prometheus metrics on --metrics-port.";
