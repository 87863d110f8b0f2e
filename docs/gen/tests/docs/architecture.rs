//! `ARCHITECTURE.md` names only paths that exist: every code span that
//! looks like a repository path, and every relative link target.

use crate::repo_root;

const PATH_ENDINGS: [&str; 6] = [".rs", ".md", ".toml", ".yaml", ".py", ".sh"];

/// The document without its fenced code blocks (diagrams and commands).
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut kept = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The contents of the single-backtick code spans of `text`.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`')
        .enumerate()
        .filter(|(index, _)| index % 2 == 1)
        .map(|(_, span)| span)
        .collect()
}

/// Whether a code span names a file or folder of the repository (rather
/// than a URL path such as `/v1/models`, a label key such as
/// `flexinfer.ai/routing`, a URL scheme or a command).
fn is_repo_path(span: &str) -> bool {
    if span.is_empty()
        || span.contains(char::is_whitespace)
        || span.starts_with('/')
        || span.contains(':')
        || span.contains(['*', '<', '>', '{', '}'])
    {
        return false;
    }
    if span.contains('/') {
        let first = span.split('/').next().unwrap_or_default();
        // A domain-prefixed key (`flexinfer.ai/…`) is not a path; a first
        // component with a dot is a path only when it is a file.
        !first.contains('.')
    } else {
        PATH_ENDINGS.iter().any(|ending| span.ends_with(ending))
    }
}

/// Relative link targets of `text` (`[…](target)`), anchors stripped.
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            let target = &rest[..rest.find(')')?];
            let target = target.split('#').next().unwrap_or_default();
            (!target.is_empty() && !target.contains("://")).then_some(target)
        })
        .collect()
}

fn architecture() -> String {
    std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

#[test]
fn every_path_named_in_architecture_exists() {
    let root = repo_root();
    let text = prose(&architecture());
    let mut named: Vec<&str> = code_spans(&text)
        .into_iter()
        .filter(|span| is_repo_path(span))
        .chain(link_targets(&text))
        .collect();
    named.sort_unstable();
    named.dedup();
    assert!(
        named.len() > 50,
        "only {} paths found in ARCHITECTURE.md: {named:?}",
        named.len()
    );
    let missing: Vec<_> = named
        .iter()
        .filter(|path| !root.join(path.trim_end_matches('/')).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_behaviour_row_names_one_existing_module() {
    let root = repo_root();
    let text = architecture();
    let table = text
        .split("## Where each behaviour lives")
        .nth(1)
        .expect("a \"Where each behaviour lives\" section");
    let rows: Vec<&str> = table
        .lines()
        .filter(|line| line.starts_with('|') && !line.starts_with("|---"))
        .skip(1)
        .collect();
    assert!(rows.len() > 40, "only {} rows", rows.len());
    for row in rows {
        let module = row.trim_end_matches('|').rsplit('|').next().unwrap().trim();
        let spans = code_spans(module);
        assert!(
            spans.len() == 1 && module.starts_with('`') && module.ends_with('`'),
            "row {row:?} must name exactly one module, in backticks"
        );
        assert!(
            is_repo_path(spans[0]) && root.join(spans[0].trim_end_matches('/')).exists(),
            "row {row:?} names {:?}, which does not exist",
            spans[0]
        );
    }
}

#[test]
fn path_detection_skips_routes_keys_and_commands() {
    for path in [
        "gateway/src/proxy/mod.rs",
        "operator/src/local/",
        "Cargo.toml",
        "README.md",
        "scripts/test.sh",
    ] {
        assert!(is_repo_path(path), "{path}");
    }
    for other in [
        "/v1/models",
        "flexinfer.ai/applied-hash",
        "oci://",
        "GET /v1/models",
        "kube::Client",
        "--config",
        "",
    ] {
        assert!(!is_repo_path(other), "{other}");
    }
    assert_eq!(
        link_targets("see [a](docs/a.md#x) and [b](https://e.org/b.md)"),
        ["docs/a.md"]
    );
}
