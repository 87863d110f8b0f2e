//! Header names the gateway reads, writes or strips.

/// Request id header, echoed to the client and passed upstream.
pub const REQUEST_ID: &str = "x-request-id";
/// Global mode: the member cluster that answered, on every proxied response.
pub const CLUSTER_HEADER: &str = "x-flexinfer-cluster";
/// Response header naming the endpoint a request went to and why, when
/// `--route-debug-header` is on.
pub const ROUTE_HEADER: &str = "x-flexinfer-route";
/// Response header saying that the output limit was clamped to the
/// model's context window (`8192->7680`).
pub const MAX_TOKENS_CLAMPED: &str = "x-flexinfer-maxtokens-clamped";
/// Request header asking for [`PREFIX_HIT_RATE`] (`1`, `true`, `yes`, `on`).
pub const WANT_PREFIX_HIT: &str = "x-flexinfer-want-prefix-hit";
/// Response header with the answering engine's prefix-cache hit rate
/// (`0.9300`), from its scraped metrics.
pub const PREFIX_HIT_RATE: &str = "x-flexinfer-prefix-cache-hit-rate";
/// API key header of Anthropic clients, accepted like `Authorization: Bearer`.
pub const API_KEY: &str = "x-api-key";
/// Internal workload-class header (`background` requests never start a
/// model), never forwarded upstream.
pub const WORKLOAD_CLASS: &str = "x-flexinfer-internal-workload-class";

/// The names the request path looks up or strips on every request, parsed
/// once: a name given as a string is parsed again on each lookup.
pub(super) mod parsed {
    use http::HeaderName;

    pub const REQUEST_ID: HeaderName = HeaderName::from_static(super::REQUEST_ID);
    pub const API_KEY: HeaderName = HeaderName::from_static(super::API_KEY);
    pub const WORKLOAD_CLASS: HeaderName = HeaderName::from_static(super::WORKLOAD_CLASS);
    pub const WANT_PREFIX_HIT: HeaderName = HeaderName::from_static(super::WANT_PREFIX_HIT);
}

use http::HeaderValue;
use pingora_error::Result;
use pingora_http::{RequestHeader, ResponseHeader};

use super::context::RequestCtx;
use super::usage_headers;
use super::Gateway;

impl Gateway {
    /// The gateway's headers on a proxied answer: the request id, the
    /// answering cluster (global mode), the routing decision (debug), the
    /// time to the engine's head (completions), a clamped output limit and
    /// a tenant's rate-limit state.
    pub(super) fn add_response_headers(
        &self,
        req: &RequestHeader,
        resp: &mut ResponseHeader,
        ctx: &RequestCtx,
    ) -> Result<()> {
        if let Some(id) = &ctx.request_id {
            resp.insert_header(REQUEST_ID, id.as_ref())?;
        }
        if let Some(cluster) = self.answering_cluster(ctx) {
            resp.insert_header(CLUSTER_HEADER, cluster)?;
        }
        // Only for admin keys (or a gateway without keys): a prefix-hit
        // reason would tell one tenant what another sent. The plan carries
        // the caller's standing into subrequests.
        let debug_allowed = ctx
            .plan
            .as_ref()
            .map_or(ctx.tenant.is_none(), |p| p.route_debug);
        if self.settings.route_debug_header && debug_allowed {
            if let Some(route) = self.route_debug(ctx) {
                resp.insert_header(ROUTE_HEADER, route)?;
            }
        }
        let Some(plan) = ctx.plan.as_ref() else {
            return Ok(());
        };
        if let Some(since) = plan.completion_since {
            let ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
            resp.insert_header(usage_headers::UPSTREAM_MS, HeaderValue::from(ms))?;
            if wants_prefix_hit(req) {
                if let Some(rate) = self.prefix_hit_rate(ctx) {
                    resp.insert_header(PREFIX_HIT_RATE, format!("{rate:.4}"))?;
                }
            }
        }
        if let Some(clamped) = plan.clamped.as_deref() {
            resp.insert_header(MAX_TOKENS_CLAMPED, clamped)?;
        }
        if let Some(charge) = plan.metering.as_ref().and_then(|m| m.charge.as_ref()) {
            for (name, value) in &charge.headers {
                resp.insert_header(*name, value.clone())?;
            }
        }
        Ok(())
    }
}

/// Whether the client asks for the prefix-cache hit rate
/// (`X-Flexinfer-Want-Prefix-Hit`: `1`, `true`, `yes` or `on`, in any case).
fn wants_prefix_hit(req: &RequestHeader) -> bool {
    req.headers
        .get(parsed::WANT_PREFIX_HIT)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .is_some_and(|v| {
            ["1", "true", "yes", "on"]
                .iter()
                .any(|yes| v.eq_ignore_ascii_case(yes))
        })
}

impl Gateway {
    /// The answering endpoint's prefix-cache hit rate, from the engine
    /// metrics the load scraper reads; the endpoint is scraped from now on
    /// if it was not.
    fn prefix_hit_rate(&self, ctx: &RequestCtx) -> Option<f64> {
        let (plan, &idx) = (ctx.plan.as_ref()?, ctx.tried.last()?);
        let endpoints = &plan.resolved.route.endpoints;
        if idx >= endpoints.len() {
            return None;
        }
        let load = endpoints.backend_load(idx);
        load.want_hit_rate();
        load.prefix_hit_rate(crate::routing::backend_load::now_ms())
    }
}
