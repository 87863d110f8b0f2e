//! The `model` field of a `multipart/form-data` body.

use std::convert::Infallible;

use bytes::Bytes;

use super::validate_model_name;
use crate::errors::ApiError;

/// Finds the `model` form field (a value part, not a file) in a buffered
/// multipart body, trimmed and validated.
///
/// Parts are read without being copied out. `Ok(None)` when there is no
/// such field or it is blank. A body with two `model` fields (which one the
/// backend would take is anyone's guess) is a 400, and so is one the parser
/// cannot read before the field; what cannot be read after it is the
/// backend's to judge. The body is never rewritten: the caller forwards its
/// own copy as is.
pub async fn multipart_model(body: Bytes, boundary: &str) -> Result<Option<String>, ApiError> {
    let stream = futures::stream::once(async move { Ok::<Bytes, Infallible>(body) });
    let mut parts = multer::Multipart::new(stream, boundary);
    let mut found: Option<Bytes> = None;
    loop {
        let field = match parts.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(_) if found.is_some() => break,
            Err(e) => return Err(multipart_error(e)),
        };
        if field.name() != Some("model") || field.file_name().is_some() {
            continue;
        }
        if found.is_some() {
            return Err(ApiError::invalid_field(
                "model",
                "the form has more than one 'model' field",
            ));
        }
        found = Some(field.bytes().await.map_err(multipart_error)?);
    }
    let Some(value) = found else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&value)
        .map_err(|_| ApiError::invalid_field("model", "must be valid UTF-8"))?;
    let name = text.trim();
    if name.is_empty() {
        return Ok(None);
    }
    validate_model_name(name)?;
    Ok(Some(name.to_owned()))
}

fn multipart_error(e: multer::Error) -> ApiError {
    ApiError::bad_request(format!("Invalid multipart/form-data body: {e}"))
}
