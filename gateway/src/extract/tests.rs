use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method};

use super::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn json_headers() -> HeaderMap {
    headers(&[("content-type", "application/json")])
}

const BOUNDARY: &str = "XyZ-boundary-42";

fn multipart_headers() -> HeaderMap {
    headers(&[(
        "content-type",
        &format!("multipart/form-data; boundary={BOUNDARY}"),
    )])
}

/// Builds a multipart body from (name, filename, value) parts.
fn multipart_body(parts: &[(&str, Option<&str>, &[u8])]) -> Bytes {
    let mut out = Vec::new();
    for (name, filename, value) in parts {
        out.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        match filename {
            Some(f) => out.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            ),
            None => out.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            ),
        }
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    Bytes::from(out)
}

async fn run(method: Method, pq: &str, h: &HeaderMap, body: &[u8]) -> Result<Extracted, ApiError> {
    let body = Bytes::copy_from_slice(body);
    extract(&method, pq, h, Some(&body)).await
}

fn assert_invalid(e: &ApiError) {
    assert_eq!(
        (e.status, e.code, e.param),
        (400, "invalid_field_value", Some("model")),
        "{e}"
    );
}

#[tokio::test]
async fn header_is_trimmed_and_wins_over_everything() {
    let mut h = json_headers();
    h.insert(MODEL_HEADER, HeaderValue::from_static("  from-header \t"));
    let got = run(
        Method::POST,
        "/model/from-path/v1/chat/completions?x=1",
        &h,
        br#"{"model":"from-json"}"#,
    )
    .await
    .unwrap();
    assert_eq!(got.model, "from-header");
    assert_eq!(got.source, ModelSource::Header);
    // The gateway prefix never reaches a backend, whoever named the model.
    assert_eq!(
        got.forward_path.as_deref(),
        Some("/v1/chat/completions?x=1")
    );

    let got = run(Method::GET, "/v1/models", &h, b"").await.unwrap();
    assert_eq!((got.source, got.forward_path), (ModelSource::Header, None));
}

#[tokio::test]
async fn blank_header_falls_through() {
    let mut h = json_headers();
    h.insert(MODEL_HEADER, HeaderValue::from_static("   "));
    let got = run(Method::POST, "/v1/completions", &h, br#"{"model":"m"}"#)
        .await
        .unwrap();
    assert_eq!(
        (got.model.as_str(), got.source),
        ("m", ModelSource::JsonBody)
    );
}

#[tokio::test]
async fn path_prefix_beats_body_and_is_stripped() {
    let got = run(
        Method::POST,
        "/model/from-path/v1/completions",
        &json_headers(),
        br#"{"model":"j"}"#,
    )
    .await
    .unwrap();
    assert_eq!(got.model, "from-path");
    assert_eq!(got.source, ModelSource::PathPrefix);
    assert_eq!(got.forward_path.as_deref(), Some("/v1/completions"));

    let got = run(Method::GET, "/model/m?verbose=true", &HeaderMap::new(), b"")
        .await
        .unwrap();
    assert_eq!(got.forward_path.as_deref(), Some("/?verbose=true"));
    let got = run(Method::GET, "/model/m", &HeaderMap::new(), b"")
        .await
        .unwrap();
    assert_eq!(got.forward_path.as_deref(), Some("/"));
}

#[tokio::test]
async fn path_names_are_percent_decoded_then_validated() {
    let got = run(
        Method::GET,
        "/model/meta-llama%2FLlama-3/v1/models",
        &HeaderMap::new(),
        b"",
    )
    .await
    .unwrap();
    assert_eq!(got.model, "meta-llama/Llama-3");
    assert_eq!(got.forward_path.as_deref(), Some("/v1/models"));

    for pq in [
        "/model/%2e%2e/v1",
        "/model/%2E%2E/v1",
        "/model/..",
        "/model/%2Fetc/v1",
        "/model/a%2F..%2Fb/x",
        "/model/%zz/v1",
        "/model/%00/v1",
    ] {
        let e = run(Method::GET, pq, &HeaderMap::new(), b"")
            .await
            .unwrap_err();
        assert_invalid(&e);
    }
}

#[tokio::test]
async fn json_body_is_read_from_any_post() {
    let body = br#"{"messages":[{"role":"user","content":"hi","model":"nested"}],"model":"m1"}"#;
    let got = run(Method::POST, "/v1/chat/completions", &json_headers(), body)
        .await
        .unwrap();
    assert_eq!(
        (got.model.as_str(), got.source, got.forward_path),
        ("m1", ModelSource::JsonBody, None)
    );

    let h = headers(&[("content-type", "Application/JSON; charset=utf-8")]);
    assert_eq!(
        run(Method::POST, "/v1/x", &h, body).await.unwrap().model,
        "m1"
    );

    for method in [Method::PUT, Method::GET, Method::PATCH] {
        let e = run(method, "/v1/x", &json_headers(), body)
            .await
            .unwrap_err();
        assert_eq!(e, ApiError::missing_model());
    }
    // Another declared type: read as JSON all the same when it is JSON,
    // since engines read it whatever the header says.
    for ct in ["text/plain", "application/x-www-form-urlencoded"] {
        let h = headers(&[("content-type", ct)]);
        assert_eq!(
            run(Method::POST, "/v1/x", &h, body).await.unwrap().model,
            "m1"
        );
        let e = run(Method::POST, "/v1/x", &h, b"model=m1")
            .await
            .unwrap_err();
        assert_eq!(e, ApiError::missing_model());
    }
    // Without any Content-Type a JSON body is read as JSON (as FastAPI
    // engines do); anything else names no model.
    let found = run(Method::POST, "/v1/x", &HeaderMap::new(), body)
        .await
        .unwrap();
    assert_eq!(found.source, ModelSource::JsonBody);
    let e = run(Method::POST, "/v1/x", &HeaderMap::new(), b"model=m1")
        .await
        .unwrap_err();
    assert_eq!(e, ApiError::missing_model());
}

#[tokio::test]
async fn json_errors_surface() {
    let e = run(Method::POST, "/v1/x", &json_headers(), b"{\"model\":")
        .await
        .unwrap_err();
    assert_eq!(e.code, "invalid_request_error");
    assert!(e.message.contains("line 1 column"), "{}", e.message);
    let e = run(Method::POST, "/v1/x", &json_headers(), br#"{"model":7}"#)
        .await
        .unwrap_err();
    assert_invalid(&e);
    let e = run(
        Method::POST,
        "/v1/x",
        &json_headers(),
        br#"{"prompt":"hi"}"#,
    )
    .await
    .unwrap_err();
    assert_eq!(e, ApiError::missing_model());
    // A body that is not JSON is irrelevant when the head names the model.
    let e = run(Method::POST, "/model/m/v1/x", &json_headers(), b"not json").await;
    assert_eq!(e.unwrap().model, "m");
}

#[tokio::test]
async fn json_content_type_never_reads_multipart() {
    let body = multipart_body(&[("model", None, b"mp")]);
    let e = run(Method::POST, "/v1/x", &json_headers(), &body)
        .await
        .unwrap_err();
    assert_eq!(e.code, "invalid_request_error");
}

#[tokio::test]
async fn multipart_field_after_other_fields_and_files() {
    let body = multipart_body(&[
        (
            "file",
            Some("audio.wav"),
            &[0u8, 159, 146, 150, 13, 10, 45, 45][..],
        ),
        ("model", Some("model.bin"), b"not-this-one"),
        ("language", None, b"en"),
        ("model", None, b"  whisper-large \r\n"),
    ]);
    let got = run(
        Method::POST,
        "/v1/audio/transcriptions",
        &multipart_headers(),
        &body,
    )
    .await
    .unwrap();
    assert_eq!(
        (got.model.as_str(), got.source),
        ("whisper-large", ModelSource::Multipart)
    );
    assert_eq!(got.forward_path, None);
}

#[tokio::test]
async fn multipart_stops_at_the_model_field() {
    // Garbage after the model field is never read.
    let mut body = multipart_body(&[("model", None, b"m")]).to_vec();
    body.truncate(body.len() - format!("--{BOUNDARY}--\r\n").len());
    body.extend_from_slice(b"--XyZ-boundary-42\r\ngarbage without headers");
    assert_eq!(
        multipart_model(Bytes::from(body), BOUNDARY)
            .await
            .unwrap()
            .as_deref(),
        Some("m")
    );
}

#[tokio::test]
async fn multipart_with_two_model_fields_is_refused() {
    let body = multipart_body(&[
        ("model", None, b"a"),
        ("file", Some("a.wav"), b"RIFF"),
        ("model", None, b"b"),
    ]);
    let e = multipart_model(body, BOUNDARY).await.unwrap_err();
    assert_eq!((e.status, e.param), (400, Some("model")));
    assert!(e.message.contains("more than one 'model'"), "{}", e.message);
}

#[tokio::test]
async fn multipart_without_model_or_with_bad_values() {
    let body = multipart_body(&[("file", Some("a.wav"), b"RIFF")]);
    assert_eq!(multipart_model(body.clone(), BOUNDARY).await.unwrap(), None);
    let e = run(Method::POST, "/v1/x", &multipart_headers(), &body)
        .await
        .unwrap_err();
    assert_eq!(e, ApiError::missing_model());

    let body = multipart_body(&[("model", None, b"   ")]);
    assert_eq!(multipart_model(body, BOUNDARY).await.unwrap(), None);

    let body = multipart_body(&[("model", None, b"../../x")]);
    assert_invalid(&multipart_model(body, BOUNDARY).await.unwrap_err());
    let body = multipart_body(&[("model", None, b"\xff\xfe")]);
    assert_invalid(&multipart_model(body, BOUNDARY).await.unwrap_err());

    let e = multipart_model(Bytes::from_static(b"no boundary here"), BOUNDARY)
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code), (400, "invalid_request_error"));
    assert!(
        e.message.starts_with("Invalid multipart/form-data body"),
        "{}",
        e.message
    );
}

#[test]
fn body_kind_follows_method_and_content_type() {
    assert_eq!(body_kind(&Method::POST, &json_headers()), BodyKind::Json);
    assert_eq!(
        body_kind(&Method::POST, &multipart_headers()),
        BodyKind::Multipart {
            boundary: BOUNDARY.to_owned()
        }
    );
    assert_eq!(
        body_kind(
            &Method::POST,
            &headers(&[("content-type", "multipart/form-data; boundary=\"q b\"")])
        ),
        BodyKind::Multipart {
            boundary: "q b".to_owned()
        }
    );
    assert_eq!(body_kind(&Method::GET, &json_headers()), BodyKind::Other);
    assert_eq!(
        body_kind(&Method::PUT, &multipart_headers()),
        BodyKind::Other
    );
    assert_eq!(
        body_kind(&Method::POST, &HeaderMap::new()),
        BodyKind::Untyped
    );
    let no_boundary = headers(&[("content-type", "multipart/form-data")]);
    assert_eq!(body_kind(&Method::POST, &no_boundary), BodyKind::Foreign);
    let mixed = headers(&[("content-type", "multipart/mixed; boundary=x")]);
    assert_eq!(body_kind(&Method::POST, &mixed), BodyKind::Foreign);
    for json in [
        "application/json",
        "Application/JSON; charset=utf-8",
        "application/vnd.api+json",
        " application/merge-patch+JSON ;x=y",
    ] {
        let h = headers(&[("content-type", json)]);
        assert_eq!(body_kind(&Method::POST, &h), BodyKind::Json, "{json}");
    }
    for other in [
        "text/plain",
        "application/jsonl",
        "text/json+x",
        "application/+json",
    ] {
        let h = headers(&[("content-type", other)]);
        assert_eq!(body_kind(&Method::POST, &h), BodyKind::Foreign, "{other}");
    }
    let mut opaque = HeaderMap::new();
    opaque.insert(
        CONTENT_TYPE,
        HeaderValue::from_bytes(b"application/json\xff").unwrap(),
    );
    assert_eq!(body_kind(&Method::POST, &opaque), BodyKind::Foreign);
}

#[test]
fn from_head_needs_no_body() {
    let h = headers(&[("X-Model-ID", "m")]);
    assert_eq!(
        from_head(&Method::GET, "/v1/x", &h).unwrap().unwrap().model,
        "m"
    );
    assert_eq!(
        from_head(&Method::GET, "/v1/x", &HeaderMap::new()).unwrap(),
        None
    );
    // A header that is not UTF-8 is refused rather than ignored.
    let mut h = HeaderMap::new();
    h.insert(MODEL_HEADER, HeaderValue::from_bytes(b"caf\xe9").unwrap());
    assert_invalid(&from_head(&Method::GET, "/v1/x", &h).unwrap_err());
    // UTF-8 names are fine.
    let mut h = HeaderMap::new();
    h.insert(
        MODEL_HEADER,
        HeaderValue::from_bytes("café".as_bytes()).unwrap(),
    );
    assert_eq!(
        from_head(&Method::GET, "/v1/x", &h).unwrap().unwrap().model,
        "café"
    );
    // With the header winning, a path name that is not valid is not looked at.
    let h = headers(&[("X-Model-ID", "m")]);
    let got = from_head(&Method::GET, "/model/%zz/v1/x", &h)
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.model.as_str(), got.forward_path.as_deref()),
        ("m", Some("/v1/x"))
    );
}

#[tokio::test]
async fn nothing_anywhere_is_missing_model() {
    let e = run(Method::GET, "/v1/models", &HeaderMap::new(), b"")
        .await
        .unwrap_err();
    assert_eq!(e, ApiError::missing_model());
    let e = extract(&Method::POST, "/v1/x", &json_headers(), None)
        .await
        .unwrap_err();
    assert_eq!(e, ApiError::missing_model());
}

#[test]
fn model_name_rules() {
    let long = "a".repeat(MAX_MODEL_NAME_LEN);
    for ok in [
        "llama",
        "meta-llama/Llama-3.1-8B-Instruct",
        "qwen2.5:7b",
        "a..b",
        "m@v1",
        "café",
        "a b",
        long.as_str(),
        "100%",
    ] {
        assert_eq!(validate_model_name(ok), Ok(()), "{ok}");
    }
    let too_long = "a".repeat(MAX_MODEL_NAME_LEN + 1);
    for bad in [
        "",
        too_long.as_str(),
        "a\nb",
        "a\u{0}",
        "a\u{7f}",
        "a\u{85}",
        "\tm",
        " m",
        "m ",
        "/etc/passwd",
        "..",
        ".",
        "a/../b",
        "a/./b",
        "a/..",
        "../a",
        "a\\b",
        "%2e%2e",
        "a%2Fb",
        "a%5cb",
        "a%2E",
    ] {
        let e = validate_model_name(bad).unwrap_err();
        assert_invalid(&e);
        assert!(
            e.message.starts_with("Invalid value for field 'model': "),
            "{}",
            e.message
        );
    }
}

#[test]
fn source_labels() {
    let all = [
        ModelSource::Header,
        ModelSource::PathPrefix,
        ModelSource::JsonBody,
        ModelSource::Multipart,
    ];
    let labels: Vec<_> = all.iter().map(|s| s.to_string()).collect();
    assert_eq!(labels, ["header", "path", "json", "multipart"]);
}
