//! The official OpenAI Python SDK pointed at the gateway: listing, chat,
//! streamed chat, embeddings and a multipart image edit all complete, and
//! the gateway's own errors surface as the SDK's typed exceptions.
//!
//! The interpreter comes from `FLEXINFER_PYTHON` (default `python3`) and must
//! have the `openai` package; without it this test fails rather than skips.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use support::{endpoints, pod, Gateway};

const SETUP_HINT: &str = "run scripts/setup.sh (it creates .venv with the OpenAI SDK) and set \
                          FLEXINFER_PYTHON=$PWD/.venv/bin/python, or pip install openai";

#[test]
fn openai_python_sdk_works_through_the_gateway() {
    let python = support::python();
    let probe = Command::new(&python)
        .args(["-c", "import openai"])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python:?} ({e}); set FLEXINFER_PYTHON. {SETUP_HINT}")
        });
    assert!(
        probe.status.success(),
        "the OpenAI Python SDK is not importable with {python:?}: {}\n{SETUP_HINT}",
        String::from_utf8_lossy(&probe.stderr).trim()
    );

    // The backend serves `sdk-backend` (the JSON `model` is rewritten to it)
    // and also `sdk-model`, the name a multipart form carries unchanged.
    let sim = pod(
        "pod-sdk",
        &["sdk-backend", "sdk-model"],
        &["--tokens-per-second", "20", "--embedding-dim", "48"],
    );
    let yaml = format!(
        "models:\n- name: sdk-model\n  backendModel: sdk-backend\n  aliases: [gpt-4o-mini]\n  \
         endpoints: {}\n",
        endpoints(&[&sim])
    );
    let gw = Gateway::start(
        &yaml,
        &["--auth-enabled", "true", "--auth-token", "sdk-key"],
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/openai_sdk_gateway.py");
    let output = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}", gw.addr))
        .arg("sdk-key")
        .arg("sdk-model")
        .output()
        .expect("run the SDK script");
    assert!(
        output.status.success(),
        "SDK script failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "SDK script printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    println!("openai SDK {}", result["sdk_version"]);

    assert_eq!(result["models"], json!(["sdk-model", "gpt-4o-mini"]));
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
