//! The kube-scheduler extender v1 wire format.
//!
//! kube-scheduler marshals `k8s.io/kube-scheduler/extender/v1` structs,
//! which carry no JSON tags, so the keys are the Go field names: `Pod`,
//! `Nodes`, `NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`,
//! `Error`, `Host`, `Score`. Go decodes keys case-insensitively; requests
//! are accepted with the Go, lower-case and camel-case spellings, responses
//! use the Go spelling.
//!
//! Nodes are the bulk of a request (kube-scheduler sends full Node objects
//! unless the extender is `nodeCacheCapable`), so they are not decoded into
//! `k8s_openapi` types: [`crate::scan`] finds each item's JSON text, which
//! the filter result echoes verbatim, and [`NodeView`] extracts only the
//! name and the `flexinfer.ai/` labels and annotations.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use flexinfer_crds::labels::PREFIX;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::response::FilterResponse;

/// The highest score an extender may return (`extenderv1.MaxExtenderPriority`).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// Result of a filter call (`extenderv1.ExtenderFilterResult`).
#[derive(Debug, Default)]
pub struct ExtenderFilterResult<'a> {
    /// Passing nodes, as the raw JSON objects of the request, when the
    /// request carried `Nodes`.
    pub nodes: Option<Vec<&'a [u8]>>,
    /// Passing node names, when the request carried `NodeNames`.
    pub node_names: Option<Vec<&'a str>>,
    /// Rejected nodes whose rejection preemption might resolve.
    pub failed_nodes: BTreeMap<String, String>,
    /// Rejected nodes that preemption cannot help (no GPU vendor label,
    /// unsupported architecture).
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// Set when the whole call failed; kube-scheduler reports it as the
    /// scheduling error.
    pub error: String,
}

impl ExtenderFilterResult<'_> {
    /// The JSON kube-scheduler expects: every field under its Go name,
    /// passing nodes copied verbatim into `Nodes.items`.
    pub fn to_json(&self) -> Vec<u8> {
        self.encode(b"").to_vec(b"")
    }

    /// The same JSON as [`Self::to_json`], with every passing node that
    /// lies in `body` (the request it was scanned from) left there as a
    /// range; a run of nodes that were neighbours in the request becomes
    /// one range.
    pub fn encode(&self, body: &[u8]) -> FilterResponse {
        let mut out = FilterResponse::default();
        out.push_bytes(b"{\"Nodes\":");
        match &self.nodes {
            Some(items) => {
                out.push_bytes(b"{\"metadata\":{},\"items\":[");
                push_items(&mut out, body, items);
                out.push_bytes(b"]}");
            }
            None => out.push_bytes(b"null"),
        }
        write_field(&mut out, b"\"NodeNames\":", &self.node_names);
        write_field(&mut out, b"\"FailedNodes\":", &self.failed_nodes);
        write_field(
            &mut out,
            b"\"FailedAndUnresolvableNodes\":",
            &self.failed_and_unresolvable_nodes,
        );
        write_field(&mut out, b"\"Error\":", &self.error);
        out.push_bytes(b"}");
        out
    }
}

/// Appends `items` comma-separated: as ranges of `body` where they lie in
/// it (extending the previous range when only a comma and whitespace
/// separate them there), copied otherwise.
fn push_items(out: &mut FilterResponse, body: &[u8], items: &[&[u8]]) {
    let base = body.as_ptr() as usize;
    let mut run: Option<Range<usize>> = None;
    for (i, item) in items.iter().enumerate() {
        let start = (item.as_ptr() as usize).wrapping_sub(base);
        let range = start..start.saturating_add(item.len());
        let inside = start <= body.len() && range.end <= body.len() && !item.is_empty();
        if !inside {
            if let Some(run) = run.take() {
                out.push_request(run);
            }
            if i > 0 {
                out.push_bytes(b",");
            }
            out.push_bytes(item);
            continue;
        }
        match &mut run {
            Some(current) if only_comma_between(body, current.end, range.start) => {
                current.end = range.end;
            }
            _ => {
                if let Some(previous) = run.take() {
                    out.push_request(previous);
                }
                if i > 0 {
                    out.push_bytes(b",");
                }
                run = Some(range);
            }
        }
    }
    if let Some(run) = run {
        out.push_request(run);
    }
}

/// Whether `body[from..to]` is one comma with optional JSON whitespace.
fn only_comma_between(body: &[u8], from: usize, to: usize) -> bool {
    let Some(gap) = body.get(from..to) else {
        return false;
    };
    let mut commas = 0;
    for byte in gap {
        match byte {
            b',' => commas += 1,
            b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => return false,
        }
    }
    commas == 1
}

fn write_field<T: Serialize>(out: &mut FilterResponse, name: &[u8], value: &T) {
    out.push_bytes(b",");
    out.push_bytes(name);
    // Strings, string lists and string maps cannot fail to encode.
    let _ = serde_json::to_writer(out.writer(), value);
}

/// One entry of a prioritize result (`extenderv1.HostPriority`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// Node name.
    #[serde(rename = "Host", alias = "host")]
    pub host: String,
    /// Score in `0..=MAX_EXTENDER_PRIORITY`.
    #[serde(rename = "Score", alias = "score")]
    pub score: i64,
}

/// The part of a Node the extender reads: its name and the labels and
/// annotations under the `flexinfer.ai/` prefix. Everything else is
/// skipped without being decoded.
#[derive(Debug, Default, Deserialize)]
pub struct NodeView<'a> {
    /// Node metadata.
    #[serde(borrow, default)]
    pub metadata: NodeMetaView<'a>,
}

/// Metadata of a [`NodeView`].
#[derive(Debug, Default, Deserialize)]
pub struct NodeMetaView<'a> {
    /// Node name.
    #[serde(borrow, default)]
    pub name: Cow<'a, str>,
    /// `flexinfer.ai/` labels.
    #[serde(borrow, default)]
    pub labels: PrefixedMap<'a>,
    /// `flexinfer.ai/` annotations.
    #[serde(borrow, default)]
    pub annotations: PrefixedMap<'a>,
}

impl<'a> NodeView<'a> {
    /// Reads one node item from its JSON text with the scanner: the name
    /// and `flexinfer.ai/` labels and annotations are read, the rest of
    /// the node (managed fields, `spec`, `status`) is skipped without
    /// being decoded. See [`crate::scan::node_metadata`].
    pub fn parse(raw: &'a str) -> Result<Self, crate::scan::ScanError> {
        Ok(NodeView {
            metadata: crate::scan::node_metadata(raw)?,
        })
    }

    /// A copy that borrows nothing.
    pub fn to_owned_view(&self) -> NodeView<'static> {
        let meta = &self.metadata;
        NodeView {
            metadata: NodeMetaView {
                name: Cow::Owned(meta.name.to_string()),
                labels: meta.labels.to_owned_map(),
                annotations: meta.annotations.to_owned_map(),
            },
        }
    }
}

/// The entries of a JSON string map whose keys start with
/// [`flexinfer_crds::labels::PREFIX`]; other entries are skipped.
#[derive(Debug, Default)]
pub struct PrefixedMap<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'a> PrefixedMap<'a> {
    /// Adds an entry if its key has the prefix.
    pub fn insert(&mut self, key: Cow<'a, str>, value: Cow<'a, str>) {
        if key.starts_with(PREFIX) {
            self.0.push((key, value));
        }
    }

    /// A copy that borrows nothing.
    pub fn to_owned_map(&self) -> PrefixedMap<'static> {
        PrefixedMap(
            self.0
                .iter()
                .map(|(k, v)| (Cow::Owned(k.to_string()), Cow::Owned(v.to_string())))
                .collect(),
        )
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value.as_ref())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for PrefixedMap<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for MapVisitor<'a> {
            type Value = PrefixedMap<'a>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings or null")
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(PrefixedMap::default())
            }

            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(PrefixedMap::default())
            }

            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut entries = Vec::new();
                while let Some(BorrowedStr(key)) = map.next_key::<BorrowedStr<'a>>()? {
                    if key.starts_with(PREFIX) {
                        let BorrowedStr(value) = map.next_value::<BorrowedStr<'a>>()?;
                        entries.push((key, value));
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(PrefixedMap(entries))
            }
        }

        deserializer.deserialize_any(MapVisitor(std::marker::PhantomData))
    }
}

/// A string borrowed from the input when it has no escapes.
struct BorrowedStr<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for BorrowedStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for StrVisitor<'a> {
            type Value = BorrowedStr<'a>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Borrowed(value)))
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(value.to_owned())))
            }

            fn visit_string<E: de::Error>(self, value: String) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(value)))
            }
        }

        deserializer.deserialize_str(StrVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_view_keeps_only_flexinfer_keys() {
        let raw = r#"{"metadata":{"name":"gpu-1","labels":{"kubernetes.io/os":"linux",
               "flexinfer.ai/gpu.vendor":"AMD","flexinfer.ai/gpu.arch":"gfx\u0031100"},
               "annotations":null,"managedFields":[{"manager":"kubelet"}]},
               "status":{"images":[{"names":["a"],"sizeBytes":1}]}}"#;
        for view in [
            NodeView::parse(raw).unwrap(),
            serde_json::from_str::<NodeView>(raw).unwrap(),
        ] {
            assert_eq!(view.metadata.name, "gpu-1");
            assert_eq!(
                view.metadata.labels.get("flexinfer.ai/gpu.vendor"),
                Some("AMD")
            );
            assert_eq!(
                view.metadata.labels.get("flexinfer.ai/gpu.arch"),
                Some("gfx1100")
            );
            assert_eq!(view.metadata.labels.get("kubernetes.io/os"), None);
            assert_eq!(view.metadata.annotations.get("flexinfer.ai/gpu.util"), None);
        }
    }

    #[test]
    fn early_stop_parse_matches_a_full_parse_in_any_key_order() {
        for text in [
            // Go's order: metadata first, labels and annotations before
            // managedFields.
            r#"{"metadata":{"name":"a","labels":{"flexinfer.ai/gpu.vendor":"AMD"},
               "annotations":{"flexinfer.ai/gpu.util":"5"},"managedFields":[{"x":1}]},
               "spec":{},"status":{"images":[]}}"#,
            // Other orders, and missing annotations.
            r#"{"status":{},"metadata":{"managedFields":[],"annotations":{"flexinfer.ai/gpu.util":"5"},
               "labels":{"flexinfer.ai/gpu.vendor":"AMD"},"name":"a"}}"#,
            r#"{"metadata":{"labels":{"flexinfer.ai/gpu.vendor":"AMD"},"name":"a"},"spec":{}}"#,
            r#"{"kind":"Node","metadata":{"name":"a","annotations":null,"labels":{"flexinfer.ai/gpu.vendor":"AMD"}}}"#,
        ] {
            let fast = NodeView::parse(text).unwrap();
            let full: NodeView = serde_json::from_str(text).unwrap();
            for view in [&fast, &full] {
                assert_eq!(view.metadata.name, "a", "{text}");
                assert_eq!(
                    view.metadata.labels.get("flexinfer.ai/gpu.vendor"),
                    Some("AMD"),
                    "{text}"
                );
            }
            assert_eq!(
                fast.metadata.annotations.get("flexinfer.ai/gpu.util"),
                full.metadata.annotations.get("flexinfer.ai/gpu.util"),
                "{text}"
            );
        }
        // No metadata at all: an unnamed node, not an error.
        assert_eq!(NodeView::parse(r#"{"spec":{}}"#).unwrap().metadata.name, "");
        // Wrong types are errors.
        for text in [
            r#"{"metadata":5}"#,
            r#"{"metadata":{"name":7}}"#,
            "[1]",
            "{",
        ] {
            assert!(NodeView::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn filter_result_uses_go_field_names() {
        let result = ExtenderFilterResult {
            node_names: Some(vec!["a"]),
            failed_nodes: BTreeMap::from([("b".to_owned(), "why \"not\"".to_owned())]),
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(result.to_json()).unwrap(),
            r#"{"Nodes":null,"NodeNames":["a"],"FailedNodes":{"b":"why \"not\""},"FailedAndUnresolvableNodes":{},"Error":""}"#
        );
        let result = ExtenderFilterResult {
            nodes: Some(vec![br#"{"metadata":{"name":"x"}}"#, b"{}"]),
            error: String::new(),
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(result.to_json()).unwrap(),
            r#"{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"x"}},{}]},"NodeNames":null,"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}"#
        );
        let priority = HostPriority {
            host: "a".to_owned(),
            score: 7,
        };
        assert_eq!(
            serde_json::to_string(&[priority]).unwrap(),
            r#"[{"Host":"a","Score":7}]"#
        );
    }

    #[test]
    fn encode_points_into_the_request_and_matches_to_json() {
        let body = r#"{"items":[{"n":1}, {"n":2} ,{"n":3},{"n":4},{"n":5}]}"#;
        let node = |n: usize| {
            let at = body.find(&format!("{{\"n\":{n}}}")).unwrap();
            &body.as_bytes()[at..at + 7]
        };
        // 1, 2, 3 were neighbours; 5 follows a rejected 4; one node is not
        // from the request at all.
        let outside = String::from(r#"{"n":9}"#);
        let result = ExtenderFilterResult {
            nodes: Some(vec![node(1), node(2), node(3), node(5), outside.as_bytes()]),
            ..Default::default()
        };
        let encoded = result.encode(body.as_bytes());
        let joined = encoded.to_vec(body.as_bytes());
        let value: serde_json::Value = serde_json::from_slice(&joined).unwrap();
        // The same JSON as the copying encoder, apart from the request's
        // own whitespace between neighbours.
        let copied: serde_json::Value = serde_json::from_slice(&result.to_json()).unwrap();
        assert_eq!(value, copied);
        let items: Vec<u64> = value["Nodes"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["n"].as_u64().unwrap())
            .collect();
        assert_eq!(items, [1, 2, 3, 5, 9]);
        // 1..=3 travel as one range with their original separators, 5 as
        // another; nothing of the request was copied.
        let first_run = &body[body.find(r#"{"n":1}"#).unwrap()..body.find(r#",{"n":4}"#).unwrap()];
        assert_eq!(encoded.borrowed_len(), first_run.len() + 7);
        assert_eq!(encoded.len(), joined.len());
    }

    #[test]
    fn encode_of_an_empty_or_absent_list() {
        for nodes in [None, Some(vec![])] {
            let result = ExtenderFilterResult {
                nodes,
                ..Default::default()
            };
            assert_eq!(result.encode(b"{}").to_vec(b"{}"), result.to_json());
        }
    }
}
