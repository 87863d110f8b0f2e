//! The simulator's answers, JSON and every streamed event, with and without
//! tools, validated against the published schemas vendored in
//! `conformance/schemas/` (OpenAI's OpenAPI document, Open Responses,
//! Anthropic's OpenAPI document) by `tests/python/schema_check.py`: taken
//! from the simulator itself and through a `flexinfer-gateway` in front of
//! it (whose own errors are checked too).
//!
//! Three checks of the published documents are judged wrong and applied
//! narrowly (each asserted before it is set aside):
//! - OpenAI's `CreateCompletionResponse` is shared by streamed chunks, but
//!   its `finish_reason` is not nullable; OpenAI and vLLM send `null` in
//!   every chunk but the last. Those chunks are validated with it set.
//! - OpenAI's `Response` reuses request parameter schemas for
//!   `safety_identifier` and `prompt_cache_key` (strings); the API answers
//!   `null` when the request had none, which Open Responses requires. They
//!   are dropped before validating against OpenAI's document only.
//! - Anthropic's `MessageStreamEvent` lacks `ping`, which Anthropic's
//!   streams send (and documents); a ping must be exactly `{"type":"ping"}`.
//! - OpenAI's `Error.code` is a string; vLLM, which the simulator stands in
//!   for, sends the HTTP status as a number. It is checked to be the status,
//!   then validated as its string.
//! - OpenAI's `Embedding.embedding` is an array of numbers only; with
//!   `encoding_format: "base64"` the API answers a string. Base64 answers
//!   are validated with the float vector they decode to.

use crate::support;

use std::path::Path;

use base64::Engine as _;
use flexinfer_conformance::conformance::local::{LocalOptions, LocalStack, MODEL};
use flexinfer_conformance::python;
use flexinfer_conformance::sim::process::SimProcess;
use serde_json::{json, Value};
use support::post_json;

const SETUP_HINT: &str =
    "pip install jsonschema openai anthropic, or run scripts/setup.sh (which sets up .venv) \
                          and point FLEXINFER_PYTHON at .venv/bin/python";

fn weather() -> Value {
    json!({
        "type": "object",
        "properties": {
            "location": {"type": "string", "minLength": 2},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "detail": {"type": "object", "properties": {
                "hourly": {"type": "boolean"},
                "fields": {"type": "array", "items": {"type": "string", "enum": ["temp", "wind", "rain"]},
                           "minItems": 1, "uniqueItems": true}
            }, "required": ["fields"], "additionalProperties": false}
        },
        "required": ["location", "unit", "detail"],
        "additionalProperties": false
    })
}

/// Cases for `schema_check.py`.
#[derive(Default)]
struct Cases(Vec<Value>);

impl Cases {
    fn add(&mut self, label: impl Into<String>, doc: &str, schema: &str, instance: Value) {
        self.0.push(
            json!({"label": label.into(), "doc": doc, "schema": schema, "instance": instance}),
        );
    }

    fn inline(&mut self, label: impl Into<String>, schema: Value, instance: Value) {
        self.0
            .push(json!({"label": label.into(), "inline": schema, "instance": instance}));
    }

    /// Runs the checker; the results by label and the `nullable` counts.
    fn check(&self, name: &str) -> (Vec<(String, Vec<String>)>, Value) {
        let python = python::interpreter();
        python::require(&python, "jsonschema", SETUP_HINT);
        let dir =
            std::env::temp_dir().join(format!("flexinfer-schema-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("cases.json");
        std::fs::write(&file, serde_json::to_vec(&self.0).expect("json")).expect("write cases");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = python::run_json(
            &python,
            &root.join("tests/python/schema_check.py"),
            &[
                root.join("schemas").to_str().expect("utf8"),
                file.to_str().expect("utf8"),
            ],
        );
        let _ = std::fs::remove_dir_all(&dir);
        let results = out["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| {
                let errors = r["errors"]
                    .as_array()
                    .expect("errors")
                    .iter()
                    .map(|e| e.as_str().unwrap_or_default().to_owned())
                    .collect();
                (r["label"].as_str().unwrap_or_default().to_owned(), errors)
            })
            .collect();
        (results, out["nullable"].clone())
    }

    /// Panics listing every case that did not validate.
    fn assert_valid(&self, name: &str) {
        assert!(!self.0.is_empty());
        let (results, nullable) = self.check(name);
        assert_eq!(results.len(), self.0.len());
        let failures: Vec<String> = results
            .into_iter()
            .filter(|(_, errors)| !errors.is_empty())
            .map(|(label, errors)| format!("{label}:\n  {}", errors.join("\n  ")))
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        if nullable.get("openai").is_some() {
            assert!(
                nullable["openai"].as_u64().unwrap_or(0) > 0,
                "the nullable translation no longer applies: {nullable}"
            );
        }
    }
}

/// The JSON events of an SSE body (`data:` lines, `[DONE]` left out).
fn events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("event json"))
        .collect()
}

async fn json_of(base: &str, path: &str, body: &Value) -> Value {
    let response = post_json(base, path, body).await;
    assert_eq!(response.status(), 200, "{path} {body}");
    response.json().await.expect("json")
}

async fn stream_of(base: &str, path: &str, body: &Value) -> Vec<Value> {
    let response = post_json(base, path, body).await;
    assert_eq!(response.status(), 200, "{path} {body}");
    events(&response.text().await.expect("body"))
}

/// An error body as OpenAI's document is checked (see the module comment).
fn openai_error(mut error: Value, status: u16) -> Value {
    if error["error"]["code"].is_number() {
        assert_eq!(error["error"]["code"], status, "{error}");
        error["error"]["code"] = json!(status.to_string());
    }
    error
}

fn with(mut body: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

/// Where answers are taken from: the simulator itself, or a gateway on
/// loopback in front of one (which renames the model for it).
struct Target {
    via: &'static str,
    base: String,
    model: &'static str,
    _sim: Option<SimProcess>,
    _gateway: Option<LocalStack>,
}

/// The simulator serving `schema-model`, then a gateway in front of one.
async fn targets() -> Vec<Target> {
    let sim = support::sim(&["--model", "schema-model"]);
    let gateway = LocalStack::start(&LocalOptions::default())
        .await
        .expect("a gateway in front of a simulator (build flexinfer-gateway first)");
    vec![
        Target {
            via: "simulator",
            base: sim.base_url(),
            model: "schema-model",
            _sim: Some(sim),
            _gateway: None,
        },
        Target {
            via: "gateway",
            base: gateway.gateway_url().to_owned(),
            model: MODEL,
            _sim: None,
            _gateway: Some(gateway),
        },
    ]
}

fn chat_variants() -> Vec<(&'static str, Value)> {
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": weather()}},
                       {"type": "function", "function": {"name": "noop"}}]);
    vec![
        ("plain", json!({})),
        (
            "required",
            json!({"tools": tools, "tool_choice": "required"}),
        ),
        ("auto", json!({"tools": tools})),
        (
            "named",
            json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
        ),
        (
            "legacy",
            json!({"functions": [{"name": "get_weather", "parameters": weather()}]}),
        ),
        (
            "n2",
            json!({"tools": tools, "tool_choice": "required", "n": 2}),
        ),
    ]
}

/// The arguments of chat answer `v` (whole), if it is a tool call.
fn chat_arguments(v: &Value) -> Option<Value> {
    let message = &v["choices"][0]["message"];
    let text = message["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .or_else(|| message["function_call"]["arguments"].as_str())?;
    Some(serde_json::from_str(text).expect("arguments are JSON"))
}

#[tokio::test]
async fn chat_completions_and_embeddings_match_openai_schemas() {
    for target in targets().await {
        check_chat(&target).await;
    }
}

async fn check_chat(target: &Target) {
    let (base, model) = (target.base.as_str(), target.model);
    let mut cases = Cases::default();
    let hello =
        json!({"model": model, "messages": [{"role": "user", "content": "weather in Paris?"}]});
    for (name, extra) in chat_variants() {
        let body = with(hello.clone(), extra);
        let whole = json_of(base, "/v1/chat/completions", &body).await;
        if name != "plain" {
            let arguments =
                chat_arguments(&whole).unwrap_or_else(|| panic!("{name}: no call in {whole}"));
            cases.inline(format!("chat {name} arguments"), weather(), arguments);
            let expected = match name {
                "legacy" => "function_call",
                "named" => "stop",
                _ => "tool_calls",
            };
            assert_eq!(whole["choices"][0]["finish_reason"], expected, "{name}");
            assert_eq!(
                whole["choices"][0]["message"]["content"],
                Value::Null,
                "{name}"
            );
        }
        cases.add(
            format!("chat {name}"),
            "openai",
            "CreateChatCompletionResponse",
            whole.clone(),
        );
        let streamed = stream_of(
            base,
            "/v1/chat/completions",
            &with(
                body,
                json!({"stream": true, "stream_options": {"include_usage": true}}),
            ),
        )
        .await;
        if name != "plain" && name != "legacy" {
            let arguments: String = streamed
                .iter()
                .filter(|c| c["choices"][0]["index"] == 0)
                .filter_map(|c| {
                    c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
                })
                .collect();
            let whole_args = chat_arguments(&whole).expect("call");
            let streamed_args: Value =
                serde_json::from_str(&arguments).expect("streamed arguments");
            assert_eq!(
                streamed_args, whole_args,
                "{name}: streamed and whole calls differ"
            );
        }
        for (i, chunk) in streamed.into_iter().enumerate() {
            cases.add(
                format!("chat {name} stream #{i}"),
                "openai",
                "CreateChatCompletionStreamResponse",
                chunk,
            );
        }
    }
    let prompt = json!({"model": model, "prompt": ["one", "two"], "max_tokens": 3});
    cases.add(
        "completion",
        "openai",
        "CreateCompletionResponse",
        json_of(base, "/v1/completions", &prompt).await,
    );
    let chunks = stream_of(
        base,
        "/v1/completions",
        &with(prompt, json!({"stream": true})),
    )
    .await;
    let last = chunks.len() - 1;
    for (i, mut chunk) in chunks.into_iter().enumerate() {
        if i < last - 1 {
            // Judged wrong: see the module comment.
            assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null);
            chunk["choices"][0]["finish_reason"] = json!("stop");
        }
        cases.add(
            format!("completion stream #{i}"),
            "openai",
            "CreateCompletionResponse",
            chunk,
        );
    }
    for format in ["float", "base64"] {
        let body = json!({"model": model, "input": ["a", "b"], "encoding_format": format});
        let mut answer = json_of(base, "/v1/embeddings", &body).await;
        if let Some(data) = answer["data"].as_array_mut() {
            for item in data.iter_mut().filter(|i| i["embedding"].is_string()) {
                // Judged wrong: see the module comment.
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(item["embedding"].as_str().unwrap_or_default())
                    .expect("base64");
                let floats: Vec<f32> = bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                item["embedding"] = json!(floats);
            }
        }
        cases.add(
            format!("embeddings {format}"),
            "openai",
            "CreateEmbeddingResponse",
            answer,
        );
    }
    let models: Value = support::get(base, "/v1/models")
        .await
        .json()
        .await
        .expect("json");
    cases.add("models", "openai", "ListModelsResponse", models);
    let error: Value = post_json(base, "/v1/chat/completions", &json!({"messages": []}))
        .await
        .json()
        .await
        .expect("json");
    cases.add("error", "openai", "ErrorResponse", openai_error(error, 400));
    cases.assert_valid(&format!("chat-{}", target.via));
}

fn responses_variants() -> Vec<(&'static str, Value)> {
    let tools = json!([{"type": "function", "name": "get_weather", "parameters": weather(), "strict": true},
                       {"type": "web_search"}]);
    vec![
        ("plain", json!({"input": "weather in Paris?"})),
        (
            "incomplete",
            json!({"input": "weather in Paris?", "max_output_tokens": 2}),
        ),
        (
            "required",
            json!({"input": "weather in Paris?", "tools": tools, "tool_choice": "required"}),
        ),
        (
            "auto",
            json!({"input": [{"role": "user", "content": "weather in Paris?"}], "tools": tools}),
        ),
        (
            "named",
            json!({"input": "weather?", "tools": tools, "tool_choice": {"type": "function", "name": "get_weather"}}),
        ),
        (
            "after result",
            json!({"input": [
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}], "tools": tools}),
        ),
    ]
}

/// A response as OpenAI's document is checked (see the module comment).
fn for_openai(mut response: Value) -> Value {
    for key in ["safety_identifier", "prompt_cache_key"] {
        assert_eq!(response[key], Value::Null, "{key}");
        if let Some(map) = response.as_object_mut() {
            map.remove(key);
        }
    }
    response
}

#[tokio::test]
async fn responses_match_openai_and_open_responses_schemas() {
    for target in targets().await {
        check_responses(&target).await;
    }
}

async fn check_responses(target: &Target) {
    let (base, model) = (target.base.as_str(), target.model);
    let mut cases = Cases::default();
    for (name, extra) in responses_variants() {
        let body = with(json!({"model": model}), extra);
        let whole = json_of(base, "/v1/responses", &body).await;
        let call = whole["output"]
            .as_array()
            .and_then(|o| o.iter().find(|i| i["type"] == "function_call"))
            .cloned();
        match name {
            "plain" | "incomplete" | "after result" => {
                assert!(call.is_none(), "{name}: {whole}");
                assert_eq!(whole["output"][0]["type"], "message", "{name}");
            }
            _ => {
                let call = call.unwrap_or_else(|| panic!("{name}: no call in {whole}"));
                assert_eq!(call["name"], "get_weather");
                let arguments: Value =
                    serde_json::from_str(call["arguments"].as_str().expect("arguments"))
                        .expect("json");
                cases.inline(format!("responses {name} arguments"), weather(), arguments);
                assert_eq!(whole["status"], "completed");
            }
        }
        cases.add(
            format!("responses {name}"),
            "openresponses",
            "ResponseResource",
            whole.clone(),
        );
        cases.add(
            format!("responses {name}"),
            "openai",
            "Response",
            for_openai(whole),
        );
        let streamed = stream_of(base, "/v1/responses", &with(body, json!({"stream": true}))).await;
        for (i, event) in streamed.into_iter().enumerate() {
            let label = format!("responses {name} stream #{i} {}", event["type"]);
            let mut for_openai_doc = event.clone();
            if let Some(response) = for_openai_doc.get_mut("response") {
                *response = for_openai(response.take());
            }
            cases.add(label.clone(), "openresponses", "*StreamingEvent", event);
            cases.add(label, "openai", "ResponseStreamEvent", for_openai_doc);
        }
    }
    let error = post_json(base, "/v1/responses", &json!({"input": "no model"})).await;
    assert_eq!(error.status(), 400);
    cases.add(
        "responses error",
        "openai",
        "ErrorResponse",
        openai_error(error.json().await.expect("json"), 400),
    );
    cases.assert_valid(&format!("responses-{}", target.via));
}

fn messages_variants() -> Vec<(&'static str, Value)> {
    let tools = json!([{"name": "get_weather", "input_schema": weather()},
                       {"type": "web_search_20250305", "name": "web_search"}]);
    let user = json!([{"role": "user", "content": "weather in Paris?"}]);
    vec![
        ("plain", json!({"messages": user})),
        ("max_tokens", json!({"messages": user, "max_tokens": 2})),
        (
            "any",
            json!({"messages": user, "tools": tools, "tool_choice": {"type": "any"}}),
        ),
        ("auto", json!({"messages": user, "tools": tools})),
        (
            "tool",
            json!({"messages": user, "tools": tools, "tool_choice": {"type": "tool", "name": "get_weather"}}),
        ),
        (
            "after result",
            json!({"tools": tools, "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]}),
        ),
    ]
}

#[tokio::test]
async fn messages_match_anthropic_schemas() {
    for target in targets().await {
        check_messages(&target).await;
    }
}

async fn check_messages(target: &Target) {
    let (base, model) = (target.base.as_str(), target.model);
    let mut cases = Cases::default();
    for (name, extra) in messages_variants() {
        let body = with(json!({"model": model, "max_tokens": 100}), extra);
        let whole = json_of(base, "/v1/messages", &body).await;
        match name {
            "plain" | "max_tokens" | "after result" => {
                assert_eq!(whole["content"][0]["type"], "text", "{name}")
            }
            _ => {
                assert_eq!(whole["content"][0]["type"], "tool_use", "{name}: {whole}");
                assert_eq!(whole["stop_reason"], "tool_use");
                cases.inline(
                    format!("messages {name} input"),
                    weather(),
                    whole["content"][0]["input"].clone(),
                );
            }
        }
        cases.add(
            format!("messages {name}"),
            "anthropic",
            "Message",
            whole.clone(),
        );
        let streamed = stream_of(base, "/v1/messages", &with(body, json!({"stream": true}))).await;
        let partial: String = streamed
            .iter()
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        if whole["content"][0]["type"] == "tool_use" {
            let input: Value = serde_json::from_str(&partial).expect("streamed input is JSON");
            assert_eq!(
                input, whole["content"][0]["input"],
                "{name}: deterministic call"
            );
        }
        for (i, event) in streamed.into_iter().enumerate() {
            if event["type"] == "ping" {
                // Judged wrong: see the module comment.
                assert_eq!(event, json!({"type": "ping"}));
                continue;
            }
            cases.add(
                format!("messages {name} stream #{i} {}", event["type"]),
                "anthropic",
                "MessageStreamEvent",
                event,
            );
        }
    }
    let error = post_json(
        base,
        "/v1/messages",
        &json!({"max_tokens": 5, "messages": []}),
    )
    .await;
    assert_eq!(error.status(), 400);
    cases.add(
        "messages error",
        "anthropic",
        "ErrorResponse",
        error.json().await.expect("json"),
    );
    cases.assert_valid(&format!("messages-{}", target.via));
}

/// The checks can fail: answers with a required member removed do not validate.
#[tokio::test]
async fn a_missing_required_member_fails_validation() {
    let sim = support::sim(&["--model", "schema-model"]);
    let base = &sim.base_url();
    let mut chat = json_of(
        base,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    chat["choices"][0]["message"]
        .as_object_mut()
        .expect("message")
        .remove("refusal");
    let mut message = json_of(base, "/v1/messages", &json!({"model": "schema-model", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})).await;
    message["usage"]
        .as_object_mut()
        .expect("usage")
        .remove("cache_creation");
    let mut response = json_of(
        base,
        "/v1/responses",
        &json!({"model": "schema-model", "input": "hi"}),
    )
    .await;
    response
        .as_object_mut()
        .expect("response")
        .remove("completed_at");
    let mut cases = Cases::default();
    cases.add(
        "chat without refusal",
        "openai",
        "CreateChatCompletionResponse",
        chat,
    );
    cases.add(
        "message without cache_creation",
        "anthropic",
        "Message",
        message,
    );
    cases.add(
        "response without completed_at",
        "openresponses",
        "ResponseResource",
        response,
    );
    cases.inline(
        "arguments without location",
        weather(),
        json!({"unit": "celsius", "detail": {"fields": ["temp"]}}),
    );
    let (results, _) = cases.check("negative");
    for (label, errors) in results {
        assert!(!errors.is_empty(), "{label} validated");
    }
}

/// Equal requests give equal calls; the request's `seed` changes them.
#[tokio::test]
async fn tool_calls_are_deterministic() {
    let sim = support::sim(&[]);
    let base = &sim.base_url();
    let body = json!({"messages": [{"role": "user", "content": "weather?"}],
                      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": weather()}}],
                      "tool_choice": "required"});
    let first = chat_arguments(&json_of(base, "/v1/chat/completions", &body).await);
    let second = chat_arguments(&json_of(base, "/v1/chat/completions", &body).await);
    assert!(first.is_some());
    assert_eq!(first, second);
    let seeded: Vec<Option<Value>> = futures::future::join_all((0..4).map(|seed| {
        let body = with(body.clone(), json!({"seed": seed}));
        let base = base.clone();
        async move { chat_arguments(&json_of(&base, "/v1/chat/completions", &body).await) }
    }))
    .await;
    assert!(
        seeded.iter().any(|s| s != &first),
        "seeds change the arguments: {seeded:?}"
    );
}

/// The official OpenAI and Anthropic SDKs read the tool calls, whole and
/// streamed, and get the same arguments every way.
#[test]
fn official_sdks_read_tool_calls() {
    let python = python::interpreter();
    python::require(&python, "openai", SETUP_HINT);
    python::require(&python, "anthropic", SETUP_HINT);
    let sim = support::sim(&["--model", "sdk-model"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/sdk_tool_calls.py");
    let out = python::run_json(&python, &script, &[&sim.base_url(), "sdk-model"]);
    assert_eq!(out["chat"]["finish_reason"], "tool_calls");
    assert_eq!(out["chat"]["name"], "w");
    let arguments = &out["chat"]["arguments"];
    assert!(
        arguments["city"].is_string() && arguments["days"].as_u64() >= Some(1),
        "{out}"
    );
    for key in [
        "chat_stream",
        "responses",
        "responses_stream",
        "messages_stream",
    ] {
        assert_eq!(&out[key], arguments, "{key}: {out}");
    }
    assert_eq!(out["messages"]["stop_reason"], "tool_use");
    assert_eq!(&out["messages"]["input"], arguments);
}
