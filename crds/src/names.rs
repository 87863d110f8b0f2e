//! Names of the objects a model owns, and of the labels and annotation keys
//! that name it.
//!
//! A Model's own name is a DNS-1123 subdomain (up to 253 characters, dots
//! allowed, may start with a digit), but what it owns is stricter:
//! a Service name must be a DNS-1035 label (63 characters, a letter first,
//! no dots), a Job name at most 63 characters (it becomes a label value of
//! its pods), a label value at most 63 characters, and the name part of an
//! annotation key at most 63. A name that already fits is used as it is, so
//! existing objects keep their names; one that does not is rewritten to fit
//! and made unique by a hash of the full name (`llama-3.1-8b` →
//! `llama-3-1-8b-9c1b2a40`). Users keep seeing the Model's own name in
//! routes, status and events; only the children carry the derived one.

use sha2::{Digest, Sha256};

/// Longest DNS-1035 / DNS-1123 label and label value.
pub const MAX_LABEL: usize = 63;
/// Hex digits of the hash appended to rewritten names.
const HASH_LEN: usize = 8;

/// Suffix of the cache PVC.
pub const CACHE_PVC_SUFFIX: &str = "-cache";
/// Suffix of the prefetch Job.
pub const PREFETCH_JOB_SUFFIX: &str = "-cache-prefetch";
/// Suffix of the quantization Job.
pub const QUANTIZE_JOB_SUFFIX: &str = "-quantize";
/// Suffix of the tmpfs cleanup Job.
pub const CLEANUP_JOB_SUFFIX: &str = "-tmpfs-cleanup";

/// Whether `s` is a DNS-1035 label: 1–63 characters of `[a-z0-9-]`,
/// starting with a letter and ending with a letter or digit.
pub fn is_dns1035_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_LABEL
        && bytes[0].is_ascii_lowercase()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// Whether `s` is a valid label value: at most 63 characters of
/// `[A-Za-z0-9._-]`, starting and ending with an alphanumeric (or empty).
pub fn is_label_value(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes.is_empty()
        || (bytes.len() <= MAX_LABEL
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

/// First eight hex digits of the SHA-256 of `name`.
fn short_hash(name: &str) -> String {
    hex::encode(&Sha256::digest(name.as_bytes())[..HASH_LEN / 2])
}

/// `name` rewritten to DNS-1035 characters: lower case, every other
/// character a `-`, `m-` in front when it does not start with a letter.
fn dns1035_chars(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert_str(0, "m-");
    }
    out
}

/// `base` cut to `max` bytes with the trailing dashes removed, then
/// `-<hash of name>` appended.
fn with_hash(base: &str, max: usize, name: &str) -> String {
    let keep = max.saturating_sub(HASH_LEN + 1).min(base.len());
    let head = base[..keep].trim_end_matches(['-', '.', '_']);
    format!("{head}-{}", short_hash(name))
}

/// The name of a model's child object ending in `suffix` (`""` for the
/// Deployment and Service): `<model><suffix>` when that is a DNS-1035
/// label, else a DNS-1035 label of at most 63 characters ending in
/// `-<hash><suffix>`.
pub fn child_name(model: &str, suffix: &str) -> String {
    let plain = format!("{model}{suffix}");
    if is_dns1035_label(&plain) {
        return plain;
    }
    let base = dns1035_chars(model);
    let hashed = with_hash(&base, MAX_LABEL - suffix.len(), model);
    format!("{hashed}{suffix}")
}

/// Name of the Service (and Deployment) of a model.
pub fn service_name(model: &str) -> String {
    child_name(model, "")
}

/// Name of the cache PVC the operator creates for a model:
/// `<service name>-cache`.
pub fn cache_pvc_name(model: &str) -> String {
    format!("{}{CACHE_PVC_SUFFIX}", service_name(model))
}

/// A label value naming `model`: the name itself when it is a valid label
/// value, else its first characters and a hash (63 at most).
pub fn label_value(model: &str) -> String {
    bounded(model, MAX_LABEL)
}

/// `name` when it is a valid label value of at most `max` characters, else
/// a shortened one ending in a hash of `name`.
pub fn bounded(name: &str, max: usize) -> String {
    if name.len() <= max && is_label_value(name) {
        return name.to_owned();
    }
    let base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let base = base.trim_start_matches(['-', '_', '.']);
    with_hash(base, max, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_are_kept() {
        for name in ["llama3", "qwen-7b", "a"] {
            assert_eq!(service_name(name), name);
            assert_eq!(label_value(name), name);
        }
        assert_eq!(cache_pvc_name("qwen-7b"), "qwen-7b-cache");
        assert_eq!(
            child_name("qwen-7b", PREFETCH_JOB_SUFFIX),
            "qwen-7b-cache-prefetch"
        );
        // Dots are fine in label values.
        assert_eq!(label_value("qwen2.5-7b"), "qwen2.5-7b");
    }

    #[test]
    fn names_the_api_server_refuses_are_rewritten() {
        let long = "a".repeat(60);
        let cases = [
            ("llama-3.1-8b", ""),
            ("qwen2.5-7b", ""),
            ("7b-chat", ""),
            ("7b-chat", PREFETCH_JOB_SUFFIX),
            (long.as_str(), ""),
            (long.as_str(), PREFETCH_JOB_SUFFIX),
            (long.as_str(), CLEANUP_JOB_SUFFIX),
        ];
        for (model, suffix) in cases {
            let name = child_name(model, suffix);
            assert!(is_dns1035_label(&name), "{model}{suffix} -> {name}");
            assert!(name.ends_with(suffix), "{name}");
        }
        assert_eq!(
            service_name("llama-3.1-8b"),
            format!("llama-3-1-8b-{}", short_hash("llama-3.1-8b"))
        );
        assert!(service_name("7b-chat").starts_with("m-7b-chat-"));
        assert!(is_dns1035_label(&cache_pvc_name("qwen2.5-7b")[..]));
    }

    #[test]
    fn rewritten_names_stay_distinct() {
        // Same characters after rewriting, different models.
        assert_ne!(service_name("a.b"), service_name("a-b"));
        assert_ne!(service_name("a.b"), service_name("a_b"));
        let a = format!("{}x", "m".repeat(70));
        let b = format!("{}y", "m".repeat(70));
        assert_ne!(service_name(&a), service_name(&b));
        assert_ne!(label_value(&a), label_value(&b));
    }

    #[test]
    fn label_values_and_annotation_name_parts_are_bounded() {
        let long = "x.".repeat(100) + "z";
        let value = label_value(&long);
        assert!(
            value.len() <= MAX_LABEL && is_label_value(&value),
            "{value}"
        );
        let part = bounded(&long, 51);
        assert!(part.len() <= 51 && is_label_value(&part), "{part}");
        assert_eq!(bounded("short", 51), "short");
    }
}
