//! The peer listener: `POST /peer/v1/records` merges a peer's batch,
//! `GET /peer/v1/snapshot` answers this replica's whole index. Both need a
//! valid signature ([`super::signature`]); anything else is 401 (bad or
//! missing signature, stale time), 409 (this replica's own id: the peer
//! list names this replica), 400, 404 or 413, and changes nothing.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use http::Response;
use pingora_core::apps::http_app::ServeHttp;
use pingora_core::protocols::http::ServerSession;

use super::signature::{now_ms, PEER_ID_HEADER, PEER_SIGNATURE_HEADER, PEER_TIME_HEADER};
use super::{codec, Node, MAX_RECORDS_BYTES, RECORDS_PATH, SNAPSHOT_PATH};

/// The peer listener's application.
pub struct PeerApp {
    node: Arc<Node>,
}

impl PeerApp {
    /// Serves `node`'s index to its peers.
    pub fn new(node: Arc<Node>) -> Self {
        PeerApp { node }
    }
}

fn answer(status: u16, body: &'static str) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .header(http::header::CONTENT_LENGTH, body.len())
        .body(body.as_bytes().to_vec())
        .unwrap_or_default()
}

#[async_trait]
impl ServeHttp for PeerApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        let method = req.method.as_str().to_owned();
        let path = req.uri.path().to_owned();
        let get = |name: &str| {
            req.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let signed = [
            get(PEER_ID_HEADER),
            get(PEER_TIME_HEADER),
            get(PEER_SIGNATURE_HEADER),
        ];
        let declared = get("content-length").and_then(|v| v.trim().parse::<usize>().ok());
        let received = &self.node.metrics.received;
        match (method.as_str(), path.as_str()) {
            ("POST", RECORDS_PATH) | ("GET", SNAPSHOT_PATH) => {}
            _ => return answer(404, "not found"),
        }
        if declared.is_some_and(|n| n > MAX_RECORDS_BYTES) {
            received.with_label_values(&["malformed"]).inc();
            return answer(413, "too large");
        }
        let mut body = BytesMut::new();
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_RECORDS_BYTES => {
                    body.extend_from_slice(&chunk)
                }
                Ok(Some(_)) => {
                    received.with_label_values(&["malformed"]).inc();
                    return answer(413, "too large");
                }
                Ok(None) => break,
                Err(_) => {
                    received.with_label_values(&["malformed"]).inc();
                    return answer(400, "unreadable body");
                }
            }
        }
        let headers = [
            signed[0].as_deref(),
            signed[1].as_deref(),
            signed[2].as_deref(),
        ];
        let sender = match self
            .node
            .key
            .verify(&method, &path, headers, &body, now_ms())
        {
            Ok(sender) => sender,
            Err(refused) => {
                received.with_label_values(&["unauthorized"]).inc();
                tracing::debug!(%refused, path, "peer request refused");
                return answer(401, "unauthorized");
            }
        };
        if sender == self.node.id {
            received.with_label_values(&["self"]).inc();
            return answer(409, "this is the sender");
        }
        let bytes = &self.node.metrics.bytes;
        if path == SNAPSHOT_PATH {
            received.with_label_values(&["accepted"]).inc();
            return self.snapshot();
        }
        let models = match codec::decode(&body) {
            Ok(models) => models,
            Err(e) => {
                received.with_label_values(&["malformed"]).inc();
                tracing::debug!(error = %e, sender, "malformed peer records");
                return answer(400, "malformed records");
            }
        };
        received.with_label_values(&["accepted"]).inc();
        bytes
            .with_label_values(&["received", "records"])
            .inc_by(body.len() as u64);
        self.node.merge(&models);
        Response::builder()
            .status(204)
            .header(http::header::CONTENT_LENGTH, 0)
            .body(Vec::new())
            .unwrap_or_default()
    }
}

impl PeerApp {
    /// The signed snapshot of every model's index.
    fn snapshot(&self) -> Response<Vec<u8>> {
        let (body, _) = codec::encode(&self.node.snapshot());
        let signed = self
            .node
            .key
            .sign("SNAPSHOT", SNAPSHOT_PATH, &self.node.id, &body);
        self.node
            .metrics
            .snapshots
            .with_label_values(&["served"])
            .inc();
        self.node
            .metrics
            .bytes
            .with_label_values(&["sent", "snapshot"])
            .inc_by(body.len() as u64);
        Response::builder()
            .status(200)
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .header(http::header::CONTENT_LENGTH, body.len())
            .header(PEER_ID_HEADER, signed.id)
            .header(PEER_TIME_HEADER, signed.time_ms)
            .header(PEER_SIGNATURE_HEADER, signed.signature)
            .body(body)
            .unwrap_or_default()
    }
}
