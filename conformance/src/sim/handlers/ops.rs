//! Operational endpoints: `/health`, `/healthz`, `/metrics`, `/v1/models`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::json_response;
use crate::sim::error::ApiError;
use crate::sim::metrics;
use crate::sim::state::SimState;

/// vLLM's readiness: 503 during the startup delay, then 200 with an empty body.
pub async fn health(State(state): State<Arc<SimState>>) -> Result<StatusCode, ApiError> {
    state.check_ready().map(|()| StatusCode::OK)
}

/// Liveness: 200 as soon as the server listens.
pub async fn healthz() -> &'static str {
    "ok"
}

/// Prometheus text exposition.
pub async fn metrics(State(state): State<Arc<SimState>>) -> Response {
    let body = state.metrics.render(state.admission.cache_usage());
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(metrics::CONTENT_TYPE),
    );
    response
}

/// Base models and loaded LoRA adapters.
pub async fn models(State(state): State<Arc<SimState>>) -> Result<Response, ApiError> {
    state.check_ready()?;
    Ok(json_response(state.models.list_json()))
}
