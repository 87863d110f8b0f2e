//! What the client has been sent of a streamed answer, read event by event:
//! the answer's identity (from its first chunk), its text so far, how many
//! chunks carried text, whether it finished, and what would keep it from
//! being continued elsewhere.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::Api;

/// The streamed answer as far as the client has it.
#[derive(Debug, Default)]
pub struct Transcript {
    /// The first chunk's `id`, `created`, `model` and `system_fingerprint`,
    /// as JSON: every later chunk carries them.
    pub(super) identity: Option<Identity>,
    /// The answer's text so far.
    pub text: String,
    /// Chunks that carried text: the tokens streamed, for engines that
    /// stream a token per chunk.
    pub tokens: u64,
    /// The client has the chat stream's role chunk.
    pub(super) role_sent: bool,
    /// A chunk with a `finish_reason` passed: the answer is whole.
    pub finished: bool,
    /// `data: [DONE]` passed.
    pub done: bool,
    /// Why the answer cannot be continued, once something says so.
    pub blocker: Option<&'static str>,
}

/// What every chunk of one answer carries alike.
#[derive(Debug, Clone)]
pub(super) struct Identity {
    pub(super) id: Option<Box<RawValue>>,
    pub(super) created: Option<Box<RawValue>>,
    pub(super) model: Option<Box<RawValue>>,
    pub(super) fingerprint: Option<Box<RawValue>>,
}

/// One `data:` payload as far as it matters here.
#[derive(Deserialize)]
pub(super) struct ChunkView<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    created: Option<&'a RawValue>,
    #[serde(default, borrow)]
    model: Option<&'a RawValue>,
    #[serde(default, borrow)]
    system_fingerprint: Option<&'a RawValue>,
    #[serde(default, borrow)]
    choices: Vec<ChoiceView<'a>>,
    #[serde(default)]
    pub(super) usage: Option<UsageView>,
    #[serde(default, borrow)]
    pub(super) error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChoiceView<'a> {
    #[serde(default)]
    index: u64,
    #[serde(default, borrow)]
    delta: Option<DeltaView<'a>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(default, borrow)]
    role: Option<&'a RawValue>,
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<&'a RawValue>,
    #[serde(default, borrow)]
    function_call: Option<&'a RawValue>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
}

/// An answer's reported usage.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub(super) struct UsageView {
    #[serde(default)]
    pub(super) prompt_tokens: u64,
    #[serde(default)]
    pub(super) completion_tokens: u64,
}

impl Transcript {
    /// Reads one chunk the client is sent (`data` is its JSON).
    pub(super) fn read(&mut self, api: Api, chunk: &ChunkView<'_>) {
        if self.identity.is_none() && chunk.id.is_some() {
            let own = |v: Option<&RawValue>| v.map(RawValue::to_owned);
            self.identity = Some(Identity {
                id: own(chunk.id),
                created: own(chunk.created),
                model: own(chunk.model),
                fingerprint: own(chunk.system_fingerprint),
            });
        }
        for choice in &chunk.choices {
            if choice.index != 0 {
                self.blocker = Some("the answer has several choices");
                continue;
            }
            if choice.finish_reason.is_some() {
                self.finished = true;
            }
            let text = match (api, &choice.delta, &choice.text) {
                (Api::Chat, Some(delta), _) => {
                    self.role_sent |= delta.role.is_some();
                    if delta.tool_calls.is_some() || delta.function_call.is_some() {
                        self.blocker = Some("the answer is a tool call");
                    }
                    let thinking = [&delta.reasoning_content, &delta.reasoning];
                    if thinking
                        .iter()
                        .any(|t| t.as_deref().is_some_and(|t| !t.is_empty()))
                    {
                        self.blocker = Some("the answer streams reasoning");
                    }
                    delta.content.as_deref()
                }
                (Api::Completions, _, Some(text)) => Some(&**text),
                _ => None,
            };
            if let Some(text) = text.filter(|t| !t.is_empty()) {
                self.text.push_str(text);
                self.tokens += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(t: &mut Transcript, api: Api, json: &str) {
        let chunk: ChunkView<'_> = serde_json::from_str(json).unwrap();
        t.read(api, &chunk);
    }

    #[test]
    fn chat_chunks_build_the_text_and_identity() {
        let mut t = Transcript::default();
        read(
            &mut t,
            Api::Chat,
            r#"{"id":"c1","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        );
        read(
            &mut t,
            Api::Chat,
            r#"{"id":"c1","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"Hel\"lo"},"finish_reason":null}],"usage":null}"#,
        );
        read(
            &mut t,
            Api::Chat,
            r#"{"id":"c1","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" you"}}]}"#,
        );
        assert_eq!(t.text, "Hel\"lo you");
        assert_eq!(t.tokens, 2);
        assert!(t.role_sent && !t.finished && t.blocker.is_none());
        let id = t.identity.as_ref().unwrap();
        assert_eq!(id.id.as_deref().unwrap().get(), "\"c1\"");
        assert_eq!(id.created.as_deref().unwrap().get(), "7");
        read(
            &mut t,
            Api::Chat,
            r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        );
        assert!(t.finished);
    }

    #[test]
    fn what_cannot_be_continued_is_named() {
        for (json, why) in [
            (
                r#"{"choices":[{"index":1,"delta":{"content":"x"}}]}"#,
                "several choices",
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[]}}]}"#,
                "tool call",
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}"#,
                "reasoning",
            ),
        ] {
            let mut t = Transcript::default();
            read(&mut t, Api::Chat, json);
            assert!(t.blocker.is_some_and(|b| b.contains(why)), "{json}");
        }
    }

    #[test]
    fn completion_chunks_carry_text() {
        let mut t = Transcript::default();
        read(
            &mut t,
            Api::Completions,
            r#"{"id":"k","choices":[{"index":0,"text":" a","finish_reason":null}]}"#,
        );
        read(
            &mut t,
            Api::Completions,
            r#"{"id":"k","choices":[{"index":0,"text":""}]}"#,
        );
        assert_eq!((t.text.as_str(), t.tokens), (" a", 1));
    }
}
