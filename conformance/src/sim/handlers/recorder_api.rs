//! `/sim/requests` (read and clear the request log) and the echo answered
//! for every path the simulator does not otherwise serve.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::json_response;
use crate::sim::error::ApiError;
use crate::sim::recorder::RequestRecord;
use crate::sim::state::SimState;

/// The recorded requests, oldest first.
pub async fn list(State(state): State<Arc<SimState>>) -> Response {
    let records = state.recorder.snapshot();
    let body: Vec<&RequestRecord> = records.iter().map(AsRef::as_ref).collect();
    json_response(serde_json::to_vec(&body).unwrap_or_default())
}

/// Forgets the recorded requests.
pub async fn clear(State(state): State<Arc<SimState>>) -> Response {
    let cleared = state.recorder.clear();
    json_response(
        serde_json::to_vec(&serde_json::json!({ "cleared": cleared })).unwrap_or_default(),
    )
}

/// Any other path: 200 with this request's record, so a test can see what a
/// gateway forwarded (rewritten path, added or removed headers, body).
pub async fn echo(request: Request) -> Result<Response, ApiError> {
    let record = request
        .extensions()
        .get::<Arc<RequestRecord>>()
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "NotFoundError",
                format!("No simulator endpoint at {}.", request.uri().path()),
            )
        })?;
    Ok(json_response(
        serde_json::to_vec(record.as_ref()).unwrap_or_default(),
    ))
}
