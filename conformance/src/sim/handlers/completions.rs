//! `POST /v1/chat/completions` and `POST /v1/completions`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use bytes::Bytes;

use super::json_response;
use crate::sim::completion::{ChunkWriter, Flavor};
use crate::sim::continuation;
use crate::sim::error::ApiError;
use crate::sim::generation::{Pacer, Plan};
use crate::sim::prefix_cache::{prefill_delay, Prompt};
use crate::sim::protocol::{parse_json, ChatRequest, CompletionRequest};
use crate::sim::state::{unix_now, SimState};
use crate::sim::streaming::{self, Render};
use crate::sim::tools::{ToolCall, Tools};

/// Chat completions, streamed or whole.
pub async fn chat(State(state): State<Arc<SimState>>, body: Bytes) -> Result<Response, ApiError> {
    state.check_ready()?;
    let request: ChatRequest = parse_json(&body)?;
    let model = state.models.resolve(request.sampling.model.as_deref())?;
    let prompt = chat_prompt(&request)?;
    let start = continuation::of_chat(&model, &request)?;
    let tools = Tools::from_chat(
        request.tools.as_ref(),
        request.tool_choice.as_ref(),
        request.functions.as_ref(),
        request.function_call.as_ref(),
    )?;
    let plan = start.plan(
        &state.config,
        model,
        &[prompt],
        &request.sampling,
        "messages",
    )?;
    // A continuation ends with the assistant's message: never a user turn.
    let user_turn = request.messages.last().is_some_and(|m| m.role == "user");
    let seed = plan.tool_seed(request.sampling.seed);
    let call = tools
        .pick(user_turn)
        .map(|tool| ToolCall::new(tool, &tools, seed));
    let plan = plan.with_tool_call(call);
    generate(state, plan, ChunkWriter::new(Flavor::Chat, unix_now())).await
}

/// The prompt of a chat request; 400 without messages.
pub(crate) fn chat_prompt(request: &ChatRequest) -> Result<Prompt, ApiError> {
    if request.messages.is_empty() {
        return Err(ApiError::bad_request(
            "messages must contain at least one message.",
        ));
    }
    Ok(Prompt::chat(&request.messages))
}

/// The prompts of a text completion request; 400 for a malformed `prompt`.
pub(crate) fn completion_prompts(request: &CompletionRequest) -> Result<Vec<Prompt>, ApiError> {
    Prompt::completion(&request.prompt).ok_or_else(|| {
        ApiError::bad_request("prompt must be a string, a list of strings, or token ids.")
    })
}

/// Text completions, streamed or whole.
pub async fn text(State(state): State<Arc<SimState>>, body: Bytes) -> Result<Response, ApiError> {
    state.check_ready()?;
    let request: CompletionRequest = parse_json(&body)?;
    let model = state.models.resolve(request.sampling.model.as_deref())?;
    let prompts = completion_prompts(&request)?;
    let start = continuation::of_completion(&model, &request, state.config.max_model_len);
    let plan = start.plan(&state.config, model, &prompts, &request.sampling, "prompt")?;
    generate(state, plan, ChunkWriter::new(Flavor::Text, unix_now())).await
}

/// Admits the request, looks its prompt up in the prefix cache, then paces
/// and answers it as `render` writes it. Every generating API goes through here.
pub(crate) async fn generate<R: Render>(
    state: Arc<SimState>,
    mut plan: Plan,
    mut render: R,
) -> Result<Response, ApiError> {
    state.check_injected_failure()?;
    let slot = state.admission.admit(plan.kv_tokens()).await;
    let hit = state.prefix_cache.admit(&plan.cache_key);
    plan.cached_tokens = hit.cached_tokens;
    state
        .metrics
        .prefix_cache_lookup(hit.queried_tokens, hit.cached_tokens);
    state
        .metrics
        .prompt_tokens
        .inc_by(u64::from(plan.prompt_tokens));
    let prefill = prefill_delay(
        plan.uncached_tokens(),
        state.config.prefill_tokens_per_second,
    );
    let pacer = Pacer::with_prefill(&state.config, prefill);
    if plan.stream {
        return Ok(streaming::response(state, plan, render, slot, pacer));
    }
    if let Some(cut) = state
        .config
        .fail_after_tokens
        .filter(|n| *n < plan.completion_tokens)
    {
        pacer.wait_for(cut).await;
        state.metrics.aborted.inc();
        return Ok(cut_response());
    }
    pacer
        .wait_for(plan.completion_tokens.saturating_sub(1))
        .await;
    let body = render.body(&plan);
    state
        .metrics
        .generation_tokens
        .inc_by(u64::from(plan.usage().completion_tokens));
    state.metrics.finished(plan.finish);
    drop(slot);
    Ok(json_response(body))
}

/// A 200 whose body fails at once: the connection closes before any content.
fn cut_response() -> Response {
    let body = Body::from_stream(futures::stream::once(async {
        Err::<Bytes, _>(streaming::crash())
    }));
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::config::{SimConfig, DEFAULT_MODEL};
    use crate::sim::synth;
    use serde_json::{json, Value};

    /// The parts of an answer a continuation must agree with (usage without
    /// the cached tokens, which depend on earlier requests).
    #[derive(Debug, PartialEq)]
    struct Answer {
        text: String,
        finish: String,
        usage: Value,
    }

    fn uncached(mut usage: Value) -> Value {
        if let Some(usage) = usage.as_object_mut() {
            usage.remove("prompt_tokens_details");
        }
        usage
    }

    fn state() -> Arc<SimState> {
        SimState::new(SimConfig::default(), "test").expect("state")
    }

    async fn call(state: &Arc<SimState>, chat: bool, body: &Value) -> Result<Bytes, ApiError> {
        let state = State(Arc::clone(state));
        let body = Bytes::from(body.to_string());
        let response = if chat {
            super::chat(state, body).await?
        } else {
            super::text(state, body).await?
        };
        Ok(axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body"))
    }

    /// The answer to `body`, whole, then streamed (asserting both agree).
    async fn answer(state: &Arc<SimState>, chat: bool, body: &Value) -> Answer {
        let whole: Value =
            serde_json::from_slice(&call(state, chat, body).await.expect("answer")).expect("json");
        let choice = &whole["choices"][0];
        let text = if chat {
            &choice["message"]["content"]
        } else {
            &choice["text"]
        };
        let whole = Answer {
            text: text.as_str().expect("text").to_owned(),
            finish: choice["finish_reason"].as_str().expect("finish").to_owned(),
            usage: uncached(whole["usage"].clone()),
        };
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        let bytes = call(state, chat, &streamed).await.expect("stream");
        let text = std::str::from_utf8(&bytes).expect("utf8");
        let events: Vec<&str> = text
            .split_terminator("\n\n")
            .map(|e| e.strip_prefix("data: ").expect("data"))
            .collect();
        assert_eq!(events.last(), Some(&"[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).expect("chunk"))
            .collect();
        if chat {
            assert_eq!(
                chunks[0]["choices"][0]["delta"],
                json!({"role": "assistant", "content": "", "refusal": null})
            );
        }
        let mut answer = Answer {
            text: String::new(),
            finish: String::new(),
            usage: Value::Null,
        };
        for chunk in &chunks {
            let Some(choice) = chunk["choices"].get(0) else {
                answer.usage = uncached(chunk["usage"].clone());
                continue;
            };
            let piece = if chat {
                &choice["delta"]["content"]
            } else {
                &choice["text"]
            };
            answer.text.push_str(piece.as_str().unwrap_or_default());
            if let Some(finish) = choice["finish_reason"].as_str() {
                answer.finish = finish.to_owned();
            }
        }
        assert_eq!(answer, whole, "streamed and whole answers differ");
        whole
    }

    fn chat_body(messages: Value, max_tokens: Option<u32>) -> Value {
        let mut body = json!({"messages": messages});
        if let Some(max) = max_tokens {
            body["max_tokens"] = json!(max);
        }
        body
    }

    fn continue_chat(messages: &Value, prefix: &str, max_tokens: Option<u32>) -> Value {
        let mut messages = messages.as_array().expect("messages").clone();
        messages.push(json!({"role": "assistant", "content": prefix}));
        let mut body = chat_body(Value::Array(messages), max_tokens);
        body["continue_final_message"] = json!(true);
        body["add_generation_prompt"] = json!(false);
        body
    }

    fn text_body(prompt: &str, max_tokens: Option<u32>) -> Value {
        let mut body = json!({"prompt": prompt});
        if let Some(max) = max_tokens {
            body["max_tokens"] = json!(max);
        }
        body
    }

    /// The first `k` tokens of `text`, and the rest.
    fn split(text: &str, k: usize) -> (String, String) {
        let words: Vec<&str> = text.split(' ').collect();
        let head = words[..k].join(" ");
        (text[..head.len()].to_owned(), text[head.len()..].to_owned())
    }

    fn splits(tokens: usize) -> Vec<usize> {
        vec![1, tokens / 2, tokens - 1]
    }

    #[tokio::test]
    async fn chat_continues_its_own_answer() {
        let state = state();
        let conversations = [
            json!([{"role": "user", "content": "Hello there."}]),
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "tell me about the"},
            ]),
            json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": [{"type": "text", "text": "more"}]},
            ]),
        ];
        for messages in &conversations {
            for max_tokens in [None, Some(12)] {
                let whole = answer(&state, true, &chat_body(messages.clone(), max_tokens)).await;
                let tokens = synth::count_tokens(&whole.text) as usize;
                for k in splits(tokens) {
                    let (head, tail) = split(&whole.text, k);
                    let rest = max_tokens.map(|m| m - k as u32);
                    let body = continue_chat(messages, &head, rest);
                    let resumed = answer(&state, true, &body).await;
                    assert_eq!(format!("{head}{}", resumed.text), whole.text, "k={k}");
                    assert_eq!(resumed.text, tail);
                    assert_eq!(resumed.finish, whole.finish);
                    let prompt =
                        chat_prompt(&parse_json(body.to_string().as_bytes()).expect("body"))
                            .expect("prompt");
                    assert_eq!(resumed.usage["prompt_tokens"], prompt.tokens());
                    assert_eq!(
                        resumed.usage["completion_tokens"],
                        synth::count_tokens(&tail)
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn completions_continue_their_own_answer() {
        let state = state();
        for prompt in ["Hello there.", "tell me about the", "x", "Ünïcode, then a "] {
            for max_tokens in [None, Some(12)] {
                let whole = answer(&state, false, &text_body(prompt, max_tokens)).await;
                let tokens = synth::count_tokens(&whole.text) as usize;
                for k in splits(tokens) {
                    let (head, tail) = split(&whole.text, k);
                    let rest = max_tokens.map(|m| m - k as u32);
                    let sent = format!("{prompt}{head}");
                    let resumed = answer(&state, false, &text_body(&sent, rest)).await;
                    assert_eq!(format!("{head}{}", resumed.text), whole.text, "k={k}");
                    assert_eq!(resumed.text, tail);
                    assert_eq!(resumed.finish, whole.finish);
                    assert_eq!(
                        resumed.usage["prompt_tokens"],
                        Prompt::from_text(sent).tokens()
                    );
                    assert_eq!(
                        resumed.usage["completion_tokens"],
                        synth::count_tokens(&tail)
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn continuing_a_finished_answer_generates_nothing() {
        let state = state();
        let messages = json!([{"role": "user", "content": "Hello there."}]);
        let whole = answer(&state, true, &chat_body(messages.clone(), None)).await;
        let done = answer(&state, true, &continue_chat(&messages, &whole.text, None)).await;
        assert_eq!((done.text.as_str(), done.finish.as_str()), ("", "stop"));
        assert_eq!(done.usage["completion_tokens"], 0);
        let whole = answer(&state, false, &text_body("Hello there.", None)).await;
        let sent = format!("Hello there.{}", whole.text);
        let done = answer(&state, false, &text_body(&sent, None)).await;
        assert_eq!((done.text.as_str(), done.finish.as_str()), ("", "stop"));
        assert_eq!(done.usage["completion_tokens"], 0);
    }

    #[tokio::test]
    async fn a_foreign_prefill_continues_from_the_whole_conversation() {
        let state = state();
        let messages = json!([{"role": "user", "content": "Hello there."}]);
        let body = continue_chat(&messages, "Sure, here it is", None);
        let resumed = answer(&state, true, &body).await;
        let request: ChatRequest = parse_json(body.to_string().as_bytes()).expect("body");
        let seed = synth::seed(DEFAULT_MODEL, &chat_prompt(&request).expect("prompt").text);
        let expected: String = (1..=16).map(|i| synth::token_text(seed, i)).collect();
        assert_eq!(resumed.text, expected);
        assert!(resumed.text.starts_with(' '));
        assert_eq!(resumed.finish, "stop");
        // An empty prefill is the fresh answer.
        let whole = answer(&state, true, &chat_body(messages.clone(), None)).await;
        let resumed = answer(&state, true, &continue_chat(&messages, "", None)).await;
        assert_eq!(resumed.text, whole.text);
    }

    #[tokio::test]
    async fn ordinary_prompts_stay_ordinary() {
        let state = state();
        let fresh = |prompt: &str| synth::completion_text(synth::seed(DEFAULT_MODEL, prompt), 16);
        // Ends with vocabulary words, but is no answer of the simulator's.
        for prompt in [
            "Tell me about the model answers",
            "the model answers with simulated tokens that arrive",
        ] {
            let got = answer(&state, false, &text_body(prompt, None)).await;
            assert_eq!(got.text, fresh(prompt));
        }
        // A real continuation, but with echo, n > 1 or as a list of prompts.
        let whole = answer(&state, false, &text_body("Hi.", None)).await;
        let (head, _) = split(&whole.text, 3);
        let sent = format!("Hi.{head}");
        let mut echo = text_body(&sent, None);
        echo["echo"] = json!(true);
        assert_eq!(answer(&state, false, &echo).await.text, fresh(&sent));
        let list = json!({"prompt": [sent.clone()]});
        assert_eq!(answer(&state, false, &list).await.text, fresh(&sent));
        let many = json!({"prompt": sent.clone(), "n": 2});
        let bytes = call(&state, false, &many).await.expect("answer");
        let value: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(value["choices"][0]["text"], fresh(&sent));
    }

    #[tokio::test]
    async fn continuation_flags_are_checked_like_vllm() {
        let state = state();
        let user = json!([{"role": "user", "content": "hi"}]);
        let mut both = continue_chat(&user, "x", None);
        both["add_generation_prompt"] = json!(true);
        let mut omitted = both.clone();
        omitted
            .as_object_mut()
            .expect("body")
            .remove("add_generation_prompt");
        for body in [both, omitted] {
            let error = call(&state, true, &body).await.expect_err("400");
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
            assert_eq!(
                error.message,
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            );
        }
        let mut no_assistant = chat_body(user, None);
        no_assistant["continue_final_message"] = json!(true);
        no_assistant["add_generation_prompt"] = json!(false);
        let error = call(&state, true, &no_assistant).await.expect_err("400");
        assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(
            error
                .message
                .contains("last message is not from the assistant"),
            "{}",
            error.message
        );
    }
}
