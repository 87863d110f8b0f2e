//! Watch streams: newline-delimited `{"type": ..., "object": ...}` events.
//!
//! - No `resourceVersion` (or `0`), or `sendInitialEvents=true` (kube's
//!   streaming lists): synthetic `ADDED` events for the current objects,
//!   then changes. With `allowWatchBookmarks=true` the initial events end
//!   with a `BOOKMARK` annotated `k8s.io/initial-events-end: "true"`.
//! - `resourceVersion=N`: every change after N, in order, or a `410 Gone`
//!   `ERROR` event (reason `Expired`) when the type's history no longer
//!   reaches back to N (history begins when the server starts), which makes
//!   reflectors relist. A watcher that falls behind the bounded history gets
//!   the same error.
//! - `sendInitialEvents=false` without a `resourceVersion`: changes from
//!   now on.
//! - `allowWatchBookmarks=true`: a `BOOKMARK` with the current
//!   resourceVersion every bookmark interval (kube-apiserver: about a
//!   minute).
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
    /// Changes after the current resourceVersion.
    Now,
}

/// Parsed watch parameters.
#[derive(Clone, Debug)]
pub(crate) struct WatchQuery {
    pub start: WatchStart,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub filter: ListQuery,
    /// Send `PartialObjectMetadata` objects.
    pub metadata_only: bool,
}

impl WatchQuery {
    /// The start point named by the `resourceVersion` and
    /// `sendInitialEvents` parameters.
    pub fn start_from(
        resource_version: Option<&str>,
        send_initial_events: Option<bool>,
    ) -> Result<WatchStart, ApiError> {
        let after = match resource_version {
            None | Some("") | Some("0") => None,
            Some(rv) => Some(Self::parse_resource_version(rv)?),
        };
        Ok(match (send_initial_events, after) {
            (Some(true), _) | (None, None) => WatchStart::Snapshot,
            (_, Some(rv)) => WatchStart::After(rv),
            (Some(false), None) => WatchStart::Now,
        })
    }

    /// A `resourceVersion` parameter as a number (400 otherwise).
    pub fn parse_resource_version(rv: &str) -> Result<u64, ApiError> {
        rv.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid resource version: resourceVersion: Invalid value: {rv:?}"
            ))
        })
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
            WatchStart::Now => store.resource_version(),
        };
        if q.start == WatchStart::Snapshot && q.bookmarks {
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
        let start = WatchQuery::start_from;
        assert_eq!(start(None, None).unwrap(), WatchStart::Snapshot);
        assert_eq!(start(Some("0"), None).unwrap(), WatchStart::Snapshot);
        assert_eq!(start(Some("12"), None).unwrap(), WatchStart::After(12));
        assert_eq!(start(Some("12"), Some(true)).unwrap(), WatchStart::Snapshot);
        assert_eq!(
            start(Some("12"), Some(false)).unwrap(),
            WatchStart::After(12)
        );
        assert_eq!(start(None, Some(false)).unwrap(), WatchStart::Now);
        assert_eq!(start(Some("x"), None).unwrap_err().code, 400);
    }
}
