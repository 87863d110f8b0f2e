//! Text normalisation and short hex digests for routing keys.

use sha2::{Digest, Sha256};

/// Streams text into a hasher lower-cased, with runs of whitespace collapsed
/// to one space, leading and trailing whitespace dropped, and cut after
/// `limit` characters; equivalent to hashing the normalised string, without
/// building it.
pub(super) struct Normalizer {
    limit: usize,
    emitted: usize,
    pending_space: bool,
    buf: [u8; 256],
    len: usize,
}

impl Normalizer {
    pub(super) fn new(limit: usize) -> Self {
        Normalizer {
            limit,
            emitted: 0,
            pending_space: false,
            buf: [0; 256],
            len: 0,
        }
    }

    /// Characters written so far; zero means the text was empty or blank.
    pub(super) fn emitted(&self) -> usize {
        self.emitted
    }

    /// Appends `text`; text arriving in several pieces normalises as if it
    /// had come in one.
    pub(super) fn push(&mut self, text: &str, out: &mut Sha256) {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() && self.emitted < self.limit {
            let b = bytes[i];
            if b.is_ascii() {
                // ASCII fast path: the bulk of prompts.
                i += 1;
                if matches!(b, b' ' | b'\t'..=b'\r') {
                    self.pending_space = self.emitted > 0;
                    continue;
                }
                if std::mem::take(&mut self.pending_space) {
                    self.put_ascii(b' ', out);
                    if self.emitted >= self.limit {
                        break;
                    }
                }
                self.put_ascii(b.to_ascii_lowercase(), out);
                continue;
            }
            let Some(c) = text[i..].chars().next() else {
                break;
            };
            i += c.len_utf8();
            if c.is_whitespace() {
                self.pending_space = self.emitted > 0;
                continue;
            }
            if std::mem::take(&mut self.pending_space) {
                self.put_ascii(b' ', out);
            }
            for lower in c.to_lowercase() {
                self.put_char(lower, out);
            }
        }
    }

    /// Writes out what is buffered; call once the text is complete.
    pub(super) fn finish(&mut self, out: &mut Sha256) {
        out.update(&self.buf[..self.len]);
        self.len = 0;
    }

    #[inline(always)]
    fn put_ascii(&mut self, b: u8, out: &mut Sha256) {
        if self.len == self.buf.len() {
            self.finish(out);
        }
        self.buf[self.len] = b;
        self.len += 1;
        self.emitted += 1;
    }

    fn put_char(&mut self, c: char, out: &mut Sha256) {
        if self.emitted >= self.limit {
            return;
        }
        if self.len + 4 > self.buf.len() {
            self.finish(out);
        }
        self.len += c.encode_utf8(&mut self.buf[self.len..]).len();
        self.emitted += 1;
    }
}

/// `prefix` followed by the first 16 hex digits (64 bits) of the digest:
/// short enough for logs, wide enough that distinct keys do not collide in
/// practice.
pub(super) fn short_key(prefix: &str, hasher: Sha256) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = hasher.finalize();
    let mut key = String::with_capacity(prefix.len() + 16);
    key.push_str(prefix);
    for byte in &digest[..8] {
        key.push(char::from(HEX[usize::from(byte >> 4)]));
        key.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    key
}

/// Hashes the normalised `text` with `label` in front; `None` when nothing
/// is left after normalisation.
pub(super) fn normalized_key(
    prefix: &str,
    label: &[u8],
    text: &str,
    limit: usize,
) -> Option<String> {
    let mut hasher = Sha256::new();
    hasher.update(label);
    let mut norm = Normalizer::new(limit);
    norm.push(text, &mut hasher);
    norm.finish(&mut hasher);
    (norm.emitted() > 0).then(|| short_key(prefix, hasher))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(text: &[&str], limit: usize) -> String {
        // Reference: the normalised string, built the slow way.
        let joined: String = text.concat();
        let collapsed = joined.split_whitespace().collect::<Vec<_>>().join(" ");
        collapsed
            .chars()
            .flat_map(char::to_lowercase)
            .take(limit)
            .collect()
    }

    fn streamed_digest(text: &[&str], limit: usize) -> Vec<u8> {
        let mut hasher = Sha256::new();
        let mut norm = Normalizer::new(limit);
        for piece in text {
            norm.push(piece, &mut hasher);
        }
        norm.finish(&mut hasher);
        hasher.finalize().to_vec()
    }

    #[test]
    fn streaming_matches_the_normalised_string() {
        let cases: &[&[&str]] = &[
            &["  Hello\n\n  World\t "],
            &["Hel", "lo  ", "  wor", "LD"],
            &["ÄÖÜ İstanbul ΣΑΣ"],
            &["a\u{a0}\u{2003}B\u{85}", "\u{3000}Ü x"],
            &["x İ"],
            &[""],
            &["   \n\t"],
            &[&"abc ".repeat(300)],
        ];
        for text in cases {
            for limit in [1, 5, 512] {
                let expected = Sha256::digest(normalized(text, limit).as_bytes()).to_vec();
                assert_eq!(streamed_digest(text, limit), expected, "{text:?} / {limit}");
            }
        }
    }

    #[test]
    fn blank_text_emits_nothing() {
        let mut hasher = Sha256::new();
        let mut norm = Normalizer::new(10);
        norm.push(" \n\t ", &mut hasher);
        assert_eq!(norm.emitted(), 0);
        assert_eq!(normalized_key("x:", b"", "  ", 10), None);
    }

    #[test]
    fn short_key_is_prefix_and_sixteen_hex_digits() {
        let key = short_key("exp:", Sha256::new());
        // sha256("") = e3b0c44298fc1c14...
        assert_eq!(key, "exp:e3b0c44298fc1c14");
    }
}
