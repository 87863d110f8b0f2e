//! A hostile tenant against the gateway's reading of request bodies
//! (`docs/gateway.md`, "Request bodies"; `docs/tenants.md`): whatever the
//! Content-Type and wherever the model is named, the body an engine gets is
//! the body the gateway checked; the cache salt cannot be computed from
//! names; the routing decision reaches admin keys only; a response's owner
//! is recorded whatever the size of the request that created it. Real
//! gateway binary, real `flexinfer-sim` engines.

use crate::support;

use std::path::PathBuf;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{assert_openai_error, clear, client, endpoints, error_of, pod, recorded, Gateway};

const ADMIN_KEY: &str = "admin-key";
/// Tenant `a` may use `m` only; `b` may use every model.
const KEYS: &str =
    "tenants:\n  - name: a\n    keys: [ka]\n    models: [m]\n  - name: b\n    keys: [kb]\n";

fn key_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("keys.yaml");
    std::fs::write(&path, KEYS).expect("key file");
    (dir, path)
}

/// A gateway serving `m` and `other` from one simulator (which serves both).
fn gateway(sim: &support::SimProcess, keys: &std::path::Path, extra: &[&str]) -> Gateway {
    let urls = endpoints(&[sim]);
    let yaml =
        format!("models:\n- name: m\n  endpoints: {urls}\n- name: other\n  endpoints: {urls}\n");
    let mut args = vec![
        "--api-key-file",
        keys.to_str().unwrap(),
        "--admin-auth-token",
        ADMIN_KEY,
    ];
    args.extend_from_slice(extra);
    Gateway::start(&yaml, &args)
}

/// POSTs raw `body` with `key`, the model named by `X-Model-ID`, and the
/// given Content-Type (none when `None`).
async fn post_raw(
    gw: &Gateway,
    key: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> reqwest::Response {
    let mut req = client()
        .post(gw.url(path))
        .bearer_auth(key)
        .header("x-model-id", "m")
        .body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    req.send().await.expect("request")
}

/// The Content-Types a FastAPI engine, llama.cpp or Ollama read as JSON.
const JSON_AS_ENGINES_READ_IT: &[Option<&str>] =
    &[None, Some("application/vnd.api+json"), Some("text/plain")];

#[tokio::test]
async fn a_body_not_declared_json_is_read_checked_and_rewritten() {
    let sim = pod("p", &["m", "other"], &[]);
    let (_dir, keys) = key_file();
    let gw = gateway(&sim, &keys, &[]);
    for ct in JSON_AS_ENGINES_READ_IT {
        clear(&sim).await;
        // Tenant a may not use `other`: the head names `m`, the body `other`.
        let body = json!({"model": "other", "max_tokens": 2,
            "messages": [{"role": "user", "content": "hi"}]});
        let resp = post_raw(
            &gw,
            "ka",
            "/v1/chat/completions",
            *ct,
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
        assert_eq!(resp.status(), 200, "{ct:?}");
        let seen = recorded(&sim).await;
        assert_eq!(seen.len(), 1, "{ct:?}: {seen:?}");
        assert_eq!(
            seen[0]["model"], "m",
            "{ct:?}: the body's model is rewritten"
        );
        let forwarded = seen[0]["content_type"].as_str().unwrap_or_default();
        assert!(
            forwarded.contains("json"),
            "{ct:?}: forwarded as {forwarded}"
        );
    }
}

#[tokio::test]
async fn an_api_body_the_gateway_cannot_read_is_refused() {
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file();
    let gw = gateway(&sim, &keys, &[]);
    clear(&sim).await;
    let resp = post_raw(
        &gw,
        "ka",
        "/v1/chat/completions",
        Some("text/plain"),
        b"model=other&prompt=hi".to_vec(),
    )
    .await;
    let (status, _, body) = error_of(resp).await;
    assert_eq!(status, 415);
    let err = assert_openai_error(&body, "unsupported_media_type");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("application/json"),
        "{body}"
    );
    let resp = post_raw(&gw, "ka", "/v1/chat/completions", None, b"{oops".to_vec()).await;
    assert_eq!(resp.status(), 400);
    // UTF-8 with a byte-order mark parses in Python, not here: refused too.
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(br#"{"model":"other","messages":[]}"#);
    let resp = post_raw(
        &gw,
        "ka",
        "/v1/chat/completions",
        Some("application/json"),
        bom,
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert!(
        recorded(&sim).await.is_empty(),
        "nothing reached the engine"
    );
}

#[tokio::test]
async fn a_form_naming_another_model_than_the_head_is_refused() {
    let sim = pod("p", &["m", "other"], &[]);
    let (_dir, keys) = key_file();
    let gw = gateway(&sim, &keys, &[]);
    clear(&sim).await;
    let boundary = "XyZ";
    let form = |model: &str| {
        support::multipart(
            boundary,
            &[
                support::Part {
                    name: "model",
                    filename: None,
                    data: model.as_bytes(),
                },
                support::Part {
                    name: "file",
                    filename: Some("a.wav"),
                    data: b"RIFF....",
                },
            ],
        )
    };
    let ct = format!("multipart/form-data; boundary={boundary}");
    let resp = post_raw(
        &gw,
        "ka",
        "/v1/audio/transcriptions",
        Some(&ct),
        form("other"),
    )
    .await;
    let (status, _, body) = error_of(resp).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "model");
    assert!(
        recorded(&sim).await.is_empty(),
        "the form never reached the engine"
    );
    // The form naming the head's model goes through untouched.
    let resp = post_raw(&gw, "ka", "/v1/audio/transcriptions", Some(&ct), form("m")).await;
    assert_ne!(resp.status(), 400);
    assert_eq!(recorded(&sim).await.len(), 1);
}

/// Creates a stored response as `key` with a request body of about
/// `padding` bytes more than needed; returns its id.
async fn create_response(gw: &Gateway, key: &str, padding: usize) -> String {
    let body = json!({"model": "m", "input": "secret of tenant a", "store": true,
        "metadata": {"pad": "x".repeat(padding)}});
    let resp = client()
        .post(gw.url("/v1/responses"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("create");
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.expect("json");
    v["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn another_tenants_response_cannot_be_continued_with_an_untyped_body() {
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file();
    let gw = gateway(&sim, &keys, &[]);
    let id = create_response(&gw, "ka", 0).await;
    clear(&sim).await;
    for ct in JSON_AS_ENGINES_READ_IT {
        let body = json!({"model": "m", "input": "go on", "previous_response_id": id});
        let resp = post_raw(
            &gw,
            "kb",
            "/v1/responses",
            *ct,
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
        let (status, _, body) = error_of(resp).await;
        assert_eq!(status, 404, "{ct:?}: {body}");
        assert_openai_error(&body, "response_not_found");
    }
    assert!(recorded(&sim).await.is_empty());
}

#[tokio::test]
async fn a_large_request_still_records_its_responses_owner() {
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file();
    let gw = gateway(&sim, &keys, &[]);
    // Over Pingora's 64 KiB retry buffer: the subrequest path.
    let id = create_response(&gw, "ka", 100 * 1024).await;
    let get = |key: &'static str| {
        client()
            .get(gw.url(&format!("/v1/responses/{id}")))
            .bearer_auth(key)
            .send()
    };
    assert_eq!(
        get("ka").await.unwrap().status(),
        200,
        "its creator reads it"
    );
    assert_eq!(get("kb").await.unwrap().status(), 404, "nobody else does");
}

#[tokio::test]
async fn the_route_header_reaches_admin_keys_only_on_every_path() {
    let sim = pod("p", &["m"], &["--max-model-len", "200000"]);
    let (_dir, keys) = key_file();
    let gw = gateway(
        &sim,
        &keys,
        &["--route-debug-header", "true", "--usage-headers", "true"],
    );
    let small = json!({"model": "m", "max_tokens": 2,
        "messages": [{"role": "user", "content": "hi"}]});
    let mut large = small.clone();
    large["messages"][0]["content"] = json!("y".repeat(100 * 1024));
    for (what, body) in [("small", &small), ("over 64 KiB", &large)] {
        for (key, shown) in [("ka", false), (ADMIN_KEY, true)] {
            let resp = client()
                .post(gw.url("/v1/chat/completions"))
                .bearer_auth(key)
                .json(body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(
                resp.headers().contains_key("x-flexinfer-route"),
                shown,
                "{what} body, key {key}"
            );
        }
    }
}

/// A chat request with a prompt of many full cache blocks.
fn long_chat(salt: Option<&str>) -> Value {
    let mut body = json!({
        "model": "m",
        "max_tokens": 2,
        "messages": [
            {"role": "system", "content": "You answer questions about the tenant handbook. ".repeat(40)},
            {"role": "user", "content": "What is in chapter one?"}
        ],
    });
    if let Some(salt) = salt {
        body["cache_salt"] = json!(salt);
    }
    body
}

async fn cached_tokens(resp: reqwest::Response) -> u64 {
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_tenant_cannot_compute_or_pass_another_tenants_cache_salt() {
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file();
    let gw = gateway(&sim, &keys, &["--tenant-cache-salt", "true"]);
    // The salt the name alone gives, passed by b in a body the gateway
    // once forwarded unread.
    let mut named = Sha256::new();
    named.update(b"flexinfer cache salt\0a\0");
    let guessed = format!("t-{}", hex::encode(&named.finalize()[..16]));
    for (i, ct) in JSON_AS_ENGINES_READ_IT.iter().enumerate() {
        // A prompt of a's own for each try, so b has never sent it.
        let chat = |salt: Option<&str>| {
            let mut body = long_chat(salt);
            let system = format!(
                "Handbook {i}. {}",
                body["messages"][0]["content"].as_str().unwrap()
            );
            body["messages"][0]["content"] = json!(system);
            body
        };
        let send_a = || {
            client()
                .post(gw.url("/v1/chat/completions"))
                .bearer_auth("ka")
                .json(&chat(None))
                .send()
        };
        cached_tokens(send_a().await.unwrap()).await;
        assert!(
            cached_tokens(send_a().await.unwrap()).await > 0,
            "a hits its own"
        );
        let body = serde_json::to_vec(&chat(Some(&guessed))).unwrap();
        let resp = post_raw(&gw, "kb", "/v1/chat/completions", *ct, body).await;
        assert_eq!(
            cached_tokens(resp).await,
            0,
            "{ct:?}: b never reads a's cache"
        );
    }
}

#[tokio::test]
async fn messages_requests_are_salted_too() {
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file();
    let gw = gateway(&sim, &keys, &["--tenant-cache-salt", "true"]);
    let body = serde_json::to_vec(&json!({"model": "m", "max_tokens": 2,
        "messages": [{"role": "user", "content": "hi"}]}))
    .unwrap();
    clear(&sim).await;
    let resp = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "ka")
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = recorded(&sim).await;
    // `"cache_salt":"t-<32 hex digits>",` went in front of the members.
    assert_eq!(
        seen[0]["body_len"].as_u64().unwrap(),
        body.len() as u64 + 50,
        "{seen:?}"
    );
}
