//! The simulated prefix (KV) cache, which behaves from the outside like
//! vLLM's automatic prefix caching.
//!
//! # From a request to blocks
//!
//! The simulator has no tokenizer, so it uses one fixed rule that keeps the
//! property that matters: two requests share `k` cached blocks exactly when
//! their prompts share the bytes of those `k` blocks, a prefix.
//!
//! 1. **Rendered prompt bytes.** For a chat request, each message in order
//!    contributes its content text followed by one `"\n"` byte; the text is
//!    the content string, or the concatenation (no separator) of the `text`
//!    of its content parts. Roles, names and every other field are left out.
//!    For a text completion it is the prompt string; for an array of strings,
//!    the first string. Token-id prompts (an array of integers, or an array
//!    of such arrays, the first of which is used) contribute 4 bytes per
//!    token id: the little-endian bytes of the id's low 32 bits.
//! 2. **Tokens.** A prompt of `b` rendered bytes has `ceil(b / 4)` tokens
//!    ([`token_count`]), so token-id prompts have exactly one token per id.
//!    Usage (`prompt_tokens`) counts this, at least 1 per prompt.
//! 3. **Blocks.** A block is `block_size` tokens, that is `block_size * 4`
//!    bytes. Only full blocks are cacheable, as in vLLM: a trailing partial
//!    block is never stored or matched.
//! 4. **Hashes.** Block `i`'s hash chains over the previous one:
//!    `h_i = xxh3_64_with_seed(block_bytes_i, h_{i-1})` with `h_{-1} = 0`
//!    ([`block_hashes`]), so block `i` matches only when everything up to its
//!    end matches; blocks after a divergence miss even when their own bytes
//!    match again.
//!
//! # The cache
//!
//! [`PrefixCache`] is a bounded LRU of block hashes, one per server process
//! and shared by all its models. When a request gets its generation slot it
//! looks up its blocks in order; `matched` is the number of leading blocks
//! present and the request's cached tokens are `matched * block_size`,
//! except that when that would cover every prompt token the last block is
//! recomputed (vLLM always computes at least the last prompt token), giving
//! `(matched - 1) * block_size` ([`cached_tokens`]). Then all of the
//! request's full blocks become the most recently used, its first block the
//! most recent of all: like vLLM, which frees a finished request's blocks
//! tail first, a prompt's tail is evicted before its head, so what stays
//! cached is still reachable as a prefix. Blocks beyond the capacity are
//! evicted least recently used first. A capacity of 0 disables caching:
//! nothing is stored and nothing hits.
//!
//! For a text completion with several prompts only the first goes through
//! the cache; usage still counts the tokens of all of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::generation::CENTURY;
use super::protocol::{texts_of, ChatMessage};

/// Rendered bytes per token.
pub const BYTES_PER_TOKEN: usize = 4;

/// Tokens of a prompt of `bytes` rendered bytes: `ceil(bytes / 4)`.
pub fn token_count(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(BYTES_PER_TOKEN)).unwrap_or(u32::MAX)
}

/// The chained hashes of the full blocks of `rendered`, first block first,
/// with blocks of `block_size` tokens (`block_size * 4` bytes). A trailing
/// partial block has no hash; `block_size` 0 gives none at all.
pub fn block_hashes(rendered: &[u8], block_size: u32) -> Vec<u64> {
    salted_block_hashes(rendered, block_size, None)
}

/// [`block_hashes`] of a request with a `cache_salt`: the chain starts at
/// `h_-1 = xxh3_64(salt)` instead of 0, as the gateway's block rule does.
pub fn salted_block_hashes(rendered: &[u8], block_size: u32, salt: Option<&str>) -> Vec<u64> {
    let block_bytes = usize::try_from(block_size)
        .unwrap_or(usize::MAX)
        .saturating_mul(BYTES_PER_TOKEN);
    if block_bytes == 0 {
        return Vec::new();
    }
    let mut previous = salt.map_or(0, |s| xxh3_64_with_seed(s.as_bytes(), 0));
    rendered
        .chunks_exact(block_bytes)
        .map(|block| {
            previous = xxh3_64_with_seed(block, previous);
            previous
        })
        .collect()
}

/// The rendered bytes of a chat conversation: each message's content text
/// followed by `"\n"`.
pub fn render_chat(messages: &[ChatMessage]) -> Vec<u8> {
    let mut out = Vec::new();
    for message in messages {
        match &message.content {
            Some(Value::String(text)) => out.extend_from_slice(text.as_bytes()),
            Some(Value::Array(parts)) => {
                for text in parts
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                {
                    out.extend_from_slice(text.as_bytes());
                }
            }
            _ => {}
        }
        out.push(b'\n');
    }
    out
}

/// The rendered bytes of each prompt of a `prompt` (or embeddings `input`)
/// value, in order; `None` for a shape OpenAI does not allow. The first one
/// is what the prefix cache sees.
pub fn render_prompts(value: &Value) -> Option<Vec<Vec<u8>>> {
    fn ids(items: &[Value]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(items.len() * BYTES_PER_TOKEN);
        for item in items {
            // Token ids are taken modulo 2^32.
            let id = item.as_u64()? as u32;
            out.extend_from_slice(&id.to_le_bytes());
        }
        Some(out)
    }
    match value {
        Value::String(s) => Some(vec![s.as_bytes().to_vec()]),
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) if items.iter().all(Value::is_string) => Some(
            items
                .iter()
                .filter_map(|v| v.as_str().map(|s| s.as_bytes().to_vec()))
                .collect(),
        ),
        Value::Array(items) if items.iter().all(Value::is_number) => Some(vec![ids(items)?]),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_array().and_then(|inner| ids(inner)))
            .collect(),
        _ => None,
    }
}

/// The rendered bytes the prefix cache sees for a text completion's
/// `prompt`: those of its first prompt.
pub fn render_prompt(value: &Value) -> Option<Vec<u8>> {
    render_prompts(value)?.into_iter().next()
}

/// One prompt of a completion request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The text the deterministic answer is seeded from.
    pub text: String,
    /// The rendered bytes tokens and blocks are counted on.
    pub rendered: Vec<u8>,
}

impl Prompt {
    /// A prompt given as plain text, rendered as its own bytes.
    pub fn from_text(text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            rendered: text.clone().into_bytes(),
            text,
        }
    }

    /// The prompt of a chat request.
    pub fn chat(messages: &[ChatMessage]) -> Self {
        Self {
            text: messages
                .iter()
                .map(ChatMessage::text)
                .collect::<Vec<_>>()
                .join("\n"),
            rendered: render_chat(messages),
        }
    }

    /// The prompts of a text completion's `prompt` (or an embeddings
    /// `input`); `None` for a shape OpenAI does not allow.
    pub fn completion(value: &Value) -> Option<Vec<Self>> {
        let texts = texts_of(value)?;
        let rendered = render_prompts(value)?;
        (texts.len() == rendered.len()).then(|| {
            texts
                .into_iter()
                .zip(rendered)
                .map(|(text, rendered)| Self { text, rendered })
                .collect()
        })
    }

    /// Tokens of this prompt as usage counts them (at least 1).
    pub fn tokens(&self) -> u32 {
        token_count(self.rendered.len()).max(1)
    }
}

/// What the prefix cache looks up for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheKey {
    /// Prompt tokens looked up (those of the rendered prompt).
    pub tokens: u32,
    /// Chained hashes of its full blocks.
    pub hashes: Vec<u64>,
}

impl CacheKey {
    /// The key of a rendered prompt with blocks of `block_size` tokens.
    pub fn new(rendered: &[u8], block_size: u32) -> Self {
        Self::salted(rendered, block_size, None)
    }

    /// The key of a rendered prompt sent with a `cache_salt`.
    pub fn salted(rendered: &[u8], block_size: u32, salt: Option<&str>) -> Self {
        Self {
            tokens: token_count(rendered.len()),
            hashes: salted_block_hashes(rendered, block_size, salt),
        }
    }

    /// The key of a request's prompts: the first one's (empty without prompts).
    pub fn of_prompts(prompts: &[Prompt], block_size: u32) -> Self {
        Self::of_salted_prompts(prompts, block_size, None)
    }

    /// [`CacheKey::of_prompts`] of a request with a `cache_salt`.
    pub fn of_salted_prompts(prompts: &[Prompt], block_size: u32, salt: Option<&str>) -> Self {
        prompts
            .first()
            .map(|p| Self::salted(&p.rendered, block_size, salt))
            .unwrap_or_default()
    }
}

/// Cached tokens for `matched` leading blocks of a prompt of `prompt_tokens`
/// tokens: `matched * block_size`, less one block when that would leave no
/// prompt token to compute.
pub fn cached_tokens(matched: usize, prompt_tokens: u32, block_size: u32) -> u32 {
    let matched = u32::try_from(matched).unwrap_or(u32::MAX);
    let covered = matched.saturating_mul(block_size);
    if matched > 0 && covered >= prompt_tokens {
        (matched - 1).saturating_mul(block_size)
    } else {
        covered
    }
}

/// Prefill time of `uncached_tokens` at `tokens_per_second`; zero when the
/// rate is 0 (instant prefill), capped at a century.
pub fn prefill_delay(uncached_tokens: u32, tokens_per_second: f64) -> Duration {
    if uncached_tokens == 0 || tokens_per_second.is_nan() || tokens_per_second <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(f64::from(uncached_tokens) / tokens_per_second)
        .unwrap_or(CENTURY)
        .min(CENTURY)
}

/// The outcome of a lookup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheHit {
    /// Prompt tokens looked up (what `vllm:prefix_cache_queries_total` adds).
    pub queried_tokens: u32,
    /// Prompt tokens served from the cache (what `vllm:prefix_cache_hits_total` adds).
    pub cached_tokens: u32,
}

/// A bounded LRU of KV-cache blocks, keyed by chained block hash.
#[derive(Debug)]
pub struct PrefixCache {
    block_size: u32,
    capacity: usize,
    blocks: Mutex<Lru>,
}

impl PrefixCache {
    /// A cache of at most `capacity` blocks of `block_size` tokens; capacity
    /// 0 disables caching.
    pub fn new(capacity: usize, block_size: u32) -> Self {
        Self {
            block_size: block_size.max(1),
            capacity,
            blocks: Mutex::new(Lru::default()),
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Capacity in blocks.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether caching is on (capacity above 0).
    pub fn is_enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Blocks currently cached.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no block is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key of a request's prompts under this cache's block size.
    pub fn key(&self, prompts: &[Prompt]) -> CacheKey {
        CacheKey::of_prompts(prompts, self.block_size)
    }

    /// What [`PrefixCache::admit`] would answer now, without changing the
    /// cache. With caching disabled nothing is queried.
    pub fn peek(&self, key: &CacheKey) -> CacheHit {
        if !self.is_enabled() {
            return CacheHit::default();
        }
        let matched = self.lock().matched(&key.hashes);
        self.hit(key, matched)
    }

    /// Looks `key` up as a request that just got its generation slot, then
    /// makes all its blocks the most recently used (evicting beyond capacity).
    pub fn admit(&self, key: &CacheKey) -> CacheHit {
        if !self.is_enabled() {
            return CacheHit::default();
        }
        let mut blocks = self.lock();
        let matched = blocks.matched(&key.hashes);
        // Tail first, so that the head is the most recent and evicted last.
        for hash in key.hashes.iter().rev() {
            blocks.touch(*hash);
        }
        blocks.evict_to(self.capacity);
        drop(blocks);
        self.hit(key, matched)
    }

    fn hit(&self, key: &CacheKey, matched: usize) -> CacheHit {
        CacheHit {
            queried_tokens: key.tokens,
            cached_tokens: cached_tokens(matched, key.tokens, self.block_size),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // A panic while holding the lock cannot leave the maps inconsistent
        // in a way that matters to a simulator, so keep serving.
        self.blocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Block hashes ordered by last use: `stamp` maps a hash to its last-use
/// tick, `order` maps ticks back to hashes (oldest first). O(log n) per block.
#[derive(Debug, Default)]
struct Lru {
    tick: u64,
    stamp: HashMap<u64, u64>,
    order: BTreeMap<u64, u64>,
}

impl Lru {
    fn len(&self) -> usize {
        self.stamp.len()
    }

    fn contains(&self, hash: u64) -> bool {
        self.stamp.contains_key(&hash)
    }

    /// Leading blocks of `hashes` present.
    fn matched(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.contains(**h)).count()
    }

    /// Inserts `hash` or makes it the most recently used.
    fn touch(&mut self, hash: u64) {
        self.tick += 1;
        if let Some(old) = self.stamp.insert(hash, self.tick) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, hash);
    }

    /// Drops least recently used blocks until at most `capacity` remain.
    fn evict_to(&mut self, capacity: usize) {
        while self.stamp.len() > capacity {
            let Some((_, hash)) = self.order.pop_first() else {
                break;
            };
            self.stamp.remove(&hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Block size 2 tokens = 8 bytes in most tests.
    const BS: u32 = 2;

    fn key(text: &str) -> CacheKey {
        CacheKey::new(text.as_bytes(), BS)
    }

    fn messages(value: Value) -> Vec<ChatMessage> {
        serde_json::from_value(value).expect("messages")
    }

    #[test]
    fn tokens_are_four_bytes_rounded_up() {
        assert_eq!(token_count(0), 0);
        assert_eq!(token_count(1), 1);
        assert_eq!(token_count(4), 1);
        assert_eq!(token_count(5), 2);
        assert_eq!(Prompt::from_text("").tokens(), 1, "usage counts at least 1");
        assert_eq!(Prompt::from_text("tell me a story").tokens(), 4);
    }

    #[test]
    fn hashes_chain_over_full_blocks() {
        let text = b"0123456789abcdefXY";
        let hashes = block_hashes(text, BS);
        assert_eq!(hashes.len(), 2, "the trailing partial block has no hash");
        let first = xxh3_64_with_seed(b"01234567", 0);
        assert_eq!(hashes[0], first);
        assert_eq!(hashes[1], xxh3_64_with_seed(b"89abcdef", first));
        assert!(block_hashes(text, 0).is_empty());
        assert_eq!(block_hashes(&[b'x'; 64], 16).len(), 1);
        assert!(block_hashes(&[b'x'; 63], 16).is_empty());
    }

    #[test]
    fn renders_chat_content_strings_and_text_parts() {
        let chat = messages(json!([
            {"role": "system", "content": "abc", "name": "ignored"},
            {"role": "user", "content": [
                {"type": "text", "text": "de"},
                {"type": "image_url", "image_url": {"url": "x"}},
                {"type": "text", "text": "fg"}
            ]},
            {"role": "assistant", "content": null}
        ]));
        assert_eq!(render_chat(&chat), b"abc\ndefg\n\n");
        let prompt = Prompt::chat(&chat);
        assert_eq!(prompt.rendered, b"abc\ndefg\n\n");
        assert_eq!(prompt.tokens(), 3);
        // Roles do not matter.
        let other = messages(json!([
            {"role": "user", "content": "abc"},
            {"role": "user", "content": "defg"},
            {"role": "user", "content": ""}
        ]));
        assert_eq!(render_chat(&other), render_chat(&chat));
    }

    #[test]
    fn renders_completion_prompts_and_token_ids() {
        assert_eq!(render_prompt(&json!("abc")), Some(b"abc".to_vec()));
        assert_eq!(
            render_prompt(&json!(["first", "second"])),
            Some(b"first".to_vec())
        );
        assert_eq!(
            render_prompt(&json!([1, 258])),
            Some(vec![1, 0, 0, 0, 2, 1, 0, 0])
        );
        assert_eq!(render_prompt(&json!([[7], [8, 9]])), Some(vec![7, 0, 0, 0]));
        assert_eq!(
            render_prompts(&json!([[7], [8, 9]])),
            Some(vec![vec![7, 0, 0, 0], vec![8, 0, 0, 0, 9, 0, 0, 0]])
        );
        for bad in [
            json!([]),
            json!([1, "a"]),
            json!({"a": 1}),
            json!([-1]),
            json!(3),
        ] {
            assert_eq!(render_prompts(&bad), None, "{bad}");
            assert_eq!(Prompt::completion(&bad), None, "{bad}");
        }
        let prompts = Prompt::completion(&json!([1, 2, 3])).expect("ids");
        assert_eq!(prompts[0].text, "1 2 3");
        assert_eq!(prompts[0].tokens(), 3, "one token per id");
        let prompts = Prompt::completion(&json!(["one two", "three"])).expect("strings");
        assert_eq!(
            prompts.iter().map(Prompt::tokens).collect::<Vec<_>>(),
            [2, 2]
        );
        assert_eq!(CacheKey::of_prompts(&prompts, BS), key("one two"));
    }

    #[test]
    fn salted_keys_share_no_block_with_other_salts() {
        let text = b"0123456789abcdef";
        let plain = block_hashes(text, BS);
        let a = salted_block_hashes(text, BS, Some("a"));
        assert_eq!(a, salted_block_hashes(text, BS, Some("a")));
        assert!(a.iter().all(|h| !plain.contains(h)));
        assert!(a
            .iter()
            .all(|h| !salted_block_hashes(text, BS, Some("b")).contains(h)));
        let seed = xxh3_64_with_seed(b"a", 0);
        assert_eq!(a[0], xxh3_64_with_seed(b"01234567", seed));
    }

    #[test]
    fn shared_prefix_hits_and_divergent_suffix_misses() {
        let cache = PrefixCache::new(100, BS);
        let first = key("AAAAAAAABBBBBBBBCCCCCCCCDD");
        assert_eq!(
            cache.admit(&first),
            CacheHit {
                queried_tokens: 7,
                cached_tokens: 0
            }
        );
        assert_eq!(cache.len(), 3);
        // Same first two blocks, then a different third: only two hit.
        let second = key("AAAAAAAABBBBBBBBXXXXXXXXCCCCCCCC");
        assert_eq!(cache.admit(&second).cached_tokens, 4);
        // Diverges in block 0; block 1 has the same bytes but a different chain.
        let third = key("ZAAAAAAABBBBBBBBCCCCCCCC");
        assert_eq!(cache.peek(&third).cached_tokens, 0);
        // The same prompt again with one more partial block: all three blocks hit.
        let longer = key("AAAAAAAABBBBBBBBCCCCCCCCDDDD");
        assert_eq!(cache.admit(&longer).cached_tokens, 6);
    }

    #[test]
    fn partial_trailing_block_is_not_cached() {
        let cache = PrefixCache::new(100, BS);
        cache.admit(&key("AAAAAAAABBB"));
        assert_eq!(cache.len(), 1);
        // A prompt sharing the partial block's bytes still only hits block 0.
        let hit = cache.admit(&key("AAAAAAAABBBBBBBBC"));
        assert_eq!(hit.cached_tokens, 2);
        // Shorter than one block: nothing to cache.
        let tiny = PrefixCache::new(100, BS);
        tiny.admit(&key("AAAA"));
        assert!(tiny.is_empty());
    }

    #[test]
    fn full_hit_recomputes_the_last_block() {
        let cache = PrefixCache::new(100, BS);
        let exact = key("AAAAAAAABBBBBBBB");
        assert_eq!(exact.tokens, 4);
        assert_eq!(cache.admit(&exact).cached_tokens, 0);
        let again = cache.admit(&exact);
        assert_eq!(
            again,
            CacheHit {
                queried_tokens: 4,
                cached_tokens: 2
            }
        );
        assert_eq!(cached_tokens(2, 4, 2), 2);
        assert_eq!(cached_tokens(2, 5, 2), 4);
        assert_eq!(cached_tokens(1, 2, 2), 0);
        assert_eq!(cached_tokens(0, 0, 2), 0);
    }

    #[test]
    fn evicts_least_recently_used_and_touching_keeps_a_block() {
        let cache = PrefixCache::new(3, BS);
        let a = key("aaaaaaaa");
        let b = key("bbbbbbbb");
        let c = key("cccccccc");
        let d = key("dddddddd");
        for k in [&a, &b, &c] {
            cache.admit(k);
        }
        assert_eq!(cache.len(), 3);
        // Touch a (a hit), then insert d: b is the least recently used.
        let a_longer = key("aaaaaaaaX");
        assert_eq!(cache.admit(&a_longer).cached_tokens, 2);
        cache.admit(&d);
        assert_eq!(cache.len(), 3);
        let present = |k: &CacheKey| {
            cache
                .peek(&CacheKey {
                    tokens: 99,
                    ..k.clone()
                })
                .cached_tokens
                > 0
        };
        assert!(present(&a), "touched block stays");
        assert!(!present(&b), "least recently used block is evicted");
        assert!(present(&c));
        assert!(present(&d));
        // peek does not touch: c is still the oldest and goes next.
        cache.admit(&key("eeeeeeee"));
        assert!(!present(&c));
        assert!(present(&a));
    }

    #[test]
    fn a_prompt_longer_than_the_cache_keeps_its_head() {
        let cache = PrefixCache::new(2, BS);
        let long = key("AAAAAAAABBBBBBBBCCCCCCCCDDDDDDDD");
        cache.admit(&long);
        assert_eq!(cache.len(), 2);
        let prefix = key("AAAAAAAABBBBBBBBCCCCCCCC");
        assert_eq!(cache.peek(&prefix).cached_tokens, 4);
    }

    #[test]
    fn capacity_zero_disables_caching() {
        let cache = PrefixCache::new(0, BS);
        assert!(!cache.is_enabled());
        let k = key("AAAAAAAABBBBBBBBC");
        for _ in 0..3 {
            assert_eq!(cache.admit(&k), CacheHit::default());
        }
        assert!(cache.is_empty());
        assert_eq!(cache.peek(&k), CacheHit::default());
    }

    #[test]
    fn prefill_delay_is_uncached_tokens_over_rate() {
        assert_eq!(prefill_delay(4000, 4000.0), Duration::from_secs(1));
        assert_eq!(prefill_delay(100, 1000.0), Duration::from_millis(100));
        assert_eq!(prefill_delay(100, 0.0), Duration::ZERO, "0 is instant");
        assert_eq!(prefill_delay(0, 10.0), Duration::ZERO);
        assert_eq!(prefill_delay(u32::MAX, f64::MIN_POSITIVE), CENTURY);
    }
}
