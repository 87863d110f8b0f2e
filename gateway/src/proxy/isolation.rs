//! Tenant isolation of the objects engines store (`docs/tenants.md`).
//!
//! Engines keep state that later requests address by id (Responses API
//! responses; on some engines stored chat completions, batches, files,
//! conversations) and know nothing of tenants. With an API-key file in
//! force, the gateway is the only one that can tell tenants apart:
//!
//! - a Responses API id is followed up only by the tenant that created it
//!   ([`super::responses`] remembers the owner with the id);
//! - every other route that addresses stored objects is refused to tenants,
//!   since the gateway cannot tell who owns what is behind it.
//!
//! A tenant is told exactly what an unknown id or route gets, so ids do not
//! leak existence. Admin keys, and gateways without a key file (one
//! anonymous tenant, or no auth), are not scoped.

use std::borrow::Cow;

use http::Method;
use pingora_http::RequestHeader;

use super::context::RequestCtx;
use super::Gateway;
use crate::errors::ApiError;
use crate::extract::{percent_decode, JsonView};
use crate::tenants::Tenant;

/// Collections of stored objects that OpenAI's API (and engines imitating
/// it) address by id, and which the gateway cannot scope to a tenant.
const UNSCOPED_COLLECTIONS: &[&str] = &[
    "/v1/files",
    "/v1/batches",
    "/v1/uploads",
    "/v1/conversations",
    "/v1/vector_stores",
    "/v1/fine_tuning",
    "/v1/assistants",
    "/v1/threads",
    "/v1/containers",
    "/v1/evals",
];

const FOLLOW_UP_PREFIX: &str = "/v1/responses/";

/// What a request does with stored objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StoreRoute<'a> {
    /// Touches no stored object (chat, completions, embeddings, ...).
    Stateless,
    /// `POST /v1/responses`: creates a response, may continue another.
    CreateResponse,
    /// A follow-up on the response with this id: `GET`/`DELETE
    /// /v1/responses/{id}`, `GET .../input_items`, `POST .../cancel`.
    ResponseFollowUp(Cow<'a, str>),
    /// Any other route of stored objects: stored chat completions and
    /// their listing, Anthropic message batches, files, batches, ...
    Unscoped,
}

/// The path as an engine's router matches it: percent escapes decoded,
/// repeated slashes collapsed, no trailing slash. Borrowed when the path is
/// already so (almost every request).
pub(super) fn engine_path(path: &str) -> Cow<'_, str> {
    let decoded = percent_decode(path).unwrap_or(Cow::Borrowed(path));
    let tidy = !decoded.contains("//") && (decoded.len() <= 1 || !decoded.ends_with('/'));
    if tidy {
        return decoded;
    }
    let mut out = String::with_capacity(decoded.len());
    for segment in decoded.split('/').filter(|s| !s.is_empty()) {
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() {
        out.push('/');
    }
    Cow::Owned(out)
}

/// Whether `path` is `prefix` or below it.
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Classifies a request by its method and path (no query string).
pub(super) fn store_route<'a>(method: &Method, path: &'a str) -> StoreRoute<'a> {
    // The hot path: inference routes, checked before any allocation.
    if path == "/v1/chat/completions" && method == Method::POST {
        return StoreRoute::Stateless;
    }
    let path = engine_path(path);
    let p = path.as_ref();
    if p == "/v1/responses" {
        return if method == Method::POST {
            StoreRoute::CreateResponse
        } else {
            StoreRoute::Unscoped
        };
    }
    if let Some(rest) = p.strip_prefix(FOLLOW_UP_PREFIX) {
        let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
        let follow_up = match tail {
            "" => method == Method::GET || method == Method::DELETE,
            "input_items" => method == Method::GET,
            "cancel" => method == Method::POST,
            _ => false,
        };
        if !follow_up {
            return StoreRoute::Unscoped;
        }
        let id = FOLLOW_UP_PREFIX.len()..FOLLOW_UP_PREFIX.len() + id.len();
        return StoreRoute::ResponseFollowUp(match path {
            Cow::Borrowed(b) => Cow::Borrowed(&b[id]),
            Cow::Owned(s) => Cow::Owned(s[id].to_owned()),
        });
    }
    let stored_chat = under(p, "/v1/chat/completions");
    let message_batches = under(p, "/v1/messages/batches");
    if stored_chat || message_batches || UNSCOPED_COLLECTIONS.iter().any(|c| under(p, c)) {
        return StoreRoute::Unscoped;
    }
    StoreRoute::Stateless
}

/// Paths whose requests take vLLM's `cache_salt`.
const SALTED_PATHS: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
];

/// 404 for a route of stored objects the gateway cannot scope to a tenant.
pub fn unscoped_store(path: &str) -> ApiError {
    let shown: String = path.chars().take(256).collect();
    let mut e = ApiError::bad_request(format!(
        "Unknown request URL: {shown}. Stored objects other than Responses API \
         responses are not reachable by tenants through this gateway"
    ));
    e.status = 404;
    e.code = "not_found";
    e
}

/// 404 for a Responses API `conversation` a tenant names.
pub fn conversation_not_found() -> ApiError {
    let mut e = ApiError::bad_request(
        "Conversation not found: conversations are not reachable by tenants through this \
         gateway; continue a response with previous_response_id instead",
    );
    e.status = 404;
    e.code = "conversation_not_found";
    e.param = Some("conversation");
    e
}

impl Gateway {
    /// The tenant whose objects this request is confined to: the caller's,
    /// when an API-key file is in force and the key names a tenant. `None`
    /// for admin keys and for gateways without a key file.
    pub(super) fn scoped_tenant<'c>(&self, ctx: &'c RequestCtx) -> Option<&'c Tenant> {
        let key_file = self.tenants.as_ref().is_some_and(|t| t.path().is_some());
        if key_file {
            ctx.tenant.as_deref()
        } else {
            None
        }
    }

    /// The `cache_salt` a tenant's request is sent with, under
    /// `--tenant-cache-salt`: for chat, completion and Responses requests
    /// of a tenant (not an admin key) whose body is a non-empty object.
    pub(super) fn cache_salt(
        &self,
        path: &str,
        json: &JsonView<'_>,
        body: &[u8],
        ctx: &RequestCtx,
    ) -> Option<String> {
        if !self.settings.tenant_cache_salt || !SALTED_PATHS.contains(&&*engine_path(path)) {
            return None;
        }
        let tenant = ctx.tenant.as_deref()?;
        let empty = matches!(
            json.model_slot,
            Some(crate::rewrite::ModelSlot::Absent { empty: true, .. })
        );
        if empty {
            return None;
        }
        let client = json
            .cache_salt
            .clone()
            .and_then(|span| std::str::from_utf8(body.get(span)?).ok());
        Some(tenant.cache_salt(client))
    }

    /// `/metrics` on the proxy listener names every tenant and what it
    /// used: with an API-key file it needs an admin key there (the metrics
    /// listener, `--metrics-listen`, serves it without one).
    pub(super) fn check_metrics_access(&self, req: &RequestHeader) -> Result<(), ApiError> {
        if req.uri.path() != "/metrics" {
            return Ok(());
        }
        let key_file = self.tenants.as_ref().is_some_and(|t| t.path().is_some());
        if !key_file || self.is_admin(req) {
            return Ok(());
        }
        let mut e = ApiError::admin_key_required("/metrics");
        e.message.push_str(
            " when an API-key file is in force (it names every tenant); \
             scrape the metrics listener (--metrics-listen) instead",
        );
        Err(e)
    }

    /// Refuses a tenant a route of stored objects it cannot be confined to.
    pub(super) fn check_store_route(
        &self,
        route: &StoreRoute<'_>,
        path: &str,
        ctx: &RequestCtx,
    ) -> Result<(), ApiError> {
        if *route == StoreRoute::Unscoped && self.scoped_tenant(ctx).is_some() {
            return Err(unscoped_store(path));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(method: Method, path: &str) -> StoreRoute<'_> {
        store_route(&method, path)
    }

    #[test]
    fn inference_routes_are_stateless() {
        for path in [
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/embeddings",
            "/v1/messages",
            "/v1/messages/count_tokens",
            "/v1/models/m",
        ] {
            assert_eq!(route(Method::POST, path), StoreRoute::Stateless, "{path}");
        }
    }

    #[test]
    fn responses_routes() {
        let follow = |id: &str| StoreRoute::ResponseFollowUp(Cow::Owned(id.to_owned()));
        assert_eq!(
            route(Method::POST, "/v1/responses"),
            StoreRoute::CreateResponse
        );
        assert_eq!(route(Method::GET, "/v1/responses/r1"), follow("r1"));
        assert_eq!(route(Method::DELETE, "/v1/responses/r1"), follow("r1"));
        assert_eq!(
            route(Method::GET, "/v1/responses/r1/input_items"),
            follow("r1")
        );
        assert_eq!(route(Method::POST, "/v1/responses/r1/cancel"), follow("r1"));
        // What an engine's router reads the same way.
        assert_eq!(route(Method::GET, "/v1/responses/r%31"), follow("r1"));
        assert_eq!(route(Method::GET, "//v1/responses//r1/"), follow("r1"));
        assert_eq!(route(Method::GET, "/v1/%72esponses/r1"), follow("r1"));
        // Anything else under the collection cannot be scoped.
        for (m, p) in [
            (Method::GET, "/v1/responses"),
            (Method::POST, "/v1/responses/r1"),
            (Method::GET, "/v1/responses/r1/cancel"),
            (Method::GET, "/v1/responses/r1/other"),
        ] {
            assert_eq!(route(m, p), StoreRoute::Unscoped, "{p}");
        }
    }

    #[test]
    fn stored_objects_of_other_apis_are_unscoped() {
        for (m, p) in [
            (Method::GET, "/v1/chat/completions"),
            (Method::GET, "/v1/chat/completions/chatcmpl-1"),
            (Method::GET, "/v1/chat/completions/chatcmpl-1/messages"),
            (Method::DELETE, "/v1/chat/completions/chatcmpl-1"),
            (Method::POST, "/v1/chat/completions/"),
            (Method::GET, "/v1/messages/batches/b1/results"),
            (Method::GET, "/v1/files/f1/content"),
            (Method::POST, "/v1/conversations"),
            (Method::GET, "/v1/%62atches"),
        ] {
            assert_eq!(route(m, p), StoreRoute::Unscoped, "{p}");
        }
    }

    #[test]
    fn engine_paths_borrow_when_tidy() {
        assert!(matches!(engine_path("/v1/x"), Cow::Borrowed("/v1/x")));
        assert_eq!(engine_path("/v1//x/"), "/v1/x");
        assert_eq!(engine_path("//"), "/");
        assert_eq!(engine_path("/"), "/");
        // A malformed escape is matched as written.
        assert_eq!(engine_path("/v1/%zz"), "/v1/%zz");
    }

    #[test]
    fn refusals_are_openai_404s() {
        let e = unscoped_store("/v1/files");
        assert_eq!((e.status, e.code), (404, "not_found"));
        let e = conversation_not_found();
        assert_eq!((e.status, e.code), (404, "conversation_not_found"));
    }
}
