//! The HTTP layer: routes to [`Extender`] calls.
//!
//! - `POST /filter` → `ExtenderFilterResult` (always 200; failures are in
//!   its `Error` field, which kube-scheduler reports).
//! - `POST /prioritize` and its alias `POST /score` → `HostPriorityList`
//!   (400 with a plain-text reason when the request cannot be answered).
//! - `GET /healthz` → 200, empty body.
//! - `GET /metrics` → Prometheus text.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::body::{BodyError, BodyPool};
use crate::Extender;

/// What the handlers share.
#[derive(Clone)]
struct Server {
    extender: Arc<Extender>,
    bodies: Arc<BodyPool>,
    max_body_bytes: usize,
}

/// The extender's routes; bodies up to `max_body_bytes` are accepted
/// (413 beyond).
pub fn router(extender: Arc<Extender>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/score", post(prioritize))
        .route("/healthz", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics))
        .with_state(Server {
            extender,
            bodies: BodyPool::new(),
            max_body_bytes,
        })
}

async fn filter(State(server): State<Server>, request: Request) -> Response {
    let body = match server.read(request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    // Passing nodes go back as slices of the request body, not copies.
    let response = server.extender.filter_response(&body);
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::new(response.into_body(&body)),
    )
        .into_response()
}

async fn prioritize(State(server): State<Server>, request: Request) -> Response {
    let body = match server.read(request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    match server.extender.prioritize(&body) {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(err) => (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
    }
}

async fn metrics(State(server): State<Server>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        server.extender.metrics().render(),
    )
        .into_response()
}

impl Server {
    /// The request's body, or the answer to send instead.
    async fn read(&self, request: Request) -> Result<axum::body::Bytes, Response> {
        let length = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse().ok());
        self.bodies
            .read(request.into_body(), length, self.max_body_bytes)
            .await
            .map_err(|err| {
                let status = match err {
                    BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
                    BodyError::Read(_) => StatusCode::BAD_REQUEST,
                };
                (status, err.to_string()).into_response()
            })
    }
}
