//! `POST /v1/embeddings`: unit vectors derived from a hash of each input.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;

use super::json_response;
use crate::sim::completion::response_id;
use crate::sim::error::ApiError;
use crate::sim::generation::{total_prompt_tokens, Pacer};
use crate::sim::metrics::FinishReason;
use crate::sim::prefix_cache::{prefill_delay, Prompt};
use crate::sim::protocol::{parse_json, EmbeddingRequest, Usage};
use crate::sim::state::{unix_now, SimState};
use crate::sim::synth;

/// Largest `dimensions` accepted.
pub const MAX_DIMENSIONS: u32 = 65_536;

#[derive(Serialize)]
#[serde(untagged)]
enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct Item {
    index: usize,
    object: &'static str,
    embedding: Vector,
}

#[derive(Serialize)]
struct EmbeddingResponse<'a> {
    id: String,
    object: &'static str,
    created: u64,
    model: &'a str,
    data: Vec<Item>,
    usage: Usage,
}

/// One embedding per input, after the TTFT.
pub async fn embeddings(
    State(state): State<Arc<SimState>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    state.check_ready()?;
    let request: EmbeddingRequest = parse_json(&body)?;
    let model = state.models.resolve(request.model.as_deref())?;
    let prompts = Prompt::completion(&request.input).ok_or_else(|| {
        ApiError::bad_request("input must be a string, a list of strings, or token ids.")
    })?;
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "encoding_format must be 'float' or 'base64', got '{other}'."
            )))
        }
    };
    let dim = match request.dimensions {
        None => state.config.embedding_dim,
        Some(d) if (1..=MAX_DIMENSIONS).contains(&d) => d as usize,
        Some(d) => {
            return Err(ApiError::bad_request(format!(
                "dimensions must be between 1 and {MAX_DIMENSIONS}, got {d}."
            )))
        }
    };
    let prompt_tokens = total_prompt_tokens(&prompts);
    state.check_injected_failure()?;
    let slot = state.admission.admit(u64::from(prompt_tokens)).await;
    state.metrics.prompt_tokens.inc_by(u64::from(prompt_tokens));
    let prefill = prefill_delay(prompt_tokens, state.config.prefill_tokens_per_second);
    Pacer::with_prefill(&state.config, prefill)
        .wait_for(0)
        .await;
    let data = prompts
        .iter()
        .enumerate()
        .map(|(index, input)| {
            let vector = synth::embedding(&input.text, dim);
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                Vector::Float(vector)
            };
            Item {
                index,
                object: "embedding",
                embedding,
            }
        })
        .collect();
    let body = serde_json::to_vec(&EmbeddingResponse {
        id: response_id("embd"),
        object: "list",
        created: unix_now(),
        model: &model,
        data,
        usage: Usage::new(prompt_tokens, 0),
    })
    .unwrap_or_default();
    state.metrics.finished(FinishReason::Stop);
    drop(slot);
    Ok(json_response(body))
}
