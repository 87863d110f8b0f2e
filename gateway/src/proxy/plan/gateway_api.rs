//! Requests that arrive on a Gateway's data-plane port
//! ([`crate::gatewayapi`]): matched against that Gateway's routes (404
//! when none matches), then sent to the backend a weighted pick of the
//! rule's backends names. An InferencePool's or Service's endpoints are
//! picked by the backend's strategy (cache-aware by default) with the body
//! forwarded untouched; a `Model` backend takes the usual path, as if the
//! client had named it.

use super::*;
use crate::gatewayapi::table::{self, GatewayRoutes};
use crate::gatewayapi::Target;
use crate::registry::ModelRegistry;

/// What a Gateway API request turns into.
pub(in crate::proxy) enum GatewayPlan {
    /// Forward as planned.
    Forward(Box<ForwardPlan>),
    /// Serve as this Model, through the model path.
    Model(Arc<str>),
}

impl Gateway {
    /// The routes of the Gateway whose data-plane port the request came
    /// in on, when it came in on one.
    pub(in crate::proxy) fn gateway_of(&self, session: &Session) -> Option<Arc<GatewayRoutes>> {
        let plane = self.gateway_api.as_ref()?;
        let port = session.as_downstream().server_addr()?.as_inet()?.port();
        plane.table.load().gateway(port).cloned()
    }

    /// Matches the request against `routes` and plans it.
    pub(in crate::proxy) async fn plan_gateway_route(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        routes: &GatewayRoutes,
    ) -> Result<GatewayPlan, ApiError> {
        let Some(plane) = self.gateway_api.as_ref() else {
            return Err(ApiError::internal("the Gateway API is not served"));
        };
        let req = session.req_header();
        let host = req
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri.host())
            .unwrap_or_default();
        let host = host_without_port(host);
        let path = req.uri.path();
        let Some(matched) = routes.find(host, &req.method, path, &req.headers) else {
            return Err(ApiError::route_not_found(host, path, &routes.gateway));
        };
        let target = table::pick(&matched.backends, rand::random::<u64>()).cloned();
        let key = match target {
            Some(Target::Backend(key)) => key,
            Some(Target::Model(name)) => return Ok(GatewayPlan::Model(name)),
            Some(Target::Unresolved) | None => {
                return Err(ApiError::internal(format!(
                "route {} has no usable backend for this request (see its ResolvedRefs condition)",
                matched.route
            )))
            }
        };
        if let Some(why) = plane.table.load().unserved.get(&key) {
            return Err(ApiError::unavailable(why.clone()));
        }
        let resolved = plane
            .backends
            .resolve(&key)
            .ok_or_else(|| ApiError::unavailable(format!("backend {key} is not ready yet")))?;
        if ctx
            .tenant
            .as_ref()
            .is_some_and(|t| !t.allows(&resolved.route.name))
        {
            return Err(ApiError::route_not_found(host, path, &routes.gateway));
        }
        ctx.model = Some(resolved.route.name.clone());
        let kind = extract::body_kind(&req.method, &req.headers);
        let limit = self.settings.max_body_bytes;
        let declared = declared_length(session.req_header());
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::body_too_large(limit));
        }
        let body = if kind != BodyKind::Other {
            let body = read_body(session, limit, declared).await?;
            ctx.request_bytes = body.len() as u64;
            Some(body)
        } else {
            None
        };
        // Read for routing only: the backend judges the body, not the gateway.
        let json = body.as_ref().and_then(|b| extract::parse_json(b).ok());
        let strategy = self.strategy(&resolved);
        let headers = &session.req_header().headers;
        let (routing_key, key_source) = self.routing_key(strategy, headers, json.as_ref());
        let prompt = strategy
            .uses_prompt()
            .then(|| Arc::new(PromptRouting::of(headers, json.as_ref(), &resolved, None)));
        drop(json);
        Ok(GatewayPlan::Forward(Box::new(ForwardPlan {
            resolved,
            strategy,
            routing_key,
            key_source,
            prompt,
            forward_path: None,
            body: body.map(PlannedBody::from),
            request_id: ctx.request_id.clone().unwrap_or_else(|| Arc::from("")),
            tried_mask: None,
            metering: None,
            clamped: None,
            completion_since: None,
            hold_for_usage: false,
            _active: None,
            _permit: None,
            _group: None,
            retyped_json: false,
            tenant: ctx.tenant.clone(),
            route_debug: ctx.tenant.is_none(),
        })))
    }
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `[::1]`.
fn host_without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..=h.len()]);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::host_without_port;

    #[test]
    fn ports_are_taken_off_hosts() {
        assert_eq!(host_without_port("a.example.com:8080"), "a.example.com");
        assert_eq!(host_without_port("a.example.com"), "a.example.com");
        assert_eq!(host_without_port("[::1]:80"), "[::1]");
        assert_eq!(host_without_port(""), "");
    }
}
