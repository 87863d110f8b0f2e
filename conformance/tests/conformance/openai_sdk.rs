//! The official OpenAI Python SDK against the real simulator binary.
//!
//! The interpreter is `flexinfer_conformance::python::interpreter()`
//! (`FLEXINFER_PYTHON`, else the workspace's `.venv`, else `python3`) and must
//! have the `openai` package; without it this test fails rather than skips.

use crate::support;

use std::path::Path;

use flexinfer_conformance::python;
use flexinfer_conformance::sim::synth;

const SETUP_HINT: &str = "pip install openai, or run scripts/test.sh which sets up .venv \
                          (then point FLEXINFER_PYTHON at .venv/bin/python)";

#[test]
fn openai_python_sdk_talks_to_the_simulator() {
    let python = python::interpreter();
    python::require(&python, "openai", SETUP_HINT);

    // 20 tokens/s: streamed content chunks should arrive about 50 ms apart.
    let sim = support::sim(&[
        "--model",
        "sdk-model",
        "--tokens-per-second",
        "20",
        "--embedding-dim",
        "32",
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/openai_sdk_check.py");
    let result = python::run_json(&python, &script, &[&sim.base_url(), "sdk-model"]);

    assert_eq!(result["models"], serde_json::json!(["sdk-model"]));

    let chat = &result["chat"];
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["model"], "sdk-model");
    assert_eq!(chat["role"], "assistant");
    assert_eq!(chat["finish_reason"], "length");
    assert_eq!(
        chat["content"]
            .as_str()
            .map(|c| c.split_whitespace().count()),
        Some(6)
    );
    assert_eq!(chat["usage"]["completion_tokens"], 6);
    assert_eq!(
        chat["usage"]["total_tokens"].as_u64(),
        chat["usage"]["prompt_tokens"].as_u64().map(|p| p + 6)
    );

    let stream = &result["stream"];
    assert_eq!(stream["roles"], serde_json::json!(["assistant"]));
    assert_eq!(stream["finish_reason"], "length");
    assert_eq!(stream["usage"]["completion_tokens"], 8);
    assert_eq!(
        stream["content"]
            .as_str()
            .map(|c| c.split_whitespace().count()),
        Some(8)
    );
    let arrivals: Vec<f64> =
        serde_json::from_value(stream["arrivals"].clone()).expect("arrival times");
    assert_eq!(arrivals.len(), 8);
    let gaps: Vec<f64> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sorted = gaps.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let span = arrivals[7] - arrivals[0];
    // Paced, not delivered in one burst: 7 gaps of 50 ms = 350 ms.
    assert!(
        (0.035..=0.2).contains(&median),
        "median gap {median:.3}s, gaps {gaps:?}"
    );
    assert!(span >= 0.28, "chunks arrived within {span:.3}s: {gaps:?}");

    assert_eq!(result["completion"]["object"], "text_completion");
    assert_eq!(result["completion"]["usage"]["completion_tokens"], 3);

    let embeddings = &result["embeddings"];
    assert_eq!(embeddings["count"], 2);
    let first: Vec<f32> = serde_json::from_value(embeddings["vectors"][0].clone()).expect("floats");
    assert_eq!(
        first,
        synth::embedding("hello world", 32),
        "base64 vectors decode to the sim's values"
    );

    assert_eq!(result["unknown_model"]["status"], 404);
    assert!(result["unknown_model"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("The model `no-such-model` does not exist.")));
}
