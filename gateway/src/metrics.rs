//! Prometheus metrics of the request path.
//!
//! Names follow the `flexinfer_proxy_*` family so dashboards built for the
//! original proxy keep working.

use std::fmt;
use std::sync::OnceLock;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::registry::ModelRoute;
use crate::routing::{KeySource, Strategy};

/// Latency buckets in seconds: from sub-millisecond proxy answers to long generations.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// Buckets of the gap between two chunks of a stream (1 ms to 2 s).
const INTER_TOKEN_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 2.0,
];

/// All gateway metrics, registered in one registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Requests by model, HTTP status and API route.
    pub requests: IntCounterVec,
    /// Whole-request latency by model and route.
    pub duration: HistogramVec,
    /// Time until the response header reached the client, by model.
    pub ttfb: HistogramVec,
    /// Streams: time from request start to the first chunk of the body.
    pub stream_ttft: HistogramVec,
    /// Streams: time between successive chunks of the body.
    pub stream_itl: HistogramVec,
    /// Requests in flight per model.
    pub active: IntGaugeVec,
    /// Requests in flight per model and endpoint.
    pub endpoint_active: IntGaugeVec,
    /// Rejections by rate limits, by model and scope (`global`, `per_model`).
    pub rate_limited: IntCounterVec,
    /// Requests by model, tenant and status, when API keys name tenants.
    pub tenant_requests: IntCounterVec,
    /// Tokens engines reported, by model, tenant and kind (prompt,
    /// completion, cached), when API keys name tenants.
    pub tokens: IntCounterVec,
    /// Output limits clamped to a model's context window, by model and reason.
    pub max_tokens_clamped: IntCounterVec,
    /// Context-window admission decisions by model, reason and outcome.
    pub admission_decisions: IntCounterVec,
    /// Request body bytes received, by model.
    pub bytes_in: IntCounterVec,
    /// Response body bytes sent, by model.
    pub bytes_out: IntCounterVec,
    /// Upstream connection retries by model and reason.
    pub retries: IntCounterVec,
    /// Routing decisions by model, strategy and key source.
    pub routing: IntCounterVec,
    /// Label-group picks by label, mode and outcome.
    pub label_group_decisions: IntCounterVec,
    /// Label-group picks by label, mode and the member picked.
    pub label_group_hits: IntCounterVec,
    /// Cache-aware picks by reason (prefix_hit, load, session, fallback).
    pub cache_aware_picks: IntCounterVec,
    /// Load scrapes of cache-aware models' engines by result.
    pub load_scrapes: IntCounterVec,
    /// Model file reloads by result.
    pub reloads: IntCounterVec,
    /// API-key file reloads by result.
    pub key_file_reloads: IntCounterVec,
    /// Time requests waited for a cold start, by model.
    pub queue_wait: HistogramVec,
    /// Time tenants' requests waited in a model's queue, by model and tenant.
    pub tenant_queue_wait: HistogramVec,
    /// Requests refused while waiting for a model, by model and error code.
    pub queue_rejected: IntCounterVec,
    /// Streaming requests sent their head while held for their model, by
    /// model and outcome (`served`, `failed`, `client_gone`).
    pub held_streams: IntCounterVec,
    /// Progress comments sent to held streams, by model.
    pub held_comments: IntCounterVec,
    /// Streams whose engine failed mid-answer on a model with stream
    /// failover, by model and outcome (`resumed`, `closed`, `failed`).
    pub stream_resumes: IntCounterVec,
    /// Gateway API: time an InferencePool's endpoint picker took to pick,
    /// by pool and outcome (`picked`, `refused`, `failed_open`,
    /// `failed_closed`).
    pub picker_seconds: HistogramVec,
    /// Kubernetes mode: activations tried again after a failed scale-up,
    /// by model (`--backoff-enabled`).
    pub activation_retries: IntCounterVec,
    /// Kubernetes mode: the backoff waited before each such retry, by model.
    pub activation_retry_wait: HistogramVec,
    /// Client connections open now.
    pub client_connections: IntGauge,
    /// Client connections refused by the connection caps, by reason.
    pub connections_refused: IntCounterVec,
    /// Request headers that did not arrive whole, by reason.
    pub header_aborts: IntCounterVec,
    /// Endpoints taken out of rotation after failures, by model and endpoint.
    pub ejections: IntCounterVec,
    /// Whether each endpoint is out of rotation now (1) or not (0).
    pub endpoint_ejected: IntGaugeVec,
    /// Global mode: whether each member cluster's gateway counts as healthy.
    pub global_cluster_up: IntGaugeVec,
    /// Global mode: models each member cluster lists, by warmth.
    pub global_cluster_models: IntGaugeVec,
    /// Global mode: health probes of member gateways, by cluster and result.
    pub global_probes: IntCounterVec,
    /// Global mode: round trip of successful health probes, by cluster.
    pub global_probe_duration: HistogramVec,
}

impl Metrics {
    /// The registry every gateway metric is in (others may join it).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Creates and registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            let h = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
                labels,
            )
            .expect("valid metric");
            registry
                .register(Box::new(h.clone()))
                .expect("unique metric");
            h
        };
        Self {
            requests: counter(
                "flexinfer_proxy_requests_total",
                "Requests answered, by model, HTTP status and API route.",
                &["model", "status", "route"],
            ),
            duration: histogram(
                "flexinfer_proxy_request_duration_seconds",
                "Time from request start to the end of the response.",
                &["model", "route"],
            ),
            ttfb: histogram(
                "flexinfer_proxy_time_to_first_byte_seconds",
                "Time from request start until the response header was sent.",
                &["model"],
            ),
            stream_ttft: histogram(
                "flexinfer_proxy_stream_time_to_first_token_seconds",
                "Event streams: time from request start until the first chunk of the answer reached the gateway.",
                &["model"],
            ),
            stream_itl: {
                let h = HistogramVec::new(
                    HistogramOpts::new(
                        "flexinfer_proxy_stream_inter_token_latency_seconds",
                        "Event streams: time between successive chunks of the answer.",
                    )
                    .buckets(INTER_TOKEN_BUCKETS.to_vec()),
                    &["model"],
                )
                .expect("valid metric");
                registry
                    .register(Box::new(h.clone()))
                    .expect("unique metric");
                h
            },
            active: gauge(
                "flexinfer_proxy_active_connections",
                "Requests in flight per model.",
                &["model"],
            ),
            endpoint_active: gauge(
                "flexinfer_proxy_endpoint_active_connections",
                "Requests in flight per model and upstream endpoint.",
                &["model", "endpoint"],
            ),
            rate_limited: counter(
                "flexinfer_proxy_rate_limited_total",
                "Requests rejected by a rate limit.",
                &["model", "scope"],
            ),
            tenant_requests: counter(
                "flexinfer_proxy_tenant_requests_total",
                "Requests by model, tenant and HTTP status (with --api-key-file or --auth-enabled).",
                &["model", "tenant", "status"],
            ),
            tokens: counter(
                "flexinfer_proxy_tokens_total",
                "Tokens the engines reported in usage, by model, tenant and kind (prompt, completion, cached).",
                &["model", "tenant", "kind"],
            ),
            max_tokens_clamped: counter(
                "flexinfer_proxy_max_tokens_clamped_total",
                "Output limits lowered to fit a model's context window.",
                &["model", "reason"],
            ),
            admission_decisions: counter(
                "flexinfer_proxy_admission_decisions_total",
                "Context-window admission decisions (models annotated context-bounded, --admission-enabled).",
                &["model", "reason", "allow"],
            ),
            bytes_in: counter(
                "flexinfer_proxy_request_bytes_total",
                "Request body bytes received from clients.",
                &["model"],
            ),
            bytes_out: counter(
                "flexinfer_proxy_response_bytes_total",
                "Response body bytes sent to clients.",
                &["model"],
            ),
            retries: counter(
                "flexinfer_proxy_upstream_retries_total",
                "Upstream attempts retried on another endpoint (in global mode also after a 5xx answer or a broken connection).",
                &["model", "reason"],
            ),
            routing: counter(
                "flexinfer_proxy_routing_decisions_total",
                "Routing decisions by strategy and key source.",
                &["model", "strategy", "key_source"],
            ),
            label_group_decisions: counter(
                "flexinfer_proxy_label_group_route_decisions_total",
                "Requests for a service label claimed by several models, by label, mode (strategy) and outcome: default_rr, least_loaded, hashed_prefix, hashed_session, fallback_single (one member Ready), fallback_no_ready (none Ready: the first is cold-started), fallback_no_key (no key to hash).",
                &["label", "strategy", "outcome"],
            ),
            label_group_hits: counter(
                "flexinfer_proxy_label_group_route_target_hits_total",
                "Requests for a service label claimed by several models, by label, mode (strategy) and the model picked.",
                &["label", "strategy", "model"],
            ),
            cache_aware_picks: counter(
                "flexinfer_proxy_cache_aware_picks_total",
                "Endpoints chosen by cache-aware routing, by reason: prefix_hit (it holds the longest cached prefix), load (no prefix held, or its holder was too busy), session (a client-named session), fallback (no prompt blocks to score).",
                &["model", "reason"],
            ),
            load_scrapes: counter(
                "flexinfer_proxy_load_scrapes_total",
                "Engine /metrics scrapes of cache-aware models, by result (ok, error, unrecognised).",
                &["model", "result"],
            ),
            reloads: counter(
                "flexinfer_proxy_config_reloads_total",
                "Model file reloads by result.",
                &["result"],
            ),
            key_file_reloads: counter(
                "flexinfer_proxy_api_key_file_reloads_total",
                "API-key file reloads by result.",
                &["result"],
            ),
            queue_wait: histogram(
                "flexinfer_proxy_queue_wait_duration_seconds",
                "Time requests waited in the activation queue for their model.",
                &["model"],
            ),
            tenant_queue_wait: histogram(
                "flexinfer_proxy_tenant_queue_wait_seconds",
                "Time a tenant's requests waited in a model's queue (cold start or capacity), by model and tenant.",
                &["model", "tenant"],
            ),
            queue_rejected: counter(
                "flexinfer_proxy_queue_rejected_total",
                "Requests refused while waiting for their model (queue_full, activation_timeout, activation_failed), or at once for a background request to a model that is not Ready (background_not_ready).",
                &["model", "reason"],
            ),
            held_streams: counter(
                "flexinfer_proxy_held_streams_total",
                "Streaming requests that were sent their response head and progress comments while held for their model (cold start, swap, full slots), by outcome: served (the engine's stream followed), failed (an error event ended it), client_gone.",
                &["model", "outcome"],
            ),
            held_comments: counter(
                "flexinfer_proxy_held_progress_comments_total",
                "SSE progress comments sent to streaming requests held for their model.",
                &["model"],
            ),
            stream_resumes: counter(
                "flexinfer_proxy_stream_resumes_total",
                "Streams of models with stream failover whose engine failed mid-answer, by outcome: resumed (another endpoint was asked to continue the answer), closed (the answer had finished: only its end was sent), failed (it could not be continued: an error event ended it).",
                &["model", "outcome"],
            ),
            picker_seconds: histogram(
                "flexinfer_proxy_gateway_api_picker_seconds",
                "Gateway API: time an InferencePool's endpoint picker took over a request (ext_proc), by pool and outcome: picked, refused (the picker answered the client itself), failed_open (FlexInfer's picker served instead), failed_closed (answered 503).",
                &["pool", "outcome"],
            ),
            activation_retries: counter(
                "flexinfer_proxy_activation_retries_total",
                "Activations tried again after a failed scale-up (backoff enabled).",
                &["model"],
            ),
            activation_retry_wait: histogram(
                "flexinfer_proxy_activation_retry_wait_duration_seconds",
                "Backoff waited before retrying a failed activation.",
                &["model"],
            ),
            client_connections: {
                let g = IntGauge::new(
                    "flexinfer_proxy_client_connections",
                    "Client connections open now.",
                )
                .expect("valid metric");
                registry
                    .register(Box::new(g.clone()))
                    .expect("unique metric");
                g
            },
            connections_refused: counter(
                "flexinfer_proxy_connections_refused_total",
                "Client connections refused by the connection caps (total_limit, client_limit).",
                &["reason"],
            ),
            header_aborts: counter(
                "flexinfer_proxy_request_header_aborts_total",
                "Request headers that did not arrive whole: timeout (408), too_large (431), closed (the client left).",
                &["reason"],
            ),
            ejections: counter(
                "flexinfer_proxy_endpoint_ejections_total",
                "Endpoints taken out of rotation after consecutive connection failures or failed health checks.",
                &["model", "endpoint"],
            ),
            endpoint_ejected: gauge(
                "flexinfer_proxy_endpoint_ejected",
                "Whether the endpoint is out of rotation now (1) or not (0).",
                &["model", "endpoint"],
            ),
            global_cluster_up: gauge(
                "flexinfer_proxy_global_cluster_up",
                "Global mode: whether the member cluster's gateway counts as healthy (1) or not (0).",
                &["cluster"],
            ),
            global_cluster_models: gauge(
                "flexinfer_proxy_global_cluster_models",
                "Global mode: models the member cluster lists, by warmth (ready, warming, cold).",
                &["cluster", "warmth"],
            ),
            global_probes: counter(
                "flexinfer_proxy_global_probes_total",
                "Global mode: health probes of member gateways, by result (success, failure).",
                &["cluster", "result"],
            ),
            global_probe_duration: histogram(
                "flexinfer_proxy_global_probe_duration_seconds",
                "Global mode: round trip of successful health probes of member gateways.",
                &["cluster"],
            ),
            registry,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8192);
        let encoder = TextEncoder::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = encoder.encode(&self.registry.gather(), &mut out);
        out
    }
}

/// The series of a model that every one of its requests touches, looked up
/// once per route instead of once per request (a lookup hashes the labels
/// and takes the family's lock).
pub struct RouteMeters {
    /// `flexinfer_proxy_active_requests`.
    pub active: IntGauge,
    /// `flexinfer_proxy_ttfb_seconds`.
    pub ttfb: Histogram,
    /// `flexinfer_proxy_request_bytes_total`.
    pub bytes_in: IntCounter,
    /// `flexinfer_proxy_response_bytes_total`.
    pub bytes_out: IntCounter,
    /// `flexinfer_proxy_requests_total` with status 200, by route label.
    answered: [OnceLock<IntCounter>; ROUTE_LABELS.len()],
    /// `flexinfer_proxy_request_duration_seconds`, by route label.
    durations: [OnceLock<Histogram>; ROUTE_LABELS.len()],
    /// `flexinfer_proxy_routing_total` under the model's own strategy, by
    /// key source.
    routed: [OnceLock<IntCounter>; KeySource::COUNT],
    /// `flexinfer_proxy_endpoint_active_requests`, by endpoint index.
    endpoint_active: Box<[OnceLock<IntGauge>]>,
}

impl RouteMeters {
    /// Counts a finished request of the model `model` (this route's name)
    /// and observes its duration.
    pub fn finished(&self, metrics: &Metrics, model: &str, status: u16, path: &str, seconds: f64) {
        let label = route_label_index(path);
        let route = ROUTE_LABELS[label];
        if status == 200 {
            self.answered[label]
                .get_or_init(|| metrics.requests.with_label_values(&[model, "200", route]))
                .inc();
        } else {
            metrics.count_request(model, status, route);
        }
        self.durations[label]
            .get_or_init(|| metrics.duration.with_label_values(&[model, route]))
            .observe(seconds);
    }

    /// Counts a routing decision of the model `model`; `own` says that
    /// `strategy` is the model's configured one (the series kept here).
    pub fn routed(
        &self,
        metrics: &Metrics,
        model: &str,
        (strategy, own): (Strategy, bool),
        source: KeySource,
    ) {
        let lookup = || {
            metrics
                .routing
                .with_label_values(&[model, strategy.as_str(), source.as_str()])
        };
        match own {
            true => self.routed[source as usize].get_or_init(lookup).inc(),
            false => lookup().inc(),
        }
    }

    /// The in-flight gauge of endpoint `idx` (named `endpoint`) of the
    /// model `model`.
    pub fn endpoint_active(
        &self,
        metrics: &Metrics,
        model: &str,
        idx: usize,
        endpoint: &str,
    ) -> IntGauge {
        let lookup = || {
            metrics
                .endpoint_active
                .with_label_values(&[model, endpoint])
        };
        match self.endpoint_active.get(idx) {
            Some(slot) => slot.get_or_init(lookup).clone(),
            None => lookup(),
        }
    }
}

/// Where a route keeps its [`RouteMeters`] from the first request on. A
/// route belongs to one gateway, whose metrics fill it.
#[derive(Default)]
pub struct MeterCache(OnceLock<RouteMeters>);

impl fmt::Debug for MeterCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "MeterCache(filled)"
        } else {
            "MeterCache(empty)"
        })
    }
}

impl Metrics {
    /// The [`RouteMeters`] of `route`, kept in the route.
    pub fn route<'a>(&self, route: &'a ModelRoute) -> &'a RouteMeters {
        let name = &*route.name;
        route.meters.0.get_or_init(|| RouteMeters {
            active: self.active.with_label_values(&[name]),
            ttfb: self.ttfb.with_label_values(&[name]),
            bytes_in: self.bytes_in.with_label_values(&[name]),
            bytes_out: self.bytes_out.with_label_values(&[name]),
            answered: std::array::from_fn(|_| OnceLock::new()),
            durations: std::array::from_fn(|_| OnceLock::new()),
            routed: std::array::from_fn(|_| OnceLock::new()),
            endpoint_active: (0..route.endpoints.len())
                .map(|_| OnceLock::new())
                .collect(),
        })
    }

    /// Counts a finished request of a model without [`RouteMeters`].
    pub fn count_request(&self, model: &str, status: u16, route: &str) {
        self.requests
            .with_label_values(&[model, &status_label(status), route])
            .inc();
    }
}

/// The `status` label of an HTTP status: the common ones without
/// formatting a number.
pub fn status_label(status: u16) -> std::borrow::Cow<'static, str> {
    match status {
        200 => "200".into(),
        400 => "400".into(),
        401 => "401".into(),
        404 => "404".into(),
        429 => "429".into(),
        500 => "500".into(),
        502 => "502".into(),
        503 => "503".into(),
        504 => "504".into(),
        _ => status.to_string().into(),
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Every value of the `route` label: the known OpenAI routes, the
/// follow-ups of a stored response, and `other`.
const ROUTE_LABELS: [&str; 18] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/images/variations",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
    "/v1/audio/speech",
    "/v1/rerank",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/models",
    "/v1/responses/{id}/input_items",
    "/v1/responses/{id}/cancel",
    "/v1/responses/{id}",
    "other",
];

/// How many of [`ROUTE_LABELS`] are paths matched as they are.
const EXACT_ROUTES: usize = 14;

/// Collapses a request path into a bounded label: known OpenAI routes keep
/// their name, everything else is `other`.
pub fn route_label(path: &str) -> &'static str {
    ROUTE_LABELS[route_label_index(path)]
}

/// The place of a path's label in [`ROUTE_LABELS`].
fn route_label_index(path: &str) -> usize {
    let path = path.split('?').next().unwrap_or(path);
    if let Some(i) = ROUTE_LABELS[..EXACT_ROUTES].iter().position(|k| *k == path) {
        return i;
    }
    // Follow-ups of a stored response: one label, whatever the id.
    match path.strip_prefix("/v1/responses/") {
        Some(rest) if rest.ends_with("/input_items") => EXACT_ROUTES,
        Some(rest) if rest.ends_with("/cancel") => EXACT_ROUTES + 1,
        Some(rest) if !rest.is_empty() && !rest.contains('/') => EXACT_ROUTES + 2,
        _ => ROUTE_LABELS.len() - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_labels_are_the_numbers() {
        for status in 100..600u16 {
            assert_eq!(status_label(status), status.to_string());
        }
    }

    #[test]
    fn route_meters_feed_the_labelled_series() {
        use crate::config::ModelTable;
        use crate::ratelimit::LimitSettings;
        use crate::registry::{ModelRegistry, RouteStore};

        let table = ModelTable::from_yaml(
            "models:\n- name: m\n  endpoints: ['127.0.0.1:1', '127.0.0.1:2']\n",
        )
        .unwrap();
        let store = RouteStore::from_table(&table, LimitSettings::default());
        let route = store.resolve("m").unwrap().route;
        let m = Metrics::new();
        let meters = m.route(&route);
        for _ in 0..2 {
            meters.finished(&m, "m", 200, "/v1/chat/completions?x=1", 0.01);
        }
        meters.finished(&m, "m", 503, "/v1/chat/completions", 0.01);
        let own = (route.strategy, true);
        meters.routed(&m, "m", own, KeySource::None);
        meters.routed(&m, "m", (Strategy::Failover, false), KeySource::None);
        meters.endpoint_active(&m, "m", 1, "127.0.0.1:2").inc();
        // Past the route's endpoints: looked up, not cached.
        meters.endpoint_active(&m, "m", 7, "x").inc();
        let ok = &["m", "200", "/v1/chat/completions"];
        assert_eq!(m.requests.with_label_values(ok).get(), 2);
        let failed = &["m", "503", "/v1/chat/completions"];
        assert_eq!(m.requests.with_label_values(failed).get(), 1);
        let durations = m.duration.with_label_values(&["m", "/v1/chat/completions"]);
        assert_eq!(durations.get_sample_count(), 3);
        let routed = |strategy: Strategy| {
            m.routing
                .with_label_values(&["m", strategy.as_str(), "none"])
                .get()
        };
        assert_eq!((routed(route.strategy), routed(Strategy::Failover)), (1, 1));
        let active = |endpoint| m.endpoint_active.with_label_values(&["m", endpoint]).get();
        assert_eq!((active("127.0.0.1:2"), active("x")), (1, 1));
    }

    #[test]
    fn renders_registered_families() {
        let m = Metrics::new();
        m.requests
            .with_label_values(&["a", "200", "/v1/completions"])
            .inc();
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("flexinfer_proxy_requests_total{model=\"a\",route=\"/v1/completions\",status=\"200\"} 1"));
        assert_eq!(
            route_label("/v1/chat/completions?x=1"),
            "/v1/chat/completions"
        );
        assert_eq!(route_label("/secret/path"), "other");
        assert_eq!(route_label("/v1/responses/resp_1"), "/v1/responses/{id}");
        assert_eq!(
            route_label("/v1/responses/resp_1/input_items?limit=2"),
            "/v1/responses/{id}/input_items"
        );
        assert_eq!(
            route_label("/v1/responses/resp_1/cancel"),
            "/v1/responses/{id}/cancel"
        );
        assert_eq!(route_label("/v1/responses/a/b"), "other");
        assert_eq!(route_label("/v1/messages"), "/v1/messages");
        assert_eq!(
            route_label("/v1/messages/count_tokens"),
            "/v1/messages/count_tokens"
        );
    }
}
