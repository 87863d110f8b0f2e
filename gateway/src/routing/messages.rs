//! A streaming walk over request JSON (`messages`, `prompt`) that hands text
//! to a handler as it is parsed: nothing is collected, strings without
//! escapes are never copied, and the walk stops as soon as the handler has
//! seen enough.

use std::borrow::Cow;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};

use crate::extract::RawJson;

/// The part of a message's role that key derivation cares about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// `system`, or `developer` (its successor for newer OpenAI models).
    System,
    User,
    Other,
}

/// Whether the walk should go on to the next message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    Stop,
}

/// Receives messages during [`walk_messages`].
pub(super) trait MessageHandler {
    /// Whether the content of the current message should be passed to
    /// [`MessageHandler::text`]. `role` is `None` when `content` comes before
    /// `role` in the object; answering `false` then keeps the text until the
    /// role is known and the question is asked again.
    fn wants(&mut self, role: Option<Role>) -> bool;
    /// A piece of the current message's text: the string content, or each
    /// text part of an array content, in order.
    fn text(&mut self, text: &str);
    /// The current message is complete.
    fn end_message(&mut self, role: Option<Role>) -> Flow;
}

/// Walks a chat `messages` array. Returns `false` when it is not an array of
/// objects (the handler may have seen part of it; discard its state).
pub(super) fn walk_messages<H: MessageHandler>(raw: RawJson<'_>, handler: &mut H) -> bool {
    let mut stopped = false;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let result = de.deserialize_seq(MessagesVisitor {
        handler,
        stopped: &mut stopped,
    });
    // Stopping early leaves elements unread, which serde_json reports as an
    // error after the visitor has returned; everything wanted was read.
    result.is_ok() || stopped
}

/// Passes the text of a completion `prompt` to `sink`: the string itself,
/// or the first element of an array of strings. Token-id prompts have no
/// text and give nothing. Returns `false` on anything else.
pub(super) fn walk_prompt(raw: RawJson<'_>, sink: &mut dyn FnMut(&str)) -> bool {
    let mut stopped = false;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let result = de.deserialize_any(PromptVisitor {
        sink,
        stopped: &mut stopped,
    });
    result.is_ok() || stopped
}

/// The text of `documents[0]`: its `content`, `text` or `value` (first
/// string found, in that order), or the element itself when it is a string.
/// Borrowed from `raw` unless it contains escapes.
pub(super) fn first_document(raw: RawJson<'_>) -> Option<Cow<'_, str>> {
    let mut found = None;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    // Reading only the first element makes serde_json report the rest as an
    // error; the slot is filled by then.
    let _ = de.deserialize_seq(FirstDocumentVisitor { found: &mut found });
    found
}

struct FirstDocumentVisitor<'s, 'de> {
    found: &'s mut Option<Cow<'de, str>>,
}

impl<'de> Visitor<'de> for FirstDocumentVisitor<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of documents")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if let Some(document) = seq.next_element::<DocumentText<'de>>()? {
            *self.found = document.0;
        }
        Ok(())
    }
}

/// A document's text; non-string fields and other shapes read as none.
struct DocumentText<'de>(Option<Cow<'de, str>>);

impl<'de> de::Deserialize<'de> for DocumentText<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DocumentVisitor { field: false })
    }
}

/// Reads a document, or (`field`) one of its fields, where only a string
/// counts.
struct DocumentVisitor {
    field: bool,
}

impl<'de> DeserializeSeed<'de> for DocumentVisitor {
    type Value = DocumentText<'de>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = DocumentText<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a document")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(DocumentText(Some(Cow::Borrowed(v))))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(DocumentText(Some(Cow::Owned(v.to_owned()))))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Best field so far: 0 = content, 1 = text, 2 = value.
        let mut best: Option<(u8, Cow<'de, str>)> = None;
        while let Some(key) = map.next_key::<DocumentField>()? {
            let rank = key.0;
            if self.field || rank == u8::MAX || best.as_ref().is_some_and(|(b, _)| *b <= rank) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if let Some(text) = map.next_value_seed(DocumentVisitor { field: true })?.0 {
                best = Some((rank, text));
            }
        }
        Ok(DocumentText(best.map(|(_, text)| text)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(DocumentText(None))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(DocumentText(None))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(DocumentText(None))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(DocumentText(None))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(DocumentText(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(DocumentText(None))
    }
}

/// The rank of a document field: `content` 0, `text` 1, `value` 2, others
/// `u8::MAX`.
struct DocumentField(u8);

impl<'de> de::Deserialize<'de> for DocumentField {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DocumentFieldVisitor;
        impl Visitor<'_> for DocumentFieldVisitor {
            type Value = DocumentField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DocumentField, E> {
                Ok(DocumentField(match v {
                    "content" => 0,
                    "text" => 1,
                    "value" => 2,
                    _ => u8::MAX,
                }))
            }
        }
        deserializer.deserialize_identifier(DocumentFieldVisitor)
    }
}

struct MessagesVisitor<'h, H> {
    handler: &'h mut H,
    stopped: &'h mut bool,
}

impl<'de, H: MessageHandler> Visitor<'de> for MessagesVisitor<'_, H> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of chat messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(flow) = seq.next_element_seed(MessageSeed {
            handler: &mut *self.handler,
        })? {
            if flow == Flow::Stop {
                *self.stopped = true;
                return Ok(());
            }
        }
        Ok(())
    }
}

struct MessageSeed<'h, H> {
    handler: &'h mut H,
}

impl<'de, H: MessageHandler> DeserializeSeed<'de> for MessageSeed<'_, H> {
    type Value = Flow;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Flow, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, H: MessageHandler> Visitor<'de> for MessageSeed<'_, H> {
    type Value = Flow;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a chat message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Flow, A::Error> {
        let handler = self.handler;
        let mut role = None;
        let mut pending: Option<String> = None;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Role => role = Some(map.next_value::<RoleValue>()?.0),
                Field::Content if handler.wants(role) => {
                    map.next_value_seed(TextSeed {
                        sink: &mut |text: &str| handler.text(text),
                        level: Level::Content,
                    })?;
                }
                Field::Content if role.is_none() => {
                    let buf = pending.get_or_insert_with(String::new);
                    map.next_value_seed(TextSeed {
                        sink: &mut |text: &str| buf.push_str(text),
                        level: Level::Content,
                    })?;
                }
                Field::Content | Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if let (Some(text), Some(_)) = (pending, role) {
            if handler.wants(role) {
                handler.text(&text);
            }
        }
        Ok(handler.end_message(role))
    }
}

/// A message field name, classified without allocating.
enum Field {
    Role,
    Content,
    Other,
}

impl<'de> de::Deserialize<'de> for Field {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                Ok(match v {
                    "role" => Field::Role,
                    "content" => Field::Content,
                    _ => Field::Other,
                })
            }
        }
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

/// A role value, classified without allocating; `null` counts as other.
struct RoleValue(Role);

impl<'de> de::Deserialize<'de> for RoleValue {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RoleVisitor;
        impl Visitor<'_> for RoleVisitor {
            type Value = RoleValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a role string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RoleValue, E> {
                Ok(RoleValue(match v {
                    "system" | "developer" => Role::System,
                    "user" => Role::User,
                    _ => Role::Other,
                }))
            }
            fn visit_unit<E: de::Error>(self) -> Result<RoleValue, E> {
                Ok(RoleValue(Role::Other))
            }
        }
        deserializer.deserialize_any(RoleVisitor)
    }
}

/// Where in a content value the text visitor is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// `content` itself: a string, or an array of parts.
    Content,
    /// One element of a parts array: an object with `text`, or a string.
    Part,
    /// The `text` of a part: only a string counts.
    Leaf,
}

/// Feeds every text of a content value to `sink` and skips anything else
/// (images, audio, numbers, nulls, unexpected nesting) without failing.
struct TextSeed<'s> {
    sink: &'s mut dyn FnMut(&str),
    level: Level,
}

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TextSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("message content")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        (self.sink)(v);
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.level == Level::Content {
            while seq
                .next_element_seed(TextSeed {
                    sink: &mut *self.sink,
                    level: Level::Part,
                })?
                .is_some()
            {}
        } else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<PartField>()? {
            if self.level == Level::Part && key.0 {
                map.next_value_seed(TextSeed {
                    sink: &mut *self.sink,
                    level: Level::Leaf,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// Whether a part's field is `text`.
struct PartField(bool);

impl<'de> de::Deserialize<'de> for PartField {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PartFieldVisitor;
        impl Visitor<'_> for PartFieldVisitor {
            type Value = PartField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PartField, E> {
                Ok(PartField(v == "text"))
            }
        }
        deserializer.deserialize_identifier(PartFieldVisitor)
    }
}

struct PromptVisitor<'s> {
    sink: &'s mut dyn FnMut(&str),
    stopped: &'s mut bool,
}

impl<'de> Visitor<'de> for PromptVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt string or array")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        (self.sink)(v);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // Only the first prompt of a batch matters (and the rest may be long).
        seq.next_element_seed(TextSeed {
            sink: self.sink,
            level: Level::Leaf,
        })?;
        *self.stopped = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what a handler sees, asking for every role.
    #[derive(Default)]
    struct Recorder {
        events: Vec<String>,
        stop_after: Option<usize>,
        buffer_unknown_role: bool,
    }

    impl MessageHandler for Recorder {
        fn wants(&mut self, role: Option<Role>) -> bool {
            self.events.push(format!("wants {role:?}"));
            !(self.buffer_unknown_role && role.is_none())
        }
        fn text(&mut self, text: &str) {
            self.events.push(format!("text {text}"));
        }
        fn end_message(&mut self, role: Option<Role>) -> Flow {
            self.events.push(format!("end {role:?}"));
            let ended = self.events.iter().filter(|e| e.starts_with("end")).count();
            if Some(ended) == self.stop_after {
                Flow::Stop
            } else {
                Flow::Continue
            }
        }
    }

    fn raw(json: &str) -> RawJson<'static> {
        RawJson::new(Box::leak(json.to_owned().into_boxed_str()))
    }

    #[test]
    fn streams_string_and_parts_content() {
        let messages = raw(r#"[
            {"role":"system","content":"be \"brief\""},
            {"role":"user","name":"x","content":[
                {"type":"text","text":"a"},
                {"type":"image_url","image_url":{"url":"data:..."}},
                "b",
                {"type":"text","text":{"nested":1}},
                {"text":"c","type":"input_text"}
            ]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"1"}]},
            {"role":"developer","content":7}
        ]"#);
        let mut rec = Recorder::default();
        assert!(walk_messages(messages, &mut rec));
        assert_eq!(
            rec.events,
            [
                "wants Some(System)",
                "text be \"brief\"",
                "end Some(System)",
                "wants Some(User)",
                "text a",
                "text b",
                "text c",
                "end Some(User)",
                "wants Some(Other)",
                "end Some(Other)",
                "wants Some(System)",
                "end Some(System)",
            ]
        );
    }

    #[test]
    fn content_before_role_is_buffered_until_the_role_is_known() {
        let messages = raw(r#"[{"content":["x","y"],"role":"system"},{"content":"z"}]"#);
        let mut rec = Recorder {
            buffer_unknown_role: true,
            ..Recorder::default()
        };
        assert!(walk_messages(messages, &mut rec));
        assert_eq!(
            rec.events,
            [
                "wants None",
                "wants Some(System)",
                "text xy",
                "end Some(System)",
                "wants None",
                "end None",
            ]
        );
    }

    #[test]
    fn stops_early_without_reading_the_rest() {
        // The third element is not a message; stopping before it succeeds.
        let messages = raw(r#"[{"role":"user","content":"a"},{"role":"user","content":"b"},42]"#);
        let mut rec = Recorder {
            stop_after: Some(2),
            ..Recorder::default()
        };
        assert!(walk_messages(messages, &mut rec));
        let mut rec = Recorder::default();
        assert!(!walk_messages(messages, &mut rec));
    }

    #[test]
    fn rejects_non_arrays_and_bad_elements_without_panicking() {
        for json in [
            r#"{"role":"user"}"#,
            r#""hello""#,
            "null",
            "[null]",
            r#"[{"role":5,"content":"x"}]"#,
            r#"[{"role":"user","content":"x"}, "y"]"#,
        ] {
            let mut rec = Recorder::default();
            assert!(!walk_messages(raw(json), &mut rec), "{json}");
        }
        let mut rec = Recorder::default();
        assert!(walk_messages(raw("[]"), &mut rec));
        assert!(rec.events.is_empty());
        // Deeply nested content is skipped, not followed.
        let deep = format!(
            r#"[{{"role":"user","content":[{}]}}]"#,
            "[".repeat(300) + &"]".repeat(300)
        );
        let mut rec = Recorder::default();
        assert!(walk_messages(raw(&deep), &mut rec));
        assert_eq!(rec.events, ["wants Some(User)", "end Some(User)"]);
    }

    #[test]
    fn prompt_string_array_and_tokens() {
        let mut seen = Vec::new();
        let mut sink = |t: &str| seen.push(t.to_owned());
        assert!(walk_prompt(raw(r#""once upon""#), &mut sink));
        assert!(walk_prompt(raw(r#"["first","second"]"#), &mut sink));
        assert!(walk_prompt(raw("[1,2,3]"), &mut sink));
        assert!(walk_prompt(raw("[[1,2],[3]]"), &mut sink));
        assert!(walk_prompt(raw("[]"), &mut sink));
        assert!(!walk_prompt(raw("{}"), &mut sink));
        assert!(!walk_prompt(raw("12"), &mut sink));
        assert_eq!(seen, ["once upon", "first"]);
    }

    #[test]
    fn first_document_prefers_content_then_text_then_value() {
        let doc = |json: &str| first_document(raw(json)).map(Cow::into_owned);
        assert_eq!(
            doc(r#"[{"value":"v","text":"t","content":"c"}]"#).as_deref(),
            Some("c")
        );
        assert_eq!(
            doc(r#"[{"value":"v","text":"t"}, {"content":"second"}]"#).as_deref(),
            Some("t")
        );
        assert_eq!(doc(r#"[{"value":"v","content":5}]"#).as_deref(), Some("v"));
        assert_eq!(
            doc(r#"[{"content":{"text":"nested"},"value":"v"}]"#).as_deref(),
            Some("v")
        );
        assert_eq!(doc(r#"["plain", 1]"#).as_deref(), Some("plain"));
        assert_eq!(doc(r#"[{"content":"a\nb"}]"#).as_deref(), Some("a\nb"));
        for none in [
            "[]",
            "{}",
            r#""x""#,
            "[1]",
            "[null]",
            r#"[{"id":1}]"#,
            "[[\"x\"]]",
        ] {
            assert_eq!(doc(none), None, "{none}");
        }
        // No copy without escapes.
        let owner = raw(r#"[{"content":"borrowed"}]"#);
        assert!(matches!(
            first_document(owner),
            Some(Cow::Borrowed("borrowed"))
        ));
    }
}
