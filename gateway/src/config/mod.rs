//! The model file: which models the gateway serves and where their pods are.
//!
//! The YAML file is parsed once into [`ModelFile`] and validated into a
//! [`ModelTable`]; the request path only ever sees the validated table.

mod local_process;

use std::collections::HashMap;

#[cfg(test)]
use local_process::expand_env;
use local_process::local_process;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use flexinfer_operator::local::LocalModelSpec;
use serde::Deserialize;

use crate::paths::PathPolicy;
use crate::routing::{CacheAwareOptions, Strategy, Upstream};

/// Longest model name or alias accepted, in bytes.
pub const MAX_MODEL_NAME_LEN: usize = 256;

/// Top level of the YAML model file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelFile {
    /// Models served by this gateway.
    #[serde(default)]
    pub models: Vec<ModelSpec>,
    /// Anti-thrashing settings of shared-GPU groups.
    #[serde(default)]
    pub sharing: Option<SharingSpec>,
}

/// Timing of shared-GPU groups (defaults: 5 min cooldown, 2 min demand window).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SharingSpec {
    /// No swap within this time of the previous one (e.g. `5m`).
    #[serde(default)]
    pub swap_cooldown: Option<String>,
    /// Demand older than this is ignored (e.g. `2m`).
    #[serde(default)]
    pub demand_window: Option<String>,
}

/// Scale-to-zero settings of a locally run model (as the Model CRD's `spec.serverless`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerlessSpec {
    /// Whether the model stops when idle (default true).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Idle time before the process is stopped (default `300s`).
    #[serde(default)]
    pub idle_timeout: Option<String>,
    /// Processes kept running while idle: 0 or 1 (default 0).
    #[serde(default)]
    pub min_replicas: Option<u32>,
    /// Longest wait for a cold start before requests get 503 (default: the gateway's).
    #[serde(default)]
    pub cold_start_timeout: Option<String>,
}

/// GPU sharing of a locally run model (as the Model CRD's `spec.gpu`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GpuSpec {
    /// Group of models that share one GPU: at most one of them runs at a time.
    #[serde(default)]
    pub shared: Option<String>,
    /// Higher priority may preempt lower; equal only an idle leader.
    #[serde(default)]
    pub priority: Option<i32>,
}

/// One model entry of the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModelSpec {
    /// Canonical model name clients ask for.
    pub name: String,
    /// Other names that resolve to this model (service labels, LiteLLM aliases).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Name put in the forwarded JSON body; defaults to `name`.
    #[serde(default)]
    pub backend_model: Option<String>,
    /// Routing strategy: `default`, `session-affinity`, `prefix`, `least-loaded`
    /// or `cache-aware`.
    #[serde(default)]
    pub routing: Option<String>,
    /// Bounded-load factor for hash strategies (e.g. `1.25`); off when absent.
    #[serde(default)]
    pub bounded_load: Option<f64>,
    /// Weights and sizes of `routing: cache-aware`.
    #[serde(default)]
    pub cache_aware: Option<CacheAwareSpec>,
    /// Upstream pods, as `http://host:port` URLs.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// LoRA adapters served by this model's pods.
    #[serde(default)]
    pub lora_adapters: Vec<LoraSpec>,
    /// Path prefixes clients may reach on the model's servers, replacing
    /// the default inference API (see `docs/gateway.md`).
    #[serde(default)]
    pub serve_paths: Vec<String>,
    /// Per-model rate limit overriding the gateway's default.
    #[serde(default)]
    pub rate_limit: Option<RateLimitSpec>,
    /// Requests each endpoint serves at once; more wait in the gateway's
    /// queue (by priority and tenant) instead of piling onto the engine.
    /// Overrides `--max-concurrency-per-endpoint`.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// The model's context window in tokens: `max_tokens` beyond it (less
    /// the prompt reserve) is clamped, and with `admission:
    /// context-bounded` prompts that cannot fit are refused (413).
    #[serde(default)]
    pub max_model_len: Option<u64>,
    /// `context-bounded`: refuse requests whose estimated prompt and
    /// `max_tokens` exceed the window (with `--admission-enabled`).
    #[serde(default)]
    pub admission: Option<String>,
    /// Command that serves the model on this machine; the gateway starts it on
    /// demand and stops it when idle (instead of fixed `endpoints`).
    #[serde(default)]
    pub command: Option<String>,
    /// Arguments of `command`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment of `command`.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Port `command` listens on (on 127.0.0.1).
    #[serde(default)]
    pub port: Option<u16>,
    /// Health path answering 200 once the model is loaded (default `/health`).
    #[serde(default)]
    pub health: Option<String>,
    /// Longest time the process may take to turn healthy (default `10m`).
    #[serde(default)]
    pub startup_timeout: Option<String>,
    /// Scale-to-zero settings.
    #[serde(default)]
    pub serverless: Option<ServerlessSpec>,
    /// Shared-GPU group and priority.
    #[serde(default)]
    pub gpu: Option<GpuSpec>,
    /// Mid-stream failover: `on`, `off` (default), or the APIs whose streams
    /// are resumed on another endpoint when their engine fails (`chat`,
    /// `completions`); see `docs/routing.md`.
    #[serde(default)]
    pub stream_failover: Option<FailoverSetting>,
}

/// `streamFailover` as written: a boolean or a list of APIs.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FailoverSetting {
    /// `true` or `false`.
    Switch(bool),
    /// `on`, `off`, or APIs separated by commas.
    Apis(String),
}

/// Knobs of cache-aware routing; each one absent keeps its default
/// (see `docs/routing.md`).
#[derive(Debug, Clone, Copy, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CacheAwareSpec {
    /// Weight of the cached-prefix share (default 2).
    #[serde(default)]
    pub prefix_weight: Option<f64>,
    /// Weight of the relative load (default 1).
    #[serde(default)]
    pub load_weight: Option<f64>,
    /// Weight of the engine's KV-cache use (default 0.5).
    #[serde(default)]
    pub kv_weight: Option<f64>,
    /// Tokens per block, as the engine's block size (default 16).
    #[serde(default)]
    pub block_size: Option<usize>,
    /// Blocks remembered per endpoint (default: the KV-cache size the
    /// engine reports, else 16384).
    #[serde(default)]
    pub blocks_per_endpoint: Option<usize>,
    /// Requests in flight a pod always may hold before load spills a hot
    /// prefix elsewhere (default 4).
    #[serde(default)]
    pub load_bound_floor: Option<usize>,
    /// Share of the prompt a pod must hold for the longest cached prefix to
    /// decide the pick (default 0.3; 1 turns the rule off).
    #[serde(default)]
    pub match_threshold: Option<f64>,
}

impl CacheAwareSpec {
    /// The options, defaults filled in.
    pub fn options(&self) -> CacheAwareOptions {
        let d = CacheAwareOptions::default();
        CacheAwareOptions {
            prefix_weight: self.prefix_weight.unwrap_or(d.prefix_weight),
            load_weight: self.load_weight.unwrap_or(d.load_weight),
            kv_weight: self.kv_weight.unwrap_or(d.kv_weight),
            block_size: self.block_size.unwrap_or(d.block_size),
            blocks_per_endpoint: self.blocks_per_endpoint.or(d.blocks_per_endpoint),
            load_bound_floor: self.load_bound_floor.unwrap_or(d.load_bound_floor),
            match_threshold: self.match_threshold.unwrap_or(d.match_threshold),
        }
    }
}

/// A LoRA adapter: requests for `name` go to the base model's pods with
/// `adapter` (default `name`) as the model the backend sees.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LoraSpec {
    /// Name clients use.
    pub name: String,
    /// Adapter name the backend expects; defaults to `name`.
    #[serde(default)]
    pub adapter: Option<String>,
}

/// Token-bucket limit: sustained requests per second and burst size.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimitSpec {
    /// Sustained requests per second (> 0).
    pub requests_per_second: f64,
    /// Bucket size; defaults to one second's worth of requests.
    #[serde(default)]
    pub burst: Option<u32>,
}

/// A validated model, ready for the request path.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Canonical name.
    pub name: String,
    /// Aliases resolving to this model.
    pub aliases: Vec<String>,
    /// Name sent upstream in JSON bodies.
    pub backend_model: String,
    /// Routing strategy.
    pub strategy: Strategy,
    /// Bounded-load factor for hash strategies.
    pub bounded_load: Option<f64>,
    /// Weights and sizes of cache-aware routing.
    pub cache_aware: CacheAwareOptions,
    /// Upstream pods.
    pub upstreams: Vec<Upstream>,
    /// LoRA adapter name → adapter name sent upstream.
    pub lora: HashMap<String, String>,
    /// Per-model rate limit.
    pub rate_limit: Option<RateLimitSpec>,
    /// Paths clients may reach on the model's servers.
    pub paths: PathPolicy,
    /// Active health checks of fixed endpoints: the path probed.
    pub health_check: Option<String>,
    /// How to run the model locally, when the gateway runs it.
    pub local: Option<LocalModelSpec>,
    /// The model's own bound on a cold start's wait (`coldStartTimeout`),
    /// when it has one: queued requests wait at least this long.
    pub cold_start_timeout: Option<Duration>,
    /// Requests each endpoint serves at once, when bounded.
    pub max_concurrency: Option<u32>,
    /// Context window in tokens, when known.
    pub context_window: Option<u64>,
    /// APIs whose streams are resumed on another endpoint mid-answer.
    pub stream_failover: crate::resume::StreamFailover,
    /// Whether requests that cannot fit the window are refused.
    pub context_admission: bool,
}

/// Validated shared-group timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharingConfig {
    /// No swap within this time of the previous one.
    pub swap_cooldown: Duration,
    /// Demand older than this is ignored.
    pub demand_window: Duration,
}

impl Default for SharingConfig {
    fn default() -> Self {
        Self {
            swap_cooldown: Duration::from_secs(300),
            demand_window: Duration::from_secs(120),
        }
    }
}

/// The validated set of models.
#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    /// Models in file order.
    pub models: Vec<ModelConfig>,
    /// Shared-group timing.
    pub sharing: SharingConfig,
    /// Service labels claimed by two or more models (Kubernetes mode).
    pub label_groups: Vec<crate::label_groups::LabelGroupSpec>,
}

/// A problem found while loading the model file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read model file {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The YAML does not match the schema.
    #[error("invalid model file {path}: {message}")]
    Parse {
        /// File path.
        path: String,
        /// Parser message with location.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("invalid model file: {0}")]
    Invalid(String),
}

impl ModelTable {
    /// Reads and validates a model file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates YAML text.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let file: ModelFile = if text.trim().is_empty() {
            ModelFile::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| ConfigError::Parse {
                path: String::new(),
                message: e.to_string(),
            })?
        };
        Self::validate(file)
    }

    /// Validates a parsed file.
    pub fn validate(file: ModelFile) -> Result<Self, ConfigError> {
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut claim = |name: &str, owner: &str| -> Result<(), ConfigError> {
            check_name(name)?;
            if let Some(prev) = seen.insert(name.to_string(), owner.to_string()) {
                return Err(ConfigError::Invalid(format!(
                    "name '{name}' is used by both model '{prev}' and model '{owner}'"
                )));
            }
            Ok(())
        };
        let mut models = Vec::with_capacity(file.models.len());
        for spec in file.models {
            claim(&spec.name, &spec.name)?;
            for alias in &spec.aliases {
                claim(alias, &spec.name)?;
            }
            let mut lora = HashMap::new();
            for adapter in &spec.lora_adapters {
                claim(&adapter.name, &spec.name)?;
                let upstream_name = adapter
                    .adapter
                    .clone()
                    .unwrap_or_else(|| adapter.name.clone());
                lora.insert(adapter.name.clone(), upstream_name);
            }
            let strategy: Strategy = spec
                .routing
                .as_deref()
                .unwrap_or("")
                .parse()
                .map_err(|e| ConfigError::Invalid(format!("model '{}': {e}", spec.name)))?;
            if let Some(f) = spec.bounded_load {
                if !(f.is_finite() && f >= 1.0) {
                    return Err(ConfigError::Invalid(format!(
                        "model '{}': boundedLoad must be a number >= 1.0, got {f}",
                        spec.name
                    )));
                }
            }
            let cache_aware = spec.cache_aware.unwrap_or_default().options();
            cache_aware
                .validate()
                .map_err(|e| ConfigError::Invalid(format!("model '{}': {e}", spec.name)))?;
            if let Some(rl) = spec.rate_limit {
                if !(rl.requests_per_second.is_finite() && rl.requests_per_second > 0.0) {
                    return Err(ConfigError::Invalid(format!(
                        "model '{}': rateLimit.requestsPerSecond must be > 0",
                        spec.name
                    )));
                }
            }
            let stream_failover = match &spec.stream_failover {
                None => Default::default(),
                Some(FailoverSetting::Switch(on)) => {
                    if *on {
                        crate::resume::StreamFailover::ALL
                    } else {
                        Default::default()
                    }
                }
                Some(FailoverSetting::Apis(apis)) => apis.parse().map_err(|e| {
                    ConfigError::Invalid(format!("model '{}': streamFailover: {e}", spec.name))
                })?,
            };
            let (local, local_cold_start) = local_process(&spec)?;
            let context_admission = context_admission(&spec)?;
            let upstreams = match &local {
                Some(l) => vec![Upstream::new(
                    SocketAddr::from(([127, 0, 0, 1], l.port)),
                    format!("127.0.0.1:{}", l.port),
                )],
                None => spec
                    .endpoints
                    .iter()
                    .map(|url| {
                        parse_endpoint(url).map_err(|e| {
                            ConfigError::Invalid(format!("model '{}': {e}", spec.name))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            };
            let paths = PathPolicy::listed(&spec.serve_paths)
                .map_err(|e| ConfigError::Invalid(format!("model '{}': {e}", spec.name)))?;
            let health_check = match (&local, &spec.health) {
                (None, Some(path)) if !path.starts_with('/') => {
                    return Err(ConfigError::Invalid(format!(
                        "model '{}': health must be a path starting with '/'",
                        spec.name
                    )))
                }
                (None, health) => health.clone(),
                (Some(_), _) => None,
            };
            models.push(ModelConfig {
                backend_model: spec
                    .backend_model
                    .clone()
                    .unwrap_or_else(|| spec.name.clone()),
                paths,
                health_check,
                name: spec.name,
                aliases: spec.aliases,
                strategy,
                bounded_load: spec.bounded_load,
                cache_aware,
                upstreams,
                lora,
                rate_limit: spec.rate_limit,
                cold_start_timeout: local_cold_start,
                max_concurrency: spec.max_concurrency,
                context_window: spec.max_model_len.filter(|n| *n > 0),
                context_admission,
                stream_failover,
                local,
            });
        }
        let mut ports = HashMap::new();
        for m in &models {
            if let Some(l) = &m.local {
                if let Some(other) = ports.insert(l.port, m.name.clone()) {
                    return Err(ConfigError::Invalid(format!(
                        "models '{other}' and '{}' both use port {}",
                        m.name, l.port
                    )));
                }
            }
        }
        let sharing = file.sharing.unwrap_or_default();
        let defaults = SharingConfig::default();
        let sharing = SharingConfig {
            swap_cooldown: duration("sharing.swapCooldown", sharing.swap_cooldown.as_deref())?
                .unwrap_or(defaults.swap_cooldown),
            demand_window: duration("sharing.demandWindow", sharing.demand_window.as_deref())?
                .unwrap_or(defaults.demand_window),
        };
        Ok(Self {
            models,
            sharing,
            label_groups: Vec::new(),
        })
    }
}

fn duration(field: &str, value: Option<&str>) -> Result<Option<Duration>, ConfigError> {
    value
        .map(|v| {
            humantime::parse_duration(v.trim()).map_err(|e| {
                ConfigError::Invalid(format!("{field}: '{v}' is not a duration ({e})"))
            })
        })
        .transpose()
}

fn check_name(name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > MAX_MODEL_NAME_LEN {
        return Err(ConfigError::Invalid(format!(
            "model name '{name}' must be 1 to {MAX_MODEL_NAME_LEN} bytes"
        )));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(ConfigError::Invalid(format!(
            "model name {name:?} must not contain whitespace or control characters"
        )));
    }
    Ok(())
}

/// Parses `http://host:port` (or `host:port`) into an upstream. Host names are
/// resolved once, at load time.
pub fn parse_endpoint(url: &str) -> Result<Upstream, String> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    if rest.contains("://") {
        return Err(format!(
            "endpoint '{url}': only plain http:// upstreams are supported"
        ));
    }
    let authority = rest.split('/').next().unwrap_or(rest);
    if authority.is_empty() {
        return Err(format!("endpoint '{url}' has no host"));
    }
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr: SocketAddr = match with_port.parse() {
        Ok(a) => a,
        Err(_) => with_port
            .to_socket_addrs()
            .map_err(|e| format!("endpoint '{url}': cannot resolve: {e}"))?
            .next()
            .ok_or_else(|| format!("endpoint '{url}': host resolves to no address"))?,
    };
    Ok(Upstream::new(addr, authority))
}

/// Whether a model opts into context-window admission (`admission:
/// context-bounded`).
fn context_admission(spec: &ModelSpec) -> Result<bool, ConfigError> {
    match spec.admission.as_deref().map(str::trim) {
        None | Some("") => Ok(false),
        Some(flexinfer_crds::labels::ADMISSION_CONTEXT_BOUNDED) => Ok(true),
        Some(other) => Err(ConfigError::Invalid(format!(
            "model '{}': admission must be '{}', got '{other}'",
            spec.name,
            flexinfer_crds::labels::ADMISSION_CONTEXT_BOUNDED
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_model() {
        let t = ModelTable::from_yaml(
            r#"
models:
  - name: llama
    aliases: [gpt-4o-mini]
    backendModel: meta/llama
    routing: session-affinity
    endpoints: ["http://127.0.0.1:8001", "127.0.0.1:8002"]
    loraAdapters:
      - name: sql
        adapter: sql-lora
    rateLimit: { requestsPerSecond: 5, burst: 2 }
"#,
        )
        .unwrap();
        let m = &t.models[0];
        assert_eq!(m.backend_model, "meta/llama");
        assert_eq!(m.strategy, Strategy::SessionAffinity);
        assert_eq!(m.upstreams.len(), 2);
        assert_eq!(m.upstreams[1].addr, "127.0.0.1:8002".parse().unwrap());
        assert_eq!(m.lora["sql"], "sql-lora");
    }

    #[test]
    fn parses_local_process_models() {
        let t = ModelTable::from_yaml(
            r#"
sharing: { swapCooldown: 30s }
models:
  - name: a
    command: flexinfer-sim
    args: ["--port", "18001"]
    port: 18001
    serverless: { idleTimeout: 2m, coldStartTimeout: 90s }
    gpu: { shared: gpu0, priority: 5 }
"#,
        )
        .unwrap();
        let l = t.models[0].local.as_ref().unwrap();
        assert_eq!((l.port, l.health_path.as_str()), (18001, "/health"));
        assert_eq!(l.serverless.idle_timeout, Duration::from_secs(120));
        assert_eq!(
            t.models[0].cold_start_timeout,
            Some(Duration::from_secs(90))
        );
        assert_eq!((l.shared_group.as_deref(), l.priority), (Some("gpu0"), 5));
        assert_eq!(
            t.models[0].upstreams[0].addr,
            "127.0.0.1:18001".parse().unwrap()
        );
        assert_eq!(t.sharing.swap_cooldown, Duration::from_secs(30));
        assert_eq!(t.sharing.demand_window, Duration::from_secs(120));
        for bad in [
            "models: [{name: a, command: x}]",
            "models: [{name: a, command: x, port: 1, endpoints: ['127.0.0.1:2']}]",
            "models: [{name: a, port: 1}]",
            "models: [{name: a, command: x, port: 1, serverless: {idleTimeout: soon}}]",
            "models: [{name: a, command: x, port: 1}, {name: b, command: y, port: 1}]",
        ] {
            assert!(ModelTable::from_yaml(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_duplicates_and_bad_values() {
        let dup = "models: [{name: a}, {name: b, aliases: [a]}]";
        let e = ModelTable::from_yaml(dup).unwrap_err().to_string();
        assert!(e.contains("'a' is used by both"), "{e}");
        let bad = "models: [{name: a, routing: fastest}]";
        assert!(ModelTable::from_yaml(bad).is_err());
        let unknown = "models: [{name: a, endpoint: x}]";
        let e = ModelTable::from_yaml(unknown).unwrap_err().to_string();
        assert!(e.contains("unknown field"), "{e}");
        let tls = "models: [{name: a, endpoints: ['https://x:1']}]";
        assert!(ModelTable::from_yaml(tls).is_err());
        let load = "models: [{name: a, boundedLoad: 0.5}]";
        assert!(ModelTable::from_yaml(load).is_err());
    }

    #[test]
    fn stream_failover_takes_a_switch_or_a_list_of_apis() {
        let of = |value: &str| {
            ModelTable::from_yaml(&format!("models: [{{name: a, streamFailover: {value}}}]"))
                .map(|t| t.models[0].stream_failover)
        };
        assert_eq!(of("true").ok(), Some(crate::resume::StreamFailover::ALL));
        assert!(of("false").is_ok_and(|f| f.is_off()));
        assert!(of("chat").is_ok_and(|f| f.chat && !f.completions));
        assert!(of("'chat,completions'").is_ok_and(|f| f.chat && f.completions));
        let absent = ModelTable::from_yaml("models: [{name: a}]").unwrap();
        assert!(absent.models[0].stream_failover.is_off());
        let e = of("messages").unwrap_err().to_string();
        assert!(
            e.contains("model 'a': streamFailover") && e.contains("'messages'"),
            "{e}"
        );
    }

    #[test]
    fn environment_variables_expand_in_local_commands() {
        let lookup = |v: &str| (v == "HOME_DIR").then(|| "/home/u".to_owned());
        assert_eq!(
            expand_env("${HOME_DIR}/m.gguf", lookup).as_deref(),
            Ok("/home/u/m.gguf")
        );
        assert_eq!(
            expand_env("a${HOME_DIR}b${HOME_DIR}", lookup).as_deref(),
            Ok("a/home/ub/home/u")
        );
        assert_eq!(
            expand_env("$5 and ${open", lookup).as_deref(),
            Ok("$5 and ${open")
        );
        assert_eq!(expand_env("${UNSET_X}", lookup), Err("UNSET_X".to_owned()));
        let err = ModelTable::from_yaml(
            "models: [{name: a, command: '${FLEXINFER_TEST_SURELY_UNSET}', port: 1}]",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains(
                "model 'a': command uses ${FLEXINFER_TEST_SURELY_UNSET}, which is not set"
            ),
            "{err}"
        );
    }
}
