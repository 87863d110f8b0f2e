//! Settings of the request path and the hook that hears about failed
//! endpoints.

use std::time::Duration;

use crate::label_groups::LabelGroupMode;
use crate::routing::health::OutlierPolicy;
use crate::routing::{KeyLimits, Upstream};

/// Settings of the request path.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Largest request body buffered, in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// Time allowed to connect to an upstream.
    pub connect_timeout: Duration,
    /// Longest silence allowed while reading an upstream response.
    pub read_timeout: Duration,
    /// How long an idle upstream connection stays pooled for reuse.
    pub upstream_keepalive: Duration,
    /// Attempts per request, each on a different endpoint while one is left
    /// untried (then the same one again, after a short pause).
    pub max_attempts: usize,
    /// When endpoints are taken out of rotation after failures.
    pub outlier: OutlierPolicy,
    /// Whether per-model routing strategies are honoured.
    pub routing_enabled: bool,
    /// Bounds of routing-key derivation.
    pub key_limits: KeyLimits,
    /// How a service label claimed by several models picks one of them.
    pub label_group_mode: LabelGroupMode,
    /// The upstreams are member clusters' gateways (global mode): a 5xx
    /// answer or a failure before any byte reached the client is retried on
    /// the next cluster, for any method; the request path is forwarded as
    /// the client sent it, and an empty endpoint set means that no cluster
    /// is available.
    pub cluster_failover: bool,
    /// `Authorization` value sent upstream instead of the client's (global
    /// mode: the member gateways' API key).
    pub upstream_authorization: Option<http::HeaderValue>,
    /// Answer with `X-Flexinfer-Route` (endpoint and reason of the routing
    /// decision), for debugging routing.
    pub route_debug_header: bool,
    /// Requests each endpoint of a model takes at once, unless the model
    /// sets its own (`maxConcurrency`); unbounded when `None`.
    pub max_concurrency_per_endpoint: Option<u32>,
    /// The context-window guard.
    pub window: WindowSettings,
    /// Hold non-streamed completions' answers back for their usage headers
    /// (`X-Flexinfer-Prompt-Tokens` and others, [`super::usage_headers`]).
    pub usage_headers: bool,
    /// Answer malformed chat, completion and embedding requests with 400
    /// `validation_error` before they reach an engine.
    pub validate_requests: bool,
    /// Send each tenant's chat, completion and Responses requests with a
    /// `cache_salt` of its own (vLLM's per-request prefix-cache
    /// isolation), and score cache-aware routing per tenant alike.
    pub tenant_cache_salt: bool,
    /// Output tokens charged (and set as the request's limit) for a
    /// generation request of a tenant with a token budget that sets none.
    pub tenant_default_max_tokens: u64,
    /// Time between progress comments sent to a streaming request held
    /// for its model, and before the first with its head
    /// ([`crate::held`]); off when `None`.
    pub held_progress_interval: Option<Duration>,
}

/// The context-window guard of models that declare their window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSettings {
    /// Clamp an output limit above the window less `prompt_reserve`.
    pub clamp: bool,
    /// Tokens kept free for the prompt when clamping (512).
    pub prompt_reserve: u64,
    /// Refuse requests of `context-bounded` models that cannot fit (413).
    pub admission: bool,
    /// Percent of the window kept as a safety margin by admission (5, 0–50).
    pub margin_percent: u64,
    /// Output tokens admission assumes when the request sets no limit (256).
    pub default_max_tokens: u64,
}

impl Default for WindowSettings {
    fn default() -> Self {
        Self {
            clamp: true,
            prompt_reserve: 512,
            admission: false,
            margin_percent: 5,
            default_max_tokens: 256,
        }
    }
}

impl Default for ProxySettings {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(600),
            upstream_keepalive: Duration::from_secs(4),
            max_attempts: 2,
            outlier: OutlierPolicy::default(),
            routing_enabled: true,
            key_limits: KeyLimits::DEFAULT,
            label_group_mode: LabelGroupMode::RoundRobin,
            route_debug_header: false,
            cluster_failover: false,
            upstream_authorization: None,
            max_concurrency_per_endpoint: None,
            window: WindowSettings::default(),
            usage_headers: false,
            tenant_cache_salt: false,
            tenant_default_max_tokens: 4096,
            validate_requests: false,
            held_progress_interval: Some(crate::held::DEFAULT_INTERVAL),
        }
    }
}

/// Told when a connection to an endpoint failed on the request path, so
/// that its health can be checked again at once (global mode: a member
/// gateway that stopped answering is taken out before its next probe).
/// Called on failures only, never for a successful request.
pub trait EndpointFailures: Send + Sync {
    /// A connection to `endpoint` was refused, timed out or broke.
    fn connection_failed(&self, endpoint: &Upstream);
}
