//! The vLLM-style Prometheus metrics the simulator exposes on `/metrics`.
//!
//! Names follow vLLM (`vllm:num_requests_running`, ...) with its `model_name`
//! label, so whatever scrapes a real vLLM pod (the gateway, the node agent,
//! the scheduler's KV-cache pressure check) can scrape the simulator too.
//! Each server owns its own registry, so several simulators can run in one
//! test process.

use axum::http::StatusCode;
use prometheus::{
    Encoder, Gauge, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

/// Why a generation ended, as vLLM's `finished_reason` label spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model ended on its own (no explicit token limit was given).
    Stop,
    /// The requested `max_tokens` was reached.
    Length,
}

impl FinishReason {
    /// The OpenAI/vLLM string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }
}

/// Handles to every metric; cheap atomics on the request path.
#[derive(Debug)]
pub struct SimMetrics {
    registry: Registry,
    /// Requests holding a generation slot.
    pub running: IntGauge,
    /// Requests queued for a slot.
    pub waiting: IntGauge,
    gpu_cache_usage: Gauge,
    kv_cache_usage: Gauge,
    /// Prompt tokens of admitted requests.
    pub prompt_tokens: IntCounter,
    /// Generated tokens sent to clients.
    pub generation_tokens: IntCounter,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_cache_queries: IntCounter,
    /// Prompt tokens found in the prefix cache.
    pub prefix_cache_hits: IntCounter,
    success_stop: IntCounter,
    success_length: IntCounter,
    /// Responses cut on purpose by `fail_after_tokens`.
    pub aborted: IntCounter,
    requests: IntCounterVec,
}

impl SimMetrics {
    /// Registers every metric, labelled with the served `model_name`.
    ///
    /// `vllm:cache_config_info` describes the prefix cache as vLLM's does:
    /// `block_size` (tokens) and `num_gpu_blocks` (its capacity).
    pub fn new(
        model_name: &str,
        block_size: u32,
        cache_blocks: usize,
    ) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let cache_info = IntGauge::with_opts(
            Opts::new(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig.",
            )
            .const_label("block_size", block_size.to_string())
            .const_label(
                "enable_prefix_caching",
                if cache_blocks > 0 { "True" } else { "False" },
            )
            .const_label("num_gpu_blocks", cache_blocks.to_string()),
        )?;
        cache_info.set(1);
        registry.register(Box::new(cache_info))?;
        let opts =
            |name: &str, help: &str| Opts::new(name, help).const_label("model_name", model_name);
        let running = IntGauge::with_opts(opts(
            "vllm:num_requests_running",
            "Number of requests currently running on GPU.",
        ))?;
        let waiting = IntGauge::with_opts(opts(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
        ))?;
        let gpu_cache_usage = Gauge::with_opts(opts(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.",
        ))?;
        let kv_cache_usage = Gauge::with_opts(opts(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
        ))?;
        let prompt_tokens = IntCounter::with_opts(opts(
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
        ))?;
        let generation_tokens = IntCounter::with_opts(opts(
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
        ))?;
        let prefix_cache_queries = IntCounter::with_opts(opts(
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
        ))?;
        let prefix_cache_hits = IntCounter::with_opts(opts(
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
        ))?;
        let success = IntCounterVec::new(
            opts(
                "vllm:request_success_total",
                "Count of successfully processed requests.",
            ),
            &["finished_reason"],
        )?;
        let aborted = IntCounter::new(
            "flexinfer_sim_aborted_responses_total",
            "Responses whose connection the simulator closed on purpose (fail-after-tokens).",
        )?;
        let requests = IntCounterVec::new(
            Opts::new(
                "flexinfer_sim_requests_total",
                "HTTP requests answered, by endpoint and status code.",
            ),
            &["endpoint", "code"],
        )?;
        registry.register(Box::new(running.clone()))?;
        registry.register(Box::new(waiting.clone()))?;
        registry.register(Box::new(gpu_cache_usage.clone()))?;
        registry.register(Box::new(kv_cache_usage.clone()))?;
        registry.register(Box::new(prompt_tokens.clone()))?;
        registry.register(Box::new(generation_tokens.clone()))?;
        registry.register(Box::new(prefix_cache_queries.clone()))?;
        registry.register(Box::new(prefix_cache_hits.clone()))?;
        registry.register(Box::new(success.clone()))?;
        registry.register(Box::new(aborted.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        Ok(Self {
            success_stop: success.with_label_values(&[FinishReason::Stop.as_str()]),
            success_length: success.with_label_values(&[FinishReason::Length.as_str()]),
            registry,
            running,
            waiting,
            gpu_cache_usage,
            kv_cache_usage,
            prompt_tokens,
            generation_tokens,
            prefix_cache_queries,
            prefix_cache_hits,
            aborted,
            requests,
        })
    }

    /// Counts a generation that ran to its end.
    pub fn finished(&self, reason: FinishReason) {
        match reason {
            FinishReason::Stop => self.success_stop.inc(),
            FinishReason::Length => self.success_length.inc(),
        }
    }

    /// Counts one prefix cache lookup of `queried` prompt tokens, `cached` of them found.
    pub fn prefix_cache_lookup(&self, queried: u32, cached: u32) {
        self.prefix_cache_queries.inc_by(u64::from(queried));
        self.prefix_cache_hits.inc_by(u64::from(cached));
    }

    /// Counts one answered HTTP request.
    pub fn answered(&self, endpoint: &str, status: StatusCode) {
        self.requests
            .with_label_values(&[endpoint, status.as_str()])
            .inc();
    }

    /// The text exposition, with the cache gauges set to `cache_usage` (0..=1).
    pub fn render(&self, cache_usage: f64) -> Vec<u8> {
        self.gpu_cache_usage.set(cache_usage);
        self.kv_cache_usage.set(cache_usage);
        let mut out = Vec::with_capacity(4096);
        // Encoding into a Vec only fails on invalid metric families, which registration prevents.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

/// The `Content-Type` of [`SimMetrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_vllm_names() {
        let metrics = SimMetrics::new("m", 16, 4096).expect("metrics");
        metrics.running.set(2);
        metrics.waiting.set(3);
        metrics.finished(FinishReason::Length);
        metrics.answered("chat_completions", StatusCode::OK);
        metrics.prefix_cache_lookup(40, 32);
        metrics.prefix_cache_lookup(8, 0);
        let text = String::from_utf8(metrics.render(0.25)).expect("utf8");
        for line in [
            "vllm:num_requests_running{model_name=\"m\"} 2",
            "vllm:num_requests_waiting{model_name=\"m\"} 3",
            "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25",
            "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25",
            "vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",num_gpu_blocks=\"4096\"} 1",
            "vllm:request_success_total{finished_reason=\"length\",model_name=\"m\"} 1",
            "vllm:prefix_cache_queries_total{model_name=\"m\"} 48",
            "vllm:prefix_cache_hits_total{model_name=\"m\"} 32",
            "flexinfer_sim_requests_total{code=\"200\",endpoint=\"chat_completions\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
