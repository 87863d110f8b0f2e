//! `spec.filter` of a catalog: a glob on model names and tags every
//! listed model must carry.

use flexinfer_crds::v1alpha2::CatalogFilter;

/// Whether `name` matches the glob `pattern` (`*` any run of characters,
/// `?` one character; everything else literal, case-sensitive).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    // Position after the last `*` and the name position it matched up to.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi + 1, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((after, matched)) => {
                    pi = after;
                    ni = matched + 1;
                    star = Some((after, matched + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether a repository `name` carrying `tags` passes `filter`: its name
/// matches `namePattern` and it carries every tag of `tags`.
pub fn keeps(filter: Option<&CatalogFilter>, name: &str, tags: &[String]) -> bool {
    let Some(filter) = filter else {
        return true;
    };
    let name_ok = filter
        .name_pattern
        .as_deref()
        .filter(|p| !p.is_empty())
        .is_none_or(|p| glob_match(p, name));
    name_ok && filter.tags.iter().all(|t| tags.contains(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, n, want) in [
            ("*", "anything/at/all", true),
            ("models/*", "models/qwen", true),
            ("models/*", "other/qwen", false),
            ("*qwen*", "org/qwen3-8b", true),
            ("llama-?b", "llama-8b", true),
            ("llama-?b", "llama-70b", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(glob_match(p, n), want, "{p} vs {n}");
        }
    }

    #[test]
    fn filter_needs_the_pattern_and_every_tag() {
        let f = CatalogFilter {
            tags: vec!["v1".into(), "latest".into()],
            name_pattern: Some("models/*".into()),
        };
        let tags = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(keeps(Some(&f), "models/a", &tags(&["latest", "v1", "v2"])));
        assert!(!keeps(Some(&f), "models/a", &tags(&["v1"])));
        assert!(!keeps(Some(&f), "other/a", &tags(&["latest", "v1"])));
        assert!(keeps(None, "x", &[]));
    }
}
