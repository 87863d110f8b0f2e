//! Follow-up routes of the Responses API: `GET`/`DELETE
//! /v1/responses/{id}`, `GET /v1/responses/{id}/input_items` and `POST
//! /v1/responses/{id}/cancel` name no model, and only the endpoint that
//! created the response knows it.
//!
//! The gateway remembers, for each response a `POST /v1/responses` created,
//! the model and endpoint that answered: the id is read from the start of
//! the answer (the JSON body's top-level `id`, or the `response.id` of a
//! stream's first event). Only that route's answers are watched. A
//! follow-up takes the model from there and goes to that endpoint; an id
//! the gateway does not know is a 404 `response_not_found`. A create
//! request that continues a response (`previous_response_id`) goes to the
//! endpoint that holds it too.
//!
//! With an API-key file, the tenant that created a response is remembered
//! with it, and only that tenant may follow it up or continue from it:
//! anyone else is answered as for an unknown id ([`super::isolation`]).
//!
//! Replicas that share routing state ([`crate::peers`]) ask each other
//! about ids they do not know ([`crate::peers::origins`]): a response is
//! reached, and continued, through any replica, with the same tenant check.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http::Method;
use pingora_http::{RequestHeader, ResponseHeader};
use serde::Deserialize;

use super::context::RequestCtx;
use super::isolation::StoreRoute;
use super::Gateway;
use crate::errors::ApiError;
use crate::extract::{JsonView, RawJson};
use crate::peers::origins::SharedOrigin;
use crate::tenants::Tenant;

/// Response ids remembered; the oldest is forgotten first. An entry costs
/// about 250 bytes with an id of OpenAI's length, so a full map about 25 MB.
pub const RESPONSE_IDS_CAPACITY: usize = 100_000;

/// Longest id remembered, in bytes (OpenAI's are about 50).
const MAX_ID_LEN: usize = 256;

/// Bytes of a create answer kept while looking for its id; beyond them the
/// answer is not remembered.
const WATCH_LIMIT: usize = 1024 * 1024;

const CREATE_PATH: &str = "/v1/responses";

/// Where a response was created, and by whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The route name (model) that served the create request.
    pub model: Arc<str>,
    /// The endpoint that answered it.
    pub addr: SocketAddr,
    /// The tenant whose key created it; `None` for an admin key or a
    /// gateway without keys.
    pub owner: Option<Arc<str>>,
}

impl Origin {
    /// Whether `tenant` may reach the response: it created it and may
    /// still use its model.
    fn open_to(&self, tenant: &Tenant) -> bool {
        self.owner.as_deref() == Some(&*tenant.name) && tenant.allows(&self.model)
    }
}

/// Response id → [`Origin`], bounded (first in, first out).
pub struct ResponseIds {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<Arc<str>, Origin>,
    order: VecDeque<Arc<str>>,
}

impl ResponseIds {
    /// An empty map holding at most `capacity` ids.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers where `id` was created (a known id keeps its first origin).
    pub fn remember(&self, id: &str, origin: Origin) {
        if id.is_empty() || id.len() > MAX_ID_LEN {
            return;
        }
        let mut inner = self.lock();
        if inner.by_id.contains_key(id) {
            return;
        }
        while inner.order.len() >= self.capacity {
            match inner.order.pop_front() {
                Some(old) => {
                    inner.by_id.remove(&old);
                }
                None => break,
            }
        }
        let key: Arc<str> = Arc::from(id);
        inner.order.push_back(Arc::clone(&key));
        inner.by_id.insert(key, origin);
    }

    /// Where `id` was created.
    pub fn origin(&self, id: &str) -> Option<Origin> {
        self.lock().by_id.get(id).cloned()
    }

    /// Forgets `id` (a deleted response).
    pub fn forget(&self, id: &str) {
        let mut inner = self.lock();
        if inner.by_id.remove(id).is_some() {
            inner.order.retain(|k| &**k != id);
        }
    }

    /// Ids remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_id.len()
    }
}

impl crate::peers::origins::OriginBook for ResponseIds {
    fn local_origin(&self, id: &str) -> Option<SharedOrigin> {
        self.origin(id).map(|o| SharedOrigin {
            model: o.model.to_string(),
            addr: o.addr,
            owner: o.owner.as_deref().map(str::to_owned),
        })
    }
}

impl Default for ResponseIds {
    fn default() -> Self {
        Self::new(RESPONSE_IDS_CAPACITY)
    }
}

/// A request on a follow-up route.
pub(super) struct FollowUp {
    /// The model of the response, when the head did not name one.
    pub(super) model: Option<String>,
}

/// What the gateway does with the answer of a Responses API request.
pub(super) enum Watch {
    /// A create request: find the new id in the first bytes.
    Create(Vec<u8>),
    /// A `DELETE` of this id: forget it once the delete succeeded.
    Delete(Arc<str>),
}

/// 404 for a follow-up naming an id the gateway never saw created (or, for
/// a tenant, one another tenant created).
pub fn response_not_found(id: &str) -> ApiError {
    let shown: String = id.chars().take(MAX_ID_LEN).collect();
    let mut e = ApiError::bad_request(format!(
        "Response with id '{shown}' not found: it was not created through this gateway, \
         or it was created too long ago to be remembered"
    ));
    e.status = 404;
    e.code = "response_not_found";
    e
}

fn path_only(path: &str) -> &str {
    path.split_once('?').map_or(path, |(p, _)| p)
}

/// A `previous_response_id` as sent: `None` when absent or `null`.
fn previous_id(raw: RawJson<'_>) -> Result<Option<String>, ApiError> {
    match serde_json::from_str::<Option<String>>(raw.get()) {
        Ok(id) => Ok(id),
        Err(_) => Err(ApiError::invalid_field(
            "previous_response_id",
            "must be a string",
        )),
    }
}

impl Gateway {
    /// For a follow-up route (`Ok(None)` for any other): the model of the
    /// response it names (unless the head named one already), and the
    /// endpoint the request is pinned to. An unknown id is a 404 unless the
    /// head names the model; for a tenant of a key file, any id it did not
    /// create is.
    pub(super) async fn response_follow_up(
        &self,
        req: &RequestHeader,
        route: &StoreRoute<'_>,
        head_model: Option<&str>,
        ctx: &mut RequestCtx,
    ) -> Result<Option<FollowUp>, ApiError> {
        let StoreRoute::ResponseFollowUp(id) = route else {
            return Ok(None);
        };
        let id = id.as_ref();
        let origin = self.origin_of(id).await;
        if let Some(tenant) = self.scoped_tenant(ctx) {
            if !origin.as_ref().is_some_and(|o| o.open_to(tenant)) {
                return Err(response_not_found(id));
            }
        }
        if req.method == Method::DELETE {
            ctx.response_watch = Some(Box::new(Watch::Delete(Arc::from(id))));
        }
        let model = match (origin, head_model) {
            (Some(origin), None) => {
                ctx.pinned = Some(origin.addr);
                Some(origin.model.to_string())
            }
            (Some(origin), Some(named)) => {
                if *origin.model == *named {
                    ctx.pinned = Some(origin.addr);
                }
                None
            }
            (None, Some(_)) => None,
            (None, None) => return Err(response_not_found(id)),
        };
        Ok(Some(FollowUp { model }))
    }

    /// A create request that continues a response (`previous_response_id`):
    /// a tenant may continue only its own (anything else is answered as an
    /// unknown id, before the engine sees it), and the request goes to the
    /// endpoint that holds the response when it is the same model's. A
    /// tenant may not name a `conversation` (the gateway cannot tell whose
    /// it is).
    pub(super) async fn continue_response(
        &self,
        json: &JsonView<'_>,
        model: &str,
        ctx: &mut RequestCtx,
    ) -> Result<(), ApiError> {
        let scoped = self.scoped_tenant(ctx).is_some();
        if scoped && json.conversation.is_some_and(|c| c.get() != "null") {
            return Err(super::isolation::conversation_not_found());
        }
        let Some(raw) = json.previous_response_id else {
            return Ok(());
        };
        let id = match previous_id(raw) {
            Ok(Some(id)) => id,
            Ok(None) => return Ok(()),
            // The engine answers a malformed value, unless the gateway
            // must know whose response it names.
            Err(e) if scoped => return Err(e),
            Err(_) => return Ok(()),
        };
        let origin = self.origin_of(&id).await;
        if let Some(tenant) = self.scoped_tenant(ctx) {
            if !origin.as_ref().is_some_and(|o| o.open_to(tenant)) {
                let mut e = response_not_found(&id);
                e.param = Some("previous_response_id");
                return Err(e);
            }
        }
        if let Some(origin) = origin.filter(|o| *o.model == *model) {
            ctx.pinned = Some(origin.addr);
        }
        Ok(())
    }

    /// Where `id` was created: known here, else as a peer replica knows it
    /// (then remembered here too).
    async fn origin_of(&self, id: &str) -> Option<Origin> {
        if let Some(origin) = self.response_ids.origin(id) {
            return Some(origin);
        }
        let shared = self.origins.as_ref()?.find(id).await?;
        let origin = Origin {
            model: Arc::from(shared.model),
            addr: shared.addr,
            owner: shared.owner.map(Arc::from),
        };
        self.response_ids.remember(id, origin.clone());
        Some(origin)
    }

    /// On a successful answer to `POST /v1/responses`, starts watching its
    /// body for the new response's id.
    pub(super) fn watch_responses(
        &self,
        req: &RequestHeader,
        resp: &ResponseHeader,
        ctx: &mut RequestCtx,
    ) {
        if !resp.status.is_success() {
            ctx.response_watch = None;
            return;
        }
        if req.method != Method::POST || ctx.response_watch.is_some() {
            return;
        }
        let path = ctx
            .plan
            .as_ref()
            .and_then(|p| p.forward_path.as_deref())
            .map_or(req.uri.path(), path_only);
        if path == CREATE_PATH {
            ctx.response_watch = Some(Box::new(Watch::Create(Vec::new())));
        }
    }

    /// Feeds a chunk of a watched answer: remembers a created id, forgets a
    /// deleted one.
    pub(super) fn watch_response_body(
        &self,
        body: &Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) {
        let Some(watch) = ctx.response_watch.as_deref_mut() else {
            return;
        };
        match watch {
            Watch::Delete(id) => {
                if end_of_stream {
                    if (200..300).contains(&ctx.status) {
                        self.response_ids.forget(id);
                    }
                    ctx.response_watch = None;
                }
            }
            Watch::Create(seen) => {
                if let Some(b) = body {
                    seen.extend_from_slice(b);
                }
                let found = created_id(seen, end_of_stream);
                if found.is_some() || end_of_stream || seen.len() > WATCH_LIMIT {
                    if let Some(id) = found {
                        self.remember_origin(&id, ctx);
                    }
                    ctx.response_watch = None;
                }
            }
        }
    }

    fn remember_origin(&self, id: &str, ctx: &RequestCtx) {
        let (Some(plan), Some(&idx), Some(model)) =
            (ctx.plan.as_ref(), ctx.tried.last(), ctx.model.as_ref())
        else {
            return;
        };
        let endpoints = &plan.resolved.route.endpoints;
        if idx < endpoints.len() {
            let origin = Origin {
                model: Arc::clone(model),
                addr: endpoints.upstream(idx).addr,
                owner: ctx.tenant.as_ref().map(|t| Arc::clone(&t.name)),
            };
            self.response_ids.remember(id, origin);
        }
    }
}

#[derive(Deserialize)]
struct WithId {
    id: Option<String>,
}

#[derive(Deserialize)]
struct Event {
    response: Option<WithId>,
}

/// The id of a created response in the first bytes of its answer: a JSON
/// object's top-level `id` (read early when it is the first member, else
/// from the whole body at its end), or the `response.id` of the first
/// server-sent event that has one.
fn created_id(seen: &[u8], complete: bool) -> Option<String> {
    let start = seen.iter().position(|b| !b.is_ascii_whitespace())?;
    if seen[start] == b'{' {
        if let Some(id) = leading_id(&seen[start..]) {
            return Some(id);
        }
        return if complete {
            serde_json::from_slice::<WithId>(seen).ok()?.id
        } else {
            None
        };
    }
    // A stream: look at each complete `data:` line.
    let complete_lines = match seen.iter().rposition(|b| *b == b'\n') {
        Some(end) => &seen[..end],
        None => return None,
    };
    complete_lines
        .split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .find_map(|data| serde_json::from_slice::<Event>(data).ok()?.response?.id)
}

/// `"..."` when `object` starts with `{"id":"..."` (whitespace allowed, no
/// escapes in the id).
fn leading_id(object: &[u8]) -> Option<String> {
    fn skip_ws(s: &[u8]) -> &[u8] {
        let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
        &s[n..]
    }
    let rest = skip_ws(object.strip_prefix(b"{")?);
    let rest = skip_ws(rest.strip_prefix(b"\"id\"")?);
    let rest = skip_ws(rest.strip_prefix(b":")?);
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().position(|b| *b == b'"' || *b == b'\\')?;
    if rest[end] != b'"' {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(port: u16) -> Origin {
        Origin {
            model: Arc::from("m"),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            owner: None,
        }
    }

    #[test]
    fn previous_ids_are_strings_or_null() {
        let read = |raw: &str| previous_id(RawJson::new(raw));
        assert_eq!(read(r#""resp_1""#).unwrap().as_deref(), Some("resp_1"));
        assert_eq!(read(r#""a\u0062""#).unwrap().as_deref(), Some("ab"));
        assert_eq!(read("null").unwrap(), None);
        let e = read("{\"id\":\"resp_1\"}").unwrap_err();
        assert_eq!((e.status, e.param), (400, Some("previous_response_id")));
    }

    #[test]
    fn map_is_bounded_first_in_first_out() {
        let ids = ResponseIds::new(2);
        ids.remember("a", origin(1));
        ids.remember("b", origin(2));
        ids.remember("a", origin(9));
        assert_eq!(ids.origin("a"), Some(origin(1)));
        ids.remember("c", origin(3));
        assert_eq!(ids.len(), 2);
        assert_eq!(ids.origin("a"), None);
        assert_eq!(ids.origin("c"), Some(origin(3)));
        ids.forget("b");
        assert_eq!(ids.origin("b"), None);
        assert_eq!(ids.len(), 1);
        ids.remember("", origin(4));
        ids.remember(&"x".repeat(MAX_ID_LEN + 1), origin(4));
        assert_eq!(ids.len(), 1);
    }

    #[test]
    fn finds_the_id_of_json_bodies() {
        assert_eq!(
            created_id(br#" { "id" : "resp_1", "object""#, false).as_deref(),
            Some("resp_1")
        );
        let late = br#"{"object":"response","id":"resp_2"}"#;
        assert_eq!(created_id(&late[..20], false), None);
        assert_eq!(created_id(late, true).as_deref(), Some("resp_2"));
        assert_eq!(
            created_id(br#"{"id":"a\"b"}"#, true).as_deref(),
            Some("a\"b")
        );
        assert_eq!(created_id(b"{not json", true), None);
        assert_eq!(created_id(b"", true), None);
    }

    #[test]
    fn finds_the_id_of_streams() {
        let stream = b"event: response.created\ndata: {\"type\":\"response.created\",\
                       \"sequence_number\":0,\"response\":{\"id\":\"resp_3\",\"status\":\"in_progress\"}}\n\n";
        assert_eq!(created_id(stream, false).as_deref(), Some("resp_3"));
        // The event's line is not complete yet.
        assert_eq!(created_id(&stream[..60], false), None);
        assert_eq!(created_id(b"data: {\"response\":{}}\n", false), None);
        assert_eq!(created_id(b": ping\n\n", false), None);
    }

    #[test]
    fn unknown_id_is_an_openai_404() {
        let e = response_not_found("resp_x");
        assert_eq!(e.status, 404);
        assert_eq!(e.code, "response_not_found");
        assert_eq!(e.kind, "invalid_request_error");
        assert!(e.message.contains("resp_x"));
    }
}
