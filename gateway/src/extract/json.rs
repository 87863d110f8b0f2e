//! A borrowed view of the JSON body fields the gateway routes on.
//!
//! The body is walked member by member at the top level only: the members
//! routing reads are decoded, every other value (the `messages` of a 1 MiB
//! chat, say) is skipped by its brackets and strings at vector speed
//! without being parsed. What the gateway does not read it does not
//! validate either: a misspelt number deep in `messages` reaches the engine,
//! which answers it as it would without a gateway. The whole body must
//! still be UTF-8 and a single JSON object, so framing errors are caught
//! here, with their line and column.

use std::borrow::Cow;
use std::ops::Range;

use flexinfer_jsonscan::{self as scan, ScanError};

use super::validate_model_name;
use crate::errors::ApiError;
use crate::rewrite::ModelSlot;

/// The text of a JSON value as it appears in the body; checked only for
/// balanced brackets and closed strings, so its readers must parse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(&'a str);

impl<'a> RawJson<'a> {
    /// Wraps JSON text.
    pub fn new(text: &'a str) -> Self {
        RawJson(text)
    }

    /// The JSON text.
    pub fn get(&self) -> &'a str {
        self.0
    }
}

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
    pub messages: Option<RawJson<'a>>,
    /// `prompt`, raw.
    pub prompt: Option<RawJson<'a>>,
    /// `document_context`, else `documentContext`, else `context`, when a string.
    pub document_context: Option<Cow<'a, str>>,
    /// `documents`, raw.
    pub documents: Option<RawJson<'a>>,
    /// `input` (Responses and embeddings API), raw.
    pub input: Option<RawJson<'a>>,
    /// `stream_options`, raw.
    pub stream_options: Option<RawJson<'a>>,
    /// `previous_response_id` (Responses API), raw.
    pub previous_response_id: Option<RawJson<'a>>,
    /// `conversation` (Responses API), raw.
    pub conversation: Option<RawJson<'a>>,
    /// Where the top-level `cache_salt` value is in the body.
    pub cache_salt: Option<Range<usize>>,
    /// `system` (Anthropic Messages), raw.
    pub system: Option<RawJson<'a>>,
    /// `instructions` (Responses API), raw.
    pub instructions: Option<RawJson<'a>>,
    /// `tools`, raw: engines put their definitions in the prompt.
    pub tools: Option<RawJson<'a>>,
    /// Sequences generated per prompt: the larger of `n` and `best_of`,
    /// when either is a plain integer.
    pub sequences: Option<u64>,
    /// Where the top-level `stream_options` value is in the body.
    pub stream_options_at: Option<Range<usize>>,
    /// Offset of the body's opening `{`.
    pub open_brace: usize,
    /// The output-token limit: `max_completion_tokens`, else `max_tokens`,
    /// else `max_output_tokens` (each validated when present).
    pub output_limit: Option<OutputLimit>,
    /// Where the top-level `model` value is in the body, or where one
    /// would go: what the rewrite splices at.
    pub model_slot: Option<ModelSlot>,
}

/// Parses a JSON request body into a [`JsonView`].
///
/// Errors are 400s a client can act on: a body that is not UTF-8, not a
/// single JSON object, or whose object structure breaks (with the line and
/// column), and an `invalid_field_value` on `model` when it is not a
/// string, appears twice at the top level (the gateway and the backend
/// could then read different values), or fails [`validate_model_name`].
/// The values of other members are not validated (see the module docs).
pub fn parse_json(body: &[u8]) -> Result<JsonView<'_>, ApiError> {
    let open_brace = scan::skip_ws(body, 0);
    match body.get(open_brace) {
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
    // The body is forwarded as it is, so all of it must be valid.
    let text = utf8(body)?;
    let mut raw = RawFields::default();
    let end = scan::object_members(body, open_brace, |key, at| raw.member(body, key, at))
        .map_err(|e| invalid_json(body, &e))?;
    let trailing = scan::skip_ws(body, end);
    if trailing < body.len() {
        return Err(invalid_json_at(body, "trailing characters", trailing));
    }
    let slot = match raw.model.clone() {
        Some(span) => ModelSlot::Value(span),
        None => ModelSlot::Absent {
            open_brace,
            empty: body.get(scan::skip_ws(body, open_brace + 1)) == Some(&b'}'),
        },
    };
    let mut view = raw.into_view(text)?;
    view.model_slot = Some(slot);
    view.open_brace = open_brace;
    Ok(view)
}

/// The body as text, or a 400 naming the first invalid byte.
fn utf8(body: &[u8]) -> Result<&str, ApiError> {
    match simdutf8::basic::from_utf8(body) {
        Ok(text) => Ok(text),
        Err(_) => {
            let at = std::str::from_utf8(body).map_or_else(|e| e.valid_up_to(), |_| 0);
            Err(ApiError::bad_request(format!(
                "Invalid JSON body: invalid UTF-8 at byte {at}"
            )))
        }
    }
}

/// A 400 for a body whose structure broke where `e` says.
fn invalid_json(body: &[u8], e: &ScanError) -> ApiError {
    invalid_json_at(body, &format!("expected {}", e.expected), e.offset)
}

/// A 400 saying `what` at the line and column of byte `offset`.
fn invalid_json_at(body: &[u8], what: &str, offset: usize) -> ApiError {
    let before = body.get(..offset).unwrap_or(body);
    let line = 1 + memchr::memchr_iter(b'\n', before).count();
    let column = 1 + before.len() - memchr::memrchr(b'\n', before).map_or(0, |nl| nl + 1);
    ApiError::bad_request(format!(
        "Invalid JSON body: {what} at line {line} column {column}"
    ))
}

/// Top-level members routing reads, as byte spans of the body, before their
/// types are checked.
#[derive(Default)]
struct RawFields {
    model: Option<Range<usize>>,
    model_repeated: bool,
    stream: Option<Range<usize>>,
    session_id: Option<Range<usize>>,
    cache_key: Option<Range<usize>>,
    cache_key_camel: Option<Range<usize>>,
    prefix: Option<Range<usize>>,
    messages: Option<Range<usize>>,
    prompt: Option<Range<usize>>,
    document_context: Option<Range<usize>>,
    document_context_camel: Option<Range<usize>>,
    context: Option<Range<usize>>,
    documents: Option<Range<usize>>,
    input: Option<Range<usize>>,
    stream_options: Option<Range<usize>>,
    previous_response_id: Option<Range<usize>>,
    conversation: Option<Range<usize>>,
    cache_salt: Option<Range<usize>>,
    max_tokens: Option<Range<usize>>,
    max_completion_tokens: Option<Range<usize>>,
    max_output_tokens: Option<Range<usize>>,
    system: Option<Range<usize>>,
    instructions: Option<Range<usize>>,
    tools: Option<Range<usize>>,
    n: Option<Range<usize>>,
    best_of: Option<Range<usize>>,
}

impl RawFields {
    /// Records the member `key` whose value starts at `at`; returns where
    /// the value ends. Later duplicates win, as in most JSON parsers a
    /// backend would use, except for `model`: the first is kept (it is the
    /// one a rewrite replaces) and a second is an error.
    fn member(&mut self, body: &[u8], key: &[u8], at: usize) -> Result<usize, ScanError> {
        let end = scan::value_end(body, at)?;
        let key = if key.contains(&b'\\') {
            scan::decode_key(key).map_err(|e| scan::error(e.expected, at))?
        } else {
            // UTF-8 was checked for the whole body; a key that is not text
            // matches no field anyway.
            Cow::Borrowed(std::str::from_utf8(key).unwrap_or_default())
        };
        let slot = match key.as_ref() {
            "model" if self.model.is_some() => {
                self.model_repeated = true;
                return Ok(end);
            }
            "model" => &mut self.model,
            "stream" => &mut self.stream,
            "session_id" => &mut self.session_id,
            "cache_key" => &mut self.cache_key,
            "cacheKey" => &mut self.cache_key_camel,
            "prefix" => &mut self.prefix,
            "messages" => &mut self.messages,
            "prompt" => &mut self.prompt,
            "document_context" => &mut self.document_context,
            "documentContext" => &mut self.document_context_camel,
            "context" => &mut self.context,
            "documents" => &mut self.documents,
            "input" => &mut self.input,
            "stream_options" => &mut self.stream_options,
            "previous_response_id" => &mut self.previous_response_id,
            "conversation" => &mut self.conversation,
            "cache_salt" => &mut self.cache_salt,
            "max_tokens" => &mut self.max_tokens,
            "max_completion_tokens" => &mut self.max_completion_tokens,
            "max_output_tokens" => &mut self.max_output_tokens,
            "system" => &mut self.system,
            "instructions" => &mut self.instructions,
            "tools" => &mut self.tools,
            "n" => &mut self.n,
            "best_of" => &mut self.best_of,
            _ => return Ok(end),
        };
        *slot = Some(at..end);
        Ok(end)
    }

    fn into_view(self, text: &str) -> Result<JsonView<'_>, ApiError> {
        if self.model_repeated {
            return Err(ApiError::invalid_field(
                "model",
                "the top-level 'model' key must appear only once",
            ));
        }
        let string = |span: &Option<Range<usize>>| span.clone().and_then(|s| string_at(text, s));
        let raw = |span: Option<Range<usize>>| span.and_then(|s| text.get(s)).map(RawJson);
        let model = match &self.model {
            None => None,
            Some(span) if text.as_bytes().get(span.start) != Some(&b'"') => {
                return Err(ApiError::invalid_field("model", "must be a string"))
            }
            Some(span) => match scan::string_value(text.as_bytes(), span.start, span.end) {
                Err(e) => return Err(invalid_json(text.as_bytes(), &e)),
                Ok(m) if m.is_empty() => None,
                Ok(m) => {
                    validate_model_name(&m)?;
                    Some(m)
                }
            },
        };
        let limit = |field: &'static str,
                     span: &Option<Range<usize>>|
         -> Result<Option<OutputLimit>, ApiError> {
            let Some(span) = span.clone() else {
                return Ok(None);
            };
            let raw = text.get(span.clone()).unwrap_or_default();
            Ok(token_limit(field, raw)?.map(|value| OutputLimit { field, span, value }))
        };
        let output_limit = limit("max_completion_tokens", &self.max_completion_tokens)?
            .or(limit("max_tokens", &self.max_tokens)?)
            .or(limit("max_output_tokens", &self.max_output_tokens)?);
        Ok(JsonView {
            model,
            stream: match self.stream.and_then(|s| text.get(s)) {
                Some("true") => Some(true),
                Some("false") => Some(false),
                _ => None,
            },
            session_id: string(&self.session_id),
            cache_key: string(&self.cache_key).or_else(|| string(&self.cache_key_camel)),
            prefix: string(&self.prefix),
            messages: raw(self.messages),
            prompt: raw(self.prompt),
            document_context: string(&self.document_context)
                .or_else(|| string(&self.document_context_camel))
                .or_else(|| string(&self.context)),
            documents: raw(self.documents),
            input: raw(self.input),
            stream_options: raw(self.stream_options.clone()),
            previous_response_id: raw(self.previous_response_id),
            conversation: raw(self.conversation),
            cache_salt: self.cache_salt,
            system: raw(self.system),
            instructions: raw(self.instructions),
            tools: raw(self.tools),
            sequences: [self.n, self.best_of]
                .into_iter()
                .flatten()
                .filter_map(|s| text.get(s)?.parse::<u64>().ok())
                .max(),
            stream_options_at: self.stream_options.clone(),
            open_brace: 0,
            output_limit,
            model_slot: None,
        })
    }
}

/// The request's output-token limit and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLimit {
    /// The field that gives it.
    pub field: &'static str,
    /// Where its value is in the body.
    pub span: Range<usize>,
    /// The limit.
    pub value: u64,
}

/// Largest output-token limit accepted (the engines' 32-bit integers).
pub const MAX_TOKEN_LIMIT: u64 = i32::MAX as u64;

/// An output-token limit as written: `null` is no limit; otherwise an
/// integer from 1 to [`MAX_TOKEN_LIMIT`] (`16.0` counts as an integer, as
/// JSON numbers do), else a 400 naming `field`.
fn token_limit(field: &'static str, raw: &str) -> Result<Option<u64>, ApiError> {
    if raw == "null" {
        return Ok(None);
    }
    let bad = || {
        ApiError::invalid_field(
            field,
            format!(
                "must be an integer from 1 to {MAX_TOKEN_LIMIT}, not {}",
                shorten(raw)
            ),
        )
    };
    if let Ok(n) = raw.parse::<u64>() {
        return (1..=MAX_TOKEN_LIMIT)
            .contains(&n)
            .then_some(Some(n))
            .ok_or_else(bad);
    }
    match raw.parse::<f64>() {
        Ok(x) if x.fract() == 0.0 && x >= 1.0 && x <= MAX_TOKEN_LIMIT as f64 => Ok(Some(x as u64)),
        _ => Err(bad()),
    }
}

/// At most 40 characters of a value, for an error message.
fn shorten(raw: &str) -> String {
    match raw.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &raw[..at]),
        None => raw.to_owned(),
    }
}

/// The string at `span` of `text`, borrowed when it has no escapes; `None`
/// when the value is not a string or its escapes are invalid.
fn string_at(text: &str, span: Range<usize>) -> Option<Cow<'_, str>> {
    if text.as_bytes().get(span.start) != Some(&b'"') {
        return None;
    }
    scan::string_value(text.as_bytes(), span.start, span.end).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_token_limits_are_integers_in_range() {
        let view =
            |body: &str| parse_json(body.as_bytes()).map(|v| v.output_limit.map(|l| l.value));
        assert_eq!(view(r#"{"max_tokens":16}"#).unwrap(), Some(16));
        assert_eq!(view(r#"{"max_tokens":16.0}"#).unwrap(), Some(16));
        assert_eq!(view(r#"{"max_tokens":null}"#).unwrap(), None);
        assert_eq!(
            view(r#"{"max_tokens":8,"max_completion_tokens":4}"#).unwrap(),
            Some(4),
            "max_completion_tokens wins, as in OpenAI's API"
        );
        assert_eq!(view(r#"{"max_output_tokens":7}"#).unwrap(), Some(7));
        for (body, field) in [
            (r#"{"max_tokens":-1}"#, "max_tokens"),
            (r#"{"max_tokens":0}"#, "max_tokens"),
            (r#"{"max_tokens":1.5}"#, "max_tokens"),
            (r#"{"max_tokens":"12"}"#, "max_tokens"),
            (r#"{"max_tokens":1e300}"#, "max_tokens"),
            (
                r#"{"max_completion_tokens":99999999999999999999999}"#,
                "max_completion_tokens",
            ),
            (r#"{"max_output_tokens":true}"#, "max_output_tokens"),
        ] {
            let err = view(body).unwrap_err();
            assert_eq!(
                (err.status, err.param),
                (400, Some(field)),
                "{body}: {err:?}"
            );
        }
    }

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
