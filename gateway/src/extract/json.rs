//! A borrowed view of the JSON body fields the gateway routes on.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::validate_model_name;
use crate::errors::ApiError;

/// The fields of a JSON request body that routing needs, parsed once.
///
/// Strings borrow from the body unless they contain escapes; `messages`,
/// `prompt` and `documents` stay raw JSON for whoever needs them. Every other
/// field is skipped without being built. A routing hint of the wrong type
/// (say `"stream": "yes"`) reads as absent rather than failing the request;
/// only `model` is strict.
#[derive(Debug, Clone, Default)]
pub struct JsonView<'a> {
    /// Top-level `model`, validated; `None` when absent or the empty string.
    pub model: Option<Cow<'a, str>>,
    /// `stream`, when it is a boolean.
    pub stream: Option<bool>,
    /// `session_id`, when it is a string.
    pub session_id: Option<Cow<'a, str>>,
    /// `cache_key`, else `cacheKey`, when a string.
    pub cache_key: Option<Cow<'a, str>>,
    /// The legacy `prefix` routing hint, when a string.
    pub prefix: Option<Cow<'a, str>>,
    /// `messages`, raw.
    pub messages: Option<&'a RawValue>,
    /// `prompt`, raw.
    pub prompt: Option<&'a RawValue>,
    /// `document_context`, else `documentContext`, else `context`, when a string.
    pub document_context: Option<Cow<'a, str>>,
    /// `documents`, raw.
    pub documents: Option<&'a RawValue>,
}

/// Parses a JSON request body into a [`JsonView`].
///
/// Errors are 400s a client can act on: invalid JSON (with serde's line and
/// column) or invalid UTF-8 anywhere in the body, a body that is not a JSON
/// object, and an `invalid_field_value`
/// on `model` when it is not a string, appears twice at the top level (the
/// gateway and the backend could then read different values), or fails
/// [`validate_model_name`].
pub fn parse_json(body: &[u8]) -> Result<JsonView<'_>, ApiError> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => {
            return Err(ApiError::bad_request(
                "Invalid JSON body: the body is empty",
            ))
        }
        Some(b'{') => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "Invalid JSON body: expected a JSON object at the top level",
            ))
        }
    }
    // serde_json does not check the UTF-8 of strings it skips; the body is
    // forwarded as it is, so all of it must be valid.
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad_request(format!(
            "Invalid JSON body: invalid UTF-8 at byte {}",
            e.valid_up_to()
        ))
    })?;
    let raw: RawFields<'_> = serde_json::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("Invalid JSON body: {e}")))?;
    raw.into_view()
}

/// Top-level members as raw JSON, before their types are checked.
#[derive(Default)]
struct RawFields<'a> {
    model: Option<&'a RawValue>,
    model_repeated: bool,
    stream: Option<&'a RawValue>,
    session_id: Option<&'a RawValue>,
    cache_key: Option<&'a RawValue>,
    cache_key_camel: Option<&'a RawValue>,
    prefix: Option<&'a RawValue>,
    messages: Option<&'a RawValue>,
    prompt: Option<&'a RawValue>,
    document_context: Option<&'a RawValue>,
    document_context_camel: Option<&'a RawValue>,
    context: Option<&'a RawValue>,
    documents: Option<&'a RawValue>,
}

impl<'a> RawFields<'a> {
    fn into_view(self) -> Result<JsonView<'a>, ApiError> {
        if self.model_repeated {
            return Err(ApiError::invalid_field(
                "model",
                "the top-level 'model' key must appear only once",
            ));
        }
        let model = match self.model {
            None => None,
            Some(raw) => match raw_str(raw) {
                None => return Err(ApiError::invalid_field("model", "must be a string")),
                Some(m) if m.is_empty() => None,
                Some(m) => {
                    validate_model_name(&m)?;
                    Some(m)
                }
            },
        };
        Ok(JsonView {
            model,
            stream: self.stream.and_then(|r| match r.get().trim() {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            }),
            session_id: self.session_id.and_then(raw_str),
            cache_key: self
                .cache_key
                .and_then(raw_str)
                .or_else(|| self.cache_key_camel.and_then(raw_str)),
            prefix: self.prefix.and_then(raw_str),
            messages: self.messages,
            prompt: self.prompt,
            document_context: self
                .document_context
                .and_then(raw_str)
                .or_else(|| self.document_context_camel.and_then(raw_str))
                .or_else(|| self.context.and_then(raw_str)),
            documents: self.documents,
        })
    }
}

/// The string a raw JSON value holds, borrowed when it has no escapes;
/// `None` when the value is not a string.
fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get().trim();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(text).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// Top-level keys the view cares about.
enum Field {
    Model,
    Stream,
    SessionId,
    CacheKey,
    CacheKeyCamel,
    Prefix,
    Messages,
    Prompt,
    DocumentContext,
    DocumentContextCamel,
    Context,
    Documents,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldVisitor;

        impl Visitor<'_> for FieldVisitor {
            type Value = Field;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<Field, E> {
                Ok(match key {
                    "model" => Field::Model,
                    "stream" => Field::Stream,
                    "session_id" => Field::SessionId,
                    "cache_key" => Field::CacheKey,
                    "cacheKey" => Field::CacheKeyCamel,
                    "prefix" => Field::Prefix,
                    "messages" => Field::Messages,
                    "prompt" => Field::Prompt,
                    "document_context" => Field::DocumentContext,
                    "documentContext" => Field::DocumentContextCamel,
                    "context" => Field::Context,
                    "documents" => Field::Documents,
                    _ => Field::Other,
                })
            }
        }

        deserializer.deserialize_identifier(FieldVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawFields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for ObjectVisitor<'a> {
            type Value = RawFields<'a>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawFields<'a>, A::Error> {
                let mut out = RawFields::default();
                while let Some(key) = map.next_key::<Field>()? {
                    // Later duplicates win, as in most JSON parsers a backend
                    // would use; `model` duplicates are rejected instead.
                    let slot = match key {
                        Field::Model => {
                            out.model_repeated |= out.model.is_some();
                            &mut out.model
                        }
                        Field::Stream => &mut out.stream,
                        Field::SessionId => &mut out.session_id,
                        Field::CacheKey => &mut out.cache_key,
                        Field::CacheKeyCamel => &mut out.cache_key_camel,
                        Field::Prefix => &mut out.prefix,
                        Field::Messages => &mut out.messages,
                        Field::Prompt => &mut out.prompt,
                        Field::DocumentContext => &mut out.document_context,
                        Field::DocumentContextCamel => &mut out.document_context_camel,
                        Field::Context => &mut out.context,
                        Field::Documents => &mut out.documents,
                        Field::Other => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value::<&'de RawValue>()?);
                }
                Ok(out)
            }
        }

        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_routing_fields() {
        let body = br#"{"model":"llama","stream":true,"session_id":"s1","cacheKey":"ck",
            "prefix":"p","messages":[{"role":"user","content":"hi","model":"nested"}],
            "prompt":"x","documentContext":"doc","documents":[{"text":"t"}],"other":{"a":[1,2]}}"#;
        let v = parse_json(body).unwrap();
        assert_eq!(v.model.as_deref(), Some("llama"));
        assert!(matches!(v.model, Some(Cow::Borrowed(_))));
        assert_eq!(v.stream, Some(true));
        assert_eq!(v.session_id.as_deref(), Some("s1"));
        assert_eq!(v.cache_key.as_deref(), Some("ck"));
        assert_eq!(v.prefix.as_deref(), Some("p"));
        assert_eq!(
            v.messages.unwrap().get(),
            r#"[{"role":"user","content":"hi","model":"nested"}]"#
        );
        assert_eq!(v.prompt.unwrap().get(), r#""x""#);
        assert_eq!(v.document_context.as_deref(), Some("doc"));
        assert_eq!(v.documents.unwrap().get(), r#"[{"text":"t"}]"#);
    }

    #[test]
    fn snake_case_names_win_over_aliases_in_any_order() {
        let v = parse_json(
            br#"{"cacheKey":"camel","cache_key":"snake","context":"c","document_context":"d"}"#,
        )
        .unwrap();
        assert_eq!(v.cache_key.as_deref(), Some("snake"));
        assert_eq!(v.document_context.as_deref(), Some("d"));
        let v = parse_json(br#"{"context":"c","documentContext":"dc"}"#).unwrap();
        assert_eq!(v.document_context.as_deref(), Some("dc"));
        let v = parse_json(br#"{"context":"c"}"#).unwrap();
        assert_eq!(v.document_context.as_deref(), Some("c"));
    }

    #[test]
    fn escaped_strings_are_decoded() {
        let v = parse_json(br#"{"model":"a\"b\u00e9","m\u006fdel2":1}"#);
        // `a"b` is a legal name: quotes are not path tricks.
        assert_eq!(v.unwrap().model.as_deref(), Some("a\"bé"));
        let v = parse_json(br#"{"m\u006fdel":"escaped-key"}"#).unwrap();
        assert_eq!(v.model.as_deref(), Some("escaped-key"));
    }

    #[test]
    fn hints_of_the_wrong_type_read_as_absent() {
        let v = parse_json(
            br#"{"model":"m","stream":"yes","session_id":5,"cache_key":null,"prefix":[]}"#,
        )
        .unwrap();
        assert_eq!(v.stream, None);
        assert_eq!(v.session_id, None);
        assert_eq!(v.cache_key, None);
        assert_eq!(v.prefix, None);
        assert_eq!(
            parse_json(br#"{"stream":false}"#).unwrap().stream,
            Some(false)
        );
    }

    #[test]
    fn model_must_be_a_string() {
        for body in [
            &br#"{"model":1}"#[..],
            br#"{"model":null}"#,
            br#"{"model":["a"]}"#,
            br#"{"model":{"name":"a"}}"#,
        ] {
            let e = parse_json(body).unwrap_err();
            assert_eq!(
                (e.status, e.code, e.param),
                (400, "invalid_field_value", Some("model"))
            );
            assert_eq!(
                e.message,
                "Invalid value for field 'model': must be a string"
            );
        }
    }

    #[test]
    fn empty_model_reads_as_absent_and_duplicates_are_rejected() {
        assert_eq!(parse_json(br#"{"model":""}"#).unwrap().model, None);
        assert_eq!(parse_json(br#"{"a":{"model":"x"}}"#).unwrap().model, None);
        let e = parse_json(br#"{"model":"a","x":1,"model":"b"}"#).unwrap_err();
        assert_eq!(e.code, "invalid_field_value");
        let e = parse_json(br#"{"model":"a","m\u006fdel":"b"}"#).unwrap_err();
        assert_eq!(e.code, "invalid_field_value");
    }

    #[test]
    fn invalid_json_says_where() {
        let e = parse_json(b"{\"model\": \"a\",\n  \"x\": }").unwrap_err();
        assert_eq!(
            (e.status, e.kind, e.code),
            (400, "invalid_request_error", "invalid_request_error")
        );
        assert!(
            e.message.starts_with("Invalid JSON body: "),
            "{}",
            e.message
        );
        assert!(e.message.contains("line 2 column"), "{}", e.message);

        let e = parse_json(br#"{"model":"a"} trailing"#).unwrap_err();
        assert!(e.message.contains("trailing characters"), "{}", e.message);
        let e = parse_json(b"{\"model\":\"\xff\"}").unwrap_err();
        assert_eq!(e.code, "invalid_request_error");
        // Even in a field the view skips.
        let e = parse_json(b"{\"model\":\"m\",\"other\":\"ok \xc3\"}").unwrap_err();
        assert_eq!(e.message, "Invalid JSON body: invalid UTF-8 at byte 25");
    }

    #[test]
    fn top_level_must_be_an_object() {
        for body in [
            &b"[]"[..],
            b"\"model\"",
            b"1",
            b"null",
            b"  [{\"model\":\"a\"}]",
        ] {
            let e = parse_json(body).unwrap_err();
            assert_eq!(
                e.message,
                "Invalid JSON body: expected a JSON object at the top level"
            );
        }
        for body in [&b""[..], b" \n\t"] {
            assert_eq!(
                parse_json(body).unwrap_err().message,
                "Invalid JSON body: the body is empty"
            );
        }
    }

    #[test]
    fn invalid_model_names_are_rejected() {
        let e = parse_json(br#"{"model":"../etc"}"#).unwrap_err();
        assert_eq!((e.code, e.param), ("invalid_field_value", Some("model")));
    }
}
