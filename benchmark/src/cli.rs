//! The command line: `load` (the user's view of an endpoint), `tps` (the
//! scheduler's micro-benchmark, optionally published to ConfigMaps) and
//! `routing` (how well a routing strategy uses the pods' prefix caches).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use flexinfer_crds::labels::BENCHMARK_RESULTS_CONFIG_MAP;

use crate::routing::workload::WorkloadKind;
use crate::routing::Strategy;
use crate::target::Api;
use crate::tps::DEFAULT_PROMPT;
use crate::workload::Length;

/// Tokens/s, TTFT and inter-token latency benchmark for OpenAI-compatible endpoints.
#[derive(Debug, Parser)]
#[command(name = "flexinfer-bench", version, about, long_about = LONG_ABOUT)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,

    /// Log format (logs go to stderr; filter with RUST_LOG).
    #[arg(long, global = true, env = "FLEXINFER_BENCH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,
}

const LONG_ABOUT: &str = "Measures an OpenAI-compatible endpoint the way users judge it: \
requests/s, output tokens/s (total and per request), time to first token and inter-token \
latency percentiles, per concurrency level, as a table, JSON or PNG chart (`load`); and the \
scheduler's tokens/s micro-benchmark, published to the ConfigMaps the scheduler extender \
reads (`tps --publish`); and how well a gateway's routing strategy uses the pods' prefix \
caches, against one gateway or against simulated pods started per strategy (`routing`).";

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load an endpoint at one or more concurrency levels and report
    /// throughput and latency percentiles.
    Load(LoadArgs),
    /// Median decode tokens/s of single 128-token requests (the scheduler's
    /// benchmark); prints it, or publishes it with --publish.
    Tps(TpsArgs),
    /// Replay multi-turn conversations sharing long system prompts and
    /// report prefix-cache hit rate, TTFT, throughput and load imbalance per
    /// routing strategy (one gateway with --url, or fresh simulated pods per
    /// strategy with --local).
    Routing(RoutingArgs),
}

/// The endpoint and how to talk to it.
#[derive(Debug, Args)]
pub struct EndpointArgs {
    /// Base URL (`http://host:port`, `/v1` optional; a gateway route such as
    /// `http://gw/model/NAME` works too).
    #[arg(long, env = "BENCHMARK_URL")]
    pub url: Option<String>,

    /// Model name sent in requests.
    #[arg(long, env = "MODEL_NAME")]
    pub model: String,

    /// API to measure.
    #[arg(long, value_enum, default_value_t = Api::Chat)]
    pub api: Api,

    /// Bearer token sent as `Authorization`.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Per-request time limit.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3m")]
    pub timeout: Duration,
}

/// Flags of `load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Endpoint.
    #[command(flatten)]
    pub endpoint: EndpointArgs,

    /// Concurrency levels, comma-separated; each runs in turn.
    #[arg(short, long, value_delimiter = ',', default_value = "1")]
    pub concurrency: Vec<usize>,

    /// Requests per level [default: 100 unless --duration is given].
    #[arg(short = 'n', long, conflicts_with = "duration")]
    pub requests: Option<u64>,

    /// Time per level instead of a request count (e.g. 30s).
    #[arg(short, long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,

    /// Unmeasured requests before each level.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,

    /// Prompt length in tokens: N, LO..HI (uniform) or normal:MEAN,SD.
    #[arg(long, default_value = "128")]
    pub prompt_tokens: Length,

    /// Output length (`max_tokens`): N, LO..HI (uniform) or normal:MEAN,SD.
    #[arg(long, default_value = "128")]
    pub max_tokens: Length,

    /// Ask for whole responses instead of streams (no TTFT or inter-token latency then).
    #[arg(long)]
    pub no_stream: bool,

    /// Send `ignore_eos: true` (vLLM) so every answer is exactly max_tokens long.
    #[arg(long)]
    pub ignore_eos: bool,

    /// Seed of the prompt and length draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Print the JSON report (schema flexinfer-bench/load/v1) instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Also write a PNG chart of the levels to FILE.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Worker threads of the load generator [default: number of CPUs].
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Flags of `tps`.
#[derive(Debug, Args)]
pub struct TpsArgs {
    /// Endpoint.
    #[command(flatten)]
    pub endpoint: EndpointArgs,

    /// Gateway base URL used when --url is not given: requests then go to
    /// `<proxy-url>/model/<model>`.
    #[arg(
        long,
        env = "BENCHMARK_PROXY_URL",
        default_value = "http://flexinfer-proxy.flexinfer-system.svc:80"
    )]
    pub proxy_url: String,

    /// Backend name (canonicalised: llama.cpp → llamacpp, mlc → mlc-llm).
    #[arg(long, env = "BENCHMARK_BACKEND", default_value = "ollama")]
    pub backend: String,

    /// Warm-up requests, not measured.
    #[arg(long, default_value_t = 2)]
    pub warmup_iterations: u32,

    /// Measured requests (at least).
    #[arg(long, default_value_t = 5)]
    pub iterations: u32,

    /// Keep measuring until this much time has passed too.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub min_duration: Duration,

    /// Output tokens per request (the micro-batch).
    #[arg(long, default_value_t = 128)]
    pub max_tokens: u32,

    /// Prompt text.
    #[arg(long, default_value = DEFAULT_PROMPT)]
    pub prompt: String,

    /// How long to wait for the backend's readiness probe.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    pub ready_timeout: Duration,

    /// Value of the X-FlexInfer-Internal-Workload-Class header (background
    /// requests never trigger cold starts); empty to omit it.
    #[arg(long, env = "FLEXINFER_WORKLOAD_CLASS", default_value = "background")]
    pub workload_class: String,

    /// Apply the results to the ConfigMaps (otherwise they are only printed).
    #[arg(long)]
    pub publish: bool,

    /// Per-deployment ConfigMap (the scheduler reads `<deployment>-benchmark-results`).
    #[arg(long)]
    pub configmap: Option<String>,

    /// Global results ConfigMap.
    #[arg(long, env = "BENCHMARK_RESULTS_CONFIGMAP", default_value = BENCHMARK_RESULTS_CONFIG_MAP)]
    pub global_configmap: String,

    /// Namespace of the ConfigMaps.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,

    /// Node whose GPU labels give the device class of the global entry.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,

    /// Device class given directly (`vendor=..,arch=..,vram=..,count=..,int4=..`), instead of --node.
    #[arg(long)]
    pub device_class: Option<String>,

    /// Print the JSON result (schema flexinfer-bench/tps/v1).
    #[arg(long)]
    pub json: bool,
}

/// Flags of `routing`.
#[derive(Debug, Args)]
pub struct RoutingArgs {
    /// Gateway base URL to measure (`/v1` optional); or use --local.
    #[arg(long, env = "BENCHMARK_URL", required_unless_present = "local")]
    pub url: Option<String>,

    /// Model name sent [default with --local: routing-model].
    #[arg(long, env = "MODEL_NAME", required_unless_present = "local")]
    pub model: Option<String>,

    /// Bearer token sent to the gateway as `Authorization`.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Pods' base URLs, comma-separated, whose /metrics give the hit rate
    /// and the load per pod (--url mode).
    #[arg(long, value_delimiter = ',', conflicts_with = "local")]
    pub pod_metrics: Vec<String>,

    /// Name of the --url run in the report.
    #[arg(long, default_value = "gateway", conflicts_with = "local")]
    pub label: String,

    /// Start fresh simulated pods (and a gateway) for each strategy instead of using --url.
    #[arg(long, conflicts_with = "url")]
    pub local: bool,

    /// Pods per strategy (--local).
    #[arg(long, default_value_t = 4)]
    pub pods: usize,

    /// Strategies run in turn (--local): round-robin, least-loaded, prefix,
    /// cache-aware (gateway `routing` values default, least-loaded, prefix,
    /// cache-aware), oracle (no gateway: the client picks the pod with
    /// the most cached tokens), sglang (SGLang Model Gateway, cache_aware)
    /// and peer (--peer-command).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "round-robin,least-loaded,prefix,cache-aware,oracle"
    )]
    pub strategies: Vec<Strategy>,

    /// Gateway replicas per strategy (--local). Requests are spread over
    /// them in turn, each to the next replica (as a Service spreads
    /// connections, but per request); the replicas share cache-aware
    /// routing state with each other unless --no-sharing is given.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub replicas: u32,

    /// With --replicas above 1: each replica keeps its routing state to itself.
    #[arg(long)]
    pub no_sharing: bool,

    /// Times a request is sent again when its connection failed before any
    /// answer came back (a replica that died, a keep-alive connection it
    /// had closed), each time to the next replica: as the official OpenAI
    /// SDKs do by default (`max_retries=2`). 0 counts every such request as
    /// failed. A stream cut after its answer began is never sent again.
    #[arg(long, default_value_t = 2)]
    pub client_retries: u32,

    /// With --replicas above 1: kill the last replica (SIGKILL) this long
    /// after the requests start (e.g. 10s). The client takes it out of its
    /// rotation after a connection to it fails and sends that request to
    /// the next replica; the report gives failed requests and those in
    /// flight on it.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub kill_replica_at: Option<Duration>,

    /// Start the killed replica again this long after the kill (same
    /// addresses and flags); the client uses it again once it answers,
    /// and the report follows its hit rate per second against the others'.
    #[arg(long, value_parser = humantime::parse_duration, requires = "kill_replica_at")]
    pub restart_after: Option<Duration>,

    /// Python with sglang-router installed, for strategy `sglang` (SGLang
    /// Model Gateway, policy cache_aware); `scripts/sglang-router.sh`
    /// installs it and prints this variable.
    #[arg(long, env = "SGLANG_ROUTER_PYTHON")]
    pub sglang_python: Option<PathBuf>,

    /// Command line of any other router, for strategy `peer`: `{port}` is
    /// its listening port on 127.0.0.1, `{workers}` the pods' URLs (one
    /// argument each), `{workers_csv}` the same comma-separated; ready
    /// when `GET /v1/models` answers 2xx.
    #[arg(long)]
    pub peer_command: Option<String>,

    /// flexinfer-sim binary [default: next to this executable].
    #[arg(long, env = "FLEXINFER_SIM_BIN")]
    pub sim_bin: Option<PathBuf>,

    /// flexinfer-gateway binary [default: next to this executable].
    #[arg(long, env = "FLEXINFER_GATEWAY_BIN")]
    pub gateway_bin: Option<PathBuf>,

    /// Tokens per prefix-cache block of the simulated pods.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub block_size: u32,

    /// Prefix-cache capacity of each simulated pod, in blocks (0 disables
    /// it) [default: five system prompts' worth, rounded up to a multiple
    /// of 16: 320 for 1000-token prompts].
    #[arg(long)]
    pub prefix_cache_blocks: Option<u64>,

    /// Prefill speed of the simulated pods: TTFT grows by uncached prompt tokens ÷ this.
    #[arg(long, default_value_t = 4000.0)]
    pub prefill_tokens_per_second: f64,

    /// Fixed part of the simulated pods' time to first token.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20ms")]
    pub ttft: Duration,

    /// Decode speed of the simulated pods, tokens/s per request.
    #[arg(long, default_value_t = 100.0)]
    pub tokens_per_second: f64,

    /// Requests generating at once per simulated pod (more wait in its queue).
    #[arg(long, default_value_t = 8)]
    pub max_num_seqs: u32,

    /// Who shares which prompt prefix.
    #[arg(long, value_enum, default_value_t = WorkloadKind::Shared)]
    pub workload: WorkloadKind,

    /// Tenants, each with its own system prompt.
    #[arg(long, default_value_t = 8)]
    pub tenants: usize,

    /// System prompt length, tokens (4 bytes each).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub system_tokens: u32,

    /// User message length, tokens.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub user_tokens: u32,

    /// Requests per conversation; each resends the whole history.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub turns: u32,

    /// Conversations played at once.
    #[arg(short, long, default_value_t = 16)]
    pub concurrency: usize,

    /// Requests per strategy [default: 400 unless --duration is given].
    #[arg(short = 'n', long, conflicts_with = "duration")]
    pub requests: Option<u64>,

    /// Time per strategy instead of a request count (e.g. 30s).
    #[arg(short, long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,

    /// `max_tokens` of every request.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,

    /// Seed of prompts and tenant draws (the same conversations for every strategy).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Per-request time limit.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3m")]
    pub timeout: Duration,

    /// Print the JSON report (schema flexinfer-bench/routing/v1) instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Also write a PNG chart (hit rate, TTFT p50/p99, imbalance per strategy) to FILE.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Worker threads of the load generator [default: number of CPUs].
    #[arg(long)]
    pub threads: Option<usize>,
}

impl TpsArgs {
    /// The base URL: --url, else the gateway route of the model.
    pub fn url(&self) -> String {
        match &self.endpoint.url {
            Some(url) if !url.is_empty() => url.clone(),
            _ => format!(
                "{}/model/{}",
                self.proxy_url.trim_end_matches('/'),
                self.endpoint.model
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("flexinfer-bench").chain(args.iter().copied()))
    }

    #[test]
    fn load_defaults_and_lists() {
        let cli = parse(&["load", "--url", "http://x", "--model", "m", "-c", "1,8,32"]).unwrap();
        let Command::Load(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.concurrency, [1, 8, 32]);
        assert_eq!((a.requests, a.duration), (None, None));
        assert_eq!(a.max_tokens, Length::Fixed(128));
        assert!(parse(&["load", "--model", "m", "-n", "5", "-d", "1s"]).is_err());
        assert!(parse(&["load", "--model", "m", "--max-tokens", "0"]).is_err());
    }

    #[test]
    fn tps_follows_the_scheduler_defaults() {
        let cli = parse(&["tps", "--model", "llama", "--backend", "vllm"]).unwrap();
        let Command::Tps(a) = cli.command else {
            panic!()
        };
        assert_eq!(
            (a.warmup_iterations, a.iterations, a.max_tokens),
            (2, 5, 128)
        );
        assert_eq!(a.min_duration, Duration::from_secs(30));
        assert_eq!(a.global_configmap, "flexinfer-benchmark-results");
        assert_eq!(
            a.url(),
            "http://flexinfer-proxy.flexinfer-system.svc:80/model/llama"
        );
        assert_eq!(a.prompt, DEFAULT_PROMPT);
    }

    #[test]
    fn routing_defaults_and_modes() {
        let cli = parse(&["routing", "--local"]).unwrap();
        let Command::Routing(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.strategies, Strategy::ALL[..5]);
        assert_eq!((a.pods, a.tenants, a.concurrency), (4, 8, 16));
        assert_eq!((a.system_tokens, a.user_tokens, a.turns), (1000, 50, 4));
        assert_eq!((a.block_size, a.max_num_seqs, a.max_tokens), (16, 8, 16));
        assert_eq!(a.prefill_tokens_per_second, 4000.0);
        assert_eq!(a.ttft, Duration::from_millis(20));
        assert_eq!(a.workload, WorkloadKind::Shared);
        assert_eq!((a.requests, a.prefix_cache_blocks), (None, None));

        let cli = parse(&[
            "routing",
            "--url",
            "http://gw:8080",
            "--model",
            "m",
            "--pod-metrics",
            "http://a:8000,http://b:8000",
            "--workload",
            "no-sharing",
        ])
        .unwrap();
        let Command::Routing(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.pod_metrics, ["http://a:8000", "http://b:8000"]);
        assert_eq!(a.workload, WorkloadKind::NoSharing);

        let strategies = parse(&["routing", "--local", "--strategies", "oracle,default"]).unwrap();
        let Command::Routing(a) = strategies.command else {
            panic!()
        };
        assert_eq!(a.strategies, [Strategy::Oracle, Strategy::RoundRobin]);
        for bad in [
            &["routing", "--local", "--url", "http://x"][..],
            &["routing", "--local", "--strategies", "fastest"],
            &["routing", "--local", "--pod-metrics", "http://a"],
            &["routing", "--local", "-n", "5", "-d", "1s"],
            &["routing", "--local", "--turns", "0"],
            &["routing", "--local", "--workload", "everything"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
