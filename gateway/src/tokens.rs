//! How many tokens a prompt is expected to take, before any engine has
//! tokenised it: the estimate admission control and token budgets charge.
//!
//! The rule, over the prompt's JSON as sent (`messages`, `prompt` or
//! `input`): ASCII bytes × 2 / 7, rounded up (about 3.5 characters a
//! token, on the safe side of the usual 4), plus one token per non-ASCII
//! character, plus 3 for a conversation, 4 per message and 256 per image.

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
        messages += keys(bytes, b"\"role\"");
        images += keys(bytes, b"\"image_url\"");
    }
    let conversation = if messages > 0 { 3 } else { 0 };
    (ascii * 2).div_ceil(7) + other_chars + conversation + 4 * messages + 256 * images
}

/// Bytes with the high bit set, and those of them that continue a UTF-8
/// character (`10xxxxxx`), counted eight at a time.
fn high_bytes(bytes: &[u8]) -> (u64, u64) {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let (mut high, mut continuation) = (0u64, 0u64);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        high += u64::from((w & HIGH).count_ones());
        // Bit 7 set and bit 6 clear: bit 6 shifted up is bit 7's neighbour.
        continuation += u64::from((w & !(w << 1) & HIGH).count_ones());
    }
    for &b in words.remainder() {
        high += u64::from(b >> 7);
        continuation += u64::from(b & 0xC0 == 0x80);
    }
    (high, continuation)
}

/// Occurrences of the quoted `key` used as an object key (followed by `:`).
fn keys(bytes: &[u8], key: &[u8]) -> u64 {
    memchr::memmem::find_iter(bytes, key)
        .filter(|at| {
            let after = flexinfer_jsonscan::skip_ws(bytes, at + key.len());
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
