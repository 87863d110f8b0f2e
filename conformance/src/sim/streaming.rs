//! Server-sent event responses, paced token by token, and the [`Render`]
//! trait each generating API implements.
//!
//! Each event is handed to hyper as its own body frame when its token is
//! due; hyper writes and flushes it as soon as the body waits for the next
//! one, so nothing is held back. With `fail_after_tokens` the body fails
//! instead, and hyper drops the connection without the final chunk: to the
//! client it looks like a backend that crashed mid-stream.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;

use super::admission::Slot;
use super::generation::{Pacer, Plan};
use super::state::SimState;

/// `Content-Type` of streamed completions.
pub const EVENT_STREAM: &str = "text/event-stream";

/// The error a deliberately cut response body ends with.
pub fn crash() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "flexinfer-sim: simulated crash (fail-after-tokens)",
    )
}

/// How one API (chat, text completions, Responses, Messages) renders a
/// generation: the whole body, or the events of its stream.
pub trait Render: Send + 'static {
    /// The non-streaming body.
    fn body(&mut self, plan: &Plan) -> Vec<u8>;
    /// Events sent as soon as the stream starts, before the first token is due.
    fn head(&mut self, _plan: &Plan, _out: &mut Vec<u8>) {}
    /// Events sent with the first token, ahead of it.
    fn open(&mut self, _plan: &Plan, _out: &mut Vec<u8>) {}
    /// The events of token `token` (0-based).
    fn token(&mut self, plan: &Plan, out: &mut Vec<u8>, token: u32);
    /// The closing events.
    fn finish(&mut self, plan: &Plan, out: &mut Vec<u8>);
}

/// A streamed generation. `slot` is held until the stream ends or the client leaves.
pub fn response<R: Render>(
    state: Arc<SimState>,
    plan: Plan,
    mut render: R,
    slot: Slot,
    pacer: Pacer,
) -> Response {
    let cut_at = state
        .config
        .fail_after_tokens
        .filter(|n| *n < plan.completion_tokens);
    let stream = async_stream::stream! {
        let _slot = slot;
        let choices = u64::from(plan.choices);
        let mut out = Vec::with_capacity(512);
        render.head(&plan, &mut out);
        if !out.is_empty() {
            yield Ok(Bytes::from(std::mem::take(&mut out)));
        }
        pacer.wait_for(0).await;
        render.open(&plan, &mut out);
        for token in 0..plan.completion_tokens {
            pacer.wait_for(token).await;
            if cut_at == Some(token) {
                if !out.is_empty() {
                    yield Ok(Bytes::from(std::mem::take(&mut out)));
                }
                state.metrics.aborted.inc();
                yield Err(crash());
                return;
            }
            render.token(&plan, &mut out, token);
            state.metrics.generation_tokens.inc_by(choices);
            yield Ok::<_, std::io::Error>(Bytes::from(std::mem::take(&mut out)));
        }
        render.finish(&plan, &mut out);
        state.metrics.finished(plan.finish);
        yield Ok(Bytes::from(out));
    };
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The `event:`/`data:` pairs of a named-event stream, for tests.
#[cfg(test)]
pub(crate) fn named_events(stream: &[u8]) -> Vec<(String, serde_json::Value)> {
    let text = std::str::from_utf8(stream).expect("utf8");
    text.split_terminator("\n\n")
        .map(|e| {
            let (kind, data) = e.split_once('\n').expect("two lines");
            let kind = kind.strip_prefix("event: ").expect("event").to_owned();
            let data = data.strip_prefix("data: ").expect("data");
            (kind, serde_json::from_str(data).expect("json"))
        })
        .collect()
}
