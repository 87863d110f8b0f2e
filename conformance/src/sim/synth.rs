//! Deterministic stand-ins for model output: token counts, generated text,
//! embedding vectors and images.
//!
//! Everything here is a pure function of its input, so tests can assert exact
//! outputs and two simulated replicas answer the same request identically.

use sha2::{Digest, Sha256};

/// Words the generated text is drawn from; each one is one token.
const WORDS: &[&str] = &[
    "the",
    "model",
    "answers",
    "with",
    "simulated",
    "tokens",
    "that",
    "arrive",
    "at",
    "a",
    "steady",
    "pace",
    "while",
    "gateway",
    "routes",
    "each",
    "request",
    "to",
    "one",
    "replica",
    "of",
    "many",
    "and",
    "cache",
    "keeps",
    "prefix",
    "state",
    "warm",
    "so",
    "latency",
    "stays",
    "low",
    "for",
    "every",
    "user",
    "who",
    "asks",
    "about",
    "clusters",
    "nodes",
    "adapters",
    "streams",
    "chunks",
    "events",
    "queues",
    "wait",
    "their",
    "turn",
    "before",
    "decoding",
];

/// Tokens a text counts as: its whitespace-separated words.
pub fn count_tokens(text: &str) -> u32 {
    u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX)
}

/// Length in bytes of the longest vocabulary word.
pub const MAX_WORD_LEN: usize = 9;

/// The vocabulary by length and last letter: bit `i` of entry
/// `len * 26 + (last - b'a')` is set for word `i`.
const WORD_INDEX: [u64; (MAX_WORD_LEN + 1) * 26] = {
    assert!(WORDS.len() <= 64);
    let mut index = [0u64; (MAX_WORD_LEN + 1) * 26];
    let mut i = 0;
    while i < WORDS.len() {
        let word = WORDS[i].as_bytes();
        index[word.len() * 26 + (word[word.len() - 1] - b'a') as usize] |= 1 << i;
        i += 1;
    }
    index
};

/// Whether `text` is one vocabulary word (one generated token without its space).
pub fn is_word(text: &str) -> bool {
    let bytes = text.as_bytes();
    let Some(last) = bytes.last().filter(|b| b.is_ascii_lowercase()) else {
        return false;
    };
    if bytes.len() > MAX_WORD_LEN {
        return false;
    }
    let mut candidates = WORD_INDEX[bytes.len() * 26 + usize::from(last - b'a')];
    while candidates != 0 {
        if WORDS[candidates.trailing_zeros() as usize] == text {
            return true;
        }
        candidates &= candidates - 1;
    }
    false
}

/// A stable 64-bit seed for a model and prompt (FNV-1a), independent of process and platform.
pub fn seed(model: &str, prompt: &str) -> u64 {
    let state = seed_extend(0xcbf2_9ce4_8422_2325, model.as_bytes());
    seed_extend(seed_extend(state, &[0]), prompt.as_bytes())
}

/// FNV-1a is a rolling hash: `seed(m, a + b) == seed_extend(seed(m, a), b)`,
/// so the seeds of all prefixes of a text come from one pass over it.
pub fn seed_extend(mut state: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        state ^= u64::from(*byte);
        state = state.wrapping_mul(0x0100_0000_01b3);
    }
    state
}

/// SplitMix64: a tiny, well-mixed step function for deterministic streams of numbers.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Word `n` (modulo the vocabulary) of the generated text's vocabulary.
pub fn word(n: u64) -> &'static str {
    WORDS[(n % WORDS.len() as u64) as usize]
}

/// The text of generated token `index` of the text seeded by `seed`: a word,
/// preceded by a space except for the first token.
pub fn token_text(seed: u64, index: u32) -> String {
    let word = token_word(seed, index);
    if index == 0 {
        word.to_owned()
    } else {
        format!(" {word}")
    }
}

/// The word of generated token `index` of the text seeded by `seed` (its text without the space).
pub fn token_word(seed: u64, index: u32) -> &'static str {
    let mut state = seed ^ u64::from(index).rotate_left(32);
    WORDS[(splitmix64(&mut state) % WORDS.len() as u64) as usize]
}

/// The full text of `tokens` generated tokens seeded by `seed`.
pub fn completion_text(seed: u64, tokens: u32) -> String {
    (0..tokens).map(|i| token_text(seed, i)).collect()
}

/// A unit-length embedding of `dim` values derived from the SHA-256 of `input`.
pub fn embedding(input: &str, dim: usize) -> Vec<f32> {
    let digest = Sha256::digest(input.as_bytes());
    let mut state = digest
        .iter()
        .take(8)
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    let mut vector: Vec<f32> = (0..dim)
        .map(|_| {
            // 24 random bits mapped onto [-1, 1).
            let bits = (splitmix64(&mut state) >> 40) as f32;
            bits / (1u32 << 23) as f32 - 1.0
        })
        .collect();
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
    vector
}

/// Side length in pixels of generated images.
pub const IMAGE_SIZE: u32 = 8;

/// A small, valid PNG (8×8, one colour derived from `prompt`).
pub fn png(prompt: &str) -> Vec<u8> {
    let digest = Sha256::digest(prompt.as_bytes());
    let rgb = [digest[0], digest[1], digest[2]];
    // Each scanline: filter byte 0, then the RGB pixels.
    let side = IMAGE_SIZE as usize;
    let scanline: Vec<u8> = std::iter::once(0)
        .chain(rgb.iter().copied().cycle().take(3 * side))
        .collect();
    let raw = scanline.repeat(side);
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&IMAGE_SIZE.to_be_bytes());
    ihdr.extend_from_slice(&IMAGE_SIZE.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit depth, truecolour, deflate, no filter, no interlace
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    push_chunk(&mut out, b"IHDR", &ihdr);
    push_chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    push_chunk(&mut out, b"IEND", &[]);
    out
}

fn push_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream holding `data` in one uncompressed deflate block (`data` < 64 KiB).
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let len = data.len() as u16;
    let mut out = vec![0x78, 0x01, 0x01];
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(data);
    let (mut a, mut b) = (1u32, 0u32);
    for byte in data {
        a = (a + u32::from(*byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_deterministic_and_counts_as_tokens() {
        let s = seed("m", "hello world");
        let text = completion_text(s, 7);
        assert_eq!(text, completion_text(s, 7));
        assert_eq!(count_tokens(&text), 7);
        assert!(!text.starts_with(' '));
        assert_ne!(seed("m", "a"), seed("m", "b"));
        assert_eq!(count_tokens(""), 0);
        // Pinned: the text of existing requests never changes.
        assert_eq!(s, 0x8994_a826_43d4_6494);
        assert_eq!(text, "prefix clusters prefix simulated so that prefix");
        assert_eq!(seed_extend(seed("m", "hello "), b"world"), s);
    }

    #[test]
    fn the_vocabulary_is_lowercase_words_of_bounded_length() {
        assert!(WORDS.iter().all(|w| is_word(w)));
        assert!(WORDS
            .iter()
            .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase())));
        assert_eq!(WORDS.iter().map(|w| w.len()).max(), Some(MAX_WORD_LEN));
        assert!(is_word("at") && is_word("that") && is_word("a"));
        for other in ["", "ta", "hat", "thee", "The", "the ", "simulate", "é"] {
            assert!(!is_word(other), "{other:?}");
        }
    }

    #[test]
    fn embeddings_are_unit_length_and_stable() {
        let a = embedding("hello", 64);
        assert_eq!(a.len(), 64);
        assert_eq!(a, embedding("hello", 64));
        assert_ne!(a, embedding("hello!", 64));
        let norm: f32 = a.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }

    #[test]
    fn png_chunks_carry_valid_crcs() {
        let image = png("a cat");
        assert!(image.starts_with(b"\x89PNG\r\n\x1a\n"));
        let mut pos = 8;
        let mut kinds = Vec::new();
        while pos < image.len() {
            let len = u32::from_be_bytes(image[pos..pos + 4].try_into().expect("len")) as usize;
            let body = &image[pos + 4..pos + 8 + len];
            let crc = u32::from_be_bytes(
                image[pos + 8 + len..pos + 12 + len]
                    .try_into()
                    .expect("crc"),
            );
            assert_eq!(crc, crc32fast::hash(body));
            kinds.push(String::from_utf8_lossy(&body[..4]).into_owned());
            pos += 12 + len;
        }
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
    }
}
