//! The `/model/<name>/...` path prefix.

use std::borrow::Cow;

use crate::errors::ApiError;

const PREFIX: &str = "/model/";

/// A request target split around its `/model/<name>` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ModelPrefix<'a> {
    /// The name segment as it appears in the path (still percent-encoded).
    raw_name: &'a str,
    /// The path after the name: empty or starting with `/`.
    rest: &'a str,
    /// The query string after `?`, when the target has one.
    query: Option<&'a str>,
}

/// Splits `path_and_query` when its path starts with `/model/<name>`, the
/// name being non-empty. Anything else (`/model/`, `/model//x`, `/models/x`)
/// is not a prefix.
pub(super) fn split_model_prefix(path_and_query: &str) -> Option<ModelPrefix<'_>> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let after = path.strip_prefix(PREFIX)?;
    let (raw_name, rest) = match after.find('/') {
        Some(i) => after.split_at(i),
        None => (after, ""),
    };
    if raw_name.is_empty() {
        return None;
    }
    Some(ModelPrefix {
        raw_name,
        rest,
        query,
    })
}

impl<'a> ModelPrefix<'a> {
    /// The path and query to forward: the prefix removed, `/` when nothing
    /// is left, the query string kept.
    pub(super) fn forward_path(&self) -> String {
        let path = if self.rest.is_empty() { "/" } else { self.rest };
        let mut out = String::with_capacity(path.len() + self.query.map_or(0, |q| q.len() + 1));
        out.push_str(path);
        if let Some(q) = self.query {
            out.push('?');
            out.push_str(q);
        }
        out
    }

    /// The name segment percent-decoded (`org%2Fm` is `org/m`); it must be
    /// valid UTF-8 and use well-formed escapes.
    pub(super) fn decoded_name(&self) -> Result<Cow<'a, str>, ApiError> {
        percent_decode(self.raw_name)
    }
}

/// Decodes `%XX` escapes of a model name in a path; `+` stays `+` (this
/// is a path, not a form). Malformed escapes and non-UTF-8 results are a
/// 400 naming `model`.
pub fn percent_decode(s: &str) -> Result<Cow<'_, str>, ApiError> {
    if !s.contains('%') {
        return Ok(Cow::Borrowed(s));
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hi = bytes.get(i + 1).copied().and_then(hex_value);
            let lo = bytes.get(i + 2).copied().and_then(hex_value);
            match (hi, lo) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                }
                _ => {
                    return Err(ApiError::invalid_field(
                        "model",
                        "malformed percent-encoding in the model name of the path",
                    ))
                }
            }
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map(Cow::Owned).map_err(|_| {
        ApiError::invalid_field("model", "the model name of the path is not valid UTF-8")
    })
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(pq: &str) -> Option<String> {
        split_model_prefix(pq).map(|p| p.forward_path())
    }

    #[test]
    fn prefix_is_stripped_keeping_the_query() {
        assert_eq!(
            forward("/model/foo/v1/completions").as_deref(),
            Some("/v1/completions")
        );
        assert_eq!(
            forward("/model/foo/v1/chat?stream=1&a=b").as_deref(),
            Some("/v1/chat?stream=1&a=b")
        );
        assert_eq!(forward("/model/foo").as_deref(), Some("/"));
        assert_eq!(forward("/model/foo/").as_deref(), Some("/"));
        assert_eq!(forward("/model/foo?x=1").as_deref(), Some("/?x=1"));
        assert_eq!(forward("/model/foo?").as_deref(), Some("/?"));
    }

    #[test]
    fn non_prefixes() {
        for pq in [
            "/model/",
            "/model//v1",
            "/model",
            "/models/foo/v1",
            "/v1/model/foo",
            "",
            "?/model/x",
            "/model?x=/model/y",
        ] {
            assert_eq!(split_model_prefix(pq), None, "{pq}");
        }
    }

    #[test]
    fn name_is_the_first_segment_of_the_path_only() {
        let p = split_model_prefix("/model/foo?q=/bar").unwrap();
        assert_eq!(p.decoded_name().unwrap(), "foo");
        assert_eq!(p.forward_path(), "/?q=/bar");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("org%2Fm").unwrap(), "org/m");
        assert_eq!(percent_decode("a+b").unwrap(), "a+b");
        assert_eq!(percent_decode("caf%C3%A9").unwrap(), "café");
        assert!(matches!(percent_decode("plain").unwrap(), Cow::Borrowed(_)));
        for bad in ["%", "%2", "%zz", "a%g1", "%FF"] {
            let err = percent_decode(bad).unwrap_err();
            assert_eq!(
                (err.status, err.code),
                (400, "invalid_field_value"),
                "{bad}"
            );
        }
    }
}
