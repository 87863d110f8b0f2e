//! Everything decided about a request before it is forwarded, in the
//! order of the request sequence (`ARCHITECTURE.md`, "The request path"):
//! extract the model, resolve it, apply its limit, admit it (cold start),
//! derive the routing key, rewrite the body.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::HeaderMap;
use pingora_proxy::Session;

mod admission;
mod charge;
mod gateway_api;
mod resolve;

pub(super) use gateway_api::{GatewayPlan, Picked};

use super::body::{declared_length, read_body};
use super::body_edits::{BodyEdits, PlannedBody};
use super::context::RequestCtx;
use super::headers::parsed;
use super::isolation::{self, StoreRoute};
use super::metering::{self, Metering};
pub(super) use super::prompt::PromptRouting;
use super::window::{self, Clamp};
use super::Gateway;
use crate::activation::{ActiveRequest, Admission, AdmitRequest, FlowPermit};
use crate::errors::ApiError;
use crate::extract::{self, BodyKind, JsonView};
use crate::flow::{Class, Waiter};
use crate::label_groups::{GroupKeys, GroupTicket, LabelGroup};
use crate::registry::{ModelRoute, Resolved};
use crate::routing::{self, KeySource, RoutingInputs, Strategy};
use crate::tenants::{Estimate, Tenant, TokenCharge};

/// Pingora's retry buffer: a body up to this size is sent upstream by
/// Pingora, in one piece (`request_body_filter`); a larger one by
/// `forward_buffered`, which writes it in slices.
const RETRY_BUFFER_BYTES: usize = 64 * 1024;

/// Everything decided about a request before it is forwarded.
pub struct ForwardPlan {
    pub(super) resolved: Resolved,
    pub(super) strategy: Strategy,
    pub(super) routing_key: Option<String>,
    pub(super) key_source: KeySource,
    /// What cache-aware routing scores the request by.
    pub(super) prompt: Option<Arc<PromptRouting>>,
    /// The path sent upstream when the client's carried a `/model/<name>/`
    /// prefix.
    pub(super) forward_path: Option<String>,
    /// The body as it goes upstream (rewritten), when the gateway read it.
    pub(super) body: Option<PlannedBody>,
    pub(super) request_id: Arc<str>,
    /// Global mode, buffered requests: endpoints (bit per index) tried by
    /// every subrequest of this request, so that a failover subrequest
    /// skips them.
    pub(super) tried_mask: Option<Arc<AtomicU64>>,
    /// The tenant's budget charge and usage accounting.
    pub(super) metering: Option<Box<Metering>>,
    /// `X-FlexInfer-MaxTokens-Clamped`, when the output limit was clamped.
    pub(super) clamped: Option<String>,
    /// A completion: when the request arrived (`X-Flexinfer-Upstream-Ms`).
    pub(super) completion_since: Option<Instant>,
    /// A non-streamed completion whose answer is held back for its usage
    /// headers (`--usage-headers`, [`super::usage_headers`]).
    pub(super) hold_for_usage: bool,
    /// Keeps a managed model from an idle stop while this request runs.
    pub(super) _active: Option<ActiveRequest>,
    /// The model's slot, when its concurrency is bounded.
    pub(super) _permit: Option<FlowPermit>,
    /// Counts the request on the label-group member it went to.
    pub(super) _group: Option<GroupTicket>,
    /// The body was read as JSON without being declared so: it goes
    /// upstream as `application/json`.
    pub(super) retyped_json: bool,
    /// The caller's tenant, for what a subrequest records (the owner of a
    /// created response).
    pub(super) tenant: Option<Arc<Tenant>>,
    /// Whether the routing decision may be shown to the caller
    /// (`--route-debug-header`): an admin key, or a gateway without keys.
    pub(super) route_debug: bool,
    /// Gateway API: an InferencePool's endpoint picker chose the endpoints
    /// ([`crate::epp`]).
    pub(super) picked: Option<Box<Picked>>,
    /// Gateway API: the backend speaks cleartext HTTP/2 (an InferencePool's
    /// `appProtocol: kubernetes.io/h2c`).
    pub(super) h2c: bool,
    /// A stream of a model with stream failover: what the client has been
    /// sent, to resume it elsewhere if its engine fails ([`crate::resume`]).
    pub(super) resume: Option<Box<crate::resume::StreamResume>>,
}

impl ForwardPlan {
    /// The same plan for another subrequest of a global-mode request (which
    /// never holds an [`ActiveRequest`]: members do their own activation).
    pub(super) fn again(&self) -> ForwardPlan {
        ForwardPlan {
            resolved: self.resolved.clone(),
            strategy: self.strategy,
            routing_key: self.routing_key.clone(),
            key_source: self.key_source,
            prompt: self.prompt.clone(),
            forward_path: self.forward_path.clone(),
            body: self.body.clone(),
            request_id: self.request_id.clone(),
            tried_mask: self.tried_mask.clone(),
            metering: None,
            clamped: self.clamped.clone(),
            completion_since: self.completion_since,
            hold_for_usage: false,
            _active: None,
            _permit: None,
            _group: None,
            retyped_json: self.retyped_json,
            tenant: self.tenant.clone(),
            route_debug: self.route_debug,
            picked: None,
            h2c: self.h2c,
            resume: None,
        }
    }
}

/// What the request head says: the model when a header or the path names
/// it, the path to forward, and what kind of body follows.
struct RequestHead {
    model: Option<String>,
    forward_path: Option<String>,
    kind: BodyKind,
}

impl RequestHead {
    fn read(session: &Session) -> Result<Self, ApiError> {
        let req = session.req_header();
        let path_and_query = req.uri.path_and_query().map_or("/", |p| p.as_str());
        let head = extract::from_head(&req.method, path_and_query, &req.headers)?;
        let kind = extract::body_kind(&req.method, &req.headers);
        let (model, forward_path) = match head {
            Some(h) => (Some(h.model), h.forward_path),
            None => (None, None),
        };
        Ok(Self {
            model,
            forward_path,
            kind,
        })
    }

    /// Whether the body is read before routing: every POST body, whatever
    /// its Content-Type and wherever the model is named, since an engine
    /// reads it whatever the head says (`docs/gateway.md`, "Request
    /// bodies").
    fn needs_body(&self) -> bool {
        self.kind != BodyKind::Other
    }
}

/// Reads a body that was not declared as JSON: JSON when it parses (and it
/// then goes upstream as `application/json`), else refused on an API route
/// (400 without a Content-Type, as for malformed JSON; 415 with another),
/// else forwarded as it is, since no engine reads it as a request.
fn read_undeclared<'b>(
    kind: &BodyKind,
    body: &'b Bytes,
    content_type: Option<&http::HeaderValue>,
    path: &str,
) -> Result<Option<JsonView<'b>>, ApiError> {
    if body.is_empty() {
        return Ok(None);
    }
    match extract::parse_json(body) {
        Ok(view) => Ok(Some(view)),
        Err(e) => {
            let engine_path = isolation::engine_path(path);
            if !crate::paths::is_api_body_path(&engine_path) {
                return Ok(None);
            }
            match (kind, content_type) {
                (BodyKind::Foreign, Some(ct)) => Err(ApiError::unsupported_media_type(
                    &String::from_utf8_lossy(ct.as_bytes()),
                    &engine_path,
                )),
                _ => Err(e),
            }
        }
    }
}

impl Gateway {
    /// `--validate-requests`: a chat, completion or embedding body an
    /// engine would refuse is answered here ([`crate::validation`]).
    /// Bodies the gateway did not read (not JSON) pass unchecked.
    fn validate_body(
        &self,
        session: &Session,
        model_in_head: bool,
        body: Option<&Bytes>,
    ) -> Result<(), ApiError> {
        let path = session.req_header().uri.path();
        match (crate::validation::Endpoint::of(path), body) {
            (Some(endpoint), Some(body)) => {
                crate::validation::validate(endpoint, body, model_in_head)
            }
            _ => Ok(()),
        }
    }

    /// Works out model, route, routing key and the body to forward.
    pub(super) async fn plan(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<ForwardPlan, ApiError> {
        let mut head = RequestHead::read(session)?;
        let req = session.req_header();
        let head_path = head.forward_path.as_deref().map_or(req.uri.path(), |p| {
            p.split_once('?').map_or(p, |(path, _)| path)
        });
        let store = isolation::store_route(&req.method, head_path);
        self.check_store_route(&store, head_path, ctx)?;
        if let Some(follow_up) = self
            .response_follow_up(req, &store, head.model.as_deref(), ctx)
            .await?
        {
            // A Responses API follow-up: the model is the response's, and
            // no body names one, so any body streams through.
            head.model = head.model.or(follow_up.model);
            head.kind = BodyKind::Other;
        }
        let creates_response = store == StoreRoute::CreateResponse;
        drop(store);
        let limit = self.settings.max_body_bytes;
        let declared = declared_length(session.req_header());
        if declared.is_some_and(|n| n > limit) {
            // Refused before a byte of it is read or forwarded.
            return Err(ApiError::body_too_large(limit));
        }
        let body = if head.needs_body() {
            let body = read_body(session, limit, declared).await?;
            ctx.request_bytes = body.len() as u64;
            Some(body)
        } else {
            None
        };
        let json = match (&head.kind, &body) {
            (BodyKind::Json, Some(b)) => Some(extract::parse_json(b)?),
            (BodyKind::Untyped | BodyKind::Foreign, Some(b)) => read_undeclared(
                &head.kind,
                b,
                session.req_header().headers.get(http::header::CONTENT_TYPE),
                head_path_of(session.req_header(), head.forward_path.as_deref()),
            )?,
            _ => None,
        };
        // A body read as JSON that was not declared so goes upstream
        // declared as what the gateway read it as.
        let retyped = json.is_some() && head.kind != BodyKind::Json;
        let form_model = match (&head.kind, &body) {
            (BodyKind::Multipart { boundary }, Some(b)) => {
                extract::multipart_model(b.clone(), boundary).await?
            }
            _ => None,
        };
        if self.settings.validate_requests {
            self.validate_body(
                session,
                head.model.is_some(),
                json.as_ref().and(body.as_ref()),
            )?;
        }
        let requested = match ctx.route_model.take() {
            // A Gateway API route's `Model` backend: the route names it.
            Some(model) => model.to_string(),
            None => requested_model(head.model, json.as_ref(), form_model.as_deref())?,
        };
        let (resolved, group) = self.resolve(
            &requested,
            &session.req_header().headers,
            json.as_ref(),
            ctx,
        )?;
        if let Some(form) = form_model.as_deref() {
            // The form is forwarded untouched: the model it names must be
            // the one the request was checked and routed for.
            let names_route = form == requested
                || form == &*resolved.route.name
                || form == &*resolved.upstream_model;
            if !names_route {
                return Err(ApiError::form_model_mismatch(form, &requested));
            }
        }
        if let (true, Some(view)) = (creates_response, json.as_ref()) {
            self.continue_response(view, &resolved.route.name, ctx)
                .await?;
        }
        let req = session.req_header();
        let path = head.forward_path.as_deref().map_or(req.uri.path(), |p| {
            p.split_once('?').map_or(p, |(path, _)| path)
        });
        resolved
            .route
            .paths
            .check(&resolved.route.name, path, self.is_admin(req))?;
        // The path as the engine's router matches it (escapes decoded).
        let api = isolation::engine_path(path);
        let completions = matches!(&*api, "/v1/chat/completions" | "/v1/completions");
        let generation = generation_limit_field(&api);
        let streams = json.as_ref().is_some_and(|v| v.stream == Some(true));
        let held_progress = crate::held::streams_progress(&api, streams);
        let resumable = streams
            .then(|| resolved.route.stream_failover.api(&api))
            .flatten();
        drop(api);
        let salt = match (json.as_ref(), body.as_ref()) {
            (Some(view), Some(bytes)) => self.cache_salt(path, view, bytes, ctx),
            _ => None,
        };
        let clamp = match json.as_ref() {
            Some(view) => self.guard_window(&resolved, view)?,
            None => None,
        };
        let mut metering = None;
        let mut default_limit = None;
        if let Some(tenant) = ctx.tenant.clone() {
            let (m, limit) = self
                .charge_tenant(
                    tenant,
                    &resolved,
                    json.as_ref(),
                    clamp.as_ref(),
                    generation.is_some(),
                )
                .await?;
            metering = Some(m);
            default_limit = limit;
        }
        let background = is_background(&session.req_header().headers);
        // A label-group pick is looked up again (after a cold start) by the
        // member's name, not by the label.
        let member = group.is_some().then(|| resolved.route.clone());
        let lookup = member.as_ref().map_or(requested.as_str(), |r| &*r.name);
        let who = Waiter {
            class: match &ctx.tenant {
                _ if background => Class::Background,
                Some(t) => Class::of(t.priority),
                None => Class::Normal,
            },
            tenant: ctx
                .tenant
                .as_ref()
                .map_or_else(|| Arc::from(""), |t| t.name.clone()),
        };
        let (resolved, active, permit) = self
            .admit(session, ctx, resolved, (lookup, who), held_progress)
            .await?;
        let strategy = self.strategy(&resolved);
        let (routing_key, key_source) =
            self.routing_key(strategy, &session.req_header().headers, json.as_ref());
        let prompt = strategy.uses_prompt().then(|| {
            Arc::new(PromptRouting::of(
                &session.req_header().headers,
                json.as_ref(),
                &resolved,
                salt.as_deref(),
            ))
        });
        let mut edits = BodyEdits::default();
        if let Some(view) = json.as_ref() {
            // A stream charged against a token budget always asks the
            // engine for its usage; what the client did not ask for is
            // taken out of the answer again (see `Metering::strip_usage`).
            let stream = completions && view.stream == Some(true);
            if let Some(m) = metering.as_mut().filter(|m| stream && m.charges_tokens()) {
                if edits.request_usage(view) {
                    m.strip_usage();
                }
            }
            if let (Some(tokens), Some(field)) = (default_limit, generation) {
                edits.set_output_limit(view, field, tokens);
            }
            edits.set_model(view, &resolved.upstream_model);
            if let Some(c) = &clamp {
                edits.replace(c.span.clone(), Bytes::from(c.to.to_string()));
            }
            if let Some(salt) = &salt {
                edits.set_cache_salt(view, salt);
            }
        }
        let streamed = json.as_ref().is_some_and(|v| v.stream == Some(true));
        drop(json);
        let body = body.map(|b| edits.apply(b, RETRY_BUFFER_BYTES));
        let hold_for_usage = self.settings.usage_headers
            && completions
            && !streamed
            && body.is_some()
            && !self.settings.cluster_failover;
        Ok(ForwardPlan {
            resolved,
            strategy,
            routing_key,
            key_source,
            prompt,
            forward_path: head.forward_path,
            body,
            request_id: ctx.request_id.clone().unwrap_or_else(|| Arc::from("")),
            tried_mask: None,
            metering,
            clamped: clamp.map(|c| c.header()),
            completion_since: completions.then(|| ctx.start.unwrap_or_else(Instant::now)),
            hold_for_usage,
            _active: active,
            _permit: permit,
            _group: group,
            retyped_json: retyped,
            tenant: ctx.tenant.clone(),
            route_debug: ctx.tenant.is_none(),
            picked: None,
            h2c: false,
            resume: resumable.map(|api| Box::new(crate::resume::StreamResume::new(api))),
        })
    }

    /// The context-window guard: the clamp to apply, or a 413 (counted).
    fn guard_window(
        &self,
        resolved: &Resolved,
        view: &JsonView<'_>,
    ) -> Result<Option<Clamp>, ApiError> {
        let route = &resolved.route;
        let outcome = window::guard(route, view, &self.settings.window);
        let admitting = self.settings.window.admission && route.context_admission;
        if admitting && route.context_window.is_some() {
            let (reason, allow) = match &outcome {
                Err(_) => ("over_budget", "false"),
                Ok(_) => ("within_budget", "true"),
            };
            self.metrics
                .admission_decisions
                .with_label_values(&[&route.name, reason, allow])
                .inc();
        }
        let clamp = outcome?;
        if clamp.is_some() {
            self.metrics
                .max_tokens_clamped
                .with_label_values(&[&route.name, "context_window_headroom"])
                .inc();
        }
        Ok(clamp)
    }

    /// The model's routing strategy, unless routing is switched off. The
    /// cluster policy of the global mode is not a per-model strategy that
    /// `--routing-enabled false` turns off.
    fn strategy(&self, resolved: &Resolved) -> Strategy {
        if self.settings.routing_enabled || self.settings.cluster_failover {
            resolved.route.strategy
        } else {
            Strategy::Default
        }
    }

    /// The key a hashing strategy places the request by, and where it came from.
    fn routing_key(
        &self,
        strategy: Strategy,
        headers: &HeaderMap,
        json: Option<&JsonView<'_>>,
    ) -> (Option<String>, KeySource) {
        if !strategy.uses_key() {
            return (None, KeySource::None);
        }
        let document = json
            .and_then(|v| v.documents)
            .and_then(routing::document_text);
        let inputs = json.map(|v| RoutingInputs {
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
        .map_or((None, KeySource::None), |(k, s)| (Some(k), s))
    }
}

/// Whether the request carries `X-FlexInfer-Internal-Workload-Class:
/// background` (trimmed, any case); any other value is foreground.
fn is_background(headers: &HeaderMap) -> bool {
    headers
        .get(parsed::WORKLOAD_CLASS)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("background"))
}

/// The model the request names: the head's, else the JSON `model`, else a
/// multipart `model` field.
fn requested_model(
    head_model: Option<String>,
    json: Option<&JsonView<'_>>,
    form_model: Option<&str>,
) -> Result<String, ApiError> {
    // Each source validated the name as it read it.
    head_model
        .or_else(|| json.and_then(|v| v.model.as_deref()).map(str::to_owned))
        .or_else(|| form_model.map(str::to_owned))
        .ok_or_else(ApiError::missing_model)
}

/// The field a generation API takes its output limit in (`None` for
/// routes that generate nothing, such as embeddings).
fn generation_limit_field(api_path: &str) -> Option<&'static str> {
    match api_path {
        "/v1/chat/completions" | "/v1/completions" | "/v1/messages" => Some("max_tokens"),
        "/v1/responses" => Some("max_output_tokens"),
        _ => None,
    }
}

/// The request's path as the engine gets it, without the query string.
fn head_path_of<'r>(req: &'r pingora_http::RequestHeader, forward: Option<&'r str>) -> &'r str {
    forward.map_or(req.uri.path(), |p| {
        p.split_once('?').map_or(p, |(path, _)| path)
    })
}
