//! The Pingora [`ProxyHttp`] implementation. Each phase is a short sequence
//! of calls that follows the request sequence of `ARCHITECTURE.md`:
//! side routes → auth → global limit → extract → resolve → per-model limit
//! → admit (cold start) → route → rewrite → forward → record.
//!
//! Every POST body is read first, whatever its Content-Type, since engines
//! read it whatever the head says (JSON bodies to route on and rewrite,
//! multipart forms whose `model` must match): it is buffered up to the
//! body limit; other methods' bodies stream straight through. Bodies up
//! to Pingora's 64 KiB retry buffer go through the upstream phases, larger
//! ones through a subrequest with the body preset ([`buffered`]).
//!
//! Where each concern lives: [`context`] (per-request state, request ids),
//! [`checks`] (API key, global limit), [`plan`] (extract → rewrite),
//! [`dispatch`] (which path the planned request takes), [`upstream`] (peer
//! choice, upstream head, retries), [`buffered`] and [`failover`] (the
//! subrequest path and global-mode failover), [`side_routes`] and
//! [`listing`] (the gateway's own routes), [`respond`] (answers it writes
//! itself), [`record`] (metrics and access log).

mod body;
mod body_edits;
mod buffered;
mod checks;
mod context;
mod dispatch;
mod failover;
mod headers;
mod hold;
mod isolation;
mod listing;
mod metering;
mod midstream;
mod plan;
mod prompt;
mod record;
mod respond;
mod responses;
mod settings;
pub mod side_routes;
mod stream_timing;
mod upstream;
mod usage_headers;
mod window;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};

pub use context::{requests_in_progress, RequestCtx};
pub use headers::{CLUSTER_HEADER, REQUEST_ID as REQUEST_ID_HEADER, ROUTE_HEADER};
pub use plan::ForwardPlan;
pub use settings::{EndpointFailures, ProxySettings, WindowSettings};
pub use side_routes::{SideAnswer, SideRoutes};

use crate::activation::ActivationQueues;
use crate::auth::Auth;
use crate::connections;
use crate::metrics::Metrics;
use crate::ratelimit::RouteLimiter;
use crate::registry::ModelRegistry;
use crate::tenants::Tenants;
use context::RequestIds;
use respond::{answer_failure, reject, respond};

/// Pause before an attempt goes to an endpoint tried before (as the
/// original's 50 ms between attempts).
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Shared state of the gateway's request path.
pub struct Gateway {
    registry: Arc<dyn ModelRegistry>,
    activation: Option<Arc<ActivationQueues>>,
    failures: Option<Arc<dyn EndpointFailures>>,
    /// Accepted API keys and their tenants, when keys are required.
    tenants: Option<Arc<Tenants>>,
    /// Keys that may also reach admin routes ([`crate::paths::ADMIN_PATHS`]).
    admin_keys: Option<Auth>,
    global_limiter: Option<RouteLimiter>,
    metrics: Metrics,
    side_routes: SideRoutes,
    settings: ProxySettings,
    request_ids: RequestIds,
    /// Where each Responses API response was created ([`responses`]).
    response_ids: Arc<responses::ResponseIds>,
    /// Where cache-aware picks are shared with the other replicas, when
    /// they are ([`crate::peers`]).
    peers: Option<Arc<crate::peers::Outbox>>,
    /// Where the peers are asked about stored responses not created here
    /// ([`crate::peers::origins`]).
    origins: Option<Arc<crate::peers::origins::OriginLookup>>,
    /// The Gateway API's routes and backends, when it is served
    /// ([`crate::gatewayapi`]).
    gateway_api: Option<Arc<crate::gatewayapi::DataPlane>>,
}

impl Gateway {
    /// Builds the request path.
    pub fn new(
        registry: Arc<dyn ModelRegistry>,
        tenants: Option<Arc<Tenants>>,
        global_limiter: Option<RouteLimiter>,
        side_routes: SideRoutes,
        metrics: Metrics,
        settings: ProxySettings,
    ) -> Self {
        Self {
            registry,
            activation: None,
            failures: None,
            tenants,
            admin_keys: None,
            global_limiter,
            metrics,
            side_routes,
            settings,
            request_ids: RequestIds::new(),
            response_ids: Arc::default(),
            peers: None,
            origins: None,
            gateway_api: None,
        }
    }

    /// Shares what cache-aware picks teach the prefix indexes with the
    /// peers, and asks them about stored responses created elsewhere.
    pub fn with_peers(mut self, handles: crate::peers::PeerHandles) -> Self {
        self.peers = Some(handles.outbox);
        self.origins = Some(handles.origins);
        self
    }

    /// Where the stored responses created through this gateway are, for
    /// the peers to ask ([`crate::peers::origins`]).
    pub fn response_book(&self) -> Arc<dyn crate::peers::origins::OriginBook> {
        self.response_ids.clone()
    }

    /// Serves the Gateway API's routes on their data-plane ports.
    pub fn with_gateway_api(mut self, plane: Arc<crate::gatewayapi::DataPlane>) -> Self {
        self.gateway_api = Some(plane);
        self
    }

    /// Keys that may reach admin routes (and every other route).
    pub fn with_admin_keys(mut self, keys: Option<Auth>) -> Self {
        self.admin_keys = keys;
        self
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
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::default()
    }

    /// No downstream modules. Pingora's default adds its response
    /// compression module, switched off, which still builds a context and
    /// runs four filters on every request. Engines' answers pass as sent.
    fn init_downstream_modules(&self, _modules: &mut pingora_core::modules::http::HttpModules) {}

    fn allow_spawning_subrequest(&self, _session: &Session, ctx: &RequestCtx) -> bool {
        !ctx.is_subrequest
    }

    async fn early_request_filter(
        &self,
        session: &mut Session,
        _ctx: &mut RequestCtx,
    ) -> Result<()> {
        // The header is in: the connection's header limits stop applying,
        // and requests pipelined behind this one are served in order.
        connections::header_received();
        session.as_downstream_mut().set_pipelining_enabled(true);
        Ok(())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx.start = Some(Instant::now());
        if session.subrequest_ctx.is_some() {
            return self.adopt_subrequest(session, ctx).await;
        }
        let inbound_id = session
            .req_header()
            .headers
            .get(headers::parsed::REQUEST_ID);
        ctx.request_id = Some(self.request_ids.for_request(inbound_id));
        if let Err(e) = checks::check_framing(session.req_header()) {
            return reject(session, ctx, e).await;
        }
        if let Err(e) = self.check_metrics_access(session.req_header()) {
            return reject(session, ctx, e).await;
        }
        if let Some(a) = self.side_routes.answer(session.req_header().uri.path()) {
            respond(session, ctx, a.status, a.content_type, a.body, &[]).await?;
            return Ok(true);
        }
        match self.authenticate(session.req_header()) {
            Ok(tenant) => ctx.tenant = tenant,
            Err(e) => return reject(session, ctx, e).await,
        }
        if let Some(routes) = self.gateway_of(session) {
            // A Gateway's traffic: its routes decide, nothing else.
            if let Err(e) = self.check_global_limit() {
                return reject(session, ctx, e).await;
            }
            let planned = match self.plan_gateway_route(session, ctx, &routes).await {
                Ok(plan::GatewayPlan::Forward(plan)) => Ok(plan),
                Ok(plan::GatewayPlan::Model(model)) => {
                    ctx.route_model = Some(model);
                    self.plan(session, ctx).await.map(Box::new)
                }
                Err(e) => Err(e),
            };
            return match planned {
                Ok(plan) => self.dispatch(session, ctx, plan).await,
                Err(e) => reject(session, ctx, e).await,
            };
        }
        if let Some(done) = self.serve_listing(session, ctx).await? {
            return Ok(done);
        }
        if let Err(e) = self.check_global_limit() {
            return reject(session, ctx, e).await;
        }
        match self.plan(session, ctx).await {
            Ok(plan) => self.dispatch(session, ctx, Box::new(plan)).await,
            Err(e) => reject(session, ctx, e).await,
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        ctx.proxied = true;
        let (peer, again) = self.pick_peer(ctx)?;
        if again {
            // The same endpoint once more: give a restarting pod a moment.
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        Ok(peer)
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut RequestCtx,
        e: Box<Error>,
    ) -> Box<Error> {
        self.connect_failed(ctx, e)
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        upstream_reused: bool,
    ) -> Box<Error> {
        let e = e.more_context(format!("Peer: {peer}"));
        self.proxy_failed(session, ctx, e, upstream_reused)
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        self.upstream_head(upstream, ctx)
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        ctx.upstream_answered = true;
        self.picker_response_head(resp, ctx).await;
        ctx.held_error = (ctx.held_head && resp.status.as_u16() >= 400)
            .then(|| Box::new((resp.status.as_u16(), Vec::new())));
        self.begin_resumable(resp, ctx);
        if ctx.stream_timing.is_none() {
            // A resumed stream keeps the timing of its first answer.
            ctx.stream_timing =
                stream_timing::StreamTiming::of(resp, &self.metrics, ctx.model_label(), ctx.start);
        }
        if let Some(metering) = ctx.plan.as_mut().and_then(|p| p.metering.as_mut()) {
            metering.begin(resp);
        }
        self.record_outcome(ctx, false);
        self.watch_responses(session.req_header(), resp, ctx);
        self.fail_over_server_error(session, resp, ctx)
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        self.add_response_headers(session.req_header(), resp, ctx)?;
        ctx.status = resp.status.as_u16();
        self.record_first_byte(ctx);
        if self.side_routes.draining() {
            // Draining: each connection ends after its answer (`Connection:
            // close`), so a keep-alive client opens its next one elsewhere
            // (the pod has left its Services) instead of reusing this one
            // as the drain closes it.
            session.set_keepalive(None);
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
            *body = (end_of_stream && !read.is_empty()).then(|| read.contiguous());
        } else if let Some(b) = body {
            ctx.request_bytes += b.len() as u64;
            self.enforce_body_limit(ctx)?;
        }
        Ok(())
    }

    fn response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<Duration>> {
        if let Some(held) = ctx.held_error.as_mut() {
            hold::error_answer_as_event(session, &ctx.request_id, held, body, end_of_stream);
        }
        self.splice_chunk(body, end_of_stream, ctx)?;
        if ctx.response_watch.is_some() {
            self.watch_response_body(body, end_of_stream, ctx);
        }
        if let Some(metering) = ctx.plan.as_mut().and_then(|p| p.metering.as_mut()) {
            metering.feed(body, end_of_stream);
        }
        if let Some(b) = body.as_ref().filter(|b| !b.is_empty()) {
            if let Some(timing) = ctx.stream_timing.as_mut() {
                timing.chunk();
            }
            if !ctx.is_subrequest {
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
        self.end_unresumed(session, e, ctx);
        answer_failure(session, e, ctx).await
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        ctx.lease = None;
        if let Some(plan) = ctx.plan.as_mut() {
            if let Some(metering) = plan.metering.as_mut() {
                metering.finish(&self.metrics, &plan.resolved.route.name);
            }
        }
        if !ctx.is_subrequest {
            connections::request_ended();
            // A managed model's request ends when its plan (with its
            // `ActiveRequest`) is dropped with the context, after the last byte.
            self.record(session, e, ctx);
        }
    }
}
