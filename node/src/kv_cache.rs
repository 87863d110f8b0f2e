//! KV-cache usage of the model servers on this node.
//!
//! The scheduler extender penalises nodes whose model servers are short of
//! KV cache (`flexinfer.ai/kv-cache-usage`). Each pass, the agent lists the
//! FlexInfer pods on its node (`app.kubernetes.io/managed-by=flexinfer`,
//! running, with an IP), scrapes `http://<podIP>:<port>/metrics` on the
//! backend ports 8000, 8080 and 11434 in turn (2 s timeout each) and
//! averages the usage ratios found: `vllm:gpu_cache_usage_perc`,
//! `vllm:kv_cache_usage_perc` (both 0–1 despite the name),
//! `vllm:gpu_cache_usage_percent`, `llamacpp:kv_cache_usage_ratio` and
//! `llamacpp_kv_cache_usage_ratio`. No pod reporting means no annotation.

use std::time::Duration;

use flexinfer_crds::labels::{APP_MANAGED_BY, MANAGED_BY_FLEXINFER};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

/// Metric names carrying a KV-cache usage ratio (0–1).
pub const USAGE_METRICS: [&str; 5] = [
    "vllm:gpu_cache_usage_perc",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_percent",
    "llamacpp:kv_cache_usage_ratio",
    "llamacpp_kv_cache_usage_ratio",
];

/// Ports the backends serve metrics on, tried in order.
pub const DEFAULT_PORTS: [u16; 3] = [8000, 8080, 11434];

/// Timeout of one scrape.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// The average KV-cache usage ratio in a Prometheus text exposition, over
/// every sample of the known metrics; `None` when there is none.
pub fn parse_usage(text: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let name_end = line.find(['{', ' '])?;
            if !USAGE_METRICS.contains(&&line[..name_end]) {
                return None;
            }
            // The value follows the labels (if any); a timestamp may follow it.
            let rest = match line[name_end..].strip_prefix('{') {
                Some(labels) => &labels[labels.rfind('}')? + 1..],
                None => &line[name_end..],
            };
            let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
            (value.is_finite() && value >= 0.0).then_some(value)
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Scrapes the model servers of one node.
#[derive(Clone)]
pub struct KvCacheProbe {
    pods: Api<Pod>,
    node_name: String,
    ports: Vec<u16>,
    http: reqwest::Client,
}

impl KvCacheProbe {
    /// A probe for the pods on `node_name`, scraping `ports` in order.
    pub fn new(client: Client, node_name: impl Into<String>, ports: Vec<u16>) -> Self {
        KvCacheProbe {
            pods: Api::all(client),
            node_name: node_name.into(),
            ports,
            http: reqwest::Client::builder()
                .timeout(SCRAPE_TIMEOUT)
                .build()
                .unwrap_or_default(),
        }
    }

    /// The average usage over the node's model servers that report one.
    pub async fn average_usage(&self) -> Result<Option<f64>, kube::Error> {
        let params = ListParams::default()
            .labels(&format!("{APP_MANAGED_BY}={MANAGED_BY_FLEXINFER}"))
            .fields(&format!("spec.nodeName={}", self.node_name));
        let pods = self.pods.list(&params).await?;
        let mut usages = Vec::new();
        for pod in &pods.items {
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
            if let (true, Some(ip)) = (running, ip) {
                if let Some(usage) = self.scrape(ip).await {
                    usages.push(usage);
                }
            }
        }
        Ok((!usages.is_empty()).then(|| usages.iter().sum::<f64>() / usages.len() as f64))
    }

    async fn scrape(&self, ip: &str) -> Option<f64> {
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_owned()
        };
        for port in &self.ports {
            let url = format!("http://{host}:{port}/metrics");
            let Ok(response) = self.http.get(&url).send().await else {
                continue;
            };
            if !response.status().is_success() {
                continue;
            }
            if let Some(usage) = response.text().await.ok().as_deref().and_then(parse_usage) {
                return Some(usage);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vllm_and_llamacpp_metrics() {
        let vllm = "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage.\n\
                    # TYPE vllm:gpu_cache_usage_perc gauge\n\
                    vllm:gpu_cache_usage_perc{model_name=\"qwen\"} 0.25\n\
                    vllm:num_requests_running{model_name=\"qwen\"} 3\n";
        assert_eq!(parse_usage(vllm), Some(0.25));
        let llamacpp = "llamacpp:kv_cache_usage_ratio 0.5 1700000000000\n";
        assert_eq!(parse_usage(llamacpp), Some(0.5));
        let two = "vllm:kv_cache_usage_perc{a=\"}\"} 0.2\nllamacpp_kv_cache_usage_ratio 0.4\n";
        assert!((parse_usage(two).unwrap() - 0.3).abs() < 1e-12);
    }

    #[test]
    fn ignores_other_and_malformed_lines() {
        assert_eq!(parse_usage(""), None);
        assert_eq!(parse_usage("vllm:gpu_cache_usage_perc_total 3\n"), None);
        assert_eq!(parse_usage("vllm:gpu_cache_usage_perc NaN\n"), None);
        assert_eq!(parse_usage("vllm:gpu_cache_usage_perc{x=\"1\"\n"), None);
        assert_eq!(parse_usage("# vllm:gpu_cache_usage_perc 0.9\n"), None);
    }
}
