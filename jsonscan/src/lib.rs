//! Finding the parts of a JSON document without decoding it.
//!
//! Gateways and extenders often need a few members of a large JSON body:
//! the `model` of a 1 MiB chat request, each node's labels in a 6 MiB
//! scheduler request. Decoding the whole body costs a pass over every byte
//! with a general parser. This crate instead walks an object's members and
//! skips the values nobody asked for: strings are delimited with vector
//! searches for quotes and backslashes, objects and arrays 64 bytes at a
//! time by classifying each block into bit masks of quotes, backslashes and
//! brackets (SSE2, AVX2 or AVX-512BW, picked at run time), so skipping runs
//! close to memory speed. Only the parts read are decoded, by the caller.
//!
//! The scanner checks structure (keys are strings, members are separated,
//! containers close) but not the grammar of what it skips (number
//! spelling, escape sequences, UTF-8): whoever consumes the document
//! validates those. On malformed input it returns an error or spans that a
//! later decoding rejects; it never panics (every index is bounds-checked).

use std::borrow::Cow;
use std::fmt;

mod block;
mod strings;

pub use block::{container_end, container_end_from, BLOCK};
pub use strings::{find_quote_or_backslash, plain_ascii};

/// Where a body could not be scanned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    /// What was expected.
    pub expected: &'static str,
    /// Byte offset in the body.
    pub offset: usize,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {} at byte {}", self.expected, self.offset)
    }
}

impl std::error::Error for ScanError {}
/// A [`ScanError`]: `expected` was not found at byte `offset`.
#[inline]
pub fn error(expected: &'static str, offset: usize) -> ScanError {
    ScanError { expected, offset }
}

/// The offset of the first byte at or after `at` that is not JSON
/// whitespace.
#[inline]
pub fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
        at += 1;
    }
    at
}

/// Calls `member(key, value_start)` for each member of the object starting
/// at `at` (keys raw, without quotes); the callback consumes the value and
/// returns the offset after it. Returns the offset after `}`.
pub fn object_members<'b>(
    bytes: &'b [u8],
    at: usize,
    mut member: impl FnMut(&'b [u8], usize) -> Result<usize, ScanError>,
) -> Result<usize, ScanError> {
    if bytes.get(at) != Some(&b'{') {
        return Err(error("an object", at));
    }
    let mut at = skip_ws(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return Ok(at + 1);
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return Err(error("a key", at));
        }
        let key_end = string_end(bytes, at)?;
        let key = bytes.get(at + 1..key_end - 1).unwrap_or_default();
        at = skip_ws(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return Err(error("':'", at));
        }
        let value_end = member(key, skip_ws(bytes, at + 1))?;
        at = skip_ws(bytes, value_end);
        match bytes.get(at) {
            Some(b',') => at = skip_ws(bytes, at + 1),
            Some(b'}') => return Ok(at + 1),
            _ => return Err(error("',' or '}'", at)),
        }
    }
}

/// The offset just after the value starting at `at`.
#[inline]
pub fn value_end(bytes: &[u8], at: usize) -> Result<usize, ScanError> {
    match bytes.get(at) {
        Some(b'"') => string_end(bytes, at),
        Some(b'{') => container_end(bytes, at, b'{', b'}'),
        Some(b'[') => container_end(bytes, at, b'[', b']'),
        Some(b) if b.is_ascii_alphanumeric() || *b == b'-' => {
            let mut end = at;
            while bytes
                .get(end)
                .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
            {
                end += 1;
            }
            Ok(end)
        }
        _ => Err(error("a value", at)),
    }
}

/// The offset just after the string whose opening quote is at `at`.
#[inline]
pub fn string_end(bytes: &[u8], at: usize) -> Result<usize, ScanError> {
    let mut i = at + 1;
    loop {
        i = find_quote_or_backslash(bytes, i).ok_or(error("'\"'", at))?;
        if bytes.get(i) == Some(&b'"') {
            return Ok(i + 1);
        }
        // A backslash escapes the next byte (`\u` hex digits need no care).
        i += 2;
    }
}

/// A key as text: borrowed when it has no escapes.
pub fn decode_key(key: &[u8]) -> Result<Cow<'_, str>, ScanError> {
    if let Some(text) = plain_ascii(key) {
        return Ok(Cow::Borrowed(text));
    }
    let text = std::str::from_utf8(key).map_err(|_| error("a UTF-8 key", 0))?;
    if !key.contains(&b'\\') {
        return Ok(Cow::Borrowed(text));
    }
    serde_json::from_str::<String>(&format!("\"{text}\""))
        .map(Cow::Owned)
        .map_err(|_| error("a valid key", 0))
}

/// The string value spanning `from..to` (quotes included), unescaped only
/// when it has escapes.
pub fn string_value(raw: &[u8], from: usize, to: usize) -> Result<Cow<'_, str>, ScanError> {
    if let Some(text) = raw
        .get(from + 1..to.saturating_sub(1))
        .and_then(plain_ascii)
    {
        return Ok(Cow::Borrowed(text));
    }
    let quoted = std::str::from_utf8(raw.get(from..to).ok_or(error("a value", from))?)
        .map_err(|_| error("a UTF-8 string", from))?;
    let inner = quoted
        .get(1..quoted.len().saturating_sub(1))
        .ok_or(error("a string", from))?;
    if !inner.contains('\\') {
        return Ok(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(quoted)
        .map(Cow::Owned)
        .map_err(|_| error("a valid string", from))
}

/// Like [`string_end`], but first checks that a string starts at `at`.
pub fn string_end_checked(bytes: &[u8], at: usize) -> Result<usize, ScanError> {
    if bytes.get(at) != Some(&b'"') {
        return Err(error("a string", at));
    }
    string_end(bytes, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_end_at_the_first_unescaped_quote_at_any_length() {
        // Lengths around memchr's vector widths.
        for len in [0usize, 1, 15, 16, 17, 31, 32, 33, 200] {
            for escape_at in [None, Some(0), Some(len.saturating_sub(1))] {
                let mut text = "a".repeat(len);
                if let Some(at) = escape_at.filter(|_| len > 0) {
                    text.replace_range(at..at + 1, "\\\"");
                }
                let body = format!("\"{text}\" \"tail\"");
                assert_eq!(string_end(body.as_bytes(), 0), Ok(text.len() + 2), "{body}");
            }
            let unterminated = format!("\"{}", "a".repeat(len));
            assert!(string_end(unterminated.as_bytes(), 0).is_err());
        }
    }
}
