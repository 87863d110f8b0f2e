//! vLLM's runtime LoRA endpoints: `POST /v1/load_lora_adapter` and
//! `POST /v1/unload_lora_adapter`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;

use crate::sim::error::ApiError;
use crate::sim::protocol::parse_json;
use crate::sim::state::{unix_now, SimState};

#[derive(Debug, Deserialize)]
struct LoraRequest {
    #[serde(default)]
    lora_name: Option<String>,
    #[serde(default)]
    lora_path: Option<String>,
}

/// Loads an adapter; it then appears in `/v1/models` and is accepted as `model`.
pub async fn load(State(state): State<Arc<SimState>>, body: Bytes) -> Result<Response, ApiError> {
    state.check_ready()?;
    let request: LoraRequest = parse_json(&body)?;
    let message = state.models.load(
        request.lora_name.as_deref().unwrap_or_default(),
        request.lora_path.as_deref().unwrap_or_default(),
        unix_now(),
    )?;
    Ok(text(message))
}

/// Unloads an adapter.
pub async fn unload(State(state): State<Arc<SimState>>, body: Bytes) -> Result<Response, ApiError> {
    state.check_ready()?;
    let request: LoraRequest = parse_json(&body)?;
    let message = state
        .models
        .unload(request.lora_name.as_deref().unwrap_or_default())?;
    Ok(text(message))
}

/// vLLM answers success with a plain text sentence.
fn text(message: String) -> Response {
    let mut response = message.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
