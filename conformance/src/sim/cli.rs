//! The `flexinfer-sim` command line: every flag maps onto a [`SimConfig`]
//! field, and most can also come from a `FLEXINFER_SIM_*` environment variable.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::config::{self, LoraModule, SimConfig};

/// Simulated OpenAI-compatible model server (behaves like vLLM from the outside).
#[derive(Debug, Parser)]
#[command(
    name = "flexinfer-sim",
    version,
    about,
    long_about = "Simulated OpenAI-compatible model server that behaves like vLLM from the \
outside: /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings, \
/v1/images/generations, /v1/images/edits, /v1/load_lora_adapter, /v1/unload_lora_adapter, \
/health, /metrics (vllm: gauges); also OpenAI's Responses API (POST /v1/responses, JSON or \
SSE, and the follow-ups GET/DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items, \
POST /v1/responses/{id}/cancel over the last 10000 responses it created) and Anthropic's \
Messages API (POST /v1/messages, JSON or SSE, errors in Anthropic's shape). Load time, time to first token, prefill and token rate, \
concurrency, prefix caching and failures are configurable. Every request is recorded \
(GET/DELETE /sim/requests) and any other path echoes what it received.\n\n\
Prefix cache (like vLLM's automatic prefix caching): a prompt is rendered to bytes (each chat \
message's content text, or the concatenated text of its parts, followed by \"\\n\"; a \
completion's prompt string, the first of an array; token ids as 4 bytes each), a token is 4 of \
those bytes (rounded up; usage.prompt_tokens counts these) and a block is --block-size tokens. \
Full blocks are hashed in a chain, h_i = xxh3_64_with_seed(block_i, h_i-1) with h_-1 = 0, and \
kept in an LRU of --prefix-cache-blocks blocks. When a request gets its slot, its leading cached \
blocks are usage.prompt_tokens_details.cached_tokens (less the last block when every prompt \
token would be cached) and count in vllm:prefix_cache_hits_total (lookups in \
vllm:prefix_cache_queries_total); the other prompt tokens are prefilled at \
--prefill-tokens-per-second before the first token. POST /sim/prefix-match with a chat or \
completion body answers {\"prompt_tokens\": N, \"cached_tokens\": M, \"block_size\": B} for \
that request as admission would now, without touching the cache or the metrics.\n\n\
On start it prints one line to stdout: `flexinfer-sim listening on http://<addr>`."
)]
pub struct SimArgs {
    /// Run something other than the server.
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    /// Server settings.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Benchmark: start the simulator in-process with instant generation and
    /// drive it with keep-alive HTTP/1.1 connections, printing requests/s and
    /// latency percentiles for small non-streaming chat completions.
    Selftest(SelftestArgs),
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// Flags of the server.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Served model name; repeat (or comma-separate in the env var) for more. The first is the
    /// default for requests without `model`; other names are answered 404 like vLLM.
    #[arg(long = "model", env = "FLEXINFER_SIM_MODELS", value_delimiter = ',', default_value = config::DEFAULT_MODEL)]
    pub models: Vec<String>,

    /// Name the model is served under, replacing the --model names (which then name the
    /// weights, as for the engines): vLLM's --served-model-name, llama.cpp's --alias. So the
    /// simulator's image runs where an engine's would, with the args an engine gets.
    #[arg(
        long = "served-model-name",
        visible_alias = "alias",
        env = "FLEXINFER_SIM_SERVED_MODEL_NAME",
        value_delimiter = ','
    )]
    pub served_model_names: Vec<String>,

    /// llama.cpp's context window (--ctx-size, -c): sets --max-model-len.
    #[arg(long = "ctx-size", short = 'c')]
    pub ctx_size: Option<u32>,

    /// llama.cpp's --n-gpu-layers: accepted and ignored (nothing is offloaded).
    #[arg(long = "n-gpu-layers", hide = true, allow_hyphen_values = true)]
    pub n_gpu_layers: Option<i64>,

    /// llama.cpp's --threads: accepted and ignored.
    #[arg(long = "threads", hide = true)]
    pub threads: Option<u32>,

    /// LoRA adapter present from the start, as NAME=PATH (vLLM's --lora-modules); repeatable.
    #[arg(long = "lora-module", env = "FLEXINFER_SIM_LORA_MODULES", value_delimiter = ',', value_parser = parse_lora)]
    pub lora_modules: Vec<LoraModule>,

    /// Address to listen on.
    #[arg(long, env = "FLEXINFER_SIM_HOST", default_value = "127.0.0.1")]
    pub host: String,

    /// Port to listen on; 0 picks a free one (read it from the "listening on" line).
    #[arg(long, env = "FLEXINFER_SIM_PORT", default_value_t = 8000)]
    pub port: u16,

    /// Identity sent in the X-Served-By header of every response [default: <hostname>:<port>].
    #[arg(long, env = "FLEXINFER_SIM_POD_NAME")]
    pub pod_name: Option<String>,

    /// Simulated model load time: until it has passed, /health and the model endpoints answer 503.
    #[arg(long, env = "FLEXINFER_SIM_STARTUP_DELAY", value_parser = humantime::parse_duration, default_value = "0s")]
    pub startup_delay: Duration,

    /// Time to first token, from the moment a request gets a generation slot, plus the prefill
    /// time of --prefill-tokens-per-second.
    #[arg(long, env = "FLEXINFER_SIM_TTFT", value_parser = humantime::parse_duration, default_value = "0s")]
    pub ttft: Duration,

    /// Prompt tokens prefilled per second: the first token comes --ttft + uncached prompt tokens /
    /// rate after the request gets its slot (tokens found in the prefix cache cost nothing;
    /// embeddings pay for all their tokens). 0 means instant prefill; realistic demos use about
    /// 4000.
    #[arg(long, env = "FLEXINFER_SIM_PREFILL_TOKENS_PER_SECOND", value_parser = parse_non_negative, default_value_t = 0.0)]
    pub prefill_tokens_per_second: f64,

    /// Tokens generated per second after the first, for streaming and non-streaming requests
    /// (a non-streaming answer arrives after TTFT + (tokens - 1) / rate); 0 means instant.
    #[arg(long, env = "FLEXINFER_SIM_TOKENS_PER_SECOND", default_value_t = 0.0)]
    pub tokens_per_second: f64,

    /// Requests generating at once; further requests wait in a FIFO queue (shown as
    /// vllm:num_requests_waiting). 0 means unlimited. Also accepted as --max-num-seqs (vLLM's
    /// name).
    #[arg(
        long,
        alias = "max-num-seqs",
        env = "FLEXINFER_SIM_MAX_CONCURRENCY",
        default_value_t = 0
    )]
    pub max_concurrency: usize,

    /// Fraction (0..=1) of inference requests answered 500 at random.
    #[arg(long, env = "FLEXINFER_SIM_FAIL_RATE", value_parser = parse_fraction, default_value_t = 0.0)]
    pub fail_rate: f64,

    /// Close the connection after this many generated tokens, without finishing the response
    /// (simulates a backend crash mid-stream). Requests shorter than this are unaffected.
    #[arg(long, env = "FLEXINFER_SIM_FAIL_AFTER_TOKENS")]
    pub fail_after_tokens: Option<u32>,

    /// Completion length when a request gives neither max_tokens nor max_completion_tokens.
    /// Responses and Messages requests get this length, cut to their max_output_tokens or
    /// max_tokens when that is not larger (the answer then reports the cut).
    #[arg(long, env = "FLEXINFER_SIM_DEFAULT_MAX_TOKENS", default_value_t = config::DEFAULT_MAX_TOKENS)]
    pub default_max_tokens: u32,

    /// Length of embedding vectors when a request gives no `dimensions`.
    #[arg(long, env = "FLEXINFER_SIM_EMBEDDING_DIM", default_value_t = config::DEFAULT_EMBEDDING_DIM)]
    pub embedding_dim: usize,

    /// Context window: prompt + completion tokens above it are answered 400 like vLLM.
    #[arg(long, env = "FLEXINFER_SIM_MAX_MODEL_LEN", default_value_t = config::DEFAULT_MAX_MODEL_LEN)]
    pub max_model_len: u32,

    /// Simulated KV-cache size in tokens; vllm:gpu_cache_usage_perc is the prompt + completion
    /// tokens of running requests divided by this.
    #[arg(long, env = "FLEXINFER_SIM_KV_CACHE_TOKENS", default_value_t = config::DEFAULT_KV_CACHE_TOKENS)]
    pub kv_cache_tokens: u64,

    /// Tokens per KV-cache block (vLLM's --block-size): the prefix cache stores and matches whole
    /// blocks of block-size * 4 bytes of rendered prompt (a token is 4 bytes); a trailing partial
    /// block is never cached.
    #[arg(long, env = "FLEXINFER_SIM_BLOCK_SIZE", value_parser = clap::value_parser!(u32).range(1..), default_value_t = config::DEFAULT_BLOCK_SIZE)]
    pub block_size: u32,

    /// Prefix cache capacity in blocks, shared by all requests of this process and evicted least
    /// recently used first; 0 disables prefix caching (nothing is ever cached).
    #[arg(long, env = "FLEXINFER_SIM_PREFIX_CACHE_BLOCKS", default_value_t = config::DEFAULT_PREFIX_CACHE_BLOCKS)]
    pub prefix_cache_blocks: usize,

    /// How many requests GET /sim/requests keeps (the newest); 0 disables recording.
    #[arg(long, env = "FLEXINFER_SIM_RECORDER_CAPACITY", default_value_t = config::DEFAULT_RECORDER_CAPACITY)]
    pub recorder_capacity: usize,

    /// Largest accepted request body in bytes; larger ones are answered 413.
    #[arg(long, env = "FLEXINFER_SIM_MAX_BODY_BYTES", default_value_t = config::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,

    /// After SIGTERM or Ctrl-C, how long in-flight requests may still finish.
    #[arg(long, env = "FLEXINFER_SIM_SHUTDOWN_GRACE", value_parser = humantime::parse_duration, default_value = "10s")]
    pub shutdown_grace: Duration,

    /// Log format (logs go to stderr; filter with RUST_LOG).
    #[arg(long, env = "FLEXINFER_SIM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,
}

impl ServeArgs {
    /// The configuration these flags describe.
    pub fn config(&self) -> SimConfig {
        SimConfig {
            models: if self.served_model_names.is_empty() {
                self.models.clone()
            } else {
                self.served_model_names.clone()
            },
            lora_modules: self.lora_modules.clone(),
            pod_name: self.pod_name.clone(),
            startup_delay: self.startup_delay,
            ttft: self.ttft,
            prefill_tokens_per_second: self.prefill_tokens_per_second,
            tokens_per_second: self.tokens_per_second,
            max_concurrency: self.max_concurrency,
            fail_rate: self.fail_rate,
            fail_after_tokens: self.fail_after_tokens,
            default_max_tokens: self.default_max_tokens,
            embedding_dim: self.embedding_dim,
            max_model_len: self.ctx_size.unwrap_or(self.max_model_len),
            kv_cache_tokens: self.kv_cache_tokens,
            block_size: self.block_size,
            prefix_cache_blocks: self.prefix_cache_blocks,
            recorder_capacity: self.recorder_capacity,
            max_body_bytes: self.max_body_bytes,
            shutdown_grace: self.shutdown_grace,
        }
    }
}

/// Flags of `flexinfer-sim selftest`.
#[derive(Debug, Args)]
pub struct SelftestArgs {
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// How long to measure.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub duration: Duration,
    /// Load before measuring starts (not counted).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub warmup: Duration,
    /// max_tokens of each request.
    #[arg(long, default_value_t = 16)]
    pub max_tokens: u32,
    /// Turn the request recorder off (it is on in normal runs), to measure its cost.
    #[arg(long)]
    pub no_recorder: bool,
}

fn parse_lora(value: &str) -> Result<LoraModule, String> {
    match value.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok(LoraModule {
            name: name.to_owned(),
            path: path.to_owned(),
        }),
        _ => Err(format!("expected NAME=PATH, got {value:?}")),
    }
}

fn parse_fraction(value: &str) -> Result<f64, String> {
    let f: f64 = value.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(format!("must be between 0 and 1, got {f}"))
    }
}

fn parse_non_negative(value: &str) -> Result<f64, String> {
    let f: f64 = value.parse().map_err(|e| format!("{e}"))?;
    if f.is_finite() && f >= 0.0 {
        Ok(f)
    } else {
        Err(format!("must be 0 or a positive number, got {f}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        SimArgs::command().debug_assert();
    }

    #[test]
    fn flags_map_onto_the_config() {
        let args = SimArgs::try_parse_from([
            "flexinfer-sim",
            "--model",
            "a",
            "--model",
            "b",
            "--lora-module",
            "sql=/loras/sql",
            "--startup-delay",
            "2s",
            "--ttft",
            "150ms",
            "--tokens-per-second",
            "20",
            "--fail-rate",
            "0.5",
            "--fail-after-tokens",
            "3",
            "--port",
            "0",
        ])
        .expect("parse");
        let config = args.serve.config();
        assert_eq!(config.models, ["a", "b"]);
        assert_eq!(config.lora_modules[0].path, "/loras/sql");
        assert_eq!(config.startup_delay, Duration::from_secs(2));
        assert_eq!(config.ttft, Duration::from_millis(150));
        assert_eq!(config.fail_after_tokens, Some(3));
        assert_eq!(args.serve.port, 0);
        assert_eq!(config.block_size, config::DEFAULT_BLOCK_SIZE);
        assert_eq!(
            config.prefix_cache_blocks,
            config::DEFAULT_PREFIX_CACHE_BLOCKS
        );
        assert_eq!(config.prefill_tokens_per_second, 0.0);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn the_args_an_engine_gets_serve_its_name() {
        // What the operator renders for llama.cpp, and for vLLM.
        let llama = SimArgs::try_parse_from([
            "flexinfer-sim",
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "--model",
            "/models/sim-m.gguf",
            "--alias",
            "sim-m",
            "--ctx-size",
            "4096",
            "--n-gpu-layers",
            "0",
            "--threads",
            "4",
        ])
        .expect("llama.cpp args");
        let config = llama.serve.config();
        assert_eq!(config.models, ["sim-m"]);
        assert_eq!(config.max_model_len, 4096);
        let vllm = SimArgs::try_parse_from([
            "flexinfer-sim",
            "--model",
            "org/m",
            "--served-model-name",
            "m",
        ])
        .expect("vLLM args");
        assert_eq!(vllm.serve.config().models, ["m"]);
    }

    #[test]
    fn prefix_cache_flags_and_vllm_alias() {
        let args = SimArgs::try_parse_from([
            "flexinfer-sim",
            "--block-size",
            "32",
            "--prefix-cache-blocks",
            "0",
            "--prefill-tokens-per-second",
            "4000",
            "--max-num-seqs",
            "8",
        ])
        .expect("parse");
        let config = args.serve.config();
        assert_eq!(config.block_size, 32);
        assert_eq!(config.prefix_cache_blocks, 0);
        assert_eq!(config.prefill_tokens_per_second, 4000.0);
        assert_eq!(config.max_concurrency, 8);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn rejects_bad_values() {
        for bad in [
            ["flexinfer-sim", "--fail-rate", "2"],
            ["flexinfer-sim", "--lora-module", "noequals"],
            ["flexinfer-sim", "--ttft", "soon"],
            ["flexinfer-sim", "--block-size", "0"],
            ["flexinfer-sim", "--prefill-tokens-per-second", "-1"],
        ] {
            assert!(SimArgs::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn selftest_subcommand() {
        let args = SimArgs::try_parse_from(["flexinfer-sim", "selftest", "--connections", "4"])
            .expect("parse");
        assert!(matches!(
            args.command,
            Some(SimCommand::Selftest(SelftestArgs { connections: 4, .. }))
        ));
    }
}
