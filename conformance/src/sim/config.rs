//! The validated settings of one simulated model server.

use std::time::Duration;

/// Model name served when the configuration names none.
pub const DEFAULT_MODEL: &str = "sim-model";
/// Completion length when a request gives neither `max_tokens` nor `max_completion_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 16;
/// Length of the vectors `/v1/embeddings` returns when the request gives no `dimensions`.
pub const DEFAULT_EMBEDDING_DIM: usize = 384;
/// Context window checked against prompt + completion tokens, as vLLM's `--max-model-len`.
pub const DEFAULT_MAX_MODEL_LEN: u32 = 8192;
/// KV-cache size in tokens; `vllm:gpu_cache_usage_perc` is reserved tokens over this.
pub const DEFAULT_KV_CACHE_TOKENS: u64 = 65_536;
/// Tokens per KV-cache block, as vLLM's default `--block-size`.
pub const DEFAULT_BLOCK_SIZE: u32 = 16;
/// Capacity of the prefix cache in blocks.
pub const DEFAULT_PREFIX_CACHE_BLOCKS: usize = 4096;
/// How many requests the recorder keeps (oldest dropped first).
pub const DEFAULT_RECORDER_CAPACITY: usize = 1000;
/// Largest request body accepted; larger ones are answered 413.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Slowest token rate accepted (one token every 1000 s).
pub const MIN_TOKENS_PER_SECOND: f64 = 0.001;
/// How long in-flight requests may keep running after a shutdown signal.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A LoRA adapter loaded when the server starts, as vLLM's `--lora-modules name=path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoraModule {
    /// Name clients use as `model`.
    pub name: String,
    /// Path reported as the adapter's `root` in `/v1/models`.
    pub path: String,
}

/// Everything that shapes how a simulated server behaves.
///
/// Tests build one with struct update syntax over [`SimConfig::default`]; the
/// binary builds one from its command line. It is checked once by
/// [`SimConfig::validate`] before a server starts, so handlers never see
/// contradictory settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Served model names; the first is the default for requests without `model`.
    pub models: Vec<String>,
    /// LoRA adapters present from the start.
    pub lora_modules: Vec<LoraModule>,
    /// Identity sent in `X-Served-By`; `None` means `<hostname>:<port>`.
    pub pod_name: Option<String>,
    /// Time after start during which `/health` and the model endpoints answer 503.
    pub startup_delay: Duration,
    /// Time from admission to the first generated token, not counting prefill.
    pub ttft: Duration,
    /// Prompt tokens prefilled per second; the first token waits for the
    /// uncached prompt tokens at this rate on top of `ttft`. `0` is instant.
    pub prefill_tokens_per_second: f64,
    /// Token pacing after the first token; `0` generates instantly.
    pub tokens_per_second: f64,
    /// Requests generating at once; more wait in a FIFO queue. `0` is unlimited.
    pub max_concurrency: usize,
    /// Fraction (0..=1) of inference requests answered 500.
    pub fail_rate: f64,
    /// Close the connection after this many generated tokens (a crash mid-stream).
    pub fail_after_tokens: Option<u32>,
    /// Completion length when the request gives none.
    pub default_max_tokens: u32,
    /// Default embedding vector length.
    pub embedding_dim: usize,
    /// Context window for the prompt + completion length check.
    pub max_model_len: u32,
    /// KV-cache capacity in tokens, for the cache usage gauge.
    pub kv_cache_tokens: u64,
    /// Tokens per KV-cache block, the unit of prefix caching.
    pub block_size: u32,
    /// Prefix cache capacity in blocks; `0` disables prefix caching.
    pub prefix_cache_blocks: usize,
    /// Ring size of the request recorder; `0` disables recording.
    pub recorder_capacity: usize,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// How long in-flight requests may finish after shutdown is requested.
    pub shutdown_grace: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            models: vec![DEFAULT_MODEL.to_owned()],
            lora_modules: Vec::new(),
            pod_name: None,
            startup_delay: Duration::ZERO,
            ttft: Duration::ZERO,
            prefill_tokens_per_second: 0.0,
            tokens_per_second: 0.0,
            max_concurrency: 0,
            fail_rate: 0.0,
            fail_after_tokens: None,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            embedding_dim: DEFAULT_EMBEDDING_DIM,
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            kv_cache_tokens: DEFAULT_KV_CACHE_TOKENS,
            block_size: DEFAULT_BLOCK_SIZE,
            prefix_cache_blocks: DEFAULT_PREFIX_CACHE_BLOCKS,
            recorder_capacity: DEFAULT_RECORDER_CAPACITY,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// Why a [`SimConfig`] cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl SimConfig {
    /// A default configuration serving the given model names.
    pub fn with_models<I, S>(models: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            models: models.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Rejects settings no server could honour.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |msg: String| Err(ConfigError(msg));
        if self.models.is_empty() {
            return fail("at least one model name is required".into());
        }
        if let Some(m) = self.models.iter().find(|m| m.is_empty()) {
            return fail(format!("model names must not be empty (got {m:?})"));
        }
        for lora in &self.lora_modules {
            if lora.name.is_empty() || lora.path.is_empty() {
                return fail("LoRA modules need a name and a path (name=path)".into());
            }
            if self.models.contains(&lora.name) {
                return fail(format!(
                    "LoRA module {:?} has the name of a base model",
                    lora.name
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.fail_rate) {
            return fail(format!(
                "fail rate must be within 0..=1, got {}",
                self.fail_rate
            ));
        }
        let tps = self.tokens_per_second;
        if !tps.is_finite() || tps < 0.0 || (tps > 0.0 && tps < MIN_TOKENS_PER_SECOND) {
            return fail(format!(
                "tokens per second must be 0 (instant) or at least {MIN_TOKENS_PER_SECOND}, got {tps}"
            ));
        }
        let prefill = self.prefill_tokens_per_second;
        if !prefill.is_finite() || prefill < 0.0 {
            return fail(format!(
                "prefill tokens per second must be 0 (instant) or positive, got {prefill}"
            ));
        }
        if self.block_size == 0 {
            return fail("block size must be at least 1 token".into());
        }
        if self.default_max_tokens == 0 {
            return fail("default max tokens must be at least 1".into());
        }
        if self.embedding_dim == 0 {
            return fail("embedding dimension must be at least 1".into());
        }
        if self.max_model_len == 0 || self.kv_cache_tokens == 0 {
            return fail("max model length and KV-cache size must be at least 1".into());
        }
        Ok(())
    }

    /// The model used when a request names none.
    pub fn default_model(&self) -> &str {
        self.models.first().map_or(DEFAULT_MODEL, String::as_str)
    }

    /// Delay between two generated tokens, or `None` when generation is instant.
    pub fn inter_token_delay(&self) -> Option<Duration> {
        if self.tokens_per_second > 0.0 {
            Duration::try_from_secs_f64(1.0 / self.tokens_per_second).ok()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        assert_eq!(SimConfig::default().validate(), Ok(()));
        assert_eq!(SimConfig::default().default_model(), DEFAULT_MODEL);
    }

    #[test]
    fn rejects_bad_values() {
        let bad = [
            SimConfig {
                models: vec![],
                ..SimConfig::default()
            },
            SimConfig {
                fail_rate: 1.5,
                ..SimConfig::default()
            },
            SimConfig {
                tokens_per_second: f64::NAN,
                ..SimConfig::default()
            },
            SimConfig {
                embedding_dim: 0,
                ..SimConfig::default()
            },
            SimConfig {
                prefill_tokens_per_second: -1.0,
                ..SimConfig::default()
            },
            SimConfig {
                prefill_tokens_per_second: f64::INFINITY,
                ..SimConfig::default()
            },
            SimConfig {
                block_size: 0,
                ..SimConfig::default()
            },
            SimConfig {
                lora_modules: vec![LoraModule {
                    name: DEFAULT_MODEL.into(),
                    path: "/x".into(),
                }],
                ..SimConfig::default()
            },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?}");
        }
    }

    #[test]
    fn pacing() {
        assert_eq!(SimConfig::default().inter_token_delay(), None);
        let c = SimConfig {
            tokens_per_second: 4.0,
            ..SimConfig::default()
        };
        assert_eq!(c.inter_token_delay(), Some(Duration::from_millis(250)));
    }
}
