//! Reading a request body the gateway must see before it can route.

use bytes::{Bytes, BytesMut};
use http::header;
use pingora_http::RequestHeader;
use pingora_proxy::Session;

use crate::errors::ApiError;

/// Reads the whole request body, refusing more than `limit` bytes;
/// `declared` is its `Content-Length` ([`declared_length`]), already
/// checked against the limit.
///
/// Pingora keeps a copy of bodies up to 64 KiB and sends it upstream itself
/// (see `request_body_filter`); larger ones are forwarded as a subrequest.
pub(super) async fn read_body(
    session: &mut Session,
    limit: usize,
    declared: Option<usize>,
) -> Result<Bytes, ApiError> {
    if expects_continue(session.req_header()) {
        // The client holds the body back until told to send it (curl
        // does for large uploads, waiting a second otherwise). The body
        // is read here, before any upstream is chosen, so the gateway
        // answers for it. A failed write shows up as a failed read below.
        let _ = session.write_continue_response().await;
    }
    session.as_mut().enable_retry_buffering();
    // A body that arrives in one chunk is kept as it came; only one in
    // several chunks is copied together.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    let mut total = 0;
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                total += chunk.len();
                if total > limit {
                    return Err(ApiError::body_too_large(limit));
                }
                if first.is_none() && buf.is_empty() {
                    first = Some(chunk);
                    continue;
                }
                if let Some(head) = first.take() {
                    buf.reserve(declared.unwrap_or(0).clamp(total, limit));
                    buf.extend_from_slice(&head);
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                // Whatever follows on this connection cannot be trusted
                // to start a request (a smuggling hazard behind a proxy).
                session.set_keepalive(None);
                return Err(ApiError::bad_request(format!(
                    "malformed request body: {}",
                    e.etype().as_str()
                )));
            }
        }
    }
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

/// The body length the client announced in `Content-Length`.
pub(super) fn declared_length(req: &RequestHeader) -> Option<usize> {
    req.headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok())
}

/// Whether an HTTP/1.1 (or later) client waits for `100 Continue` before
/// sending its body; HTTP/1.0 clients never do (RFC 9110, section 10.1.1).
fn expects_continue(req: &RequestHeader) -> bool {
    req.version >= http::Version::HTTP_11
        && req
            .headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

impl super::Gateway {
    /// A body streamed upstream without being read first is held to the
    /// same limit: past it the request fails (413 when nothing of an answer
    /// was sent yet) and the connection closes.
    pub(super) fn enforce_body_limit(
        &self,
        ctx: &mut super::RequestCtx,
    ) -> pingora_error::Result<()> {
        let limit = self.settings.max_body_bytes;
        if ctx.request_bytes <= limit as u64 {
            return Ok(());
        }
        ctx.error = Some(ApiError::body_too_large(limit));
        Err(pingora_error::Error::explain(
            pingora_error::ErrorType::HTTPStatus(413),
            "request body over the limit",
        ))
    }
}
