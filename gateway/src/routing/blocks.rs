//! A prompt as the chain of KV-cache blocks an engine would hold for it.
//!
//! The rule, shared with `flexinfer-sim` so the gateway's guesses line up
//! with a simulated engine's cache:
//!
//! - the prompt's text is each chat message's content (the string, or its
//!   text parts in order) followed by `"\n"`, in message order; for a
//!   completion, the prompt string (the first one of an array);
//! - a token is 4 bytes of that text, and a block is `block_size` tokens;
//!   only full blocks count, as only full blocks are cached;
//! - block `i`'s hash is `xxh3_64_with_seed(bytes_i, hash_{i-1})` with
//!   `hash_{-1} = 0`, so two prompts share block `i` only when they share
//!   everything up to the end of it: a prefix;
//! - a request with a `cache_salt` (vLLM's per-request cache isolation)
//!   starts the chain at `hash_{-1} = xxh3_64(salt)` instead, so it shares
//!   no block with a request of another salt.
//!
//! Real engines tokenize differently; the gateway only needs to know which
//! requests share how long a prefix, which this rule preserves.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::keys::RoutingInputs;
use super::messages::{walk_messages, walk_prompt, Flow, MessageHandler, Role};

/// Bytes per token of the block rule.
pub const BYTES_PER_TOKEN: usize = 4;

/// Default tokens per block: vLLM's default block size.
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// Most blocks hashed per request: longer prompts are scored on their first
/// this-many blocks (256 KiB of text at the default block size), which
/// bounds the work per request.
pub const MAX_PROMPT_BLOCKS: usize = 4096;

/// The chained hashes of a prompt's full blocks, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptBlocks {
    hashes: Vec<u64>,
}

impl PromptBlocks {
    /// The blocks of the request's `messages` or `prompt` with blocks of
    /// `block_size` tokens; none when the body has neither (or they are
    /// malformed) or `block_size` is 0.
    pub fn of_request(body: &RoutingInputs<'_>, block_size: usize) -> Self {
        Self::of_salted_request(body, block_size, None)
    }

    /// [`PromptBlocks::of_request`] for a request whose engine cache is
    /// salted with `salt` (its `cache_salt`).
    pub fn of_salted_request(
        body: &RoutingInputs<'_>,
        block_size: usize,
        salt: Option<&str>,
    ) -> Self {
        if block_size == 0 {
            return Self::default();
        }
        let seed = salt.map_or(0, salt_seed);
        let mut chain = Chain::new(block_size * BYTES_PER_TOKEN, seed);
        let complete = if let Some(messages) = body.messages {
            walk_messages(messages, &mut chain)
        } else if let Some(prompt) = body.prompt {
            walk_prompt(prompt, &mut |text| chain.push(text.as_bytes()))
        } else {
            true
        };
        if !complete {
            return Self::default();
        }
        Self {
            hashes: chain.hashes,
        }
    }

    /// The blocks of already rendered prompt text.
    pub fn of_text(text: &[u8], block_size: usize) -> Self {
        if block_size == 0 {
            return Self::default();
        }
        let mut chain = Chain::new(block_size * BYTES_PER_TOKEN, 0);
        chain.push(text);
        Self {
            hashes: chain.hashes,
        }
    }

    /// The chained hashes, first block first.
    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// Number of full blocks.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether the prompt has no full block (short or absent).
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// Cuts text into blocks and chains their hashes as it arrives.
/// The hash a salted chain starts from.
pub fn salt_seed(salt: &str) -> u64 {
    xxh3_64_with_seed(salt.as_bytes(), 0)
}

struct Chain {
    block_bytes: usize,
    pending: Vec<u8>,
    last: u64,
    hashes: Vec<u64>,
}

impl Chain {
    fn new(block_bytes: usize, seed: u64) -> Self {
        Self {
            block_bytes,
            pending: Vec::with_capacity(block_bytes),
            last: seed,
            hashes: Vec::new(),
        }
    }

    fn full(&self) -> bool {
        self.hashes.len() >= MAX_PROMPT_BLOCKS
    }

    fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.full() {
            if self.pending.is_empty() && bytes.len() >= self.block_bytes {
                // Whole blocks straight from the input, without copying.
                let (block, rest) = bytes.split_at(self.block_bytes);
                self.seal(block);
                bytes = rest;
                continue;
            }
            let take = (self.block_bytes - self.pending.len()).min(bytes.len());
            self.pending.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.pending.len() == self.block_bytes {
                let block = std::mem::take(&mut self.pending);
                self.seal(&block);
                self.pending = block;
                self.pending.clear();
            }
        }
    }

    fn seal(&mut self, block: &[u8]) {
        self.last = xxh3_64_with_seed(block, self.last);
        self.hashes.push(self.last);
    }
}

impl MessageHandler for Chain {
    fn wants(&mut self, _role: Option<Role>) -> bool {
        true
    }

    fn text(&mut self, text: &str) {
        self.push(text.as_bytes());
    }

    fn end_message(&mut self, _role: Option<Role>) -> Flow {
        self.push(b"\n");
        if self.full() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::RawJson;

    fn chat(json: &str) -> PromptBlocks {
        let body = RoutingInputs {
            messages: Some(RawJson::new(json)),
            ..RoutingInputs::default()
        };
        PromptBlocks::of_request(&body, 2)
    }

    #[test]
    fn messages_render_as_content_and_newline() {
        // Block size 2 tokens = 8 bytes.
        let blocks = chat(
            r#"[{"role":"system","content":"abcdefg"},{"role":"user","content":[{"type":"text","text":"hijklmn"},{"type":"image_url","image_url":{"url":"x"}}]}]"#,
        );
        assert_eq!(blocks, PromptBlocks::of_text(b"abcdefg\nhijklmn\n", 2));
        assert_eq!(blocks.len(), 2);
    }

    #[test]
    fn shared_prefix_shares_leading_blocks_only() {
        let a = PromptBlocks::of_text(b"0123456789abcdefXXXXXXXXtail....", 2);
        let b = PromptBlocks::of_text(b"0123456789abcdefYYYYYYYYtail....", 2);
        assert_eq!(a.len(), 4);
        assert_eq!(a.hashes()[..2], b.hashes()[..2]);
        // Same bytes after the divergence still differ: the hashes chain.
        assert_ne!(a.hashes()[2], b.hashes()[2]);
        assert_ne!(a.hashes()[3], b.hashes()[3]);
    }

    #[test]
    fn a_salt_shares_no_block_with_another_salt() {
        let text = r#"[{"role":"user","content":"12345678abcdefgh"}]"#;
        let inputs = RoutingInputs {
            messages: Some(crate::extract::RawJson::new(text)),
            ..RoutingInputs::default()
        };
        let plain = PromptBlocks::of_request(&inputs, 2);
        let a = PromptBlocks::of_salted_request(&inputs, 2, Some("a"));
        let b = PromptBlocks::of_salted_request(&inputs, 2, Some("b"));
        assert_eq!(plain.len(), 2);
        assert_eq!(a, PromptBlocks::of_salted_request(&inputs, 2, Some("a")));
        assert!(a.hashes().iter().all(|h| !b.hashes().contains(h)));
        assert!(a.hashes().iter().all(|h| !plain.hashes().contains(h)));
        assert_eq!(
            a.hashes()[0],
            xxh3_64_with_seed(b"12345678", salt_seed("a"))
        );
    }

    #[test]
    fn partial_block_is_not_counted_and_split_input_hashes_alike() {
        assert_eq!(PromptBlocks::of_text(b"1234567", 2).len(), 0);
        let whole = PromptBlocks::of_text(b"12345678abcdefgh", 2);
        let mut chain = Chain::new(8, 0);
        for piece in [&b"123"[..], b"45678abc", b"defgh"] {
            chain.push(piece);
        }
        assert_eq!(chain.hashes, whole.hashes);
    }

    #[test]
    fn completion_prompt_and_absent_or_malformed_input() {
        let body = RoutingInputs {
            prompt: Some(RawJson::new(r#""12345678""#)),
            ..RoutingInputs::default()
        };
        assert_eq!(
            PromptBlocks::of_request(&body, 2),
            PromptBlocks::of_text(b"12345678", 2)
        );
        assert!(PromptBlocks::of_request(&RoutingInputs::default(), 2).is_empty());
        assert!(chat(r#"{"not":"an array"}"#).is_empty());
        assert!(PromptBlocks::of_text(b"12345678", 0).is_empty());
    }

    #[test]
    fn long_prompts_are_cut_at_the_block_limit() {
        let text = vec![b'x'; (MAX_PROMPT_BLOCKS + 10) * 8];
        assert_eq!(PromptBlocks::of_text(&text, 2).len(), MAX_PROMPT_BLOCKS);
    }
}
