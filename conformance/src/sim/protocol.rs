//! OpenAI request bodies as the simulator reads them, and the response
//! shapes it writes. Unknown request fields are ignored, as vLLM does.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ApiError;

/// Parses a JSON request body, answering 400 like vLLM on any mistake.
pub fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(if e.is_syntax() || e.is_eof() {
            format!("Invalid JSON body: {e}")
        } else {
            e.to_string()
        })
    })
}

/// `stream_options` of chat and text completions.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a final chunk carrying `usage`.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Fields shared by chat and text completion requests.
#[derive(Debug, Default, Deserialize)]
pub struct SamplingFields {
    /// Requested model; the default model when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming extras.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Completion length.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Completion length (newer name, preferred over `max_tokens`).
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    /// Number of choices.
    #[serde(default)]
    pub n: Option<u32>,
    /// vLLM's prefix-cache isolation: requests share cached blocks only
    /// with requests of the same salt.
    #[serde(default)]
    pub cache_salt: Option<String>,
    /// Sampling temperature, non-negative (only checked).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling, in (0, 1] (only checked).
    #[serde(default)]
    pub top_p: Option<f64>,
    /// -2 to 2 (only checked).
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// -2 to 2 (only checked).
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Seed of tool-call arguments (the prompt's when absent).
    #[serde(default)]
    pub seed: Option<i64>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// The conversation; required.
    pub messages: Vec<ChatMessage>,
    /// Function tools (see [`crate::sim::tools`]).
    #[serde(default)]
    pub tools: Option<Value>,
    /// `none`, `auto`, `required` or a named function.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Deprecated function list.
    #[serde(default)]
    pub functions: Option<Value>,
    /// Deprecated choice among `functions`.
    #[serde(default)]
    pub function_call: Option<Value>,
    /// vLLM: continue the final (assistant) message instead of starting a
    /// new turn (see [`crate::sim::continuation`]).
    #[serde(default)]
    pub continue_final_message: bool,
    /// vLLM: open a new assistant turn after the conversation; must be false
    /// with `continue_final_message`.
    #[serde(default = "yes")]
    pub add_generation_prompt: bool,
    /// Sampling and streaming fields.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

fn yes() -> bool {
    true
}

/// One chat message; only its text matters to the simulator.
#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// A string, an array of content parts, or null.
    #[serde(default)]
    pub content: Option<Value>,
}

impl ChatMessage {
    /// The message's text: the string, or the `text` of its text parts.
    pub fn text(&self) -> String {
        match &self.content {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        }
    }
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    /// A string, strings, token ids, or lists of token ids; required.
    pub prompt: Value,
    /// Echo the prompt (not done; only turns off recognising a continuation).
    #[serde(default)]
    pub echo: Option<bool>,
    /// Sampling and streaming fields.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// `POST /v1/embeddings`.
#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    /// Requested model; the default model when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// A string, strings, token ids, or lists of token ids; required.
    pub input: Value,
    /// `float` (default) or `base64` (little-endian f32, as the OpenAI SDK asks for).
    #[serde(default)]
    pub encoding_format: Option<String>,
    /// Vector length; the configured default when absent.
    #[serde(default)]
    pub dimensions: Option<u32>,
}

/// `POST /v1/images/generations` (and the text fields of `/v1/images/edits`).
#[derive(Debug, Deserialize)]
pub struct ImageRequest {
    /// Requested model; the default model when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// What to draw; required.
    pub prompt: String,
    /// Number of images.
    #[serde(default)]
    pub n: Option<u32>,
    /// `b64_json` (default) or `url` (answered as a `data:` URL).
    #[serde(default)]
    pub response_format: Option<String>,
}

/// Splits a `prompt`/`input` value into its texts; token id lists become
/// their ids joined by spaces. `None` when the shape is not one OpenAI allows.
pub fn texts_of(value: &Value) -> Option<Vec<String>> {
    fn ids(items: &[Value]) -> Option<String> {
        items
            .iter()
            .map(|v| v.as_u64().map(|id| id.to_string()))
            .collect::<Option<Vec<_>>>()
            .map(|ids| ids.join(" "))
    }
    match value {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) if items.iter().all(Value::is_string) => Some(
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        ),
        Value::Array(items) if items.iter().all(Value::is_number) => Some(vec![ids(items)?]),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_array().and_then(|inner| ids(inner)))
            .collect(),
        _ => None,
    }
}

/// Token accounting, as in every OpenAI response.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens.
    pub prompt_tokens: u32,
    /// Generated tokens (all choices).
    pub completion_tokens: u32,
    /// Sum of both.
    pub total_tokens: u32,
    /// Prefix cache details of completions; absent elsewhere (embeddings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
}

impl Usage {
    /// Usage for a prompt and a completion length, without prompt details.
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            prompt_tokens_details: None,
        }
    }

    /// Usage of a completion whose prompt had `cached_tokens` in the prefix cache.
    pub fn with_cached(prompt_tokens: u32, completion_tokens: u32, cached_tokens: u32) -> Self {
        Self {
            prompt_tokens_details: Some(PromptTokensDetails { cached_tokens }),
            ..Self::new(prompt_tokens, completion_tokens)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_shapes() {
        assert_eq!(texts_of(&json!("a b")), Some(vec!["a b".into()]));
        assert_eq!(
            texts_of(&json!(["a", "b"])),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(texts_of(&json!([1, 2])), Some(vec!["1 2".into()]));
        assert_eq!(
            texts_of(&json!([[1], [2, 3]])),
            Some(vec!["1".into(), "2 3".into()])
        );
        assert_eq!(texts_of(&json!([])), None);
        assert_eq!(texts_of(&json!([1, "a"])), None);
        assert_eq!(texts_of(&json!({"a": 1})), None);
        assert_eq!(texts_of(&json!([-1])), None);
    }

    #[test]
    fn chat_parsing_errors_are_400() {
        let missing = parse_json::<ChatRequest>(br#"{"model":"m"}"#).expect_err("missing");
        assert!(missing.message.contains("messages"), "{}", missing.message);
        let syntax = parse_json::<ChatRequest>(b"{not json").expect_err("syntax");
        assert!(
            syntax.message.starts_with("Invalid JSON body"),
            "{}",
            syntax.message
        );
        let ok: ChatRequest = parse_json(
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"max_tokens":3,"extra":1}"#,
        )
        .expect("valid");
        assert_eq!(ok.messages[0].text(), "hi");
        assert_eq!(ok.sampling.max_tokens, Some(3));
        assert_eq!(ok.sampling.stream, Some(true));
        assert!(!ok.continue_final_message && ok.add_generation_prompt);
    }
}
