//! Text cut to the API server's length limits (an Event's note, a
//! condition's message), so that a long message is shortened rather than
//! the whole write refused.

/// What marks text that was cut.
pub const ELLIPSIS: char = '…';

/// `text`, or its longest prefix that ends on a character boundary and,
/// followed by [`ELLIPSIS`], fits in `max_bytes` (at least 3).
pub fn cut(mut text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes.saturating_sub(ELLIPSIS.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push(ELLIPSIS);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_within_the_limit_is_kept_whole() {
        assert_eq!(cut("a".repeat(10), 10), "a".repeat(10));
        assert_eq!(cut(String::new(), 3), "");
    }

    #[test]
    fn long_text_is_cut_to_the_limit_with_an_ellipsis() {
        let cut = cut("a".repeat(11), 10);
        assert_eq!(cut, format!("{}…", "a".repeat(7)));
        assert_eq!(cut.len(), 10);
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        // Every offset of a 4-byte character against the cut point.
        for prefix in 0..4 {
            let text = format!("{}{}", "a".repeat(prefix), "🦀".repeat(100));
            let cut = cut(text.clone(), 64);
            assert!(cut.len() <= 64, "{prefix}: {} bytes", cut.len());
            assert!(cut.len() > 64 - 4, "{prefix}: cut too short");
            let kept = cut.strip_suffix(ELLIPSIS).expect("ellipsis");
            assert!(text.starts_with(kept));
        }
    }
}
