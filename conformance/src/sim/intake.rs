//! The one middleware every request passes: buffer the body, record the
//! request, and stamp the answer with `X-Served-By` and the request counter.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderName};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;

use super::error::ApiError;
use super::multipart;
use super::recorder::RequestRecord;
use super::state::SimState;

/// Header naming the simulator instance that answered.
pub static SERVED_BY: HeaderName = HeaderName::from_static("x-served-by");

/// Paths under this prefix are the simulator's own API and are not recorded.
pub const CONTROL_PREFIX: &str = "/sim/";

/// Records the request (unless it targets [`CONTROL_PREFIX`]) and labels the response.
pub async fn intake(State(state): State<Arc<SimState>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let mut response = if request.uri().path().starts_with(CONTROL_PREFIX) {
        next.run(request).await
    } else {
        match capture(&state, request).await {
            Ok(request) => next.run(request).await,
            Err(error) => error.into_response(),
        }
    };
    let endpoint = route.as_ref().map_or("other", MatchedPath::as_str);
    state.metrics.answered(endpoint, response.status());
    response
        .headers_mut()
        .insert(SERVED_BY.clone(), state.pod_name.clone());
    response
}

/// Buffers the body (bounded), records the request, and rebuilds it with the
/// record attached for the echo handler.
async fn capture(state: &SimState, request: Request) -> Result<Request, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = read_body(body, state.config.max_body_bytes).await?;
    let model = model_of(&parts.headers, &bytes).await;
    let record = state.recorder.record(RequestRecord::new(
        &parts.method,
        &parts.uri,
        &parts.headers,
        &bytes,
        model,
    ));
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.extensions_mut().insert(record);
    Ok(request)
}

/// Buffers a request body of at most `limit` bytes (413 beyond it).
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    Ok(Limited::new(body, limit)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<LengthLimitError>() {
                ApiError::payload_too_large(limit)
            } else {
                ApiError::bad_request(format!("Failed to read the request body: {e}"))
            }
        })?
        .to_bytes())
}

#[derive(Deserialize)]
struct ModelField {
    model: Option<String>,
}

/// `model` from a multipart form field or a JSON object body, if there is one.
pub async fn model_of(headers: &HeaderMap, body: &Bytes) -> Option<String> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if multipart::is_multipart(content_type) {
        let form = multipart::parse(content_type, body.clone()).await.ok()?;
        return form.text("model").map(str::to_owned);
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    serde_json::from_slice::<ModelField>(body).ok()?.model
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finds_the_model_in_json_and_multipart() {
        let mut json = HeaderMap::new();
        json.insert(
            header::CONTENT_TYPE,
            "application/json".parse().expect("value"),
        );
        let body = Bytes::from_static(br#" {"messages":[],"model":"m1"}"#);
        assert_eq!(model_of(&json, &body).await.as_deref(), Some("m1"));
        assert_eq!(model_of(&json, &Bytes::from_static(b"[1]")).await, None);
        assert_eq!(model_of(&json, &Bytes::from_static(b"{bad")).await, None);
        assert_eq!(
            model_of(&HeaderMap::new(), &body).await.as_deref(),
            Some("m1")
        );

        let mut form = HeaderMap::new();
        form.insert(
            header::CONTENT_TYPE,
            "multipart/form-data; boundary=B".parse().expect("value"),
        );
        let body = Bytes::from_static(
            b"--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nimg\r\n--B--\r\n",
        );
        assert_eq!(model_of(&form, &body).await.as_deref(), Some("img"));
    }
}
