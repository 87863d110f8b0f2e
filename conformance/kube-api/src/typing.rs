//! How lists merge: atomic, set or map (keyed by some fields).
//!
//! Server-side apply, managed fields and strategic merge patch all need to
//! know, for each list in an object, whether it is replaced as a whole,
//! merged as a set of scalars, or merged item by item on a key.
//!
//! - Custom resources: from the CRD schema (`x-kubernetes-list-type` and
//!   `x-kubernetes-list-map-keys`); undeclared lists are atomic, as in a
//!   real API server.
//! - Built-in types and `metadata` of every type: a table of the lists
//!   controllers actually touch, approximating the upstream
//!   `patchMergeKey`s: `containers`, `initContainers`,
//!   `ephemeralContainers`, `volumes`, `env`, `imagePullSecrets` by `name`;
//!   `volumeMounts` by `mountPath`; container `ports` by `containerPort`
//!   and Service `ports` by `port` (upstream also keys on `protocol`);
//!   `conditions` by `type`; `ownerReferences` by `uid`; `finalizers` as a
//!   set. Every other list is atomic.

use serde_json::{Map, Value};

use crate::registry::ResourceType;

/// Merge behaviour of one list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// Scalars merged by value.
    Set,
    /// Objects merged by the values of these fields.
    Map(Vec<String>),
}

/// A position in an object, tracking the schema node (custom resources)
/// and whether we are under `metadata`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TypeCursor<'a> {
    schema: Option<&'a Value>,
    custom: bool,
    in_metadata: bool,
    at_root: bool,
}

impl<'a> TypeCursor<'a> {
    /// The cursor at the root of an object of type `rt`.
    pub fn root(rt: &'a ResourceType) -> Self {
        TypeCursor {
            schema: rt.schema.as_deref(),
            custom: rt.custom,
            in_metadata: false,
            at_root: true,
        }
    }

    /// The cursor of field `name` of the current object.
    pub fn field(&self, name: &str) -> Self {
        let schema = self.schema.and_then(|s| {
            s.get("properties")
                .and_then(|p| p.get(name))
                .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
        });
        TypeCursor {
            schema,
            custom: self.custom,
            in_metadata: self.in_metadata || (self.at_root && name == "metadata"),
            at_root: false,
        }
    }

    /// The cursor of the items of the current list.
    pub fn item(&self) -> Self {
        TypeCursor {
            schema: self.schema.and_then(|s| s.get("items")),
            at_root: false,
            ..*self
        }
    }

    /// The merge behaviour of the current list, named `field`, whose items
    /// (on either side of a merge) are `items`.
    pub fn list_type<'v>(&self, field: &str, items: impl Iterator<Item = &'v Value>) -> ListType {
        if self.custom && !self.in_metadata {
            return match self.schema {
                Some(s) => match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => {
                        let keys: Vec<String> = s
                            .get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|k| k.as_str().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default();
                        if keys.is_empty() {
                            ListType::Atomic
                        } else {
                            ListType::Map(keys)
                        }
                    }
                    _ => ListType::Atomic,
                },
                None => ListType::Atomic,
            };
        }
        builtin_list_type(field, items)
    }
}

fn builtin_list_type<'v>(field: &str, items: impl Iterator<Item = &'v Value>) -> ListType {
    let items: Vec<&Value> = items.collect();
    let keyed = |key: &str| -> ListType {
        if items.iter().all(|i| i.get(key).is_some()) {
            ListType::Map(vec![key.to_string()])
        } else {
            ListType::Atomic
        }
    };
    match field {
        "finalizers" => ListType::Set,
        "ownerReferences" => keyed("uid"),
        "conditions" => keyed("type"),
        "volumeMounts" => keyed("mountPath"),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => keyed("name"),
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                keyed("containerPort")
            } else {
                keyed("port")
            }
        }
        _ => ListType::Atomic,
    }
}

/// The key of a map-list item: an object of the key fields (missing ones
/// as null), or `None` when the item is not an object.
pub(crate) fn item_key(item: &Value, keys: &[String]) -> Option<Value> {
    let obj = item.as_object()?;
    let mut key = Map::new();
    for k in keys {
        key.insert(k.clone(), obj.get(k).cloned().unwrap_or(Value::Null));
    }
    Some(Value::Object(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn crd_lists_follow_the_schema() {
        let registry = Registry::standard();
        let model = registry
            .lookup("ai.flexinfer", "v1alpha2", "models")
            .unwrap();
        let cur = TypeCursor::root(model).field("status").field("conditions");
        assert_eq!(
            cur.list_type("conditions", std::iter::empty()),
            ListType::Map(vec!["type".into()])
        );
        let args = TypeCursor::root(model).field("spec").field("args");
        assert_eq!(args.list_type("args", std::iter::empty()), ListType::Atomic);
        let fin = TypeCursor::root(model)
            .field("metadata")
            .field("finalizers");
        assert_eq!(
            fin.list_type("finalizers", std::iter::empty()),
            ListType::Set
        );
    }

    #[test]
    fn builtin_lists_use_the_table() {
        let rt = ResourceType::builtin("apps", "v1", "Deployment", "deployments", true, true);
        let cur = TypeCursor::root(&rt);
        let c = json!({"name": "a"});
        assert_eq!(
            cur.list_type("containers", [&c].into_iter()),
            ListType::Map(vec!["name".into()])
        );
        let p = json!({"containerPort": 80});
        assert_eq!(
            cur.list_type("ports", [&p].into_iter()),
            ListType::Map(vec!["containerPort".into()])
        );
        let unnamed = json!({"image": "x"});
        assert_eq!(
            cur.list_type("containers", [&unnamed].into_iter()),
            ListType::Atomic
        );
        assert_eq!(cur.list_type("args", std::iter::empty()), ListType::Atomic);
    }
}
