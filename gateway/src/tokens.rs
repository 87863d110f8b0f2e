//! How many tokens a prompt is expected to take, before any engine has
//! tokenised it: the estimate admission control and token budgets charge.
//!
//! The rule, over the prompt's JSON as sent (`messages`, `prompt` or
//! `input`): ASCII bytes × 2 / 7, rounded up (about 3.5 characters a
//! token, on the safe side of the usual 4), plus one token per non-ASCII
//! character, plus 3 for a conversation, 4 per message and 256 per image.

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// Estimated prompt tokens of the raw JSON values `parts`.
pub fn estimate_prompt_tokens(parts: &[&str]) -> u64 {
    let mut ascii = 0u64;
    let mut other_chars = 0u64;
    let mut messages = 0u64;
    let mut images = 0u64;
    for part in parts {
        let bytes = part.as_bytes();
        let (non_ascii, continuation) = high_bytes(bytes);
        ascii += bytes.len() as u64 - non_ascii;
        other_chars += non_ascii - continuation;
        messages += keys(bytes, &ROLE);
        images += keys(bytes, &IMAGE_URL);
    }
    let conversation = if messages > 0 { 3 } else { 0 };
    (ascii * 2).div_ceil(7) + other_chars + conversation + 4 * messages + 256 * images
}

/// Bytes with the high bit set, and those of them that continue a UTF-8
/// character (`10xxxxxx`). Blocks of plain ASCII, what most prompts are
/// made of, are skipped by the standard library's word-wide check; the
/// others are counted in byte lanes the compiler vectorises.
fn high_bytes(bytes: &[u8]) -> (u64, u64) {
    const BLOCK: usize = 4096;
    let (mut high, mut continuation) = (0u64, 0u64);
    for block in bytes.chunks(BLOCK) {
        if block.is_ascii() {
            continue;
        }
        // Counters of one byte each cannot overflow over 255 bytes.
        for lane in block.chunks(255) {
            let (mut h, mut c) = (0u8, 0u8);
            for &b in lane {
                h += b >> 7;
                c += u8::from(b & 0xC0 == 0x80);
            }
            high += u64::from(h);
            continuation += u64::from(c);
        }
    }
    (high, continuation)
}

/// The JSON keys the estimate counts, with their searchers built once.
static ROLE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"role\""));
static IMAGE_URL: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"image_url\""));

/// Occurrences of the quoted key `finder` looks for, used as an object
/// key (followed by `:`).
fn keys(bytes: &[u8], finder: &Finder<'_>) -> u64 {
    let len = finder.needle().len();
    finder
        .find_iter(bytes)
        .filter(|at| {
            let after = flexinfer_jsonscan::skip_ws(bytes, at + len);
            bytes.get(after) == Some(&b':')
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn high_bytes_are_counted_at_every_offset() {
        let text = "aé€𝄞b".repeat(5);
        for start in 0..text.len() {
            let Some(tail) = text.get(start..) else {
                continue;
            };
            let bytes = tail.as_bytes();
            let high = bytes.iter().filter(|b| **b >= 0x80).count() as u64;
            let cont = bytes.iter().filter(|b| **b & 0xC0 == 0x80).count() as u64;
            assert_eq!(high_bytes(bytes), (high, cont), "from {start}");
        }
    }

    #[test]
    fn high_bytes_are_counted_across_ascii_blocks_and_lanes() {
        // Non-ASCII text around the 4 KiB block and 255-byte lane edges,
        // long ASCII runs between, and an all-high block.
        let mut text = "x".repeat(4090);
        text.push_str(&"é€".repeat(300));
        text.push_str(&"y".repeat(9000));
        text.push('𝄞');
        text.push_str(&"中".repeat(2000));
        for end in [0, 1, 4095, 4096, 4097, 5000, 14_000, text.len()] {
            let Some(part) = text.get(..end) else {
                continue;
            };
            let bytes = part.as_bytes();
            let high = bytes.iter().filter(|b| **b >= 0x80).count() as u64;
            let cont = bytes.iter().filter(|b| **b & 0xC0 == 0x80).count() as u64;
            assert_eq!(high_bytes(bytes), (high, cont), "up to {end}");
        }
    }

    #[test]
    fn counts_bytes_characters_messages_and_images() {
        assert_eq!(estimate_prompt_tokens(&[]), 0);
        // 7 ASCII bytes: 2 tokens.
        assert_eq!(estimate_prompt_tokens(&["\"hello\""]), 2);
        // 2 quotes (1 token after rounding) + 2 two-byte characters.
        assert_eq!(estimate_prompt_tokens(&["\"éé\""]), 1 + 2);
        let chat = r#"[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]"#;
        let ascii = chat.len() as u64;
        assert_eq!(
            estimate_prompt_tokens(&[chat]),
            (ascii * 2).div_ceil(7) + 3 + 4 + 256
        );
    }
}
