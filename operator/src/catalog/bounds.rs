//! A catalog's status held far under etcd's 1.5 MiB object limit.
//!
//! A registry can hold any number of repositories and tags, and the `Ready`
//! message joins the error of every failing registry; written whole, a large
//! catalog's status would make the API server refuse the write (and every
//! later one). [`bound_entries`] keeps the first entries (in the status's
//! sorted order) that fit a count and a byte budget; `totalModels` still
//! counts them all. [`bound_message`] cuts the message.

use flexinfer_crds::v1alpha2::CatalogEntry;

/// Most entries written to `status.entries`.
pub const MAX_ENTRIES: usize = 1000;

/// Most bytes of `status.entries` as JSON: a quarter of etcd's default
/// 1.5 MiB request limit, leaving room for the rest of the object.
pub const MAX_ENTRIES_BYTES: usize = 384 * 1024;

/// Most bytes of the `Ready` condition's message (the API server allows
/// 32 KiB).
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// The first of `entries` that fit [`MAX_ENTRIES`] and [`MAX_ENTRIES_BYTES`],
/// and how many were left out.
pub fn bound_entries(mut entries: Vec<CatalogEntry>) -> (Vec<CatalogEntry>, usize) {
    let total = entries.len();
    let mut bytes: usize = 2; // `[]`
    let mut keep = 0;
    for entry in entries.iter().take(MAX_ENTRIES) {
        let size = serde_json::to_vec(entry).map_or(usize::MAX, |json| json.len() + 1);
        if bytes.saturating_add(size) > MAX_ENTRIES_BYTES {
            break;
        }
        bytes += size;
        keep += 1;
    }
    entries.truncate(keep);
    (entries, total - keep)
}

/// `message` cut to [`MAX_MESSAGE_BYTES`].
pub fn bound_message(message: String) -> String {
    crate::text::cut(message, MAX_MESSAGE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: usize, name_len: usize) -> CatalogEntry {
        let name = format!("models/{n:06}-{}", "x".repeat(name_len));
        CatalogEntry {
            reference: format!("oci://registry.example/{name}:v1"),
            name,
            registry: "OCI".into(),
            size: Some(1 << 30),
        }
    }

    #[test]
    fn a_small_catalog_is_kept_whole() {
        let entries: Vec<CatalogEntry> = (0..10).map(|n| entry(n, 10)).collect();
        assert_eq!(bound_entries(entries.clone()), (entries, 0));
    }

    #[test]
    fn a_huge_catalog_keeps_its_first_entries_within_the_count() {
        let entries: Vec<CatalogEntry> = (0..100_000).map(|n| entry(n, 10)).collect();
        let (kept, left_out) = bound_entries(entries.clone());
        assert_eq!(kept.len(), MAX_ENTRIES);
        assert_eq!(left_out, 100_000 - MAX_ENTRIES);
        assert_eq!(kept[..], entries[..MAX_ENTRIES]);
    }

    #[test]
    fn long_entries_are_kept_within_the_byte_budget() {
        let entries: Vec<CatalogEntry> = (0..5_000).map(|n| entry(n, 2_000)).collect();
        let (kept, left_out) = bound_entries(entries);
        let bytes = serde_json::to_vec(&kept).expect("JSON").len();
        assert!(bytes <= MAX_ENTRIES_BYTES, "{bytes} bytes");
        assert!(
            bytes > MAX_ENTRIES_BYTES - 5_000,
            "{bytes}: budget left unused"
        );
        assert_eq!(kept.len() + left_out, 5_000);
    }

    #[test]
    fn messages_are_cut() {
        let joined = vec!["registry.example: connection refused"; 1_000].join("; ");
        let message = bound_message(joined.clone());
        assert!(message.len() <= MAX_MESSAGE_BYTES);
        assert!(joined.starts_with(message.trim_end_matches('…')));
    }
}
