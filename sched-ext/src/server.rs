//! The HTTP layer: routes to [`Extender`] calls.
//!
//! - `POST /filter` → `ExtenderFilterResult` (always 200; failures are in
//!   its `Error` field, which kube-scheduler reports).
//! - `POST /prioritize` and its alias `POST /score` → `HostPriorityList`
//!   (400 with a plain-text reason when the request cannot be answered).
//! - `GET /healthz` → 200, empty body.
//! - `GET /metrics` → Prometheus text.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::Extender;

/// The extender's routes; bodies up to `max_body_bytes` are accepted.
pub fn router(extender: Arc<Extender>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/score", post(prioritize))
        .route("/healthz", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(extender)
}

async fn filter(State(extender): State<Arc<Extender>>, body: Bytes) -> Response {
    // Passing nodes go back as slices of the request body, not copies.
    let response = extender.filter_response(&body);
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::new(response.into_body(&body)),
    )
        .into_response()
}

async fn prioritize(State(extender): State<Arc<Extender>>, body: Bytes) -> Response {
    match extender.prioritize(&body) {
        Ok(bytes) => json(bytes),
        Err(err) => (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
    }
}

async fn metrics(State(extender): State<Arc<Extender>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        extender.metrics().render(),
    )
        .into_response()
}

fn json(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}
