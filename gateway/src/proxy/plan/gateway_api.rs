//! Requests that arrive on a Gateway's data-plane port
//! ([`crate::gatewayapi`]): matched against that Gateway's routes (404
//! when none matches), then sent to the backend a weighted pick of the
//! rule's backends names. An InferencePool's or Service's endpoints are
//! picked by the backend's strategy (cache-aware by default) with the body
//! forwarded untouched; a `Model` backend takes the usual path, as if the
//! client had named it.

use super::*;
use crate::epp::{Mutation, Pick, PickError, PickRequest, ResponsePhase};
use crate::gatewayapi::table::PickerRoute;
use crate::gatewayapi::table::{self, GatewayRoutes, Weighted};
use crate::gatewayapi::Target;
use crate::registry::ModelRegistry;
use std::net::SocketAddr;

/// Where a request was going, for messages.
struct Destination<'a> {
    host: &'a str,
    path: &'a str,
    gateway: &'a str,
}

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
        let host = host_without_port(host).to_string();
        let path = req.uri.path().to_string();
        // Matched as sent, forwarded as sent: a path a backend would resolve
        // into another one (`/v1/%2e%2e/admin`) would pass a prefix it then
        // escapes.
        crate::paths::check_segments(&path)?;
        let Some(matched) = routes.find(&host, &req.method, &path, &req.headers) else {
            return Err(ApiError::route_not_found(&host, &path, &routes.gateway));
        };
        let mut remaining: Vec<Weighted> = matched.backends.to_vec();
        let mut key = match table::pick(&remaining, rand::random::<u64>()).cloned() {
            Some(Target::Backend(key)) => key,
            Some(Target::Model(name)) => return Ok(GatewayPlan::Model(name)),
            Some(Target::Unresolved) | None => {
                return Err(ApiError::internal(format!(
                "route {} has no usable backend for this request (see its ResolvedRefs condition)",
                matched.route
            )))
            }
        };
        let req = session.req_header();
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
        let to = Destination {
            host: &host,
            path: &path,
            gateway: &routes.gateway,
        };
        loop {
            match self
                .plan_backend(plane, &key, session, ctx, &to, body.clone())
                .await
            {
                // A backend that cannot take the request (its picker failed
                // closed or has no endpoint for it, no ready endpoint): the
                // rule's other backends are tried, by weight, before the
                // client hears of it.
                Err(e) if e.status == 503 => {
                    remaining.retain(|w| matches!(&w.target, Target::Backend(k) if *k != key));
                    match table::pick(&remaining, rand::random::<u64>()) {
                        Some(Target::Backend(next)) => {
                            tracing::debug!(from = %key, to = %next, error = %e.message, "backend unavailable: the rule's next backend");
                            key = next.clone();
                        }
                        _ => return Err(e),
                    }
                }
                other => return other.map(GatewayPlan::Forward),
            }
        }
    }

    /// Plans the request for backend `key` (an InferencePool or a Service).
    async fn plan_backend(
        &self,
        plane: &crate::gatewayapi::DataPlane,
        key: &Arc<str>,
        session: &Session,
        ctx: &mut RequestCtx,
        to: &Destination<'_>,
        body: Option<Bytes>,
    ) -> Result<Box<ForwardPlan>, ApiError> {
        if let Some(why) = plane.table.load().unserved.get(key) {
            return Err(ApiError::unavailable(why.clone()));
        }
        let resolved = plane
            .backends
            .resolve(key)
            .ok_or_else(|| ApiError::unavailable(format!("backend {key} is not ready yet")))?;
        if ctx
            .tenant
            .as_ref()
            .is_some_and(|t| !t.allows(&resolved.route.name))
        {
            return Err(ApiError::route_not_found(to.host, to.path, to.gateway));
        }
        ctx.model = Some(resolved.route.name.clone());
        let (picker, h2c) = {
            let table = plane.table.load();
            (table.pickers.get(key).cloned(), table.h2c.contains(key))
        };
        let picked = match picker {
            Some(picker) => {
                self.ask_picker(plane, &picker, session, to.host, body.as_ref())
                    .await?
            }
            None => None,
        };
        if let Some(picked) = picked {
            let body = picked.body.clone().or(body);
            return Ok(Box::new(ForwardPlan {
                body: body.map(PlannedBody::from),
                picked: Some(Box::new(picked)),
                ..self.pool_plan(resolved, ctx, h2c)
            }));
        }
        if resolved.route.endpoints.is_empty() {
            return Err(self.no_endpoint(&resolved.route.name));
        }
        // Read for routing only: the backend judges the body, not the gateway.
        let json = body.as_ref().and_then(|b| extract::parse_json(b).ok());
        let strategy = self.strategy(&resolved);
        let headers = &session.req_header().headers;
        let (routing_key, key_source) = self.routing_key(strategy, headers, json.as_ref());
        let prompt = strategy
            .uses_prompt()
            .then(|| Arc::new(PromptRouting::of(headers, json.as_ref(), &resolved, None)));
        drop(json);
        Ok(Box::new(ForwardPlan {
            strategy,
            routing_key,
            key_source,
            prompt,
            body: body.map(PlannedBody::from),
            ..self.pool_plan(resolved, ctx, h2c)
        }))
    }

    /// The plan of a request to a Gateway API backend, before its routing
    /// inputs and body are filled in.
    fn pool_plan(&self, resolved: Resolved, ctx: &RequestCtx, h2c: bool) -> ForwardPlan {
        let strategy = self.strategy(&resolved);
        ForwardPlan {
            resolved,
            strategy,
            routing_key: None,
            key_source: KeySource::None,
            prompt: None,
            forward_path: None,
            body: None,
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
            picked: None,
            h2c,
            resume: None,
        }
    }

    /// Puts the request to the pool's endpoint picker. `Ok(None)`: it could
    /// not pick and the pool fails open (FlexInfer's picker serves);
    /// `Err`: it answered the client itself, or the pool fails closed.
    async fn ask_picker(
        &self,
        plane: &crate::gatewayapi::DataPlane,
        picker: &PickerRoute,
        session: &Session,
        host: &str,
        body: Option<&Bytes>,
    ) -> Result<Option<Picked>, ApiError> {
        let started = Instant::now();
        let result = match picker.addrs.len() {
            0 => Err(PickError::Unavailable(
                "its Service has no ready endpoint".to_string(),
            )),
            n => {
                let client = plane.pickers.client(picker.addrs[rand::random_range(0..n)]);
                let req = session.req_header();
                let request = PickRequest {
                    method: req.method.as_str(),
                    path_and_query: req.uri.path_and_query().map_or("/", |p| p.as_str()),
                    authority: host,
                    headers: &req.headers,
                    body: body.map(|b| &b[..]),
                };
                client.pick(request).await
            }
        };
        let (outcome, answer) = match result {
            Ok(pick) => ("picked", Ok(Some(Picked::from(pick)))),
            Err(PickError::Refused { status, body }) => (
                "refused",
                Err(ApiError::picker_refused(
                    status,
                    String::from_utf8_lossy(&body).into_owned(),
                )),
            ),
            Err(PickError::Unavailable(why)) if picker.fail_open => {
                tracing::warn!(pool = %picker.pool, error = %why, "endpoint picker unavailable: FlexInfer's picker serves (FailOpen)");
                ("failed_open", Ok(None))
            }
            Err(PickError::Unavailable(why)) => (
                "failed_closed",
                Err(ApiError::unavailable(format!(
                    "the endpoint picker of InferencePool {} is unavailable: {why}",
                    picker.pool
                ))),
            ),
        };
        self.metrics
            .picker_seconds
            .with_label_values(&[&picker.pool, outcome])
            .observe(started.elapsed().as_secs_f64());
        answer
    }
}

/// An endpoint picker's decision, carried to the upstream phases.
pub(in crate::proxy) struct Picked {
    /// Endpoints to try, in order.
    endpoints: Vec<SocketAddr>,
    /// Attempts made so far.
    attempts: usize,
    /// The endpoint of the latest attempt.
    pub(in crate::proxy) served: Option<SocketAddr>,
    /// Changes to the request's headers.
    pub(in crate::proxy) headers: Mutation,
    /// The body the picker sent back, when it did.
    body: Option<Bytes>,
    /// The stream, for the response's head.
    pub(in crate::proxy) response: Option<ResponsePhase>,
}

impl From<Pick> for Picked {
    fn from(pick: Pick) -> Self {
        Picked {
            endpoints: pick.endpoints,
            attempts: 0,
            served: None,
            headers: pick.headers,
            body: pick.body,
            response: Some(pick.response),
        }
    }
}

impl Picked {
    /// The endpoint of the next attempt: down the picker's list, staying
    /// on its last.
    pub(in crate::proxy) fn next_endpoint(&mut self) -> SocketAddr {
        let addr = self.endpoints[self.attempts.min(self.endpoints.len() - 1)];
        self.attempts += 1;
        self.served = Some(addr);
        addr
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
