//! The simulator's HTTP API, driven over loopback against the real binary.

use crate::support;

use flexinfer_conformance::sim::{synth, SimConfig, SimServer};
use futures::StreamExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{get, post_json, sim, sse_data};

fn chat(model: &str, max_tokens: Option<u32>) -> Value {
    let mut body =
        json!({"model": model, "messages": [{"role": "user", "content": "tell me a story"}]});
    if let Some(n) = max_tokens {
        body["max_tokens"] = json!(n);
    }
    body
}

async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("json error body");
    (status, body)
}

#[tokio::test]
async fn bad_json_is_an_openai_shaped_400() {
    let sim = sim(&[]);
    let response = support::client()
        .post(format!("{}/v1/chat/completions", sim.base_url()))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("request");
    let (status, body) = error_of(response).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "BadRequestError");
    assert_eq!(body["error"]["code"], 400);
    assert_eq!(body["error"]["param"], Value::Null);
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn missing_messages_and_bad_values_are_400() {
    let sim = sim(&[]);
    let base = sim.base_url();
    for body in [
        json!({"model": "sim-model"}),
        json!({"messages": "hello"}),
        json!({"messages": []}),
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": -3}),
        json!({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}),
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}),
    ] {
        let (status, error) = error_of(post_json(&base, "/v1/chat/completions", &body).await).await;
        assert_eq!(status, 400, "{body} -> {error}");
        assert_eq!(error["error"]["type"], "BadRequestError", "{body}");
    }
    let (status, _) =
        error_of(post_json(&base, "/v1/completions", &json!({"max_tokens": 2})).await).await;
    assert_eq!(status, 400, "completions without prompt");
}

#[tokio::test]
async fn unknown_model_is_404_like_vllm() {
    let sim = sim(&["--model", "served"]);
    let base = sim.base_url();
    for path in ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"] {
        let body = json!({"model": "nope", "messages": [{"role": "user", "content": "x"}], "prompt": "x", "input": "x"});
        let (status, error) = error_of(post_json(&base, path, &body).await).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(
            error,
            json!({"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError", "param": null, "code": 404}}),
            "{path}"
        );
    }
}

#[tokio::test]
async fn chat_completion_has_openai_shape_and_lengths() {
    let sim = sim(&["--model", "a", "--model", "b", "--default-max-tokens", "5"]);
    let base = sim.base_url();
    let response = post_json(&base, "/v1/chat/completions", &chat("b", Some(7))).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .is_ok_and(|c| c.starts_with("application/json")));
    let body: Value = response.json().await.expect("json");
    assert!(body["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("chatcmpl-")));
    assert_eq!(body["object"], "chat.completion");
    assert!(body["created"].as_u64().is_some_and(|c| c > 1_600_000_000));
    assert_eq!(body["model"], "b");
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["finish_reason"], "length");
    let content = choice["message"]["content"].as_str().expect("content");
    assert_eq!(content.split_whitespace().count(), 7);
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 4, "completion_tokens": 7, "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": 0}})
    );

    // Deterministic: the same request gives the same text.
    let again: Value = post_json(&base, "/v1/chat/completions", &chat("b", Some(7)))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(again["choices"][0]["message"]["content"], content);

    // No length given: the default (no model given: the first model).
    let mut body = chat("a", None);
    body.as_object_mut().expect("object").remove("model");
    let body: Value = post_json(&base, "/v1/chat/completions", &body)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(body["model"], "a");
    assert_eq!(body["usage"]["completion_tokens"], 5);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");

    // max_completion_tokens wins over max_tokens.
    let mut body = chat("a", Some(9));
    body["max_completion_tokens"] = json!(2);
    let body: Value = post_json(&base, "/v1/chat/completions", &body)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(body["usage"]["completion_tokens"], 2);
}

#[tokio::test]
async fn streamed_chat_follows_openai_framing_with_usage_chunk() {
    let sim = sim(&[]);
    let mut body = chat("sim-model", Some(4));
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let response = post_json(&sim.base_url(), "/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.expect("body");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let events = sse_data(&text);
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk json"))
        .collect();
    assert_eq!(chunks.len(), 1 + 4 + 1 + 1, "role, 4 tokens, finish, usage");
    let id = &chunks[0]["id"];
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && &c["id"] == id));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks[1..5]
        .iter()
        .map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .expect("content delta")
                .to_owned()
        })
        .collect();
    assert_eq!(content.split_whitespace().count(), 4);
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[6]["choices"], json!([]));
    assert_eq!(
        chunks[6]["usage"],
        json!({"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8, "prompt_tokens_details": {"cached_tokens": 0}})
    );

    // The streamed text equals the non-streamed one.
    let whole: Value = post_json(
        &sim.base_url(),
        "/v1/chat/completions",
        &chat("sim-model", Some(4)),
    )
    .await
    .json()
    .await
    .expect("json");
    assert_eq!(whole["choices"][0]["message"]["content"], content);

    // Without include_usage there is no usage chunk.
    body["stream_options"] = json!({"include_usage": false});
    let text = post_json(&sim.base_url(), "/v1/chat/completions", &body)
        .await
        .text()
        .await
        .expect("body");
    assert!(!text.contains("\"usage\""), "{text}");
}

#[tokio::test]
async fn text_completions_whole_and_streamed() {
    let sim = sim(&[]);
    let base = sim.base_url();
    let body: Value = post_json(
        &base,
        "/v1/completions",
        &json!({"prompt": ["one two", "three"], "max_tokens": 3}),
    )
    .await
    .json()
    .await
    .expect("json");
    assert_eq!(body["object"], "text_completion");
    assert!(body["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("cmpl-")));
    assert_eq!(body["choices"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}})
    );

    let text = post_json(
        &base,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2, "stream": true}),
    )
    .await
    .text()
    .await
    .expect("body");
    let events = sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let first: Value = serde_json::from_str(&events[0]).expect("json");
    assert_eq!(first["object"], "text_completion");
    assert!(first["choices"][0]["text"].is_string());
}

#[tokio::test]
async fn embeddings_are_deterministic_unit_vectors() {
    let sim = sim(&["--embedding-dim", "16"]);
    let base = sim.base_url();
    let body: Value = post_json(
        &base,
        "/v1/embeddings",
        &json!({"input": ["hello world", "bye"]}),
    )
    .await
    .json()
    .await
    .expect("json");
    assert_eq!(body["object"], "list");
    let data = body["data"].as_array().expect("data");
    assert_eq!(data.len(), 2);
    let vector: Vec<f32> = serde_json::from_value(data[0]["embedding"].clone()).expect("floats");
    assert_eq!(vector, synth::embedding("hello world", 16));
    assert_eq!(data[1]["index"], 1);
    assert_eq!(body["usage"]["prompt_tokens"], 4);

    let body: Value = post_json(
        &base,
        "/v1/embeddings",
        &json!({"input": "x", "dimensions": 4}),
    )
    .await
    .json()
    .await
    .expect("json");
    assert_eq!(
        body["data"][0]["embedding"].as_array().map(Vec::len),
        Some(4)
    );
}

#[tokio::test]
async fn image_generation_returns_a_png() {
    let sim = sim(&["--model", "sd"]);
    let body: Value = post_json(
        &sim.base_url(),
        "/v1/images/generations",
        &json!({"prompt": "a red cat", "n": 2}),
    )
    .await
    .json()
    .await
    .expect("json");
    let data = body["data"].as_array().expect("data");
    assert_eq!(data.len(), 2);
    let png = decode_b64(data[0]["b64_json"].as_str().expect("b64_json"));
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(data[0].get("url").is_none());
}

fn decode_b64(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

#[tokio::test]
async fn multipart_image_edit_works_and_is_recorded() {
    let sim = sim(&["--model", "sd"]);
    let base = sim.base_url();
    let mut body = Vec::new();
    body.extend_from_slice(
        b"--BOUNDARY\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nsd\r\n",
    );
    body.extend_from_slice(
        b"--BOUNDARY\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nadd a hat\r\n",
    );
    body.extend_from_slice(
        b"--BOUNDARY\r\nContent-Disposition: form-data; name=\"image\"; filename=\"in.png\"\r\nContent-Type: image/png\r\n\r\n",
    );
    body.extend_from_slice(&synth::png("input"));
    body.extend_from_slice(b"\r\n--BOUNDARY--\r\n");
    let digest: String = Sha256::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let response = support::client()
        .post(format!("{base}/v1/images/edits"))
        .header("content-type", "multipart/form-data; boundary=BOUNDARY")
        .body(body.clone())
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("json");
    let png = decode_b64(answer["data"][0]["b64_json"].as_str().expect("b64_json"));
    assert!(png.starts_with(b"\x89PNG"));

    let records: Value = get(&base, "/sim/requests")
        .await
        .json()
        .await
        .expect("json");
    let record = records
        .as_array()
        .and_then(|r| r.iter().find(|r| r["path"] == "/v1/images/edits"))
        .expect("recorded edit");
    assert_eq!(record["model"], "sd");
    assert_eq!(record["body_sha256"], digest);
    assert_eq!(record["body_len"], body.len());
    assert_eq!(
        record["content_type"],
        "multipart/form-data; boundary=BOUNDARY"
    );

    // Missing image → 400; unknown model in the form → 404.
    let no_image = "--B\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nx\r\n--B--\r\n";
    let response = support::client()
        .post(format!("{base}/v1/images/edits"))
        .header("content-type", "multipart/form-data; boundary=B")
        .body(no_image)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn lora_adapters_load_list_serve_and_unload() {
    let sim = sim(&["--model", "base"]);
    let base = sim.base_url();
    let load = json!({"lora_name": "sql", "lora_path": "/adapters/sql"});
    let response = post_json(&base, "/v1/load_lora_adapter", &load).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.text().await.expect("text"),
        "Success: LoRA adapter 'sql' added successfully."
    );

    let models: Value = get(&base, "/v1/models").await.json().await.expect("json");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["base", "sql"]);
    assert_eq!(models["data"][1]["parent"], "base");

    let body: Value = post_json(&base, "/v1/chat/completions", &chat("sql", Some(2)))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(body["model"], "sql");

    let (status, error) = error_of(post_json(&base, "/v1/load_lora_adapter", &load).await).await;
    assert_eq!(status, 400);
    assert_eq!(
        error["error"]["message"],
        "The lora adapter 'sql' has already been loaded."
    );
    let (status, _) =
        error_of(post_json(&base, "/v1/load_lora_adapter", &json!({"lora_name": "x"})).await).await;
    assert_eq!(status, 400);

    let response = post_json(
        &base,
        "/v1/unload_lora_adapter",
        &json!({"lora_name": "sql"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (status, error) = error_of(
        post_json(
            &base,
            "/v1/unload_lora_adapter",
            &json!({"lora_name": "sql"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(error["error"]["type"], "NotFoundError");
    let (status, _) =
        error_of(post_json(&base, "/v1/chat/completions", &chat("sql", Some(2))).await).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn every_response_carries_x_served_by() {
    let sim = sim(&["--pod-name", "pod-7"]);
    let base = sim.base_url();
    let client = support::client();
    let responses = vec![
        get(&base, "/health").await,
        get(&base, "/healthz").await,
        get(&base, "/metrics").await,
        get(&base, "/v1/models").await,
        get(&base, "/sim/requests").await,
        get(&base, "/anything/else").await,
        get(&base, "/v1/chat/completions").await, // 405
        post_json(&base, "/v1/chat/completions", &chat("sim-model", Some(1))).await,
        post_json(&base, "/v1/chat/completions", &chat("missing", Some(1))).await,
        client
            .post(format!("{base}/v1/embeddings"))
            .body("{")
            .send()
            .await
            .expect("request"),
    ];
    for response in responses {
        assert_eq!(
            response.headers().get("x-served-by").map(|v| v.as_bytes()),
            Some(&b"pod-7"[..]),
            "{}",
            response.url()
        );
    }
    // The default identity is <hostname>:<port>.
    let unnamed = support::sim(&[]);
    let response = get(&unnamed.base_url(), "/health").await;
    let served_by = response.headers()["x-served-by"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        served_by.ends_with(&format!(":{}", unnamed.addr().port())),
        "{served_by}"
    );
}

#[tokio::test]
async fn recorder_lists_clears_and_echoes() {
    let sim = sim(&[]);
    let base = sim.base_url();
    let client = support::client();
    let echo: Value = client
        .put(format!("{base}/model/x/v2/things?debug=1"))
        .header("authorization", "Bearer secret")
        .header("x-custom", "a")
        .json(&json!({"model": "rewritten", "k": 1}))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(echo["method"], "PUT");
    assert_eq!(echo["path"], "/model/x/v2/things");
    assert_eq!(echo["query"], "debug=1");
    assert_eq!(echo["headers"]["authorization"], "Bearer secret");
    assert_eq!(echo["headers"]["x-custom"], "a");
    assert_eq!(echo["model"], "rewritten");
    assert_eq!(echo["content_type"], "application/json");

    post_json(&base, "/v1/chat/completions", &chat("sim-model", Some(1))).await;
    let records: Vec<Value> = get(&base, "/sim/requests")
        .await
        .json()
        .await
        .expect("json");
    let paths: Vec<&str> = records.iter().filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(
        paths,
        ["/model/x/v2/things", "/v1/chat/completions"],
        "control paths are not recorded"
    );
    assert_eq!(records[1]["model"], "sim-model");
    assert_eq!(records[1]["method"], "POST");
    assert!(records[0]["seq"].as_u64() < records[1]["seq"].as_u64());

    let cleared: Value = client
        .delete(format!("{base}/sim/requests"))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(cleared["cleared"], 2);
    let records: Vec<Value> = get(&base, "/sim/requests")
        .await
        .json()
        .await
        .expect("json");
    assert!(records.is_empty());
}

#[tokio::test]
async fn runs_in_process_too() {
    let server = SimServer::start(SimConfig::with_models(["inproc"]))
        .await
        .expect("start");
    let body: Value = post_json(
        &server.base_url(),
        "/v1/chat/completions",
        &chat("inproc", Some(3)),
    )
    .await
    .json()
    .await
    .expect("json");
    assert_eq!(body["usage"]["completion_tokens"], 3);
    let recorded = server.state().recorder.snapshot();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].model.as_deref(), Some("inproc"));
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn responses_api_stores_and_answers_follow_ups() {
    let sim = sim(&["--ttft", "300ms"]);
    let base = sim.base_url();

    let (status, error) =
        error_of(post_json(&base, "/v1/responses", &json!({"model": "sim-model"})).await).await;
    assert_eq!(status, 400, "{error}");
    let (status, error) = error_of(get(&base, "/v1/responses/resp_nope").await).await;
    assert_eq!(status, 404);
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("resp_nope"));

    let created: Value = post_json(
        &base,
        "/v1/responses",
        &json!({"model": "sim-model", "input": "hi", "metadata": {"k": "v"}}),
    )
    .await
    .json()
    .await
    .expect("json");
    let id = created["id"].as_str().expect("id");
    assert_eq!(created["metadata"], json!({"k": "v"}));
    let retrieved: Value = get(&base, &format!("/v1/responses/{id}"))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(retrieved, created);
    let items: Value = get(&base, &format!("/v1/responses/{id}/input_items"))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(items["data"][0]["content"][0]["text"], "hi");

    let unstored: Value = post_json(
        &base,
        "/v1/responses",
        &json!({"model": "sim-model", "input": "hi", "store": false}),
    )
    .await
    .json()
    .await
    .expect("json");
    let unstored_id = unstored["id"].as_str().expect("id");
    assert_eq!(
        get(&base, &format!("/v1/responses/{unstored_id}"))
            .await
            .status(),
        404
    );

    // A stream is stored in progress at once; cancelling it sticks.
    let stream = post_json(
        &base,
        "/v1/responses",
        &json!({"model": "sim-model", "input": "hi", "stream": true}),
    )
    .await;
    assert_eq!(stream.status(), 200);
    let mut events = stream.bytes_stream();
    let first = events.next().await.expect("first events").expect("bytes");
    let first = String::from_utf8_lossy(&first).into_owned();
    let data = first
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("data line");
    let created: Value = serde_json::from_str(data).expect("json");
    let stream_id = created["response"]["id"].as_str().expect("id");
    let cancelled: Value = support::client()
        .post(format!("{base}/v1/responses/{stream_id}/cancel"))
        .send()
        .await
        .expect("cancel")
        .json()
        .await
        .expect("json");
    assert_eq!(cancelled["status"], "cancelled");
    while events.next().await.is_some() {}
    let after: Value = get(&base, &format!("/v1/responses/{stream_id}"))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(after["status"], "cancelled");

    let deleted = support::client()
        .delete(format!("{base}/v1/responses/{id}"))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 200);
    assert_eq!(
        get(&base, &format!("/v1/responses/{id}")).await.status(),
        404
    );
}

#[tokio::test]
async fn messages_api_errors_use_anthropic_shape() {
    let sim = sim(&[]);
    let base = sim.base_url();
    let hello = json!([{"role": "user", "content": "hello"}]);
    for (body, status, kind) in [
        (json!({"messages": hello}), 400, "invalid_request_error"),
        (json!({"max_tokens": 5}), 400, "invalid_request_error"),
        (
            json!({"max_tokens": 5, "messages": hello}),
            400,
            "invalid_request_error",
        ),
        (
            json!({"max_tokens": 5, "messages": hello, "model": "nope"}),
            404,
            "not_found_error",
        ),
    ] {
        let (got, error) = error_of(post_json(&base, "/v1/messages", &body).await).await;
        assert_eq!(got, status, "{body} -> {error}");
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], kind, "{body}");
    }
    let message: Value = post_json(
        &base,
        "/v1/messages",
        &json!({"model": "sim-model", "max_tokens": 5, "messages": hello}),
    )
    .await
    .json()
    .await
    .expect("json");
    assert_eq!(message["model"], "sim-model");
    assert_eq!(message["stop_reason"], "max_tokens");
    assert_eq!(message["usage"]["output_tokens"], 5);
}
