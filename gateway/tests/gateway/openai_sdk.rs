//! The official OpenAI Python SDK pointed at the gateway: listing, chat,
//! streamed chat, embeddings and a multipart image edit all complete, and
//! the gateway's own errors surface as the SDK's typed exceptions. The
//! Responses API's follow-ups reach the pod that created each response, of
//! two behind one model; Anthropic's SDK and a plain client use `/v1/messages`.
//!
//! The interpreter is `flexinfer_conformance::python::interpreter()`
//! (`FLEXINFER_PYTHON`, else the workspace's `.venv`, else `python3`) and must
//! have the `openai` and `anthropic` packages; without them this test fails
//! rather than skips.

use crate::support;

use std::path::Path;

use flexinfer_conformance::python;
use serde_json::{json, Value};
use support::{endpoints, pod, Gateway};

const SETUP_HINT: &str = "run scripts/setup.sh (it creates .venv with the OpenAI SDK) and set \
                          FLEXINFER_PYTHON=$PWD/.venv/bin/python, or pip install openai";

#[test]
fn openai_python_sdk_works_through_the_gateway() {
    let python = python::interpreter();
    python::require(&python, "openai", SETUP_HINT);

    // The backend serves `sdk-backend` (the JSON `model` is rewritten to it)
    // and also `sdk-model`, the name a multipart form carries unchanged.
    let sim = pod(
        "pod-sdk",
        &["sdk-backend", "sdk-model"],
        &["--tokens-per-second", "20", "--embedding-dim", "48"],
    );
    // Two pods behind one model (round-robin) for the Responses API.
    let resp_pods = [
        pod("pod-r1", &["resp-model"], &[]),
        pod("pod-r2", &["resp-model"], &[]),
    ];
    let yaml = format!(
        "models:\n- name: sdk-model\n  backendModel: sdk-backend\n  aliases: [gpt-4o-mini]\n  \
         endpoints: {}\n- name: resp-model\n  endpoints: {}\n",
        endpoints(&[&sim]),
        endpoints(&[&resp_pods[0], &resp_pods[1]])
    );
    let gw = Gateway::start(
        &yaml,
        &["--auth-enabled", "true", "--auth-token", "sdk-key"],
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/openai_sdk_gateway.py");
    let base = format!("http://{}", gw.addr);
    let result = python::run_json(
        &python,
        &script,
        &[&base, "sdk-key", "sdk-model", "resp-model"],
    );
    println!("openai SDK {}", result["sdk_version"]);

    assert_eq!(
        result["models"],
        json!(["sdk-model", "gpt-4o-mini", "resp-model"])
    );
    // models.retrieve: GET /v1/models/{id}, answered by the gateway.
    assert_eq!(
        result["retrieved"],
        json!({"id": "sdk-model", "object": "model"})
    );
    assert_eq!(result["retrieve_unknown"]["status"], 404);
    assert_eq!(result["retrieve_unknown"]["code"], "model_not_found");

    let chat = &result["chat"];
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["model"], "sdk-backend");
    assert_eq!(chat["finish_reason"], "length");
    assert_eq!(chat["usage"]["completion_tokens"], 5);
    assert_eq!(
        chat["content"]
            .as_str()
            .map(|c| c.split_whitespace().count()),
        Some(5)
    );

    let stream = &result["stream"];
    assert_eq!(stream["finish_reason"], "length");
    assert_eq!(stream["usage"]["completion_tokens"], 6);
    let arrivals: Vec<f64> = serde_json::from_value(stream["arrivals"].clone()).unwrap();
    assert_eq!(arrivals.len(), 6);
    // Paced at 20 tokens/s through the gateway: 5 gaps of about 50 ms.
    let span = arrivals[5] - arrivals[0];
    assert!(
        span >= 0.2,
        "chunks arrived within {span:.3}s: {arrivals:?}"
    );

    assert_eq!(result["embeddings"]["count"], 2);
    assert_eq!(result["embeddings"]["dims"], json!([48, 48]));

    assert_eq!(result["image_edit"]["count"], 2);
    assert_eq!(result["image_edit"]["png"], json!([true, true]));

    let unknown = &result["unknown_model"];
    assert_eq!(unknown["status"], 404);
    assert_eq!(unknown["code"], "model_not_found");
    assert_eq!(unknown["type"], "not_found_error");
    assert!(unknown["request_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    let wrong_key = &result["wrong_key"];
    assert_eq!(wrong_key["status"], 401);
    assert_eq!(wrong_key["code"], "invalid_api_key");

    check_responses(&result["responses"]);
    check_messages(&result["messages"]);

    // What reached the backend: the rewritten chat, the form as sent, and
    // never the gateway's API key.
    let seen = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(support::recorded(&sim));
    let paths: Vec<&str> = seen.iter().filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/chat/completions",
            "/v1/chat/completions",
            "/v1/embeddings",
            "/v1/images/edits"
        ]
    );
    assert_eq!(seen[0]["model"], "sdk-backend");
    assert_eq!(seen[2]["model"], "sdk-backend");
    assert_eq!(seen[3]["model"], "sdk-model");
    assert!(seen
        .iter()
        .all(|r| r["headers"].get("authorization").is_none()));
}

/// The Responses API through the gateway, as the SDK saw it.
fn check_responses(r: &Value) {
    let create = &r["create"];
    assert_eq!(create["object"], "response");
    assert_eq!(create["status"], "completed");
    assert_eq!(create["model"], "resp-model");
    assert!(create["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("resp_")));
    assert_eq!(create["usage"]["output_tokens"], 16);
    assert_eq!(
        create["output_text"]
            .as_str()
            .map(|t| t.split_whitespace().count()),
        Some(16)
    );
    assert_eq!(r["create_short"]["status"], "incomplete");
    assert_eq!(r["create_short"]["incomplete_reason"], "max_output_tokens");
    assert_eq!(r["create_short"]["output_tokens"], 3);

    let stream = &r["stream"];
    assert_eq!(
        stream["types"],
        json!([
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ])
    );
    assert_eq!(stream["text"], stream["final_text"]);
    assert_eq!(stream["final_status"], "completed");

    // Creations alternate between the pods; every follow-up reaches the
    // pod that created its response (round-robin alone would not).
    let follow_ups = r["follow_ups"].as_array().expect("follow-ups");
    assert_eq!(follow_ups.len(), 3);
    let pods: std::collections::HashSet<&str> = follow_ups
        .iter()
        .filter_map(|f| f["created_on"].as_str())
        .collect();
    assert_eq!(pods.len(), 2, "{follow_ups:?}");
    for f in follow_ups {
        assert_eq!(f["retrieved_id"], f["id"]);
        for key in ["retrieved_on", "items_on", "cancel_on"] {
            assert_eq!(f[key], f["created_on"], "{key}: {f}");
        }
    }
    // Cancelling a finished response leaves it as it ended.
    let statuses: Vec<&Value> = follow_ups.iter().map(|f| &f["cancel_status"]).collect();
    assert_eq!(
        statuses,
        [
            &json!("completed"),
            &json!("incomplete"),
            &json!("completed")
        ]
    );
    assert_eq!(follow_ups[0]["items"], json!(["Tell me about the sea."]));
    assert_eq!(follow_ups[1]["items"], json!(["Short one."]));

    for key in ["after_delete", "unknown"] {
        assert_eq!(r[key]["status"], 404, "{key}: {}", r[key]);
        assert_eq!(r[key]["code"], "response_not_found", "{key}");
    }
    assert_eq!(r["model"], json!({"id": "resp-model", "object": "model"}));
}

/// Anthropic's Messages API through the gateway: its SDK and a plain client.
fn check_messages(m: &Value) {
    println!("anthropic SDK {}", m["sdk_version"]);
    let sdk = &m["sdk"];
    assert!(sdk["id"].as_str().is_some_and(|id| id.starts_with("msg_")));
    assert_eq!(sdk["type"], "message");
    assert_eq!(sdk["role"], "assistant");
    assert_eq!(sdk["model"], "resp-model");
    assert_eq!(sdk["stop_reason"], "end_turn");
    assert_eq!(sdk["usage"]["output_tokens"], 16);
    assert_eq!(m["sdk_short"]["stop_reason"], "max_tokens");
    assert_eq!(m["sdk_short"]["output_tokens"], 2);
    let stream = &m["sdk_stream"];
    assert_eq!(stream["text"], stream["final_text"]);
    assert_eq!(stream["stop_reason"], "end_turn");
    assert_eq!(stream["output_tokens"], 16);

    assert_eq!(m["http"]["status"], 200);
    assert!(m["http"]["pod"]
        .as_str()
        .is_some_and(|p| p.starts_with("pod-r")));
    assert_eq!(m["http"]["body"]["content"][0]["type"], "text");
    assert_eq!(m["http"]["body"]["stop_reason"], "max_tokens");
    assert_eq!(m["http_stream"]["status"], 200);
    assert_eq!(
        m["http_stream"]["events"],
        json!([
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ])
    );
    let missing = &m["http_no_max_tokens"];
    assert_eq!(missing["status"], 400);
    assert_eq!(missing["body"]["type"], "error");
    assert_eq!(missing["body"]["error"]["type"], "invalid_request_error");
}

/// Arguments a tool call gave `get_weather`, checked against its schema.
fn check_weather_arguments(args: &Value) {
    assert!(args["city"].is_string(), "{args}");
    assert!(
        ["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap_or("")),
        "{args}"
    );
    if let Some(days) = args.get("days") {
        assert!(
            days.as_u64().is_some_and(|d| (1..=7).contains(&d)),
            "{args}"
        );
    }
    let known = ["city", "unit", "days"];
    assert!(
        args.as_object()
            .unwrap()
            .keys()
            .all(|k| known.contains(&k.as_str())),
        "{args}"
    );
}

/// Every call of a list went to `get_weather` with valid arguments.
fn check_calls(calls: &Value, arguments: &str) {
    let calls = calls.as_array().expect("calls");
    assert!(!calls.is_empty(), "no tool call");
    for call in calls {
        assert_eq!(call["name"], "get_weather", "{call}");
        check_weather_arguments(&call[arguments]);
    }
}

#[test]
fn tool_calls_through_the_gateway_reach_the_sdks_and_are_counted() {
    let python = python::interpreter();
    python::require(&python, "anthropic", SETUP_HINT);
    let pods = [
        pod("pod-t1", &["tools"], &[]),
        pod("pod-t2", &["tools"], &[]),
    ];
    let yaml = format!(
        "models:\n- name: tools\n  endpoints: {}\n",
        endpoints(&[&pods[0], &pods[1]])
    );
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        keys.path(),
        "tenants:\n  - name: t\n    keys: [k]\n    limits: {tokensPerMinute: 60, tokenBurst: 1000000}\n",
    )
    .unwrap();
    let gw = Gateway::start(
        &yaml,
        &[
            "--api-key-file",
            keys.path().to_str().unwrap(),
            "--admin-auth-token",
            "admin",
            "--usage-headers",
            "true",
        ],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/sdk_tool_calls.py");
    let r = python::run_json(
        &python,
        &script,
        &[&format!("http://{}", gw.addr), "k", "tools"],
    );
    println!("SDKs {}", r["versions"]);

    // Chat: JSON, streamed with usage, streamed without asking for it.
    let chat = &r["chat"];
    let json_chat = &chat["json"];
    check_calls(&json_chat["tool_calls"], "arguments");
    assert_eq!(json_chat["finish_reason"], "tool_calls");
    assert_eq!(json_chat["content"], Value::Null);
    let prompt = json_chat["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        json_chat["headers"]["x-flexinfer-prompt-tokens"],
        prompt.to_string()
    );
    assert_eq!(
        json_chat["headers"]["x-flexinfer-finish-reason"],
        "tool_calls"
    );
    for key in ["stream_usage", "stream_unasked"] {
        check_calls(&chat[key]["tool_calls"], "arguments");
        assert_eq!(chat[key]["finish_reason"], "tool_calls", "{key}");
    }
    assert!(chat["stream_usage"]["usage"]["completion_tokens"].as_u64() > Some(0));
    assert_eq!(
        chat["stream_unasked"]["usage"],
        Value::Null,
        "the gateway's usage request stays hidden"
    );
    let follow = &chat["follow_up"];
    assert!(
        follow["content"].as_str().is_some_and(|c| !c.is_empty()),
        "{follow}"
    );
    assert_eq!(follow["tool_calls"], json!([]));

    // Responses: the call, its stream, and the follow-up on the pod that has it.
    let responses = &r["responses"];
    check_calls(&responses["json"]["calls"], "arguments");
    check_calls(&responses["stream"]["calls"], "arguments");
    let types: Vec<&str> = responses["stream"]["types"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in [
        "response.created",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ] {
        assert!(types.contains(&t), "{t} in {types:?}");
    }
    let follow = &responses["follow_up"];
    assert!(
        follow["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{follow}"
    );
    assert_eq!(follow["calls"], json!([]));

    // Messages: tool_use blocks, JSON and streamed, then the tool_result.
    let messages = &r["messages"];
    for key in ["json", "stream"] {
        assert_eq!(messages[key]["stop_reason"], "tool_use", "{key}");
        check_calls(&messages[key]["calls"], "input");
    }
    assert_eq!(messages["follow_up"]["types"], json!(["text"]));

    // Every answer was counted, the stream the SDK saw no usage of too,
    // and the tenant's budget was charged what the counters hold.
    let seen = |usage: &Value, prompt: &str, output: &str| {
        (
            usage[prompt].as_f64().unwrap_or(0.0),
            usage[output].as_f64().unwrap_or(0.0),
        )
    };
    let mut sdk = vec![
        seen(&json_chat["usage"], "prompt_tokens", "completion_tokens"),
        seen(
            &chat["stream_usage"]["usage"],
            "prompt_tokens",
            "completion_tokens",
        ),
        seen(
            &chat["follow_up"]["usage"],
            "prompt_tokens",
            "completion_tokens",
        ),
    ];
    for key in ["json", "stream", "follow_up"] {
        sdk.push(seen(
            &responses[key]["usage"],
            "input_tokens",
            "output_tokens",
        ));
        let u = &messages[key]["usage"];
        let cache = u["cache_read_input_tokens"].as_f64().unwrap_or(0.0)
            + u["cache_creation_input_tokens"].as_f64().unwrap_or(0.0);
        let (p, o) = seen(u, "input_tokens", "output_tokens");
        sdk.push((p + cache, o));
    }
    assert!(sdk.iter().all(|&(p, o)| p > 0.0 && o > 0.0), "{sdk:?}");
    let metrics = tokio::runtime::Runtime::new().unwrap().block_on(async {
        support::client()
            .get(gw.url("/metrics"))
            .bearer_auth("admin")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    let counted = |kind: &str| {
        support::metric_value(
            &metrics,
            &format!(
                "flexinfer_proxy_tokens_total{{kind=\"{kind}\",model=\"tools\",tenant=\"t\"}}"
            ),
        )
    };
    let sdk_prompt: f64 = sdk.iter().map(|u| u.0).sum();
    let sdk_output: f64 = sdk.iter().map(|u| u.1).sum();
    // The unasked stream adds what only the gateway saw.
    let (extra_prompt, extra_output) = (
        counted("prompt") - sdk_prompt,
        counted("completion") - sdk_output,
    );
    assert_eq!(
        extra_prompt, prompt as f64,
        "the unasked stream's prompt: {metrics}"
    );
    assert!(extra_output > 0.0, "the unasked stream's output: {metrics}");
}
