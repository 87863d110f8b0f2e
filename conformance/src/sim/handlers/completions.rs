//! `POST /v1/chat/completions` and `POST /v1/completions`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use bytes::Bytes;

use super::json_response;
use crate::sim::completion::{ChunkWriter, Flavor};
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
    let tools = Tools::from_chat(
        request.tools.as_ref(),
        request.tool_choice.as_ref(),
        request.functions.as_ref(),
        request.function_call.as_ref(),
    )?;
    let plan = Plan::new(
        &state.config,
        model,
        &[prompt],
        &request.sampling,
        "messages",
    )?;
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
    let plan = Plan::new(&state.config, model, &prompts, &request.sampling, "prompt")?;
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
