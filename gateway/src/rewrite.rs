//! Rewriting the `model` of a JSON request body to the backend's name.
//!
//! Clients address a model by the name they know (an alias, a service label,
//! a served name); the backend expects its own. The gateway replaces the
//! value of the top-level `model` member and leaves every other byte of the
//! body as the client sent it: no re-serialisation, so key order, number
//! spelling, whitespace and unknown fields reach the backend unchanged, and
//! the cost is one scan up to the `model` member (usually the first) plus a
//! copy. Multipart bodies are never rewritten.
//!
//! On the request path the value's place is already known from
//! [`parse_json`](crate::extract::parse_json) ([`ModelSlot`]), and
//! [`splice_parts`] builds the new body from slices of the old one without
//! copying it. [`splice_model`] finds the place itself by walking the
//! top-level object only, skipping nested values by their brackets and
//! strings by their escapes (the workspace's one JSON skipper,
//! `flexinfer-jsonscan`), so a `"model"` inside `messages` or inside a
//! string is never touched. It is linear in the bytes it reads. It
//! expects a body that [`parse_json`](crate::extract::parse_json) accepted;
//! on other input it returns an error or, at worst, an unspecified result,
//! but never panics.

use std::ops::Range;

use bytes::Bytes;
use flexinfer_jsonscan::{self as scan, ScanError};

use crate::errors::ApiError;

/// Why a body could not be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// The body is not a JSON object.
    #[error("request body is not a JSON object")]
    NotAnObject,
    /// The body ended or broke off at this byte offset.
    #[error("malformed JSON at byte {0}")]
    Malformed(usize),
}

impl From<RewriteError> for ApiError {
    fn from(e: RewriteError) -> Self {
        ApiError::bad_request(format!("Invalid JSON body: {e}"))
    }
}

/// Sets the top-level `model` of a JSON object body held as [`Bytes`].
///
/// Returns the same `Bytes` (no copy) when the body already names `model`,
/// else a new body as [`splice_model`] builds it. The caller sets
/// Content-Length from the returned length.
pub fn rewrite_model(body: &Bytes, model: &str) -> Result<Bytes, RewriteError> {
    Ok(match splice_model(body, model)? {
        Some(new) => Bytes::from(new),
        None => body.clone(),
    })
}

/// Sets the top-level `model` of a JSON object body to `model`.
///
/// Returns `Ok(None)` when the body already holds exactly that name (nothing
/// to do), else the new body: the old value's bytes (whatever its JSON type)
/// replaced by `model` as a JSON string, or, when the object has no `model`
/// member, `"model":<name>` inserted as its first member. Only the first
/// top-level `model` member is replaced; [`parse_json`](crate::extract::parse_json)
/// rejects bodies with two. The caller sets Content-Length from the new length.
pub fn splice_model(body: &[u8], model: &str) -> Result<Option<Vec<u8>>, RewriteError> {
    match locate(body)? {
        ModelSlot::Value(span) => {
            let old = &body[span.clone()];
            if json_string_equals(old, model) {
                return Ok(None);
            }
            let mut out = Vec::with_capacity(body.len() - old.len() + escaped_len(model));
            out.extend_from_slice(&body[..span.start]);
            push_json_string(&mut out, model);
            out.extend_from_slice(&body[span.end..]);
            Ok(Some(out))
        }
        ModelSlot::Absent { open_brace, empty } => {
            let after = open_brace + 1;
            let mut out = Vec::with_capacity(body.len() + escaped_len(model) + 9);
            out.extend_from_slice(&body[..after]);
            out.extend_from_slice(b"\"model\":");
            push_json_string(&mut out, model);
            if !empty {
                out.push(b',');
            }
            out.extend_from_slice(&body[after..]);
            Ok(Some(out))
        }
    }
}

/// The byte range of the first top-level `model` member's value (quotes
/// included for a string), or `None` when the object has no such member.
pub fn model_value_span(body: &[u8]) -> Result<Option<Range<usize>>, RewriteError> {
    Ok(match locate(body)? {
        ModelSlot::Value(span) => Some(span),
        ModelSlot::Absent { .. } => None,
    })
}

/// Where the top-level `model` is in a JSON object body, or where it would go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSlot {
    /// The value of the first top-level `model` member.
    Value(Range<usize>),
    /// No top-level `model`; the object opens at `open_brace` (and has no
    /// member at all when `empty`).
    Absent {
        /// Offset of the object's `{`.
        open_brace: usize,
        /// Whether the object has no member.
        empty: bool,
    },
}

/// The body with its top-level `model` set to `model`, as slices of `body`
/// around the new value (no copy of the body); `None` when it already holds
/// exactly that name. `slot` must be where [`parse_json`] found the value.
///
/// [`parse_json`]: crate::extract::parse_json
pub fn splice_parts(body: &Bytes, slot: &ModelSlot, model: &str) -> Option<Vec<Bytes>> {
    if let ModelSlot::Value(span) = slot {
        if json_string_equals(body.get(span.clone())?, model) {
            return None;
        }
    }
    let (span, value) = model_edit(slot, model)?;
    if span.end > body.len() {
        return None;
    }
    Some(vec![
        body.slice(..span.start),
        value,
        body.slice(span.end..),
    ])
}

/// The edit that sets `model` at `slot`: the range of the body to replace
/// (empty for an insertion) and the bytes that go there.
pub fn model_edit(slot: &ModelSlot, model: &str) -> Option<(Range<usize>, Bytes)> {
    let mut value = Vec::with_capacity(escaped_len(model) + 9);
    let span = match slot {
        ModelSlot::Value(span) => {
            push_json_string(&mut value, model);
            span.clone()
        }
        ModelSlot::Absent { open_brace, empty } => {
            let after = open_brace + 1;
            value.extend_from_slice(b"\"model\":");
            push_json_string(&mut value, model);
            if !empty {
                value.push(b',');
            }
            after..after
        }
    };
    Some((span, Bytes::from(value)))
}

fn locate(body: &[u8]) -> Result<ModelSlot, RewriteError> {
    let open_brace = scan::skip_ws(body, 0);
    if body.get(open_brace) != Some(&b'{') {
        return Err(RewriteError::NotAnObject);
    }
    let malformed = |e: ScanError| RewriteError::Malformed(e.offset);
    let mut at = scan::skip_ws(body, open_brace + 1);
    if body.get(at) == Some(&b'}') {
        return Ok(ModelSlot::Absent {
            open_brace,
            empty: true,
        });
    }
    loop {
        let key_end = scan::string_end_checked(body, at).map_err(malformed)?;
        let is_model = key_is_model(&body[at..key_end]);
        at = scan::skip_ws(body, key_end);
        if body.get(at) != Some(&b':') {
            return Err(RewriteError::Malformed(at));
        }
        let value_start = scan::skip_ws(body, at + 1);
        let value_end = scan::value_end(body, value_start).map_err(malformed)?;
        if is_model {
            return Ok(ModelSlot::Value(value_start..value_end));
        }
        at = scan::skip_ws(body, value_end);
        match body.get(at) {
            Some(b',') => at = scan::skip_ws(body, at + 1),
            Some(b'}') => {
                return Ok(ModelSlot::Absent {
                    open_brace,
                    empty: false,
                })
            }
            _ => return Err(RewriteError::Malformed(at)),
        }
    }
}

/// Whether a raw key (quotes included) names `model`, escapes decoded.
fn key_is_model(raw: &[u8]) -> bool {
    if !raw.contains(&b'\\') {
        return raw == b"\"model\"";
    }
    // Five characters, each at most a six-byte `\uXXXX`, plus the quotes.
    raw.len() <= 32 && serde_json::from_slice::<String>(raw).is_ok_and(|k| k == "model")
}

/// Whether a raw JSON value is a string equal to `model`.
fn json_string_equals(raw: &[u8], model: &str) -> bool {
    let Some(inner) = raw.strip_prefix(b"\"").and_then(|r| r.strip_suffix(b"\"")) else {
        return false;
    };
    if !inner.contains(&b'\\') {
        return inner == model.as_bytes();
    }
    serde_json::from_slice::<String>(raw).is_ok_and(|old| old == model)
}

/// Bytes `push_json_string` writes for `s`, exactly.
fn escaped_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match escape_of(b) {
            Escape::None => 1,
            Escape::Short(_) => 2,
            Escape::Unicode => 6,
        })
        .sum::<usize>()
}

enum Escape {
    None,
    Short(u8),
    Unicode,
}

fn escape_of(b: u8) -> Escape {
    match b {
        b'"' => Escape::Short(b'"'),
        b'\\' => Escape::Short(b'\\'),
        b'\n' => Escape::Short(b'n'),
        b'\r' => Escape::Short(b'r'),
        b'\t' => Escape::Short(b't'),
        0x08 => Escape::Short(b'b'),
        0x0c => Escape::Short(b'f'),
        0x00..=0x1f => Escape::Unicode,
        _ => Escape::None,
    }
}

/// Appends `s` as a JSON string literal.
fn push_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut plain_from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc = escape_of(b);
        if matches!(esc, Escape::None) {
            continue;
        }
        out.extend_from_slice(&bytes[plain_from..i]);
        plain_from = i + 1;
        match esc {
            Escape::Short(c) => out.extend_from_slice(&[b'\\', c]),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn rewrite_str(body: &str, model: &str) -> Option<String> {
        splice_model(body.as_bytes(), model)
            .unwrap()
            .map(|b| String::from_utf8(b).unwrap())
    }

    fn parse(b: &[u8]) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn replaces_the_value_and_nothing_else() {
        let body =
            r#"{"model":"alias","messages":[{"role":"user","content":"hi"}],"temperature":0.70}"#;
        assert_eq!(
            rewrite_str(body, "backend").unwrap(),
            r#"{"model":"backend","messages":[{"role":"user","content":"hi"}],"temperature":0.70}"#
        );
    }

    #[test]
    fn key_order_and_last_position() {
        let cases = [
            (
                r#"{"a":1,"model":"x","b":2}"#,
                r#"{"a":1,"model":"y","b":2}"#,
            ),
            (
                r#"{"a":1,"b":[2,3],"model":"x"}"#,
                r#"{"a":1,"b":[2,3],"model":"y"}"#,
            ),
            (
                r#"{"stream":true,"messages":[],"model":"x"}"#,
                r#"{"stream":true,"messages":[],"model":"y"}"#,
            ),
            (r#"{"model":"x"}"#, r#"{"model":"y"}"#),
            (
                r#"{"models":"x","model_id":"z","model":"x"}"#,
                r#"{"models":"x","model_id":"z","model":"y"}"#,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(rewrite_str(input, "y").as_deref(), Some(want), "{input}");
        }
    }

    #[test]
    fn nested_and_quoted_model_keys_are_not_touched() {
        let body = r#"{"messages":[{"role":"user","content":"say \"model\": \"x\"","model":"inner"}],
            "meta":{"model":"deep","list":[{"model":"deeper"}]},"note":"{\"model\":\"fake\"}","model":"top"}"#;
        let out = rewrite_str(body, "new").unwrap();
        assert_eq!(out, body.replace(r#""model":"top""#, r#""model":"new""#));
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["model"], "new");
        assert_eq!(v["messages"][0]["model"], "inner");
        assert_eq!(v["meta"]["model"], "deep");
        assert_eq!(v["meta"]["list"][0]["model"], "deeper");
        assert_eq!(v["note"], r#"{"model":"fake"}"#);
    }

    #[test]
    fn escapes_in_keys_and_values() {
        // Backslash runs before a closing quote, escaped quotes, \u escapes.
        let body = r#"{"a\\":"b\\\\","c":"q\"\\\"","m\u006fdel":"old\"name","x":1}"#;
        let out = rewrite_str(body, "n").unwrap();
        assert_eq!(
            out,
            r#"{"a\\":"b\\\\","c":"q\"\\\"","m\u006fdel":"n","x":1}"#
        );
        assert_eq!(parse(out.as_bytes())["c"], "q\"\\\"");
    }

    #[test]
    fn new_names_are_escaped() {
        for name in [
            "a\"b",
            "back\\slash",
            "tab\there",
            "nul\u{0}",
            "\u{1f}\u{7f}",
            "é漢字🦀",
            "org/model:tag",
        ] {
            let out = splice_model(br#"{"model":"x","k":[1]}"#, name)
                .unwrap()
                .unwrap();
            let v = parse(&out);
            assert_eq!(v["model"], name);
            assert_eq!(v["k"], json!([1]));
            assert_eq!(
                out.len(),
                br#"{"model":,"k":[1]}"#.len() + escaped_len(name)
            );
        }
        let out = splice_model(br#"{"model":"x"}"#, "a\u{1}")
            .unwrap()
            .unwrap();
        assert_eq!(out, br#"{"model":"a\u0001"}"#);
    }

    #[test]
    fn unicode_everywhere() {
        let body = "{\"prompt\":\"日本語 🦀 \\ud83e\\udd80\",\"model\":\"モデル\",\"z\":\"é\"}";
        let out = rewrite_str(body, "llama-ü").unwrap();
        assert_eq!(
            out,
            "{\"prompt\":\"日本語 🦀 \\ud83e\\udd80\",\"model\":\"llama-ü\",\"z\":\"é\"}"
        );
        assert_eq!(rewrite_str(body, "モデル"), None);
    }

    #[test]
    fn whitespace_is_kept() {
        let body =
            " \r\n{ \"a\" : [ 1 , { \"model\" : 2 } ] ,\n\t\"model\"\t:\n \"x\" \n, \"b\":null }\n";
        let out = rewrite_str(body, "y").unwrap();
        assert_eq!(out, body.replace("\"x\"", "\"y\""));
    }

    #[test]
    fn unchanged_name_is_a_no_op() {
        assert_eq!(splice_model(br#"{"model":"same"}"#, "same").unwrap(), None);
        assert_eq!(
            splice_model(br#"{"model":"s\u0061me"}"#, "same").unwrap(),
            None
        );
        assert_eq!(splice_model(br#"{"model":"a\"b"}"#, "a\"b").unwrap(), None);
        let b = Bytes::from_static(br#"{"model":"same"}"#);
        let out = rewrite_model(&b, "same").unwrap();
        assert_eq!(out.as_ptr(), b.as_ptr());
        assert_eq!(
            &rewrite_model(&b, "other").unwrap()[..],
            br#"{"model":"other"}"#
        );
    }

    #[test]
    fn values_of_any_type_are_replaced() {
        for old in [
            "1",
            "-2.5e10",
            "null",
            "true",
            "false",
            "[1,\"model\"]",
            "{\"model\":\"x\"}",
            "\"\"",
        ] {
            let body = format!("{{\"model\":{old},\"k\":0}}");
            assert_eq!(
                rewrite_str(&body, "m").unwrap(),
                "{\"model\":\"m\",\"k\":0}",
                "{body}"
            );
            assert_eq!(
                model_value_span(body.as_bytes()).unwrap(),
                Some(9..9 + old.len())
            );
        }
    }

    #[test]
    fn missing_model_is_inserted_first() {
        assert_eq!(rewrite_str("{}", "m").unwrap(), r#"{"model":"m"}"#);
        assert_eq!(
            rewrite_str(" { \n} ", "m").unwrap(),
            " {\"model\":\"m\" \n} "
        );
        assert_eq!(
            rewrite_str(r#"{"a":{"model":"x"}}"#, "m").unwrap(),
            r#"{"model":"m","a":{"model":"x"}}"#
        );
        assert_eq!(
            rewrite_str("\n{ \"a\":1 }", "m").unwrap(),
            "\n{\"model\":\"m\", \"a\":1 }"
        );
        assert_eq!(model_value_span(br#"{"a":1}"#).unwrap(), None);
    }

    #[test]
    fn splicing_at_the_parsed_slot_equals_scanning_for_it() {
        for body in [
            &br#"{"model":"alias","messages":[{"model":"inner"}]}"#[..],
            br#" { "messages":[], "model" : "alias" } "#,
            br#"{"m\u006fdel":"alias","x":1}"#,
            br#"{"a":1}"#,
            b" {\n} ",
            br#"{"model":"backend"}"#,
        ] {
            let bytes = Bytes::copy_from_slice(body);
            let view = crate::extract::parse_json(body).unwrap();
            let slot = view.model_slot.clone().unwrap();
            assert_eq!(
                locate(body).unwrap(),
                slot,
                "{}",
                String::from_utf8_lossy(body)
            );
            let parts = splice_parts(&bytes, &slot, "backend").map(|p| p.concat());
            assert_eq!(parts, splice_model(body, "backend").unwrap());
            if let Some(parts) = splice_parts(&bytes, &slot, "backend") {
                // The body itself is not copied: the pieces point into it.
                assert_eq!(parts[0].as_ptr(), bytes.as_ptr());
            }
        }
    }

    #[test]
    fn only_the_first_top_level_model_is_replaced() {
        assert_eq!(
            rewrite_str(r#"{"model":"a","model":"b"}"#, "c").unwrap(),
            r#"{"model":"c","model":"b"}"#
        );
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        for body in ["[]", "\"x\"", "", "  ", "1", "null"] {
            assert_eq!(
                splice_model(body.as_bytes(), "m"),
                Err(RewriteError::NotAnObject),
                "{body}"
            );
        }
        for body in [
            "{",
            "{\"",
            "{\"a",
            "{\"a\"",
            "{\"a\":",
            "{\"a\":1",
            "{\"a\":1,",
            "{\"a\":\"\\",
            "{\"a\":[",
            "{\"a\":{\"b\":[1,2}",
            "{a:1}",
            "{\"a\" 1}",
            "{\"a\":1 \"b\":2}",
            "{\"a\":}",
            "{,}",
            "{\"model\":",
            "{\"model\" \"x\"}",
        ] {
            assert!(
                matches!(
                    splice_model(body.as_bytes(), "m"),
                    Err(RewriteError::Malformed(_))
                ),
                "{body}"
            );
        }
        let e: ApiError = RewriteError::Malformed(3).into();
        assert_eq!(
            (e.status, e.message.as_str()),
            (400, "Invalid JSON body: malformed JSON at byte 3")
        );
    }

    /// A chat body of at least `size` bytes with the model first or last.
    fn big_chat_body(size: usize, model_last: bool) -> Vec<u8> {
        let mut messages = Vec::new();
        let mut len = 0;
        let mut i = 0;
        while len < size {
            let content = format!(
                "turn {i}: \"model\": \\\"x\\\" {{[ {} ]}}",
                "lorem ipsum é ".repeat(64)
            );
            len += content.len() + 32;
            messages.push(json!({"role": if i % 2 == 0 {"user"} else {"assistant"}, "content": content, "model": "nested"}));
            i += 1;
        }
        let messages = serde_json::to_string(&messages).unwrap();
        let body = if model_last {
            format!(r#"{{"stream":true,"messages":{messages},"model":"alias"}}"#)
        } else {
            format!(r#"{{"model":"alias","stream":true,"messages":{messages}}}"#)
        };
        body.into_bytes()
    }

    #[test]
    fn huge_bodies() {
        for size in [1 << 20, 10 << 20] {
            for model_last in [false, true] {
                let body = big_chat_body(size, model_last);
                assert!(body.len() >= size);
                let view = crate::extract::parse_json(&body).unwrap();
                assert_eq!(view.model.as_deref(), Some("alias"));
                assert_eq!(view.stream, Some(true));
                let out = splice_model(&body, "backend-model").unwrap().unwrap();
                assert_eq!(
                    out.len(),
                    body.len() + "backend-model".len() - "alias".len()
                );
                let span = model_value_span(&body).unwrap().unwrap();
                assert_eq!(&out[..span.start], &body[..span.start]);
                assert_eq!(
                    &out[out.len() - (body.len() - span.end)..],
                    &body[span.end..]
                );
                let (mut before, after) = (parse(&body), parse(&out));
                before["model"] = json!("backend-model");
                assert_eq!(before, after);
            }
        }
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("model".to_owned()),
            Just("messages".to_owned()),
            Just("\"model\":\"x\"".to_owned()),
            "[a-z\"\\\\{}\\[\\]:, ]{0,12}",
            any::<String>(),
        ]
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            arb_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(arb_string(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Writes `v` as JSON with whitespace drawn from `ws` between tokens and,
    /// when `escape_keys`, every key's first letter as a `\u` escape.
    fn write_json(v: &Value, ws: &[&str], n: &mut usize, escape_keys: bool, out: &mut String) {
        fn pad(ws: &[&str], n: &mut usize, out: &mut String) {
            if !ws.is_empty() {
                out.push_str(ws[*n % ws.len()]);
                *n += 1;
            }
        }
        match v {
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(ws, n, out);
                    write_json(item, ws, n, escape_keys, out);
                    pad(ws, n, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                out.push('{');
                pad(ws, n, out);
                for (i, (k, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                        pad(ws, n, out);
                    }
                    let key = serde_json::to_string(k).unwrap();
                    match k.chars().next() {
                        Some(c) if escape_keys && c.is_ascii_alphanumeric() => {
                            out.push_str(&format!("\"\\u{:04x}{}", c as u32, &key[2..]))
                        }
                        _ => out.push_str(&key),
                    }
                    pad(ws, n, out);
                    out.push(':');
                    pad(ws, n, out);
                    write_json(item, ws, n, escape_keys, out);
                    pad(ws, n, out);
                }
                out.push('}');
            }
            other => out.push_str(&serde_json::to_string(other).unwrap()),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn rewrite_then_parse_equals_parse_with_model_replaced(
            members in prop::collection::btree_map(arb_string(), arb_json(), 0..8),
            model in prop::option::of(arb_json()),
            new_model in any::<String>(),
            ws in prop::collection::vec(prop_oneof![Just(""), Just(" "), Just("\n\t"), Just("\r\n  ")], 0..4),
            escape_keys in any::<bool>(),
        ) {
            let mut object: serde_json::Map<String, Value> = members.into_iter().collect();
            match model {
                Some(m) => { object.insert("model".to_owned(), m); }
                None => { object.remove("model"); }
            }
            let value = Value::Object(object);
            let mut body = String::new();
            write_json(&value, &ws, &mut 0, escape_keys, &mut body);
            // Compare parses of the text, not `value`: float text need not
            // parse back to the exact float it was printed from.
            let parsed = parse(body.as_bytes());

            let out = splice_model(body.as_bytes(), &new_model).unwrap();
            let mut want = parsed.clone();
            want["model"] = Value::String(new_model.clone());
            match out {
                None => prop_assert_eq!(&parsed["model"], &Value::String(new_model)),
                Some(out) => {
                    prop_assert_eq!(parse(&out), want);
                    if let Some(span) = model_value_span(body.as_bytes()).unwrap() {
                        prop_assert_eq!(&out[..span.start], &body.as_bytes()[..span.start]);
                        prop_assert_eq!(&out[out.len() - (body.len() - span.end)..], &body.as_bytes()[span.end..]);
                    }
                }
            }
        }

        #[test]
        fn finder_matches_a_naive_search(s in prop::collection::vec(prop_oneof![Just(b'"'), Just(b'\\'), any::<u8>()], 0..40)) {
            let naive = s.iter().position(|&b| b == b'"' || b == b'\\');
            prop_assert_eq!(scan::find_quote_or_backslash(&s, 0), naive);
        }

        #[test]
        fn escaper_round_trips(s in any::<String>()) {
            let mut out = Vec::new();
            push_json_string(&mut out, &s);
            prop_assert_eq!(out.len(), escaped_len(&s));
            prop_assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), s);
        }

        #[test]
        fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..64), model in ".{0,8}") {
            let _ = splice_model(&body, &model);
        }
    }
}
