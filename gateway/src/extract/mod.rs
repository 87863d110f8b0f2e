//! Model extraction: which model a request is for.
//!
//! The gateway routes on a model name before it picks an upstream, so every
//! request goes through the same cascade, first match wins:
//!
//! 1. the `X-Model-ID` header (trimmed, non-empty);
//! 2. a `/model/<name>/...` path prefix, which is stripped from the path sent
//!    upstream (`/model/<name>` alone becomes `/`, the query string is kept);
//! 3. the top-level `model` string of a JSON body (a POST body that parses
//!    as JSON, whatever its Content-Type, as engines read it);
//! 4. the `model` field of a `multipart/form-data` body (POST; the value is
//!    trimmed, the body itself is forwarded untouched).
//!
//! [`from_head`] answers from the request head alone; [`body_kind`] says
//! how a POST body is read (the proxy reads every one, since a body that
//! names another model must be rewritten or refused); [`parse_json`] and [`multipart_model`] read
//! it. [`extract`] runs the whole cascade for simple callers and tests.
//!
//! Every name is checked by [`validate_model_name`]; a bad one is a 400
//! `invalid_field_value` on `model`, and no model at all is
//! [`ApiError::missing_model`].

mod json;
mod multipart;
mod path;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, Method};

use crate::errors::ApiError;

pub use json::{parse_json, JsonView, OutputLimit, RawJson};
pub use multipart::multipart_model;
pub use path::percent_decode;

/// Header that names the model explicitly; it beats every other source.
pub const MODEL_HEADER: &str = "x-model-id";
/// [`MODEL_HEADER`] parsed once, for lookups.
const MODEL_HEADER_NAME: http::HeaderName = http::HeaderName::from_static(MODEL_HEADER);

/// Longest model name accepted, in bytes.
pub const MAX_MODEL_NAME_LEN: usize = 256;

/// Where the model name of a request came from, for logs and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelSource {
    /// The `X-Model-ID` header.
    Header,
    /// The `/model/<name>/` path prefix.
    PathPrefix,
    /// The top-level `model` field of a JSON body.
    JsonBody,
    /// The `model` field of a `multipart/form-data` body.
    Multipart,
}

impl ModelSource {
    /// A short, stable label: `header`, `path`, `json` or `multipart`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelSource::Header => "header",
            ModelSource::PathPrefix => "path",
            ModelSource::JsonBody => "json",
            ModelSource::Multipart => "multipart",
        }
    }
}

impl std::fmt::Display for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The model a request asks for, and how to forward its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    /// The validated model name, as the client wrote it (before alias resolution).
    pub model: String,
    /// Which part of the request named the model.
    pub source: ModelSource,
    /// The path and query to send upstream when the request path carried a
    /// `/model/<name>` prefix (it is stripped whatever source won); `None`
    /// means the original path is forwarded as it is.
    pub forward_path: Option<String>,
}

/// How the body of a request is read.
///
/// Every POST body is read before it is forwarded: an engine parses a body
/// as JSON whatever its `Content-Type` says (llama.cpp and Ollama ignore
/// the header, FastAPI engines take no type and any `+json` type), so the
/// gateway reads what the engine will read. The kind decides only how a
/// body that is not JSON is answered (`docs/gateway.md`, "Request bodies").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyKind {
    /// A POST declared as JSON (`application/json` or any
    /// `application/*+json`): read it with [`parse_json`].
    Json,
    /// A POST with a `multipart/form-data` body: read it with [`multipart_model`].
    Multipart {
        /// The boundary from the Content-Type header.
        boundary: String,
    },
    /// A POST without `Content-Type`: JSON when it parses as JSON (as
    /// FastAPI-based engines such as vLLM read it).
    Untyped,
    /// A POST declaring another type (`text/plain`, multipart without a
    /// boundary, ...): read as JSON all the same when it parses.
    Foreign,
    /// Not a POST: the body is not looked at.
    Other,
}

/// Finds the model from the request head alone: `X-Model-ID`, then the
/// `/model/<name>` path prefix.
///
/// `path_and_query` is the request target in origin form (`/v1/...?...`).
/// Both sources apply to every method; `method` is taken so that callers
/// pass the head the same way to [`from_head`] and [`body_kind`].
/// `Ok(None)` means the body has to be consulted (see [`body_kind`]). A
/// `/model/<name>` prefix is stripped from the forwarded path even when the
/// header names the model, because the prefix is a gateway address that no
/// backend serves.
pub fn from_head(
    _method: &Method,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Result<Option<Extracted>, ApiError> {
    let prefix = path::split_model_prefix(path_and_query);

    if let Some(value) = headers.get(MODEL_HEADER_NAME) {
        let text = std::str::from_utf8(value.as_bytes())
            .map_err(|_| ApiError::invalid_field("model", "X-Model-ID must be valid UTF-8"))?;
        let name = text.trim();
        if !name.is_empty() {
            validate_model_name(name)?;
            return Ok(Some(Extracted {
                model: name.to_owned(),
                source: ModelSource::Header,
                forward_path: prefix.map(|p| p.forward_path()),
            }));
        }
    }

    match prefix {
        Some(p) => {
            let name = p.decoded_name()?;
            validate_model_name(&name)?;
            Ok(Some(Extracted {
                model: name.into_owned(),
                source: ModelSource::PathPrefix,
                forward_path: Some(p.forward_path()),
            }))
        }
        None => Ok(None),
    }
}

/// Says how the body of a request is read.
///
/// Only POST bodies are considered. A Content-Type whose media type is
/// `application/json` or `application/<anything>+json` (any case, any
/// parameters) means JSON; `multipart/form-data` with a usable boundary
/// means multipart; no Content-Type at all is [`BodyKind::Untyped`];
/// anything else, including multipart without a boundary, is
/// [`BodyKind::Foreign`].
pub fn body_kind(method: &Method, headers: &HeaderMap) -> BodyKind {
    if method != Method::POST {
        return BodyKind::Other;
    }
    let Some(content_type) = headers
        .get(CONTENT_TYPE)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
    else {
        return if headers.contains_key(CONTENT_TYPE) {
            BodyKind::Foreign
        } else {
            BodyKind::Untyped
        };
    };
    if is_json_media_type(content_type) {
        return BodyKind::Json;
    }
    if contains_ignore_ascii_case(content_type, "multipart/form-data") {
        if let Ok(boundary) = multer::parse_boundary(content_type) {
            return BodyKind::Multipart { boundary };
        }
    }
    BodyKind::Foreign
}

/// Whether a Content-Type names JSON as FastAPI reads it: the media type
/// `application/json`, or `application/` with a `+json` suffix.
pub fn is_json_media_type(content_type: &str) -> bool {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .as_bytes();
    let Some(sub) = media
        .get(..12)
        .filter(|t| t.eq_ignore_ascii_case(b"application/"))
        .map(|_| &media[12..])
    else {
        return false;
    };
    sub.eq_ignore_ascii_case(b"json")
        || (sub.len() > 5 && sub[sub.len() - 5..].eq_ignore_ascii_case(b"+json"))
}

/// Runs the whole cascade on a request whose body, if any, is already in memory.
///
/// `body` is consulted only when the head names no model and [`body_kind`]
/// says the body can. The proxy's hot path calls the pieces directly so it
/// can skip buffering; this is for simple callers and tests.
pub async fn extract(
    method: &Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Option<&Bytes>,
) -> Result<Extracted, ApiError> {
    if let Some(found) = from_head(method, path_and_query, headers)? {
        return Ok(found);
    }
    let Some(body) = body else {
        return Err(ApiError::missing_model());
    };
    let found = match body_kind(method, headers) {
        BodyKind::Json => parse_json(body)?
            .model
            .map(|m| (m.into_owned(), ModelSource::JsonBody)),
        BodyKind::Multipart { boundary } => multipart_model(body.clone(), &boundary)
            .await?
            .map(|m| (m, ModelSource::Multipart)),
        BodyKind::Untyped | BodyKind::Foreign => parse_json(body)
            .ok()
            .and_then(|v| v.model)
            .map(|m| (m.into_owned(), ModelSource::JsonBody)),
        BodyKind::Other => None,
    };
    match found {
        Some((model, source)) => Ok(Extracted {
            model,
            source,
            forward_path: None,
        }),
        None => Err(ApiError::missing_model()),
    }
}

/// Checks a model name from any source; the error is a 400
/// `invalid_field_value` on `model` that says what is wrong.
///
/// A name is 1 to [`MAX_MODEL_NAME_LEN`] bytes, has no control characters,
/// no leading or trailing whitespace, and cannot act as a path: no leading
/// `/`, no `.` or `..` segment, no backslash and no percent-encoded dot,
/// slash or backslash. Inner `/` stays legal (`org/model` names are common).
pub fn validate_model_name(name: &str) -> Result<(), ApiError> {
    // Most names (`llama-3.1-8b`, `org:model_v2`) have none of the
    // characters the checks below look for: one pass settles them.
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':');
    if !name.is_empty()
        && name.len() <= MAX_MODEL_NAME_LEN
        && name.bytes().all(plain)
        && name != "."
        && name != ".."
    {
        return Ok(());
    }
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_MODEL_NAME_LEN {
        "must be at most 256 bytes long"
    } else if name.chars().any(char::is_control) {
        "must not contain control characters"
    } else if name.trim() != name {
        "must not begin or end with whitespace"
    } else if name.starts_with('/') {
        "must not begin with '/'"
    } else if name.contains('\\') {
        "must not contain '\\'"
    } else if name.split('/').any(|seg| seg == "." || seg == "..") {
        "must not contain '.' or '..' path segments"
    } else if has_encoded_path_char(name) {
        "must not contain percent-encoded '.', '/' or '\\'"
    } else {
        return Ok(());
    };
    Err(ApiError::invalid_field("model", reason))
}

/// Whether `name` holds `%2e`, `%2f` or `%5c` in any case.
fn has_encoded_path_char(name: &str) -> bool {
    name.as_bytes().windows(3).any(|w| {
        w[0] == b'%'
            && matches!(
                (w[1], w[2].to_ascii_lowercase()),
                (b'2', b'e') | (b'2', b'f') | (b'5', b'c')
            )
    })
}

/// ASCII case-insensitive substring test, without allocating.
fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    n.is_empty() || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

#[cfg(test)]
mod tests;
