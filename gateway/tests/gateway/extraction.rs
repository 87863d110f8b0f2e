//! Where the gateway finds the model, and what it forwards: the real gateway
//! binary in front of one simulator per model, each with its own pod name,
//! so `X-Served-By` shows which model won and the simulator's recorder shows
//! the path, query, headers and body bytes that reached the backend.

use crate::support;

use serde_json::{json, Value};
use support::{
    endpoints, last_recorded, multipart, pod, post_json, served_by, sha256_hex, Gateway, Part,
    SimProcess,
};

/// The four extraction sources, one model (and one pod) each.
const SOURCES: [&str; 4] = ["hdr", "path", "json", "form"];

/// Four simulators (`pod-hdr`, ...), each serving every client and backend
/// name, so whichever model wins, the pod answers and the name it saw is
/// what the recorder shows.
struct Fixture {
    sims: Vec<SimProcess>,
    gw: Gateway,
}

impl Fixture {
    fn start() -> Self {
        let names: Vec<String> = SOURCES
            .iter()
            .flat_map(|s| [format!("{s}-model"), format!("{s}-backend")])
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let sims: Vec<SimProcess> = SOURCES
            .iter()
            .map(|s| pod(&format!("pod-{s}"), &names, &[]))
            .collect();
        let mut yaml = String::from("models:\n");
        for (s, sim) in SOURCES.iter().zip(&sims) {
            yaml.push_str(&format!(
                // Every path: these tests are about extraction and forwarding.
                "  - name: {s}-model\n    backendModel: {s}-backend\n    endpoints: {}\n    servePaths: [/]\n",
                endpoints(&[sim])
            ));
        }
        let gw = Gateway::start(&yaml, &[]);
        Self { sims, gw }
    }

    fn sim(&self, source: &str) -> &SimProcess {
        let i = SOURCES.iter().position(|s| *s == source).expect("source");
        &self.sims[i]
    }

    /// Asserts that no simulator but `source`'s saw a request.
    async fn only(&self, source: &str) {
        for (s, sim) in SOURCES.iter().zip(&self.sims) {
            let n = support::recorded(sim).await.len();
            if *s != source {
                assert_eq!(n, 0, "pod-{s} should have seen nothing");
            }
        }
    }
}

fn chat_body(model: &str) -> String {
    format!(
        r#"{{"model":"{model}","messages":[{{"role":"user","content":"which pod?"}}],"max_tokens":2}}"#
    )
}

const BOUNDARY: &str = "gateway-test-boundary-7MA4YWxkTrZu0gW";

fn form_body(model: &str) -> Vec<u8> {
    let image = support::binary_image(64 * 1024);
    multipart(
        BOUNDARY,
        &[
            Part {
                name: "image",
                filename: Some("cat.png"),
                data: &image,
            },
            Part {
                name: "prompt",
                filename: None,
                data: b"a cat wearing a hat",
            },
            Part {
                name: "model",
                filename: None,
                data: model.as_bytes(),
            },
        ],
    )
}

async fn post_form(url: &str, body: &[u8], headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = support::client()
        .post(url)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(body.to_vec());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("multipart request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_beats_path_beats_json_body() {
    let fx = Fixture::start();
    let body = chat_body("json-model");

    // All three sources present: X-Model-ID wins; the path prefix is still
    // stripped, and the JSON `model` becomes the winner's backend name.
    let resp = post_json(
        &fx.gw.url("/model/path-model/v1/chat/completions"),
        body.as_bytes(),
        &[("x-model-id", "hdr-model")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(served_by(&resp), "pod-hdr");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["model"], "hdr-backend");
    let seen = last_recorded(fx.sim("hdr")).await;
    assert_eq!(seen["path"], "/v1/chat/completions");
    assert_eq!(seen["model"], "hdr-backend");
    let expected = body.replacen("\"json-model\"", "\"hdr-backend\"", 1);
    assert_eq!(seen["body_sha256"], sha256_hex(expected.as_bytes()));
    fx.only("hdr").await;

    // Path prefix and JSON body: the path wins.
    let resp = post_json(
        &fx.gw.url("/model/path-model/v1/chat/completions"),
        body.as_bytes(),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(served_by(&resp), "pod-path");
    let seen = last_recorded(fx.sim("path")).await;
    assert_eq!(seen["path"], "/v1/chat/completions");
    assert_eq!(seen["model"], "path-backend");

    // The JSON body alone.
    let resp = post_json(&fx.gw.url("/v1/chat/completions"), body.as_bytes(), &[]).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(served_by(&resp), "pod-json");
    let seen = last_recorded(fx.sim("json")).await;
    assert_eq!(seen["model"], "json-backend");
    assert_eq!(
        seen["body_sha256"],
        sha256_hex(
            body.replacen("\"json-model\"", "\"json-backend\"", 1)
                .as_bytes()
        )
    );
    assert_eq!(support::recorded(fx.sim("form")).await.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_model_is_the_last_resort_and_never_rewritten() {
    let fx = Fixture::start();
    let body = form_body("form-model");
    let sha = sha256_hex(&body);

    // Only the form names the model: it routes, and the body arrives byte
    // for byte (the form's `model` is not rewritten to the backend name).
    let resp = post_form(&fx.gw.url("/v1/images/edits"), &body, &[]).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let seen = last_recorded(fx.sim("form")).await;
    assert_eq!(seen["path"], "/v1/images/edits");
    assert_eq!(seen["model"], "form-model");
    assert_eq!(seen["body_len"], body.len());
    assert_eq!(seen["body_sha256"], sha);
    fx.only("form").await;

    // The path or header names the model; the form naming another is
    // refused (the form goes upstream untouched, so its `model` must be
    // the one checked), and nothing reaches an engine.
    let resp = post_form(&fx.gw.url("/model/path-model/v1/images/edits"), &body, &[]).await;
    let (status, _, err) = support::error_of(resp).await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["param"], "model");
    let resp = post_form(
        &fx.gw.url("/model/path-model/v1/images/edits"),
        &body,
        &[("x-model-id", "hdr-model")],
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(support::recorded(fx.sim("path")).await.len(), 0);
    assert_eq!(support::recorded(fx.sim("hdr")).await.len(), 0);

    // A form naming the same model as the head goes through byte for byte.
    let same = form_body("hdr-model");
    let resp = post_form(
        &fx.gw.url("/model/path-model/v1/images/edits"),
        &same,
        &[("x-model-id", "hdr-model")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(served_by(&resp), "pod-hdr");
    let seen = last_recorded(fx.sim("hdr")).await;
    assert_eq!(seen["path"], "/v1/images/edits");
    assert_eq!(seen["model"], "hdr-model");
    assert_eq!(seen["body_sha256"], sha256_hex(&same));
    assert_eq!(support::recorded(fx.sim("json")).await.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_prefix_is_stripped_and_query_kept() {
    let fx = Fixture::start();

    // Buffered (JSON) request.
    let resp = post_json(
        &fx.gw
            .url("/model/path-model/v1/chat/completions?api-version=2024-06-01&tag=a%2Fb"),
        chat_body("").as_bytes(),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let seen = last_recorded(fx.sim("path")).await;
    assert_eq!(seen["path"], "/v1/chat/completions");
    assert_eq!(seen["query"], "api-version=2024-06-01&tag=a%2Fb");
    // An empty `model` is filled in with the backend name.
    assert_eq!(seen["model"], "path-backend");

    // Streamed-through request (no body to read): the simulator echoes the
    // record of what it received.
    let resp = support::client()
        .get(
            fx.gw
                .url("/model/path-model/v1/deep/echo/path?x=1&y=&z=%20"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(served_by(&resp), "pod-path");
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["path"], "/v1/deep/echo/path");
    assert_eq!(echo["query"], "x=1&y=&z=%20");

    // Nothing after the name: the backend sees `/`.
    let resp = support::client()
        .get(fx.gw.url("/model/path-model?only=query"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(
        (echo["path"].as_str(), echo["query"].as_str()),
        (Some("/"), Some("only=query"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rewrite_changes_only_the_top_level_model() {
    let fx = Fixture::start();
    // Odd spacing, key order, escapes and nested `model` keys: only the
    // top-level value may change, every other byte must reach the backend.
    let head = "{ \"messages\" : [ {\"role\":\"user\",\"content\":\"say \\\"model\\\": \\\"json-model\\\" \\u00e9\u{1F600}\",\"model\":\"inner\"} ],\n\t\"model\" :\t";
    let tail =
        " , \"max_tokens\":2 ,\"metadata\":{\"model\":\"json-model\"}, \"temperature\": 0.50 }";
    let sent = format!("{head}\"json-model\"{tail}");
    let expected = format!("{head}\"json-backend\"{tail}");
    let resp = post_json(&fx.gw.url("/v1/chat/completions"), sent.as_bytes(), &[]).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let seen = last_recorded(fx.sim("json")).await;
    assert_eq!(seen["model"], "json-backend");
    assert_eq!(seen["body_len"], expected.len());
    assert_eq!(seen["body_sha256"], sha256_hex(expected.as_bytes()));
    assert_eq!(
        seen["headers"]["content-length"],
        expected.len().to_string()
    );

    // A body already naming the backend is forwarded as it is.
    let same = chat_body("json-backend");
    let resp = post_json(
        &fx.gw.url("/v1/chat/completions"),
        same.as_bytes(),
        &[("x-model-id", "json-model")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let seen = last_recorded(fx.sim("json")).await;
    assert_eq!(seen["body_sha256"], sha256_hex(same.as_bytes()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliases_and_lora_adapters_resolve_to_the_base_model() {
    let base = pod(
        "pod-base",
        &["base-backend"],
        &["--lora-module", "sql-lora=/adapters/sql"],
    );
    let other = pod("pod-other", &["other"], &[]);
    let yaml = format!(
        "models:\n\
         - name: base\n  backendModel: base-backend\n  aliases: [gpt-4o-mini, team/base]\n  \
           endpoints: {}\n  loraAdapters:\n  - name: sql\n    adapter: sql-lora\n\
         - name: other\n  endpoints: {}\n",
        endpoints(&[&base]),
        endpoints(&[&other])
    );
    let gw = Gateway::start(&yaml, &[]);
    let url = gw.url("/v1/chat/completions");

    for alias in ["gpt-4o-mini", "team/base", "base"] {
        let resp = post_json(&url, chat_body(alias).as_bytes(), &[]).await;
        assert_eq!(resp.status(), 200, "{alias}");
        assert_eq!(served_by(&resp), "pod-base", "{alias}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["model"], "base-backend", "{alias}");
        assert_eq!(last_recorded(&base).await["model"], "base-backend");
    }

    // The adapter reaches the base model's pod under the adapter's name,
    // whichever source names it.
    let resp = post_json(&url, chat_body("sql").as_bytes(), &[]).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(served_by(&resp), "pod-base");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["model"], "sql-lora");
    assert_eq!(last_recorded(&base).await["model"], "sql-lora");
    let resp = post_json(
        &gw.url("/model/sql/v1/chat/completions"),
        br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1}"#,
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(last_recorded(&base).await["model"], "sql-lora");
    // An alias in a URL-encoded path segment.
    let resp = post_json(
        &gw.url("/model/team%2Fbase/v1/chat/completions"),
        chat_body("other").as_bytes(),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(served_by(&resp), "pod-base");
    assert_eq!(support::recorded(&other).await.len(), 0);

    // The listing names aliases and adapters with their roots.
    let list: Value = support::client()
        .get(gw.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows: Vec<(String, String, Value)> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_owned(),
                m["root"].as_str().unwrap().to_owned(),
                m["parent"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("base".into(), "base".into(), Value::Null),
            ("gpt-4o-mini".into(), "base".into(), Value::Null),
            ("team/base".into(), "base".into(), Value::Null),
            ("sql".into(), "sql-lora".into(), json!("base")),
            ("other".into(), "other".into(), Value::Null),
        ]
    );

    // GET /v1/models/{id} answers one row of the list, names with a slash
    // encoded or not; unknown names get 404, other methods 405.
    for (path, id) in [
        ("/v1/models/base", "base"),
        ("/v1/models/team%2Fbase", "team/base"),
        ("/v1/models/team/base", "team/base"),
        ("/v1/models/sql", "sql"),
    ] {
        let resp = support::client().get(gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let row: Value = resp.json().await.unwrap();
        assert_eq!(row["id"], id, "{path}");
        assert_eq!(row["object"], "model");
    }
    let resp = support::client()
        .get(gw.url("/v1/models/nope"))
        .send()
        .await
        .unwrap();
    let (status, _, body) = support::error_of(resp).await;
    assert_eq!(status, 404);
    support::assert_openai_error(&body, "model_not_found");
    let resp = support::client()
        .get(gw.url("/v1/models/%zz"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = support::client()
        .delete(gw.url("/v1/models/base"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_id_is_echoed_and_forwarded() {
    let fx = Fixture::start();
    let body = chat_body("json-model");

    // Given by the client: echoed and passed upstream, on the buffered path...
    let resp = post_json(
        &fx.gw.url("/v1/chat/completions"),
        body.as_bytes(),
        &[("x-request-id", "client-id-123")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "client-id-123");
    assert_eq!(
        last_recorded(fx.sim("json")).await["headers"]["x-request-id"],
        "client-id-123"
    );
    // ...on the streamed-through path...
    let resp = support::client()
        .get(fx.gw.url("/model/path-model/v1/anything"))
        .header("x-request-id", "client-id-456")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "client-id-456");
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(echo["headers"]["x-request-id"], "client-id-456");
    // ...and on answers the gateway gives itself.
    let resp = post_json(
        &fx.gw.url("/v1/chat/completions"),
        chat_body("no-such-model").as_bytes(),
        &[("x-request-id", "client-id-789")],
    )
    .await;
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["x-request-id"], "client-id-789");

    // Not given: the gateway makes one up, unique per request, and the
    // backend sees the same one.
    let mut ids = std::collections::HashSet::new();
    for _ in 0..3 {
        let resp = post_json(&fx.gw.url("/v1/chat/completions"), body.as_bytes(), &[]).await;
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
        assert!(!id.is_empty());
        assert_eq!(
            last_recorded(fx.sim("json")).await["headers"]["x-request-id"],
            id
        );
        assert!(ids.insert(id), "request ids repeat");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_body_without_content_type_is_read_as_json() {
    let fx = Fixture::start();
    // As FastAPI-based engines do: a POST without Content-Type whose body
    // is JSON names its model there, and is rewritten like any JSON body.
    let sent = chat_body("json-model");
    let resp = support::client()
        .post(fx.gw.url("/v1/chat/completions"))
        .body(sent.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let seen = last_recorded(fx.sim("json")).await;
    assert_eq!(seen["model"], "json-backend");
    // It goes upstream declared as what the gateway read it as.
    assert_eq!(seen["content_type"], "application/json", "{seen}");

    // A body that is not JSON on an API route: 400, saying why.
    let resp = support::client()
        .post(fx.gw.url("/v1/chat/completions"))
        .body("model=json-model")
        .send()
        .await
        .unwrap();
    let (status, _, body) = support::error_of(resp).await;
    assert_eq!(status, 400);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("Invalid JSON body"), "{body}");
}
