//! Reads the `usage` an engine reports for an answer: in a JSON body, or in
//! the `data:` events of a server-sent event stream (for chat, with
//! `stream_options.include_usage`, the final chunk's), in any of the
//! shapes [`report`] knows. Chunks are looked at as they pass; nothing is
//! changed.

mod report;

use std::sync::LazyLock;

use flexinfer_jsonscan as scan;
use memchr::memmem::Finder;
use serde::Deserialize;

use report::Reported;

/// The `usage` key, searched in every chunk of a metered stream.
static USAGE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));

/// How engines end every chunk of a stream asked for its usage but the
/// last: `"usage":null` as the object's last member, without spaces. In a
/// JSON object these bytes at its very end can only be its own last member
/// (inside a string they would be followed by its closing quote), so such
/// a chunk is recognised without walking its members.
const NULL_USAGE_LAST: &[u8] = b"\"usage\":null}";

/// Largest JSON answer, or partial event line, kept to find the usage in.
const MAX_KEPT: usize = 1 << 20;

/// Tokens an engine reports for one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Prompt tokens served from the engine's prefix cache, when reported.
    #[serde(skip)]
    pub cached_tokens: Option<u64>,
}

/// Watches one answer's body for its usage.
#[derive(Debug)]
pub struct UsageMeter {
    events: bool,
    kept: Vec<u8>,
    overflow: bool,
    found: Reported,
}

impl UsageMeter {
    /// A meter for a JSON answer (`events` false) or an event stream.
    pub fn new(events: bool) -> Self {
        Self {
            events,
            kept: Vec::new(),
            overflow: false,
            found: Reported::default(),
        }
    }

    /// Looks at the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.events {
            if self.kept.len() + chunk.len() > MAX_KEPT {
                self.overflow = true;
                self.kept = Vec::new();
            } else if !self.overflow {
                self.kept.extend_from_slice(chunk);
            }
            return;
        }
        // Whole lines only: an event may arrive in pieces.
        let Some(last_newline) = memchr::memrchr(b'\n', chunk) else {
            self.keep_partial(chunk);
            return;
        };
        let (complete, rest) = chunk.split_at(last_newline + 1);
        if self.kept.is_empty() {
            self.scan_lines(complete);
        } else {
            let mut lines = std::mem::take(&mut self.kept);
            lines.extend_from_slice(complete);
            self.scan_lines(&lines);
        }
        self.keep_partial(rest);
    }

    fn keep_partial(&mut self, piece: &[u8]) {
        if self.kept.len() + piece.len() > MAX_KEPT {
            self.kept.clear();
        } else {
            self.kept.extend_from_slice(piece);
        }
    }

    fn scan_lines(&mut self, lines: &[u8]) {
        if USAGE_KEY.find(lines).is_none() {
            return;
        }
        for line in lines.split(|&b| b == b'\n') {
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            let data = data.trim_ascii();
            if !data.ends_with(NULL_USAGE_LAST) && USAGE_KEY.find(data).is_some() {
                self.found.read(data);
            }
        }
    }

    /// The usage the answer reported, once it has ended.
    pub fn finish(&mut self) -> Option<Usage> {
        if !self.events && !self.overflow && !self.kept.is_empty() {
            self.found = Reported::default();
            self.found.read(&std::mem::take(&mut self.kept));
        }
        self.found.usage()
    }
}

/// Takes back from an event stream what the gateway's own
/// `stream_options.include_usage` added when the client had not asked for
/// usage: the final usage-only chunk (`"choices":[]`) with its blank line,
/// and the `"usage":null` member of the other chunks. The usage is kept;
/// every other byte passes unchanged.
#[derive(Debug, Default)]
pub struct UsageStripper {
    partial: Vec<u8>,
    skip_blank_line: bool,
    found: Option<Usage>,
}

/// What one `data:` line turns into.
enum Line {
    Keep,
    Drop,
    Replace(Vec<u8>),
}

impl UsageStripper {
    /// Filters the next chunk; `None` when it passes unchanged.
    pub fn filter(&mut self, chunk: &[u8], end: bool) -> Option<Vec<u8>> {
        let plain = self.partial.is_empty()
            && !self.skip_blank_line
            && chunk.last() == Some(&b'\n')
            && USAGE_KEY.find(chunk).is_none();
        if plain {
            return None;
        }
        let mut data = std::mem::take(&mut self.partial);
        data.extend_from_slice(chunk);
        let cut = if end {
            data.len()
        } else {
            memchr::memrchr(b'\n', &data).map_or(0, |i| i + 1)
        };
        let mut out = Vec::with_capacity(cut);
        let mut at = 0;
        while at < cut {
            let line_end = memchr::memchr(b'\n', &data[at..cut]).map_or(cut, |i| at + i + 1);
            let line = &data[at..line_end];
            at = line_end;
            if std::mem::take(&mut self.skip_blank_line) && line.trim_ascii().is_empty() {
                continue;
            }
            match self.data_line(line) {
                Line::Keep => out.extend_from_slice(line),
                Line::Drop => self.skip_blank_line = true,
                Line::Replace(new) => out.extend_from_slice(&new),
            }
        }
        self.partial = data[cut..].to_vec();
        if self.partial.len() > MAX_KEPT {
            out.append(&mut self.partial);
        }
        Some(out)
    }

    fn data_line(&mut self, line: &[u8]) -> Line {
        let Some(payload) = line.strip_prefix(b"data:") else {
            return Line::Keep;
        };
        if USAGE_KEY.find(payload).is_none() {
            return Line::Keep;
        }
        let body = line.trim_ascii_end();
        if let Some(member) = body
            .strip_suffix(NULL_USAGE_LAST)
            .and_then(|rest| rest.strip_suffix(b","))
        {
            // The common chunk: its last member taken out with its comma.
            let mut out = Vec::with_capacity(line.len());
            out.extend_from_slice(member);
            out.extend_from_slice(&line[body.len() - 1..]);
            return Line::Replace(out);
        }
        let offset = line.len() - payload.len();
        let open = scan::skip_ws(line, offset);
        let (mut usage, mut choices_empty) = (None, false);
        let walked = scan::object_members(line, open, |key, value| {
            let end = scan::value_end(line, value)?;
            match key {
                b"usage" => {
                    let key_start = key.as_ptr() as usize - line.as_ptr() as usize - 1;
                    usage = Some((key_start, value, end));
                }
                b"choices" => choices_empty = line[value..end].iter().all(|b| b"[] \t".contains(b)),
                _ => {}
            }
            Ok(end)
        });
        let (Ok(_), Some((key_start, value, end))) = (walked, usage) else {
            return Line::Keep;
        };
        if line[value..end] == *b"null" {
            return Line::Replace(without_member(line, key_start, end));
        }
        let mut reported = Reported::default();
        if reported.read(payload.trim_ascii()) {
            self.found = reported.usage();
        }
        if choices_empty {
            Line::Drop
        } else {
            Line::Keep
        }
    }

    /// The usage the stream reported.
    pub fn usage(&self) -> Option<Usage> {
        self.found
    }
}

/// `line` without the member spanning `start..end`, and the comma that
/// joined it to its neighbour.
fn without_member(line: &[u8], start: usize, end: usize) -> Vec<u8> {
    let before = line[..start].trim_ascii_end();
    let (from, to) = if before.ends_with(b",") {
        (before.len() - 1, end)
    } else {
        let after = scan::skip_ws(line, end);
        let to = if line.get(after) == Some(&b',') {
            after + 1
        } else {
            end
        };
        (start, to)
    };
    let mut out = Vec::with_capacity(line.len());
    out.extend_from_slice(&line[..from]);
    out.extend_from_slice(&line[to..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stripper_gives_back_the_stream_that_was_not_asked_for_usage() {
        let with_usage = concat!(
            ": keep-alive\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n",
            "data: {\"usage\":null,\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n"
        );
        let without = concat!(
            ": keep-alive\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        for split in 1..with_usage.len() {
            let mut s = UsageStripper::default();
            let mut out = Vec::new();
            let pieces: Vec<&[u8]> = with_usage.as_bytes().chunks(split).collect();
            for (i, piece) in pieces.iter().enumerate() {
                let end = i + 1 == pieces.len();
                match s.filter(piece, end) {
                    Some(new) => out.extend_from_slice(&new),
                    None => out.extend_from_slice(piece),
                }
            }
            assert_eq!(String::from_utf8(out).unwrap(), without, "split {split}");
            let u = s.usage().expect("usage");
            assert_eq!((u.prompt_tokens, u.completion_tokens), (3, 2));
        }
    }

    #[test]
    fn reads_a_json_answers_usage() {
        let body = br#"{"id":"x","choices":[{"message":{"content":"usage"}}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":8}}}"#;
        for split in [1, 7, 40, body.len()] {
            let mut m = UsageMeter::new(false);
            for piece in body.chunks(split) {
                m.feed(piece);
            }
            let u = m.finish().unwrap();
            assert_eq!(
                (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
                (12, 5, Some(8))
            );
        }
        let mut none = UsageMeter::new(false);
        none.feed(br#"{"usage":null}"#);
        assert_eq!(none.finish(), None);
    }

    #[test]
    fn a_last_null_usage_is_taken_out_as_the_member_walk_would() {
        let mut s = UsageStripper::default();
        let mut strip = |line: &str| match s.data_line(line.as_bytes()) {
            Line::Keep => line.to_owned(),
            Line::Drop => String::new(),
            Line::Replace(new) => String::from_utf8(new).unwrap(),
        };
        // Quickly: the member last, after a comma, content that mentions it.
        assert_eq!(
            strip("data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":null}\"}}],\"usage\":null}\r\n"),
            "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":null}\"}}]}\r\n"
        );
        // By the walk: the only member, spaces, a nested one left alone.
        assert_eq!(strip("data: {\"usage\":null}\n"), "data: {}\n");
        assert_eq!(
            strip("data: {\"id\":1, \"usage\": null }\n"),
            "data: {\"id\":1 }\n"
        );
        assert_eq!(
            strip("data: {\"a\":{\"b\":1,\"usage\":null}}\n"),
            "data: {\"a\":{\"b\":1,\"usage\":null}}\n"
        );
        assert!(s.usage().is_none());
    }

    #[test]
    fn reads_the_final_usage_of_a_stream_split_anywhere() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\"\"}}],\"usage\":null}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":9}}\n\n",
            "data: [DONE]\n\n"
        )
        .as_bytes();
        for split in 1..stream.len() {
            let mut m = UsageMeter::new(true);
            for piece in stream.chunks(split) {
                m.feed(piece);
            }
            let u = m.finish().expect("usage");
            assert_eq!(
                (u.prompt_tokens, u.completion_tokens),
                (3, 9),
                "split {split}"
            );
        }
    }
}
