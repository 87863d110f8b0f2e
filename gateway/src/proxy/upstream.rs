//! The upstream side of a request: which endpoint each attempt goes to,
//! what it is sent, and when a failed attempt is tried again elsewhere.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use http::{header, HeaderValue};
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorSource, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::Session;

use super::context::{EndpointLease, RequestCtx};
use super::headers::{parsed, REQUEST_ID};
use super::Gateway;
use crate::errors::ApiError;
use crate::routing::health::Change;

impl Gateway {
    /// Picks the endpoint of this attempt, leases its slot and builds the
    /// peer. Endpoints already tried are skipped while another is left;
    /// after that the attempt may go to one tried before (a pod restarting,
    /// a keep-alive connection it closed), but not to the one that just
    /// failed when there is a choice. Returns whether the endpoint was
    /// tried before, so that the caller pauses before the attempt.
    pub(super) fn pick_peer(&self, ctx: &mut RequestCtx) -> Result<(Box<HttpPeer>, bool)> {
        // An endpoint picker named the endpoints, in order.
        let picked = ctx
            .plan
            .as_mut()
            .and_then(|p| p.picked.as_mut())
            .map(|p| p.next_endpoint());
        let Some(plan) = ctx.plan.as_ref() else {
            ctx.error = Some(ApiError::internal("no route planned"));
            return Err(Error::new(ErrorType::HTTPStatus(500)));
        };
        let route = &plan.resolved.route;
        let set = &route.endpoints;
        let exclude: &[usize] = match ctx.tried.last() {
            _ if ctx.tried.len() < set.len() => &ctx.tried,
            Some(last) if set.len() > 1 => std::slice::from_ref(last),
            _ => &[],
        };
        // A Responses API follow-up goes where its response was created,
        // while that endpoint is still in the set.
        if let Some(addr) = picked.filter(|addr| set.index_of(addr).is_none()) {
            // Not (yet) among the pool's ready endpoints here: the picker
            // knows better, and gets its endpoint.
            ctx.lease = None;
            ctx.upstream_answered = false;
            let h2c = ctx.plan.as_ref().is_some_and(|p| p.h2c);
            return Ok((self.peer_to(addr, h2c), false));
        }
        let pinned = picked.or(ctx.pinned).and_then(|addr| set.index_of(&addr));
        let picked = match (pinned, plan.prompt.as_deref()) {
            (Some(idx), _) => Some((idx, set.track(idx), None)),
            (None, Some(prompt)) => match &self.peers {
                None => set.pick_cache_aware(&prompt.request(), &route.options, exclude),
                Some(peers) => {
                    let mut touched = Vec::new();
                    let picked = set.pick_cache_aware_touched(
                        &prompt.request(),
                        &route.options,
                        exclude,
                        Some(&mut touched),
                    );
                    if let Some((idx, _, _)) = &picked {
                        peers.publish(&route.name, set.upstream(*idx).addr, touched);
                    }
                    picked
                }
            }
            .map(|(idx, in_flight, decision)| (idx, in_flight, Some(decision))),
            (None, None) => set
                .pick(
                    plan.strategy,
                    plan.routing_key.as_deref(),
                    &route.options,
                    exclude,
                )
                .map(|(idx, in_flight)| (idx, in_flight, None)),
        };
        let Some((idx, in_flight, decision)) = picked else {
            ctx.error = Some(self.no_endpoint(&route.name));
            return Err(Error::new(ErrorType::HTTPStatus(503)));
        };
        let upstream = set.upstream(idx);
        if let Some(decision) = decision {
            self.metrics
                .cache_aware_picks
                .with_label_values(&[&route.name, decision.as_str()])
                .inc();
            ctx.decision = Some(decision);
        }
        let gauge = self.metrics.route(route).endpoint_active(
            &self.metrics,
            &route.name,
            idx,
            &upstream.name,
        );
        gauge.inc();
        let again = ctx.tried.contains(&idx);
        // Replacing the lease of a failed attempt releases its slot.
        ctx.lease = Some(EndpointLease { in_flight, gauge });
        ctx.tried.push(idx);
        ctx.upstream_answered = false;
        if let Some(mask) = plan.tried_mask.as_ref().filter(|_| idx < 64) {
            mask.fetch_or(1u64 << idx, Ordering::Relaxed);
        }
        Ok((self.peer_to(upstream.addr, plan.h2c), again))
    }

    /// A cleartext peer at `addr` with the upstream timeouts: HTTP/1.1, or
    /// HTTP/2 with prior knowledge (`h2c`).
    fn peer_to(&self, addr: SocketAddr, h2c: bool) -> Box<HttpPeer> {
        let mut peer = HttpPeer::new(addr, false, String::new());
        if h2c {
            peer.options.alpn = pingora_core::protocols::ALPN::H2;
        }
        peer.options.connection_timeout = Some(self.settings.connect_timeout);
        peer.options.read_timeout = Some(self.settings.read_timeout);
        peer.options.write_timeout = Some(self.settings.read_timeout);
        peer.options.idle_timeout = Some(self.settings.upstream_keepalive);
        Box::new(peer)
    }

    /// The current attempt's endpoint failed or answered: its health
    /// hears of it, and a change (ejection, re-admission) is logged once
    /// and counted.
    pub(super) fn record_outcome(&self, ctx: &mut RequestCtx, failed: bool) {
        let Some(lease) = ctx.lease.as_mut() else {
            return;
        };
        let change = if failed {
            lease.in_flight.failed(&self.settings.outlier)
        } else {
            lease.in_flight.succeeded()
        };
        if change == Change::None {
            return;
        }
        let (Some(plan), Some(&idx)) = (ctx.plan.as_ref(), ctx.tried.last()) else {
            return;
        };
        let route = &plan.resolved.route;
        if idx >= route.endpoints.len() {
            return;
        }
        let endpoint = route.endpoints.upstream(idx).name.as_str();
        let labels = [&*route.name, endpoint];
        match change {
            Change::Ejected {
                interval,
                ejections,
            } => {
                self.metrics.ejections.with_label_values(&labels).inc();
                self.metrics
                    .endpoint_ejected
                    .with_label_values(&labels)
                    .set(1);
                tracing::warn!(
                    model = %route.name,
                    endpoint,
                    ejected_for = ?interval,
                    ejections_in_a_row = ejections,
                    "endpoint taken out of rotation after connection failures"
                );
            }
            Change::Readmitted => {
                self.metrics
                    .endpoint_ejected
                    .with_label_values(&labels)
                    .set(0);
                tracing::info!(
                    model = %route.name,
                    endpoint,
                    "endpoint back in rotation: its trial request was answered"
                );
            }
            Change::None => {}
        }
    }

    /// Global mode: the member cluster whose gateway answers this request.
    pub(super) fn answering_cluster<'a>(&self, ctx: &'a RequestCtx) -> Option<&'a str> {
        if !self.settings.cluster_failover {
            return None;
        }
        let (plan, &idx) = (ctx.plan.as_ref()?, ctx.tried.last()?);
        let endpoints = &plan.resolved.route.endpoints;
        (idx < endpoints.len()).then(|| endpoints.upstream(idx).name.as_str())
    }

    /// The `X-Flexinfer-Route` value: the current attempt's endpoint, the
    /// strategy, and for cache-aware routing the reason.
    pub(super) fn route_debug(&self, ctx: &RequestCtx) -> Option<String> {
        let (plan, &idx) = (ctx.plan.as_ref()?, ctx.tried.last()?);
        let endpoints = &plan.resolved.route.endpoints;
        if idx >= endpoints.len() {
            return None;
        }
        let mut value = format!(
            "endpoint={}; strategy={}",
            endpoints.upstream(idx).name,
            plan.strategy
        );
        if let Some(decision) = ctx.decision {
            value.push_str("; reason=");
            value.push_str(decision.as_str());
        }
        Some(value)
    }

    /// The answer for a model none of whose endpoints can be tried.
    pub(super) fn no_endpoint(&self, model: &str) -> ApiError {
        ApiError::unavailable(if self.settings.cluster_failover {
            format!("no cluster available for model '{model}'")
        } else {
            format!("model '{model}' has no ready endpoint")
        })
    }

    /// Reports the endpoint of the current attempt as failed, if anyone listens.
    pub(super) fn report_failure(&self, ctx: &RequestCtx) {
        if let (Some(failures), Some(plan), Some(&idx)) =
            (&self.failures, &ctx.plan, ctx.tried.last())
        {
            let endpoints = &plan.resolved.route.endpoints;
            if idx < endpoints.len() {
                failures.connection_failed(endpoints.upstream(idx));
            }
        }
    }

    /// Whether another attempt may still be made for this request: up to
    /// the attempt limit (global mode: each cluster once).
    pub(super) fn attempts_left(&self, ctx: &RequestCtx) -> bool {
        ctx.plan.as_ref().is_some_and(|plan| {
            let limit = if self.settings.cluster_failover {
                self.settings
                    .max_attempts
                    .min(plan.resolved.route.endpoints.len())
            } else {
                self.settings.max_attempts
            };
            ctx.tried.len() < limit
        })
    }

    pub(super) fn count_retry(&self, ctx: &RequestCtx, reason: &str) {
        if let Some(plan) = &ctx.plan {
            self.metrics
                .retries
                .with_label_values(&[&plan.resolved.route.name, reason])
                .inc();
        }
    }

    /// A connection attempt failed: try the next endpoint while attempts are left.
    pub(super) fn connect_failed(&self, ctx: &mut RequestCtx, mut e: Box<Error>) -> Box<Error> {
        self.record_outcome(ctx, true);
        ctx.lease = None;
        self.report_failure(ctx);
        if self.attempts_left(ctx) {
            self.count_retry(ctx, retry_reason(&e));
            e.set_retry(true);
        }
        e
    }

    /// Whether a request that failed after connecting is tried again.
    pub(super) fn proxy_failed(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
        upstream_reused: bool,
    ) -> Box<Error> {
        if self.resume_failed_stream(session, ctx, &mut e) {
            return e;
        }
        let replayable = !session.as_ref().retry_buffer_truncated();
        let from_upstream = e.esource() == &ErrorSource::Upstream;
        if from_upstream && !ctx.upstream_answered && !upstream_reused {
            // A fresh connection that broke or went silent before any
            // answer: the endpoint's fault, not a stale pooled connection's.
            self.record_outcome(ctx, true);
        }
        if self.settings.cluster_failover {
            return self.fail_over(session, ctx, e, replayable);
        }
        // Nothing of an answer came: the pod restarted or closed a
        // keep-alive connection as the request went out. Inference
        // requests are safe to send again then, whatever their method. A
        // timeout is not retried: it would double the client's wait.
        let unanswered = from_upstream
            && !ctx.upstream_answered
            && session.as_downstream().response_written().is_none()
            && matches!(
                e.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            );
        if unanswered && replayable && self.attempts_left(ctx) {
            ctx.lease = None;
            self.count_retry(ctx, retry_reason(&e));
            e.set_retry(true);
        } else if !session.req_header().method.is_idempotent() || !replayable {
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(upstream_reused);
        }
        e
    }

    /// Global mode: another cluster may answer as long as the client has
    /// seen nothing and the body can be sent again. A timeout is the member
    /// being slow, not gone: waiting as long again elsewhere would double
    /// the client's wait.
    fn fail_over(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
        replayable: bool,
    ) -> Box<Error> {
        let untouched = session.as_downstream().response_written().is_none();
        let retry = replayable
            && untouched
            && e.esource() != &ErrorSource::Downstream
            && !matches!(
                e.etype(),
                ErrorType::ReadTimedout | ErrorType::WriteTimedout
            )
            && self.attempts_left(ctx);
        if e.esource() != &ErrorSource::Downstream && !matches!(e.etype(), ErrorType::HTTPStatus(_))
        {
            // The member answered nothing usable: check it again now.
            self.report_failure(ctx);
        }
        if retry {
            ctx.lease = None;
            self.count_retry(ctx, retry_reason(&e));
        }
        e.set_retry(retry);
        e
    }

    /// The request head as the upstream gets it: internal headers and the
    /// gateway's API key removed, the path without its `/model/<name>/`
    /// prefix, the framing of a rewritten body, the request id.
    pub(super) fn upstream_head(
        &self,
        upstream: &mut RequestHeader,
        ctx: &RequestCtx,
    ) -> Result<()> {
        upstream.remove_header(&parsed::WORKLOAD_CLASS);
        if self.tenants.is_some() || self.admin_keys.is_some() {
            // The gateway's API keys are not the backend's business.
            upstream.remove_header(&header::AUTHORIZATION);
            upstream.remove_header(&parsed::API_KEY);
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
            upstream.insert_header(header::CONTENT_LENGTH, HeaderValue::from(body.len()))?;
            if plan.retyped_json {
                upstream.insert_header(header::CONTENT_TYPE, "application/json")?;
            }
        }
        upstream.insert_header(REQUEST_ID, plan.request_id.as_ref())?;
        if let Some(picked) = &plan.picked {
            picked.headers.apply(upstream);
        }
        Ok(())
    }

    /// Gateway API: the response head goes to the endpoint picker that
    /// chose the endpoint, with the endpoint that served, and the picker's
    /// changes are applied to it. A picker that fails now changes nothing:
    /// the answer is already coming.
    pub(super) async fn picker_response_head(
        &self,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) {
        let Some(picked) = ctx.plan.as_mut().and_then(|p| p.picked.as_mut()) else {
            return;
        };
        let (Some(phase), Some(served)) = (picked.response.take(), picked.served) else {
            return;
        };
        match phase
            .head(resp.status.as_u16(), &resp.headers, served)
            .await
        {
            Ok(mutation) => mutation.apply(resp),
            Err(why) => {
                tracing::warn!(error = %why, "the endpoint picker did not take the response head")
            }
        }
    }

    /// Global mode: a member cluster that answers 5xx is failed over like
    /// one that refuses the connection: nothing of this answer reaches the
    /// client while another cluster is left to ask.
    pub(super) fn fail_over_server_error(
        &self,
        session: &Session,
        resp: &ResponseHeader,
        ctx: &RequestCtx,
    ) -> Result<()> {
        if self.settings.cluster_failover
            && resp.status.is_server_error()
            && self.attempts_left(ctx)
            && !session.as_ref().retry_buffer_truncated()
        {
            let mut e = Error::explain(
                ErrorType::HTTPStatus(resp.status.as_u16()),
                "member cluster answered with a server error",
            );
            e.set_retry(true);
            return Err(e);
        }
        Ok(())
    }
}

/// Maps a proxy error to the answer the client gets.
pub(super) fn classify_upstream_error(e: &Error) -> ApiError {
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

/// The `reason` label of a retry.
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
