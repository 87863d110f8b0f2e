//! Full-profile protocol checks that need more than one request-response
//! exchange: streamed chunks must arrive as the backend produces them (no
//! buffering in the gateway), and an oversize body must be refused with an
//! OpenAI-shaped 413.

use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Result};
use futures::future::BoxFuture;
use serde_json::json;

use super::checks::{expect_error, model, Check, Verdict};
use super::http::Call;
use super::roles::Role;
use super::Context;

/// Tokens the spacing check asks for.
const STREAM_TOKENS: usize = 10;
/// Smallest share of the stream's duration that must separate the first
/// content chunk from the last one.
const MIN_SPREAD: f64 = 0.4;
/// How long a body of the oversize check is held back waiting for an answer.
const OVERSIZE_PATIENCE: Duration = Duration::from_millis(1500);

/// The checks of this group.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            id: "proto.chat.stream.unbuffered",
            description: "streamed chunks reach the client spaced as the backend sends them, not buffered into one burst",
            run: stream_unbuffered,
        },
        Check {
            id: "errors.oversize_body",
            description: "a body over the gateway's --max-body-bytes is answered 413 request_too_large (OpenAI-shaped)",
            run: oversize_body,
        },
    ]
}

/// When each SSE event was complete, from the arrival times of the frames
/// that carried it; `[DONE]` included.
fn event_times(frames: &[(Duration, bytes::Bytes)]) -> Vec<(Duration, String)> {
    let mut events = Vec::new();
    let mut pending = String::new();
    for (at, data) in frames {
        pending.push_str(&String::from_utf8_lossy(data));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let payload = event
                .lines()
                .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data: "))
                .collect::<Vec<_>>()
                .join("\n");
            events.push((*at, payload));
        }
    }
    events
}

fn stream_unbuffered(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = match ctx.role_model(Role::Stream) {
            Some(m) => m,
            None => model(ctx)?,
        };
        let body = json!({
            "model": model,
            "messages": [{"role": "user", "content": "count slowly"}],
            "max_tokens": STREAM_TOKENS,
            "stream": true,
        });
        let open = Call::post_json("/v1/chat/completions", &body)
            .timeout(Duration::from_secs(60))
            .open(&ctx.gateway, ctx.api_key.as_deref())
            .await?;
        if open.status != 200 {
            let resp = open.collect().await?;
            bail!("expected status 200, got {}", resp.describe());
        }
        let frames = open.timed_frames(Duration::from_secs(60)).await?;
        let events = event_times(&frames);
        let content: Vec<Duration> = events
            .iter()
            .filter(|(_, payload)| payload.as_str() != "[DONE]")
            .filter(|(_, payload)| {
                serde_json::from_str::<serde_json::Value>(payload)
                    .ok()
                    .and_then(|v| v["choices"][0]["delta"]["content"].as_str().map(str::len))
                    .is_some_and(|n| n > 0)
            })
            .map(|(at, _)| *at)
            .collect();
        let end = events
            .last()
            .map(|(at, _)| *at)
            .ok_or_else(|| anyhow!("empty stream"))?;
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let timeline: Vec<String> = content.iter().map(|d| format!("{:.0}", ms(*d))).collect();
        ensure!(
            content.len() >= 3,
            "{} content chunks for max_tokens {STREAM_TOKENS}; arrivals (ms) {timeline:?}",
            content.len()
        );
        let first = content[0];
        let last = content[content.len() - 1];
        let spread = (last - first).as_secs_f64() / end.as_secs_f64().max(f64::EPSILON);
        ensure!(
            spread >= MIN_SPREAD,
            "chunks arrived in a burst: first content chunk at {:.0} ms, last at {:.0} ms, stream \
             done at {:.0} ms (spread {:.0}% < {:.0}%); arrivals (ms) {timeline:?}",
            ms(first),
            ms(last),
            ms(end),
            spread * 100.0,
            MIN_SPREAD * 100.0
        );
        Ok(Verdict::Pass)
    })
}

fn oversize_body(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        let declared = ctx.max_body_bytes + 1;
        let resp = Call::new(http::Method::POST, "/v1/chat/completions")
            .header("content-type", "application/json")
            .header("x-model-id", model)
            .timeout(Duration::from_secs(60))
            .send_declared(
                &ctx.gateway,
                ctx.api_key.as_deref(),
                declared,
                b' ',
                OVERSIZE_PATIENCE,
            )
            .await?;
        expect_error(&resp, 413, "request_too_large")
            .map_err(|e| anyhow!("a declared body of {declared} bytes: {e:#}"))?;
        Ok(Verdict::Pass)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn events_take_the_time_of_the_frame_that_completes_them() {
        let ms = Duration::from_millis;
        let frames = vec![
            (
                ms(1),
                Bytes::from_static(b"data: {\"a\":1}\n\ndata: {\"b\""),
            ),
            (ms(5), Bytes::from_static(b":2}\n\n")),
            (ms(9), Bytes::from_static(b"data: [DONE]\n\n")),
        ];
        let events = event_times(&frames);
        assert_eq!(
            events,
            vec![
                (ms(1), "{\"a\":1}".to_owned()),
                (ms(5), "{\"b\":2}".to_owned()),
                (ms(9), "[DONE]".to_owned()),
            ]
        );
    }
}
