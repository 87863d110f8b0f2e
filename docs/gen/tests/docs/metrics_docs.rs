//! The metrics list of `docs/operations.md`, the alert rules and the
//! dashboard name only metrics the code defines, and the list names every
//! one of them.

use crate::repo_root;
use std::collections::BTreeSet;
use std::fs;

fn read(path: &str) -> String {
    fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `flexinfer_...` word in `text`.
fn metric_words(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(found) = text[at..].find("flexinfer_") {
        let start = at + found;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase()
                || bytes[end].is_ascii_digit()
                || bytes[end] == b'_')
        {
            end += 1;
        }
        if boundary {
            out.insert(text[start..end].to_owned());
        }
        at = end;
    }
    out
}

/// Metric names registered by the components: string literals in their
/// metrics modules, outside the unit tests.
fn defined() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for path in [
        "gateway/src/metrics.rs",
        "gateway/src/peers/metrics.rs",
        "operator/src/controllers/metrics.rs",
        "sched-ext/src/metrics.rs",
        "node/src/metrics.rs",
    ] {
        let text = read(path);
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for part in code.split('"').skip(1).step_by(2) {
            if part.starts_with("flexinfer_") && metric_words(part).contains(part) {
                out.insert(part.to_owned());
            }
        }
    }
    out
}

/// Whether a `flexinfer_...` word names a metric (rather than, say, the
/// `flexinfer_gateway` log target).
fn is_metric(word: &str) -> bool {
    [
        "flexinfer_proxy_",
        "flexinfer_operator_",
        "flexinfer_scheduler_",
        "flexinfer_gpu_",
        "flexinfer_agent_",
    ]
    .iter()
    .any(|prefix| word.starts_with(prefix) && word.len() > prefix.len())
}

/// A series name without the histogram suffixes.
fn family(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name)
}

#[test]
fn operations_doc_lists_exactly_the_defined_metrics() {
    let defined = defined();
    assert!(
        defined.len() >= 20,
        "only {} metrics found: {defined:?}",
        defined.len()
    );
    let doc = read("docs/operations.md");
    let documented: BTreeSet<String> = metric_words(&doc)
        .into_iter()
        .filter(|word| is_metric(word) && doc.contains(&format!("| `{word}` |")))
        .collect();
    let missing: Vec<_> = defined.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&defined).collect();
    assert!(
        missing.is_empty(),
        "docs/operations.md does not list {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "docs/operations.md lists undefined {unknown:?}"
    );
}

#[test]
fn alerts_and_dashboard_use_defined_metrics() {
    let defined = defined();
    for path in [
        "helm/flexinfer/files/prometheus-rules.yaml",
        "helm/flexinfer/files/grafana-dashboard.json",
        "docs/operations.md",
        "docs/routing.md",
        "docs/scaling.md",
        "docs/architecture.md",
    ] {
        for word in metric_words(&read(path)) {
            if !is_metric(&word) {
                continue;
            }
            assert!(
                defined.contains(family(&word)),
                "{path} names {word}, which no component defines"
            );
        }
    }
}

#[test]
fn kv_cache_alert_uses_the_operator_high_watermark() {
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&read("helm/flexinfer/files/prometheus-rules.yaml")).unwrap();
    let rule = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter())
        .find(|r| r["alert"] == "FlexInferKVCachePressure")
        .expect("KV-cache alert");
    let expr = rule["expr"].as_str().unwrap().trim();
    let threshold: f64 = expr.rsplit('>').next().unwrap().trim().parse().unwrap();
    assert_eq!(
        threshold,
        flexinfer_crds::defaults::KV_CACHE_HIGH_WATERMARK,
        "{expr}"
    );
}

#[test]
fn metric_words_are_found_at_word_boundaries() {
    let words = metric_words("rate(flexinfer_proxy_requests_total[5m]) x_flexinfer_no");
    assert_eq!(
        words.into_iter().collect::<Vec<_>>(),
        ["flexinfer_proxy_requests_total"]
    );
    assert_eq!(family("flexinfer_a_seconds_bucket"), "flexinfer_a_seconds");
}
