//! The token usage an answer reports, in the three shapes engines answer
//! in, and where each puts it:
//! - chat and completions: `usage` with `prompt_tokens`,
//!   `completion_tokens` and `prompt_tokens_details.cached_tokens`, at the
//!   top of a JSON answer or of a stream's final chunk;
//! - the Responses API: `usage` with `input_tokens` (cached ones
//!   included), `output_tokens` and `input_tokens_details.cached_tokens`,
//!   at the top of a JSON answer and in the `response` of a stream's
//!   `response.completed` (or `.incomplete`, `.failed`) event;
//! - Anthropic Messages: `usage` with `input_tokens` (the cache's tokens
//!   not included), `cache_read_input_tokens`,
//!   `cache_creation_input_tokens` and `output_tokens`, at the top of a
//!   JSON answer; a stream reports it in pieces, in the `message` of
//!   `message_start` and at the top of `message_delta`, each later value
//!   replacing an earlier one.

use flexinfer_jsonscan as scan;
use serde::Deserialize;

use super::Usage;

/// The usage fields seen so far; a later report replaces what it names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Reported {
    prompt: Option<u64>,
    completion: Option<u64>,
    cached: Option<u64>,
    cache_written: Option<u64>,
    /// Anthropic's count: `prompt` leaves out the cache's tokens.
    prompt_without_cache: bool,
}

#[derive(Deserialize)]
struct Raw {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<Details>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<Details>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
}

impl Reported {
    /// Takes in one `usage` object's fields.
    fn merge(&mut self, raw: Raw) {
        let anthropic =
            raw.cache_read_input_tokens.is_some() || raw.cache_creation_input_tokens.is_some();
        let replace = |slot: &mut Option<u64>, new: Option<u64>| {
            if new.is_some() {
                *slot = new;
            }
        };
        replace(&mut self.prompt, raw.prompt_tokens.or(raw.input_tokens));
        replace(
            &mut self.completion,
            raw.completion_tokens.or(raw.output_tokens),
        );
        let details = raw.prompt_tokens_details.or(raw.input_tokens_details);
        replace(
            &mut self.cached,
            raw.cache_read_input_tokens
                .or(details.and_then(|d| d.cached_tokens)),
        );
        replace(&mut self.cache_written, raw.cache_creation_input_tokens);
        self.prompt_without_cache |= anthropic;
    }

    /// Reads the usage a JSON answer or one stream event carries, if any,
    /// into what was seen before.
    pub(super) fn read(&mut self, json: &[u8]) -> bool {
        let Some(raw) = locate(json).and_then(|span| serde_json::from_slice(&json[span]).ok())
        else {
            return false;
        };
        self.merge(raw);
        true
    }

    /// The usage, once a prompt or output count has been reported.
    pub(super) fn usage(&self) -> Option<Usage> {
        if self.prompt.is_none() && self.completion.is_none() {
            return None;
        }
        let cached = self.cached;
        let mut prompt = self.prompt.unwrap_or(0);
        if self.prompt_without_cache {
            prompt += cached.unwrap_or(0) + self.cache_written.unwrap_or(0);
        }
        Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: self.completion.unwrap_or(0),
            cached_tokens: cached,
        })
    }
}

/// The span of the `usage` object of `json`: a top-level member, else one
/// of its `response` (Responses events) or `message` (Anthropic's
/// `message_start`) object.
fn locate(json: &[u8]) -> Option<std::ops::Range<usize>> {
    let open = scan::skip_ws(json, 0);
    let (mut top, mut nested) = (None, None);
    scan::object_members(json, open, |key, at| {
        let end = scan::value_end(json, at)?;
        match key {
            b"usage" => top = Some(at..end),
            b"response" | b"message" if json[at] == b'{' => {
                let _ = scan::object_members(json, at, |key, at| {
                    let end = scan::value_end(json, at)?;
                    if key == b"usage" {
                        nested = Some(at..end);
                    }
                    Ok(end)
                });
            }
            _ => {}
        }
        Ok(end)
    })
    .ok()?;
    let is_object = |span: &std::ops::Range<usize>| json[span.start] == b'{';
    top.filter(is_object).or(nested.filter(is_object))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_of(events: &[&str]) -> Option<Usage> {
        let mut seen = Reported::default();
        for e in events {
            seen.read(e.as_bytes());
        }
        seen.usage()
    }

    #[test]
    fn reads_each_apis_shape() {
        let chat = r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":8}}}"#;
        assert_eq!(
            usage_of(&[chat]),
            Some(Usage {
                prompt_tokens: 12,
                completion_tokens: 5,
                cached_tokens: Some(8)
            })
        );
        let responses = r#"{"object":"response","usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":16},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":37}}"#;
        assert_eq!(
            usage_of(&[responses]),
            Some(Usage {
                prompt_tokens: 30,
                completion_tokens: 7,
                cached_tokens: Some(16)
            })
        );
        // Anthropic counts the cache's tokens apart from input_tokens.
        let messages = r#"{"type":"message","content":[],"usage":{"input_tokens":10,"cache_read_input_tokens":20,"cache_creation_input_tokens":4,"output_tokens":6}}"#;
        assert_eq!(
            usage_of(&[messages]),
            Some(Usage {
                prompt_tokens: 34,
                completion_tokens: 6,
                cached_tokens: Some(20)
            })
        );
    }

    #[test]
    fn streams_report_it_nested_or_in_pieces() {
        let responses = [
            r#"{"type":"response.created","response":{"id":"r","usage":null}}"#,
            r#"{"type":"response.output_text.delta","delta":"usage"}"#,
            r#"{"type":"response.completed","response":{"id":"r","output":[{"usage":1}],"usage":{"input_tokens":9,"output_tokens":3}}}"#,
        ];
        assert_eq!(
            usage_of(&responses).map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((9, 3))
        );
        let messages = [
            r#"{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":25,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}"#,
        ];
        assert_eq!(
            usage_of(&messages).map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((25, 15))
        );
    }

    #[test]
    fn nothing_reported_is_none() {
        assert_eq!(usage_of(&[r#"{"usage":null}"#]), None);
        assert_eq!(usage_of(&[r#"{"usage":{}}"#]), None);
        assert_eq!(usage_of(&[r#"{"message":{"usage":"x"}}"#]), None);
        assert_eq!(usage_of(&[r#"not json"#, r#"[1,2]"#]), None);
    }
}
