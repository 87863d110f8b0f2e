//! Mid-stream failover: a streamed answer whose engine fails after part of
//! it reached the client (connection reset, pod killed, an `error` event
//! mid-stream) is resumed on another endpoint. The gateway asks that engine
//! to continue what was already streamed, and splices its answer into the
//! same client stream.
//!
//! - **Chat completions**: the conversation plus an assistant message with
//!   the text streamed so far, `continue_final_message: true` and
//!   `add_generation_prompt: false` (vLLM's and SGLang's continuation; the
//!   llama.cpp server continues a final assistant message by itself).
//! - **Completions**: the prompt followed by the text streamed so far.
//!
//! The client sees one answer: the first engine's `id`, `created` and
//! `model` on every chunk, one role chunk, no repeated or missing text (for
//! an engine that continues its own output deterministically), and one
//! usage chunk that counts the work of every engine that served it.
//!
//! Opt-in per model ([`StreamFailover`]): sampling on another engine
//! continues the answer rather than repeating it, which a user must accept.
//! Where an answer cannot be continued (several choices, a tool call or
//! reasoning in the stream, a body forwarded beyond the retry buffer, no
//! endpoint left) the stream ends with an `error` event that says so.

mod continuation;
mod splice;
mod transcript;

pub use continuation::continuation_body;
pub use splice::{Next, StreamFault, StreamResume};
pub use transcript::Transcript;

use std::fmt;
use std::str::FromStr;

/// The APIs whose streams a model resumes on another endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamFailover {
    /// `/v1/chat/completions`.
    pub chat: bool,
    /// `/v1/completions`.
    pub completions: bool,
}

/// A resumable API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Chat completions.
    Chat,
    /// Text completions.
    Completions,
}

impl StreamFailover {
    /// Every API that can be resumed.
    pub const ALL: Self = Self {
        chat: true,
        completions: true,
    };

    /// Whether no API is resumed.
    pub fn is_off(&self) -> bool {
        !self.chat && !self.completions
    }

    /// The API of a request to `path` (as the engine's router matches it)
    /// when its streams are resumed.
    pub fn api(&self, path: &str) -> Option<Api> {
        match path {
            "/v1/chat/completions" if self.chat => Some(Api::Chat),
            "/v1/completions" if self.completions => Some(Api::Completions),
            _ => None,
        }
    }
}

/// The values the setting takes, for error messages.
const VALUES: &str = "\"on\" (or \"true\"), \"off\" (or \"false\"), or a comma-separated list of \
                      \"chat\" and \"completions\"";

impl FromStr for StreamFailover {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "false" => return Ok(Self::default()),
            "on" | "true" => return Ok(Self::ALL),
            _ => {}
        }
        let mut out = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.to_ascii_lowercase().as_str() {
                "chat" => out.chat = true,
                "completions" => out.completions = true,
                other => {
                    return Err(format!(
                        "unknown stream failover API '{other}': expected {VALUES}"
                    ))
                }
            }
        }
        Ok(out)
    }
}

impl fmt::Display for StreamFailover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.chat, self.completions) {
            (true, true) => f.write_str("chat,completions"),
            (true, false) => f.write_str("chat"),
            (false, true) => f.write_str("completions"),
            (false, false) => f.write_str("off"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_names_apis() {
        assert_eq!("on".parse::<StreamFailover>(), Ok(StreamFailover::ALL));
        assert_eq!("TRUE".parse::<StreamFailover>(), Ok(StreamFailover::ALL));
        assert!("off".parse::<StreamFailover>().unwrap().is_off());
        assert!("".parse::<StreamFailover>().unwrap().is_off());
        let completions: StreamFailover = " completions ".parse().unwrap();
        assert_eq!(completions.api("/v1/completions"), Some(Api::Completions));
        assert_eq!(completions.api("/v1/chat/completions"), None);
        let both: StreamFailover = "chat, completions".parse().unwrap();
        assert_eq!(both, StreamFailover::ALL);
        assert_eq!(both.api("/v1/responses"), None);
        let err = "chat,messages".parse::<StreamFailover>().unwrap_err();
        assert!(err.contains("'messages'"), "{err}");
        for s in ["on", "off", "chat", "completions"] {
            let v: StreamFailover = s.parse().unwrap();
            assert_eq!(v.to_string().parse::<StreamFailover>(), Ok(v));
        }
    }
}
