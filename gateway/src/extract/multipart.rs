//! The `model` field of a `multipart/form-data` body.

use std::convert::Infallible;

use bytes::Bytes;

use super::validate_model_name;
use crate::errors::ApiError;

/// Finds the first `model` form field (a value part, not a file) in a
/// buffered multipart body, trimmed and validated.
///
/// Parts before it are skipped without being copied out and parsing stops
/// as soon as it is found. `Ok(None)` when there is no such field or it is
/// blank. A body the parser cannot read before the field is found is a 400.
/// The body is never rewritten: the caller forwards its own copy as is.
pub async fn multipart_model(body: Bytes, boundary: &str) -> Result<Option<String>, ApiError> {
    let stream = futures::stream::once(async move { Ok::<Bytes, Infallible>(body) });
    let mut parts = multer::Multipart::new(stream, boundary);
    loop {
        let field = parts.next_field().await.map_err(multipart_error)?;
        let Some(field) = field else {
            return Ok(None);
        };
        if field.name() != Some("model") || field.file_name().is_some() {
            continue;
        }
        let value = field.bytes().await.map_err(multipart_error)?;
        let text = std::str::from_utf8(&value)
            .map_err(|_| ApiError::invalid_field("model", "must be valid UTF-8"))?;
        let name = text.trim();
        if name.is_empty() {
            return Ok(None);
        }
        validate_model_name(name)?;
        return Ok(Some(name.to_owned()));
    }
}

fn multipart_error(e: multer::Error) -> ApiError {
    ApiError::bad_request(format!("Invalid multipart/form-data body: {e}"))
}
