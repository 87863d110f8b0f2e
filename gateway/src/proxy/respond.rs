//! Answers the gateway writes itself: errors and its own routes.

use bytes::Bytes;
use http::header;
use pingora_error::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;

use super::context::RequestCtx;
use super::headers::REQUEST_ID;
use crate::errors::ApiError;

/// Answers the request with `err` and records it; `Ok(true)` tells Pingora
/// that the request is done.
pub(super) async fn reject(
    session: &mut Session,
    ctx: &mut RequestCtx,
    err: ApiError,
) -> Result<bool> {
    if ctx.held_head {
        super::hold::end_held(session, ctx, &err).await?;
        return Ok(true);
    }
    // A request body left unread would corrupt the next request on this
    // connection: close it instead.
    if !session.as_mut().is_body_done() {
        session.set_keepalive(None);
        // The client may still be sending it: close lingeringly.
        crate::connections::linger_on_close();
    }
    let mut extra: Vec<(&'static str, String)> = Vec::new();
    if let Some(secs) = err.retry_after {
        extra.push(("retry-after", secs.to_string()));
    }
    extra.extend(err.headers().iter().cloned());
    if err.status == 401 {
        extra.push(("www-authenticate", "Bearer realm=\"flexinfer\"".to_string()));
    }
    let body = error_body(session, ctx, &err);
    respond(session, ctx, err.status, "application/json", body, &extra).await?;
    Ok(true)
}

/// `err` as the API the request was made to writes errors.
fn error_body(session: &Session, ctx: &RequestCtx, err: &ApiError) -> Bytes {
    let path = session.req_header().uri.path();
    Bytes::from(err.body_for(path, ctx.request_id.as_deref()))
}

/// Writes a complete response that keeps the client connection usable.
pub(super) async fn respond(
    session: &mut Session,
    ctx: &mut RequestCtx,
    status: u16,
    content_type: &str,
    body: Bytes,
    extra: &[(&'static str, String)],
) -> Result<()> {
    let mut resp = ResponseHeader::build(status, Some(4))?;
    resp.insert_header(header::CONTENT_TYPE, content_type)?;
    resp.insert_header(header::CONTENT_LENGTH, body.len().to_string())?;
    if let Some(id) = &ctx.request_id {
        resp.insert_header(REQUEST_ID, id.as_ref())?;
    }
    for (k, v) in extra {
        resp.insert_header(*k, v.as_str())?;
    }
    ctx.status = status;
    ctx.response_bytes += body.len() as u64;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await?;
    Ok(())
}

/// The answer for a request that failed in Pingora's phases, unless the
/// client is gone or already has part of an answer; the `FailToProxy` for
/// Pingora.
pub(super) async fn answer_failure(
    session: &mut Session,
    e: &pingora_error::Error,
    ctx: &mut RequestCtx,
) -> pingora_proxy::FailToProxy {
    use pingora_error::{ErrorSource, ErrorType};
    ctx.lease = None;
    let downstream_gone = e.esource() == &ErrorSource::Downstream
        && matches!(
            e.etype(),
            ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed
        );
    if let Some(end) = ctx.stream_end.take().filter(|_| !downstream_gone) {
        // A stream cut mid-answer that no engine continues: its end.
        let _ = session.write_response_body(Some(end), true).await;
        return pingora_proxy::FailToProxy {
            error_code: 0,
            can_reuse_downstream: false,
        };
    }
    if ctx.held_head && !downstream_gone && ctx.response_bytes == 0 && !ctx.is_subrequest {
        // A held stream whose engine failed before its first byte: the
        // error as the stream's last event.
        let err = ctx
            .error
            .take()
            .unwrap_or_else(|| super::upstream::classify_upstream_error(e));
        let _ = super::hold::end_held(session, ctx, &err).await;
        return pingora_proxy::FailToProxy {
            error_code: 0,
            can_reuse_downstream: false,
        };
    }
    if downstream_gone || session.as_downstream().response_written().is_some() {
        return pingora_proxy::FailToProxy {
            error_code: 0,
            can_reuse_downstream: false,
        };
    }
    let framing = client_framing_error(e);
    let err = ctx
        .error
        .take()
        .or(framing.clone())
        .unwrap_or_else(|| super::upstream::classify_upstream_error(e));
    let code = err.status;
    // After its upstream phases, Pingora closes the client connection on
    // failure: say so, so that the client does not send the next request
    // on it. (A subrequest's parent keeps its connection.) A request whose
    // framing was broken closes it in any case.
    let closing = (ctx.proxied && !ctx.is_subrequest) || framing.is_some();
    if closing {
        session.set_keepalive(None);
        if !session.as_mut().is_body_done() {
            crate::connections::linger_on_close();
        }
    }
    let body = error_body(session, ctx, &err);
    let _ = respond(session, ctx, code, "application/json", body, &[]).await;
    pingora_proxy::FailToProxy {
        error_code: code,
        can_reuse_downstream: !closing,
    }
}

/// 400 for a request body the client framed wrongly (a bad chunk size, a
/// broken trailer): the connection cannot be trusted after it.
fn client_framing_error(e: &pingora_error::Error) -> Option<ApiError> {
    use pingora_error::{ErrorSource, ErrorType};
    let etype = e.etype();
    // Pingora's body reader names these errors (its constants are private).
    let broken = matches!(etype.as_str(), "InvalidChunk" | "InvalidTrailerEnd")
        || *etype == ErrorType::InvalidHTTPHeader;
    (e.esource() == &ErrorSource::Downstream && broken)
        .then(|| ApiError::bad_request(format!("malformed request body: {}", etype.as_str())))
}
