//! Node metadata read in earlier requests.
//!
//! kube-scheduler sends every candidate Node with each filter and
//! prioritize call, and between two calls most nodes have not changed. The
//! API server gives each change of an object a new `resourceVersion`, so a
//! node whose name, uid and `resourceVersion` are those of a node read
//! before has the same labels and annotations: the scanner takes its view
//! from here and skips the rest of its metadata in bulk instead of reading
//! it entry by entry. Nodes without a uid or `resourceVersion`
//! (hand-written requests) are always read.
//!
//! The identity is compared as written in the request (JSON string
//! contents, escapes and all). When the store would grow past its
//! capacity it is emptied and refills from the next requests, so nodes
//! removed from the cluster do not stay forever.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use super::{ScannedNode, ScannedView};
use crate::api::NodeView;

/// Nodes kept by default: more than the largest clusters kube-scheduler
/// supports (5,000 nodes), at a few hundred bytes each.
pub const DEFAULT_CAPACITY: usize = 16_384;

/// Node views by identity, shared by all requests of one extender.
#[derive(Debug)]
pub struct KnownNodes {
    map: RwLock<KnownMap>,
    capacity: usize,
}

/// Known nodes by name (as written in the request).
pub(super) type KnownMap = HashMap<Box<[u8]>, Known>;

#[derive(Debug)]
pub(super) struct Known {
    uid: Box<[u8]>,
    resource_version: Box<[u8]>,
    view: Arc<NodeView<'static>>,
}

/// A node's name, uid and `resourceVersion` as written in the request
/// (the contents of the JSON strings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Identity<'a> {
    /// `metadata.name`.
    pub name: Option<&'a [u8]>,
    /// `metadata.uid`.
    pub uid: Option<&'a [u8]>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<&'a [u8]>,
}

impl<'a> Identity<'a> {
    /// Name, uid and version, when all three are present and not empty.
    fn complete(&self) -> Option<(&'a [u8], &'a [u8], &'a [u8])> {
        let present = |part: Option<&'a [u8]>| part.filter(|p| !p.is_empty());
        Some((
            present(self.name)?,
            present(self.uid)?,
            present(self.resource_version)?,
        ))
    }
}

/// The view of the node with this identity, if it is known.
pub(super) fn lookup(map: &KnownMap, identity: &Identity<'_>) -> Option<Arc<NodeView<'static>>> {
    let (name, uid, version) = identity.complete()?;
    let known = map.get(name)?;
    (*known.uid == *uid && *known.resource_version == *version).then(|| known.view.clone())
}

impl Default for KnownNodes {
    fn default() -> Self {
        KnownNodes::new(DEFAULT_CAPACITY)
    }
}

impl KnownNodes {
    /// An empty store keeping at most `capacity` nodes (0 keeps none).
    pub fn new(capacity: usize) -> Self {
        KnownNodes {
            map: RwLock::new(HashMap::new()),
            capacity,
        }
    }

    /// The most nodes kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many nodes are known.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no node is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map, for reading during one scan.
    pub(super) fn read(&self) -> RwLockReadGuard<'_, KnownMap> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the views of the nodes that were read (not known) and have a
    /// complete identity.
    pub(super) fn remember(&self, nodes: &[ScannedNode<'_>]) {
        if self.capacity == 0 {
            return;
        }
        let mut fresh = nodes
            .iter()
            .filter_map(|node| match &node.view {
                ScannedView::Read(view) => Some((node.identity.complete()?, view)),
                ScannedView::Known(_) => None,
            })
            .peekable();
        if fresh.peek().is_none() {
            return;
        }
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        for ((name, uid, version), view) in fresh {
            if map.len() >= self.capacity && !map.contains_key(name) {
                map.clear();
            }
            map.insert(
                name.into(),
                Known {
                    uid: uid.into(),
                    resource_version: version.into(),
                    view: Arc::new(view.to_owned_view()),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::scan::args_with;

    fn node(name: &str, uid: Option<&str>, version: Option<&str>, vendor: &str) -> Value {
        let mut metadata = serde_json::Map::new();
        metadata.insert("name".into(), json!(name));
        if let Some(uid) = uid {
            metadata.insert("uid".into(), json!(uid));
        }
        if let Some(version) = version {
            metadata.insert("resourceVersion".into(), json!(version));
        }
        metadata.insert(
            "labels".into(),
            json!({"flexinfer.ai/gpu.vendor": vendor, "kubernetes.io/os": "linux"}),
        );
        // Brackets and quotes in strings after the identity: the skip
        // must not be fooled by them.
        metadata.insert(
            "annotations".into(),
            json!({"flexinfer.ai/gpu-free-memory": "100", "x": "}}{\"]["}),
        );
        metadata.insert("managedFields".into(), json!([{"fieldsV1": {"f:x": {}}}]));
        json!({"metadata": Value::Object(metadata), "status": {"images": [{"names": ["a"]}]}})
    }

    /// An `ExtenderArgs` body with `metadata` keys in the order given
    /// (serde_json would sort them; Go writes name, uid, resourceVersion
    /// first).
    fn body(nodes: &[Value]) -> Vec<u8> {
        let items: Vec<String> = nodes
            .iter()
            .map(|node| {
                let meta = node["metadata"].as_object().unwrap();
                let order = [
                    "name",
                    "uid",
                    "resourceVersion",
                    "labels",
                    "annotations",
                    "managedFields",
                ];
                let members: Vec<String> = order
                    .iter()
                    .filter_map(|key| Some(format!("\"{key}\":{}", meta.get(*key)?)))
                    .collect();
                format!(
                    "{{\"metadata\":{{{}}},\"status\":{}}}",
                    members.join(","),
                    node["status"]
                )
            })
            .collect();
        format!(
            "{{\"Pod\":{{}},\"Nodes\":{{\"items\":[{}]}}}}",
            items.join(",")
        )
        .into_bytes()
    }

    /// (known?, name, vendor, free memory, raw) of each node.
    fn scan(body: &[u8], known: &KnownNodes) -> Vec<(bool, String, String, String, String)> {
        let args = args_with(body, Some(known)).unwrap();
        args.nodes
            .unwrap()
            .iter()
            .map(|node| {
                let meta = &node.view.metadata;
                (
                    matches!(node.view, ScannedView::Known(_)),
                    meta.name.to_string(),
                    meta.labels
                        .get("flexinfer.ai/gpu.vendor")
                        .unwrap_or("")
                        .into(),
                    meta.annotations
                        .get("flexinfer.ai/gpu-free-memory")
                        .unwrap_or("")
                        .into(),
                    String::from_utf8(node.raw.to_vec()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn unchanged_nodes_are_known_on_the_next_request() {
        let nodes = [
            node("a", Some("u1"), Some("10"), "AMD"),
            node("b", Some("u2"), Some("11"), "NVIDIA"),
        ];
        let body = body(&nodes);
        let known = KnownNodes::new(16);
        let first = scan(&body, &known);
        assert!(first.iter().all(|node| !node.0));
        assert_eq!(known.len(), 2);
        let second = scan(&body, &known);
        assert!(second.iter().all(|node| node.0));
        // Same names, facts and raw texts as when read.
        let strip = |nodes: Vec<(bool, String, String, String, String)>| {
            nodes
                .into_iter()
                .map(|n| (n.1, n.2, n.3, n.4))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(first), strip(second.clone()));
        assert_eq!(second[1].2, "NVIDIA");
        // The raw texts are the items, whole: the skip ended each metadata
        // at its own closing bracket.
        let text = String::from_utf8(body.clone()).unwrap();
        assert!(text.contains(&format!("[{},{}]", second[0].4, second[1].4)));
    }

    #[test]
    fn a_new_resource_version_is_read_again() {
        let known = KnownNodes::new(16);
        scan(&body(&[node("a", Some("u1"), Some("10"), "AMD")]), &known);
        let changed = scan(
            &body(&[node("a", Some("u1"), Some("11"), "NVIDIA")]),
            &known,
        );
        assert!(!changed[0].0);
        assert_eq!(changed[0].2, "NVIDIA");
        let again = scan(
            &body(&[node("a", Some("u1"), Some("11"), "NVIDIA")]),
            &known,
        );
        assert!(again[0].0);
        assert_eq!(again[0].2, "NVIDIA");
        // A node recreated under the same name has a new uid.
        let recreated = scan(&body(&[node("a", Some("u9"), Some("11"), "AMD")]), &known);
        assert_eq!((recreated[0].0, recreated[0].2.as_str()), (false, "AMD"));
    }

    #[test]
    fn nodes_without_uid_or_version_are_always_read() {
        let known = KnownNodes::new(16);
        let nodes = [
            node("a", None, Some("10"), "AMD"),
            node("b", Some("u2"), None, "AMD"),
            node("c", Some(""), Some("1"), "AMD"),
        ];
        for _ in 0..2 {
            assert!(scan(&body(&nodes), &known).iter().all(|node| !node.0));
        }
        assert!(known.is_empty());
    }

    #[test]
    fn the_store_is_bounded() {
        let nodes: Vec<Value> = (0..5)
            .map(|i| node(&format!("n{i}"), Some("u"), Some("1"), "AMD"))
            .collect();
        let known = KnownNodes::new(3);
        scan(&body(&nodes), &known);
        assert!(known.len() <= 3, "{}", known.len());
        let off = KnownNodes::new(0);
        scan(&body(&nodes), &off);
        assert!(scan(&body(&nodes), &off).iter().all(|node| !node.0));
        assert!(off.is_empty());
    }
}
