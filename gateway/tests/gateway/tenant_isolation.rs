//! Tenant isolation (`docs/tenants.md`, "What is isolated"): with an
//! API-key file, a tenant follows up, continues, cancels and deletes only
//! the Responses API responses it created, and is answered exactly as for
//! an unknown id otherwise; routes of stored objects the gateway cannot
//! scope are closed to tenants; `/metrics` on the proxy listener needs an
//! admin key; `--tenant-cache-salt` keeps each tenant's prefix-cache hits
//! its own. Real gateway binary, real `flexinfer-sim` engines, plain HTTP
//! and the official OpenAI SDK.

use crate::support;

use std::path::{Path, PathBuf};

use flexinfer_conformance::python;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{assert_openai_error, clear, client, endpoints, pod, recorded, Gateway};

const ADMIN_KEY: &str = "admin-key";
const TWO_TENANTS: &str = "tenants:\n  - name: a\n    keys: [ka]\n  - name: b\n    keys: [kb]\n";

fn key_file(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("keys.yaml");
    std::fs::write(&path, yaml).expect("key file");
    (dir, path)
}

fn gateway(sim: &support::SimProcess, keys: &Path, extra: &[&str]) -> Gateway {
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[sim]));
    let mut args = vec![
        "--api-key-file",
        keys.to_str().unwrap(),
        "--admin-auth-token",
        ADMIN_KEY,
    ];
    args.extend_from_slice(extra);
    Gateway::start(&yaml, &args)
}

/// Status and JSON body of a request with `key`, the id `id` in the body
/// written as `ID` (so answers about two ids compare).
async fn send(
    gw: &Gateway,
    key: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    id: &str,
) -> (u16, Value) {
    let mut req = client().request(method, gw.url(path)).bearer_auth(key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default().replace(id, "ID");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Every follow-up of a stored response, as (method, path, body): the
/// plain routes, the `/model/<name>` prefix that names the model in the
/// head, a percent-escaped id an engine's router decodes, and a create
/// request continuing the response.
fn follow_ups(id: &str) -> Vec<(reqwest::Method, String, Option<Value>)> {
    use reqwest::Method;
    let escaped = format!("%{:02X}{}", id.as_bytes()[0], &id[1..]);
    vec![
        (Method::GET, format!("/v1/responses/{id}"), None),
        (Method::GET, format!("/v1/responses/{id}/input_items"), None),
        (Method::POST, format!("/v1/responses/{id}/cancel"), None),
        (Method::GET, format!("/model/m/v1/responses/{id}"), None),
        (Method::GET, format!("/v1/responses/{escaped}"), None),
        (Method::GET, format!("//v1/responses/{id}/"), None),
        (
            Method::POST,
            "/v1/responses".to_owned(),
            Some(json!({"model": "m", "input": "go on", "previous_response_id": id})),
        ),
        (Method::DELETE, format!("/v1/responses/{id}"), None),
    ]
}

/// The API requests an engine received (not health checks or scrapes).
async fn api_requests(sim: &support::SimProcess) -> Vec<Value> {
    let mut requests = recorded(sim).await;
    requests.retain(|r| r["path"].as_str().is_some_and(|p| p.starts_with("/v1/")));
    requests
}

async fn create_response(gw: &Gateway, key: &str) -> String {
    let (status, body) = send(
        gw,
        key,
        reqwest::Method::POST,
        "/v1/responses",
        Some(json!({"model": "m", "input": "secret of tenant a", "store": true})),
        "\u{0}",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().expect("response id").to_owned()
}

#[tokio::test]
async fn a_tenant_reaches_only_the_responses_it_created() {
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file(TWO_TENANTS);
    let gw = gateway(&sim, &keys, &[]);
    let id = create_response(&gw, "ka").await;
    // An id of the same shape that nobody created.
    let unknown = format!("resp_{}", "0".repeat(id.len() - 5));

    clear(&sim).await;
    for (method, path, body) in follow_ups(&id) {
        let on_a = send(&gw, "kb", method.clone(), &path, body.clone(), &id).await;
        let path_unknown = path.replace(&id, &unknown).replace(
            &format!("%{:02X}{}", id.as_bytes()[0], &id[1..]),
            &format!("%{:02X}{}", unknown.as_bytes()[0], &unknown[1..]),
        );
        let body_unknown = body
            .map(|b| serde_json::from_str(&b.to_string().replace(&id, &unknown)).expect("json"));
        let on_unknown = send(&gw, "kb", method, &path_unknown, body_unknown, &unknown).await;
        assert_eq!(on_a.0, 404, "{path}: {}", on_a.1);
        assert_openai_error(&on_a.1, "response_not_found");
        assert_eq!(
            on_a, on_unknown,
            "{path}: a's id and an unknown id answer alike"
        );
    }
    // None of b's attempts reached the engine.
    assert_eq!(api_requests(&sim).await, Vec::<Value>::new());

    // a's response is whole: a reads, lists and continues it; admins too.
    let get = reqwest::Method::GET;
    let path = format!("/v1/responses/{id}");
    let (status, body) = send(&gw, "ka", get.clone(), &path, None, "\u{0}").await;
    assert_eq!((status, body["id"].as_str()), (200, Some(id.as_str())));
    let items = format!("/v1/responses/{id}/input_items");
    let (status, body) = send(&gw, "ka", get.clone(), &items, None, "\u{0}").await;
    assert_eq!(status, 200);
    assert!(body.to_string().contains("secret of tenant a"), "{body}");
    let go_on = json!({"model": "m", "input": "go on", "previous_response_id": id});
    let (status, body) = send(
        &gw,
        "ka",
        reqwest::Method::POST,
        "/v1/responses",
        Some(go_on),
        "\u{0}",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["previous_response_id"], json!(id));
    let (status, _) = send(&gw, ADMIN_KEY, get.clone(), &path, None, "\u{0}").await;
    assert_eq!(status, 200, "admin keys are not confined to a tenant");

    // Once a may no longer use the model, its response is unknown to it too.
    std::fs::write(
        &keys,
        "tenants:\n  - name: a\n    keys: [ka]\n    models: [other]\n  - name: b\n    keys: [kb]\n",
    )
    .unwrap();
    let mut gone = (0, Value::Null);
    for _ in 0..100 {
        gone = send(&gw, "ka", get.clone(), &path, None, &id).await;
        if gone.0 == 404 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let unknown_path = format!("/v1/responses/{unknown}");
    let never = send(&gw, "ka", get.clone(), &unknown_path, None, &unknown).await;
    assert_eq!(gone, never, "after the reload");
}

#[tokio::test]
async fn routes_a_gateway_cannot_scope_are_closed_to_tenants() {
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file(TWO_TENANTS);
    let gw = gateway(&sim, &keys, &[]);
    let get = reqwest::Method::GET;
    clear(&sim).await;
    // Stored chat completions and their listing, named through the head.
    for path in [
        "/model/m/v1/chat/completions",
        "/model/m/v1/chat/completions/chatcmpl-1",
        "/model/m/v1/chat/completions/chatcmpl-1/messages",
        "/model/m/v1/messages/batches/b1",
        "/model/m/v1/responses",
    ] {
        let (status, body) = send(&gw, "kb", get.clone(), path, None, "\u{0}").await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_openai_error(&body, "not_found");
    }
    // A Responses `conversation` names state the gateway cannot scope.
    let (status, body) = send(
        &gw,
        "kb",
        reqwest::Method::POST,
        "/v1/responses",
        Some(json!({"model": "m", "input": "hi", "conversation": "conv_1"})),
        "\u{0}",
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_openai_error(&body, "conversation_not_found");
    // A previous_response_id that is not a string cannot be checked.
    let (status, body) = send(
        &gw,
        "kb",
        reqwest::Method::POST,
        "/v1/responses",
        Some(json!({"model": "m", "input": "hi", "previous_response_id": {"id": "x"}})),
        "\u{0}",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body, "invalid_field_value");
    assert_eq!(api_requests(&sim).await, Vec::<Value>::new());

    // /admin/models names every model, also those a tenant may not see.
    let (status, body) = send(&gw, "kb", get.clone(), "/admin/models", None, "\u{0}").await;
    assert_eq!(status, 403, "{body}");
    assert_openai_error(&body, "admin_key_required");
    let (status, _) = send(&gw, ADMIN_KEY, get.clone(), "/admin/models", None, "\u{0}").await;
    assert_eq!(status, 200);

    // /metrics names every tenant: only for admin keys on this listener.
    let resp = client().get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 403);
    let resp = client()
        .get(gw.url("/metrics"))
        .bearer_auth("ka")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let resp = client()
        .get(gw.url("/metrics"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn without_a_key_file_follow_ups_are_as_before() {
    let sim = pod("p", &["m"], &[]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    // Plain keys are one anonymous tenant: any of them reaches any response.
    let gw = Gateway::start(&yaml, &["--auth-enabled", "true", "--auth-token", "k1,k2"]);
    let id = create_response(&gw, "k1").await;
    let path = format!("/v1/responses/{id}");
    let (status, _) = send(&gw, "k2", reqwest::Method::GET, &path, None, "\u{0}").await;
    assert_eq!(status, 200);
    let resp = client().get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200, "no key file: /metrics stays open");
    // An id the gateway never saw, with the model named in the head, still
    // reaches the engine (which answers for itself).
    let (status, body) = send(
        &gw,
        "k2",
        reqwest::Method::GET,
        "/model/m/v1/responses/resp_elsewhere",
        None,
        "\u{0}",
    )
    .await;
    assert_eq!(status, 404);
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("not found.")),
        "the engine's own answer: {body}"
    );
}

#[test]
fn openai_sdk_tenants_cannot_reach_each_others_responses() {
    let python = python::interpreter();
    python::require(&python, "openai", "run scripts/setup.sh");
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file(TWO_TENANTS);
    let gw = gateway(&sim, &keys, &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/openai_sdk_tenants.py");
    let base = format!("http://{}", gw.addr);
    let out = python::run_json(&python, &script, &[&base, "ka", "kb", "m"]);

    for op in ["retrieve", "input_items", "cancel", "continue", "delete"] {
        let on_a = &out["b_on_a"][op];
        assert_eq!(on_a["status"], 404, "{op}: {on_a}");
        assert_eq!(on_a["body"]["error"]["code"], "response_not_found", "{op}");
        assert_eq!(on_a, &out["b_on_unknown"][op], "{op}: indistinguishable");
    }
    assert_eq!(out["a_retrieve"]["status"], 200, "{}", out["a_retrieve"]);
    assert_eq!(out["a_retrieve"]["result"]["id"], out["created"]);
    let items = out["a_input_items"]["result"].to_string();
    assert!(items.contains("secret of tenant a"), "{items}");
    assert_eq!(out["a_continue"]["status"], 200, "{}", out["a_continue"]);
    assert_eq!(
        out["a_continue"]["result"]["previous_response_id"],
        out["created"]
    );
    assert_eq!(out["a_delete"]["status"], 200, "{}", out["a_delete"]);
    assert_eq!(out["a_after_delete"]["status"], 404);
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

async fn cached_tokens(gw: &Gateway, key: &str, salt: Option<&str>) -> u64 {
    let (status, body) = send(
        gw,
        key,
        reqwest::Method::POST,
        "/v1/chat/completions",
        Some(long_chat(salt)),
        "\u{0}",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test]
async fn tenant_cache_salt_keeps_prefix_hits_within_a_tenant() {
    // Without salting, b's first request hits what a's left in the cache.
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file(TWO_TENANTS);
    let gw = gateway(&sim, &keys, &[]);
    assert_eq!(cached_tokens(&gw, "ka", None).await, 0);
    assert!(cached_tokens(&gw, "kb", None).await > 0, "shared cache");
    drop(gw);

    let sim = pod("p", &["m"], &[]);
    let gw = gateway(&sim, &keys, &["--tenant-cache-salt", "true"]);
    assert_eq!(cached_tokens(&gw, "ka", None).await, 0);
    assert!(cached_tokens(&gw, "ka", None).await > 0, "a hits its own");
    assert_eq!(cached_tokens(&gw, "kb", None).await, 0, "b never hits a's");
    // A salt of b's own choosing cannot be a's: the gateway derives it.
    let mut a_salt = Sha256::new();
    a_salt.update(b"flexinfer cache salt\0a\0");
    let a_salt = format!("t-{}", hex::encode(&a_salt.finalize()[..16]));
    assert_eq!(cached_tokens(&gw, "kb", Some(&a_salt)).await, 0);
    // A client's own salt partitions within its tenant.
    assert_eq!(cached_tokens(&gw, "ka", Some("user-1")).await, 0);
    assert!(cached_tokens(&gw, "ka", Some("user-1")).await > 0);
    // Admin keys belong to no tenant: their requests are not salted.
    let unsalted = cached_tokens(&gw, ADMIN_KEY, None).await;
    assert_eq!(unsalted, 0);
    assert!(cached_tokens(&gw, ADMIN_KEY, None).await > 0);
}

/// Stored responses across replicas (two peered replicas, two engines
/// behind the model, a key file): tenant a reads, lists, cancels,
/// continues and deletes its response through the replica that did not
/// create it, each time on the engine that holds it; tenant b gets the
/// unknown-id answer from both replicas.
#[tokio::test]
async fn a_tenants_stored_response_is_reached_through_either_replica() {
    use reqwest::Method;
    let sims = [pod("p1", &["m"], &[]), pod("p2", &["m"], &[])];
    let (_dir, keys) = key_file(TWO_TENANTS);
    let yaml = format!(
        "models:\n- name: m\n  endpoints: {}\n",
        endpoints(&[&sims[0], &sims[1]])
    );
    let ports = [support::free_port(), support::free_port()];
    let args = [
        "--api-key-file",
        keys.to_str().unwrap(),
        "--admin-auth-token",
        ADMIN_KEY,
    ];
    let replicas = crate::peers::peered(&yaml, &ports, &args);
    // `/metrics` on the proxy port takes an admin key here.
    let series = |gw: &Gateway, name: &'static str| {
        let req = client().get(gw.url("/metrics")).bearer_auth(ADMIN_KEY);
        async move {
            let text = req.send().await.expect("metrics").text().await.unwrap();
            support::metric_value(&text, name)
        }
    };
    for gw in &replicas {
        let linked = "flexinfer_proxy_routing_peer_snapshots_total{result=\"applied\"}";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while series(gw, linked).await < 1.0 {
            assert!(std::time::Instant::now() < deadline, "peers never linked");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    let (creator, other) = (&replicas[0], &replicas[1]);
    let id = create_response(creator, "ka").await;
    let unknown = format!("resp_{}", "0".repeat(id.len() - 5));

    // Only the engine that stored it knows the id: every answer below
    // would be the engine's own 404 half of the time without pinning.
    let path = format!("/v1/responses/{id}");
    for _ in 0..4 {
        let (status, body) = send(other, "ka", Method::GET, &path, None, "\u{0}").await;
        assert_eq!(
            (status, body["id"].as_str()),
            (200, Some(id.as_str())),
            "{body}"
        );
    }
    let items = format!("/v1/responses/{id}/input_items");
    let (status, body) = send(other, "ka", Method::GET, &items, None, "\u{0}").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains("secret of tenant a"), "{body}");
    let cancel = format!("/v1/responses/{id}/cancel");
    let (status, body) = send(other, "ka", Method::POST, &cancel, None, "\u{0}").await;
    assert_eq!(
        (status, body["id"].as_str()),
        (200, Some(id.as_str())),
        "{body}"
    );
    let go_on = json!({"model": "m", "input": "go on", "previous_response_id": id});
    for _ in 0..2 {
        let (status, body) = send(
            other,
            "ka",
            Method::POST,
            "/v1/responses",
            Some(go_on.clone()),
            "\u{0}",
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["previous_response_id"], json!(id));
    }

    // Tenant b: the unknown-id answer from both replicas, for every route.
    for gw in &replicas {
        for (method, path, body) in follow_ups(&id) {
            let path_unknown = path.replace(&id, &unknown).replace(
                &format!("%{:02X}{}", id.as_bytes()[0], &id[1..]),
                &format!("%{:02X}{}", unknown.as_bytes()[0], &unknown[1..]),
            );
            let body_unknown = body.as_ref().map(|b| {
                serde_json::from_str(&b.to_string().replace(&id, &unknown)).expect("json")
            });
            let on_a = send(gw, "kb", method.clone(), &path, body, &id).await;
            let on_unknown = send(gw, "kb", method, &path_unknown, body_unknown, &unknown).await;
            assert_eq!(on_a.0, 404, "{path}: {}", on_a.1);
            assert_openai_error(&on_a.1, "response_not_found");
            assert_eq!(
                on_a, on_unknown,
                "{path}: a's id and an unknown id answer alike"
            );
        }
    }

    // a deletes it through the other replica; the engine forgets it.
    let (status, body) = send(other, "ka", Method::DELETE, &path, None, "\u{0}").await;
    assert_eq!(
        (status, body["deleted"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    let found = series(
        other,
        "flexinfer_proxy_routing_peer_origin_lookups_total{result=\"found\"}",
    )
    .await;
    assert_eq!(found, 1.0, "one lookup, then the origin is remembered");
}
