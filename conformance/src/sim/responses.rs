//! OpenAI's Responses API (`/v1/responses`): the request as the simulator
//! reads it, the `response` object and its stream events, and the bounded
//! store behind the follow-up routes (retrieve, input items, cancel, delete).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{json, Value};

use super::config::SimConfig;
use super::generation::Plan;
use super::metrics::FinishReason;
use super::prefix_cache::Prompt;
use super::protocol::ChatMessage;
use super::state::SimState;
use super::streaming::Render;
use super::tools::{ToolCall, Tools};

/// Responses the simulator remembers for the follow-up routes; the oldest
/// is forgotten first.
pub const STORE_CAPACITY: usize = 10_000;

/// `POST /v1/responses`. Unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
pub struct ResponsesRequest {
    /// Requested model; the default model when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// A string, or an array of input items; required.
    #[serde(default)]
    pub input: Option<Value>,
    /// A system message put ahead of the input.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Upper bound of the output length (see [`capped_length`]).
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Keep the response for the follow-up routes (default true).
    #[serde(default)]
    pub store: Option<bool>,
    /// A stored response this one continues: echoed back; an unknown id is
    /// a 404, as vLLM answers.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// vLLM's prefix-cache isolation (see [`crate::sim::protocol::SamplingFields`]).
    #[serde(default)]
    pub cache_salt: Option<String>,
    /// Echoed back (`{}` when absent).
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Echoed back (1 when absent).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Echoed back (1 when absent).
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Echoed back (0 when absent).
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// Echoed back (0 when absent).
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Echoed back (0 when absent).
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    /// Echoed back (`null` when absent).
    #[serde(default)]
    pub max_tool_calls: Option<u32>,
    /// Echoed back (true when absent).
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Echoed back (`null` when absent).
    #[serde(default)]
    pub safety_identifier: Option<String>,
    /// Echoed back (`null` when absent).
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    /// Function tools (see [`crate::sim::tools`]); echoed back.
    #[serde(default)]
    pub tools: Option<Value>,
    /// `none`, `auto`, `required` or `{"type":"function","name":..}`; echoed back.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Seed of tool-call arguments (the prompt's when absent).
    #[serde(default)]
    pub seed: Option<i64>,
}

/// The output length a limit asks for under the simulator's rule for the
/// Responses and Messages APIs: the default length, cut to the limit when
/// the limit is smaller (or equal: generation then stops because of it).
/// `None` means the default length, ending naturally.
pub fn capped_length(limit: Option<u32>, config: &SimConfig) -> Option<u32> {
    limit.filter(|l| *l <= config.default_max_tokens)
}

/// A fresh id: `prefix`, `_`, and 48 random hex digits.
pub fn new_id(prefix: &str) -> String {
    let (a, b) = (rand::random::<u128>(), rand::random::<u64>());
    format!("{prefix}_{:032x}{:016x}", a, b)
}

/// The request's `input` as stored input items, each with an `id`: a
/// string is one user message; message items (with a `role`) get their
/// string content as one `input_text` part; other items are kept as sent.
/// `None` for a shape the API does not allow.
pub fn input_items(input: &Value) -> Option<Vec<Value>> {
    match input {
        Value::String(text) => Some(vec![message_item("user", &Value::String(text.clone()))]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|item| {
                let obj = item.as_object()?;
                match obj.get("role").and_then(Value::as_str) {
                    Some(role) => Some(message_item(role, obj.get("content")?)),
                    None => {
                        obj.get("type")?.as_str()?;
                        let mut kept = obj.clone();
                        kept.entry("id")
                            .or_insert_with(|| Value::String(new_id("item")));
                        Some(Value::Object(kept))
                    }
                }
            })
            .collect(),
        _ => None,
    }
}

fn message_item(role: &str, content: &Value) -> Value {
    let content = match content {
        Value::String(text) => {
            let kind = if role == "assistant" {
                "output_text"
            } else {
                "input_text"
            };
            json!([{"type": kind, "text": text}])
        }
        other => other.clone(),
    };
    json!({
        "type": "message",
        "id": new_id("msg"),
        "role": role,
        "status": "completed",
        "content": content,
    })
}

/// The prompt the simulator generates from: the instructions as a system
/// message, then the text of every input item.
pub fn prompt(instructions: Option<&str>, items: &[Value]) -> Prompt {
    let mut messages = Vec::with_capacity(items.len() + 1);
    if let Some(text) = instructions {
        messages.push(ChatMessage {
            role: "system".into(),
            content: Some(Value::String(text.to_owned())),
        });
    }
    for item in items {
        let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
        let content = item
            .get("content")
            .or_else(|| item.get("output"))
            .cloned()
            .unwrap_or(Value::Null);
        messages.push(ChatMessage {
            role: role.to_owned(),
            content: Some(content),
        });
    }
    Prompt::chat(&messages)
}

/// What a response echoes of its request, fixed when it is created.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    /// `resp_...`.
    pub id: String,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    /// The id of the one output message.
    pub message_id: String,
    instructions: Option<String>,
    max_output_tokens: Option<u32>,
    previous_response_id: Option<String>,
    metadata: Value,
    temperature: f64,
    top_p: f64,
    presence_penalty: f64,
    frequency_penalty: f64,
    top_logprobs: u32,
    max_tool_calls: Option<u32>,
    parallel_tool_calls: bool,
    safety_identifier: Option<String>,
    prompt_cache_key: Option<String>,
    tools: Value,
    tool_choice: Value,
    store: bool,
}

impl ResponseMeta {
    /// The echoed fields of `request` and its parsed `tools`, with fresh ids.
    pub fn new(request: &ResponsesRequest, tools: &Tools, created_at: u64) -> Self {
        Self {
            id: new_id("resp"),
            created_at,
            message_id: new_id("msg"),
            instructions: request.instructions.clone(),
            max_output_tokens: request.max_output_tokens,
            previous_response_id: request.previous_response_id.clone(),
            metadata: request.metadata.clone().unwrap_or_else(|| json!({})),
            temperature: request.temperature.unwrap_or(1.0),
            top_p: request.top_p.unwrap_or(1.0),
            presence_penalty: request.presence_penalty.unwrap_or(0.0),
            frequency_penalty: request.frequency_penalty.unwrap_or(0.0),
            top_logprobs: request.top_logprobs.unwrap_or(0),
            max_tool_calls: request.max_tool_calls,
            parallel_tool_calls: request.parallel_tool_calls.unwrap_or(true),
            safety_identifier: request.safety_identifier.clone(),
            prompt_cache_key: request.prompt_cache_key.clone(),
            tools: Value::Array(
                tools
                    .tools
                    .iter()
                    .map(|t| {
                        json!({"type": "function", "name": t.name, "description": t.description,
                               "parameters": t.parameters, "strict": t.strict})
                    })
                    .collect(),
            ),
            tool_choice: request
                .tool_choice
                .clone()
                .filter(|c| !c.is_null())
                .unwrap_or_else(|| json!("auto")),
            store: request.store.unwrap_or(true),
        }
    }

    /// The `response` object: `status`, its output items and usage.
    fn object(&self, plan: &Plan, status: &str, output: Vec<Value>, usage: Value) -> Value {
        let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        let completed_at = (status == "completed").then(super::state::unix_now);
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": completed_at,
            "status": status,
            "background": false,
            "error": null,
            "incomplete_details": incomplete,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "metadata": self.metadata,
            "model": plan.model,
            "output": output,
            "parallel_tool_calls": self.parallel_tool_calls,
            "previous_response_id": self.previous_response_id,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "top_logprobs": self.top_logprobs,
            "max_tool_calls": self.max_tool_calls,
            "safety_identifier": self.safety_identifier,
            "prompt_cache_key": self.prompt_cache_key,
            "reasoning": {"effort": null, "summary": null},
            "service_tier": "default",
            "store": self.store,
            "temperature": self.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": self.tool_choice,
            "tools": self.tools,
            "top_p": self.top_p,
            "truncation": "disabled",
            "usage": usage,
        })
    }

    /// The `function_call` output item of `call`, with `arguments` so far.
    fn function_call(call: &ToolCall, status: &str, arguments: &str) -> Value {
        json!({
            "type": "function_call",
            "id": call.id("fc_", 0),
            "call_id": call.id("call_", 0),
            "name": call.name,
            "arguments": arguments,
            "status": status,
        })
    }

    /// The one output item: the tool call, else the message.
    fn item(&self, plan: &Plan, status: &str, text: Option<&str>) -> Value {
        match &plan.tool_call {
            Some(call) => {
                let arguments = text.map_or("", |_| call.arguments.as_str());
                Self::function_call(call, status, arguments)
            }
            None => self.message(status, text),
        }
    }

    /// The output message item with `text` (`content` empty while in progress).
    fn message(&self, status: &str, text: Option<&str>) -> Value {
        let content = text.map_or_else(Vec::new, |t| vec![output_text(t)]);
        json!({
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": content,
        })
    }

    /// The finished `response`.
    pub fn finished(&self, plan: &Plan, text: &str) -> Value {
        let status = final_status(plan);
        self.object(
            plan,
            status,
            vec![self.item(plan, status, Some(text))],
            usage(plan),
        )
    }
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// `completed`, or `incomplete` when `max_output_tokens` cut the output.
fn final_status(plan: &Plan) -> &'static str {
    match plan.finish {
        FinishReason::Length => "incomplete",
        FinishReason::Stop => "completed",
    }
}

/// The usage of a response still in progress: its input, no output yet.
fn usage_so_far(plan: &Plan) -> Value {
    json!({
        "input_tokens": plan.prompt_tokens,
        "input_tokens_details": {"cached_tokens": plan.cached_tokens},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": plan.prompt_tokens,
    })
}

/// The Responses API's usage object.
pub fn usage(plan: &Plan) -> Value {
    let u = plan.usage();
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": plan.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total_tokens,
    })
}

/// Renders one response, whole or as its event stream, and keeps it in the
/// server's store unless the request said `store: false`.
pub struct ResponsesRender {
    state: Arc<SimState>,
    meta: ResponseMeta,
    items: Vec<Value>,
    sequence: u64,
    text: String,
}

impl ResponsesRender {
    /// A renderer for a response to `items`.
    pub fn new(state: Arc<SimState>, meta: ResponseMeta, items: Vec<Value>) -> Self {
        Self {
            state,
            meta,
            items,
            sequence: 0,
            text: String::new(),
        }
    }

    /// One `event: <type>` / `data: {json}` event, numbered.
    fn event(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        if let Value::Object(map) = &mut data {
            map.insert("type".into(), Value::String(kind.to_owned()));
            map.insert("sequence_number".into(), Value::from(self.sequence));
        }
        self.sequence += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        let _ = serde_json::to_writer(&mut *out, &data);
        out.extend_from_slice(b"\n\n");
    }

    fn keep(&self, response: &Value) {
        if self.meta.store {
            self.state
                .responses
                .put(&self.meta.id, response.clone(), &self.items);
        }
    }
}

impl Render for ResponsesRender {
    fn body(&mut self, plan: &Plan) -> Vec<u8> {
        let text = match &plan.tool_call {
            Some(call) => call.arguments.clone(),
            None => plan.text(0),
        };
        let response = self.meta.finished(plan, &text);
        self.keep(&response);
        serde_json::to_vec(&response).unwrap_or_default()
    }

    fn head(&mut self, plan: &Plan, out: &mut Vec<u8>) {
        let started = self
            .meta
            .object(plan, "in_progress", Vec::new(), usage_so_far(plan));
        self.keep(&started);
        self.event(out, "response.created", json!({"response": started}));
        self.event(out, "response.in_progress", json!({"response": started}));
        let item = self.meta.item(plan, "in_progress", None);
        self.event(
            out,
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        );
        if plan.tool_call.is_some() {
            return;
        }
        let part = output_text("");
        let item_id = self.meta.message_id.clone();
        self.event(
            out,
            "response.content_part.added",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
        );
    }

    fn token(&mut self, plan: &Plan, out: &mut Vec<u8>, token: u32) {
        if let Some(call) = &plan.tool_call {
            let delta = call.fragment(token).to_owned();
            self.text.push_str(&delta);
            self.event(
                out,
                "response.function_call_arguments.delta",
                json!({"item_id": call.id("fc_", 0), "output_index": 0, "delta": delta}),
            );
            return;
        }
        let delta = plan.token(0, token);
        self.text.push_str(&delta);
        let item_id = self.meta.message_id.clone();
        self.event(
            out,
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0,
                   "delta": delta, "logprobs": []}),
        );
    }

    fn finish(&mut self, plan: &Plan, out: &mut Vec<u8>) {
        let text = std::mem::take(&mut self.text);
        if let Some(call) = &plan.tool_call {
            self.event(
                out,
                "response.function_call_arguments.done",
                json!({"item_id": call.id("fc_", 0), "output_index": 0,
                       "name": call.name, "arguments": text}),
            );
        } else {
            self.finish_text(&text, out);
        }
        let status = final_status(plan);
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": 0, "item": self.meta.item(plan, status, Some(&text))}),
        );
        let response = self.meta.finished(plan, &text);
        self.keep(&response);
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.event(out, kind, json!({"response": response}));
    }
}

impl ResponsesRender {
    /// The text part's closing events.
    fn finish_text(&mut self, text: &str, out: &mut Vec<u8>) {
        let item_id = self.meta.message_id.clone();
        self.event(
            out,
            "response.output_text.done",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0,
                   "text": text, "logprobs": []}),
        );
        self.event(
            out,
            "response.content_part.done",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0,
                   "part": output_text(text)}),
        );
    }
}

struct Stored {
    response: Value,
    items: Arc<Vec<Value>>,
}

/// The responses a server created, by id, the newest [`STORE_CAPACITY`] kept.
#[derive(Default)]
pub struct ResponseStore {
    inner: Mutex<StoreInner>,
}

#[derive(Default)]
struct StoreInner {
    by_id: HashMap<String, Stored>,
    order: VecDeque<String>,
}

impl std::fmt::Debug for ResponseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStore")
            .field("len", &self.len())
            .finish()
    }
}

impl ResponseStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, StoreInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores `response` under `id` (a new one with its input `items`; a
    /// known one keeps its items, and stays `cancelled` once cancelled).
    pub fn put(&self, id: &str, mut response: Value, items: &[Value]) {
        let mut inner = self.lock();
        if let Some(stored) = inner.by_id.get_mut(id) {
            if stored.response["status"] == "cancelled" {
                response["status"] = Value::from("cancelled");
            }
            stored.response = response;
            return;
        }
        while inner.order.len() >= STORE_CAPACITY {
            if let Some(old) = inner.order.pop_front() {
                inner.by_id.remove(&old);
            }
        }
        inner.order.push_back(id.to_owned());
        inner.by_id.insert(
            id.to_owned(),
            Stored {
                response,
                items: Arc::new(items.to_vec()),
            },
        );
    }

    /// The stored response.
    pub fn get(&self, id: &str) -> Option<Value> {
        self.lock().by_id.get(id).map(|s| s.response.clone())
    }

    /// The input items of a stored response.
    pub fn input_items(&self, id: &str) -> Option<Arc<Vec<Value>>> {
        self.lock().by_id.get(id).map(|s| Arc::clone(&s.items))
    }

    /// Marks a response still in progress `cancelled`; answers the response
    /// as it then stands.
    pub fn cancel(&self, id: &str) -> Option<Value> {
        let mut inner = self.lock();
        let stored = inner.by_id.get_mut(id)?;
        if stored.response["status"] == "in_progress" {
            stored.response["status"] = Value::from("cancelled");
        }
        Some(stored.response.clone())
    }

    /// Forgets a response; whether it was there.
    pub fn remove(&self, id: &str) -> bool {
        let mut inner = self.lock();
        if inner.by_id.remove(id).is_none() {
            return false;
        }
        inner.order.retain(|k| k != id);
        true
    }

    /// Responses stored.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// Whether none is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The page of input items `GET /v1/responses/{id}/input_items` answers:
/// `order` `desc` (the default) or `asc`, at most `limit` (1 to 100,
/// default 20) items after the item `after`.
pub fn items_page(
    items: &[Value],
    order: Option<&str>,
    limit: Option<usize>,
    after: Option<&str>,
) -> Value {
    let limit = limit.unwrap_or(20).clamp(1, 100);
    let ordered: Vec<&Value> = if order == Some("asc") {
        items.iter().collect()
    } else {
        items.iter().rev().collect()
    };
    let start = after
        .and_then(|a| ordered.iter().position(|i| i["id"] == a))
        .map_or(0, |p| p + 1);
    let rest = ordered.get(start..).unwrap_or_default();
    let page: Vec<&Value> = rest.iter().take(limit).copied().collect();
    json!({
        "object": "list",
        "data": page,
        "first_id": page.first().map(|i| i["id"].clone()),
        "last_id": page.last().map(|i| i["id"].clone()),
        "has_more": rest.len() > page.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::protocol::SamplingFields;

    fn plan(limit: Option<u32>) -> Plan {
        let config = SimConfig {
            default_max_tokens: 4,
            ..SimConfig::default()
        };
        let fields = SamplingFields {
            max_tokens: capped_length(limit, &config),
            ..SamplingFields::default()
        };
        Plan::new(
            &config,
            "m".into(),
            &[Prompt::from_text("hello there")],
            &fields,
            "input",
        )
        .expect("plan")
    }

    fn state() -> Arc<SimState> {
        SimState::new(SimConfig::default(), "pod").expect("state")
    }

    #[test]
    fn input_shapes() {
        let items = input_items(&json!("hi")).expect("string");
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["role"], "user");
        assert_eq!(
            items[0]["content"],
            json!([{"type": "input_text", "text": "hi"}])
        );
        assert!(items[0]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("msg_")));
        let items = input_items(&json!([
            {"role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"type": "message", "role": "assistant", "content": "b"},
            {"type": "function_call_output", "call_id": "c", "output": "d"}
        ]))
        .expect("array");
        assert_eq!(items[1]["content"][0]["type"], "output_text");
        assert_eq!(items[2]["type"], "function_call_output");
        assert!(items[2]["id"].is_string());
        assert_eq!(prompt(Some("sys"), &items).text, "sys\na\nb\nd");
        assert!(input_items(&json!([])).is_none());
        assert!(input_items(&json!([1])).is_none());
        assert!(input_items(&json!({"role": "user"})).is_none());
    }

    #[test]
    fn length_rule() {
        let config = SimConfig {
            default_max_tokens: 4,
            ..SimConfig::default()
        };
        assert_eq!(capped_length(None, &config), None);
        assert_eq!(capped_length(Some(9), &config), None);
        assert_eq!(capped_length(Some(4), &config), Some(4));
        assert_eq!(capped_length(Some(2), &config), Some(2));
    }

    #[test]
    fn body_has_the_sdk_required_fields_and_is_stored() {
        let state = state();
        let request = ResponsesRequest::default();
        let meta = ResponseMeta::new(&request, &Tools::default(), 7);
        let id = meta.id.clone();
        let items = input_items(&json!("hello there")).expect("items");
        let mut render = ResponsesRender::new(Arc::clone(&state), meta, items);
        let p = plan(None);
        let v: Value = serde_json::from_slice(&render.body(&p)).expect("json");
        for field in [
            "id",
            "created_at",
            "model",
            "object",
            "output",
            "parallel_tool_calls",
            "tool_choice",
            "tools",
        ] {
            assert!(v.get(field).is_some(), "{field} missing");
        }
        assert!(id.starts_with("resp_"));
        assert_eq!(v["object"], "response");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["created_at"], 7);
        assert_eq!(v["output"][0]["type"], "message");
        assert_eq!(v["output"][0]["role"], "assistant");
        assert_eq!(v["output"][0]["content"][0]["type"], "output_text");
        assert_eq!(v["output"][0]["content"][0]["text"], p.text(0));
        assert_eq!(v["output"][0]["content"][0]["annotations"], json!([]));
        assert_eq!(
            v["usage"],
            json!({"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0},
                   "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0},
                   "total_tokens": 7})
        );
        assert_eq!(state.responses.get(&id), Some(v));
        assert_eq!(state.responses.input_items(&id).map(|i| i.len()), Some(1));
        assert!(state.responses.remove(&id));
        assert!(state.responses.get(&id).is_none());
    }

    #[test]
    fn limited_output_is_incomplete_and_unstored_when_asked() {
        let state = state();
        let request = ResponsesRequest {
            store: Some(false),
            max_output_tokens: Some(2),
            ..ResponsesRequest::default()
        };
        let meta = ResponseMeta::new(&request, &Tools::default(), 7);
        let id = meta.id.clone();
        let mut render = ResponsesRender::new(Arc::clone(&state), meta, Vec::new());
        let v: Value = serde_json::from_slice(&render.body(&plan(Some(2)))).expect("json");
        assert_eq!(v["status"], "incomplete");
        assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(v["usage"]["output_tokens"], 2);
        assert!(state.responses.get(&id).is_none());
    }

    #[test]
    fn stream_events_in_order() {
        let state = state();
        let meta = ResponseMeta::new(&ResponsesRequest::default(), &Tools::default(), 7);
        let id = meta.id.clone();
        let mut render = ResponsesRender::new(Arc::clone(&state), meta, Vec::new());
        let p = plan(None);
        let mut out = Vec::new();
        render.head(&p, &mut out);
        assert_eq!(
            state.responses.get(&id).expect("stored")["status"],
            "in_progress"
        );
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
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (n, (kind, data)) in events.iter().enumerate() {
            assert_eq!(data["type"], kind.as_str());
            assert_eq!(data["sequence_number"], n as u64);
        }
        assert_eq!(events[0].1["response"]["id"], id.as_str());
        assert_eq!(events[0].1["response"]["status"], "in_progress");
        let deltas: String = events[4..8]
            .iter()
            .map(|(_, d)| d["delta"].as_str().expect("delta").to_owned())
            .collect();
        assert_eq!(deltas, p.text(0));
        assert_eq!(events[8].1["text"], p.text(0));
        let done = &events[11].1["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["content"][0]["text"], p.text(0));
        assert_eq!(state.responses.get(&id).as_ref(), Some(done));
    }

    #[test]
    fn store_is_bounded_and_keeps_cancellation() {
        let store = ResponseStore::default();
        for i in 0..STORE_CAPACITY + 2 {
            store.put(&format!("r{i}"), json!({"status": "completed"}), &[]);
        }
        assert_eq!(store.len(), STORE_CAPACITY);
        assert!(store.get("r0").is_none() && store.get("r1").is_none());
        assert!(store.get("r2").is_some());
        store.put("live", json!({"status": "in_progress"}), &[]);
        assert_eq!(store.cancel("live").expect("known")["status"], "cancelled");
        store.put("live", json!({"status": "completed"}), &[]);
        assert_eq!(store.get("live").expect("known")["status"], "cancelled");
        assert!(store.get("r2").is_none(), "evicted for \"live\"");
        assert_eq!(store.cancel("r3").expect("known")["status"], "completed");
        assert!(store.cancel("nope").is_none());
    }

    #[test]
    fn item_pages() {
        let items: Vec<Value> = (0..3).map(|i| json!({"id": format!("i{i}")})).collect();
        let page = items_page(&items, None, None, None);
        assert_eq!(page["first_id"], "i2");
        assert_eq!(page["last_id"], "i0");
        assert_eq!(page["has_more"], false);
        let page = items_page(&items, Some("asc"), Some(1), Some("i0"));
        assert_eq!(page["data"], json!([{"id": "i1"}]));
        assert_eq!(page["has_more"], true);
        let empty = items_page(&[], None, None, None);
        assert_eq!(empty["first_id"], Value::Null);
        assert_eq!(empty["data"], json!([]));
    }
}
