//! The peer listener: `GET /peer/v2/hello` names this replica instance,
//! `POST /peer/v2/records` merges a peer's batch, `GET /peer/v2/snapshot`
//! answers this replica's whole index.
//!
//! Everything that can be checked on the header is checked before a byte
//! of body is read: the path, the framing (a `Content-Length` within the
//! path's limit, no `Transfer-Encoding`), the signature
//! ([`super::envelope`]), the time window, the addressed instance and the
//! sender instance's sequence number ([`super::replay`]). Only then is the
//! body read, bounded in size and time, and checked against the signed
//! hash. A refusal is an OpenAI-style JSON error ([`Refusal`]) and changes
//! nothing; answers to requests whose signature verified are signed
//! ([`super::answer`]), others are not.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use http::Response;
use pingora_core::apps::http_app::ServeHttp;
use pingora_core::protocols::http::ServerSession;
use pingora_http::RequestHeader;

use super::envelope::{SignedRequest, Verified};
use super::origins::{MAX_ID_BYTES, ORIGIN_PATH};
use super::refusal::Refusal;
use super::replay::Rejected;
use super::signature::{now_ms, sha256};
use super::{
    answer, codec, Node, BUDGETS_PATH, HELLO_PATH, MAX_BUDGETS_BYTES, MAX_RECORDS_BYTES,
    RECORDS_PATH, SNAPSHOT_PATH,
};

/// The paths served, with the body each allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Hello,
    Records,
    Snapshot,
    Origin,
    Budgets,
}

impl Route {
    fn of(method: &str, path: &str) -> Result<Route, Refusal> {
        match (method, path) {
            ("GET", HELLO_PATH) => Ok(Route::Hello),
            ("POST", RECORDS_PATH) => Ok(Route::Records),
            ("GET", SNAPSHOT_PATH) => Ok(Route::Snapshot),
            ("POST", ORIGIN_PATH) => Ok(Route::Origin),
            ("POST", BUDGETS_PATH) => Ok(Route::Budgets),
            (_, path) if path.starts_with("/peer/v1/") => Err(Refusal::OldProtocol),
            _ => Err(Refusal::NotFound),
        }
    }

    fn max_body(self) -> u64 {
        match self {
            Route::Records => MAX_RECORDS_BYTES as u64,
            Route::Origin => MAX_ID_BYTES as u64,
            Route::Budgets => MAX_BUDGETS_BYTES as u64,
            Route::Hello | Route::Snapshot => 0,
        }
    }
}

/// A request refused, with the MAC of its request when its signature
/// verified (the answer is then signed).
type Refused = (Refusal, Option<Verified>);

/// The peer listener's application.
pub struct PeerApp {
    node: Arc<Node>,
    body_timeout: Duration,
}

impl PeerApp {
    /// Serves `node`'s index to its peers; a request body must arrive
    /// within `body_timeout` of its header.
    pub fn new(node: Arc<Node>, body_timeout: Duration) -> Self {
        PeerApp { node, body_timeout }
    }
}

#[async_trait]
impl ServeHttp for PeerApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        match self.serve(session).await {
            Ok(answer) => answer,
            Err((refusal, request)) => self.refuse(session, refusal, request.as_ref()),
        }
    }
}

impl PeerApp {
    async fn serve(&self, session: &mut ServerSession) -> Result<Response<Vec<u8>>, Refused> {
        let (route, signed, verified) = self.check_head(session.req_header())?;
        let body = self
            .read_body(session, signed.envelope.length as usize)
            .await
            .map_err(|r| (r, Some(verified.clone())))?;
        if sha256(&body) != signed.envelope.body_sha256 {
            return Err((Refusal::BodyMismatch, Some(verified)));
        }
        let metrics = &self.node.metrics;
        match route {
            Route::Hello => {}
            Route::Snapshot => return Ok(self.snapshot(&verified)),
            Route::Origin => return Ok(self.origin(&body, &verified)),
            Route::Budgets => {
                let applied = match &self.node.budgets {
                    Some(budgets) => budgets.apply(&signed.envelope.sender, &body),
                    // Keys without limits here: nothing to take.
                    None => Ok(()),
                };
                applied.map_err(|e| {
                    tracing::debug!(error = %e, sender = %signed.envelope.sender, "malformed peer budgets");
                    (Refusal::Malformed, Some(verified.clone()))
                })?;
                metrics
                    .bytes
                    .with_label_values(&["received", "budgets"])
                    .inc_by(body.len() as u64);
            }
            Route::Records => {
                let models = codec::decode(&body).map_err(|e| {
                    tracing::debug!(error = %e, sender = %signed.envelope.sender, "malformed peer records");
                    (Refusal::Malformed, Some(verified.clone()))
                })?;
                metrics
                    .bytes
                    .with_label_values(&["received", "records"])
                    .inc_by(body.len() as u64);
                self.node.merge(&models);
            }
        }
        metrics.received.with_label_values(&["accepted"]).inc();
        let status = if route == Route::Hello { 200 } else { 204 };
        Ok(self.reply(
            status,
            "application/octet-stream",
            Vec::new(),
            Some(&verified),
        ))
    }

    /// Every check that needs no body; accepts the sequence number.
    fn check_head(&self, req: &RequestHeader) -> Result<(Route, SignedRequest, Verified), Refused> {
        let method = req.method.as_str();
        let path = req.uri.path();
        let route = Route::of(method, path).map_err(|r| (r, None))?;
        let length = declared_length(req, route).map_err(|r| (r, None))?;
        let get = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok());
        let signed = SignedRequest::parse(get, length).map_err(|r| (r, None))?;
        let now = now_ms();
        let keys = self.node.keys.keys();
        if keys.is_empty() {
            // Not a bad signature: a replica that loaded the secret first
            // (the one that generated it) reaches one that has not yet.
            return Err((Refusal::NoSecret, None));
        }
        let verified = signed
            .verify(&keys, (method, path), now)
            .map_err(|r| (r, None))?;
        let signed_refusal = |r: Refusal| (r, Some(verified.clone()));
        let envelope = &signed.envelope;
        if route != Route::Hello {
            if envelope.receiver != self.node.id {
                return Err(signed_refusal(Refusal::WrongReceiver));
            }
            if envelope.sender == self.node.id {
                return Err(signed_refusal(Refusal::Myself));
            }
        }
        self.node
            .admit(&envelope.sender, envelope.seq, envelope.time_ms, now)
            .map_err(|rejected| {
                signed_refusal(match rejected {
                    Rejected::Replayed => Refusal::Replayed,
                    Rejected::Full => Refusal::Busy,
                })
            })?;
        Ok((route, signed, verified))
    }

    /// The body, which declared `length` bytes, read within the deadline.
    async fn read_body(
        &self,
        session: &mut ServerSession,
        length: usize,
    ) -> Result<BytesMut, Refusal> {
        let mut body = BytesMut::with_capacity(length);
        if length == 0 {
            return Ok(body);
        }
        let deadline = tokio::time::Instant::now() + self.body_timeout;
        loop {
            match tokio::time::timeout_at(deadline, session.read_request_body()).await {
                Err(_) => return Err(Refusal::BodyTimeout),
                Ok(Err(_)) => return Err(Refusal::Unreadable),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) if body.len() + chunk.len() <= length => {
                    body.extend_from_slice(&chunk)
                }
                Ok(Ok(Some(_))) => return Err(Refusal::BodyMismatch),
            }
        }
        if body.len() != length {
            return Err(Refusal::BodyMismatch);
        }
        Ok(body)
    }

    /// The signed snapshot of every model's index.
    fn snapshot(&self, request: &Verified) -> Response<Vec<u8>> {
        let (body, _) = codec::encode(&self.node.snapshot());
        let metrics = &self.node.metrics;
        metrics.received.with_label_values(&["accepted"]).inc();
        metrics.snapshots.with_label_values(&["served"]).inc();
        metrics
            .bytes
            .with_label_values(&["sent", "snapshot"])
            .inc_by(body.len() as u64);
        self.reply(200, "application/octet-stream", body, Some(request))
    }

    /// Where the response the body names was created: `200` with its
    /// origin, `404` when this replica does not know it.
    fn origin(&self, body: &[u8], request: &Verified) -> Response<Vec<u8>> {
        self.node
            .metrics
            .received
            .with_label_values(&["accepted"])
            .inc();
        let known = std::str::from_utf8(body)
            .ok()
            .and_then(|id| self.node.book.as_ref()?.local_origin(id))
            .and_then(|origin| serde_json::to_vec(&origin).ok());
        match known {
            Some(json) => self.reply(200, "application/json", json, Some(request)),
            None => self.reply(404, "application/json", b"{}".to_vec(), Some(request)),
        }
    }

    /// Answers `refusal`, signed when the request's signature verified. A
    /// body not read yet stays unread: the connection closes after the
    /// answer.
    fn refuse(
        &self,
        session: &mut ServerSession,
        refusal: Refusal,
        request: Option<&Verified>,
    ) -> Response<Vec<u8>> {
        let metrics = &self.node.metrics;
        metrics.received.with_label_values(&[refusal.class()]).inc();
        metrics
            .rejected
            .with_label_values(&[refusal.reason()])
            .inc();
        let client = session.client_addr().map(ToString::to_string);
        tracing::debug!(
            reason = refusal.reason(),
            client = client.as_deref().unwrap_or("-"),
            path = session.req_header().uri.path(),
            "peer request refused"
        );
        if !session.is_body_done() {
            session.set_keepalive(None);
        }
        let err = refusal.error();
        let mut answer = self.reply(err.status, "application/json", err.body(), request);
        if let Some(secs) = err.retry_after {
            if let Ok(value) = http::HeaderValue::from_str(&secs.to_string()) {
                answer
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, value);
            }
        }
        answer
    }

    /// An answer, signed for the request whose MAC is `request` if any.
    fn reply(
        &self,
        status: u16,
        content_type: &str,
        body: Vec<u8>,
        request: Option<&Verified>,
    ) -> Response<Vec<u8>> {
        let mut builder = Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::CONTENT_LENGTH, body.len());
        if let Some(request) = request {
            let node = &self.node;
            let seal = answer::seal(&request.key, &request.mac, status, &node.id, &body);
            for (name, value) in seal {
                builder = builder.header(name, value);
            }
        }
        builder.body(body).unwrap_or_default()
    }
}

/// The body length a request declares: its `Content-Length`, within the
/// route's limit. A `Transfer-Encoding` (chunked) or a records post
/// without a length is refused: the signature covers the length.
fn declared_length(req: &RequestHeader, route: Route) -> Result<u64, Refusal> {
    if req.headers.contains_key(http::header::TRANSFER_ENCODING) {
        return Err(Refusal::LengthRequired);
    }
    let mut values = req.headers.get_all(http::header::CONTENT_LENGTH).iter();
    let length = match (values.next(), values.next()) {
        (None, _) if matches!(route, Route::Records | Route::Origin | Route::Budgets) => {
            return Err(Refusal::LengthRequired)
        }
        (None, _) => 0,
        (Some(value), None) => value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or(Refusal::LengthRequired)?,
        (Some(_), Some(_)) => return Err(Refusal::LengthRequired),
    };
    if length > route.max_body() {
        return Err(Refusal::TooLarge);
    }
    Ok(length)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::keyring::{KeySet, Keyring};
    use crate::peers::signature::{Key, MAX_SKEW};
    use crate::peers::PeerMetrics;
    use crate::registry::{ListedModel, ModelRegistry, Resolved};

    fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> RequestHeader {
        let mut req = RequestHeader::build(method, path.as_bytes(), None).unwrap();
        for (name, value) in headers {
            req.append_header(name.to_string(), *value).unwrap();
        }
        req
    }

    struct NoModels;

    impl ModelRegistry for NoModels {
        fn resolve(&self, _: &str) -> Option<Resolved> {
            None
        }
        fn list(&self) -> Vec<ListedModel> {
            Vec::new()
        }
    }

    const SECRET: &[u8] = b"0123456789abcdef-shared";

    fn app(id: &str) -> PeerApp {
        let metrics = PeerMetrics::new(&prometheus::Registry::new());
        let keys = Arc::new(Keyring::new(Some(SECRET), Duration::ZERO));
        let node = Node::new(id.into(), keys, Arc::new(NoModels), metrics);
        PeerApp::new(Arc::new(node), Duration::from_secs(1))
    }

    /// `signed`'s request as the listener reads it.
    fn header_of(method: &str, path: &str, signed: &SignedRequest) -> RequestHeader {
        let headers = signed.headers();
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        request(method, path, &pairs)
    }

    fn check(app: &PeerApp, req: &RequestHeader) -> Result<Route, Refusal> {
        app.check_head(req)
            .map(|(route, _, _)| route)
            .map_err(|(r, _)| r)
    }

    #[test]
    fn a_request_is_accepted_once_and_only_by_the_instance_it_names() {
        let app = app("replica-b-1");
        let key = KeySet::from_keys(vec![Key::new(SECRET)]);
        let route = ("POST", RECORDS_PATH);
        let signed = SignedRequest::new(&key, route, ("replica-a", "replica-b-1"), 1, b"body");
        let req = header_of("POST", RECORDS_PATH, &signed);
        assert_eq!(check(&app, &req), Ok(Route::Records));
        // The same request again, from anyone: replayed, and answered
        // signed (the sender may trust it).
        let (refusal, verified) = app.check_head(&req).unwrap_err();
        assert_eq!(refusal, Refusal::Replayed);
        assert_eq!(verified.map(|v| v.mac), Some(signed.macs[0]));
        // The next number is fresh; an older one overtaken is too.
        for seq in [3, 2] {
            let next = SignedRequest::new(&key, route, ("replica-a", "replica-b-1"), seq, b"x");
            assert_eq!(
                check(&app, &header_of("POST", RECORDS_PATH, &next)),
                Ok(Route::Records)
            );
        }
        // A restarted receiver is another instance: what was addressed to
        // the previous one is refused, replays included.
        let restarted = self::app("replica-b-2");
        assert_eq!(check(&restarted, &req), Err(Refusal::WrongReceiver));
        // A restarted sender is another instance: its numbers start again.
        let again = SignedRequest::new(&key, route, ("replica-a-2", "replica-b-1"), 1, b"body");
        assert_eq!(
            check(&app, &header_of("POST", RECORDS_PATH, &again)),
            Ok(Route::Records)
        );
    }

    #[test]
    fn unsigned_stale_forged_and_own_requests_are_refused_before_the_body() {
        let app = app("replica-b");
        let key = KeySet::from_keys(vec![Key::new(SECRET)]);
        let route = ("POST", RECORDS_PATH);
        let body = b"body";
        // Unsigned, with or without an oversized declared body.
        let bare = request("POST", RECORDS_PATH, &[("content-length", "4")]);
        let refused = app.check_head(&bare).unwrap_err();
        assert!(matches!(refused, (Refusal::Unsigned, None)));
        let huge = (MAX_RECORDS_BYTES + 1).to_string();
        let bare = request("POST", RECORDS_PATH, &[("content-length", &huge)]);
        assert_eq!(check(&app, &bare), Err(Refusal::TooLarge));
        // Another key.
        let forged = SignedRequest::new(
            &KeySet::from_keys(vec![Key::new(b"not-the-shared-secret")]),
            route,
            ("replica-a", "replica-b"),
            1,
            body,
        );
        let req = header_of("POST", RECORDS_PATH, &forged);
        let refused = app.check_head(&req).unwrap_err();
        assert!(matches!(refused, (Refusal::BadSignature, None)));
        // Stale.
        let mut envelope =
            SignedRequest::new(&key, route, ("replica-a", "replica-b"), 1, body).envelope;
        envelope.time_ms -= MAX_SKEW.as_millis() as u64 + 1_000;
        let stale = SignedRequest::sign(&key, route, envelope);
        assert_eq!(
            check(&app, &header_of("POST", RECORDS_PATH, &stale)),
            Err(Refusal::Stale)
        );
        // Signed for another path.
        let snapshot = SignedRequest::new(
            &key,
            ("GET", SNAPSHOT_PATH),
            ("replica-a", "replica-b"),
            2,
            b"",
        );
        assert_eq!(
            check(&app, &header_of("GET", HELLO_PATH, &snapshot)),
            Err(Refusal::BadSignature)
        );
        // This replica's own id.
        let own = SignedRequest::new(&key, route, ("replica-b", "replica-b"), 1, body);
        assert_eq!(
            check(&app, &header_of("POST", RECORDS_PATH, &own)),
            Err(Refusal::Myself)
        );
        // None of these used up a sequence number.
        let fine = SignedRequest::new(&key, route, ("replica-a", "replica-b"), 1, body);
        assert_eq!(
            check(&app, &header_of("POST", RECORDS_PATH, &fine)),
            Ok(Route::Records)
        );
        // Hello needs no receiver, and answers this replica itself.
        let hello = SignedRequest::new(&key, ("GET", HELLO_PATH), ("replica-b", ""), 9, b"");
        assert_eq!(
            check(&app, &header_of("GET", HELLO_PATH, &hello)),
            Ok(Route::Hello)
        );
    }

    /// A book that knows one response.
    struct OneResponse;

    impl crate::peers::origins::OriginBook for OneResponse {
        fn local_origin(&self, id: &str) -> Option<crate::peers::origins::SharedOrigin> {
            (id == "resp_1").then(|| crate::peers::origins::SharedOrigin {
                model: "m".into(),
                addr: "10.0.0.7:8000".parse().unwrap(),
                owner: Some("a".into()),
            })
        }
    }

    #[test]
    fn origin_lookups_are_signed_bounded_and_answered_from_the_book() {
        let metrics = PeerMetrics::new(&prometheus::Registry::new());
        let keys = Arc::new(Keyring::new(Some(SECRET), Duration::ZERO));
        let node = Node::new("b-1".into(), keys, Arc::new(NoModels), metrics)
            .with_book(Arc::new(OneResponse));
        let app = PeerApp::new(Arc::new(node), Duration::from_secs(1));
        let key = KeySet::from_keys(vec![Key::new(SECRET)]);
        let ask = |seq: u64, id: &[u8]| {
            let signed = SignedRequest::new(&key, ("POST", ORIGIN_PATH), ("a-1", "b-1"), seq, id);
            let (route, _, verified) = app
                .check_head(&header_of("POST", ORIGIN_PATH, &signed))
                .map_err(|(r, _)| r)
                .unwrap();
            assert_eq!(route, Route::Origin);
            app.origin(id, &verified)
        };
        let known = ask(1, b"resp_1");
        assert_eq!(known.status(), 200);
        let origin: serde_json::Value = serde_json::from_slice(known.body()).unwrap();
        assert_eq!(
            origin,
            serde_json::json!({"model": "m", "addr": "10.0.0.7:8000", "owner": "a"})
        );
        assert!(known
            .headers()
            .contains_key(crate::peers::signature::PEER_SIGNATURE_HEADER));
        assert_eq!(ask(2, b"resp_2").status(), 404);
        // Unsigned, too long or without a length: refused before the body.
        let unsigned = request("POST", ORIGIN_PATH, &[("content-length", "6")]);
        assert_eq!(check(&app, &unsigned), Err(Refusal::Unsigned));
        let long = vec![b'x'; MAX_ID_BYTES + 1];
        let signed = SignedRequest::new(&key, ("POST", ORIGIN_PATH), ("a-1", "b-1"), 3, &long);
        assert_eq!(
            check(&app, &header_of("POST", ORIGIN_PATH, &signed)),
            Err(Refusal::TooLarge)
        );
        assert_eq!(
            declared_length(&request("POST", ORIGIN_PATH, &[]), Route::Origin),
            Err(Refusal::LengthRequired)
        );
    }

    #[test]
    fn a_budgets_message_is_accepted_once_and_needs_a_length() {
        let app = app("b-1");
        let key = KeySet::from_keys(vec![Key::new(SECRET)]);
        let body = br#"[{"tenant":"a","kind":"tokens","amount":500.0}]"#;
        let signed = SignedRequest::new(&key, ("POST", BUDGETS_PATH), ("a-1", "b-1"), 1, body);
        let req = header_of("POST", BUDGETS_PATH, &signed);
        assert_eq!(check(&app, &req), Ok(Route::Budgets));
        // Replayed, its spending would be taken twice: refused.
        assert_eq!(check(&app, &req), Err(Refusal::Replayed));
        assert_eq!(
            declared_length(&request("POST", BUDGETS_PATH, &[]), Route::Budgets),
            Err(Refusal::LengthRequired)
        );
    }

    #[test]
    fn routes_and_old_paths() {
        assert_eq!(Route::of("GET", HELLO_PATH), Ok(Route::Hello));
        assert_eq!(Route::of("POST", RECORDS_PATH), Ok(Route::Records));
        assert_eq!(Route::of("GET", SNAPSHOT_PATH), Ok(Route::Snapshot));
        assert_eq!(Route::of("POST", ORIGIN_PATH), Ok(Route::Origin));
        assert_eq!(Route::of("POST", BUDGETS_PATH), Ok(Route::Budgets));
        assert_eq!(Route::of("GET", ORIGIN_PATH), Err(Refusal::NotFound));
        assert_eq!(Route::of("GET", RECORDS_PATH), Err(Refusal::NotFound));
        assert_eq!(
            Route::of("POST", "/peer/v1/records"),
            Err(Refusal::OldProtocol)
        );
        assert_eq!(
            Route::of("GET", "/peer/v1/snapshot"),
            Err(Refusal::OldProtocol)
        );
        assert_eq!(Route::of("GET", "/metrics"), Err(Refusal::NotFound));
    }

    #[test]
    fn lengths_are_declared_and_bounded_before_any_body_is_read() {
        let post = |headers: &[(&str, &str)]| {
            declared_length(&request("POST", RECORDS_PATH, headers), Route::Records)
        };
        assert_eq!(post(&[("content-length", "10")]), Ok(10));
        let max = MAX_RECORDS_BYTES.to_string();
        assert_eq!(
            post(&[("content-length", &max)]),
            Ok(MAX_RECORDS_BYTES as u64)
        );
        let over = (MAX_RECORDS_BYTES + 1).to_string();
        assert_eq!(post(&[("content-length", &over)]), Err(Refusal::TooLarge));
        assert_eq!(post(&[]), Err(Refusal::LengthRequired));
        assert_eq!(
            post(&[("transfer-encoding", "chunked")]),
            Err(Refusal::LengthRequired)
        );
        assert_eq!(
            post(&[("content-length", "10"), ("transfer-encoding", "chunked")]),
            Err(Refusal::LengthRequired)
        );
        assert_eq!(
            post(&[("content-length", "10"), ("content-length", "10")]),
            Err(Refusal::LengthRequired)
        );
        assert_eq!(
            post(&[("content-length", "-1")]),
            Err(Refusal::LengthRequired)
        );
        let get = |headers: &[(&str, &str)]| {
            declared_length(&request("GET", SNAPSHOT_PATH, headers), Route::Snapshot)
        };
        assert_eq!(get(&[]), Ok(0));
        assert_eq!(get(&[("content-length", "0")]), Ok(0));
        assert_eq!(get(&[("content-length", "1")]), Err(Refusal::TooLarge));
    }
}
