//! `POST /v1/images/generations` (JSON) and `POST /v1/images/edits`
//! (multipart): small PNGs derived from the prompt, returned inline.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::json_response;
use crate::sim::error::ApiError;
use crate::sim::generation::Pacer;
use crate::sim::metrics::FinishReason;
use crate::sim::multipart;
use crate::sim::protocol::{parse_json, ImageRequest};
use crate::sim::state::{unix_now, SimState};
use crate::sim::synth;

/// Most images one request may ask for (OpenAI's limit).
pub const MAX_IMAGES: u32 = 10;

#[derive(Serialize)]
struct Image {
    #[serde(skip_serializing_if = "Option::is_none")]
    b64_json: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    revised_prompt: String,
}

#[derive(Serialize)]
struct ImagesResponse {
    created: u64,
    data: Vec<Image>,
}

/// Image generation from a JSON request.
pub async fn generate(
    State(state): State<Arc<SimState>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    state.check_ready()?;
    let request: ImageRequest = parse_json(&body)?;
    let model = state.models.resolve(request.model.as_deref())?;
    let seed = format!("{model}\n{}", request.prompt);
    answer(&state, &request, &seed).await
}

/// Image edits from a multipart form with `image` (or `image[]`) and `prompt`.
pub async fn edit(
    State(state): State<Arc<SimState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    state.check_ready()?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|ct| multipart::is_multipart(ct))
        .ok_or_else(|| ApiError::bad_request("Expected a multipart/form-data body."))?;
    let form = multipart::parse(content_type, body)
        .await
        .map_err(|e| ApiError::bad_request(format!("Invalid multipart body: {e}")))?;
    let image = form
        .field("image")
        .or_else(|| form.field("image[]"))
        .filter(|f| !f.data.is_empty())
        .ok_or_else(|| ApiError::bad_request("'image' is a required file field."))?;
    let prompt = form
        .text("prompt")
        .ok_or_else(|| ApiError::bad_request("'prompt' is a required field."))?;
    let n = match form.text("n") {
        None => None,
        Some(n) => Some(
            n.trim()
                .parse()
                .map_err(|_| ApiError::bad_request(format!("n must be an integer, got '{n}'.")))?,
        ),
    };
    let request = ImageRequest {
        model: form.text("model").map(str::to_owned),
        prompt: prompt.to_owned(),
        n,
        response_format: form.text("response_format").map(str::to_owned),
    };
    let model = state.models.resolve(request.model.as_deref())?;
    let seed = format!(
        "{model}\n{prompt}\n{}",
        hex::encode(Sha256::digest(&image.data))
    );
    answer(&state, &request, &seed).await
}

async fn answer(
    state: &SimState,
    request: &ImageRequest,
    seed: &str,
) -> Result<Response, ApiError> {
    let n = request.n.unwrap_or(1);
    if !(1..=MAX_IMAGES).contains(&n) {
        return Err(ApiError::bad_request(format!(
            "n must be between 1 and {MAX_IMAGES}, got {n}."
        )));
    }
    let as_url = match request.response_format.as_deref() {
        None | Some("b64_json") => false,
        Some("url") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "response_format must be 'b64_json' or 'url', got '{other}'."
            )))
        }
    };
    state.check_injected_failure()?;
    let slot = state.admission.admit(0).await;
    Pacer::start(&state.config).wait_for(0).await;
    let data = (0..n)
        .map(|i| {
            let png = synth::png(&format!("{seed}\n{i}"));
            let b64 = base64::engine::general_purpose::STANDARD.encode(png);
            let (b64_json, url) = if as_url {
                (None, Some(format!("data:image/png;base64,{b64}")))
            } else {
                (Some(b64), None)
            };
            Image {
                b64_json,
                url,
                revised_prompt: request.prompt.clone(),
            }
        })
        .collect();
    let body = serde_json::to_vec(&ImagesResponse {
        created: unix_now(),
        data,
    })
    .unwrap_or_default();
    state.metrics.finished(FinishReason::Stop);
    drop(slot);
    Ok(json_response(body))
}
