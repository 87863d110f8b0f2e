//! The quick profile's checks, and the helpers every check uses. Each check
//! sends real requests and judges only what comes back (and, where the
//! backend is a `flexinfer-sim` with a known address, what its request
//! recorder saw). A failing check returns its evidence as the error.

use anyhow::{anyhow, bail, ensure, Result};
use futures::future::BoxFuture;
use http::Method;
use serde_json::{json, Value};
use sha2::Digest as _;

use super::http::{Call, Response};
use super::{Context, Profile};

/// What a check that did not fail concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The behaviour was as specified.
    Pass,
    /// The check could not run; why.
    Skip(String),
}

/// One check: a stable id, a one-line description and its body.
pub struct Check {
    /// Stable id, `<area>.<subject>[.<aspect>]`.
    pub id: &'static str,
    /// What a pass proves, in one line.
    pub description: &'static str,
    /// Runs it; `Err` is the evidence of a failure.
    pub run: for<'a> fn(&'a Context) -> BoxFuture<'a, Result<Verdict>>,
}

/// A model name no deployment is expected to serve.
pub const UNKNOWN_MODEL: &str = "flexinfer-conformance-no-such-model";

/// The checks of `profile`, in the order they run.
pub fn for_profile(profile: Profile) -> Vec<Check> {
    let mut checks = quick();
    if profile == Profile::Full {
        checks.extend(super::streaming::checks());
        checks.extend(super::routing::checks());
        checks.extend(super::coldstart::checks());
        checks.extend(super::limits::checks());
    }
    checks
}

/// The quick profile: protocol shapes, error answers, model extraction.
fn quick() -> Vec<Check> {
    vec![
        Check {
            id: "proto.models.list",
            description: "GET /v1/models answers 200 with an OpenAI model list that includes the model under test",
            run: models_list,
        },
        Check {
            id: "proto.chat.shape",
            description: "POST /v1/chat/completions answers 200 with a chat.completion (id, choices[].message, usage)",
            run: chat_shape,
        },
        Check {
            id: "proto.completions.shape",
            description: "POST /v1/completions answers 200 with a text_completion (id, choices[].text, usage)",
            run: completions_shape,
        },
        Check {
            id: "proto.chat.stream.framing",
            description: "stream: true answers text/event-stream, every line is `data: `, chunks are JSON, last is `data: [DONE]`",
            run: chat_stream_framing,
        },
        Check {
            id: "proto.embeddings.shape",
            description: "POST /v1/embeddings answers 200 with a list of embedding vectors of numbers and usage",
            run: embeddings_shape,
        },
        Check {
            id: "errors.bad_json",
            description: "an invalid JSON body is answered 400 with an OpenAI error envelope",
            run: bad_json,
        },
        Check {
            id: "errors.missing_model",
            description: "a request naming no model anywhere is answered 400 missing_required_field",
            run: missing_model,
        },
        Check {
            id: "errors.unknown_model",
            description: "an unknown model is answered 404 model_not_found",
            run: unknown_model,
        },
        Check {
            id: "extract.header_over_json",
            description: "the X-Model-ID header wins over the JSON body's model",
            run: header_over_json,
        },
        Check {
            id: "extract.path_over_json",
            description: "a /model/<name>/ path prefix wins over the JSON body's model",
            run: path_over_json,
        },
        Check {
            id: "extract.path_prefix_stripped",
            description: "/model/<name>/v1/chat/completions is routed by the prefix, which is stripped before forwarding",
            run: path_prefix_stripped,
        },
        Check {
            id: "extract.multipart_field",
            description: "a multipart form's `model` field routes the request, and the form reaches the backend byte for byte",
            run: multipart_field,
        },
    ]
}

pub(super) async fn send(ctx: &Context, call: Call) -> Result<Response> {
    call.send(&ctx.gateway, ctx.api_key.as_deref()).await
}

pub(super) fn model(ctx: &Context) -> Result<&str> {
    ctx.model.as_deref().ok_or_else(|| {
        anyhow!("no model to test: pass --model, or serve at least one model in GET /v1/models")
    })
}

pub(super) fn chat_body(model: Option<&str>) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "conformance check"}],
        "max_tokens": 4,
    });
    if let Some(model) = model {
        body["model"] = json!(model);
    }
    body
}

pub(super) fn expect_status(resp: &Response, status: u16) -> Result<()> {
    ensure!(
        resp.status.as_u16() == status,
        "expected status {status}, got {}",
        resp.describe()
    );
    Ok(())
}

pub(super) fn expect_json(resp: &Response) -> Result<Value> {
    resp.json()
        .ok_or_else(|| anyhow!("body is not JSON: {}", resp.describe()))
}

/// A chat completion's required fields.
pub(super) fn expect_chat_completion(resp: &Response) -> Result<Value> {
    expect_status(resp, 200)?;
    let body = expect_json(resp)?;
    ensure!(
        body["object"] == "chat.completion",
        "object is {}, not \"chat.completion\": {}",
        body["object"],
        resp.describe()
    );
    ensure!(body["id"].is_string(), "no string id: {}", resp.describe());
    let choices = body["choices"]
        .as_array()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| anyhow!("choices is not a non-empty array: {}", resp.describe()))?;
    ensure!(
        choices[0]["message"]["role"] == "assistant"
            && choices[0]["message"]["content"].is_string(),
        "choices[0].message is not an assistant message with content: {}",
        resp.describe()
    );
    ensure!(
        body["usage"]["total_tokens"].is_u64(),
        "usage.total_tokens missing: {}",
        resp.describe()
    );
    Ok(body)
}

/// An OpenAI error envelope; returns `error.code`.
/// The status, the OpenAI error envelope and its `error.code`, all at once.
pub(super) fn expect_error(resp: &Response, status: u16, code: &str) -> Result<()> {
    expect_status(resp, status)?;
    let got = expect_error_envelope(resp)?;
    ensure!(
        got == code,
        "error.code is {got}, not \"{code}\": {}",
        resp.describe()
    );
    Ok(())
}

pub(super) fn expect_error_envelope(resp: &Response) -> Result<Value> {
    let body = expect_json(resp)?;
    ensure!(
        body["error"]["message"].is_string() && body["error"]["type"].is_string(),
        "no OpenAI error envelope (error.message, error.type): {}",
        resp.describe()
    );
    Ok(body["error"]["code"].clone())
}

fn models_list(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let resp = send(ctx, Call::get("/v1/models")).await?;
        expect_status(&resp, 200)?;
        let body = expect_json(&resp)?;
        ensure!(
            body["object"] == "list",
            "object is not \"list\": {}",
            resp.describe()
        );
        let data = body["data"]
            .as_array()
            .ok_or_else(|| anyhow!("data is not an array: {}", resp.describe()))?;
        for entry in data {
            ensure!(
                entry["id"].is_string() && entry["object"] == "model",
                "entry without string id or object \"model\": {entry}"
            );
        }
        let model = model(ctx)?;
        ensure!(
            data.iter().any(|e| e["id"] == model),
            "model {model:?} is not listed: {}",
            resp.describe()
        );
        Ok(Verdict::Pass)
    })
}

fn chat_shape(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        let resp = send(
            ctx,
            Call::post_json("/v1/chat/completions", &chat_body(Some(model))),
        )
        .await?;
        expect_chat_completion(&resp)?;
        Ok(Verdict::Pass)
    })
}

fn chat_stream_framing(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        let mut body = chat_body(Some(model));
        body["stream"] = json!(true);
        let resp = send(ctx, Call::post_json("/v1/chat/completions", &body)).await?;
        expect_status(&resp, 200)?;
        let content_type = resp.header("content-type");
        ensure!(
            content_type.starts_with("text/event-stream"),
            "Content-Type is {content_type:?}, not text/event-stream"
        );
        let text = String::from_utf8_lossy(&resp.body);
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| !l.is_empty())
            .collect();
        ensure!(!lines.is_empty(), "empty stream");
        for line in &lines {
            ensure!(
                line.starts_with("data: "),
                "line without `data: ` prefix: {line:?}"
            );
        }
        let (last, chunks) = lines.split_last().expect("not empty");
        ensure!(
            *last == "data: [DONE]",
            "last line is {last:?}, not \"data: [DONE]\""
        );
        ensure!(!chunks.is_empty(), "no chunk before [DONE]");
        for chunk in chunks {
            let payload = &chunk["data: ".len()..];
            let value: Value = serde_json::from_str(payload)
                .map_err(|e| anyhow!("chunk is not JSON ({e}): {chunk:?}"))?;
            ensure!(
                value["object"] == "chat.completion.chunk",
                "chunk object is {}, not \"chat.completion.chunk\": {chunk:?}",
                value["object"]
            );
        }
        Ok(Verdict::Pass)
    })
}

fn completions_shape(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        let body = json!({"model": model, "prompt": "conformance check", "max_tokens": 4});
        let resp = send(ctx, Call::post_json("/v1/completions", &body)).await?;
        expect_status(&resp, 200)?;
        let body = expect_json(&resp)?;
        ensure!(
            body["object"] == "text_completion",
            "object is {}, not \"text_completion\": {}",
            body["object"],
            resp.describe()
        );
        ensure!(body["id"].is_string(), "no string id: {}", resp.describe());
        ensure!(
            body["choices"][0]["text"].is_string(),
            "choices[0].text is not a string: {}",
            resp.describe()
        );
        let usage = &body["usage"];
        ensure!(
            usage["prompt_tokens"].is_u64()
                && usage["completion_tokens"].is_u64()
                && usage["total_tokens"].as_u64()
                    == usage["prompt_tokens"]
                        .as_u64()
                        .zip(usage["completion_tokens"].as_u64())
                        .map(|(p, c)| p + c),
            "usage is not prompt_tokens + completion_tokens = total_tokens: {}",
            resp.describe()
        );
        Ok(Verdict::Pass)
    })
}

fn embeddings_shape(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        let body = json!({"model": model, "input": ["conformance", "check"]});
        let resp = send(ctx, Call::post_json("/v1/embeddings", &body)).await?;
        if resp.status.as_u16() == 404 || resp.status.as_u16() == 400 {
            // A chat-only model may not serve embeddings; only its shape is checked here.
            if let Some(v) = resp.json() {
                if v["error"]["code"] != "model_not_found"
                    && v["error"]["code"] != "missing_required_field"
                {
                    return Ok(Verdict::Skip(format!(
                        "model {model:?} does not serve embeddings: {}",
                        resp.describe()
                    )));
                }
            }
        }
        expect_status(&resp, 200)?;
        let body = expect_json(&resp)?;
        ensure!(
            body["object"] == "list",
            "object is not \"list\": {}",
            resp.describe()
        );
        let data = body["data"]
            .as_array()
            .ok_or_else(|| anyhow!("data is not an array: {}", resp.describe()))?;
        ensure!(data.len() == 2, "{} embeddings for 2 inputs", data.len());
        ensure!(
            body["usage"]["prompt_tokens"].is_u64() && body["usage"]["total_tokens"].is_u64(),
            "usage.prompt_tokens / usage.total_tokens missing: {}",
            resp.describe()
        );
        for (i, item) in data.iter().enumerate() {
            ensure!(
                item["object"] == "embedding",
                "data[{i}].object is not \"embedding\""
            );
            ensure!(item["index"] == i, "data[{i}].index is {}", item["index"]);
            let vector = item["embedding"]
                .as_array()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| anyhow!("data[{i}].embedding is not a non-empty array"))?;
            ensure!(
                vector.iter().all(Value::is_number),
                "data[{i}].embedding holds non-numbers"
            );
        }
        Ok(Verdict::Pass)
    })
}

fn bad_json(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let call = Call::post_raw("/v1/chat/completions", "application/json", "{\"model\": ");
        let resp = send(ctx, call).await?;
        expect_status(&resp, 400)?;
        expect_error_envelope(&resp)?;
        Ok(Verdict::Pass)
    })
}

fn missing_model(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let resp = send(
            ctx,
            Call::post_json("/v1/chat/completions", &chat_body(None)),
        )
        .await?;
        expect_error(&resp, 400, "missing_required_field")?;
        Ok(Verdict::Pass)
    })
}

fn unknown_model(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let body = chat_body(Some(UNKNOWN_MODEL));
        let resp = send(ctx, Call::post_json("/v1/chat/completions", &body)).await?;
        expect_error(&resp, 404, "model_not_found")?;
        Ok(Verdict::Pass)
    })
}

fn header_over_json(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        let call = Call::post_json("/v1/chat/completions", &chat_body(Some(UNKNOWN_MODEL)))
            .header("x-model-id", model);
        let resp = send(ctx, call).await?;
        if resp.status.as_u16() != 200 {
            bail!(
                "X-Model-ID: {model} with body model {UNKNOWN_MODEL:?} was not served by {model:?}: {}",
                resp.describe()
            );
        }
        expect_chat_completion(&resp)?;
        Ok(Verdict::Pass)
    })
}

fn path_over_json(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        let path = format!("/model/{model}/v1/chat/completions");
        let call = Call::post_json(path.as_str(), &chat_body(Some(UNKNOWN_MODEL)));
        let resp = send(ctx, call).await?;
        expect_chat_completion(&resp).map_err(|e| {
            anyhow!(
                "POST {path} with body model {UNKNOWN_MODEL:?} was not served by {model:?}: {e:#}"
            )
        })?;
        Ok(Verdict::Pass)
    })
}

/// A multipart form with a `model` field and a small file, and its boundary.
fn multipart_form(model: &str) -> (String, Vec<u8>) {
    let boundary = "flexinfer-conformance-boundary-7d41";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{model}\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend((0u8..=255).cycle().take(2048));
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

fn multipart_field(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        let (content_type, form) = multipart_form(model);
        let digest = hex::encode(sha2::Sha256::digest(&form));
        let path = "/v1/audio/transcriptions";
        let resp = send(ctx, Call::post_raw(path, &content_type, form.clone())).await?;
        if let Some(body) = resp.json() {
            let code = &body["error"]["code"];
            ensure!(
                code != "missing_required_field" && code != "model_not_found",
                "the gateway did not take the model from the form: {}",
                resp.describe()
            );
            // A flexinfer-sim backend echoes what it received on this path.
            if resp.status.as_u16() == 200 && body["path"].is_string() {
                ensure!(
                    body["path"] == path,
                    "the backend saw path {}, not {path:?}",
                    body["path"]
                );
                ensure!(
                    body["body_sha256"] == digest.as_str() && body["body_len"] == form.len(),
                    "the form was changed on the way: the backend saw {} bytes with SHA-256 {}, \
                     the client sent {} bytes with SHA-256 {digest}",
                    body["body_len"],
                    body["body_sha256"],
                    form.len()
                );
                ensure!(
                    body["model"] == model,
                    "the backend saw form field model {}, not {model:?}",
                    body["model"]
                );
                return Ok(Verdict::Pass);
            }
        }
        if resp.status.is_server_error() {
            bail!("multipart request failed: {}", resp.describe());
        }
        Ok(Verdict::Skip(format!(
            "the gateway routed the form, but the backend is not a flexinfer-sim echoing what it \
             received: {}",
            resp.describe()
        )))
    })
}

fn path_prefix_stripped(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = model(ctx)?;
        if let Some(sim) = &ctx.sim {
            let cleared = Call::new(Method::DELETE, "/sim/requests")
                .send(sim, None)
                .await?;
            expect_status(&cleared, 200)?;
        }
        let path = format!("/model/{model}/v1/chat/completions");
        let resp = send(ctx, Call::post_json(path.as_str(), &chat_body(None))).await?;
        expect_chat_completion(&resp)
            .map_err(|e| anyhow!("POST {path} (no model in the body): {e:#}"))?;
        let Some(sim) = &ctx.sim else {
            return Ok(Verdict::Skip(
                "answered as a chat completion, but what reached the backend is unknown: the \
                 backend's flexinfer-sim recorder is only known with --local or --sim-url"
                    .into(),
            ));
        };
        let seen = Call::get("/sim/requests").send(sim, None).await?;
        expect_status(&seen, 200)?;
        let records = expect_json(&seen)?;
        let paths: Vec<&str> = records
            .as_array()
            .map(|r| r.iter().filter_map(|r| r["path"].as_str()).collect())
            .unwrap_or_default();
        ensure!(
            paths == ["/v1/chat/completions"],
            "the backend saw paths {paths:?}, expected exactly [\"/v1/chat/completions\"]"
        );
        Ok(Verdict::Pass)
    })
}
