//! Generated regions inside hand-written documents.
//!
//! A region is delimited by `<!-- BEGIN GENERATED: name -->` and
//! `<!-- END GENERATED: name -->` lines; everything between them belongs to
//! the generator, everything around them to the author.

/// The opening marker of region `name`.
pub fn begin(name: &str) -> String {
    format!("<!-- BEGIN GENERATED: {name} (flexinfer-docs; do not edit) -->")
}

/// The closing marker of region `name`.
pub fn end(name: &str) -> String {
    format!("<!-- END GENERATED: {name} -->")
}

/// `document` with the body of region `name` replaced by `body`, or an
/// error when the markers are missing or out of order.
pub fn splice(document: &str, name: &str, body: &str) -> Result<String, String> {
    let (begin, end) = (begin(name), end(name));
    let start = document
        .find(&begin)
        .ok_or_else(|| format!("marker {begin:?} not found"))?;
    let body_start = start + begin.len();
    let end_at = document[body_start..]
        .find(&end)
        .map(|offset| body_start + offset)
        .ok_or_else(|| format!("marker {end:?} not found after {begin:?}"))?;
    let mut out = String::with_capacity(document.len() + body.len());
    out.push_str(&document[..body_start]);
    out.push('\n');
    out.push_str(body.trim_end_matches('\n'));
    out.push('\n');
    out.push_str(&document[end_at..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_the_region() {
        let doc = format!("intro\n{}\nold\n{}\noutro\n", begin("t"), end("t"));
        let new = splice(&doc, "t", "new body\n").unwrap();
        assert_eq!(
            new,
            format!("intro\n{}\nnew body\n{}\noutro\n", begin("t"), end("t"))
        );
        // Idempotent.
        assert_eq!(splice(&new, "t", "new body").unwrap(), new);
    }

    #[test]
    fn missing_markers_are_errors() {
        assert!(splice("no markers", "t", "x").is_err());
        assert!(splice(&begin("t"), "t", "x").is_err());
    }
}
