//! Small helpers for writing Markdown tables.

/// Text made safe for one cell of a Markdown table: pipes escaped, line
/// breaks joined with spaces.
pub fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `text` as an inline code span, or an empty string for empty text.
pub fn code(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else if text.contains('`') {
        format!("`` {} ``", text.replace('|', "\\|"))
    } else {
        format!("`{}`", text.replace('|', "\\|"))
    }
}

/// A Markdown table with a header row.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    out.push_str(&format!("| {} |\n", header.join(" | ")));
    out.push_str(&format!(
        "|{}|\n",
        header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    ));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_escape_pipes_and_join_lines() {
        assert_eq!(cell("a|b\n  c"), "a\\|b c");
        assert_eq!(code(""), "");
        assert_eq!(code("x`y"), "`` x`y ``");
        assert_eq!(
            table(&["A", "B"], &[vec!["1".into(), "2".into()]]),
            "| A | B |\n|---|---|\n| 1 | 2 |\n"
        );
    }
}
