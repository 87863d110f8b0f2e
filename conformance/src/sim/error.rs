//! Errors answered in vLLM's OpenAI-compatible envelope.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error a handler answers with, rendered as vLLM does:
/// `{"error":{"message":..,"type":..,"param":null,"code":<status>}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status, repeated as the numeric `code`.
    pub status: StatusCode,
    /// vLLM's error type name, such as `BadRequestError`.
    pub kind: &'static str,
    /// Human-readable explanation.
    pub message: String,
}

impl ApiError {
    /// 400 `BadRequestError`: the request is malformed or out of range.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequestError", message)
    }

    /// 404 `NotFoundError` for a model name that is neither served nor a loaded adapter.
    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!("The model `{model}` does not exist."),
        )
    }

    /// 503 while the simulated model is still loading.
    pub fn loading() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            "The model is still loading (startup delay); retry later.",
        )
    }

    /// 500 injected by the fail rate.
    pub fn injected_failure() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            "Simulated failure (fail rate).",
        )
    }

    /// 413 for a body over the configured limit.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BadRequestError",
            format!("Request body exceeds {limit} bytes."),
        )
    }

    /// Any other status and type.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
        }
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: u16,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&Envelope {
            error: Body {
                message: &self.message,
                kind: self.kind,
                param: None,
                code: self.status.as_u16(),
            },
        })
        .unwrap_or_default();
        let mut response = (self.status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn renders_vllm_envelope() {
        let response = ApiError::model_not_found("x").into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .expect("body");
        let value: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(
            value,
            serde_json::json!({"error": {
                "message": "The model `x` does not exist.",
                "type": "NotFoundError",
                "param": null,
                "code": 404
            }})
        );
    }
}
