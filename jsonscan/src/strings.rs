//! Short-string primitives of the scanner, 16 bytes at a time.
//!
//! Label keys and values, names and versions are mostly under 64 bytes:
//! for them a call into a general byte searcher costs more than the
//! search. These loops use SSE2, which every x86-64 CPU has; other targets
//! use `memchr` and the standard library.

/// Bytes searched 16 at a time before handing long strings to `memchr`.
const SHORT: usize = 64;

/// The offset of the first `"` or `\` at or after `from`.
#[inline]
pub fn find_quote_or_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        let mut i = from;
        while i - from < SHORT {
            let Some(chunk) = bytes.get(i..i + 16) else {
                break;
            };
            // SAFETY: SSE2 is part of the x86-64 baseline, and `chunk` is
            // 16 readable bytes (unaligned loads are allowed).
            let mask = unsafe {
                let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
                let quotes = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
                let backslashes = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
                _mm_movemask_epi8(_mm_or_si128(quotes, backslashes)) as u32
            };
            if mask != 0 {
                return Some(i + mask.trailing_zeros() as usize);
            }
            i += 16;
        }
        memchr::memchr2(b'"', b'\\', bytes.get(i..)?).map(|k| i + k)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        memchr::memchr2(b'"', b'\\', bytes.get(from..)?).map(|k| from + k)
    }
}

/// `bytes` as text when they are ASCII without backslashes: the contents
/// of a JSON string that need neither decoding nor a UTF-8 check.
#[inline]
pub fn plain_ascii(bytes: &[u8]) -> Option<&str> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        let mut chunks = bytes.chunks_exact(16);
        for chunk in &mut chunks {
            // SAFETY: SSE2 is part of the x86-64 baseline, and `chunk` is
            // 16 readable bytes. The mask has a bit for every byte that is
            // a backslash or has its high bit set (not ASCII).
            let mask = unsafe {
                let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
                let backslashes = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
                _mm_movemask_epi8(_mm_or_si128(v, backslashes))
            };
            if mask != 0 {
                return None;
            }
        }
        if !chunks.remainder().iter().all(|&b| b < 0x80 && b != b'\\') {
            return None;
        }
        // SAFETY: every byte was checked to be ASCII, which is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        if bytes.contains(&b'\\') {
            return None;
        }
        std::str::from_utf8(bytes)
            .ok()
            .filter(|text| text.is_ascii())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_quote_or_backslash_at_any_offset_and_length() {
        for len in 0..200 {
            for special in [None, Some(b'"'), Some(b'\\')] {
                for at in 0..len.min(90) {
                    let mut bytes = vec![b'a'; len];
                    if let Some(byte) = special {
                        bytes[at] = byte;
                    }
                    let expected = special.map(|_| at);
                    for from in [0, at / 2, at] {
                        let want = expected.filter(|&pos| pos >= from);
                        assert_eq!(
                            find_quote_or_backslash(&bytes, from),
                            want,
                            "{len} {at} {from}"
                        );
                    }
                }
            }
        }
        assert_eq!(find_quote_or_backslash(b"ab", 5), None);
    }

    #[test]
    fn plain_ascii_only_without_backslashes_or_high_bytes() {
        for len in 0..70 {
            let ascii = vec![b'x'; len];
            assert_eq!(plain_ascii(&ascii).map(str::len), Some(len));
            for at in 0..len {
                for byte in [b'\\', 0x80, 0xc3, 0xff] {
                    let mut bytes = ascii.clone();
                    bytes[at] = byte;
                    assert_eq!(plain_ascii(&bytes), None, "{len} {at} {byte}");
                }
            }
        }
        assert_eq!(plain_ascii("é".as_bytes()), None);
    }
}
