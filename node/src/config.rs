//! Command-line and environment configuration of the agent.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::amd::DEFAULT_MIN_DISCRETE_VRAM_MIB;
use crate::nvidia::DEFAULT_LIBRARY;

/// Agent configuration.
#[derive(Args, Debug, Clone)]
pub struct AgentConfig {
    /// Time between discovery passes.
    #[arg(long, env = "FLEXINFER_AGENT_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub interval: Duration,

    /// Port of the Prometheus `/metrics` (and `/healthz`) endpoint.
    #[arg(long, env = "FLEXINFER_AGENT_METRICS_PORT", default_value_t = 9100)]
    pub metrics_port: u16,

    /// Prefix of the labels and annotations the agent writes.
    #[arg(long, env = "FLEXINFER_AGENT_LABEL_PREFIX", default_value = flexinfer_crds::labels::PREFIX, value_parser = label_prefix)]
    pub label_prefix: String,

    /// The Node to label (set from the downward API in the DaemonSet).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// Root of sysfs (AMD GPU discovery).
    #[arg(long, env = "FLEXINFER_AGENT_SYSFS_ROOT", default_value = "/sys")]
    pub sysfs_root: PathBuf,

    /// Root of procfs (CPU discovery).
    #[arg(long, env = "FLEXINFER_AGENT_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,

    /// NVML library to load (file name or path).
    #[arg(long, env = "FLEXINFER_NVML_LIBRARY", default_value = DEFAULT_LIBRARY)]
    pub nvml_library: PathBuf,

    /// AMD GPUs with less VRAM (MiB) count as integrated and are ignored,
    /// unless no GPU has more.
    #[arg(long, env = "FLEXINFER_AMD_MIN_DISCRETE_VRAM_MB", default_value_t = DEFAULT_MIN_DISCRETE_VRAM_MIB)]
    pub min_discrete_vram_mb: u64,

    /// Scrapes the KV-cache usage of the node's model servers (needs
    /// `list` on pods) for the `kv-cache-usage` annotation.
    #[arg(long, env = "FLEXINFER_AGENT_KV_CACHE", default_value_t = true, action = clap::ArgAction::Set)]
    pub kv_cache: bool,

    /// Discover once, print the labels and annotations as JSON and exit,
    /// without contacting the API server.
    #[arg(long)]
    pub dry_run: bool,
}

fn label_prefix(value: &str) -> Result<String, String> {
    let valid = !value.is_empty()
        && value.ends_with('/')
        && value.len() <= 254
        && value[..value.len() - 1]
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    if valid {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "{value:?} is not a label prefix: a lower-case DNS subdomain followed by '/'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: AgentConfig,
    }

    #[test]
    fn defaults_match_the_spec() {
        let cli = Cli::try_parse_from(["flexinfer-agent"]).unwrap();
        assert_eq!(cli.config.interval, Duration::from_secs(30));
        assert_eq!(cli.config.metrics_port, 9100);
        assert_eq!(cli.config.label_prefix, "flexinfer.ai/");
        assert_eq!(cli.config.sysfs_root, PathBuf::from("/sys"));
        assert_eq!(cli.config.min_discrete_vram_mb, 4096);
        assert!(!cli.config.dry_run);
    }

    #[test]
    fn label_prefix_must_be_a_dns_prefix() {
        assert!(Cli::try_parse_from(["x", "--label-prefix", "example.com/"]).is_ok());
        for bad in ["example.com", "Example.com/", "", "a b/"] {
            assert!(
                Cli::try_parse_from(["x", "--label-prefix", bad]).is_err(),
                "{bad}"
            );
        }
    }
}
