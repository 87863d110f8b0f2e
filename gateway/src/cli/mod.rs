//! Command-line flags; every environment variable listed in `docs/gateway.md`
//! (Flags and environment) maps to one flag with the default given there.

mod debug_config;
mod derived;
mod validate;

pub use debug_config::REDACTED;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use flexinfer_operator::controllers::{ControllerSettings, LeaderElection};
use flexinfer_operator::settings::ControllerArgs;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// OpenAI-compatible gateway in front of model servers.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "flexinfer-gateway",
    version,
    about = "OpenAI-compatible gateway in front of model servers",
    long_about = "OpenAI-compatible gateway in front of model servers (vLLM, Ollama, llama.cpp, \
MLC-LLM, diffusers, ComfyUI). It finds the model in each request (X-Model-ID header, \
/model/<name>/ path prefix, JSON `model`, or multipart `model` field), checks the API key and \
rate limits, resolves aliases and LoRA adapters, picks a pod with the model's routing strategy \
(default, session-affinity, prefix, least-loaded) and streams the response back. Models come \
from a YAML file that is reloaded when it changes or on SIGHUP, or, with --kubernetes, from the \
cluster's Model, ModelDeployment, LoRAAdapter and EndpointSlice objects. With --global, it is \
instead the global gateway in front of several clusters' gateways: each request goes to the \
nearest healthy cluster where the model is warm and fails over to the next cluster \
(docs/global-gateway.md).\n\n\
Side routes: /healthz and /readyz need no API key, nor does /metrics unless an API-key file is \
in force (it then needs an admin key on --listen, never on --metrics-listen); /v1/models lists \
the models a key may use."
)]
pub struct Cli {
    /// YAML file listing the models to serve (file mode, the default).
    #[arg(long, short = 'c', env = "FLEXINFER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Take models, endpoints and activation from the Kubernetes cluster
    /// instead of the model file.
    #[arg(long, env = "FLEXINFER_KUBERNETES", value_parser = BoolishValueParser::new())]
    pub kubernetes: bool,

    /// Global mode: a GlobalProxy manifest (or its `spec`) listing the member
    /// clusters' gateways to route to, instead of serving models; re-read
    /// when it changes.
    #[arg(long, env = "FLEXINFER_GLOBAL")]
    pub global: Option<PathBuf>,

    /// Global mode with the GlobalProxy object `NAMESPACE/NAME` of the
    /// Kubernetes cluster (watched; --kubeconfig applies) instead of a file.
    #[arg(long, env = "FLEXINFER_GLOBAL_OBJECT")]
    pub global_object: Option<String>,

    /// Global mode: time between health probes (`GET /v1/models`) of each
    /// member gateway.
    #[arg(long, env = "FLEXINFER_GLOBAL_PROBE_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub global_probe_interval: Duration,

    /// Global mode: longest a probe may take before it counts as failed.
    #[arg(long, env = "FLEXINFER_GLOBAL_PROBE_TIMEOUT", default_value = "1s", value_parser = humantime::parse_duration)]
    pub global_probe_timeout: Duration,

    /// Global mode: API key of the member gateways, sent with probes and
    /// instead of the client's key with requests.
    #[arg(long, env = "FLEXINFER_GLOBAL_MEMBER_TOKEN", hide_env_values = true)]
    pub global_member_token: Option<String>,

    /// Kubeconfig file for Kubernetes mode (default: in-cluster config, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// The gateway's own namespace, watched in Kubernetes mode unless
    /// --namespaces or --all-namespaces says otherwise.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub pod_namespace: String,

    /// Namespaces to watch, comma-separated; the first one's models keep
    /// their plain names, others are also reachable as `namespace/name`.
    #[arg(long, env = "FLEXINFER_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// Watch every namespace (POD_NAMESPACE keeps plain names first).
    #[arg(long, env = "FLEXINFER_ALL_NAMESPACES", value_parser = BoolishValueParser::new())]
    pub all_namespaces: bool,

    /// Kubernetes mode: run the operator's controllers (Model, ModelDeployment,
    /// GPUGroup, ModelCache, LoRAAdapter) inside the gateway, so that one
    /// Deployment is the whole control plane. They take the options of
    /// flexinfer-operator (--scheduler-name, --flash-loader-image, ...) and
    /// its image overrides of the backend catalog from the environment
    /// (DEFAULT_VLLM_IMAGE, ...). File mode always runs its own local
    /// operator.
    #[arg(long, env = "FLEXINFER_EMBEDDED_OPERATOR", value_parser = BoolishValueParser::new())]
    pub embedded_operator: bool,

    /// With --embedded-operator: only the replica holding the leader Lease
    /// runs the controllers; one that loses it stops them and starts them
    /// again when it leads again. Needed wherever two gateway pods may run
    /// at once (several replicas, or a rolling update); the chart always
    /// sets it.
    #[arg(long, env = "FLEXINFER_LEADER_ELECT", value_parser = BoolishValueParser::new())]
    pub leader_elect: bool,

    /// Name of the leader-election Lease (in POD_NAMESPACE).
    #[arg(
        long,
        env = "FLEXINFER_LEADER_ELECTION_LEASE",
        default_value = "flexinfer-operator"
    )]
    pub leader_election_lease: String,

    /// This replica's identity in the Lease (default: POD_NAME, else the host name).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,

    /// Full rebuild of the Kubernetes routes, a safety net behind the watches.
    #[arg(long, env = "FLEXINFER_KUBE_RESYNC", default_value = "5m", value_parser = humantime::parse_duration)]
    pub kube_resync: Duration,

    /// Least time between two activity (lastActiveTime) patches of one model.
    #[arg(long, env = "FLEXINFER_TOUCH_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    pub touch_interval: Duration,

    /// Address the proxy listens on.
    #[arg(long, env = "PROXY_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: String,

    /// Separate address serving /metrics, /healthz and /readyz (also served on --listen), never
    /// behind an API key: keep it inside the cluster (the chart's metrics port).
    #[arg(long, env = "PROXY_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,

    /// Worker threads of the proxy (0 = one per CPU core).
    #[arg(long, env = "PROXY_THREADS", default_value_t = 0)]
    pub threads: usize,

    /// Largest request body accepted, in bytes; larger bodies get 413.
    #[arg(long, env = "PROXY_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Longest time from the first byte of a request header to its end;
    /// slower clients get 408 and the connection is closed.
    #[arg(long, env = "PROXY_CLIENT_HEADER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub client_header_timeout: Duration,

    /// Largest request header (request line and all fields), in bytes;
    /// larger ones get 431 and the connection is closed.
    #[arg(long, env = "PROXY_MAX_HEADER_BYTES", default_value_t = 32 * 1024)]
    pub max_header_bytes: usize,

    /// Client connections open at once; further ones get 503 and are
    /// closed (0: no limit).
    #[arg(long, env = "PROXY_MAX_CONNECTIONS", default_value_t = 16_384)]
    pub max_connections: usize,

    /// Client connections open at once from one address (0: no limit).
    /// Behind an ingress or load balancer every connection may come from a
    /// few addresses: size it for those.
    #[arg(long, env = "PROXY_MAX_CONNECTIONS_PER_CLIENT", default_value_t = 0)]
    pub max_connections_per_client: usize,

    /// Require an API key (`Authorization: Bearer <key>` or `x-api-key`)
    /// on inference routes.
    #[arg(long, env = "PROXY_AUTH_ENABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub auth_enabled: bool,

    /// Accepted API keys, comma-separated.
    #[arg(
        long,
        env = "PROXY_AUTH_TOKEN",
        default_value = "",
        hide_env_values = true
    )]
    pub auth_token: String,

    /// File with accepted API keys, one per line.
    #[arg(long, env = "PROXY_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// API-key file (YAML): tenants with their keys (or the keys' SHA-256
    /// digests), the models each may use, a priority class and
    /// requests/s and tokens/min limits (docs/tenants.md). Turns API keys
    /// on; reloaded when it changes or on SIGHUP, keeping the keys in force
    /// when the new file is invalid. Keys of --auth-token stay valid as the
    /// tenant "anonymous".
    #[arg(long, env = "PROXY_API_KEY_FILE")]
    pub api_key_file: Option<PathBuf>,

    /// Admin keys, comma-separated: routes that change what a model server
    /// serves (LoRA adapter load/unload), when a model serves them, need
    /// one in `Authorization: Bearer`. Admin keys are accepted wherever
    /// API keys are.
    #[arg(
        long,
        env = "PROXY_ADMIN_AUTH_TOKEN",
        default_value = "",
        hide_env_values = true
    )]
    pub admin_auth_token: String,

    /// Enforce token-bucket rate limits.
    #[arg(long, env = "PROXY_RATE_LIMIT_ENABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub rate_limit_enabled: bool,

    /// Sustained requests/s allowed per model (a model's `rateLimit` overrides it).
    #[arg(long, env = "PROXY_RATE_LIMIT_PER_MODEL", default_value_t = 100.0)]
    pub rate_limit_per_model: f64,

    /// Burst allowed per model.
    #[arg(long, env = "PROXY_RATE_LIMIT_BURST", default_value_t = 50)]
    pub rate_limit_burst: u32,

    /// Sustained requests/s allowed over all models (≤ 0 disables the global bucket).
    #[arg(long, env = "PROXY_RATE_LIMIT_GLOBAL", default_value_t = 1000.0)]
    pub rate_limit_global: f64,

    /// Burst allowed over all models.
    #[arg(long, env = "PROXY_RATE_LIMIT_GLOBAL_BURST", default_value_t = 200)]
    pub rate_limit_global_burst: u32,

    /// Honour per-model routing strategies (off: every model uses default routing).
    #[arg(long, env = "PROXY_ROUTING_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    pub routing_enabled: bool,

    /// Longest explicit prefix-cache key (`X-Flexinfer-Cache-Key`, body
    /// `cache_key`) accepted; longer keys are ignored (0 means 128).
    #[arg(
        long,
        env = "PROXY_ROUTING_EXPLICIT_KEY_MAX_LENGTH",
        default_value_t = crate::routing::DEFAULT_EXPLICIT_KEY_MAX_LEN
    )]
    pub routing_explicit_key_max_length: usize,

    /// Characters of each system message (and of a legacy `prefix`) that
    /// make up a prefix routing key (0 means 512).
    #[arg(
        long,
        env = "PROXY_ROUTING_SYSTEM_SEGMENT_MAX_LENGTH",
        default_value_t = crate::routing::DEFAULT_SYSTEM_SEGMENT_MAX_LEN
    )]
    pub routing_system_segment_max_length: usize,

    /// Characters of the document context that go into a prefix routing
    /// key (0 means 256).
    #[arg(
        long,
        env = "PROXY_ROUTING_DOCUMENT_SEGMENT_MAX_LENGTH",
        default_value_t = crate::routing::DEFAULT_DOCUMENT_SEGMENT_MAX_LEN
    )]
    pub routing_document_segment_max_length: usize,

    /// Add `X-Flexinfer-Route: endpoint=<pod>; strategy=<s>[; reason=<why>]` to
    /// proxied responses, naming where the request went and why (debugging;
    /// it reveals endpoint addresses, so it is off by default). When API
    /// keys are required, only admin keys get it: a prefix-hit reason would
    /// tell a tenant what another one sent.
    #[arg(long, env = "FLEXINFER_PROXY_ROUTE_DEBUG_HEADER", default_value_t = false, action = clap::ArgAction::Set)]
    pub route_debug_header: bool,

    /// Give each tenant's chat, completion, Responses and Messages requests
    /// a `cache_salt` of its own (vLLM's prefix-cache isolation, vLLM 0.9 and
    /// later; other engines ignore or refuse the field), so that a prefix
    /// cache hit never tells one tenant what another sent. Cache-aware
    /// routing then scores prefixes per tenant too. The salt is derived
    /// from the tenant's keys, so no one without them can compute it; a
    /// client's own `cache_salt` is kept as part of the tenant's.
    #[arg(long, env = "FLEXINFER_PROXY_TENANT_CACHE_SALT", default_value_t = false, action = clap::ArgAction::Set)]
    pub tenant_cache_salt: bool,

    /// Output tokens a tenant with a token budget is charged for a chat,
    /// completion, Responses or Messages request that sets no output limit.
    /// The gateway then sets the request's limit to what was charged
    /// (`max_tokens`, `max_output_tokens` for Responses; lowered to what the
    /// tenant's budget holds), so that no answer outruns its budget.
    #[arg(
        long,
        env = "FLEXINFER_PROXY_TENANT_DEFAULT_MAX_TOKENS",
        default_value_t = 4096
    )]
    pub tenant_default_max_tokens: u64,

    /// Add `X-Flexinfer-Prompt-Tokens`, `X-Flexinfer-Finish-Reason` and
    /// `X-Flexinfer-Cached-Tokens` (when the engine reports cached tokens) to
    /// non-streamed completions, as the original gateway does. The answer
    /// (JSON, up to 4 MiB) is then held until it is complete and relayed
    /// byte-identical: the client gets its first byte with the last.
    /// `X-Flexinfer-Upstream-Ms` is on every completion answer regardless.
    #[arg(long, env = "FLEXINFER_PROXY_USAGE_HEADERS", default_value_t = false, action = clap::ArgAction::Set)]
    pub usage_headers: bool,

    /// Check chat, completion and embedding requests before forwarding
    /// them: a body without messages, with an unknown role, a field of the
    /// wrong type or a sampling value out of range gets 400
    /// `validation_error` instead of reaching an engine.
    #[arg(long, env = "PROXY_VALIDATE_REQUESTS", default_value_t = false, action = clap::ArgAction::Set)]
    pub validate_requests: bool,

    /// How a service label claimed by several models picks one of its Ready
    /// members: `round-robin` (also empty, the default), `least-loaded`,
    /// `prefix-or-rr`, `session-or-rr` or `prefix-session-or-rr`.
    #[arg(long, env = "FLEXINFER_PROXY_LABEL_GROUP_ROUTING")]
    pub label_group_routing: Option<String>,

    /// How often the engines of `cache-aware` models are asked for their load
    /// (`GET /metrics`: queue, running requests, KV-cache use, LoRA adapters).
    #[arg(long, env = "FLEXINFER_PROXY_LOAD_SCRAPE_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub load_scrape_interval: Duration,

    /// Longest a load scrape may take; an engine that does not answer in time
    /// is scored on the gateway's own request counts until it does.
    #[arg(long, env = "FLEXINFER_PROXY_LOAD_SCRAPE_TIMEOUT", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub load_scrape_timeout: Duration,

    /// Other replicas of this gateway (`host:port` of their peer listeners,
    /// comma-separated) to share cache-aware routing state with; a name
    /// resolving to several addresses (a headless Service) names them all,
    /// and this replica's own address is recognised and skipped. Empty:
    /// no sharing, nothing is spent on it.
    #[arg(long, env = "PROXY_ROUTING_PEERS", value_delimiter = ',')]
    pub routing_peers: Vec<String>,

    /// Address of the peer listener, where replicas post what they learn
    /// and fetch snapshots (only with PROXY_ROUTING_PEERS; signed, keep it
    /// inside the cluster).
    #[arg(
        long,
        env = "PROXY_ROUTING_PEER_LISTEN",
        default_value = "0.0.0.0:8091"
    )]
    pub routing_peer_listen: String,

    /// The secret shared by the replicas (at least 16 bytes); prefer
    /// PROXY_ROUTING_PEER_SECRET_FILE.
    #[arg(long, env = "PROXY_ROUTING_PEER_SECRET", hide_env_values = true)]
    pub routing_peer_secret: Option<String>,

    /// File holding the shared secret (surrounding whitespace ignored),
    /// re-read every second: a changed secret is taken up at once.
    #[arg(long, env = "PROXY_ROUTING_PEER_SECRET_FILE")]
    pub routing_peer_secret_file: Option<PathBuf>,

    /// Secret of the gateway's namespace (POD_NAMESPACE) holding the shared
    /// secret, read and watched through the Kubernetes API: every replica
    /// takes up a change within moments. Used when neither
    /// PROXY_ROUTING_PEER_SECRET nor PROXY_ROUTING_PEER_SECRET_FILE is set.
    #[arg(long, env = "PROXY_ROUTING_PEER_SECRET_NAME")]
    pub routing_peer_secret_name: Option<String>,

    /// Key of that Secret's data holding the shared secret.
    #[arg(long, env = "PROXY_ROUTING_PEER_SECRET_KEY", default_value = "secret")]
    pub routing_peer_secret_key: String,

    /// Write a random secret into that Secret when its key is missing or
    /// empty (the chart renders the Secret without data, so that a render
    /// holds nothing random). The first replica's write wins; the others
    /// read its value.
    #[arg(long, env = "PROXY_ROUTING_PEER_SECRET_GENERATE", default_value_t = false, action = clap::ArgAction::Set)]
    pub routing_peer_secret_generate: bool,

    /// After the shared secret changes, messages are signed with both the
    /// new and the previous secret, and either is accepted, for this long:
    /// replicas that see the change later keep sharing meanwhile (0: the
    /// previous secret is refused at once).
    #[arg(long, env = "PROXY_ROUTING_PEER_SECRET_GRACE", default_value = "2m", value_parser = humantime::parse_duration)]
    pub routing_peer_secret_grace: Duration,

    /// Time between two batches of records sent to the peers.
    #[arg(long, env = "PROXY_ROUTING_PEER_FLUSH_INTERVAL", default_value = "25ms", value_parser = humantime::parse_duration)]
    pub routing_peer_flush_interval: Duration,

    /// Longest exchange with a peer; a peer that does not answer in time
    /// misses that batch and is left alone for a backoff.
    #[arg(long, env = "PROXY_ROUTING_PEER_TIMEOUT", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub routing_peer_timeout: Duration,

    /// How often peer names are resolved again.
    #[arg(long, env = "PROXY_ROUTING_PEER_REFRESH", default_value = "5s", value_parser = humantime::parse_duration)]
    pub routing_peer_refresh: Duration,

    /// Connection attempts per request, each on another endpoint when one exists (1 to 3).
    #[arg(
        long,
        env = "FLEXINFER_PROXY_UPSTREAM_MAX_ATTEMPTS",
        default_value_t = 2
    )]
    pub upstream_max_attempts: usize,

    /// Consecutive connection failures (refused, timed out, closed before
    /// answering) that take an endpoint out of rotation (0: never).
    #[arg(
        long,
        env = "FLEXINFER_PROXY_OUTLIER_CONSECUTIVE_FAILURES",
        default_value_t = 3
    )]
    pub outlier_consecutive_failures: u32,

    /// How long the first ejection of an endpoint lasts; each ejection in a
    /// row doubles it. Afterwards one request tries the endpoint.
    #[arg(long, env = "FLEXINFER_PROXY_OUTLIER_BASE_EJECTION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub outlier_base_ejection: Duration,

    /// The longest ejection.
    #[arg(long, env = "FLEXINFER_PROXY_OUTLIER_MAX_EJECTION", default_value = "5m", value_parser = humantime::parse_duration)]
    pub outlier_max_ejection: Duration,

    /// Time between active health checks of fixed endpoints of models with
    /// a `health` path.
    #[arg(long, env = "FLEXINFER_PROXY_HEALTH_CHECK_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub health_check_interval: Duration,

    /// Longest a health check may take before it counts as failed.
    #[arg(long, env = "FLEXINFER_PROXY_HEALTH_CHECK_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub health_check_timeout: Duration,

    /// Time allowed to connect to an upstream pod.
    #[arg(long, env = "PROXY_UPSTREAM_CONNECT_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub upstream_connect_timeout: Duration,

    /// Longest silence allowed from an upstream while it answers (504 beyond).
    #[arg(long, env = "PROXY_UPSTREAM_READ_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    pub upstream_read_timeout: Duration,

    /// How long an idle upstream connection is kept for the next request.
    /// Keep it below the backends' own keep-alive timeout (uvicorn, behind
    /// vLLM, SGLang and llama-cpp-python, closes idle connections after
    /// 5 s): a connection the backend closes as a request goes out costs a
    /// retry.
    #[arg(long, env = "PROXY_UPSTREAM_KEEPALIVE_TIMEOUT", default_value = "4s", value_parser = humantime::parse_duration)]
    pub upstream_keepalive_timeout: Duration,

    /// Requests queued per model while it is activated from zero or while
    /// its endpoints are all busy (see --max-concurrency-per-endpoint). A
    /// request that ranks above a waiter takes its place when it is full.
    #[arg(long, env = "PROXY_MAX_QUEUE_SIZE", default_value_t = 100)]
    pub max_queue_size: usize,

    /// Requests each endpoint of a model serves at once (0: unbounded); a
    /// model's `maxConcurrency` (annotation `flexinfer.ai/max-concurrency`)
    /// overrides it. When every endpoint is busy, requests wait in the
    /// gateway, by priority class and in turns between tenants, for up to
    /// --queue-timeout, instead of piling onto the engines.
    #[arg(long, env = "PROXY_MAX_CONCURRENCY_PER_ENDPOINT", default_value_t = 0)]
    pub max_concurrency_per_endpoint: u32,

    /// Clamp `max_tokens` (or `max_completion_tokens`, `max_output_tokens`)
    /// above a model's context window less the prompt reserve, for models
    /// that declare their window (`maxModelLen`); the answer then carries
    /// `X-FlexInfer-MaxTokens-Clamped: <asked>-><cap>`.
    #[arg(long, env = "PROXY_MAX_TOKENS_CLAMP_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    pub max_tokens_clamp_enabled: bool,

    /// Tokens of the window kept for the prompt when clamping (0 means 512).
    #[arg(
        long,
        env = "PROXY_MAX_TOKENS_CLAMP_PROMPT_RESERVE_TOKENS",
        default_value_t = 512
    )]
    pub max_tokens_clamp_prompt_reserve_tokens: u64,

    /// Refuse, with 413 `context_window_exceeded`, requests of models
    /// annotated `flexinfer.ai/admission: context-bounded` (model file:
    /// `admission: context-bounded`) whose estimated prompt plus output
    /// limit exceeds the context window less the safety margin.
    #[arg(long, env = "PROXY_ADMISSION_ENABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub admission_enabled: bool,

    /// Percent of the context window admission keeps free (clamped to 0–50).
    #[arg(
        long,
        env = "PROXY_ADMISSION_SAFETY_MARGIN_PERCENT",
        default_value_t = 5,
        allow_negative_numbers = true
    )]
    pub admission_safety_margin_percent: i64,

    /// Output tokens admission assumes for a request without a limit.
    #[arg(long, env = "PROXY_ADMISSION_DEFAULT_MAX_TOKENS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub admission_default_max_tokens: u64,

    /// Longest time a request waits in an activation queue.
    #[arg(long, env = "PROXY_QUEUE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub queue_timeout: Duration,

    /// Longest time to wait for a model to become ready after activation.
    #[arg(long, env = "PROXY_COLD_START_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub cold_start_timeout: Duration,

    /// A streaming request (`stream: true` on chat, completions, Responses
    /// or Messages) still waiting for its model after this long (a cold
    /// start, a swap, a full set of slots) is sent its response head, then
    /// an SSE comment with the phase, the queue and an estimate every as
    /// long, so that proxies that cut idle connections (often after 60 s)
    /// keep it; a failure after the head ends the stream with an `error`
    /// event. Keep it below the shortest idle timeout in front of the
    /// gateway. 0 turns it off: held streams wait in silence.
    #[arg(long, env = "PROXY_HELD_STREAM_PROGRESS_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub held_stream_progress_interval: Duration,

    /// Try a failed activation again (a failed scale-up in Kubernetes mode,
    /// a local model whose process failed to start), with exponential
    /// backoff and jitter, while its requests wait.
    #[arg(long, env = "PROXY_BACKOFF_ENABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub backoff_enabled: bool,

    /// Activation retries when backoff is enabled.
    #[arg(long, env = "PROXY_BACKOFF_MAX_RETRIES", default_value_t = 3)]
    pub backoff_max_retries: u32,

    /// Wait before the first activation retry; doubled for each next one,
    /// up to --backoff-max-wait, times a random factor in [0.5, 1.5].
    #[arg(long, env = "PROXY_BACKOFF_INITIAL_WAIT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub backoff_initial_wait: Duration,

    /// Longest wait between two activation retries (before the random factor).
    #[arg(long, env = "PROXY_BACKOFF_MAX_WAIT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub backoff_max_wait: Duration,

    /// After SIGTERM, /readyz answers 503 `draining` and the proxy keeps
    /// serving for this long, even when idle, so that load balancers
    /// polling /readyz stop sending first; then requests in flight get up
    /// to --graceful-shutdown-timeout. Unset: no wait when idle, the
    /// gateway exits as soon as nothing is in flight (requests in flight,
    /// streams included, get up to 5s plus --graceful-shutdown-timeout).
    #[arg(long, env = "PROXY_SHUTDOWN_DRAIN_DELAY", value_parser = humantime::parse_duration)]
    pub shutdown_drain_delay: Option<Duration>,

    /// Longest time in-flight requests get to finish after SIGTERM, beyond
    /// the drain delay; what is still running then is cut.
    #[arg(long, env = "PROXY_GRACEFUL_SHUTDOWN_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    pub graceful_shutdown_timeout: Duration,

    /// How often the model file is checked for changes (SIGHUP reloads at once).
    #[arg(long, env = "PROXY_CONFIG_RELOAD_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub reload_interval: Duration,

    /// Log format.
    #[arg(long, env = "PROXY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,

    /// Log filter (e.g. `info`, `flexinfer_gateway=debug`); RUST_LOG wins when set.
    /// The default silences a benign connection-pool race that Pingora logs as an error.
    #[arg(
        long,
        env = "PROXY_LOG_LEVEL",
        default_value = "info,pingora_core::connectors=off"
    )]
    pub log_level: String,

    /// The Gateway API (Kubernetes mode): GatewayClasses naming this
    /// gateway's controller, their Gateways, HTTPRoutes and InferencePools.
    #[command(flatten, next_help_heading = "Gateway API")]
    pub gateway_api: GatewayApiArgs,

    /// Options of the embedded operator's controllers, the same as
    /// flexinfer-operator's; they apply with --embedded-operator only. Last
    /// field: its help heading holds for every argument after it.
    #[command(flatten, next_help_heading = "Embedded operator")]
    pub controllers: ControllerArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let cli = Cli::parse_from(["flexinfer-gateway", "--config", "m.yaml"]);
        assert_eq!(cli.max_queue_size, 100);
        assert_eq!(cli.queue_timeout, Duration::from_secs(60));
        assert_eq!(cli.held_stream_progress_interval, Duration::from_secs(10));
        assert_eq!(cli.cold_start_timeout, Duration::from_secs(60));
        assert!(!cli.backoff_enabled);
        assert_eq!(cli.backoff_max_retries, 3);
        assert_eq!(cli.rate_limit_global, 1000.0);
        assert_eq!(cli.rate_limit_global_burst, 200);
        assert_eq!(cli.rate_limit_per_model, 100.0);
        assert_eq!(cli.rate_limit_burst, 50);
        assert_eq!(cli.max_body_bytes, 16 * 1024 * 1024);
        assert_eq!(cli.attempts(), 2);
        assert!(cli.validate().is_ok());
    }

    #[test]
    fn auth_without_token_is_rejected() {
        let cli = Cli::parse_from([
            "flexinfer-gateway",
            "--config",
            "m.yaml",
            "--auth-enabled",
            "true",
        ]);
        let e = cli.validate().unwrap_err();
        assert!(e.contains("PROXY_AUTH_TOKEN"), "{e}");
        let cli = Cli::parse_from(["x", "-c", "m", "--upstream-max-attempts", "9"]);
        assert_eq!(cli.attempts(), 3);
    }

    #[test]
    fn backoff_waits_must_be_ordered() {
        let flags = |initial: &str, max: &str| {
            Cli::parse_from([
                "x",
                "--kubernetes",
                "--backoff-enabled",
                "true",
                "--backoff-initial-wait",
                initial,
                "--backoff-max-wait",
                max,
            ])
            .validate()
        };
        assert_eq!(
            flags("40s", "30s").unwrap_err(),
            "PROXY_BACKOFF_INITIAL_WAIT (40s) must be <= PROXY_BACKOFF_MAX_WAIT (30s)"
        );
        assert!(flags("5s", "30s").is_ok());
        assert!(flags("30s", "30s").is_ok());
        let cli = Cli::parse_from(["x", "--kubernetes"]);
        assert_eq!(
            (cli.backoff_initial_wait, cli.backoff_max_wait),
            (Duration::from_secs(5), Duration::from_secs(30))
        );
    }

    #[test]
    fn kubernetes_mode_flags() {
        let e = Cli::parse_from(["x"]).validate().unwrap_err();
        assert!(e.contains("--config (FLEXINFER_CONFIG) is required"), "{e}");
        let cli = Cli::parse_from(["x", "--kubernetes", "--namespaces", "a,b"]);
        assert!(cli.kubernetes && cli.config.is_none());
        assert_eq!(cli.namespaces, ["a", "b"]);
        assert_eq!(cli.touch_interval, Duration::from_secs(60));
        assert!(cli.validate().is_ok());
        let cli = Cli::parse_from(["x", "--kubernetes", "-c", "m.yaml"]);
        assert!(cli.validate().unwrap_err().contains("exclude each other"));
        let cli = Cli::parse_from(["x", "--kubernetes", "--namespaces", "a", "--all-namespaces"]);
        assert!(cli.validate().unwrap_err().contains("--all-namespaces"));
        let cli = Cli::parse_from(["x", "--kubernetes", "--embedded-operator", "--leader-elect"]);
        assert!(cli.validate().is_ok());
        assert_eq!(cli.leader_election_lease, "flexinfer-operator");
        let cli = Cli::parse_from(["x", "-c", "m.yaml", "--embedded-operator"]);
        assert!(cli.validate().unwrap_err().contains("--embedded-operator"));
    }

    #[test]
    fn embedded_operator_flags_map_onto_the_settings() {
        // The controllers' own flags are compared with the operator's in
        // `embedded_operator_settings_match_the_operators`; here, what the
        // gateway names differently: watched namespaces, the Lease's
        // namespace and name, the reporter.
        let cli = Cli::try_parse_from([
            "flexinfer-gateway",
            "--kubernetes",
            "--embedded-operator",
            "--pod-namespace=ops",
            "--namespaces=team-a",
            "--leader-elect",
            "--leader-election-lease=flexinfer-controllers",
            "--federation",
            "--cluster-failure-threshold=2",
        ])
        .unwrap();
        assert!(cli.validate().is_ok());
        let settings = cli.controller_settings("gateway-0", BTreeMap::new());
        assert_eq!(settings.namespace.as_deref(), Some("team-a"));
        let le = settings.leader_election.expect("leader election");
        assert_eq!(
            [le.namespace, le.lease_name, le.identity],
            ["ops", "flexinfer-controllers", "gateway-0"]
        );
        assert_eq!(settings.federation.map(|f| f.failure_threshold), Some(2));
        assert_eq!(settings.reporter, "flexinfer-gateway");
    }

    #[test]
    fn embedded_operator_settings_match_the_operators() {
        let flags = [
            "--scheduler-name=s",
            "--flash-loader-image=f:1",
            "--quantizer-image=q:1",
            "--shm-size-limit=16Gi",
            "--skip-crd-check",
            "--no-kv-cache-scrape",
        ];
        let gateway = Cli::try_parse_from(
            ["flexinfer-gateway", "--kubernetes", "--embedded-operator"]
                .into_iter()
                .chain(flags),
        )
        .unwrap();
        let operator = flexinfer_operator::cli::Cli::try_parse_from(
            ["flexinfer-operator"].into_iter().chain(flags),
        )
        .unwrap();
        let overrides = BTreeMap::from([("DEFAULT_VLLM_IMAGE".to_owned(), "vllm:x".to_owned())]);
        let from_gateway = gateway.controller_settings("a", overrides.clone());
        let from_operator = operator.controller_settings("a", overrides);
        assert_eq!(from_gateway.build, from_operator.build);
        assert_eq!(
            (from_gateway.check_crds, from_gateway.kv_cache_scrape),
            (from_operator.check_crds, from_operator.kv_cache_scrape)
        );
        // Without flags, the built-in defaults of both.
        let plain = Cli::try_parse_from(["x", "--kubernetes", "--embedded-operator"]).unwrap();
        let settings = plain.controller_settings("a", BTreeMap::new());
        assert_eq!(settings.build, Default::default());
        assert_eq!(settings.namespace.as_deref(), Some("default"));
        assert!(settings.leader_election.is_none() && settings.federation.is_none());
    }

    #[test]
    fn operator_flags_need_the_embedded_operator() {
        let e = Cli::parse_from(["x", "--kubernetes", "--scheduler-name=s"])
            .validate()
            .unwrap_err();
        assert!(e.contains("--scheduler-name configures"), "{e}");
        assert!(e.contains("--embedded-operator"), "{e}");
        let e = Cli::parse_from(["x", "-c", "m.yaml", "--quantizer-image=q", "--federation"])
            .validate()
            .unwrap_err();
        assert!(
            e.contains("--quantizer-image, --federation configure"),
            "{e}"
        );
        let cli = Cli::parse_from([
            "x",
            "--kubernetes",
            "--embedded-operator",
            "--scheduler-name=s",
        ]);
        assert!(cli.validate().is_ok());
    }

    #[test]
    fn label_group_routing_is_one_of_the_spec_modes() {
        use crate::label_groups::LabelGroupMode;
        let cli = Cli::parse_from(["x", "--kubernetes"]);
        assert_eq!(cli.label_group_mode(), Ok(LabelGroupMode::RoundRobin));
        let cli = Cli::parse_from(["x", "--kubernetes", "--label-group-routing", "least-loaded"]);
        assert_eq!(cli.label_group_mode(), Ok(LabelGroupMode::LeastLoaded));
        let e = Cli::parse_from(["x", "--kubernetes", "--label-group-routing", "rr"])
            .validate()
            .unwrap_err();
        assert!(
            e.starts_with("FLEXINFER_PROXY_LABEL_GROUP_ROUTING must be one of"),
            "{e}"
        );
    }

    #[test]
    fn global_mode_flags() {
        let cli = Cli::parse_from(["x", "--global", "g.yaml"]);
        assert!(cli.validate().is_ok());
        assert_eq!(cli.global_probe_interval, Duration::from_secs(2));
        assert_eq!(cli.global_probe_timeout, Duration::from_secs(1));
        for flags in [
            ["x", "--global", "g.yaml", "--config", "m.yaml"].as_slice(),
            ["x", "--global", "g.yaml", "--kubernetes"].as_slice(),
        ] {
            let e = Cli::parse_from(flags).validate().unwrap_err();
            assert!(e.contains("--global excludes"), "{e}");
        }
        let e = Cli::parse_from(["x", "--global", "g", "--global-probe-interval", "0s"])
            .validate()
            .unwrap_err();
        assert!(e.contains("FLEXINFER_GLOBAL_PROBE_INTERVAL"), "{e}");
        let e = Cli::parse_from(["x"]).validate().unwrap_err();
        assert!(e.contains("--global (FLEXINFER_GLOBAL)"), "{e}");
        let cli = Cli::parse_from(["x", "--global-object", "edge/global"]);
        assert!(cli.global_mode() && cli.validate().is_ok());
        let e = Cli::parse_from(["x", "--global-object", "global"])
            .validate()
            .unwrap_err();
        assert!(e.contains("NAMESPACE/NAME"), "{e}");
        let e = Cli::parse_from(["x", "--global", "g", "--global-object", "a/b"])
            .validate()
            .unwrap_err();
        assert!(e.contains("exclude each other"), "{e}");
    }
}

/// Options of the Gateway API controller (`docs/gateway-api.md`).
#[derive(clap::Args, Debug, Clone)]
pub struct GatewayApiArgs {
    /// Serve the Gateway API in Kubernetes mode: accept GatewayClasses
    /// whose controllerName is --gateway-api-controller-name, give each of
    /// their Gateways an address (a Service selecting this gateway's pods),
    /// route HTTPRoutes to InferencePools (picked by FlexInfer's own
    /// strategies), Services and Models, and write their status. Needs the
    /// Gateway API CRDs (v1, standard channel); InferencePool's is optional.
    #[arg(long = "gateway-api", env = "FLEXINFER_GATEWAY_API", value_parser = BoolishValueParser::new())]
    pub enabled: bool,

    /// The GatewayClass controllerName this gateway implements.
    #[arg(long = "gateway-api-controller-name", env = "FLEXINFER_GATEWAY_API_CONTROLLER_NAME", default_value = crate::gatewayapi::CONTROLLER_NAME)]
    pub controller_name: String,

    /// Data-plane ports, one per Gateway (a range `8180-8187` or a list):
    /// each Gateway's Service maps its listener ports to the port it was
    /// given, so the port a request arrives on names its Gateway. Gateways
    /// beyond the count are `Programmed=False` (NoResources).
    #[arg(long = "gateway-api-ports", env = "FLEXINFER_GATEWAY_API_PORTS", default_value = "8180-8187", value_parser = parse_ports)]
    pub ports: PortList,

    /// Labels of this gateway's own pods (`k=v,k=v`), the selector of the
    /// Services it makes for Gateways, in POD_NAMESPACE. The Helm chart sets it.
    #[arg(
        long = "gateway-api-pod-selector",
        env = "FLEXINFER_GATEWAY_API_POD_SELECTOR",
        default_value = ""
    )]
    pub pod_selector: String,

    /// Longest wait for an InferencePool's endpoint picker to pick (and to
    /// answer the response head); beyond it the pool's failureMode decides:
    /// FailOpen is served by FlexInfer's own picker, FailClose gets 503.
    #[arg(long = "gateway-api-picker-timeout", env = "FLEXINFER_GATEWAY_API_PICKER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub picker_timeout: Duration,

    /// Requests in flight through one endpoint picker; more are failed
    /// over at once, as if it were unreachable, so that a slow picker holds
    /// no more than this many requests.
    #[arg(
        long = "gateway-api-picker-max-in-flight",
        env = "FLEXINFER_GATEWAY_API_PICKER_MAX_IN_FLIGHT",
        default_value_t = 1024
    )]
    pub picker_max_in_flight: usize,
}

/// A list of ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortList(pub Vec<u16>);

/// `8090-8097`, `8090,8091` or a mix; at most 64 ports.
fn parse_ports(s: &str) -> Result<PortList, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let parse = |v: &str| {
            v.trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{v:?} is not a port (1-65535)"))
        };
        let (a, b) = (parse(a)?, parse(b)?);
        if a > b {
            return Err(format!("{part}: the range ends before it starts"));
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err("no port given".into());
    }
    if out.len() > 64 {
        return Err(format!("{} ports: at most 64", out.len()));
    }
    Ok(PortList(out))
}

impl GatewayApiArgs {
    /// How endpoint pickers are asked.
    pub fn picker_settings(&self) -> crate::epp::PickerSettings {
        crate::epp::PickerSettings {
            timeout: self.picker_timeout.max(Duration::from_millis(1)),
            max_in_flight: self.picker_max_in_flight.max(1),
            ..crate::epp::PickerSettings::default()
        }
    }

    /// The pod selector as labels; `Err` names a malformed pair.
    pub fn selector(&self) -> Result<std::collections::BTreeMap<String, String>, String> {
        self.pod_selector
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|pair| {
                pair.split_once('=')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .filter(|(k, _)| !k.is_empty())
                    .ok_or_else(|| {
                        format!("FLEXINFER_GATEWAY_API_POD_SELECTOR: {pair:?} is not key=value")
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod gateway_api_tests {
    use super::*;

    #[test]
    fn ports_take_ranges_and_lists() {
        assert_eq!(
            parse_ports("8090-8092, 9000").unwrap().0,
            vec![8090, 8091, 8092, 9000]
        );
        assert!(parse_ports("9-1").is_err());
        assert!(parse_ports("0").is_err());
        assert!(parse_ports("1-100").is_err());
        let cli = Cli::parse_from(["flexinfer-gateway", "--config", "m.yaml"]);
        assert!(!cli.gateway_api.enabled);
        assert_eq!(cli.gateway_api.ports.0.len(), 8);
        let mut args = cli.gateway_api.clone();
        args.pod_selector = "app=gw, release=x".into();
        assert_eq!(args.selector().unwrap().len(), 2);
        args.pod_selector = "app".into();
        assert!(args.selector().is_err());
        let file_mode =
            Cli::parse_from(["flexinfer-gateway", "--config", "m.yaml", "--gateway-api"]);
        assert!(file_mode
            .validate()
            .unwrap_err()
            .contains("needs Kubernetes mode"));
    }
}
