//! What a finished request leaves behind: its metrics and the access-log
//! line.

use pingora_error::{Error, ErrorSource};
use pingora_proxy::Session;

use super::context::RequestCtx;
use super::Gateway;
use crate::metrics::{route_label, RouteMeters};

impl Gateway {
    /// Records a request that ended (successfully or not).
    pub(super) fn record(&self, session: &Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        crate::allocator::tidy_this_thread();
        if let Some(g) = ctx.model_gauge.take() {
            g.dec();
        }
        let model = ctx.model_label();
        let path = session.req_header().uri.path();
        let status = match ctx.status {
            0 => session
                .as_downstream()
                .response_written()
                .map_or(0, |r| r.status.as_u16()),
            status => status,
        };
        let elapsed = ctx.start.map(|s| s.elapsed()).unwrap_or_default();
        if let Some(tenant) = &ctx.tenant {
            self.metrics
                .tenant_requests
                .with_label_values(&[model, &tenant.name, &crate::metrics::status_label(status)])
                .inc();
        }
        match self.route_meters(ctx) {
            Some(meters) => {
                meters.finished(&self.metrics, model, status, path, elapsed.as_secs_f64());
                meters.bytes_in.inc_by(ctx.request_bytes);
                meters.bytes_out.inc_by(ctx.response_bytes);
            }
            None => {
                let route = route_label(path);
                self.metrics.count_request(model, status, route);
                self.metrics
                    .duration
                    .with_label_values(&[model, route])
                    .observe(elapsed.as_secs_f64());
                if ctx.request_bytes > 0 {
                    self.metrics
                        .bytes_in
                        .with_label_values(&[model])
                        .inc_by(ctx.request_bytes);
                }
                if ctx.response_bytes > 0 {
                    self.metrics
                        .bytes_out
                        .with_label_values(&[model])
                        .inc_by(ctx.response_bytes);
                }
            }
        }
        tracing::info!(
            request_id = ctx.request_id.as_deref().unwrap_or(""),
            method = %session.req_header().method,
            path,
            model,
            tenant = ctx.tenant.as_ref().map(|t| &*t.name),
            status,
            elapsed_ms = crate::logging::millis(elapsed),
            error = e.map(|e| e.to_string()),
            "request"
        );
        if let Some(e) = e.filter(|e| ctx.proxied && e.esource() != &ErrorSource::Downstream) {
            self.log_forward_failure(session, e, ctx);
        }
    }

    /// The warning for a request the upstream failed: who sent it (address,
    /// `X-Forwarded-For`, user agent) next to its request id, so that a
    /// failure reported by a client can be found.
    fn log_forward_failure(&self, session: &Session, e: &Error, ctx: &RequestCtx) {
        let headers = &session.req_header().headers;
        let header = |name: http::header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
        };
        let remote_addr = session
            .as_downstream()
            .client_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        tracing::warn!(
            request_id = ctx.request_id.as_deref().unwrap_or(""),
            remote_addr,
            x_forwarded_for = header(http::header::HeaderName::from_static("x-forwarded-for")),
            user_agent = header(http::header::USER_AGENT),
            model = ctx.model_label(),
            error = %e,
            "forward to upstream failed"
        );
    }

    /// Records the time to the response header, once per request.
    pub(super) fn record_first_byte(&self, ctx: &mut RequestCtx) {
        if ctx.is_subrequest || ctx.ttfb_seen {
            return;
        }
        ctx.ttfb_seen = true;
        if let Some(start) = ctx.start {
            let seconds = start.elapsed().as_secs_f64();
            match self.route_meters(ctx) {
                Some(meters) => meters.ttfb.observe(seconds),
                None => self
                    .metrics
                    .ttfb
                    .with_label_values(&[ctx.model_label()])
                    .observe(seconds),
            }
        }
    }

    /// The series of the request's model, when it was planned here.
    fn route_meters<'a>(&self, ctx: &'a RequestCtx) -> Option<&'a RouteMeters> {
        let route = &ctx.plan.as_ref()?.resolved.route;
        Some(self.metrics.route(route))
    }
}
