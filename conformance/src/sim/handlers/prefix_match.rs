//! `POST /sim/prefix-match`: what the prefix cache would give a request now,
//! for benchmarks that need an oracle.
//!
//! The body is a `/v1/chat/completions` body (it has `messages`) or a
//! `/v1/completions` body (it has `prompt`). The answer is
//! `{"prompt_tokens": N, "cached_tokens": M, "block_size": B}`: the
//! `usage.prompt_tokens` and `usage.prompt_tokens_details.cached_tokens` the
//! request would get if it were admitted now, computed exactly as admission
//! does, but without touching the cache's LRU order or the metrics.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;

use super::completions::{chat_prompt, completion_prompts};
use super::json_response;
use crate::sim::error::ApiError;
use crate::sim::generation::total_prompt_tokens;
use crate::sim::intake::read_body;
use crate::sim::protocol::{parse_json, ChatRequest, CompletionRequest};
use crate::sim::state::SimState;

/// The answer of `POST /sim/prefix-match`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct PrefixMatch {
    /// `usage.prompt_tokens` the request would report.
    pub prompt_tokens: u32,
    /// `usage.prompt_tokens_details.cached_tokens` it would report if admitted now.
    pub cached_tokens: u32,
    /// Tokens per block of this server.
    pub block_size: u32,
}

/// Looks a completion request's prompt up without changing the cache.
pub async fn prefix_match(
    State(state): State<Arc<SimState>>,
    request: Request,
) -> Result<Response, ApiError> {
    let body = read_body(request.into_body(), state.config.max_body_bytes).await?;
    let answer = lookup(&state, &body)?;
    Ok(json_response(
        serde_json::to_vec(&answer).unwrap_or_default(),
    ))
}

/// The oracle's answer for a raw request body.
pub fn lookup(state: &SimState, body: &[u8]) -> Result<PrefixMatch, ApiError> {
    let value: Value = parse_json(body)?;
    let prompts = if value.get("messages").is_some() {
        vec![chat_prompt(&parse_json::<ChatRequest>(body)?)?]
    } else if value.get("prompt").is_some() {
        completion_prompts(&parse_json::<CompletionRequest>(body)?)?
    } else {
        return Err(ApiError::bad_request(
            "expected a chat completion body (with `messages`) or a completion body (with `prompt`).",
        ));
    };
    let key = state.prefix_cache.key(&prompts);
    Ok(PrefixMatch {
        prompt_tokens: total_prompt_tokens(&prompts),
        cached_tokens: state.prefix_cache.peek(&key).cached_tokens,
        block_size: state.prefix_cache.block_size(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::config::SimConfig;
    use crate::sim::handlers::completions;
    use crate::sim::SimServer;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use bytes::Bytes;
    use serde_json::json;

    /// Blocks of 2 tokens (8 bytes), `capacity` of them.
    fn state(capacity: usize) -> Arc<SimState> {
        SimState::new(
            SimConfig {
                block_size: 2,
                prefix_cache_blocks: capacity,
                ..SimConfig::default()
            },
            "test",
        )
        .expect("state")
    }

    fn chat_body(content: &str) -> Value {
        json!({"messages": [{"role": "user", "content": content}], "max_tokens": 2})
    }

    async fn json_of(response: Response) -> (StatusCode, Value) {
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, serde_json::from_slice(&bytes).expect("json"))
    }

    async fn chat(state: &Arc<SimState>, body: &Value) -> Value {
        let response = completions::chat(State(Arc::clone(state)), Bytes::from(body.to_string()))
            .await
            .expect("chat");
        json_of(response).await.1
    }

    async fn oracle(state: &Arc<SimState>, body: &Value) -> (StatusCode, Value) {
        let request = Request::builder()
            .method("POST")
            .uri("/sim/prefix-match")
            .body(Body::from(body.to_string()))
            .expect("request");
        let response = match prefix_match(State(Arc::clone(state)), request).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        };
        json_of(response).await
    }

    fn metrics(state: &SimState) -> String {
        String::from_utf8(state.metrics.render(0.0)).expect("utf8")
    }

    #[tokio::test]
    async fn usage_reports_cached_tokens_and_the_oracle_agrees() {
        let state = state(100);
        // "0123456789abcdef\n": 17 bytes = 5 tokens, 2 full blocks.
        let body = chat_body("0123456789abcdef");
        let before = oracle(&state, &body).await;
        assert_eq!(
            before,
            (
                StatusCode::OK,
                json!({"prompt_tokens": 5, "cached_tokens": 0, "block_size": 2})
            )
        );
        let first = chat(&state, &body).await;
        assert_eq!(first["usage"]["prompt_tokens"], 5);
        assert_eq!(
            first["usage"]["prompt_tokens_details"],
            json!({"cached_tokens": 0})
        );
        let predicted = oracle(&state, &body).await.1;
        assert_eq!(predicted["cached_tokens"], 4);
        let second = chat(&state, &body).await;
        assert_eq!(
            second["usage"],
            json!({
                "prompt_tokens": 5,
                "completion_tokens": 2,
                "total_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 4}
            })
        );
        let text = metrics(&state);
        for line in [
            "vllm:prefix_cache_queries_total{model_name=\"sim-model\"} 10",
            "vllm:prefix_cache_hits_total{model_name=\"sim-model\"} 4",
            "vllm:request_success_total{finished_reason=\"length\",model_name=\"sim-model\"} 2",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }

        // A streamed request reports the same in its usage chunk.
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        let response =
            completions::chat(State(Arc::clone(&state)), Bytes::from(streamed.to_string()))
                .await
                .expect("stream");
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let text = String::from_utf8(bytes.to_vec()).expect("utf8");
        let usage: Value = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str::<Value>(e).expect("chunk"))
            .filter_map(|c| c.get("usage").filter(|u| !u.is_null()).cloned())
            .last()
            .expect("usage chunk");
        assert_eq!(usage["prompt_tokens_details"], json!({"cached_tokens": 4}));
    }

    #[tokio::test]
    async fn the_oracle_leaves_lru_order_and_metrics_alone() {
        let state = state(2);
        // Each prompt is one full block ("aaaaaaaa") plus "\n".
        let a = chat_body("aaaaaaaa");
        let b = chat_body("bbbbbbbb");
        let c = chat_body("cccccccc");
        chat(&state, &a).await;
        chat(&state, &b).await;
        let metrics_before = metrics(&state);
        // If peeking at `a` touched it, admitting `c` would evict `b` instead.
        for _ in 0..3 {
            assert_eq!(oracle(&state, &a).await.1["cached_tokens"], 2);
        }
        assert_eq!(metrics(&state), metrics_before);
        chat(&state, &c).await;
        assert_eq!(oracle(&state, &a).await.1["cached_tokens"], 0);
        assert_eq!(oracle(&state, &b).await.1["cached_tokens"], 2);
        assert_eq!(oracle(&state, &c).await.1["cached_tokens"], 2);
    }

    #[tokio::test]
    async fn completion_prompts_and_token_ids() {
        let state = state(100);
        // 6 token ids = 24 bytes = 3 full blocks; a full hit recomputes the last.
        let ids = json!({"prompt": [1, 2, 3, 4, 5, 6], "max_tokens": 1});
        let response = completions::text(State(Arc::clone(&state)), Bytes::from(ids.to_string()))
            .await
            .expect("text");
        let (_, first) = json_of(response).await;
        assert_eq!(first["usage"]["prompt_tokens"], 6);
        assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        assert_eq!(
            oracle(&state, &ids).await.1,
            json!({"prompt_tokens": 6, "cached_tokens": 4, "block_size": 2})
        );
        // The same ids as a list of lists: the first list is what is looked up.
        let nested = json!({"prompt": [[1, 2, 3, 4, 5, 6, 7], [9]]});
        assert_eq!(
            oracle(&state, &nested).await.1,
            json!({"prompt_tokens": 8, "cached_tokens": 6, "block_size": 2})
        );
        let response = completions::text(State(Arc::clone(&state)), Bytes::from(ids.to_string()))
            .await
            .expect("text");
        let (_, second) = json_of(response).await;
        assert_eq!(second["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
    }

    #[tokio::test]
    async fn prefill_time_counts_only_uncached_tokens() {
        let state = SimState::new(
            SimConfig {
                prefill_tokens_per_second: 2000.0,
                ..SimConfig::default()
            },
            "test",
        )
        .expect("state");
        // 1599 bytes + "\n" = 400 tokens: 200 ms of prefill at 2000 tokens/s.
        let body = chat_body(&"y".repeat(1599));
        let started = std::time::Instant::now();
        let first = chat(&state, &body).await;
        let cold = started.elapsed();
        assert_eq!(first["usage"]["prompt_tokens"], 400);
        assert!(cold >= std::time::Duration::from_millis(200), "{cold:?}");
        // Again: 384 tokens cached (the full last block is recomputed), 16 to prefill: 8 ms.
        let started = std::time::Instant::now();
        let second = chat(&state, &body).await;
        let warm = started.elapsed();
        assert_eq!(
            second["usage"]["prompt_tokens_details"]["cached_tokens"],
            384
        );
        assert!(warm >= std::time::Duration::from_millis(8), "{warm:?}");
        assert!(warm < std::time::Duration::from_millis(150), "{warm:?}");
    }

    #[tokio::test]
    async fn capacity_zero_never_hits() {
        let state = state(0);
        let body = chat_body("0123456789abcdef");
        for _ in 0..2 {
            let answer = chat(&state, &body).await;
            assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        }
        assert_eq!(oracle(&state, &body).await.1["cached_tokens"], 0);
        assert!(state.prefix_cache.is_empty());
        let text = metrics(&state);
        assert!(
            text.contains("vllm:prefix_cache_hits_total{model_name=\"sim-model\"} 0"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn bad_bodies_are_openai_shaped_400s() {
        let state = state(100);
        for body in [
            Body::from("{not json"),
            Body::from(r#"{"model":"m"}"#),
            Body::from(r#"{"messages":[]}"#),
            Body::from(r#"{"messages":"hello"}"#),
            Body::from(r#"{"prompt":{"a":1}}"#),
        ] {
            let request = Request::builder()
                .method("POST")
                .body(body)
                .expect("request");
            let error = prefix_match(State(Arc::clone(&state)), request)
                .await
                .expect_err("400");
            let (status, value) = json_of(error.into_response()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert_eq!(value["error"]["type"], "BadRequestError");
            assert_eq!(value["error"]["code"], 400);
        }
    }

    #[tokio::test]
    async fn served_over_http_and_not_recorded() {
        let server = SimServer::start(SimConfig::default())
            .await
            .expect("server");
        let client = reqwest::Client::new();
        let body = chat_body(&"x".repeat(200));
        let url = format!("{}/sim/prefix-match", server.base_url());
        let answer: Value = client
            .post(&url)
            .json(&body)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        // 201 bytes = 51 tokens; blocks of 16 tokens (64 bytes): 3 full blocks.
        assert_eq!(
            answer,
            json!({"prompt_tokens": 51, "cached_tokens": 0, "block_size": 16})
        );
        let usage: Value = client
            .post(format!("{}/v1/chat/completions", server.base_url()))
            .json(&body)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        let answer: Value = client
            .post(&url)
            .json(&body)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        assert_eq!(answer["cached_tokens"], 48);
        let bad = client
            .post(&url)
            .body("{not json")
            .send()
            .await
            .expect("request");
        assert_eq!(bad.status(), 400);
        // Only the chat completion was recorded.
        assert_eq!(server.state().recorder.snapshot().len(), 1);
    }
}
