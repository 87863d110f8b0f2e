//! One resumable stream as it passes: only whole events reach the client
//! (an event cut by a failing engine is never half sent), each is read into
//! the [`Transcript`], and after a resume the new engine's events are made
//! those of the first answer.

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::Value;

use super::transcript::{ChunkView, Transcript, UsageView};
use super::{continuation_body, Api};

/// Longest event held back while it is incomplete; beyond it the bytes
/// pass as they come and the stream is no longer resumed.
const MAX_EVENT: usize = 1 << 20;

/// Longest answer text kept to be continued; a longer answer is not resumed.
const MAX_TEXT: usize = 4 << 20;

/// The engine reported an error in the middle of its stream (vLLM's
/// `data: {"error": …}`): the stream is to be resumed or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamFault;

/// What the next engine is asked, once the current one failed.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// The body that continues the answer.
    Continue(Bytes),
    /// The answer had finished: only its end is missing.
    Close(Bytes),
    /// It cannot be continued, and why.
    Fail(&'static str),
}

/// The state of one resumable stream.
pub struct StreamResume {
    api: Api,
    transcript: Transcript,
    /// The start of an event not yet whole, held back.
    pending: Vec<u8>,
    /// Events read and not yet sent: those before an engine's error event,
    /// sent ahead of the next engine's.
    carry: Vec<u8>,
    /// The request as first sent upstream, once a resume needs it.
    original: Option<Bytes>,
    /// Tokens streamed by each engine that failed, in order.
    failed: Vec<u64>,
    /// Tokens streamed before the current engine started.
    tokens_before: u64,
    /// The current engine answered with an event stream.
    live: bool,
    /// Bytes passed that did not end an event (an event over the limit).
    open_tail: bool,
    /// What the last engine's error event said.
    engine_error: Option<String>,
}

impl StreamResume {
    /// A stream of `api`, before its first chunk.
    pub fn new(api: Api) -> Self {
        Self {
            api,
            transcript: Transcript::default(),
            pending: Vec::new(),
            carry: Vec::new(),
            original: None,
            failed: Vec::new(),
            tokens_before: 0,
            live: false,
            open_tail: false,
            engine_error: None,
        }
    }

    /// Forgets everything read: nothing of it reached the client (an
    /// engine failed in its first read, before the head went out), so the
    /// request is sent again as it was.
    pub fn restart(&mut self) {
        *self = Self::new(self.api);
    }

    /// What the last engine's error event said, if one came.
    pub fn engine_error(&self) -> Option<&str> {
        self.engine_error.as_deref()
    }

    /// Whether what was passed ends mid-event: an event written after it
    /// needs a blank line first.
    pub fn open_tail(&self) -> bool {
        self.open_tail
    }

    /// An engine's answer begins: `live` when it is a successful event
    /// stream, which is read and spliced.
    pub fn begin(&mut self, live: bool) {
        self.live = live;
        self.pending.clear();
    }

    /// Whether the current engine's answer is a stream being read.
    pub fn live(&self) -> bool {
        self.live
    }

    /// The answer as far as the client has it.
    pub fn transcript(&self) -> &Transcript {
        &self.transcript
    }

    /// Times the stream was resumed.
    pub fn resumes(&self) -> usize {
        self.failed.len()
    }

    /// Events held for the client that no engine will follow now: sent
    /// before the error event that ends the stream.
    pub fn take_carry(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.carry)
    }

    /// Passes one chunk of the answer: whole events only, rewritten after
    /// a resume. An engine's error event is a [`StreamFault`].
    pub fn filter(&mut self, body: &mut Option<Bytes>, end: bool) -> Result<(), StreamFault> {
        let chunk = body.take().unwrap_or_default();
        let whole: Cow<'_, [u8]> = if self.pending.is_empty() {
            Cow::Borrowed(&chunk)
        } else {
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(&chunk);
            Cow::Owned(joined)
        };
        let mut at = 0;
        let mut out = std::mem::take(&mut self.carry);
        let mut unchanged = out.is_empty() && matches!(whole, Cow::Borrowed(_));
        while let Some(len) = event_len(&whole[at..]) {
            let event = &whole[at..at + len];
            at += len;
            match self.pass(event) {
                Ok(Pass::AsIs) => out.extend_from_slice(event),
                Ok(Pass::Rewritten(new)) => {
                    out.extend_from_slice(&new);
                    unchanged = false;
                }
                Ok(Pass::Drop) => unchanged = false,
                Err(fault) => {
                    // What came before the error reaches the client ahead
                    // of whatever follows; the rest of this engine's
                    // answer does not.
                    self.carry = out;
                    return Err(fault);
                }
            }
        }
        let rest = &whole[at..];
        if end || rest.len() > MAX_EVENT {
            // The last event without its blank line, or no event at all:
            // as it came, and what it says is not known.
            if !end {
                self.transcript.blocker = Some("the engine streamed an event over 1 MiB");
            }
            self.open_tail |= !rest.is_empty();
            out.extend_from_slice(rest);
        } else {
            self.pending.extend_from_slice(rest);
            unchanged &= rest.is_empty();
        }
        *body = if unchanged {
            Some(chunk)
        } else {
            (!out.is_empty()).then(|| Bytes::from(out))
        };
        Ok(())
    }

    /// What the next engine is asked now that the current one failed;
    /// `sent` is the request body the first engine got.
    pub fn next(&mut self, sent: impl FnOnce() -> Bytes) -> Next {
        if self.transcript.finished || self.transcript.done {
            let mut end = self.take_carry();
            if !self.transcript.done {
                end.extend_from_slice(b"data: [DONE]\n\n");
            }
            self.transcript.done = true;
            return Next::Close(Bytes::from(end));
        }
        if let Some(why) = self.transcript.blocker {
            return Next::Fail(why);
        }
        let original = self.original.get_or_insert_with(sent);
        let body = match continuation_body(
            self.api,
            original,
            &self.transcript.text,
            self.transcript.tokens,
        ) {
            Ok(body) => body,
            Err(why) => return Next::Fail(why),
        };
        if std::mem::take(&mut self.live) {
            // An engine that never answered did no work worth counting.
            self.failed
                .push(self.transcript.tokens - self.tokens_before);
            self.tokens_before = self.transcript.tokens;
        }
        // The failed engine's unfinished event is never sent.
        self.pending.clear();
        Next::Continue(Bytes::from(body))
    }

    fn pass(&mut self, event: &[u8]) -> Result<Pass, StreamFault> {
        let Some(data) = data_of(event) else {
            return Ok(Pass::AsIs);
        };
        // A chunk passed before this one was all the client had.
        let role_sent = self.transcript.role_sent;
        if data.trim_ascii() == b"[DONE]" {
            self.transcript.done = true;
            return Ok(Pass::AsIs);
        }
        let Ok(chunk) = serde_json::from_slice::<ChunkView<'_>>(&data) else {
            return Ok(Pass::AsIs);
        };
        if let (Some(error), None) = (chunk.error, self.transcript.blocker) {
            self.engine_error = Some(error_message(error.get()));
            return Err(StreamFault);
        }
        let usage = chunk.usage;
        self.transcript.read(self.api, &chunk);
        if self.transcript.text.len() > MAX_TEXT {
            self.transcript.blocker = Some("the answer is over 4 MiB of text");
            self.transcript.text = String::new();
        }
        drop(chunk);
        if self.failed.is_empty() {
            return Ok(Pass::AsIs);
        }
        Ok(self.rewrite(&data, usage, role_sent))
    }

    /// A resumed engine's event as the first engine's answer carries on
    /// (`role_sent`: the client has a role chunk already).
    fn rewrite(&self, data: &[u8], usage: Option<UsageView>, role_sent: bool) -> Pass {
        let Ok(Value::Object(mut chunk)) = serde_json::from_slice::<Value>(data) else {
            return Pass::AsIs;
        };
        if let Some(first) = &self.transcript.identity {
            for (field, value) in [
                ("id", &first.id),
                ("created", &first.created),
                ("model", &first.model),
                ("system_fingerprint", &first.fingerprint),
            ] {
                if let Some(v) = value
                    .as_deref()
                    .and_then(|v| serde_json::from_str(v.get()).ok())
                {
                    chunk.insert(field.into(), v);
                }
            }
        }
        let mut carries = false;
        if let Some(Value::Array(choices)) = chunk.get_mut("choices") {
            for choice in choices.iter_mut() {
                if let Some(Value::Object(delta)) = choice.get_mut("delta").filter(|_| role_sent) {
                    // The client had its role chunk from the first engine.
                    delta.remove("role");
                }
                carries |= choice_carries(choice);
            }
        }
        if let (Some(reported), Some(Value::Object(report))) = (usage, chunk.get_mut("usage")) {
            // The counts cover every engine; the engine's details stay.
            let total = self.total_usage(reported);
            report.insert("prompt_tokens".into(), total.prompt_tokens.into());
            report.insert("completion_tokens".into(), total.completion_tokens.into());
            report.insert(
                "total_tokens".into(),
                (total.prompt_tokens + total.completion_tokens).into(),
            );
            carries = true;
        }
        if !carries {
            return Pass::Drop;
        }
        let mut out = b"data: ".to_vec();
        if serde_json::to_writer(&mut out, &chunk).is_err() {
            return Pass::AsIs;
        }
        out.extend_from_slice(b"\n\n");
        Pass::Rewritten(out)
    }

    /// The answer's usage: every engine's work. An engine that failed
    /// reported none; its prompt is taken as the next engine's less the
    /// tokens it streamed (the next prompt is its prompt plus those).
    fn total_usage(&self, last: UsageView) -> UsageView {
        let mut total = last;
        let mut prompt = last.prompt_tokens;
        for &streamed in self.failed.iter().rev() {
            prompt = prompt.saturating_sub(streamed);
            total.prompt_tokens += prompt;
            total.completion_tokens += streamed;
        }
        total
    }
}

/// The `message` of an engine's error object (or the object), shortened.
fn error_message(raw: &str) -> String {
    let value: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let text = match value.get("message").and_then(Value::as_str) {
        Some(message) => message.to_owned(),
        None => raw.to_owned(),
    };
    text.chars().take(300).collect()
}

/// What becomes of one event.
enum Pass {
    AsIs,
    Rewritten(Vec<u8>),
    Drop,
}

/// Whether a rewritten choice still carries something: text, a finish, a
/// tool call, log probabilities.
fn choice_carries(choice: &Value) -> bool {
    let present = |v: Option<&Value>| match v {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    };
    present(choice.get("finish_reason"))
        || present(choice.get("logprobs"))
        || present(choice.get("text"))
        || choice
            .get("delta")
            .and_then(Value::as_object)
            .is_some_and(|d| d.values().any(|v| present(Some(v))))
}

/// The length of the first whole event of `buf` (up to and with its blank
/// line), if one is whole. Lines end with `\r\n`, `\n` or `\r`, as SSE
/// allows; a `\r` last in `buf` may be the start of a `\r\n`, so it ends
/// nothing yet.
fn event_len(buf: &[u8]) -> Option<usize> {
    // Where the line ending at `at` ends, if it is whole.
    let line_end = |at: usize| match (buf[at], buf.get(at + 1)) {
        (b'\r', Some(b'\n')) => Some(at + 2),
        (b'\r', None) => None,
        _ => Some(at + 1),
    };
    let mut from = 0;
    while let Some(i) = memchr::memchr2(b'\n', b'\r', &buf[from..]) {
        let after = line_end(from + i)?;
        // A line ending right after a line ending: the blank line.
        match buf.get(after) {
            Some(b'\n' | b'\r') => return line_end(after),
            Some(_) => from = after,
            None => return None,
        }
    }
    None
}

/// The `data` of an event (its `data:` lines joined), if it has any.
fn data_of(event: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut data: Option<Cow<'_, [u8]>> = None;
    for line in event.split(|&b| b == b'\n' || b == b'\r') {
        let Some(value) = line.strip_prefix(b"data:") else {
            continue;
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        data = Some(match data {
            None => Cow::Borrowed(value),
            Some(before) => {
                let mut joined = before.into_owned();
                joined.push(b'\n');
                joined.extend_from_slice(value);
                Cow::Owned(joined)
            }
        });
    }
    data
}

#[cfg(test)]
mod tests;
