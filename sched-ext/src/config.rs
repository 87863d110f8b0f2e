//! Command-line and environment configuration of the extender.
//!
//! Every environment variable (`SCHED_*`, `BENCHMARK_RESULTS_CONFIGMAP`) is
//! also a flag, with the default listed in `sched-ext/README.md`.

use std::net::SocketAddr;

use clap::Args;

use crate::score::Weights;
use crate::tenant::FairShare;

/// Default listen address (the original extender served `:8888`).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8888";
/// Default request body limit: kube-scheduler sends every candidate Node in
/// full unless the extender is `nodeCacheCapable`, several KiB each.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Extender configuration.
#[derive(Args, Debug, Clone)]
pub struct ExtenderConfig {
    /// Address to serve `/filter`, `/prioritize` (alias `/score`),
    /// `/healthz` and `/metrics` on.
    #[arg(long, env = "SCHED_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// Largest accepted request body, in bytes.
    #[arg(long, env = "SCHED_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,

    /// Weight of measured tokens/s.
    #[arg(long, env = "SCHED_TPS_WEIGHT", default_value_t = Weights::DEFAULT.tps, value_parser = finite)]
    pub tps_weight: f64,

    /// Weight of GPU utilisation (node annotation `flexinfer.ai/gpu.util`).
    #[arg(long, env = "SCHED_UTIL_WEIGHT", default_value_t = Weights::DEFAULT.util, value_parser = finite)]
    pub util_weight: f64,

    /// Weight of node cost (node annotation `flexinfer.ai/cost`).
    #[arg(long, env = "SCHED_COST_WEIGHT", default_value_t = Weights::DEFAULT.cost, value_parser = finite)]
    pub cost_weight: f64,

    /// Weight of KV-cache usage (node annotation `flexinfer.ai/kv-cache-usage`).
    #[arg(long, env = "SCHED_CACHE_WEIGHT", default_value_t = Weights::DEFAULT.cache, value_parser = finite)]
    pub cache_weight: f64,

    /// Weight of the free-VRAM ratio.
    #[arg(long, env = "SCHED_VRAM_FREE_WEIGHT", default_value_t = Weights::DEFAULT.vram_free, value_parser = finite)]
    pub vram_free_weight: f64,

    /// Weight of the tenant fair-share headroom.
    #[arg(long, env = "SCHED_TENANT_FAIRSHARE_WEIGHT", default_value_t = Weights::DEFAULT.tenant_fair_share, value_parser = finite)]
    pub tenant_fairshare_weight: f64,

    /// Enables the tenant fair-share adjustment (watches pods).
    #[arg(long, env = "SCHED_TENANT_FAIRSHARE_ENABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub tenant_fairshare_enabled: bool,

    /// GPUs a tenant may use before its pods score below neutral.
    #[arg(long, env = "SCHED_TENANT_FAIRSHARE_BUDGET_GPUS", default_value_t = FairShare::DEFAULT_BUDGET_GPUS, value_parser = finite)]
    pub tenant_fairshare_budget_gpus: f64,

    /// Pod label naming the tenant; empty means the namespace is the tenant.
    #[arg(long, env = "SCHED_TENANT_LABEL_KEY", default_value = "")]
    pub tenant_label_key: String,

    /// Name of the global benchmark-results ConfigMap (in the pod's namespace).
    #[arg(long, env = "BENCHMARK_RESULTS_CONFIGMAP", default_value = flexinfer_crds::labels::BENCHMARK_RESULTS_CONFIG_MAP)]
    pub benchmark_results_configmap: String,

    /// Namespace to watch benchmark ConfigMaps (and, with fair share, pods)
    /// in; empty watches every namespace.
    #[arg(long, env = "SCHED_WATCH_NAMESPACE", default_value = "")]
    pub watch_namespace: String,

    /// Keeps a cache of Nodes so that requests carrying only `NodeNames`
    /// (extender configured `nodeCacheCapable: true`) can be answered.
    #[arg(long, env = "SCHED_NODE_CACHE", default_value_t = false, action = clap::ArgAction::Set)]
    pub node_cache: bool,

    /// Nodes whose metadata is remembered between requests, by name, uid
    /// and resourceVersion, so that unchanged nodes are not read again;
    /// 0 reads every node of every request.
    #[arg(long, env = "SCHED_KNOWN_NODES", default_value_t = crate::scan::known::DEFAULT_CAPACITY)]
    pub known_nodes: usize,
}

impl ExtenderConfig {
    /// The score weights.
    pub fn weights(&self) -> Weights {
        Weights {
            tps: self.tps_weight,
            util: self.util_weight,
            cost: self.cost_weight,
            cache: self.cache_weight,
            vram_free: self.vram_free_weight,
            tenant_fair_share: self.tenant_fairshare_weight,
        }
    }

    /// The fair-share settings.
    pub fn fair_share(&self) -> FairShare {
        FairShare {
            enabled: self.tenant_fairshare_enabled,
            budget_gpus: self.tenant_fairshare_budget_gpus,
            tenant_label_key: self.tenant_label_key.clone(),
        }
    }
}

fn finite(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(number) if number.is_finite() => Ok(number),
        _ => Err(format!("{value:?} is not a finite number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        config: ExtenderConfig,
    }

    /// Every weight is read from its `SCHED_*` env var, with its documented default.
    #[test]
    fn weights_come_from_spec_env_vars_with_spec_defaults() {
        let command = Cli::command();
        let expected = [
            ("tps_weight", "SCHED_TPS_WEIGHT", "0.7"),
            ("util_weight", "SCHED_UTIL_WEIGHT", "0.2"),
            ("cost_weight", "SCHED_COST_WEIGHT", "0.1"),
            ("cache_weight", "SCHED_CACHE_WEIGHT", "0.3"),
            ("vram_free_weight", "SCHED_VRAM_FREE_WEIGHT", "10"),
            (
                "tenant_fairshare_weight",
                "SCHED_TENANT_FAIRSHARE_WEIGHT",
                "5",
            ),
            (
                "tenant_fairshare_enabled",
                "SCHED_TENANT_FAIRSHARE_ENABLED",
                "false",
            ),
            (
                "tenant_fairshare_budget_gpus",
                "SCHED_TENANT_FAIRSHARE_BUDGET_GPUS",
                "1",
            ),
            ("tenant_label_key", "SCHED_TENANT_LABEL_KEY", ""),
            (
                "benchmark_results_configmap",
                "BENCHMARK_RESULTS_CONFIGMAP",
                "flexinfer-benchmark-results",
            ),
        ];
        for (id, env, default) in expected {
            let arg = command
                .get_arguments()
                .find(|arg| arg.get_id() == id)
                .unwrap_or_else(|| panic!("no argument {id}"));
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env), "{id}");
            let defaults: Vec<_> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            assert_eq!(defaults, [default], "{id}");
        }
    }

    #[test]
    fn flags_set_each_weight() {
        let cli = Cli::try_parse_from([
            "x",
            "--tps-weight",
            "1",
            "--util-weight",
            "2",
            "--cost-weight",
            "3",
            "--cache-weight",
            "4",
            "--vram-free-weight",
            "5",
            "--tenant-fairshare-weight",
            "6",
        ])
        .unwrap();
        assert_eq!(
            cli.config.weights(),
            Weights {
                tps: 1.0,
                util: 2.0,
                cost: 3.0,
                cache: 4.0,
                vram_free: 5.0,
                tenant_fair_share: 6.0,
            }
        );
    }

    #[test]
    fn rejects_non_finite_weights() {
        assert!(Cli::try_parse_from(["x", "--tps-weight", "NaN"]).is_err());
        assert!(Cli::try_parse_from(["x", "--util-weight", "inf"]).is_err());
        assert!(Cli::try_parse_from(["x", "--cost-weight", "cheap"]).is_err());
    }
}
