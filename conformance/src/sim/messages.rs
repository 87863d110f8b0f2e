//! Anthropic's Messages API (`/v1/messages`): the request as the simulator
//! reads it, the `message` object, its stream events, and Anthropic's error
//! shape.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::generation::Plan;
use super::metrics::FinishReason;
use super::prefix_cache::Prompt;
use super::protocol::ChatMessage;
use super::responses::new_id;
use super::streaming::Render;
use super::tools::ToolCall;

/// `POST /v1/messages`. Unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
pub struct MessagesRequest {
    /// Requested model; the default model when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// Upper bound of the output length; required.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// The conversation; required.
    #[serde(default)]
    pub messages: Option<Vec<ChatMessage>>,
    /// A system prompt: a string or text blocks.
    #[serde(default)]
    pub system: Option<Value>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Client tools (`name`, `input_schema`); see [`crate::sim::tools`].
    #[serde(default)]
    pub tools: Option<Value>,
    /// `{"type": "auto" | "any" | "tool" | "none", "name"?}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
}

impl MessagesRequest {
    /// Whether the conversation ends with a user turn that is not a tool result.
    pub fn user_turn(&self) -> bool {
        let Some(last) = self.messages.as_ref().and_then(|m| m.last()) else {
            return false;
        };
        let tool_result = last
            .content
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|blocks| {
                blocks
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            });
        last.role == "user" && !tool_result
    }

    /// The prompt: the system prompt, then the messages; 400 without
    /// `model`, `max_tokens` or messages.
    pub fn prompt(&self) -> Result<Prompt, ApiError> {
        if self.model.is_none() {
            return Err(ApiError::bad_request("model: Field required"));
        }
        if self.max_tokens.is_none() {
            return Err(ApiError::bad_request("max_tokens: Field required"));
        }
        let messages = match &self.messages {
            None => return Err(ApiError::bad_request("messages: Field required")),
            Some(m) if m.is_empty() => {
                return Err(ApiError::bad_request(
                    "messages: at least one message is required",
                ))
            }
            Some(m) => m,
        };
        let mut all = Vec::with_capacity(messages.len() + 1);
        if let Some(system) = &self.system {
            all.push(ChatMessage {
                role: "system".into(),
                content: Some(system.clone()),
            });
        }
        all.extend(messages.iter().map(|m| ChatMessage {
            role: m.role.clone(),
            content: m.content.clone(),
        }));
        Ok(Prompt::chat(&all))
    }
}

/// An error in Anthropic's shape:
/// `{"type":"error","error":{"type":"invalid_request_error","message":..}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl AnthropicError {
    /// Anthropic's error type for the status.
    pub fn kind(&self) -> &'static str {
        match self.0.status.as_u16() {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            _ => "api_error",
        }
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let body = json!({
            "type": "error",
            "error": {"type": self.kind(), "message": self.0.message},
            "request_id": new_id("req"),
        });
        let mut response = (self.0.status, body.to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// Renders one message, whole or as its event stream.
pub struct MessagesRender {
    id: String,
}

impl Default for MessagesRender {
    fn default() -> Self {
        Self::new()
    }
}

impl MessagesRender {
    /// A renderer with a fresh `msg_...` id.
    pub fn new() -> Self {
        Self { id: new_id("msg") }
    }

    fn message(&self, plan: &Plan, content: Value, stop: Value, output_tokens: u32) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": plan.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": null,
            "stop_details": null,
            "container": null,
            "usage": usage(plan, output_tokens),
        })
    }

    fn event(out: &mut Vec<u8>, kind: &str, data: &Value) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        let _ = serde_json::to_writer(&mut *out, data);
        out.extend_from_slice(b"\n\n");
    }
}

/// `tool_use` for a tool call, `end_turn`, or `max_tokens` when the limit
/// cut the output.
fn stop_reason(plan: &Plan) -> &'static str {
    match plan.finish {
        _ if plan.tool_call.is_some() => "tool_use",
        FinishReason::Length => "max_tokens",
        FinishReason::Stop => "end_turn",
    }
}

/// Anthropic's usage: `input_tokens` are those not read from the cache;
/// nothing is written to a cache, no server tool runs.
fn usage(plan: &Plan, output_tokens: u32) -> Value {
    json!({
        "input_tokens": plan.uncached_tokens(),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": plan.cached_tokens,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": null,
        "server_tool_use": null,
        "inference_geo": null,
        "service_tier": "standard",
    })
}

/// The usage of `message_delta`: cumulative counts.
fn delta_usage(plan: &Plan) -> Value {
    json!({
        "input_tokens": plan.uncached_tokens(),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": plan.cached_tokens,
        "output_tokens": plan.completion_tokens,
        "output_tokens_details": null,
        "server_tool_use": null,
    })
}

/// A `text` block.
fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text, "citations": null})
}

/// A `tool_use` block with `input`.
fn tool_use_block(call: &ToolCall, input: Value) -> Value {
    json!({"type": "tool_use", "id": call.id("toolu_", 0), "name": call.name,
           "input": input, "caller": {"type": "direct"}})
}

impl Render for MessagesRender {
    fn body(&mut self, plan: &Plan) -> Vec<u8> {
        let content = match &plan.tool_call {
            Some(call) => json!([tool_use_block(call, call.input.clone())]),
            None => json!([text_block(&plan.text(0))]),
        };
        let message = self.message(
            plan,
            content,
            Value::from(stop_reason(plan)),
            plan.completion_tokens,
        );
        serde_json::to_vec(&message).unwrap_or_default()
    }

    fn head(&mut self, plan: &Plan, out: &mut Vec<u8>) {
        let start = self.message(plan, json!([]), Value::Null, 1);
        Self::event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": start}),
        );
        let block = match &plan.tool_call {
            Some(call) => tool_use_block(call, json!({})),
            None => text_block(""),
        };
        Self::event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": block}),
        );
        Self::event(out, "ping", &json!({"type": "ping"}));
    }

    fn token(&mut self, plan: &Plan, out: &mut Vec<u8>, token: u32) {
        let delta = match &plan.tool_call {
            Some(call) => json!({"type": "input_json_delta", "partial_json": call.fragment(token)}),
            None => json!({"type": "text_delta", "text": plan.token(0, token)}),
        };
        Self::event(
            out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        );
    }

    fn finish(&mut self, plan: &Plan, out: &mut Vec<u8>) {
        Self::event(
            out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        );
        Self::event(
            out,
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason(plan), "stop_sequence": null,
                              "stop_details": null, "container": null},
                    "usage": delta_usage(plan)}),
        );
        Self::event(out, "message_stop", &json!({"type": "message_stop"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::config::SimConfig;
    use crate::sim::protocol::{parse_json, SamplingFields};
    use crate::sim::responses::capped_length;

    fn plan(request: &MessagesRequest) -> Plan {
        let config = SimConfig {
            default_max_tokens: 4,
            ..SimConfig::default()
        };
        let fields = SamplingFields {
            max_tokens: capped_length(request.max_tokens, &config),
            ..SamplingFields::default()
        };
        let prompt = request.prompt().expect("prompt");
        Plan::new(&config, "claude".into(), &[prompt], &fields, "messages").expect("plan")
    }

    #[test]
    fn requires_max_tokens_and_messages() {
        let missing: MessagesRequest =
            parse_json(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#)
                .expect("json");
        let e = AnthropicError(missing.prompt().expect_err("no max_tokens"));
        assert_eq!(e.kind(), "invalid_request_error");
        assert!(e.0.message.contains("max_tokens"));
        let empty: MessagesRequest =
            parse_json(br#"{"model":"m","max_tokens":3,"messages":[]}"#).expect("json");
        assert!(empty.prompt().is_err());
    }

    #[tokio::test]
    async fn error_has_anthropic_shape() {
        let response = AnthropicError(ApiError::model_not_found("x")).into_response();
        assert_eq!(response.status(), 404);
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .expect("body");
        let mut v: Value = serde_json::from_slice(&bytes).expect("json");
        let request_id = v.as_object_mut().and_then(|m| m.remove("request_id"));
        assert!(request_id
            .as_ref()
            .and_then(Value::as_str)
            .is_some_and(|id| id.starts_with("req_")));
        assert_eq!(
            v,
            json!({"type": "error", "error": {"type": "not_found_error",
                   "message": "The model `x` does not exist."}})
        );
    }

    #[test]
    fn body_shape_and_stop_reasons() {
        let request: MessagesRequest = parse_json(
            br#"{"model":"m","max_tokens":100,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
        )
        .expect("json");
        let p = plan(&request);
        let v: Value = serde_json::from_slice(&MessagesRender::new().body(&p)).expect("json");
        assert!(v["id"].as_str().is_some_and(|id| id.starts_with("msg_")));
        assert_eq!(v["type"], "message");
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["model"], "claude");
        assert_eq!(
            v["content"],
            json!([{"type": "text", "text": p.text(0), "citations": null}])
        );
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(v["stop_sequence"], Value::Null);
        assert_eq!(v["usage"]["output_tokens"], 4);
        assert_eq!(v["usage"]["cache_read_input_tokens"], 0);
        let short: MessagesRequest = parse_json(
            br#"{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}"#,
        )
        .expect("json");
        let v: Value =
            serde_json::from_slice(&MessagesRender::new().body(&plan(&short))).expect("json");
        assert_eq!(v["stop_reason"], "max_tokens");
        assert_eq!(v["usage"]["output_tokens"], 2);
    }

    #[test]
    fn stream_events_in_order() {
        let request: MessagesRequest = parse_json(
            br#"{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}"#,
        )
        .expect("json");
        let p = plan(&request);
        let mut render = MessagesRender::new();
        let mut out = Vec::new();
        render.head(&p, &mut out);
        render.open(&p, &mut out);
        for t in 0..p.completion_tokens {
            render.token(&p, &mut out, t);
        }
        render.finish(&p, &mut out);
        let events = crate::sim::streaming::named_events(&out);
        let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert!(events.iter().all(|(k, d)| d["type"] == k.as_str()));
        assert_eq!(events[0].1["message"]["content"], json!([]));
        assert_eq!(events[0].1["message"]["stop_reason"], Value::Null);
        let streamed: String = events[3..6]
            .iter()
            .map(|(_, d)| d["delta"]["text"].as_str().expect("text").to_owned())
            .collect();
        assert_eq!(streamed, p.text(0));
        assert_eq!(events[3].1["delta"]["type"], "text_delta");
        assert_eq!(events[7].1["delta"]["stop_reason"], "max_tokens");
        assert_eq!(events[7].1["usage"]["output_tokens"], 3);
    }
}
