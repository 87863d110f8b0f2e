//! Finding the parts of a large `ExtenderArgs` body without decoding it.
//!
//! A filter or prioritize request carries every candidate Node in full —
//! about 6 KiB each, 6 MiB for 1,000 nodes — and the extender needs only
//! each node's name, labels and annotations. Decoding the body with a
//! general JSON parser and then re-reading each node's metadata would cost
//! two passes over those megabytes; this module instead locates each
//! node's boundaries in a single pass that only tracks strings and
//! brackets, and hands only the small parts (the Pod, each node's
//! metadata) to `serde_json`. The parts it skips — most of each Node —
//! are classified 64 bytes at a time into bit masks of quotes, backslashes
//! and brackets, so skipping runs close to memory speed; strings it reads
//! are delimited with `memchr`.
//!
//! The scanner assumes well-formed JSON, which is what kube-scheduler
//! sends. On malformed input it returns an error or spans that the
//! subsequent `serde_json` decoding rejects; it never panics (every index
//! is bounds-checked).

use std::ops::Deref;
use std::sync::Arc;

use flexinfer_crds::labels::PREFIX;

mod items;
pub mod known;

pub use flexinfer_jsonscan::ScanError;
use flexinfer_jsonscan::{
    container_end_from, decode_key, error, object_members, skip_ws, string_end_checked,
    string_value, value_end,
};

use known::KnownMap;
pub use known::{Identity, KnownNodes};

use crate::api::{NodeMetaView, NodeView, PrefixedMap};

/// The top-level values of an `ExtenderArgs` body.
#[derive(Debug, Default)]
pub struct Args<'a> {
    /// The `Pod` value as JSON text, if the key is present.
    pub pod: Option<&'a str>,
    /// The items of `Nodes`, if `Nodes` is present and not `null`.
    pub nodes: Option<Vec<ScannedNode<'a>>>,
    /// The `NodeNames` value as JSON text, if the key is present.
    pub node_names: Option<&'a str>,
}

/// One item of `Nodes`: its JSON text and what the extender reads of it.
#[derive(Debug)]
pub struct ScannedNode<'a> {
    /// The node object, verbatim (not checked to be UTF-8: it is echoed,
    /// never read as text).
    pub raw: &'a [u8],
    /// Its name and `flexinfer.ai/` labels and annotations.
    pub view: ScannedView<'a>,
    /// Its name, uid and `resourceVersion` as written.
    pub identity: Identity<'a>,
}

/// A node's view: read from the request, or known from an earlier one
/// (see [`KnownNodes`]).
#[derive(Debug)]
pub enum ScannedView<'a> {
    /// Read from this request.
    Read(NodeView<'a>),
    /// The same node (name, uid, `resourceVersion`) was read before.
    Known(Arc<NodeView<'static>>),
}

impl<'a> Deref for ScannedView<'a> {
    type Target = NodeView<'a>;

    fn deref(&self) -> &NodeView<'a> {
        match self {
            ScannedView::Read(view) => view,
            ScannedView::Known(view) => view,
        }
    }
}

/// Splits an `ExtenderArgs` body into its parts in one pass, reading each
/// node's metadata on the way. Keys match case-insensitively, as Go's
/// decoder does; unknown keys are skipped.
pub fn args(body: &[u8]) -> Result<Args<'_>, ScanError> {
    args_with(body, None)
}

/// Like [`args`], taking the views of nodes in `known` from there
/// (skipping the rest of their metadata) and keeping there the views of
/// nodes read.
pub fn args_with<'a>(body: &'a [u8], known: Option<&KnownNodes>) -> Result<Args<'a>, ScanError> {
    let known = known.filter(|known| known.capacity() > 0);
    let guard = known.map(KnownNodes::read);
    let args = args_in(body, guard.as_deref())?;
    drop(guard);
    if let (Some(known), Some(nodes)) = (known, &args.nodes) {
        known.remember(nodes);
    }
    Ok(args)
}

fn args_in<'a>(body: &'a [u8], known: Option<&KnownMap>) -> Result<Args<'a>, ScanError> {
    let bytes = body;
    let start = skip_ws(bytes, 0);
    let mut args = Args::default();
    let end = object_members(bytes, start, |key, value_start| {
        if key.eq_ignore_ascii_case(b"Nodes") {
            let (items, end) = node_list(body, value_start, known)?;
            args.nodes = items;
            return Ok(end);
        }
        let end = value_end(bytes, value_start)?;
        if key.eq_ignore_ascii_case(b"Pod") {
            args.pod = Some(text(body, (value_start, end))?);
        } else if key.eq_ignore_ascii_case(b"NodeNames") {
            args.node_names = Some(text(body, (value_start, end))?);
        }
        Ok(end)
    })?;
    if skip_ws(bytes, end) != bytes.len() {
        return Err(error("end of input", end));
    }
    Ok(args)
}

/// The items of the `NodeList` value at `at` (`None` for `null`) and the
/// offset after it.
#[allow(clippy::type_complexity)]
fn node_list<'a>(
    body: &'a [u8],
    at: usize,
    known: Option<&KnownMap>,
) -> Result<(Option<Vec<ScannedNode<'a>>>, usize), ScanError> {
    let bytes = body;
    if bytes.get(at..at + 4) == Some(b"null") {
        return Ok((None, at + 4));
    }
    let mut items = Vec::new();
    let end = object_members(bytes, at, |key, value_start| {
        if !key.eq_ignore_ascii_case(b"items") {
            return value_end(bytes, value_start);
        }
        if bytes.get(value_start..value_start + 4) == Some(b"null") {
            return Ok(value_start + 4);
        }
        let (scanned, end) = items::node_items(body, value_start, known)?;
        items = scanned;
        Ok(end)
    })?;
    Ok((Some(items), end))
}

/// The name and the `flexinfer.ai/` labels and annotations of a Node
/// given as JSON text.
pub fn node_metadata(raw: &str) -> Result<NodeMetaView<'_>, ScanError> {
    let start = skip_ws(raw.as_bytes(), 0);
    let node = node_object(raw.as_bytes(), start, None)?;
    if skip_ws(raw.as_bytes(), node.end) != raw.len() {
        return Err(error("end of input", node.end));
    }
    Ok(node.read.metadata)
}

/// What [`node_object`] found.
struct NodeObject<'a> {
    /// The metadata read (partly, when the node was known).
    read: NodeView<'a>,
    /// The view of the known node with this identity.
    known: Option<Arc<NodeView<'static>>>,
    identity: Identity<'a>,
    /// The offset after the object.
    end: usize,
}

impl<'a> NodeObject<'a> {
    fn into_scanned(self, raw: &'a [u8]) -> ScannedNode<'a> {
        ScannedNode {
            raw,
            view: match self.known {
                Some(view) => ScannedView::Known(view),
                None => ScannedView::Read(self.read),
            },
            identity: self.identity,
        }
    }
}

/// Reads the node object at `at`: its name, uid, `resourceVersion` and
/// `flexinfer.ai/` labels and annotations. Once the identity is complete
/// and `known` has the node, the rest of `metadata` is skipped.
fn node_object<'a>(
    body: &'a [u8],
    at: usize,
    known: Option<&KnownMap>,
) -> Result<NodeObject<'a>, ScanError> {
    let bytes = body;
    let mut metadata = NodeMetaView::default();
    let mut identity = Identity::default();
    let mut found = None;
    let end = object_members(bytes, at, |key, value_start| {
        if key != b"metadata" {
            return value_end(bytes, value_start);
        }
        object_members(bytes, value_start, |key, value_start| {
            let part = match key {
                b"name" => &mut identity.name,
                b"uid" => &mut identity.uid,
                b"resourceVersion" => &mut identity.resource_version,
                b"labels" => return string_map(body, value_start, &mut metadata.labels),
                b"annotations" => return string_map(body, value_start, &mut metadata.annotations),
                _ => return value_end(bytes, value_start),
            };
            let end = string_end_checked(bytes, value_start)?;
            *part = bytes.get(value_start + 1..end - 1);
            if key == b"name" {
                metadata.name = string_value(body, value_start, end)?;
            }
            let Some(view) = known
                .filter(|_| found.is_none())
                .and_then(|map| known::lookup(map, &identity))
            else {
                return Ok(end);
            };
            found = Some(view);
            // Skip to the `}` that closes `metadata`.
            container_end_from(bytes, end, b'{', b'}', 1).map(|after| after - 1)
        })
    })?;
    Ok(NodeObject {
        read: NodeView { metadata },
        known: found,
        identity,
        end,
    })
}

/// Reads the `flexinfer.ai/` entries of the string map (or `null`) at `at`
/// into `map`; returns the offset after it.
fn string_map<'a>(raw: &'a [u8], at: usize, map: &mut PrefixedMap<'a>) -> Result<usize, ScanError> {
    let bytes = raw;
    if bytes.get(at..at + 4) == Some(b"null") {
        return Ok(at + 4);
    }
    object_members(bytes, at, |key, value_start| {
        if !may_have_prefix(key) {
            return value_end(bytes, value_start);
        }
        let key = decode_key(key)?;
        if !key.starts_with(PREFIX) {
            return value_end(bytes, value_start);
        }
        let end = string_end_checked(bytes, value_start)?;
        map.insert(key, string_value(raw, value_start, end)?);
        Ok(end)
    })
}

/// Whether the raw (still escaped) `key` has the label prefix, or might
/// once decoded: it matches the prefix up to its first escape. A key that
/// differs from the prefix at a plain byte cannot decode to it, so only
/// the first few bytes of most keys are read. (Go writes no escapes in
/// keys; this only keeps odd input correct.)
fn may_have_prefix(key: &[u8]) -> bool {
    let common = key
        .iter()
        .zip(PREFIX.as_bytes())
        .take_while(|(a, b)| a == b)
        .count();
    common == PREFIX.len() || key.get(common) == Some(&b'\\')
}

type Span = (usize, usize);

fn slice(body: &[u8], (from, to): Span) -> Result<&[u8], ScanError> {
    body.get(from..to).ok_or(error("a value", from))
}

/// The span as text; only the parts the extender reads are checked to be
/// UTF-8, never the whole body.
fn text(body: &[u8], span: Span) -> Result<&str, ScanError> {
    std::str::from_utf8(slice(body, span)?).map_err(|_| error("UTF-8 text", span.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(body: &str) -> Result<Args<'_>, ScanError> {
        args(body.as_bytes())
    }

    fn raw<'a>(args: &Args<'a>) -> Option<Vec<&'a str>> {
        args.nodes.as_ref().map(|nodes| {
            nodes
                .iter()
                .map(|node| std::str::from_utf8(node.raw).unwrap())
                .collect()
        })
    }

    #[test]
    fn finds_pod_nodes_and_names() {
        let body = r#" {"Pod":{"metadata":{"name":"p","annotations":{"a":"}{\"]["}}},
            "Nodes":{"metadata":{},"items":[{"metadata":{"name":"n1"}}, {"metadata":{"name":"n\u0032"},"status":{"images":[{"names":["x"]}]}}]},
            "NodeNames":null} "#;
        let spans = parse(body).unwrap();
        let pod: Value = serde_json::from_str(spans.pod.unwrap()).unwrap();
        assert_eq!(pod["metadata"]["annotations"]["a"], "}{\"][");
        let nodes = raw(&spans).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0], r#"{"metadata":{"name":"n1"}}"#);
        let second: Value = serde_json::from_str(nodes[1]).unwrap();
        assert_eq!(second["metadata"]["name"], "n2");
        let names: Vec<_> = spans
            .nodes
            .as_ref()
            .unwrap()
            .iter()
            .map(|node| node.view.metadata.name.as_ref())
            .collect();
        assert_eq!(names, ["n1", "n2"]);
        assert_eq!(spans.node_names, Some("null"));
    }

    #[test]
    fn keys_match_case_insensitively_and_unknown_keys_are_skipped() {
        let body = r#"{"extra":[1,{"x":[2]}],"pod":{},"nodenames":["a","b"],"nodes":null,"n":-1.5e3,"t":true}"#;
        let spans = parse(body).unwrap();
        assert_eq!(spans.pod, Some("{}"));
        assert_eq!(spans.node_names, Some(r#"["a","b"]"#));
        assert!(spans.nodes.is_none());
    }

    #[test]
    fn empty_and_null_items() {
        for body in [
            r#"{"Nodes":{"items":null}}"#,
            r#"{"Nodes":{"items":[]}}"#,
            r#"{"Nodes":{}}"#,
        ] {
            assert_eq!(raw(&parse(body).unwrap()), Some(vec![]), "{body}");
        }
        let empty = parse("{}").unwrap();
        assert!(empty.pod.is_none() && empty.nodes.is_none() && empty.node_names.is_none());
    }

    #[test]
    fn matches_serde_on_generated_requests() {
        for count in [0, 1, 7] {
            let items: Vec<Value> = (0..count)
                .map(|i| {
                    json!({"metadata": {"name": format!("n{i}"), "labels": {"k\"{": "v]\\"}},
                           "status": {"images": [{"names": ["a", "b\\\"}"]}], "n": [1.5, null, false]}})
                })
                .collect();
            let request = json!({"Pod": {"metadata": {"name": "p"}}, "Nodes": {"metadata": {}, "items": items}});
            for body in [
                request.to_string(),
                serde_json::to_string_pretty(&request).unwrap(),
            ] {
                let spans = parse(&body).unwrap();
                let parsed: Vec<Value> = raw(&spans)
                    .unwrap()
                    .iter()
                    .map(|item| serde_json::from_str(item).unwrap())
                    .collect();
                assert_eq!(parsed, items);
                for (node, item) in spans.nodes.as_ref().unwrap().iter().zip(&items) {
                    assert_eq!(
                        node.view.metadata.name,
                        item["metadata"]["name"].as_str().unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        for body in [
            "",
            "   ",
            "[]",
            "{",
            "{\"Pod\"",
            "{\"Pod\":",
            "{\"Pod\":}",
            "{\"Pod\":{}",
            "{\"Pod\":{} x",
            "{\"Pod\":\"unterminated}",
            "{\"Pod\":\"ends in backslash\\",
            "{\"Nodes\":{\"items\":[{\"a\":1},]}}",
            "{\"Nodes\":{\"items\":[{\"a\":1}}}",
            "{\"Nodes\":{\"items\":{}}}",
            "{\"Nodes\":[]}",
            "{Pod:{}}",
            "{\"Pod\":{}}}",
            "{\"a\" 1}",
        ] {
            assert!(parse(body).is_err(), "{body:?}");
        }
    }

    #[test]
    fn arbitrary_prefixes_never_panic() {
        let body = json!({"Pod": {"metadata": {"name": "p\\\"x"}},
                          "Nodes": {"items": [{"metadata": {"name": "a"}}, {"b": [1, "]"]}]}})
        .to_string();
        for end in 0..body.len() {
            let _ = parse(&body[..end]);
        }
    }
    #[test]
    fn escaped_label_keys_are_decoded_before_the_prefix_check() {
        let raw = r#"{"metadata":{"name":"n","labels":{
            "\u0066lexinfer.ai/gpu.vendor":"AMD",
            "flexinfer.ai\/gpu.arch":"gfx1100",
            "fl\u0065xinfer.ai/gpu.count":"2",
            "flexinfer.a":"short",
            "flexinfer.aj/gpu.vram":"no",
            "\u0067pu":"other",
            "kubernetes.io/hostname":"n"}}}"#;
        let metadata = node_metadata(raw).unwrap();
        let labels = &metadata.labels;
        assert_eq!(labels.get("flexinfer.ai/gpu.vendor"), Some("AMD"));
        assert_eq!(labels.get("flexinfer.ai/gpu.arch"), Some("gfx1100"));
        assert_eq!(labels.get("flexinfer.ai/gpu.count"), Some("2"));
        assert_eq!(labels.get("flexinfer.aj/gpu.vram"), None);
        assert!(may_have_prefix(b"flexinfer.ai/x"));
        assert!(may_have_prefix(b"\\u0066lexinfer.ai/x"));
        assert!(!may_have_prefix(b"kubernetes.io/os"));
        assert!(!may_have_prefix(b"flexinfer"));
    }

    #[test]
    fn escapes_and_brackets_across_block_boundaries() {
        for pad in 0..2 * flexinfer_jsonscan::BLOCK {
            for tricky in [r#"\\"#, r#"\""#, r#"\\\""#, "}]{[", r#"\\\\"#, r#"\u0022"#] {
                let value = json!({"metadata": {"name": "n"},
                                   "status": {"a": "x".repeat(pad), "b": [tricky, {"c": tricky}], "d": {}}});
                let body =
                    json!({"Nodes": {"items": [value, {"metadata": {"name": "m"}}]}}).to_string();
                let spans = parse(&body).unwrap();
                let nodes = raw(&spans).unwrap();
                assert_eq!(nodes.len(), 2, "{body}");
                assert_eq!(serde_json::from_str::<Value>(nodes[0]).unwrap(), value);
                assert_eq!(nodes[1], r#"{"metadata":{"name":"m"}}"#);
            }
        }
    }

    #[test]
    fn mutated_and_truncated_fixture_never_panics() {
        let node: Value =
            serde_json::from_str(include_str!("../tests/fixtures/node-gpu.json")).unwrap();
        let pod: Value =
            serde_json::from_str(include_str!("../tests/fixtures/pod-vllm.json")).unwrap();
        let body = json!({"Pod": pod, "Nodes": {"metadata": {}, "items": [node.clone(), node]}})
            .to_string()
            .into_bytes();
        let spans = args(&body).unwrap();
        assert_eq!(spans.nodes.unwrap().len(), 2);
        let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        // Includes bytes that are not UTF-8: the scanner reads bytes.
        let alphabet = b"\"\\{}[],: a0n\xff\xc3";
        for round in 0..3000 {
            let mut bytes = body.clone();
            for _ in 0..1 + rng.usize(..3) {
                let at = rng.usize(..bytes.len());
                match rng.usize(..3) {
                    0 => bytes[at] = alphabet[rng.usize(..alphabet.len())],
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, alphabet[rng.usize(..alphabet.len())]),
                }
            }
            if round % 2 == 0 {
                bytes.truncate(rng.usize(..bytes.len()));
            }
            if let Ok(spans) = args(&bytes) {
                // Whatever is found lies within the body.
                for node in spans.nodes.iter().flatten() {
                    assert!(bytes.windows(node.raw.len()).any(|w| w == node.raw));
                }
            }
        }
    }
}
