//! Bounded fuzzing of request inspection on the stable toolchain.
//!
//! Runs the same oracle as the libFuzzer target in `fuzz/` on inputs that
//! proptest generates: raw bytes in the fuzzer's encoding, structured
//! requests with JSON bodies (random objects, random whitespace, escaped
//! keys, nested `model` keys), the same bodies with bytes flipped, dropped
//! or inserted, and multipart bodies. `FUZZ_ITERATIONS` sets the cases per
//! property (default 2000), so CI time stays bounded.

#[path = "../../../fuzz/oracle.rs"]
mod oracle;

use oracle::{check, check_case, Case, BOUNDARY};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::Value;

fn config() -> ProptestConfig {
    let cases = std::env::var("FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    ProptestConfig {
        cases,
        // Shrunk failures are printed; CI keeps no regression files.
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..ProptestConfig::default()
    }
}

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("model".to_owned()),
        2 => prop_oneof![
            Just("messages"), Just("stream"), Just("session_id"), Just("cache_key"), Just("cacheKey"),
            Just("prefix"), Just("prompt"), Just("document_context"), Just("documentContext"),
            Just("context"), Just("documents"),
        ]
        .prop_map(str::to_owned),
        2 => "[a-z_\"\\\\{}:, ]{0,10}",
        1 => any::<String>(),
    ]
}

fn arb_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9._:/-]{1,40}",
        1 => Just("..".to_owned()),
        1 => Just("/etc/passwd".to_owned()),
        1 => Just("a%2e%2e".to_owned()),
        1 => Just(String::new()),
        1 => any::<String>(),
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
        arb_name().prop_map(Value::String),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(arb_key(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A top-level object whose `model`, when present, is usually a string.
fn arb_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::btree_map(arb_key(), arb_json(), 0..6),
        prop_oneof![
            3 => arb_name().prop_map(|n| Some(Value::String(n))),
            1 => prop::option::of(arb_json()),
        ],
        prop::collection::vec(
            prop_oneof![Just(""), Just(" "), Just("\n"), Just("\t\r\n ")],
            0..3,
        ),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(members, model, ws, escape_model_key, model_last)| {
            let mut members: Vec<(String, Value)> =
                members.into_iter().filter(|(k, _)| k != "model").collect();
            if let Some(m) = model {
                let key = if escape_model_key {
                    r#""m\u006fdel""#
                } else {
                    r#""model""#
                };
                let member = (key.to_owned(), m);
                if model_last {
                    members.push(member);
                } else {
                    members.insert(0, member);
                }
            }
            let pad = |i: usize| if ws.is_empty() { "" } else { ws[i % ws.len()] };
            let mut out = String::from(pad(0));
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(pad(i + 1));
                if k.starts_with('"') {
                    out.push_str(k);
                } else {
                    out.push_str(&serde_json::to_string(k).unwrap_or_default());
                }
                out.push_str(pad(i + 2));
                out.push(':');
                out.push_str(pad(i + 3));
                out.push_str(&serde_json::to_string(v).unwrap_or_default());
                out.push_str(pad(i + 4));
            }
            out.push('}');
            out.push_str(pad(1));
            out.into_bytes()
        })
}

fn arb_path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/v1/chat/completions".to_owned()),
        arb_name().prop_map(|n| format!("/model/{n}/v1/completions?x=1")),
        "/model/[a-z%0-9./?=]{0,20}",
        any::<String>(),
    ]
}

fn arb_case(body: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        arb_path(),
        prop::option::of(prop_oneof![
            arb_name().prop_map(String::into_bytes),
            prop::collection::vec(any::<u8>(), 0..8)
        ]),
        0u8..4,
        body,
        arb_name(),
    )
        .prop_map(
            |(post, path_and_query, model_header, content_type, body, new_model)| Case {
                post,
                path_and_query,
                model_header,
                content_type,
                body,
                new_model,
            },
        )
}

/// Flips, drops or inserts bytes of a valid body.
fn mutate(body: Vec<u8>, edits: Vec<(usize, u8, u8)>) -> Vec<u8> {
    let mut body = body;
    for (at, op, byte) in edits {
        if body.is_empty() {
            break;
        }
        let at = at % body.len();
        match op % 3 {
            0 => body[at] = byte,
            1 => {
                body.remove(at);
            }
            _ => body.insert(at, byte),
        }
    }
    body
}

fn multipart_body(
    parts: Vec<(String, Option<String>, Vec<u8>)>,
    truncate: Option<usize>,
) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, filename, value) in parts {
        out.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"").as_bytes(),
        );
        if let Some(f) = filename {
            out.extend_from_slice(format!("; filename=\"{f}\"").as_bytes());
        }
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(&value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    if let Some(n) = truncate {
        out.truncate(n % (out.len() + 1));
    }
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn raw_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&data);
    }

    #[test]
    fn json_requests(case in arb_case(arb_body())) {
        check_case(&case);
    }

    #[test]
    fn mutated_json_requests(
        case in arb_case(arb_body()),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), prop_oneof![Just(b'"'), Just(b'\\'), Just(b'{'), Just(b'}'), Just(b','), any::<u8>()]), 1..4),
    ) {
        let mut case = case;
        case.body = mutate(std::mem::take(&mut case.body), edits);
        check_case(&case);
    }

    #[test]
    fn multipart_requests(
        case in arb_case(Just(Vec::new())),
        parts in prop::collection::vec(
            (
                prop_oneof![Just("model".to_owned()), Just("file".to_owned()), "[a-z]{1,6}"],
                prop::option::of("[a-z.]{1,8}"),
                prop_oneof![arb_name().prop_map(String::into_bytes), prop::collection::vec(any::<u8>(), 0..32)],
            ),
            0..5,
        ),
        truncate in prop::option::of(any::<usize>()),
    ) {
        let mut case = case;
        case.content_type = 1;
        case.body = multipart_body(parts, truncate);
        check_case(&case);
    }
}
