//! Usage headers of completions, as the original gateway sends them:
//! `X-Flexinfer-Upstream-Ms` on every completion answer, and, with
//! `--usage-headers`, `X-Flexinfer-Prompt-Tokens`,
//! `X-Flexinfer-Finish-Reason` and `X-Flexinfer-Cached-Tokens` on
//! non-streamed ones. Those need the answer's body before its head goes
//! out, so such requests take the subrequest path and their successful
//! JSON answer is held back whole, then relayed byte-identical with the
//! headers added.

use std::time::Instant;

use bytes::BytesMut;
use http::header;
use pingora_core::protocols::http::HttpTask;
use serde::Deserialize;

use super::failover::Relayed;

/// Milliseconds from the request's arrival to the engine's response head.
pub(super) const UPSTREAM_MS: &str = "x-flexinfer-upstream-ms";
/// `usage.prompt_tokens` of the answer.
pub(super) const PROMPT_TOKENS: &str = "x-flexinfer-prompt-tokens";
/// `choices[0].finish_reason`, when not empty.
pub(super) const FINISH_REASON: &str = "x-flexinfer-finish-reason";
/// `usage.prompt_tokens_details.cached_tokens`, only when the engine reports it.
pub(super) const CACHED_TOKENS: &str = "x-flexinfer-cached-tokens";

/// Largest answer held back for its headers; a larger one (or one without
/// a Content-Length) is relayed as it comes, without them.
const MAX_HELD_BYTES: u64 = 4 * 1024 * 1024;

/// Holds a successful JSON answer back until all of it has arrived.
#[derive(Default)]
pub(super) struct UsageHold {
    holding: bool,
    seen: Relayed,
    tasks: Vec<HttpTask>,
}

impl UsageHold {
    /// `task` when it is to be relayed now; `None` when the hold keeps it.
    pub(super) fn pass(hold: &mut Option<UsageHold>, task: HttpTask) -> Option<HttpTask> {
        let Some(hold) = hold.as_mut().filter(|h| h.holding || h.starts(&task)) else {
            return Some(task);
        };
        hold.holding = true;
        hold.seen.observe(&task, Instant::now());
        hold.tasks.push(task);
        None
    }

    /// Whether a whole answer is held.
    pub(super) fn complete(&self) -> bool {
        self.holding && self.seen.complete
    }

    /// Whether `task` starts an answer to hold back: a successful JSON
    /// head with a body of a known, bounded length.
    fn starts(&self, task: &HttpTask) -> bool {
        let HttpTask::Header(head, end) = task else {
            return false;
        };
        let headers = &head.headers;
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(crate::extract::is_json_media_type);
        let bounded = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n <= MAX_HELD_BYTES);
        head.status.is_success() && json && bounded && !*end
    }

    /// The held answer with its headers added, once all of it arrived;
    /// `None` when nothing is held or the answer broke off (the client then
    /// gets an error instead of a cut answer).
    pub(super) fn release(self) -> Option<Vec<HttpTask>> {
        if !self.complete() {
            return None;
        }
        let mut tasks = self.tasks;
        let mut body = BytesMut::new();
        for task in &tasks {
            if let HttpTask::Body(Some(chunk), _) = task {
                body.extend_from_slice(chunk);
            }
        }
        let found = read_usage(&body);
        if let Some(HttpTask::Header(head, _)) = tasks.first_mut() {
            for (name, value) in found {
                // A value that is no header value (never from a number) is skipped.
                let _ = head.insert_header(name, value);
            }
        }
        Some(tasks)
    }
}

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    finish_reason: Option<String>,
}

/// The usage headers a completion body yields (none when it is not one).
fn read_usage(body: &[u8]) -> Vec<(&'static str, String)> {
    let Ok(completion) = serde_json::from_slice::<Completion>(body) else {
        return Vec::new();
    };
    let mut found = Vec::with_capacity(3);
    let usage = completion.usage.as_ref();
    if let Some(n) = usage.and_then(|u| u.prompt_tokens) {
        found.push((PROMPT_TOKENS, n.to_string()));
    }
    if let Some(reason) = completion
        .choices
        .first()
        .and_then(|c| c.finish_reason.as_deref())
        .filter(|r| !r.is_empty())
    {
        found.push((FINISH_REASON, reason.to_owned()));
    }
    let cached = usage
        .and_then(|u| u.prompt_tokens_details.as_ref())
        .and_then(|d| d.cached_tokens);
    if let Some(n) = cached {
        // An explicit 0 is reported; an absent field means no header.
        found.push((CACHED_TOKENS, n.to_string()));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use pingora_http::ResponseHeader;

    fn head(status: u16, content_type: &str, len: usize) -> HttpTask {
        let mut h = ResponseHeader::build(status, None).unwrap();
        h.insert_header(header::CONTENT_TYPE, content_type).unwrap();
        h.insert_header(header::CONTENT_LENGTH, len.to_string())
            .unwrap();
        HttpTask::Header(Box::new(h), false)
    }

    fn held(status: u16, content_type: &str, body: &'static [u8]) -> Option<Vec<HttpTask>> {
        let mut hold = Some(UsageHold::default());
        let mut passed = 0;
        let half = body.len() / 2;
        for task in [
            head(status, content_type, body.len()),
            HttpTask::Body(Some(Bytes::from_static(&body[..half])), false),
            HttpTask::Body(Some(Bytes::from_static(&body[half..])), true),
        ] {
            passed += usize::from(UsageHold::pass(&mut hold, task).is_some());
        }
        let released = hold.unwrap().release();
        assert_eq!(passed == 0, released.is_some(), "held whole or not at all");
        released
    }

    fn header_of(tasks: &[HttpTask], name: &str) -> Option<String> {
        match &tasks[0] {
            HttpTask::Header(h, _) => h.headers.get(name).map(|v| v.to_str().unwrap().to_owned()),
            _ => panic!("the head comes first"),
        }
    }

    #[test]
    fn a_completion_gets_its_usage_headers_and_its_body_untouched() {
        let body: &[u8] = br#"{"choices":[{"index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}"#;
        let tasks = held(200, "application/json", body).unwrap();
        assert_eq!(header_of(&tasks, PROMPT_TOKENS).as_deref(), Some("12"));
        assert_eq!(header_of(&tasks, FINISH_REASON).as_deref(), Some("length"));
        assert_eq!(header_of(&tasks, CACHED_TOKENS).as_deref(), Some("0"));
        let relayed: Vec<u8> = tasks
            .iter()
            .filter_map(|t| match t {
                HttpTask::Body(Some(b), _) => Some(b.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(relayed, body);
    }

    #[test]
    fn cached_tokens_only_when_reported() {
        let body: &[u8] = br#"{"choices":[{"finish_reason":""}],"usage":{"prompt_tokens":5}}"#;
        let tasks = held(200, "application/json; charset=utf-8", body).unwrap();
        assert_eq!(header_of(&tasks, PROMPT_TOKENS).as_deref(), Some("5"));
        assert_eq!(header_of(&tasks, FINISH_REASON), None, "empty reason");
        assert_eq!(header_of(&tasks, CACHED_TOKENS), None);
    }

    #[test]
    fn errors_and_other_answers_pass_as_they_come() {
        assert!(held(400, "application/json", br#"{"error":{}}"#).is_none());
        assert!(held(200, "text/plain", b"hello").is_none());
        // Not a completion: held (JSON), relayed without headers.
        let tasks = held(200, "application/json", b"[1,2]").unwrap();
        assert_eq!(header_of(&tasks, PROMPT_TOKENS), None);
    }

    #[test]
    fn an_answer_cut_short_is_not_released() {
        let mut hold = Some(UsageHold::default());
        assert!(UsageHold::pass(&mut hold, head(200, "application/json", 100)).is_none());
        let chunk = HttpTask::Body(Some(Bytes::from_static(b"{\"usage\"")), false);
        assert!(UsageHold::pass(&mut hold, chunk).is_none());
        assert!(hold.unwrap().release().is_none());
    }
}
