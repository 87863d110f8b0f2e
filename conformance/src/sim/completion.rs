//! Chat and text completion bodies, whole or as stream chunks, in the exact
//! shapes OpenAI and vLLM send.

use serde::Serialize;
use serde_json::{json, Value};

use super::generation::Plan;
use super::protocol::Usage;
use super::streaming::Render;

/// Which completion API a response belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `/v1/chat/completions`: `chat.completion` / `chat.completion.chunk`.
    Chat,
    /// `/v1/completions`: `text_completion` in both forms.
    Text,
}

impl Flavor {
    /// Prefix of response ids (`chatcmpl-...`, `cmpl-...`).
    pub fn id_prefix(self) -> &'static str {
        match self {
            Self::Chat => "chatcmpl",
            Self::Text => "cmpl",
        }
    }

    fn object(self, chunk: bool) -> &'static str {
        match (self, chunk) {
            (Self::Chat, false) => "chat.completion",
            (Self::Chat, true) => "chat.completion.chunk",
            (Self::Text, _) => "text_completion",
        }
    }
}

/// A response id: the flavour's prefix and 32 random hex digits.
pub fn response_id(prefix: &str) -> String {
    format!("{prefix}-{:032x}", rand::random::<u128>())
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    /// The text; `null` when the answer is a tool call.
    content: Option<&'a str>,
    /// Always `null`: OpenAI's schema requires the member.
    refusal: Option<()>,
    /// Always empty, as OpenAI sends it.
    annotations: [(); 0],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<Value>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    /// `null` in the opening delta, as OpenAI sends it; absent afterwards.
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<Option<()>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<Value>,
}

/// Prefix of chat tool-call ids, as vLLM writes them.
pub const TOOL_CALL_PREFIX: &str = "chatcmpl-tool-";

/// The finish reason of a chat choice: vLLM's `tool_calls` for a call the
/// model chose (`auto`, `required`), `stop` for a named one, and
/// `function_call` for the legacy API.
fn chat_finish(plan: &Plan) -> &'static str {
    match &plan.tool_call {
        Some(call) if call.legacy => "function_call",
        Some(call) if call.named => "stop",
        Some(_) => "tool_calls",
        None => plan.finish.as_str(),
    }
}

/// `message.tool_calls` or `message.function_call` of choice `index`.
fn call_members(plan: &Plan, index: usize) -> (Option<Value>, Option<Value>) {
    match &plan.tool_call {
        None => (None, None),
        Some(call) if call.legacy => (
            None,
            Some(json!({"name": call.name, "arguments": call.arguments})),
        ),
        Some(call) => (
            Some(json!([{
                "id": call.id(TOOL_CALL_PREFIX, index),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }])),
            None,
        ),
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Choice<'a> {
    ChatMessage {
        index: usize,
        message: Message<'a>,
        logprobs: Option<()>,
        finish_reason: Option<&'static str>,
    },
    ChatDelta {
        index: usize,
        delta: Delta<'a>,
        logprobs: Option<()>,
        finish_reason: Option<&'static str>,
    },
    Text {
        index: usize,
        text: &'a str,
        logprobs: Option<()>,
        finish_reason: Option<&'static str>,
    },
}

#[derive(Serialize)]
struct Envelope<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<Choice<'a>>,
    /// Absent, `null` (streams with usage requested), or the usage object.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<Usage>>,
}

/// The non-streaming response body.
pub fn full_body(flavor: Flavor, plan: &Plan, id: &str, created: u64) -> Vec<u8> {
    let texts: Vec<String> = (0..plan.seeds.len()).map(|i| plan.text(i)).collect();
    let finish = Some(plan.finish.as_str());
    let choices = texts
        .iter()
        .enumerate()
        .map(|(index, text)| match flavor {
            Flavor::Chat => {
                let (tool_calls, function_call) = call_members(plan, index);
                Choice::ChatMessage {
                    index,
                    message: Message {
                        role: "assistant",
                        content: plan.tool_call.is_none().then_some(text.as_str()),
                        refusal: None,
                        annotations: [],
                        tool_calls,
                        function_call,
                    },
                    logprobs: None,
                    finish_reason: Some(chat_finish(plan)),
                }
            }
            Flavor::Text => Choice::Text {
                index,
                text,
                logprobs: None,
                finish_reason: finish,
            },
        })
        .collect();
    serde_json::to_vec(&Envelope {
        id,
        object: flavor.object(false),
        created,
        model: &plan.model,
        choices,
        usage: Some(Some(plan.usage())),
    })
    .unwrap_or_default()
}

/// Renders one chat or text completion: the whole body, or its stream of
/// `data: {json}\n\n` events.
pub struct ChunkWriter {
    flavor: Flavor,
    id: String,
    created: u64,
}

impl ChunkWriter {
    /// A writer with a fresh response id.
    pub fn new(flavor: Flavor, created: u64) -> Self {
        Self {
            flavor,
            id: response_id(flavor.id_prefix()),
            created,
        }
    }

    fn event(
        &self,
        plan: &Plan,
        out: &mut Vec<u8>,
        choices: Vec<Choice<'_>>,
        usage: Option<Option<Usage>>,
    ) {
        out.extend_from_slice(b"data: ");
        // Serializing these plain structs into a Vec cannot fail.
        let _ = serde_json::to_writer(
            &mut *out,
            &Envelope {
                id: &self.id,
                object: self.flavor.object(true),
                created: self.created,
                model: &plan.model,
                choices,
                usage,
            },
        );
        out.extend_from_slice(b"\n\n");
    }

    /// `null` usage on ordinary chunks when usage was requested, as OpenAI does.
    fn usage_placeholder(plan: &Plan) -> Option<Option<Usage>> {
        plan.include_usage.then_some(None)
    }
}

impl Render for ChunkWriter {
    fn body(&mut self, plan: &Plan) -> Vec<u8> {
        full_body(self.flavor, plan, &self.id, self.created)
    }

    /// The chat stream's opening chunks: `{"role":"assistant","content":"","refusal":null}`
    /// per choice.
    fn open(&mut self, plan: &Plan, out: &mut Vec<u8>) {
        if self.flavor != Flavor::Chat {
            return;
        }
        for index in 0..plan.seeds.len() {
            let choice = Choice::ChatDelta {
                index,
                delta: Delta {
                    role: Some("assistant"),
                    content: Some(""),
                    refusal: Some(None),
                    ..Delta::default()
                },
                logprobs: None,
                finish_reason: None,
            };
            self.event(plan, out, vec![choice], Self::usage_placeholder(plan));
            if let Some(call) = &plan.tool_call {
                let mut delta = Delta::default();
                if call.legacy {
                    delta.function_call = Some(json!({"name": call.name, "arguments": ""}));
                } else {
                    delta.tool_calls = Some(json!([{
                        "index": 0,
                        "id": call.id(TOOL_CALL_PREFIX, index),
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }]));
                }
                let header = Choice::ChatDelta {
                    index,
                    delta,
                    logprobs: None,
                    finish_reason: None,
                };
                self.event(plan, out, vec![header], Self::usage_placeholder(plan));
            }
        }
    }

    /// One chunk per choice carrying token `token`.
    fn token(&mut self, plan: &Plan, out: &mut Vec<u8>, token: u32) {
        for index in 0..plan.seeds.len() {
            let text = plan.token(index, token);
            if let (Flavor::Chat, Some(call)) = (self.flavor, &plan.tool_call) {
                let fragment = call.fragment(token);
                let mut delta = Delta::default();
                if call.legacy {
                    delta.function_call = Some(json!({"arguments": fragment}));
                } else {
                    delta.tool_calls =
                        Some(json!([{"index": 0, "function": {"arguments": fragment}}]));
                }
                let choice = Choice::ChatDelta {
                    index,
                    delta,
                    logprobs: None,
                    finish_reason: None,
                };
                self.event(plan, out, vec![choice], Self::usage_placeholder(plan));
                continue;
            }
            let choice = match self.flavor {
                Flavor::Chat => Choice::ChatDelta {
                    index,
                    delta: Delta {
                        content: Some(&text),
                        ..Delta::default()
                    },
                    logprobs: None,
                    finish_reason: None,
                },
                Flavor::Text => Choice::Text {
                    index,
                    text: &text,
                    logprobs: None,
                    finish_reason: None,
                },
            };
            self.event(plan, out, vec![choice], Self::usage_placeholder(plan));
        }
    }

    /// The closing chunks: finish reasons, the usage chunk when asked for, and `[DONE]`.
    fn finish(&mut self, plan: &Plan, out: &mut Vec<u8>) {
        let finish = Some(plan.finish.as_str());
        for index in 0..plan.seeds.len() {
            let choice = match self.flavor {
                Flavor::Chat => Choice::ChatDelta {
                    index,
                    delta: Delta::default(),
                    logprobs: None,
                    finish_reason: Some(chat_finish(plan)),
                },
                Flavor::Text => Choice::Text {
                    index,
                    text: "",
                    logprobs: None,
                    finish_reason: finish,
                },
            };
            self.event(plan, out, vec![choice], Self::usage_placeholder(plan));
        }
        if plan.include_usage {
            self.event(plan, out, Vec::new(), Some(Some(plan.usage())));
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::config::SimConfig;
    use crate::sim::prefix_cache::Prompt;
    use crate::sim::protocol::{SamplingFields, StreamOptions};
    use serde_json::Value;

    fn plan(stream: bool, include_usage: bool) -> Plan {
        let fields = SamplingFields {
            max_tokens: Some(3),
            stream: Some(stream),
            stream_options: include_usage.then_some(StreamOptions {
                include_usage: Some(true),
            }),
            ..SamplingFields::default()
        };
        Plan::new(
            &SimConfig::default(),
            "m".into(),
            &[Prompt::from_text("hi there")],
            &fields,
            "messages",
        )
        .expect("plan")
    }

    fn events(bytes: &[u8]) -> Vec<String> {
        let text = String::from_utf8(bytes.to_vec()).expect("utf8");
        assert!(text.ends_with("\n\n"));
        text.split_terminator("\n\n")
            .map(|e| e.strip_prefix("data: ").expect("data prefix").to_owned())
            .collect()
    }

    #[test]
    fn chat_body_has_openai_shape() {
        let p = plan(false, false);
        let v: Value =
            serde_json::from_slice(&full_body(Flavor::Chat, &p, "chatcmpl-1", 5)).expect("json");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["id"], "chatcmpl-1");
        assert_eq!(v["created"], 5);
        assert_eq!(v["model"], "m");
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert_eq!(v["choices"][0]["message"]["content"], p.text(0));
        assert_eq!(v["choices"][0]["message"]["refusal"], Value::Null);
        assert!(v["choices"][0]["message"]
            .as_object()
            .is_some_and(|m| m.contains_key("refusal")));
        assert!(v["choices"][0]
            .as_object()
            .is_some_and(|c| c.contains_key("logprobs")));
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(
            v["usage"],
            serde_json::json!({
                "prompt_tokens": 2,
                "completion_tokens": 3,
                "total_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 0}
            })
        );
    }

    #[test]
    fn text_body_has_openai_shape() {
        let p = plan(false, false);
        let v: Value =
            serde_json::from_slice(&full_body(Flavor::Text, &p, "cmpl-1", 5)).expect("json");
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], p.text(0));
        assert_eq!(v["choices"][0]["logprobs"], Value::Null);
    }

    #[test]
    fn chat_stream_sequence() {
        let p = plan(true, true);
        let mut w = ChunkWriter::new(Flavor::Chat, 5);
        let mut out = Vec::new();
        w.open(&p, &mut out);
        for t in 0..3 {
            w.token(&p, &mut out, t);
        }
        w.finish(&p, &mut out);
        let events = events(&out);
        assert_eq!(events.len(), 7);
        assert_eq!(events[6], "[DONE]");
        let chunks: Vec<Value> = events[..6]
            .iter()
            .map(|e| serde_json::from_str(e).expect("json"))
            .collect();
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"));
        assert_eq!(
            chunks[0]["choices"][0]["delta"],
            serde_json::json!({"role": "assistant", "content": "", "refusal": null})
        );
        let content: String = chunks[1..4]
            .iter()
            .map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .expect("content")
                    .to_owned()
            })
            .collect();
        assert_eq!(content, p.text(0));
        assert_eq!(chunks[4]["choices"][0]["delta"], serde_json::json!({}));
        assert_eq!(chunks[4]["choices"][0]["finish_reason"], "length");
        assert_eq!(chunks[4]["usage"], Value::Null);
        assert_eq!(chunks[5]["choices"], serde_json::json!([]));
        assert_eq!(chunks[5]["usage"]["total_tokens"], 5);
        assert_eq!(
            chunks[5]["usage"]["prompt_tokens_details"],
            serde_json::json!({"cached_tokens": 0})
        );
    }

    #[test]
    fn stream_without_usage_has_no_usage_field() {
        let p = plan(true, false);
        let mut w = ChunkWriter::new(Flavor::Text, 5);
        let mut out = Vec::new();
        w.open(&p, &mut out);
        w.token(&p, &mut out, 0);
        w.finish(&p, &mut out);
        let events = events(&out);
        assert_eq!(events.len(), 3, "text completions have no role chunk");
        let first: Value = serde_json::from_str(&events[0]).expect("json");
        assert!(first.get("usage").is_none());
        assert_eq!(first["object"], "text_completion");
    }
}
