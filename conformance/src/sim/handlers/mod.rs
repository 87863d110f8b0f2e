//! HTTP handlers, one module per API family.

pub mod completions;
pub mod embeddings;
pub mod images;
pub mod lora;
pub mod messages;
pub mod ops;
pub mod prefix_match;
pub mod recorder_api;
pub mod responses;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

/// A 200 JSON response from already serialized bytes.
pub(crate) fn json_response(body: Vec<u8>) -> Response {
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
