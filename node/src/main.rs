//! `flexinfer-agent`: Node agent that discovers GPUs and labels the node

use clap::Parser;

/// Node agent that discovers GPUs and labels the node
#[derive(Parser, Debug)]
#[command(name = "flexinfer-agent", version, about, long_about = LONG_ABOUT)]
struct Cli {}

const LONG_ABOUT: &str = "Discovers the node's accelerators (NVIDIA via NVML loaded at run time, AMD via sysfs/KFD, CPU features) and publishes them as flexinfer.ai/gpu.* labels and the flexinfer.ai/gpu-free-memory annotation that the operator and scheduler extender read.";

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    anyhow::bail!(
        "flexinfer-agent is not available in this build yet; see --help for what it will do"
    )
}
