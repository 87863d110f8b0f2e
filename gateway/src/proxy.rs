//! The Pingora [`ProxyHttp`] implementation: a thin sequence of phases that
//! delegates each concern to its own module.
//!
//! Requests whose model is known from the head (header or path prefix) and
//! whose body the gateway does not need stream straight through. Requests that
//! must be read first (JSON bodies to route on and rewrite, multipart bodies
//! carrying the model) are buffered up to the body limit and forwarded as a
//! Pingora subrequest with the buffered body preset, so bodies of any size up
//! to the limit are sent upstream intact.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use http::header;
use pingora_core::protocols::http::HttpTask;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorSource, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::subrequest::pipe::{pipe_subrequest, InputBody, InputBodyType};
use pingora_proxy::subrequest::{BodyMode, Ctx as SubrequestCtx};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};
use prometheus::IntGauge;

use crate::activation::{ActivationQueues, ActiveRequest, Admission};
use crate::auth::Auth;
use crate::errors::ApiError;
use crate::extract::{self, BodyKind};
use crate::metrics::{route_label, Metrics};
use crate::ratelimit::RouteLimiter;
use crate::registry::{ModelRegistry, Resolved};
use crate::rewrite;
use crate::routing::{self, InFlight, KeyLimits, KeySource, RoutingInputs, Strategy, Upstream};

/// Request id header, echoed to the client and passed upstream.
const REQUEST_ID: &str = "x-request-id";
/// Global mode: the member cluster that answered, on every proxied response.
pub const CLUSTER_HEADER: &str = "x-flexinfer-cluster";
/// Internal header never forwarded upstream.
const WORKLOAD_CLASS: &str = "x-flexinfer-internal-workload-class";

/// Settings of the request path.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Largest request body buffered, in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// Time allowed to connect to an upstream.
    pub connect_timeout: Duration,
    /// Longest silence allowed while reading an upstream response.
    pub read_timeout: Duration,
    /// Connection attempts per request, each on a different endpoint when possible.
    pub max_attempts: usize,
    /// Whether per-model routing strategies are honoured.
    pub routing_enabled: bool,
    /// Bounds of routing-key derivation.
    pub key_limits: KeyLimits,
    /// The upstreams are member clusters' gateways (global mode): a 5xx
    /// answer or a failure before any byte reached the client is retried on
    /// the next cluster, for any method; the request path is forwarded as
    /// the client sent it, and an empty endpoint set means that no cluster
    /// is available.
    pub cluster_failover: bool,
    /// `Authorization` value sent upstream instead of the client's (global
    /// mode: the member gateways' API key).
    pub upstream_authorization: Option<http::HeaderValue>,
}

impl Default for ProxySettings {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(600),
            max_attempts: 2,
            routing_enabled: true,
            key_limits: KeyLimits::DEFAULT,
            cluster_failover: false,
            upstream_authorization: None,
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

/// Shared state of the gateway's request path.
pub struct Gateway {
    registry: Arc<dyn ModelRegistry>,
    activation: Option<Arc<ActivationQueues>>,
    failures: Option<Arc<dyn EndpointFailures>>,
    auth: Option<Auth>,
    global_limiter: Option<RouteLimiter>,
    metrics: Metrics,
    settings: ProxySettings,
    draining: Arc<AtomicBool>,
    request_counter: AtomicU64,
    /// Random high half of generated request ids.
    request_id_seed: u64,
}

/// Everything decided about a request before it is forwarded.
pub struct ForwardPlan {
    resolved: Resolved,
    strategy: Strategy,
    routing_key: Option<String>,
    key_source: KeySource,
    forward_path: Option<String>,
    body: Option<Bytes>,
    request_id: Arc<str>,
    /// Global mode, buffered requests: endpoints (bit per index) tried by
    /// every subrequest of this request, so that a failover subrequest
    /// skips them.
    tried_mask: Option<Arc<AtomicU64>>,
    /// Keeps a managed model from an idle stop while this request runs.
    _active: Option<ActiveRequest>,
}

impl ForwardPlan {
    /// The same plan for another subrequest of a global-mode request (which
    /// never holds an [`ActiveRequest`]: members do their own activation).
    fn again(&self) -> ForwardPlan {
        ForwardPlan {
            resolved: self.resolved.clone(),
            strategy: self.strategy,
            routing_key: self.routing_key.clone(),
            key_source: self.key_source,
            forward_path: self.forward_path.clone(),
            body: self.body.clone(),
            request_id: self.request_id.clone(),
            tried_mask: self.tried_mask.clone(),
            _active: None,
        }
    }
}

/// An endpoint slot held while a request is in flight there.
struct EndpointLease {
    _in_flight: InFlight,
    gauge: IntGauge,
}

impl Drop for EndpointLease {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Per-request state.
#[derive(Default)]
pub struct RequestCtx {
    request_id: Option<Arc<str>>,
    start: Option<Instant>,
    model: Option<Arc<str>>,
    plan: Option<Box<ForwardPlan>>,
    tried: Vec<usize>,
    lease: Option<EndpointLease>,
    model_gauge: Option<IntGauge>,
    error: Option<ApiError>,
    status: u16,
    request_bytes: u64,
    response_bytes: u64,
    ttfb_seen: bool,
    is_subrequest: bool,
    /// Pingora's upstream phases ran: a failure answered from here ends
    /// the client connection (Pingora does not reuse it).
    proxied: bool,
}

impl Gateway {
    /// Builds the request path.
    pub fn new(
        registry: Arc<dyn ModelRegistry>,
        auth: Option<Auth>,
        global_limiter: Option<RouteLimiter>,
        metrics: Metrics,
        settings: ProxySettings,
        draining: Arc<AtomicBool>,
    ) -> Self {
        Self {
            registry,
            activation: None,
            failures: None,
            auth,
            global_limiter,
            metrics,
            settings,
            draining,
            request_counter: AtomicU64::new(0),
            request_id_seed: rand::random(),
        }
    }

    /// Puts cold-start queueing in front of models that are run on demand.
    pub fn with_activation(mut self, queues: Arc<ActivationQueues>) -> Self {
        self.activation = Some(queues);
        self
    }

    /// Reports failed connections to `failures`.
    pub fn with_endpoint_failures(mut self, failures: Arc<dyn EndpointFailures>) -> Self {
        self.failures = Some(failures);
        self
    }

    /// Reports the endpoint of the current attempt as failed, if anyone listens.
    fn report_failure(&self, ctx: &RequestCtx) {
        if let (Some(failures), Some(plan), Some(&idx)) =
            (&self.failures, &ctx.plan, ctx.tried.last())
        {
            let endpoints = &plan.resolved.route.endpoints;
            if idx < endpoints.len() {
                failures.connection_failed(endpoints.upstream(idx));
            }
        }
    }

    /// A new `X-Request-ID`: a version-4-shaped UUID (random per process,
    /// then a counter), the form model servers that validate the header
    /// (e.g. llama-cpp-python's server) accept.
    fn next_request_id(&self) -> Arc<str> {
        let n = self.request_counter.fetch_add(1, Ordering::Relaxed);
        Arc::from(request_uuid(self.request_id_seed, n))
    }

    /// Whether another endpoint may still be tried for this request.
    fn attempts_left(&self, ctx: &RequestCtx) -> bool {
        ctx.plan.as_ref().is_some_and(|plan| {
            let endpoints = plan.resolved.route.endpoints.len();
            ctx.tried.len() < self.settings.max_attempts.min(endpoints)
        })
    }

    fn count_retry(&self, ctx: &RequestCtx, reason: &str) {
        if let Some(plan) = &ctx.plan {
            self.metrics
                .retries
                .with_label_values(&[&plan.resolved.route.name, reason])
                .inc();
        }
    }

    fn model_label(ctx: &RequestCtx) -> &str {
        ctx.model.as_deref().unwrap_or("unknown")
    }

    /// Answers the request with `err` and records it.
    async fn reject(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        err: ApiError,
    ) -> Result<bool> {
        // A request body left unread would corrupt the next request on this
        // connection: close it instead.
        if !session.as_mut().is_body_done() {
            session.set_keepalive(None);
        }
        let mut extra: Vec<(&'static str, String)> = Vec::new();
        if let Some(secs) = err.retry_after {
            extra.push(("retry-after", secs.to_string()));
        }
        if err.status == 401 {
            extra.push(("www-authenticate", "Bearer realm=\"flexinfer\"".to_string()));
        }
        respond(
            session,
            ctx,
            err.status,
            "application/json",
            Bytes::from(err.body()),
            &extra,
        )
        .await?;
        Ok(true)
    }

    /// Serves `/healthz`, `/readyz` and `/metrics`; `None` for other paths.
    async fn side_route(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Option<bool>> {
        let path = session.req_header().uri.path();
        let (status, content_type, body): (u16, &str, Bytes) = match path {
            "/healthz" => (200, "text/plain", Bytes::from_static(b"ok")),
            "/readyz" if self.draining.load(Ordering::Relaxed) => {
                (503, "text/plain", Bytes::from_static(b"draining"))
            }
            "/readyz" => (200, "text/plain", Bytes::from_static(b"ok")),
            "/metrics" => (
                200,
                "text/plain; version=0.0.4",
                Bytes::from(self.metrics.render()),
            ),
            _ => return Ok(None),
        };
        respond(session, ctx, status, content_type, body, &[]).await?;
        Ok(Some(true))
    }

    /// The OpenAI model list, with each model's phase as an extension field.
    fn model_list(&self) -> serde_json::Value {
        let lifecycle = self.activation.as_ref().map(|q| q.lifecycle());
        let data: Vec<serde_json::Value> = self
            .registry
            .list()
            .into_iter()
            .map(|m| {
                let model = m.parent.as_deref().unwrap_or(&m.root);
                let phase = match m.phase {
                    Some(phase) => phase.to_string(),
                    None => lifecycle
                        .and_then(|l| l.phase(model))
                        .unwrap_or_else(|| "Ready".to_string()),
                };
                serde_json::json!({
                    "id": m.id,
                    "object": "model",
                    "created": 0,
                    "owned_by": "flexinfer",
                    "root": m.root,
                    "parent": m.parent,
                    "status": {"phase": phase},
                })
            })
            .collect();
        serde_json::json!({"object": "list", "data": data})
    }

    /// Phase, queue depth, activity and swap history of models run on demand.
    fn admin_report(&self) -> serde_json::Value {
        match &self.activation {
            Some(q) => q.lifecycle().report(),
            None => serde_json::json!({"models": [], "groups": []}),
        }
    }

    /// Answers a read-only JSON route (`GET` only).
    async fn serve_json(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        build: impl FnOnce(&Self) -> serde_json::Value,
    ) -> Result<bool> {
        if session.req_header().method != http::Method::GET {
            let m = session.req_header().method.to_string();
            return self
                .reject(session, ctx, ApiError::method_not_allowed(&m))
                .await;
        }
        let body = serde_json::to_vec(&build(self)).unwrap_or_default();
        respond(
            session,
            ctx,
            200,
            "application/json",
            Bytes::from(body),
            &[],
        )
        .await?;
        Ok(true)
    }

    /// Reads the whole request body, refusing more than the limit.
    async fn read_body(&self, session: &mut Session) -> std::result::Result<Bytes, ApiError> {
        let limit = self.settings.max_body_bytes;
        let declared = session
            .req_header()
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::body_too_large(limit));
        }
        if expects_continue(session.req_header()) {
            // The client holds the body back until told to send it (curl
            // does for large uploads, waiting a second otherwise). The body
            // is read here, before any upstream is chosen, so the gateway
            // answers for it. A failed write shows up as a failed read below.
            let _ = session.write_continue_response().await;
        }
        // Pingora keeps a copy of bodies up to 64 KiB and sends it to the
        // upstream itself (see `request_body_filter`); larger ones are
        // forwarded by `forward_buffered`.
        session.as_mut().enable_retry_buffering();
        let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) => {
                    if buf.len() + chunk.len() > limit {
                        return Err(ApiError::body_too_large(limit));
                    }
                    buf.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(ApiError::bad_request(format!(
                        "failed to read request body: {}",
                        e.etype().as_str()
                    )))
                }
            }
        }
        Ok(buf.freeze())
    }

    /// Works out model, route, routing key and the body to forward.
    async fn plan(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> std::result::Result<ForwardPlan, ApiError> {
        let req = session.req_header();
        let path_and_query = req
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_string();
        let head = extract::from_head(&req.method, &path_and_query, &req.headers)?;
        let kind = extract::body_kind(&req.method, &req.headers);
        let (head_model, forward_path) = match head {
            Some(h) => (Some(h.model), h.forward_path),
            None => (None, None),
        };
        let needs_body = match kind {
            BodyKind::Json => true,
            BodyKind::Multipart { .. } => head_model.is_none(),
            BodyKind::Other => false,
        };
        let body = if needs_body {
            let b = self.read_body(session).await?;
            ctx.request_bytes = b.len() as u64;
            Some(b)
        } else {
            None
        };

        // The model named by the request, and a parsed view of a JSON body.
        let json = match (&kind, &body) {
            (BodyKind::Json, Some(b)) => Some(extract::parse_json(b)?),
            _ => None,
        };
        let requested = match (head_model, &json, &kind, &body) {
            (Some(m), _, _, _) => m,
            (None, Some(view), _, _) if view.model.is_some() => {
                view.model.as_deref().unwrap_or_default().to_string()
            }
            (None, _, BodyKind::Multipart { boundary }, Some(b)) => {
                extract::multipart_model(b.clone(), boundary)
                    .await?
                    .ok_or_else(ApiError::missing_model)?
            }
            _ => return Err(ApiError::missing_model()),
        };
        extract::validate_model_name(&requested)?;

        let mut resolved = self
            .registry
            .resolve(&requested)
            .ok_or_else(|| ApiError::model_not_found(&requested))?;
        ctx.model = Some(Arc::from(resolved.route.name.as_str()));

        if let Some(limiter) = &resolved.route.limiter {
            if let Err(wait) = limiter.check() {
                self.metrics
                    .rate_limited
                    .with_label_values(&[&resolved.route.name, "per_model"])
                    .inc();
                return Err(ApiError::rate_limited(wait));
            }
        }

        let mut active = None;
        if let Some(queues) = &self.activation {
            let route = &resolved.route;
            let admitted = queues.admit(&route.name, route.cold_start_timeout).await;
            if admitted.is_ok() {
                active = queues.active_request(&route.name);
            }
            match admitted {
                Ok(Admission::Ready) => {}
                Ok(Admission::Waited(waited)) => {
                    self.metrics
                        .queue_wait
                        .with_label_values(&[&route.name])
                        .observe(waited.as_secs_f64());
                    // The model's endpoints appeared while the request
                    // waited; the route resolved before may not have them.
                    if let Some(fresh) = self.registry.resolve(&requested) {
                        resolved = fresh;
                    }
                }
                Err(e) => {
                    self.metrics
                        .queue_rejected
                        .with_label_values(&[&route.name, e.code])
                        .inc();
                    return Err(e);
                }
            }
        }

        // The cluster policy of the global mode is not a per-model strategy
        // that `--routing-enabled false` turns off.
        let strategy = if self.settings.routing_enabled || self.settings.cluster_failover {
            resolved.route.strategy
        } else {
            Strategy::Default
        };
        let headers = &session.req_header().headers;
        let (routing_key, key_source) = if strategy.uses_key() {
            let document = json
                .as_ref()
                .and_then(|v| v.documents)
                .and_then(routing::document_text);
            let inputs = json.as_ref().map(|v| RoutingInputs {
                session_id: v.session_id.as_deref(),
                cache_key: v.cache_key.as_deref(),
                prefix: v.prefix.as_deref(),
                messages: v.messages,
                prompt: v.prompt,
                document_context: v.document_context.as_deref().or(document.as_deref()),
            });
            routing::routing_key(
                strategy,
                headers,
                &inputs.unwrap_or_default(),
                &self.settings.key_limits,
            )
        } else {
            None
        }
        .map_or((None, KeySource::None), |(k, s)| (Some(k), s));

        // Rewrite the JSON `model` to the name the backend serves.
        let rewritten = match (&body, &json) {
            (Some(b), Some(view)) if view.model.as_deref() != Some(&*resolved.upstream_model) => {
                Some(
                    rewrite::rewrite_model(b, &resolved.upstream_model)
                        .map_err(|e| ApiError::bad_request(e.to_string()))?,
                )
            }
            _ => None,
        };
        drop(json);
        let body = rewritten.or(body);

        Ok(ForwardPlan {
            resolved,
            strategy,
            routing_key,
            key_source,
            forward_path,
            body,
            request_id: ctx.request_id.clone().unwrap_or_else(|| Arc::from("")),
            tried_mask: None,
            _active: active,
        })
    }

    /// The answer for a model none of whose endpoints can be tried.
    fn no_endpoint(&self, model: &str) -> ApiError {
        ApiError::unavailable(if self.settings.cluster_failover {
            format!("no cluster available for model '{model}'")
        } else {
            format!("model '{model}' has no ready endpoint")
        })
    }

    /// Forwards a request whose body was read for routing and is larger
    /// than Pingora's 64 KiB retry buffer (smaller ones take the normal
    /// phases): a subrequest runs the proxy phases with the body preset,
    /// and its response is piped back.
    ///
    /// In global mode, a 5xx answer that the subrequest could not retry
    /// itself (the body is beyond the retry buffer) is held back while a
    /// cluster is left untried, and a new subrequest asks the next.
    async fn forward_buffered(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        mut plan: Box<ForwardPlan>,
    ) -> Result<bool> {
        let start = ctx.start.unwrap_or_else(Instant::now);
        if self.settings.cluster_failover {
            plan.tried_mask = Some(Arc::new(AtomicU64::new(0)));
        }
        let mut rounds = 0;
        loop {
            rounds += 1;
            let next = self.settings.cluster_failover.then(|| plan.again());
            let mut gate = next.as_ref().map(|p| FailoverGate {
                tried: p.tried_mask.clone().unwrap_or_default(),
                limit: self
                    .settings
                    .max_attempts
                    .min(p.resolved.route.endpoints.len())
                    .min(64),
                held: None,
                held_tasks: Vec::new(),
            });
            let Some(spawner) = session.subrequest_spawner.as_ref() else {
                return self
                    .reject(session, ctx, ApiError::internal("subrequests unavailable"))
                    .await;
            };
            let body = plan.body.clone().unwrap_or_default();
            let sub_ctx = SubrequestCtx::builder()
                .user_ctx(plan)
                .body_mode(BodyMode::ExpectBody)
                .build();
            let (prepared, handle) = spawner.create_subrequest(session.as_downstream(), sub_ctx);
            let mut relay = Relayed::default();
            let input = if body.is_empty() {
                InputBody::NoBody
            } else {
                InputBody::Bytes(vec![body])
            };
            let mut result = pipe_subrequest(
                session,
                prepared,
                handle,
                |task| {
                    let Some(task) = FailoverGate::pass(&mut gate, task, &relay, start) else {
                        return Ok(None);
                    };
                    relay.observe(&task, start);
                    Ok(Some(task))
                },
                InputBodyType::Preset(input),
            )
            .await;
            // A subrequest that fails answers for itself (`fail_to_proxy`) and
            // also reports the failure on a separate channel, which can overtake
            // that answer. Relay whatever it wrote before deciding what the
            // client gets, so that it gets that answer, whole.
            let mut tasks = Vec::new();
            if let Err(e) = &mut result {
                if let Some(rx) = e.state.pipe_rx.as_mut().filter(|_| e.from_subreq) {
                    while !relay.complete && !gate.as_ref().is_some_and(FailoverGate::held_complete)
                    {
                        match tokio::time::timeout(SUBREQUEST_DRAIN_TIMEOUT, rx.recv()).await {
                            Ok(Some(task)) => {
                                let Some(task) = FailoverGate::pass(&mut gate, task, &relay, start)
                                else {
                                    continue;
                                };
                                relay.observe(&task, start);
                                tasks.push(task);
                            }
                            _ => break,
                        }
                    }
                }
            }
            if let (Some(next), Some(gate)) = (next, &mut gate) {
                if gate.held.is_some() && rounds < 64 {
                    // Nothing reached the client: ask the next cluster.
                    self.metrics
                        .retries
                        .with_label_values(&[&next.resolved.route.name, "server_error"])
                        .inc();
                    plan = Box::new(next);
                    continue;
                }
                // No round left: the client gets the answer held back.
                for task in gate.held_tasks.drain(..) {
                    relay.observe(&task, start);
                    tasks.push(task);
                }
            }
            let relayed = if tasks.is_empty() {
                Ok(false)
            } else {
                session.write_response_tasks(tasks).await
            };
            ctx.response_bytes += relay.bytes;
            if let Some(t) = relay.ttfb {
                self.metrics
                    .ttfb
                    .with_label_values(&[Self::model_label(ctx)])
                    .observe(t.as_secs_f64());
                ctx.ttfb_seen = true;
            }
            if relay.status != 0 {
                ctx.status = relay.status;
            }
            relayed?;
            return match result {
                Ok(_) => Ok(true),
                // The subrequest answered in full (an error of its own, such as
                // 502 or 503): the client connection stays usable.
                Err(e) if e.from_subreq && relay.complete => Ok(true),
                Err(e) if relay.status == 0 => {
                    let err = classify_upstream_error(&e.error);
                    self.reject(session, ctx, err).await
                }
                // Failed mid-response: the client must see the response cut.
                Err(e) => Err(e.error),
            };
        }
    }
}

/// Global mode: holds back a member's 5xx answer, before anything was
/// relayed, while an endpoint is left untried.
struct FailoverGate {
    /// Endpoints tried by the request's subrequests, a bit per index.
    tried: Arc<AtomicU64>,
    /// Attempts allowed: the endpoints, up to the attempt limit.
    limit: usize,
    /// The answer held back, as far as it came.
    held: Option<Relayed>,
    /// Its tasks, relayed after all when no failover round is left.
    held_tasks: Vec<HttpTask>,
}

impl FailoverGate {
    /// `task` when it is to be relayed; `None` when the gate (if any) holds
    /// it back.
    fn pass(
        gate: &mut Option<FailoverGate>,
        task: HttpTask,
        relayed: &Relayed,
        start: Instant,
    ) -> Option<HttpTask> {
        match gate {
            Some(gate) if gate.holds(&task, relayed) => {
                gate.held
                    .get_or_insert_with(Relayed::default)
                    .observe(&task, start);
                gate.held_tasks.push(task);
                None
            }
            _ => Some(task),
        }
    }

    /// Whether `task` belongs to an answer held back: a 5xx header before
    /// anything was relayed, while an endpoint is left, and what follows it.
    fn holds(&self, task: &HttpTask, relayed: &Relayed) -> bool {
        if self.held.is_some() {
            return true;
        }
        let HttpTask::Header(header, _) = task else {
            return false;
        };
        let tried = self.tried.load(Ordering::Relaxed).count_ones() as usize;
        relayed.status == 0 && header.status.is_server_error() && tried < self.limit
    }

    /// Whether the whole held answer has arrived.
    fn held_complete(&self) -> bool {
        self.held.as_ref().is_some_and(|h| h.complete)
    }
}

/// Longest wait for the rest of a failed subrequest's answer; it is normally
/// already queued when the failure is reported.
const SUBREQUEST_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// What has been relayed to the client from a subrequest.
#[derive(Default)]
struct Relayed {
    status: u16,
    ttfb: Option<Duration>,
    bytes: u64,
    /// Content-Length of the answer, when it has one.
    length: Option<u64>,
    /// The answer ended: marked so, or all of its Content-Length was
    /// relayed (a subrequest that failed never marks the end of the answer
    /// its `fail_to_proxy` wrote).
    complete: bool,
}

impl Relayed {
    fn observe(&mut self, task: &HttpTask, start: Instant) {
        match task {
            HttpTask::Header(h, end) => {
                // Interim (1xx) headers are not the answer.
                if !h.status.is_informational() {
                    self.status = h.status.as_u16();
                    self.ttfb.get_or_insert_with(|| start.elapsed());
                    self.length = h
                        .headers
                        .get(header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse().ok());
                    self.complete |= *end;
                }
            }
            HttpTask::Body(b, end) => {
                self.bytes += b.as_ref().map_or(0, |b| b.len() as u64);
                self.complete |= *end;
            }
            HttpTask::Trailer(_) | HttpTask::Done => self.complete = true,
            HttpTask::UpgradedBody(..) | HttpTask::Failed(_) => {}
        }
        if self.status != 0 && self.length.is_some_and(|n| self.bytes >= n) {
            self.complete = true;
        }
    }
}

/// Writes a complete response that keeps the client connection usable.
async fn respond(
    session: &mut Session,
    ctx: &mut RequestCtx,
    status: u16,
    content_type: &str,
    body: Bytes,
    extra: &[(&'static str, String)],
) -> Result<()> {
    let mut resp = ResponseHeader::build(status, Some(4))?;
    resp.insert_header(header::CONTENT_TYPE, content_type)?;
    resp.insert_header(header::CONTENT_LENGTH, body.len().to_string())?;
    if let Some(id) = &ctx.request_id {
        resp.insert_header(REQUEST_ID, id.as_ref())?;
    }
    for (k, v) in extra {
        resp.insert_header(*k, v.as_str())?;
    }
    ctx.status = status;
    ctx.response_bytes += body.len() as u64;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await?;
    Ok(())
}

/// Whether an HTTP/1.1 (or later) client waits for `100 Continue` before
/// sending its body; HTTP/1.0 clients never do (RFC 9110, section 10.1.1).
fn expects_continue(req: &RequestHeader) -> bool {
    req.version >= http::Version::HTTP_11
        && req
            .headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Maps a proxy error to the answer the client gets.
fn classify_upstream_error(e: &Error) -> ApiError {
    use ErrorType::*;
    match e.etype() {
        ConnectTimedout | ConnectRefused | ConnectNoRoute | ConnectError | ConnectProxyFailure
        | SocketError | BindError => ApiError::bad_gateway(),
        ReadTimedout | WriteTimedout => ApiError::gateway_timeout(),
        HTTPStatus(413) => ApiError::body_too_large(0),
        _ if e.esource() == &ErrorSource::Upstream => ApiError::bad_gateway(),
        _ => ApiError::internal(format!("proxy error: {}", e.etype().as_str())),
    }
}

fn retry_reason(e: &Error) -> &'static str {
    match e.etype() {
        ErrorType::ConnectRefused => "conn_refused",
        ErrorType::ConnectNoRoute => "host_unreachable",
        ErrorType::ConnectTimedout => "timeout",
        ErrorType::HTTPStatus(_) => "server_error",
        ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError => "conn_closed",
        _ => "other",
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::default()
    }

    fn allow_spawning_subrequest(&self, _session: &Session, ctx: &RequestCtx) -> bool {
        !ctx.is_subrequest
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx.start = Some(Instant::now());
        if let Some(sub) = session.subrequest_ctx.as_mut() {
            // A subrequest spawned by `forward_buffered`: take over its plan.
            ctx.is_subrequest = true;
            let plan = sub
                .user_ctx_mut()
                .map(|u| std::mem::replace(u, Box::new(())))
                .and_then(|u| u.downcast::<ForwardPlan>().ok());
            match plan {
                Some(plan) => {
                    // The subrequest's header is a copy of the client's; frame
                    // the preset (possibly rewritten) body by its real length.
                    let len = plan.body.as_ref().map_or(0, Bytes::len);
                    let header = session.req_header_mut();
                    header.remove_header(&header::TRANSFER_ENCODING);
                    // The client's `Expect: 100-continue` was answered when
                    // the body was read; the upstream gets the body at once.
                    header.remove_header(&header::EXPECT);
                    header.insert_header(header::CONTENT_LENGTH, len.to_string())?;
                    ctx.request_id = Some(plan.request_id.clone());
                    ctx.model = Some(Arc::from(plan.resolved.route.name.as_str()));
                    if let Some(mask) = &plan.tried_mask {
                        let bits = mask.load(Ordering::Relaxed);
                        ctx.tried
                            .extend((0..64).filter(|i| bits & (1u64 << i) != 0));
                    }
                    ctx.plan = Some(plan);
                    return Ok(false);
                }
                None => {
                    return self
                        .reject(
                            session,
                            ctx,
                            ApiError::internal("subrequest without a plan"),
                        )
                        .await
                }
            }
        }

        let inbound_id = session
            .req_header()
            .headers
            .get(REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= 128)
            .map(Arc::from);
        ctx.request_id = Some(inbound_id.unwrap_or_else(|| self.next_request_id()));

        if let Some(done) = self.side_route(session, ctx).await? {
            return Ok(done);
        }
        if let Some(auth) = &self.auth {
            let value = session
                .req_header()
                .headers
                .get(header::AUTHORIZATION)
                .map(|v| v.as_bytes());
            if !auth.check(value) {
                return self.reject(session, ctx, ApiError::unauthorized()).await;
            }
        }
        match session.req_header().uri.path() {
            "/v1/models" => return self.serve_json(session, ctx, Self::model_list).await,
            "/admin/models" => return self.serve_json(session, ctx, Self::admin_report).await,
            _ => {}
        }
        if let Some(limiter) = &self.global_limiter {
            if let Err(wait) = limiter.check() {
                self.metrics
                    .rate_limited
                    .with_label_values(&["", "global"])
                    .inc();
                return self
                    .reject(session, ctx, ApiError::rate_limited(wait))
                    .await;
            }
        }

        let plan = match self.plan(session, ctx).await {
            Ok(plan) => Box::new(plan),
            Err(e) => return self.reject(session, ctx, e).await,
        };
        let gauge = self
            .metrics
            .active
            .with_label_values(&[&plan.resolved.route.name]);
        gauge.inc();
        ctx.model_gauge = Some(gauge);
        self.metrics
            .routing
            .with_label_values(&[
                &plan.resolved.route.name,
                plan.strategy.as_str(),
                plan.key_source.as_str(),
            ])
            .inc();
        if plan.body.is_some() && session.as_ref().retry_buffer_truncated() {
            return self.forward_buffered(session, ctx, plan).await;
        }
        if plan.resolved.route.endpoints.is_empty() {
            // Answered here, the client connection stays open.
            let err = self.no_endpoint(&plan.resolved.route.name);
            return self.reject(session, ctx, err).await;
        }
        ctx.plan = Some(plan);
        Ok(false)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        ctx.proxied = true;
        let Some(plan) = ctx.plan.as_ref() else {
            ctx.error = Some(ApiError::internal("no route planned"));
            return Err(Error::new(ErrorType::HTTPStatus(500)));
        };
        let route = &plan.resolved.route;
        let set = &route.endpoints;
        let Some(idx) = set.select(
            plan.strategy,
            plan.routing_key.as_deref(),
            &route.options,
            &ctx.tried,
        ) else {
            ctx.error = Some(self.no_endpoint(&route.name));
            return Err(Error::new(ErrorType::HTTPStatus(503)));
        };
        let upstream = set.upstream(idx);
        let gauge = self
            .metrics
            .endpoint_active
            .with_label_values(&[&route.name, &upstream.name]);
        gauge.inc();
        // Replacing the lease of a failed attempt releases its slot.
        ctx.lease = Some(EndpointLease {
            _in_flight: set.track(idx),
            gauge,
        });
        ctx.tried.push(idx);
        if let Some(mask) = plan.tried_mask.as_ref().filter(|_| idx < 64) {
            mask.fetch_or(1u64 << idx, Ordering::Relaxed);
        }
        let mut peer = HttpPeer::new(upstream.addr, false, String::new());
        peer.options.connection_timeout = Some(self.settings.connect_timeout);
        peer.options.read_timeout = Some(self.settings.read_timeout);
        peer.options.write_timeout = Some(self.settings.read_timeout);
        Ok(Box::new(peer))
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        ctx.lease = None;
        self.report_failure(ctx);
        if self.attempts_left(ctx) {
            self.count_retry(ctx, retry_reason(&e));
            e.set_retry(true);
        }
        e
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        let replayable = !session.as_ref().retry_buffer_truncated();
        if self.settings.cluster_failover {
            // Another cluster may answer as long as the client has seen
            // nothing and the body can be sent again. A timeout is the
            // member being slow, not gone: waiting as long again elsewhere
            // would double the client's wait.
            let untouched = session.as_downstream().response_written().is_none();
            let retry = replayable
                && untouched
                && e.esource() != &ErrorSource::Downstream
                && !matches!(
                    e.etype(),
                    ErrorType::ReadTimedout | ErrorType::WriteTimedout
                )
                && self.attempts_left(ctx);
            if e.esource() != &ErrorSource::Downstream
                && !matches!(e.etype(), ErrorType::HTTPStatus(_))
            {
                // The member answered nothing usable: check it again now.
                self.report_failure(ctx);
            }
            if retry {
                ctx.lease = None;
                self.count_retry(ctx, retry_reason(&e));
            }
            e.set_retry(retry);
        } else if !session.req_header().method.is_idempotent() || !replayable {
            // Pingora's default policy.
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        e
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        upstream.remove_header(WORKLOAD_CLASS);
        if self.auth.is_some() {
            // The gateway's API keys are not the backend's business.
            upstream.remove_header(&header::AUTHORIZATION);
        }
        if let Some(key) = &self.settings.upstream_authorization {
            upstream.insert_header(header::AUTHORIZATION, key.clone())?;
        }
        let Some(plan) = ctx.plan.as_ref() else {
            return Ok(());
        };
        // A member gateway finds the model in the path prefix itself.
        let forward_path = plan
            .forward_path
            .as_ref()
            .filter(|_| !self.settings.cluster_failover);
        if let Some(path) = forward_path {
            let uri: http::Uri = path
                .parse()
                .map_err(|_| Error::explain(ErrorType::InvalidHTTPHeader, "bad forward path"))?;
            upstream.set_uri(uri);
        }
        if let Some(body) = &plan.body {
            upstream.remove_header(&header::TRANSFER_ENCODING);
            // The client's `Expect: 100-continue` was answered when the body
            // was read; the upstream gets the body at once.
            upstream.remove_header(&header::EXPECT);
            upstream.insert_header(header::CONTENT_LENGTH, body.len().to_string())?;
        }
        upstream.insert_header(REQUEST_ID, plan.request_id.as_ref())?;
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        // A member cluster that answers 5xx is failed over like one that
        // refuses the connection: nothing of this answer reaches the client
        // while another cluster is left to ask.
        if self.settings.cluster_failover
            && resp.status.is_server_error()
            && self.attempts_left(ctx)
            && !session.as_ref().retry_buffer_truncated()
        {
            let status = resp.status.as_u16();
            let mut e = Error::explain(
                ErrorType::HTTPStatus(status),
                "member cluster answered with a server error",
            );
            e.set_retry(true);
            return Err(e);
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(id) = &ctx.request_id {
            resp.insert_header(REQUEST_ID, id.as_ref())?;
        }
        if self.settings.cluster_failover {
            if let (Some(plan), Some(&idx)) = (&ctx.plan, ctx.tried.last()) {
                let endpoints = &plan.resolved.route.endpoints;
                if idx < endpoints.len() {
                    resp.insert_header(CLUSTER_HEADER, endpoints.upstream(idx).name.as_str())?;
                }
            }
        }
        ctx.status = resp.status.as_u16();
        if !ctx.is_subrequest && !ctx.ttfb_seen {
            ctx.ttfb_seen = true;
            if let Some(start) = ctx.start {
                self.metrics
                    .ttfb
                    .with_label_values(&[Self::model_label(ctx)])
                    .observe(start.elapsed().as_secs_f64());
            }
        }
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if ctx.is_subrequest {
            return Ok(());
        }
        if let Some(read) = ctx.plan.as_ref().and_then(|plan| plan.body.as_ref()) {
            // A body read for routing (up to 64 KiB: larger ones go through
            // `forward_buffered`). Pingora replays its own copy of it, on
            // every attempt; the upstream gets the body as planned, possibly
            // rewritten, whole with the end of the stream.
            *body = (end_of_stream && !read.is_empty()).then(|| read.clone());
            return Ok(());
        }
        if let Some(b) = body {
            ctx.request_bytes += b.len() as u64;
        }
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<Duration>> {
        if !ctx.is_subrequest {
            if let Some(b) = body {
                ctx.response_bytes += b.len() as u64;
            }
        }
        Ok(None)
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        ctx.lease = None;
        let downstream_gone = e.esource() == &ErrorSource::Downstream
            && matches!(
                e.etype(),
                ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed
            );
        if downstream_gone || session.as_downstream().response_written().is_some() {
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        }
        let err = ctx
            .error
            .take()
            .unwrap_or_else(|| classify_upstream_error(e));
        let code = err.status;
        // After its upstream phases, Pingora closes the client connection
        // on failure: say so, so that the client does not send the next
        // request on it. (A subrequest's parent keeps its connection.)
        let closing = ctx.proxied && !ctx.is_subrequest;
        if closing {
            session.set_keepalive(None);
        }
        let _ = respond(
            session,
            ctx,
            code,
            "application/json",
            Bytes::from(err.body()),
            &[],
        )
        .await;
        FailToProxy {
            error_code: code,
            can_reuse_downstream: !closing,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        ctx.lease = None;
        if ctx.is_subrequest {
            return;
        }
        if let Some(g) = ctx.model_gauge.take() {
            g.dec();
        }
        // A managed model's request ends when its plan (with its
        // `ActiveRequest`) is dropped with the context, after the last byte.
        let model = Self::model_label(ctx).to_string();
        let path = session.req_header().uri.path();
        let route = route_label(path);
        let status = if ctx.status == 0 {
            session
                .as_downstream()
                .response_written()
                .map(|r| r.status.as_u16())
                .unwrap_or(0)
        } else {
            ctx.status
        };
        let elapsed = ctx.start.map(|s| s.elapsed()).unwrap_or_default();
        let status_label = status.to_string();
        self.metrics
            .requests
            .with_label_values(&[&model, &status_label, route])
            .inc();
        self.metrics
            .duration
            .with_label_values(&[&model, route])
            .observe(elapsed.as_secs_f64());
        if ctx.request_bytes > 0 {
            self.metrics
                .bytes_in
                .with_label_values(&[&model])
                .inc_by(ctx.request_bytes);
        }
        if ctx.response_bytes > 0 {
            self.metrics
                .bytes_out
                .with_label_values(&[&model])
                .inc_by(ctx.response_bytes);
        }
        tracing::info!(
            request_id = ctx.request_id.as_deref().unwrap_or(""),
            method = %session.req_header().method,
            path,
            model = %model,
            status,
            elapsed_ms = elapsed.as_secs_f64() * 1000.0,
            error = e.map(|e| e.to_string()),
            "request"
        );
    }
}

/// Formats `seed` and `counter` as a UUID with version 4 and the RFC 4122
/// variant: unique per gateway process for 2^62 requests.
fn request_uuid(seed: u64, counter: u64) -> String {
    let hi = (seed & !0xf000) | 0x4000;
    let lo = (counter & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod request_id_tests {
    #[test]
    fn request_ids_are_version_4_uuids() {
        let id = super::request_uuid(0xdead_beef_0123_4567, 5);
        assert_eq!(id, "deadbeef-0123-4567-8000-000000000005");
        let other = super::request_uuid(0xffff_ffff_ffff_ffff, u64::MAX);
        assert_eq!(other, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_ne!(super::request_uuid(1, 1), super::request_uuid(1, 2));
    }
}
