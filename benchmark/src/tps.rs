//! The scheduler's micro-benchmark: after the backend answers its readiness
//! probe and a few warm-up requests, stream single requests of a fixed
//! output length (128 tokens) and take the median decode speed. The result
//! is what `publish` writes for the scheduler extender.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Result};
use serde::Serialize;

use crate::client::Client;
use crate::measure::{self, Success};
use crate::stats;
use crate::target::Api;
use crate::workload::{Length, Workload};

/// Schema identifier of [`TpsResult`].
pub const TPS_SCHEMA: &str = "flexinfer-bench/tps/v1";

/// Default prompt, as the scheduler's benchmark has always used.
pub const DEFAULT_PROMPT: &str = "Write a long story about a space adventure to Mars.";

/// Consecutive failed samples after which the benchmark gives up.
pub const MAX_CONSECUTIVE_FAILURES: u32 = 3;

/// How often readiness is probed.
pub const READY_POLL: Duration = Duration::from_secs(1);

/// Backend names as the scheduler keys them: `llama.cpp` → `llamacpp`,
/// `mlc` → `mlc-llm`, empty → `ollama`; others lower-cased.
pub fn canonical_backend(backend: &str) -> String {
    match backend.trim().to_ascii_lowercase().as_str() {
        "" => "ollama".to_owned(),
        "llama.cpp" | "llama-cpp" => "llamacpp".to_owned(),
        "mlc" => "mlc-llm".to_owned(),
        other => other.to_owned(),
    }
}

/// Readiness paths probed for `backend` (relative to the base without `/v1`).
pub fn readiness_paths(backend: &str) -> &'static [&'static str] {
    match backend {
        "ollama" => &["/api/tags", "/v1/models"],
        "comfyui" => &["/api/system_stats", "/"],
        "tei" => &["/health", "/info"],
        _ => &["/health", "/v1/models"],
    }
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct TpsSpec {
    /// Canonical backend name.
    pub backend: String,
    /// Model name sent.
    pub model: String,
    /// API used.
    pub api: Api,
    /// Output tokens per request (the micro-batch).
    pub max_tokens: u32,
    /// Measured requests, at least.
    pub iterations: u32,
    /// Unmeasured requests first.
    pub warmup: u32,
    /// Keep sampling until this much time has passed too.
    pub min_duration: Duration,
    /// Per-request limit.
    pub timeout: Duration,
    /// How long to wait for readiness.
    pub ready_timeout: Duration,
    /// Prompt text.
    pub prompt: String,
}

/// One measured request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TpsSample {
    /// Output tokens.
    pub completion_tokens: u64,
    /// Seconds from the first to the last token.
    pub generation_s: f64,
    /// Decode speed of this request.
    pub tokens_per_second: f64,
    /// Time to first token, milliseconds.
    pub ttft_ms: Option<f64>,
}

/// The result (`--json`, schema `flexinfer-bench/tps/v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TpsResult {
    /// Always [`TPS_SCHEMA`].
    pub schema: &'static str,
    /// Model name.
    pub model: String,
    /// Canonical backend name.
    pub backend: String,
    /// Output tokens per request.
    pub max_tokens: u32,
    /// Warm-up requests.
    pub warmup_iterations: u32,
    /// Requested measured requests.
    pub iterations: u32,
    /// Minimum sampling time, seconds.
    pub min_duration_s: f64,
    /// Every measured request.
    pub samples: Vec<TpsSample>,
    /// Median of the samples' tokens/s: the published figure.
    pub tokens_per_second: f64,
    /// Output tokens of all samples.
    pub completion_tokens: u64,
    /// Generation seconds of all samples.
    pub duration_s: f64,
    /// Median time to first token, milliseconds.
    pub ttft_ms: Option<f64>,
    /// When it finished, RFC 3339 UTC.
    pub timestamp: String,
}

/// Waits until one of the backend's readiness paths answers 2xx.
pub async fn wait_ready(client: &Client, backend: &str, timeout: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        for path in readiness_paths(backend) {
            let path = client.target().root_path(path);
            if let Ok(mut conn) = client.connect().await {
                if let Ok(Ok(response)) =
                    tokio::time::timeout(READY_POLL * 5, conn.send(client.get(&path))).await
                {
                    if response.status().is_success() {
                        return Ok(());
                    }
                }
            }
        }
        if started.elapsed() >= timeout {
            bail!(
                "timed out waiting for model to become ready (waited {})",
                humantime::format_duration(Duration::from_secs(started.elapsed().as_secs()))
            );
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// Runs the micro-benchmark against a ready endpoint.
pub async fn run(client: &Client, spec: &TpsSpec) -> Result<TpsResult> {
    let workload = Workload {
        api: spec.api,
        model: spec.model.clone(),
        prompt_tokens: Length::Fixed(1),
        max_tokens: Length::Fixed(spec.max_tokens),
        stream: true,
        ignore_eos: false,
    };
    let body = workload.body(&spec.prompt, spec.max_tokens);
    let path = client.target().path(spec.api);
    let mut samples = Vec::new();
    let mut ttfts = Vec::new();
    let mut failures = 0;
    let mut warmups_left = spec.warmup;
    let mut sampling_since: Option<Instant> = None;
    loop {
        if warmups_left == 0 {
            let since = *sampling_since.get_or_insert_with(Instant::now);
            if samples.len() as u32 >= spec.iterations.max(1)
                && since.elapsed() >= spec.min_duration
            {
                break;
            }
        }
        let outcome = one_request(client, &path, body.clone(), spec.timeout).await;
        let success = match outcome {
            Ok(s) => {
                failures = 0;
                s
            }
            Err(class) => {
                failures += 1;
                if failures >= MAX_CONSECUTIVE_FAILURES {
                    bail!("benchmark request failed {failures} times in a row (last: {class})");
                }
                continue;
            }
        };
        if warmups_left > 0 {
            warmups_left -= 1;
            continue;
        }
        let Some(tps) = success.tokens_per_second else {
            bail!("the endpoint streamed fewer than two tokens; cannot measure tokens/s");
        };
        let generation_s = if tps > 0.0 {
            success.output_tokens.saturating_sub(1) as f64 / tps
        } else {
            0.0
        };
        if let Some(t) = success.ttft {
            ttfts.push(t.as_secs_f64() * 1000.0);
        }
        samples.push(TpsSample {
            completion_tokens: success.output_tokens,
            generation_s,
            tokens_per_second: tps,
            ttft_ms: success.ttft.map(|t| t.as_secs_f64() * 1000.0),
        });
    }
    let rates: Vec<f64> = samples.iter().map(|s| s.tokens_per_second).collect();
    Ok(TpsResult {
        schema: TPS_SCHEMA,
        model: spec.model.clone(),
        backend: spec.backend.clone(),
        max_tokens: spec.max_tokens,
        warmup_iterations: spec.warmup,
        iterations: spec.iterations,
        min_duration_s: spec.min_duration.as_secs_f64(),
        tokens_per_second: stats::median(&rates).unwrap_or(0.0),
        completion_tokens: samples.iter().map(|s| s.completion_tokens).sum(),
        duration_s: samples.iter().map(|s| s.generation_s).sum(),
        ttft_ms: stats::median(&ttfts),
        samples,
        timestamp: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
    })
}

async fn one_request(
    client: &Client,
    path: &str,
    body: bytes::Bytes,
    timeout: Duration,
) -> Result<Success, String> {
    let mut conn = client.connect().await.map_err(|_| "connect".to_owned())?;
    let mut gaps = Vec::new();
    match tokio::time::timeout(
        timeout,
        measure::measure(&mut conn, client.post(path, body), true, &mut gaps),
    )
    .await
    {
        Ok((_, outcome)) => outcome,
        Err(_) => Err("timeout".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_are_canonicalised() {
        assert_eq!(canonical_backend("llama.cpp"), "llamacpp");
        assert_eq!(canonical_backend("mlc"), "mlc-llm");
        assert_eq!(canonical_backend(""), "ollama");
        assert_eq!(canonical_backend("vLLM"), "vllm");
        assert_eq!(readiness_paths("ollama")[0], "/api/tags");
        assert_eq!(readiness_paths("vllm"), ["/health", "/v1/models"]);
    }
}
