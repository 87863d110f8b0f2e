//! Watch streams: newline-delimited `{"type": ..., "object": ...}` events.
//!
//! - No `resourceVersion` (or `0`): synthetic `ADDED` events for the current
//!   objects, then changes. With `sendInitialEvents=true` the initial events
//!   end with a `BOOKMARK` annotated `k8s.io/initial-events-end: "true"`
//!   (kube's streaming-list mode).
//! - `resourceVersion=N`: every change after N, in order, or a `410 Gone`
//!   `ERROR` event (reason `Expired`) when the type's history no longer
//!   reaches back to N, which makes reflectors relist. A watcher that falls
//!   behind the bounded history gets the same error.
//! - `allowWatchBookmarks=true`: a `BOOKMARK` with the current
//!   resourceVersion every bookmark interval.
//! - Label/field selectors: objects that start (stop) matching are sent as
//!   `ADDED` (`DELETED`), as the watch cache does.
//! - `timeoutSeconds`: the stream ends after that long.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures::Stream;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::error::ApiError;
use crate::meta;
use crate::registry::ResourceType;
use crate::store::{partial, present, EventKind, ListQuery, LoggedEvent, Store};

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchStart {
    /// Current state first (synthetic ADDED events).
    Snapshot,
    /// Changes after this resourceVersion.
    After(u64),
}

/// Parsed watch parameters.
#[derive(Clone, Debug)]
pub(crate) struct WatchQuery {
    pub start: WatchStart,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub filter: ListQuery,
    /// Send `PartialObjectMetadata` objects.
    pub metadata_only: bool,
}

impl WatchQuery {
    /// The start point named by a `resourceVersion` parameter.
    pub fn start_from(resource_version: Option<&str>) -> Result<WatchStart, ApiError> {
        match resource_version {
            None | Some("") | Some("0") => Ok(WatchStart::Snapshot),
            Some(rv) => rv
                .parse::<u64>()
                .map(WatchStart::After)
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}"))),
        }
    }
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut buf = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    buf.push(b'\n');
    Bytes::from(buf)
}

fn bookmark(rt: &ResourceType, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": metadata}),
    )
}

/// Whether a watch of `ns` (`Some("")` for cluster-scoped types, whose
/// objects have no namespace) with `filter` sees `obj`.
fn visible(obj: &Value, ns: Option<&str>, filter: &ListQuery) -> bool {
    ns.is_none_or(|ns| meta::meta_str(obj, "namespace").unwrap_or_default() == ns)
        && filter.matches(obj)
}

fn shown(rt: &ResourceType, obj: &Value, metadata_only: bool) -> Value {
    if metadata_only {
        partial(obj)
    } else {
        present(rt, obj)
    }
}

/// The event a watcher with this filter sees for a logged change.
fn render(
    rt: &ResourceType,
    ev: &LoggedEvent,
    ns: Option<&str>,
    filter: &ListQuery,
    metadata_only: bool,
) -> Option<Bytes> {
    let now = visible(&ev.obj, ns, filter);
    let before = ev.old.as_ref().is_some_and(|o| visible(o, ns, filter));
    let kind = match ev.kind {
        EventKind::Deleted => (now || before).then_some("DELETED")?,
        EventKind::Added => now.then_some("ADDED")?,
        EventKind::Modified => match (before, now, ev.old.is_some()) {
            (true, true, _) => "MODIFIED",
            (false, true, true) => "ADDED",
            (false, true, false) => "MODIFIED",
            (true, false, _) => "DELETED",
            (false, false, _) => return None,
        },
    };
    Some(line(kind, shown(rt, &ev.obj, metadata_only)))
}

/// The body of a watch response.
pub(crate) fn stream(
    store: Arc<Store>,
    rt: ResourceType,
    ns: Option<String>,
    q: WatchQuery,
    bookmark_interval: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    async_stream::stream! {
        let gr = rt.group_resource();
        let ns = ns.as_deref();
        let mut changes = store.subscribe();
        let deadline = q.timeout.map(|t| Instant::now() + t);
        let mut cursor = match q.start {
            WatchStart::Snapshot => {
                let (items, rv) = store.snapshot(&gr, ns);
                for item in items.iter().filter(|o| visible(o, ns, &q.filter)) {
                    yield Ok(line("ADDED", shown(&rt, item, q.metadata_only)));
                }
                rv
            }
            WatchStart::After(rv) => rv,
        };
        if q.send_initial_events {
            yield Ok(bookmark(&rt, cursor, true));
        }
        let mut next_bookmark = Instant::now() + bookmark_interval;
        loop {
            match store.events_since(&gr, cursor) {
                Err(e) => {
                    yield Ok(line("ERROR", e.to_status()));
                    break;
                }
                Ok((events, current)) => {
                    for ev in &events {
                        if let Some(bytes) = render(&rt, ev, ns, &q.filter, q.metadata_only) {
                            yield Ok(bytes);
                        }
                    }
                    // Every change of this type up to `current` is delivered.
                    cursor = cursor.max(current);
                }
            }
            if *shutdown.borrow() {
                break;
            }
            let far = Instant::now() + Duration::from_secs(86_400);
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                _ = tokio::time::sleep_until(next_bookmark), if q.bookmarks => {
                    if let Ok((events, current)) = store.events_since(&gr, cursor) {
                        for ev in &events {
                            if let Some(bytes) = render(&rt, ev, ns, &q.filter, q.metadata_only) {
                                yield Ok(bytes);
                            }
                        }
                        cursor = cursor.max(current);
                        yield Ok(bookmark(&rt, cursor, false));
                    }
                    next_bookmark = Instant::now() + bookmark_interval;
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or(far)) => break,
                _ = shutdown.changed() => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::LabelSelector;

    fn rt() -> ResourceType {
        ResourceType::builtin("", "v1", "ConfigMap", "configmaps", true, false)
    }

    fn ev(kind: EventKind, old: Option<Value>, obj: Value) -> LoggedEvent {
        LoggedEvent {
            rv: 1,
            kind,
            old,
            obj,
        }
    }

    fn kind_of(b: Option<Bytes>) -> Option<String> {
        b.map(|b| {
            serde_json::from_slice::<Value>(&b).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
    }

    #[test]
    fn selector_transitions_become_added_and_deleted() {
        let filter = ListQuery {
            labels: LabelSelector::parse("app=web").unwrap(),
            ..Default::default()
        };
        let web = json!({"metadata": {"name": "a", "namespace": "d", "labels": {"app": "web"}}});
        let db = json!({"metadata": {"name": "a", "namespace": "d", "labels": {"app": "db"}}});
        let r = |e: &LoggedEvent| kind_of(render(&rt(), e, None, &filter, false));
        assert_eq!(
            r(&ev(EventKind::Modified, Some(db.clone()), web.clone())).as_deref(),
            Some("ADDED")
        );
        assert_eq!(
            r(&ev(EventKind::Modified, Some(web.clone()), db.clone())).as_deref(),
            Some("DELETED")
        );
        assert_eq!(
            r(&ev(EventKind::Modified, Some(web.clone()), web.clone())).as_deref(),
            Some("MODIFIED")
        );
        assert_eq!(
            r(&ev(EventKind::Modified, Some(db.clone()), db.clone())),
            None
        );
        assert_eq!(r(&ev(EventKind::Added, None, db)), None);
        assert_eq!(
            kind_of(render(
                &rt(),
                &ev(EventKind::Added, None, web),
                Some("other"),
                &ListQuery::default(),
                false
            )),
            None
        );
    }

    #[test]
    fn cluster_scoped_objects_reach_their_watches() {
        let nodes = ResourceType::builtin("", "v1", "Node", "nodes", false, true);
        let node = json!({"kind": "Node", "metadata": {"name": "n1"}});
        let seen = render(
            &nodes,
            &ev(EventKind::Modified, Some(node.clone()), node),
            Some(""),
            &ListQuery::default(),
            false,
        );
        assert_eq!(kind_of(seen).as_deref(), Some("MODIFIED"));
    }

    #[test]
    fn metadata_only_watches_send_partial_objects() {
        let obj = json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
        let b = render(
            &rt(),
            &ev(EventKind::Added, None, obj),
            None,
            &ListQuery::default(),
            true,
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["object"]["kind"], "PartialObjectMetadata");
        assert!(v["object"].get("data").is_none());
    }

    #[test]
    fn resource_versions_parse() {
        assert_eq!(WatchQuery::start_from(None).unwrap(), WatchStart::Snapshot);
        assert_eq!(
            WatchQuery::start_from(Some("0")).unwrap(),
            WatchStart::Snapshot
        );
        assert_eq!(
            WatchQuery::start_from(Some("12")).unwrap(),
            WatchStart::After(12)
        );
        assert_eq!(WatchQuery::start_from(Some("x")).unwrap_err().code, 400);
    }
}
