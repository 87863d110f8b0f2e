//! Skipping objects and arrays 64 bytes at a time.

use crate::{error, ScanError};

/// Bytes per [`Block`]: one bit of each mask per byte, lowest bit first.
pub const BLOCK: usize = 64;

/// Where a block of [`BLOCK`] bytes has quotes, backslashes and the two
/// brackets of one kind.
#[derive(Debug, PartialEq, Eq)]
struct Block {
    quotes: u64,
    backslashes: u64,
    opens: u64,
    closes: u64,
}

impl Block {
    /// The four masks, in the order quotes, backslashes, opens, closes.
    fn from_masks([quotes, backslashes, opens, closes]: [u64; 4]) -> Block {
        Block {
            quotes,
            backslashes,
            opens,
            closes,
        }
    }

    /// Classifies `bytes` with SSE2, which every x86-64 CPU has.
    #[cfg(target_arch = "x86_64")]
    fn new(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        let mut masks = [0u64; 4];
        for (k, chunk) in bytes.chunks_exact(16).enumerate() {
            // SAFETY: SSE2 is part of the x86-64 baseline, and `chunk` is
            // 16 readable bytes (unaligned loads are allowed).
            unsafe {
                let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
                for (mask, byte) in masks.iter_mut().zip([b'"', b'\\', open, close]) {
                    let eq = _mm_cmpeq_epi8(v, _mm_set1_epi8(byte as i8));
                    *mask |= u64::from(_mm_movemask_epi8(eq) as u16) << (16 * k);
                }
            }
        }
        Block::from_masks(masks)
    }

    /// Classifies `bytes` with AVX2, 32 bytes per instruction.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn avx2(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        use std::arch::x86_64::{
            __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_set1_epi8,
        };
        let mut masks = [0u64; 4];
        for (k, chunk) in bytes.chunks_exact(32).enumerate() {
            // SAFETY: `chunk` is 32 readable bytes (unaligned loads are
            // allowed).
            let v = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast::<__m256i>()) };
            for (mask, byte) in masks.iter_mut().zip([b'"', b'\\', open, close]) {
                let eq = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(byte as i8));
                *mask |= u64::from(_mm256_movemask_epi8(eq) as u32) << (32 * k);
            }
        }
        Block::from_masks(masks)
    }

    /// Classifies `bytes` with AVX-512BW: one compare per mask.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn avx512(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        use std::arch::x86_64::{
            __m512i, _mm512_cmpeq_epi8_mask, _mm512_loadu_si512, _mm512_set1_epi8,
        };
        // SAFETY: `bytes` is 64 readable bytes (unaligned loads are
        // allowed).
        let v = unsafe { _mm512_loadu_si512(bytes.as_ptr().cast::<__m512i>()) };
        let mask = |byte: u8| _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(byte as i8));
        Block::from_masks([mask(b'"'), mask(b'\\'), mask(open), mask(close)])
    }

    /// Classifies `bytes` with [`Block::portable`].
    #[cfg(not(target_arch = "x86_64"))]
    fn new(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        Block::portable(bytes, open, close)
    }

    /// Classifies `bytes` eight at a time in plain integer arithmetic (the
    /// path for other targets, and the reference in tests).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn portable(bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        let mut masks = [0u64; 4];
        for (k, chunk) in bytes.chunks_exact(8).enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let word = u64::from_le_bytes(word);
            for (mask, byte) in masks.iter_mut().zip([b'"', b'\\', open, close]) {
                *mask |= byte_bits(word, byte) << (8 * k);
            }
        }
        Block::from_masks(masks)
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const LOWS: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// Bit `k` set where byte `k` of `word` (little-endian) equals `byte`.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn byte_bits(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    // High bit of each byte set exactly where that byte of `x` is zero.
    let zero = !(((x & LOWS) + LOWS) | x) & !LOWS;
    // Gather the eight high bits into the low byte.
    ((zero >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
}

/// Bit `i` of the result is the XOR of bits `0..=i` of `x`.
fn prefix_xor(mut x: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        x ^= x << shift;
    }
    x
}

/// The offset just after the object or array opening at `at`, 64 bytes at
/// a time: each block is classified into bit masks, escaped quotes are
/// dropped, the bytes inside strings found by a prefix XOR of the quotes,
/// and the brackets outside strings counted. Only its own bracket kind is
/// counted: in well-formed JSON each kind balances on its own.
pub fn container_end(bytes: &[u8], at: usize, open: u8, close: u8) -> Result<usize, ScanError> {
    container_end_from(bytes, at, open, close, 0)
}

/// Like [`container_end`], starting `depth` brackets deep at `at` (outside
/// any string): with depth 1, the offset after the bracket that closes
/// the container `at` is in.
pub fn container_end_from(
    bytes: &[u8],
    at: usize,
    open: u8,
    close: u8,
    depth: usize,
) -> Result<usize, ScanError> {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(avx512) = Avx512::detect() {
            // SAFETY: `Avx512::detect` found AVX-512BW, POPCNT and
            // PCLMULQDQ on this CPU.
            return unsafe { container_end_avx512(avx512, bytes, at, open, close, depth) };
        }
        if let Some(avx2) = Avx2::detect() {
            // SAFETY: `Avx2::detect` found AVX2 and POPCNT on this CPU.
            return unsafe { container_end_avx2(avx2, bytes, at, open, close, depth) };
        }
    }
    container_end_with(Baseline, bytes, at, open, close, depth)
}

/// [`container_end`] compiled for AVX-512BW, POPCNT and PCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,popcnt,pclmulqdq")]
fn container_end_avx512(
    avx512: Avx512,
    bytes: &[u8],
    at: usize,
    open: u8,
    close: u8,
    depth: usize,
) -> Result<usize, ScanError> {
    container_end_with(avx512, bytes, at, open, close, depth)
}

/// [`container_end`] compiled for AVX2 and POPCNT (bracket counts are
/// population counts).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn container_end_avx2(
    avx2: Avx2,
    bytes: &[u8],
    at: usize,
    open: u8,
    close: u8,
    depth: usize,
) -> Result<usize, ScanError> {
    container_end_with(avx2, bytes, at, open, close, depth)
}

/// How blocks are classified: one implementation per instruction set.
trait Classify: Copy {
    fn classify(self, bytes: &[u8; BLOCK], open: u8, close: u8) -> Block;

    /// Bit `i` of the result is the XOR of bits `0..=i` of `x`.
    #[inline(always)]
    fn prefix_xor(self, x: u64) -> u64 {
        prefix_xor(x)
    }
}

/// The instructions every CPU of the target has.
#[derive(Clone, Copy)]
struct Baseline;

impl Classify for Baseline {
    #[inline(always)]
    fn classify(self, bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        Block::new(bytes, open, close)
    }
}

/// Proof that the CPU has AVX2 and POPCNT: only [`Avx2::detect`] makes one.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Avx2 {
    fn detect() -> Option<Avx2> {
        (std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("popcnt"))
            .then_some(Avx2(()))
    }
}

/// Proof that the CPU has AVX-512BW, POPCNT and PCLMULQDQ: only
/// [`Avx512::detect`] makes one.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx512(());

#[cfg(target_arch = "x86_64")]
impl Avx512 {
    fn detect() -> Option<Avx512> {
        (std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("popcnt")
            && std::is_x86_feature_detected!("pclmulqdq"))
        .then_some(Avx512(()))
    }
}

#[cfg(target_arch = "x86_64")]
impl Classify for Avx512 {
    #[inline(always)]
    fn classify(self, bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        // SAFETY: an `Avx512` exists only on a CPU with AVX-512BW.
        unsafe { Block::avx512(bytes, open, close) }
    }

    /// A carry-less multiplication by all ones is the prefix XOR.
    #[inline(always)]
    fn prefix_xor(self, x: u64) -> u64 {
        use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_set_epi64x};
        // SAFETY: an `Avx512` exists only on a CPU with PCLMULQDQ.
        unsafe {
            let product =
                _mm_clmulepi64_si128(_mm_set_epi64x(0, x as i64), _mm_set_epi64x(0, -1), 0);
            _mm_cvtsi128_si64(product) as u64
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    #[inline(always)]
    fn classify(self, bytes: &[u8; BLOCK], open: u8, close: u8) -> Block {
        // SAFETY: an `Avx2` exists only on a CPU with AVX2.
        unsafe { Block::avx2(bytes, open, close) }
    }
}

#[inline(always)]
fn container_end_with(
    classify: impl Classify,
    bytes: &[u8],
    at: usize,
    open: u8,
    close: u8,
    mut depth: usize,
) -> Result<usize, ScanError> {
    // All ones while inside a string across a block boundary.
    let mut in_string = 0u64;
    // Whether the first byte of the next block is escaped.
    let mut escaped_carry = 0u64;
    let mut i = at;
    let mut padded = [b' '; BLOCK];
    while i < bytes.len() {
        let block: &[u8; BLOCK] = match bytes.get(i..i + BLOCK) {
            Some(full) => full.try_into().map_err(|_| error("a value", i))?,
            None => {
                let tail = bytes.get(i..).unwrap_or_default();
                for (byte, &b) in padded.iter_mut().zip(tail) {
                    *byte = b;
                }
                &padded
            }
        };
        let Block {
            quotes,
            backslashes,
            opens,
            closes,
        } = classify.classify(block, open, close);

        let mut escaped = escaped_carry;
        escaped_carry = 0;
        let mut rest = backslashes & !escaped;
        while rest != 0 {
            let bit = rest.trailing_zeros();
            if bit == 63 {
                escaped_carry = 1;
            } else {
                escaped |= 1 << (bit + 1);
            }
            // The byte after a backslash is escaped, even a backslash.
            rest &= !(1 << bit) & !escaped;
        }

        let strings = classify.prefix_xor(quotes & !escaped) ^ in_string;
        if strings == u64::MAX && escaped_carry == 0 {
            // A whole block of string text: the string is long (a prompt,
            // a document), so find its next quote or backslash with a
            // plain byte search, faster than classifying every block. The
            // next block starts there, still inside the string.
            match memchr::memchr2(b'"', b'\\', bytes.get(i + BLOCK..).unwrap_or_default()) {
                Some(k) => {
                    in_string = u64::MAX;
                    i += BLOCK + k;
                    continue;
                }
                None => break,
            }
        }
        in_string = ((strings as i64) >> 63) as u64;
        let opens = opens & !strings;
        let closes = closes & !strings;
        // The depth can only reach zero in a block with at least as many
        // closing brackets as the depth; otherwise count them all at once.
        let close_count = closes.count_ones() as usize;
        if close_count < depth {
            depth = depth + opens.count_ones() as usize - close_count;
            i += BLOCK;
            continue;
        }
        let mut brackets = opens | closes;
        while brackets != 0 {
            let bit = brackets.trailing_zeros();
            brackets &= brackets - 1;
            if opens & (1 << bit) != 0 {
                depth += 1;
            } else {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Ok(i + bit as usize + 1);
                }
            }
        }
        i += BLOCK;
    }
    Err(error("a closing bracket", at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn block_classification_matches_bytes() {
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let alphabet = b"\"\\{}[]a \x80\xff\x00";
        for _ in 0..500 {
            let mut bytes = [0u8; BLOCK];
            for byte in &mut bytes {
                *byte = alphabet[rng.usize(..alphabet.len())];
            }
            let bits = |wanted: u8| {
                bytes
                    .iter()
                    .enumerate()
                    .filter(|(_, &b)| b == wanted)
                    .fold(0u64, |mask, (k, _)| mask | 1 << k)
            };
            let expected = Block {
                quotes: bits(b'"'),
                backslashes: bits(b'\\'),
                opens: bits(b'{'),
                closes: bits(b'}'),
            };
            assert_eq!(Block::new(&bytes, b'{', b'}'), expected);
            assert_eq!(Block::portable(&bytes, b'{', b'}'), expected);
            #[cfg(target_arch = "x86_64")]
            if let Some(avx2) = Avx2::detect() {
                assert_eq!(avx2.classify(&bytes, b'{', b'}'), expected);
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(avx512) = Avx512::detect() {
                assert_eq!(avx512.classify(&bytes, b'{', b'}'), expected);
                let x = u64::from_le_bytes(bytes[..8].try_into().unwrap());
                assert_eq!(avx512.prefix_xor(x), prefix_xor(x));
            }
        }
    }

    /// A random JSON value nested up to `depth` levels, with strings that
    /// hold brackets, quotes and backslashes.
    fn random_value(rng: &mut fastrand::Rng, depth: usize) -> Value {
        let pieces = ["{", "}", "[", "]", "\\", "\"", "x", "long text "];
        match if depth == 0 {
            rng.usize(..2)
        } else {
            rng.usize(..4)
        } {
            0 => Value::String(
                (0..rng.usize(..12))
                    .map(|_| pieces[rng.usize(..pieces.len())])
                    .collect(),
            ),
            1 => json!(rng.usize(..1000)),
            2 => Value::Array(
                (0..rng.usize(..5))
                    .map(|_| random_value(rng, depth - 1))
                    .collect(),
            ),
            _ => Value::Object(
                (0..rng.usize(..5))
                    .map(|k| (format!("k{k}"), random_value(rng, depth - 1)))
                    .collect(),
            ),
        }
    }

    #[test]
    fn long_strings_end_where_serde_says() {
        // Strings over a block long take the byte-search path; escapes and
        // brackets at every offset around block boundaries.
        for len in [63usize, 64, 65, 127, 128, 129, 200, 300] {
            for at in (0..len).step_by(7) {
                for tricky in ["\\\"", "\\\\", "}]", "\\\\\\\"{"] {
                    let mut text = "x".repeat(len);
                    text.insert_str(at, tricky);
                    let value = json!({"a": [text, {"b": text}], "c": "}", "d": [text]});
                    let raw = value.to_string();
                    let body = format!("{raw}}}]");
                    assert_eq!(
                        container_end(body.as_bytes(), 0, b'{', b'}'),
                        Ok(raw.len()),
                        "{raw}"
                    );
                    let list = format!("[{raw},{raw}]");
                    let end = container_end(list.as_bytes(), 0, b'[', b']');
                    assert_eq!(end, Ok(list.len()), "{list}");
                }
            }
            let unterminated = format!("{{\"a\":\"{}", "x".repeat(len));
            assert!(container_end(unterminated.as_bytes(), 0, b'{', b'}').is_err());
        }
    }

    #[test]
    fn deeply_nested_containers_end_where_serde_says() {
        let mut rng = fastrand::Rng::with_seed(0x51_7cc1_b727_220a);
        for _ in 0..400 {
            let value = random_value(&mut rng, 8);
            for text in [
                value.to_string(),
                serde_json::to_string_pretty(&value).unwrap(),
            ] {
                let body = format!("{text} ,[]}}");
                let end = crate::value_end(body.as_bytes(), 0).unwrap();
                assert_eq!(end, text.len(), "{text}");
                // The baseline path too, wherever the CPU would pick AVX2.
                let brackets = match value {
                    Value::Object(_) => Some((b'{', b'}')),
                    Value::Array(_) => Some((b'[', b']')),
                    _ => None,
                };
                if let Some((open, close)) = brackets {
                    let end = container_end_with(Baseline, body.as_bytes(), 0, open, close, 0);
                    assert_eq!(end, Ok(text.len()), "{text}");
                    #[cfg(target_arch = "x86_64")]
                    if let Some(avx2) = Avx2::detect() {
                        // SAFETY: detected.
                        let end =
                            unsafe { container_end_avx2(avx2, body.as_bytes(), 0, open, close, 0) };
                        assert_eq!(end, Ok(text.len()), "{text}");
                    }
                }
            }
        }
    }
}
