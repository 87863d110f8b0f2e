//! Timing one request: time to first token, gaps between tokens, output
//! token count (from the server's `usage` when present, else one per
//! content chunk of the stream), and how it failed when it did. The answer's
//! text can be collected too, for clients that continue a conversation.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde::Deserialize;

use crate::client::Connection;
use crate::sse::SseParser;

/// Usage block of a response or of the final stream chunk.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    /// Breakdown of the prompt tokens (vLLM: `cached_tokens`).
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

impl Usage {
    /// Prompt tokens served from the server's prefix cache, when reported.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.prompt_tokens_details.and_then(|d| d.cached_tokens)
    }
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens found in the prefix cache.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    text: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<CompletionChoice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct CompletionChoice {
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
}

/// A request that completed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Success {
    /// Time to the first content chunk (streams only).
    pub ttft: Option<Duration>,
    /// Output tokens.
    pub output_tokens: u64,
    /// Prompt tokens the server reported.
    pub prompt_tokens: Option<u64>,
    /// Of those, tokens the server reported as served from its prefix cache.
    pub cached_tokens: Option<u64>,
    /// Whether `output_tokens` came from the server's `usage`.
    pub from_usage: bool,
    /// Tokens per second of this request: `(tokens - 1) / (last - first
    /// chunk)` for streams (decode speed), `tokens / latency` otherwise.
    pub tokens_per_second: Option<f64>,
}

/// The result of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When it was sent, relative to the start of its level.
    pub started: Duration,
    /// Until the last byte.
    pub latency: Duration,
    /// What came back; `Err` holds the error class (`http_503`, `timeout`, ...).
    pub outcome: Result<Success, String>,
}

/// Sends `request` and measures it; inter-token gaps (microseconds) are
/// appended to `gaps`. A failed connection is reported, never retried.
pub async fn measure(
    connection: &mut Connection,
    request: Request<Full<Bytes>>,
    stream: bool,
    gaps: &mut Vec<u32>,
) -> (Duration, Result<Success, String>) {
    let start = Instant::now();
    let outcome = exchange(connection, request, stream, start, gaps, None).await;
    (start.elapsed(), outcome)
}

/// [`measure`], also appending the answer's text (`delta.content` of a
/// stream, `message.content` or `text` of a whole response) to `text`.
pub async fn measure_with_text(
    connection: &mut Connection,
    request: Request<Full<Bytes>>,
    stream: bool,
    gaps: &mut Vec<u32>,
    text: &mut String,
) -> (Duration, Result<Success, String>) {
    let start = Instant::now();
    let outcome = exchange(connection, request, stream, start, gaps, Some(text)).await;
    (start.elapsed(), outcome)
}

async fn exchange(
    connection: &mut Connection,
    request: Request<Full<Bytes>>,
    stream: bool,
    start: Instant,
    gaps: &mut Vec<u32>,
    mut text: Option<&mut String>,
) -> Result<Success, String> {
    let response = connection.send(request).await.map_err(|e| {
        if e.is_canceled() || e.is_closed() {
            "connection_closed"
        } else {
            "send"
        }
        .to_owned()
    })?;
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        // Drain so the connection can be reused.
        let _ = body.collect().await;
        return Err(format!("http_{}", status.as_u16()));
    }
    if !stream {
        let bytes = body
            .collect()
            .await
            .map_err(|_| "body".to_owned())?
            .to_bytes();
        return whole_response(&bytes, start.elapsed(), text);
    }

    let mut parser = SseParser::new();
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut chunks: u64 = 0;
    let mut usage: Option<Usage> = None;
    let mut done = false;
    let mut failure: Option<&'static str> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| "stream_cut".to_owned())?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let now = Instant::now();
        parser.feed(data, |event| {
            if event == b"[DONE]" {
                done = true;
                return;
            }
            let Ok(chunk) = serde_json::from_slice::<Chunk<'_>>(event) else {
                failure = Some("bad_chunk");
                return;
            };
            if chunk.error.is_some() {
                failure = Some("error_event");
                return;
            }
            if let Some(u) = chunk.usage {
                usage = Some(u);
            }
            let has_content = chunk.choices.iter().any(|c| {
                let delta = c.delta.as_ref();
                [
                    delta.and_then(|d| d.content.as_deref()),
                    delta.and_then(|d| d.reasoning_content.as_deref()),
                    c.text.as_deref(),
                ]
                .iter()
                .any(|t| t.is_some_and(|t| !t.is_empty()))
            });
            if let Some(text) = text.as_deref_mut() {
                for choice in &chunk.choices {
                    if let Some(content) = choice.delta.as_ref().and_then(|d| d.content.as_deref())
                    {
                        text.push_str(content);
                    } else if let Some(content) = choice.text.as_deref() {
                        text.push_str(content);
                    }
                }
            }
            if has_content {
                chunks += 1;
                match last {
                    None => first = Some(now),
                    Some(previous) => gaps.push(micros(now - previous)),
                }
                last = Some(now);
            }
        });
        if let Some(failure) = failure {
            return Err(failure.to_owned());
        }
    }
    if !done {
        return Err("incomplete_stream".to_owned());
    }
    let reported = usage.and_then(|u| u.completion_tokens);
    let output_tokens = reported.unwrap_or(chunks);
    let tokens_per_second = match (first, last) {
        (Some(f), Some(l)) if l > f && output_tokens > 1 => {
            Some((output_tokens - 1) as f64 / (l - f).as_secs_f64())
        }
        _ => None,
    };
    Ok(Success {
        ttft: first.map(|f| f - start),
        output_tokens,
        prompt_tokens: usage.and_then(|u| u.prompt_tokens),
        cached_tokens: usage.and_then(|u| u.cached_tokens()),
        from_usage: reported.is_some(),
        tokens_per_second,
    })
}

fn whole_response(
    bytes: &[u8],
    latency: Duration,
    text: Option<&mut String>,
) -> Result<Success, String> {
    let completion: Completion =
        serde_json::from_slice(bytes).map_err(|_| "bad_body".to_owned())?;
    if let Some(text) = text {
        for choice in &completion.choices {
            let content = choice.message.as_ref().and_then(|m| m.content.as_deref());
            text.push_str(content.or(choice.text.as_deref()).unwrap_or(""));
        }
    }
    let reported = completion.usage.and_then(|u| u.completion_tokens);
    let output_tokens = reported.unwrap_or_else(|| {
        // Without usage, whitespace-separated words approximate tokens.
        completion
            .choices
            .iter()
            .map(|c| {
                let text = c
                    .message
                    .as_ref()
                    .and_then(|m| m.content.as_deref())
                    .or(c.text.as_deref())
                    .unwrap_or("");
                text.split_whitespace().count() as u64
            })
            .sum()
    });
    let secs = latency.as_secs_f64();
    Ok(Success {
        ttft: None,
        output_tokens,
        prompt_tokens: completion.usage.and_then(|u| u.prompt_tokens),
        cached_tokens: completion.usage.and_then(|u| u.cached_tokens()),
        from_usage: reported.is_some(),
        tokens_per_second: (secs > 0.0 && output_tokens > 0).then(|| output_tokens as f64 / secs),
    })
}

/// Microseconds, saturating at `u32::MAX` (71 minutes).
pub fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_responses_use_usage_or_count_words() {
        let with_usage = br#"{"choices":[{"message":{"content":"a b c"}}],"usage":{"prompt_tokens":4,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}}"#;
        let mut text = String::new();
        let s = whole_response(with_usage, Duration::from_secs(2), Some(&mut text)).unwrap();
        assert_eq!(
            (
                s.output_tokens,
                s.prompt_tokens,
                s.cached_tokens,
                s.from_usage
            ),
            (7, Some(4), Some(2), true)
        );
        assert_eq!(text, "a b c");
        assert_eq!(s.tokens_per_second, Some(3.5));
        let without = br#"{"choices":[{"text":"one two three"}]}"#;
        let s = whole_response(without, Duration::from_secs(1), None).unwrap();
        assert_eq!(
            (s.output_tokens, s.cached_tokens, s.from_usage),
            (3, None, false)
        );
        assert_eq!(
            whole_response(b"nope", Duration::ZERO, None),
            Err("bad_body".into())
        );
    }
}
