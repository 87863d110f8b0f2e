//! The bytes a held stream is sent: its head, progress comments and the
//! error event that ends it when the wait fails.

use std::fmt::Write;
use std::time::Duration;

use bytes::Bytes;
use http::header;
use pingora_http::ResponseHeader;

use crate::activation::Progress;
use crate::errors::ApiError;

/// The response head sent when a stream has waited one interval: an SSE
/// stream, not cached and not buffered by proxies that honour
/// `X-Accel-Buffering` (nginx). HTTP/1.1 answers are chunked so that the
/// connection outlives the answer.
pub fn head(http11: bool, request_id: Option<&str>) -> pingora_error::Result<ResponseHeader> {
    let mut resp = ResponseHeader::build(200, Some(6))?;
    resp.insert_header(header::CONTENT_TYPE, "text/event-stream")?;
    resp.insert_header(header::CACHE_CONTROL, "no-cache")?;
    resp.insert_header("x-accel-buffering", "no")?;
    if http11 {
        resp.insert_header(header::TRANSFER_ENCODING, "chunked")?;
    }
    if let Some(id) = request_id {
        resp.insert_header(crate::proxy::REQUEST_ID_HEADER, id)?;
    }
    Ok(resp)
}

/// One progress comment: `: waiting phase=loading waiting=3 waited=12s
/// eta=20s`, the estimate left out when unknown.
pub fn progress_comment(progress: &Progress, waited: Duration) -> Bytes {
    let mut line = format!(
        ": waiting phase={} waiting={} waited={}s",
        progress.phase,
        progress.waiting,
        waited.as_secs()
    );
    if let Some(eta) = progress.eta {
        let _ = write!(line, " eta={}s", eta.as_secs_f64().ceil() as u64);
    }
    line.push_str("\n\n");
    Bytes::from(line)
}

/// `err` as an SSE `error` event of the API at `path`.
pub fn error_event(err: &ApiError, path: &str, request_id: Option<&str>) -> Bytes {
    event_of(&err.body_for(path, request_id))
}

/// The event for an engine's error answer (`status`, `body`) that came
/// after the head: its own JSON error when it wrote one, else an error of
/// the gateway's shape carrying its status and text.
pub fn upstream_error_event(
    status: u16,
    body: &[u8],
    path: &str,
    request_id: Option<&str>,
) -> Bytes {
    let json = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .filter(|v| v.get("error").is_some_and(|e| e.is_object()))
        .and_then(|v| serde_json::to_vec(&v).ok());
    match json {
        Some(own) => event_of(&own),
        None => {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]);
            let mut err = ApiError::bad_gateway();
            err.status = status;
            err.message = format!("the model server answered {status}: {}", text.trim());
            error_event(&err, path, request_id)
        }
    }
}

fn event_of(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 22);
    out.extend_from_slice(b"event: error\ndata: ");
    // Compact JSON holds no raw line break; a stray one would end the event.
    out.extend(json.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(eta: Option<u64>) -> Progress {
        Progress {
            phase: "loading",
            waiting: 3,
            eta: eta.map(Duration::from_millis),
        }
    }

    #[test]
    fn comments_are_single_sse_comment_lines() {
        let c = progress_comment(&progress(Some(19_200)), Duration::from_millis(12_900));
        assert_eq!(
            &c[..],
            b": waiting phase=loading waiting=3 waited=12s eta=20s\n\n"
        );
        let c = progress_comment(&progress(None), Duration::ZERO);
        assert_eq!(&c[..], b": waiting phase=loading waiting=3 waited=0s\n\n");
    }

    #[test]
    fn errors_take_the_shape_of_the_api() {
        let err = ApiError::activation_failed("m", "exited");
        let openai = error_event(&err, "/v1/chat/completions", Some("r1"));
        let text = std::str::from_utf8(&openai).unwrap();
        let data = text
            .strip_prefix("event: error\ndata: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .expect("one event");
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["error"]["code"], err.code, "{v}");
        let anthropic = error_event(&err, "/v1/messages", Some("r1"));
        let data = std::str::from_utf8(&anthropic[19..anthropic.len() - 2]).unwrap();
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["type"], "error", "{v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    }

    #[test]
    fn an_engine_error_is_passed_on_or_wrapped() {
        let own = br#"{"error": {"message": "bad", "type": "BadRequestError", "code": 400}}"#;
        let e = upstream_error_event(400, own, "/v1/chat/completions", None);
        assert_eq!(
            &e[..],
            b"event: error\ndata: {\"error\":{\"code\":400,\"message\":\"bad\",\"type\":\"BadRequestError\"}}\n\n"
        );
        let e = upstream_error_event(500, b"boom\n", "/v1/chat/completions", None);
        let v: serde_json::Value =
            serde_json::from_slice(&e[19..e.len() - 2]).expect("one JSON line");
        assert_eq!(v["error"]["message"], "the model server answered 500: boom");
    }
}
