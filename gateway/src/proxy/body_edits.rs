//! The request body as it goes upstream: the client's bytes, with a few
//! edits (the backend's `model`, a clamped output limit, a usage request)
//! spliced in around the new values, so that the body is never
//! re-serialised and every other byte reaches the engine as sent. A large
//! body stays in slices of the client's bytes (never copied); a small one
//! is copied together once, since Pingora sends it in one piece.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::extract::JsonView;
use crate::rewrite;

/// The member a stream's body gets so that the engine reports its usage.
pub(super) const INCLUDE_USAGE: &[u8] = br#""stream_options":{"include_usage":true},"#;

/// Changes to make to a JSON body, by byte range of the original.
#[derive(Clone, Debug, Default)]
pub(super) struct BodyEdits {
    /// At most four: the model, the output limit, the usage request and
    /// the cache salt.
    edits: SmallVec<[(Range<usize>, Bytes); 4]>,
}

impl BodyEdits {
    /// Replaces the bytes of `span` with `value`.
    pub(super) fn replace(&mut self, span: Range<usize>, value: Bytes) {
        self.edits.push((span, value));
    }

    /// Inserts `value` at `at` (after edits already inserted there).
    pub(super) fn insert(&mut self, at: usize, value: Bytes) {
        self.edits.push((at..at, value));
    }

    /// Sets the top-level `model` to `model` when the body names another
    /// (or none).
    pub(super) fn set_model(&mut self, view: &JsonView<'_>, model: &str) {
        if view.model.as_deref() == Some(model) {
            return;
        }
        if let Some((span, value)) = view
            .model_slot
            .as_ref()
            .and_then(|slot| rewrite::model_edit(slot, model))
        {
            self.edits.push((span, value));
        }
    }

    /// Makes a stream's engine report its usage at the end, whatever the
    /// client's `stream_options` say: adds them, or sets their
    /// `include_usage` to `true` (other members kept). Returns whether the
    /// body asked for no usage before, so the answer's usage is the
    /// gateway's to take out again.
    pub(super) fn request_usage(&mut self, view: &JsonView<'_>) -> bool {
        let (Some(raw), Some(span)) = (view.stream_options, view.stream_options_at.clone()) else {
            self.insert(view.open_brace + 1, Bytes::from_static(INCLUDE_USAGE));
            return true;
        };
        let mut options = match serde_json::from_str::<serde_json::Value>(raw.get()) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        if options.get("include_usage") == Some(&serde_json::Value::Bool(true)) {
            return false;
        }
        options.insert("include_usage".into(), serde_json::Value::Bool(true));
        let value = serde_json::Value::Object(options).to_string();
        self.replace(span, Bytes::from(value));
        true
    }

    /// Gives a request that sets no output limit the limit `tokens`, as
    /// `field`. The object must not be empty.
    pub(super) fn set_output_limit(&mut self, view: &JsonView<'_>, field: &str, tokens: u64) {
        let member = format!("\"{field}\":{tokens},");
        self.insert(view.open_brace + 1, Bytes::from(member));
    }

    /// Sets the top-level `cache_salt` to `salt`, replacing the client's.
    /// The object must not be empty.
    pub(super) fn set_cache_salt(&mut self, view: &JsonView<'_>, salt: &str) {
        let quoted = Bytes::from(format!("\"{salt}\""));
        match &view.cache_salt {
            Some(span) => self.edits.push((span.clone(), quoted)),
            None => {
                let member = format!("\"cache_salt\":\"{salt}\",");
                self.insert(view.open_brace + 1, Bytes::from(member));
            }
        }
    }

    /// The body with the edits made: in one piece up to `joined_up_to`
    /// bytes, else as slices of `body` around the new values.
    pub(super) fn apply(mut self, body: Bytes, joined_up_to: usize) -> PlannedBody {
        if self.edits.is_empty() {
            return PlannedBody::from(body);
        }
        // Stable: inserts at one place keep the order they were made in.
        self.edits.sort_by_key(|(span, _)| span.start);
        let mut parts: SmallVec<[Bytes; 7]> = SmallVec::new();
        let mut at = 0;
        for (span, value) in self.edits {
            if span.start < at || span.end > body.len() {
                // Overlapping or out of range: never from a parsed body.
                continue;
            }
            if span.start > at {
                parts.push(body.slice(at..span.start));
            }
            parts.push(value);
            at = span.end;
        }
        if at < body.len() {
            parts.push(body.slice(at..));
        }
        let len = parts.iter().map(Bytes::len).sum();
        if len > joined_up_to {
            return PlannedBody {
                parts: parts.into_iter().collect(),
                len,
            };
        }
        let mut joined = BytesMut::with_capacity(len);
        for part in &parts {
            joined.extend_from_slice(part);
        }
        PlannedBody::from(joined.freeze())
    }
}

/// A request body as it goes upstream: the client's, or slices of it around
/// what the gateway changed.
#[derive(Clone, Debug, Default)]
pub struct PlannedBody {
    parts: SmallVec<[Bytes; 1]>,
    len: usize,
}

impl PlannedBody {
    /// Its length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no byte.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The body in one piece (copied together when it is in several).
    pub(super) fn contiguous(&self) -> Bytes {
        match self.parts.as_slice() {
            [one] => one.clone(),
            parts => Bytes::from(parts.concat()),
        }
    }

    /// The pieces, for writers that take several.
    pub(super) fn parts(&self) -> Vec<Bytes> {
        self.parts.to_vec()
    }
}

impl From<Bytes> for PlannedBody {
    fn from(body: Bytes) -> Self {
        let len = body.len();
        Self {
            parts: SmallVec::from_buf([body]),
            len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::parse_json;

    fn edited(body: &str, f: impl FnOnce(&mut BodyEdits, &JsonView<'_>)) -> String {
        let bytes = Bytes::copy_from_slice(body.as_bytes());
        let view = parse_json(&bytes).unwrap();
        let mut edits = BodyEdits::default();
        f(&mut edits, &view);
        let again = edits.clone();
        let joined = edits.apply(bytes.clone(), usize::MAX).contiguous();
        let sliced = again.apply(bytes, 0);
        assert_eq!(sliced.parts().concat(), joined, "sliced and joined differ");
        String::from_utf8(joined.to_vec()).unwrap()
    }

    #[test]
    fn usage_is_asked_for_whatever_the_client_said() {
        let ask = |body: &str| {
            let mut changed = false;
            let out = edited(body, |e, v| changed = e.request_usage(v));
            (out, changed)
        };
        let (out, changed) = ask(r#"{"stream":true}"#);
        assert!(changed);
        assert_eq!(
            out,
            r#"{"stream_options":{"include_usage":true},"stream":true}"#
        );
        let (out, changed) =
            ask(r#"{"stream_options":{"include_usage":false,"x":1},"stream":true}"#);
        assert!(changed);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["stream_options"],
            serde_json::json!({"include_usage": true, "x": 1})
        );
        let (out, changed) = ask(r#"{"stream_options":null}"#);
        assert!(changed);
        assert_eq!(out, r#"{"stream_options":{"include_usage":true}}"#);
        let body = r#"{"stream_options": {"include_usage": true}}"#;
        assert_eq!(ask(body), (body.to_owned(), false));
    }

    #[test]
    fn an_output_limit_is_added() {
        let out = edited(r#"{"messages":[]}"#, |e, v| {
            e.set_output_limit(v, "max_tokens", 7)
        });
        assert_eq!(out, r#"{"max_tokens":7,"messages":[]}"#);
    }

    #[test]
    fn edits_touch_only_their_bytes() {
        let body = r#"{ "model" : "alias", "max_tokens" : 9000, "stream":true, "x":[1,  2] }"#;
        let out = edited(body, |e, v| {
            e.insert(v.open_brace + 1, Bytes::from_static(INCLUDE_USAGE));
            e.set_model(v, "backend");
            let limit = v.output_limit.clone().unwrap();
            e.replace(limit.span, Bytes::from_static(b"7680"));
        });
        assert_eq!(
            out,
            r#"{"stream_options":{"include_usage":true}, "model" : "backend", "max_tokens" : 7680, "stream":true, "x":[1,  2] }"#
        );
        let untouched = edited(body, |e, v| e.set_model(v, "alias"));
        assert_eq!(untouched, body);
        let inserted = edited(r#"{"messages":[]}"#, |e, v| {
            e.insert(v.open_brace + 1, Bytes::from_static(INCLUDE_USAGE));
            e.set_model(v, "m");
        });
        assert_eq!(
            inserted,
            r#"{"stream_options":{"include_usage":true},"model":"m","messages":[]}"#
        );
        assert_eq!(edited("{}", |e, v| e.set_model(v, "m")), r#"{"model":"m"}"#);
    }
}
