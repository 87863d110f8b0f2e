//! The properties the gateway's request inspection must keep on any input.
//!
//! Shared by the libFuzzer target (`fuzz_targets/extract.rs`) and the
//! bounded stable-toolchain run (`gateway/tests/gateway/fuzz_extract.rs`), which
//! include this file with `#[path]`. Every check panics on a violation,
//! which is what both drivers report.

#![allow(dead_code)]

use std::fmt;

use bytes::Bytes;
use flexinfer_gateway::extract::{self, BodyKind, ModelSource};
use flexinfer_gateway::rewrite;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// Boundary used for multipart bodies built by the drivers.
pub const BOUNDARY: &str = "fuzz-boundary";

/// One request as the gateway sees it.
#[derive(Debug, Clone)]
pub struct Case {
    /// POST when true, GET otherwise.
    pub post: bool,
    /// Request target in origin form (not necessarily valid).
    pub path_and_query: String,
    /// Raw `X-Model-ID` value, when sent.
    pub model_header: Option<Vec<u8>>,
    /// 0: JSON, 1: multipart with [`BOUNDARY`], 2: none, 3: text/plain.
    pub content_type: u8,
    /// The body.
    pub body: Vec<u8>,
    /// The name the rewrite puts in.
    pub new_model: String,
}

/// Decodes raw fuzzer bytes into a [`Case`] and checks it.
pub fn check(data: &[u8]) {
    check_case(&decode(data));
}

/// Splits `data` into the fields of a [`Case`]: a flags byte, then
/// length-prefixed path, header and new model, then the body.
pub fn decode(data: &[u8]) -> Case {
    let (flags, mut rest) = match data.split_first() {
        Some((&flags, tail)) => (flags, tail),
        None => (0, data),
    };
    let mut take = |max: usize| -> Vec<u8> {
        let Some((&len, tail)) = rest.split_first() else {
            return Vec::new();
        };
        let n = usize::from(len).min(max).min(tail.len());
        let (taken, tail) = tail.split_at(n);
        rest = tail;
        taken.to_vec()
    };
    let path = take(96);
    let header = take(300);
    let new_model = take(64);
    Case {
        post: flags & 1 == 0,
        path_and_query: String::from_utf8_lossy(&path).into_owned(),
        model_header: (flags & 8 != 0).then_some(header),
        content_type: (flags >> 1) & 3,
        body: rest.to_vec(),
        new_model: String::from_utf8_lossy(&new_model).into_owned(),
    }
}

/// Runs every inspection step on `case` and checks its properties.
pub fn check_case(case: &Case) {
    let method = if case.post { Method::POST } else { Method::GET };
    let mut headers = HeaderMap::new();
    if let Some(raw) = &case.model_header {
        if let Ok(v) = HeaderValue::from_bytes(raw) {
            headers.insert(HeaderName::from_static(extract::MODEL_HEADER), v);
        }
    }
    let content_type = match case.content_type {
        0 => Some("application/json".to_owned()),
        1 => Some(format!("multipart/form-data; boundary={BOUNDARY}")),
        3 => Some("text/plain".to_owned()),
        _ => None,
    };
    if let Some(ct) = content_type {
        if let Ok(v) = HeaderValue::from_str(&ct) {
            headers.insert(CONTENT_TYPE, v);
        }
    }
    let body = Bytes::copy_from_slice(&case.body);

    // 1. The head.
    let head = extract::from_head(&method, &case.path_and_query, &headers);
    match &head {
        Ok(Some(found)) => {
            assert_valid_name(&found.model);
            if let Some(p) = &found.forward_path {
                assert!(p.starts_with('/'), "forward path {p:?}");
                assert!(case.path_and_query.starts_with("/model/"));
                assert!(p.len() < case.path_and_query.len());
            }
            if found.source == ModelSource::PathPrefix {
                assert!(found.forward_path.is_some());
            }
        }
        Ok(None) => assert!(
            !case.path_and_query.starts_with("/model/") || {
                let after = &case.path_and_query["/model/".len()..];
                after.is_empty() || after.starts_with('/') || after.starts_with('?')
            }
        ),
        Err(e) => assert_client_error(e),
    }

    // 2. The body kind.
    let kind = extract::body_kind(&method, &headers);
    let want_kind = match (case.post, case.content_type) {
        (true, 0) => BodyKind::Json,
        (true, 1) => BodyKind::Multipart {
            boundary: BOUNDARY.to_owned(),
        },
        (true, 2) => BodyKind::Untyped,
        (true, _) => BodyKind::Foreign,
        _ => BodyKind::Other,
    };
    assert_eq!(kind, want_kind);

    // 3. The JSON view, cross-checked against a full parse.
    let view = extract::parse_json(&body);
    let full: Option<Value> = serde_json::from_slice(&body).ok();
    check_view(&body, &view, full.as_ref());

    // 4. The multipart field.
    if let Ok(Some(m)) =
        futures::executor::block_on(extract::multipart_model(body.clone(), BOUNDARY))
            .map_err(|e| assert_client_error(&e))
    {
        assert_valid_name(&m);
    }

    // 5. The rewrite.
    let spliced = rewrite::splice_model(&body, &case.new_model);
    if let Some(Value::Object(map)) = &full {
        if top_level_model_keys(&body) <= 1 {
            let out = spliced.unwrap_or_else(|e| panic!("rewrite refused a valid object: {e}"));
            let mut want = map.clone();
            want.insert("model".to_owned(), Value::String(case.new_model.clone()));
            match out {
                None => assert_eq!(
                    map.get("model"),
                    Some(&Value::String(case.new_model.clone()))
                ),
                Some(out) => {
                    let got: Value = serde_json::from_slice(&out).unwrap_or_else(|e| {
                        panic!(
                            "rewritten body does not parse: {e}: {:?}",
                            String::from_utf8_lossy(&out)
                        )
                    });
                    assert_eq!(got, Value::Object(want));
                    if let Ok(Some(span)) = rewrite::model_value_span(&body) {
                        assert_eq!(&out[..span.start], &body[..span.start]);
                        assert_eq!(
                            &out[out.len() - (body.len() - span.end)..],
                            &body[span.end..]
                        );
                    }
                }
            }
            let whole = rewrite::rewrite_model(&body, &case.new_model);
            let expected = rewrite::splice_model(&body, &case.new_model)
                .map(|o| o.map_or(body.clone(), Bytes::from));
            assert_eq!(whole, expected);
        }
    }

    // 6. The whole cascade agrees with its parts.
    let all = futures::executor::block_on(extract::extract(
        &method,
        &case.path_and_query,
        &headers,
        Some(&body),
    ));
    match (&all, &head) {
        (Ok(a), Ok(Some(h))) => assert_eq!(a, h),
        (Ok(a), Ok(None)) => {
            assert_valid_name(&a.model);
            assert_eq!(a.forward_path, None);
            match a.source {
                ModelSource::JsonBody => {
                    let model = view.as_ref().ok().and_then(|v| v.model.as_deref());
                    assert_eq!(model, Some(a.model.as_str()));
                }
                ModelSource::Multipart => assert_eq!(case.content_type, 1),
                other => panic!("body extraction reported source {other}"),
            }
        }
        (Err(e), _) => assert_client_error(e),
        (Ok(a), Err(e)) => panic!("extract found {a:?} but the head failed with {e}"),
    }
}

/// Checks what `parse_json` made of `body` against serde_json's own parse.
fn check_view(
    body: &[u8],
    view: &Result<extract::JsonView<'_>, flexinfer_gateway::errors::ApiError>,
    full: Option<&Value>,
) {
    match view {
        Ok(v) => {
            let Some(Value::Object(map)) = full else {
                // The values routing does not read are skipped, not
                // validated (the engine answers for them), but the body is
                // still one UTF-8 object with closed strings and brackets.
                let trimmed = body.trim_ascii();
                assert!(
                    std::str::from_utf8(body).is_ok()
                        && trimmed.starts_with(b"{")
                        && trimmed.ends_with(b"}"),
                    "parse_json accepted a body that is not one object: {:?}",
                    String::from_utf8_lossy(body)
                );
                return;
            };
            match (&v.model, map.get("model")) {
                (Some(m), Some(Value::String(s))) => {
                    assert_eq!(m.as_ref(), s);
                    assert_valid_name(m);
                }
                (None, None) => {}
                (None, Some(Value::String(s))) => assert!(s.is_empty()),
                (m, s) => panic!("view model {m:?}, parsed model {s:?}"),
            }
            if let Some(s) = v.stream {
                assert_eq!(map.get("stream"), Some(&Value::Bool(s)));
            }
        }
        Err(e) => {
            assert_client_error(e);
            if let Some(Value::Object(map)) = full {
                // A valid object is refused only for its model.
                assert_eq!(e.code, "invalid_field_value", "{e} on {map:?}");
            }
        }
    }
}

fn assert_valid_name(name: &str) {
    assert!(
        extract::validate_model_name(name).is_ok(),
        "an accepted name fails validation: {name:?}"
    );
    assert!(!name.is_empty() && name.len() <= extract::MAX_MODEL_NAME_LEN);
}

fn assert_client_error(e: &flexinfer_gateway::errors::ApiError) {
    assert_eq!(e.status, 400, "{e}");
    assert_eq!(e.kind, "invalid_request_error", "{e}");
    assert!(!e.message.is_empty());
}

/// How many top-level members of a JSON object are named `model`.
fn top_level_model_keys(body: &[u8]) -> usize {
    struct Count;
    impl<'de> Visitor<'de> for Count {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while let Some(key) = map.next_key::<String>()? {
                n += usize::from(key == "model");
                map.next_value::<IgnoredAny>()?;
            }
            Ok(n)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    de.deserialize_map(Count).unwrap_or(0)
}
