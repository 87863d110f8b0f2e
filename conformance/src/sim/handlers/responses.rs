//! `POST /v1/responses` and its follow-up routes.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;

use super::completions::generate;
use super::json_response;
use crate::sim::error::ApiError;
use crate::sim::generation::Plan;
use crate::sim::protocol::{parse_json, SamplingFields};
use crate::sim::responses::{
    capped_length, input_items, items_page, prompt, ResponseMeta, ResponsesRender, ResponsesRequest,
};
use crate::sim::state::{unix_now, SimState};
use crate::sim::tools::{ToolCall, Tools};

/// Creates a response, streamed or whole; it is kept for the follow-up
/// routes unless the request says `store: false`.
pub async fn create(State(state): State<Arc<SimState>>, body: Bytes) -> Result<Response, ApiError> {
    state.check_ready()?;
    let request: ResponsesRequest = parse_json(&body)?;
    if request.model.is_none() {
        return Err(ApiError::bad_request("model: Field required"));
    }
    let model = state.models.resolve(request.model.as_deref())?;
    let tools = Tools::from_responses(request.tools.as_ref(), request.tool_choice.as_ref())?;
    let items = request
        .input
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("input is required."))
        .and_then(|input| {
            input_items(input).ok_or_else(|| {
                ApiError::bad_request("input must be a string or a non-empty array of items.")
            })
        })?;
    if let Some(previous) = request.previous_response_id.as_deref() {
        if state.responses.get(previous).is_none() {
            return Err(not_found(previous));
        }
    }
    let fields = SamplingFields {
        stream: request.stream,
        max_tokens: capped_length(request.max_output_tokens, &state.config),
        cache_salt: request.cache_salt.clone(),
        temperature: request.temperature,
        top_p: request.top_p,
        presence_penalty: request.presence_penalty,
        frequency_penalty: request.frequency_penalty,
        ..SamplingFields::default()
    };
    let plan = Plan::new(
        &state.config,
        model,
        &[prompt(request.instructions.as_deref(), &items)],
        &fields,
        "input",
    )?;
    let user_turn = items.last().is_some_and(|item| item["role"] == "user");
    let seed = plan.tool_seed(request.seed);
    let call = tools
        .pick(user_turn)
        .map(|tool| ToolCall::new(tool, &tools, seed));
    let plan = plan.with_tool_call(call);
    let meta = ResponseMeta::new(&request, &tools, unix_now());
    let render = ResponsesRender::new(Arc::clone(&state), meta, items);
    generate(state, plan, render).await
}

/// `POST /v1/responses/compact`: not offered (vLLM has no compaction), 404.
pub async fn compact() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NotFoundError",
        "Response compaction is not supported by this server.",
    )
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("Response with id '{id}' not found."),
    )
}

fn to_body(value: &serde_json::Value) -> Response {
    json_response(serde_json::to_vec(value).unwrap_or_default())
}

/// `GET /v1/responses/{id}`.
pub async fn retrieve(
    State(state): State<Arc<SimState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let response = state.responses.get(&id).ok_or_else(|| not_found(&id))?;
    Ok(to_body(&response))
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(state): State<Arc<SimState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if !state.responses.remove(&id) {
        return Err(not_found(&id));
    }
    Ok(to_body(
        &json!({"id": id, "object": "response.deleted", "deleted": true}),
    ))
}

/// `POST /v1/responses/{id}/cancel`: the response, `cancelled` when it was
/// still streaming.
pub async fn cancel(
    State(state): State<Arc<SimState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let response = state.responses.cancel(&id).ok_or_else(|| not_found(&id))?;
    Ok(to_body(&response))
}

/// `GET /v1/responses/{id}/input_items?order=&limit=&after=`.
pub async fn input_items_list(
    State(state): State<Arc<SimState>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let items = state
        .responses
        .input_items(&id)
        .ok_or_else(|| not_found(&id))?;
    let limit = query
        .get("limit")
        .map(|l| {
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request("limit must be an integer from 1 to 100."))
        })
        .transpose()?;
    Ok(to_body(&items_page(
        &items,
        query.get("order").map(String::as_str),
        limit,
        query.get("after").map(String::as_str),
    )))
}
