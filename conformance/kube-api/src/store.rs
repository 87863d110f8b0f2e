//! The object store: objects as JSON, one global `resourceVersion`
//! counter, and a bounded event log per resource type for watches.
//!
//! All state sits behind one mutex, so every write is atomic and events
//! are logged in `resourceVersion` order. After each write the new
//! `resourceVersion` is published on a `tokio::sync::watch` channel, which
//! wakes watch streams, the garbage collector and the simulated
//! controllers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::apply::{self, Applied};
use crate::defaults;
use crate::error::ApiError;
use crate::fields::Scope;
use crate::meta::{self, IdGen};
use crate::patch;
use crate::registry::{GroupResource, Registry, ResourceType};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector};
use crate::typing::TypeCursor;

/// Namespace (empty for cluster-scoped objects) and name.
pub(crate) type ObjKey = (String, String);

/// Watch event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One logged change.
#[derive(Debug)]
pub(crate) struct LoggedEvent {
    pub rv: u64,
    pub kind: EventKind,
    pub old: Option<Value>,
    pub obj: Value,
}

#[derive(Debug, Default)]
struct EventLog {
    events: VecDeque<Arc<LoggedEvent>>,
    /// Watches from a resourceVersion older than this get 410 Gone.
    compacted: u64,
}

/// Everything behind the lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub rv: u64,
    objects: HashMap<GroupResource, BTreeMap<ObjKey, Value>>,
    logs: HashMap<GroupResource, EventLog>,
    uids: HashMap<String, (GroupResource, ObjKey)>,
    next_cluster_ip: u32,
    /// Compaction point of types that had no log yet when history was
    /// expired.
    compacted_all: u64,
}

impl State {
    fn bucket(&self, gr: &GroupResource) -> Option<&BTreeMap<ObjKey, Value>> {
        self.objects.get(gr)
    }

    pub fn get(&self, gr: &GroupResource, key: &ObjKey) -> Option<&Value> {
        self.objects.get(gr)?.get(key)
    }

    /// Every object of one type, with its key.
    pub fn objects_of(&self, gr: &GroupResource) -> Vec<(ObjKey, Value)> {
        self.objects
            .get(gr)
            .map(|b| b.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Whether an object with this UID exists.
    pub fn uid_exists(&self, uid: &str) -> bool {
        self.uids.contains_key(uid)
    }

    /// Every object of every type, with its group/resource.
    pub fn all_objects(&self) -> impl Iterator<Item = (&GroupResource, &ObjKey, &Value)> {
        self.objects
            .iter()
            .flat_map(|(gr, bucket)| bucket.iter().map(move |(k, v)| (gr, k, v)))
    }

    fn log(&mut self, gr: &GroupResource, limit: usize, event: LoggedEvent) {
        let compacted_all = self.compacted_all;
        let log = self.logs.entry(gr.clone()).or_insert_with(|| EventLog {
            compacted: compacted_all,
            ..Default::default()
        });
        log.events.push_back(Arc::new(event));
        while log.events.len() > limit.max(1) {
            if let Some(dropped) = log.events.pop_front() {
                log.compacted = dropped.rv;
            }
        }
    }

    fn put(&mut self, gr: &GroupResource, key: ObjKey, obj: Value) {
        if let Some(uid) = meta::meta_str(&obj, "uid") {
            self.uids.insert(uid.to_string(), (gr.clone(), key.clone()));
        }
        self.objects.entry(gr.clone()).or_default().insert(key, obj);
    }

    fn take(&mut self, gr: &GroupResource, key: &ObjKey) -> Option<Value> {
        let obj = self.objects.get_mut(gr)?.remove(key)?;
        if let Some(uid) = meta::meta_str(&obj, "uid") {
            self.uids.remove(uid);
        }
        Some(obj)
    }
}

/// Options shared by writes.
#[derive(Clone, Debug)]
pub(crate) struct WriteOpts {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// Field manager recorded in `managedFields`.
    pub manager: String,
    /// Writes by the server itself (fixtures, simulated controllers): no
    /// namespace existence check, `status` kept on create.
    pub internal: bool,
}

impl WriteOpts {
    pub fn client(manager: impl Into<String>, dry_run: bool) -> Self {
        WriteOpts {
            dry_run,
            manager: manager.into(),
            internal: false,
        }
    }

    pub fn internal(manager: impl Into<String>) -> Self {
        WriteOpts {
            dry_run: false,
            manager: manager.into(),
            internal: true,
        }
    }
}

/// How managed fields are maintained by a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Managed {
    /// Record an `Update` by the write's manager.
    Track,
    /// Already computed (apply).
    Preset,
}

/// A patch body, by content type.
#[derive(Clone, Debug)]
pub(crate) enum PatchBody {
    Merge(Value),
    Strategic(Value),
    Json(Value),
    Apply { config: Value, force: bool },
}

/// `DeleteOptions` that matter here.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOpts {
    pub dry_run: bool,
    pub propagation: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// List query parameters.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListQuery {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

impl ListQuery {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(meta::labels(obj)) && self.fields.matches(obj)
    }
}

/// The store shared by the HTTP handlers, watches and background tasks.
#[derive(Debug)]
pub(crate) struct Store {
    pub registry: Arc<Registry>,
    state: Mutex<State>,
    changes: watch::Sender<u64>,
    ids: IdGen,
    history_limit: usize,
}

fn namespaces_gr() -> GroupResource {
    GroupResource {
        group: String::new(),
        resource: "namespaces".into(),
    }
}

/// `obj` as served by `rt`'s version.
pub(crate) fn present(rt: &ResourceType, obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(m) = out.as_object_mut() {
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
    }
    out
}

/// `obj` as `PartialObjectMetadata` (metadata-only requests).
pub(crate) fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list as `PartialObjectMetadataList`.
pub(crate) fn partial_list(list: &Value) -> Value {
    let items: Vec<Value> = list
        .get("items")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(partial).collect())
        .unwrap_or_default();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "items": items,
    })
}

/// Everything but metadata, status and type information: a change here
/// bumps `metadata.generation`.
fn spec_part(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(m) = out.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    out
}

fn check_type(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str) {
        if kind != rt.kind {
            return Err(ApiError::bad_request(format!(
                "the kind of the provided object ({kind}) does not match the resource ({})",
                rt.kind
            )));
        }
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        let (group, _) = crate::registry::split_api_version(av);
        if group != rt.group {
            return Err(ApiError::bad_request(format!(
                "the apiVersion of the provided object ({av}) does not match the resource group ({})",
                rt.group
            )));
        }
    }
    Ok(())
}

impl Store {
    /// A store over `registry`, keeping `history_limit` events per type.
    pub fn new(registry: Registry, history_limit: usize) -> Self {
        let (changes, _) = watch::channel(0);
        Store {
            registry: Arc::new(registry),
            state: Mutex::new(State::default()),
            changes,
            ids: IdGen::default(),
            history_limit,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver woken after every write.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn notify(&self, rv: u64) {
        self.changes.send_replace(rv);
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Drops every type's event history and moves the compaction point
    /// past the current resourceVersion: every open watch, and every watch
    /// resuming from an earlier resourceVersion, gets 410 Gone.
    pub fn expire_history(&self) {
        let mut st = self.lock();
        st.rv += 1;
        let rv = st.rv;
        let types: Vec<GroupResource> = st.objects.keys().chain(st.logs.keys()).cloned().collect();
        for gr in types {
            let log = st.logs.entry(gr).or_default();
            log.events.clear();
            log.compacted = rv;
        }
        st.compacted_all = rv;
        drop(st);
        // Wake watchers so that they notice.
        self.notify(rv);
    }

    /// Starts every type's history at the current resourceVersion (after
    /// the server's own objects are in): as on a real API server, whose
    /// watch cache of a type begins when the type is first served, a watch
    /// from an earlier resourceVersion gets 410 Gone.
    pub fn begin_history(&self) {
        let mut st = self.lock();
        let rv = st.rv;
        for log in st.logs.values_mut() {
            log.events.clear();
            log.compacted = rv;
        }
        st.compacted_all = rv;
    }

    /// Events of `gr` after `since`, or 410 when history no longer
    /// reaches back that far; also returns the current resourceVersion.
    pub fn events_since(
        &self,
        gr: &GroupResource,
        since: u64,
    ) -> Result<(Vec<Arc<LoggedEvent>>, u64), ApiError> {
        let st = self.lock();
        let compacted = st
            .logs
            .get(gr)
            .map(|l| l.compacted)
            .unwrap_or(0)
            .max(st.compacted_all);
        if since < compacted {
            return Err(ApiError::expired(since, compacted));
        }
        let events = match st.logs.get(gr) {
            Some(log) => {
                let start = log.events.partition_point(|e| e.rv <= since);
                log.events.range(start..).cloned().collect()
            }
            None => Vec::new(),
        };
        Ok((events, st.rv))
    }

    /// Every object of `gr` (in `ns`, if given) and the current
    /// resourceVersion, atomically.
    pub fn snapshot(&self, gr: &GroupResource, ns: Option<&str>) -> (Vec<Value>, u64) {
        let st = self.lock();
        let items = st
            .bucket(gr)
            .map(|b| {
                b.iter()
                    .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        (items, st.rv)
    }

    /// One object.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        let st = self.lock();
        st.get(&rt.group_resource(), &(ns.to_string(), name.to_string()))
            .map(|o| present(rt, o))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// A list object (`<Kind>List`), paginated by `limit`/`continue`.
    pub fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        q: &ListQuery,
    ) -> Result<Value, ApiError> {
        let after: Option<ObjKey> = match &q.continue_token {
            Some(t) if !t.is_empty() => Some(decode_continue(t)?),
            _ => None,
        };
        let st = self.lock();
        let mut items = Vec::new();
        let mut last_key = None;
        let mut remaining = 0usize;
        if let Some(bucket) = st.bucket(&rt.group_resource()) {
            let iter = bucket
                .iter()
                .filter(|(k, _)| after.as_ref().is_none_or(|a| *k > a))
                .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
                .filter(|(_, v)| q.matches(v));
            for (k, v) in iter {
                if q.limit.is_some_and(|l| l > 0 && items.len() >= l) {
                    remaining += 1;
                    continue;
                }
                items.push(present(rt, v));
                last_key = Some(k.clone());
            }
        }
        let more = remaining > 0;
        // The continue token names the last returned key.
        let continue_token = if more {
            last_key.as_ref().map(encode_continue)
        } else {
            None
        };
        let mut metadata = json!({"resourceVersion": st.rv.to_string()});
        if let Some(c) = continue_token {
            metadata["continue"] = json!(c);
            // As upstream: counted only when no selector filters the items.
            if q.labels.is_empty() && q.fields.is_empty() {
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// Creates an object.
    pub fn create(
        &self,
        rt: &ResourceType,
        ns: &str,
        obj: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let out = self.create_locked(&mut st, rt, ns, obj, opts, Managed::Track)?;
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(present(rt, &out))
    }

    /// Replaces an object (PUT), on the main resource or `/status`.
    pub fn replace(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        obj: Value,
        scope: Scope,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        if let Some(body_name) = meta::meta_str(&obj, "name") {
            if body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
        }
        let mut st = self.lock();
        let key = (ns.to_string(), name.to_string());
        let old = st
            .get(&rt.group_resource(), &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let out = self.update_locked(&mut st, rt, old, obj, scope, opts, Managed::Track)?;
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(present(rt, &out))
    }

    /// Patches an object; an apply patch may create it. Returns the object
    /// and whether it was created.
    pub fn patch(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        body: PatchBody,
        scope: Scope,
        opts: &WriteOpts,
    ) -> Result<(Value, bool), ApiError> {
        let mut st = self.lock();
        let key = (ns.to_string(), name.to_string());
        let live = st.get(&rt.group_resource(), &key).cloned();
        let (out, created) = match body {
            PatchBody::Apply { config, force } => {
                check_type(rt, &config)?;
                if config.get("apiVersion").is_none() || config.get("kind").is_none() {
                    return Err(ApiError::bad_request(
                        "apply configurations must set apiVersion and kind",
                    ));
                }
                match meta::meta_str(&config, "name") {
                    Some(n) if n == name => {}
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "the name of the applied object does not match the name on the URL ({name})"
                        )))
                    }
                }
                if let (Some(live), Some(want)) =
                    (&live, meta::meta_str(&config, "resourceVersion"))
                {
                    if !want.is_empty() && Some(want) != meta::meta_str(live, "resourceVersion") {
                        return Err(ApiError::conflict(rt, name));
                    }
                }
                if live.is_none() && scope == Scope::Status {
                    return Err(ApiError::not_found(rt, name));
                }
                match apply::apply(rt, scope, live.as_ref(), &config, &opts.manager, force)? {
                    Applied::Unchanged => (live.clone().unwrap_or_default(), false),
                    Applied::Changed(mut obj) => match live {
                        Some(live) => {
                            let rv = meta::meta_str(&live, "resourceVersion")
                                .unwrap_or("")
                                .to_string();
                            meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv));
                            (
                                self.update_locked(
                                    &mut st,
                                    rt,
                                    live,
                                    obj,
                                    scope,
                                    opts,
                                    Managed::Preset,
                                )?,
                                false,
                            )
                        }
                        None => {
                            let m = meta::meta_mut(&mut obj);
                            m.insert("name".into(), json!(name));
                            if rt.namespaced {
                                m.insert("namespace".into(), json!(ns));
                            }
                            (
                                self.create_locked(&mut st, rt, ns, obj, opts, Managed::Preset)?,
                                true,
                            )
                        }
                    },
                }
            }
            PatchBody::Merge(p) => {
                let live = live.ok_or_else(|| ApiError::not_found(rt, name))?;
                let mut target = live.clone();
                patch::merge_patch(&mut target, &p);
                let out =
                    self.update_locked(&mut st, rt, live, target, scope, opts, Managed::Track)?;
                (out, false)
            }
            PatchBody::Strategic(p) => {
                if rt.custom {
                    return Err(ApiError::with_code(
                        415,
                        "strategic merge patch is not supported for custom resources; use a JSON merge patch",
                    ));
                }
                let live = live.ok_or_else(|| ApiError::not_found(rt, name))?;
                let mut target = live.clone();
                patch::strategic_merge(&mut target, &p, TypeCursor::root(rt));
                let out =
                    self.update_locked(&mut st, rt, live, target, scope, opts, Managed::Track)?;
                (out, false)
            }
            PatchBody::Json(p) => {
                let live = live.ok_or_else(|| ApiError::not_found(rt, name))?;
                let mut target = live.clone();
                patch::json_patch(&mut target, &p).map_err(|e| ApiError::invalid(rt, name, e))?;
                let out =
                    self.update_locked(&mut st, rt, live, target, scope, opts, Managed::Track)?;
                (out, false)
            }
        };
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok((present(rt, &out), created))
    }

    /// Deletes an object: marks it when finalizers remain, removes it
    /// otherwise.
    pub fn delete(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let out = self.delete_locked(&mut st, rt, ns, name, opts)?;
        let key = (
            meta::meta_str(&out, "namespace")
                .unwrap_or_default()
                .to_string(),
            name.to_string(),
        );
        let gone = !opts.dry_run && st.get(&rt.group_resource(), &key).is_none();
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        if gone && !returns_deleted_object(rt) {
            return Ok(deleted_status(rt, &out));
        }
        Ok(present(rt, &out))
    }

    /// Deletes every object of `rt` in `ns` (or everywhere) matching `q`.
    pub fn delete_collection(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        q: &ListQuery,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let keys: Vec<ObjKey> = st
            .bucket(&rt.group_resource())
            .map(|b| {
                b.iter()
                    .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
                    .filter(|(_, v)| q.matches(v))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut items = Vec::new();
        for (n, name) in keys {
            items.push(present(
                rt,
                &self.delete_locked(&mut st, rt, &n, &name, opts)?,
            ));
        }
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items,
        }))
    }

    /// Creates or replaces an object as given (fixtures): `status` kept,
    /// no namespace check, server fields filled where missing.
    pub fn insert(&self, obj: Value) -> Result<Value, ApiError> {
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let rt = self
            .registry
            .by_kind(api_version, kind)
            .cloned()
            .ok_or_else(|| {
                ApiError::bad_request(format!("no resource type serves {api_version} {kind}"))
            })?;
        let ns = if rt.namespaced {
            meta::meta_str(&obj, "namespace")
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        };
        let mut st = self.lock();
        let out = self.insert_locked(&mut st, &rt, &ns, obj)?;
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(present(&rt, &out))
    }

    fn insert_locked(
        &self,
        st: &mut State,
        rt: &ResourceType,
        ns: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let gr = rt.group_resource();
        let name = meta::meta_str(&obj, "name").unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(ApiError::invalid(rt, "", "metadata.name: Required value"));
        }
        let key = (ns.to_string(), name.clone());
        let old = st.get(&gr, &key).cloned();
        let cluster_ip = Self::allocate_cluster_ip(st);
        defaults::apply(rt, &mut obj, old.as_ref(), &|| cluster_ip.clone());
        schema::normalize(rt, &mut obj, Scope::Main)
            .map_err(|e| ApiError::invalid(rt, &name, e))?;
        if rt.status_subresource {
            schema::normalize(rt, &mut obj, Scope::Status)
                .map_err(|e| ApiError::invalid(rt, &name, e))?;
        }
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), json!(rt.api_version()));
            o.insert("kind".into(), json!(rt.kind));
        }
        let old_meta = old
            .as_ref()
            .and_then(|o| o.get("metadata"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let m = meta::meta_mut(&mut obj);
        if rt.namespaced {
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        for (field, fallback) in [
            ("uid", json!(self.ids.uid())),
            ("creationTimestamp", json!(meta::now())),
            ("generation", json!(1)),
        ] {
            if m.get(field).is_none_or(|v| v.is_null() || v == "") {
                m.insert(
                    field.into(),
                    old_meta.get(field).cloned().unwrap_or(fallback),
                );
            }
        }
        st.rv += 1;
        let rv = st.rv;
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        if let Some(old) = &old {
            // A new UID under the same name is a different object.
            if let Some(uid) = meta::meta_str(old, "uid") {
                st.uids.remove(uid);
            }
        }
        st.put(&gr, key, obj.clone());
        let kind = if old.is_some() {
            EventKind::Modified
        } else {
            EventKind::Added
        };
        st.log(
            &gr,
            self.history_limit,
            LoggedEvent {
                rv,
                kind,
                old,
                obj: obj.clone(),
            },
        );
        Ok(obj)
    }

    /// Runs `f` on the locked state and wakes watchers afterwards. Used by
    /// the garbage collector and simulated controllers, which call the
    /// `*_locked` operations.
    pub fn with_state<T>(&self, f: impl FnOnce(&Store, &mut State) -> T) -> T {
        let mut st = self.lock();
        let before = st.rv;
        let out = f(self, &mut st);
        let rv = st.rv;
        drop(st);
        if rv != before {
            self.notify(rv);
        }
        out
    }

    fn allocate_cluster_ip(st: &mut State) -> String {
        st.next_cluster_ip += 1;
        let n = st.next_cluster_ip;
        format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
    }

    fn create_locked(
        &self,
        st: &mut State,
        rt: &ResourceType,
        ns: &str,
        mut obj: Value,
        opts: &WriteOpts,
        managed: Managed,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_type(rt, &obj)?;
        let gr = rt.group_resource();
        let m = meta::meta_mut(&mut obj);
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            match m.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => {
                    name = format!("{prefix}{}", self.ids.suffix())
                }
                _ => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ))
                }
            }
        }
        if let Some(why) = crate::names::invalid_name(rt, &name) {
            return Err(ApiError::invalid(rt, &name, why));
        }
        m.insert("name".into(), json!(name));
        if rt.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(body_ns) if !body_ns.is_empty() && body_ns != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                _ => {}
            }
            if ns.is_empty() {
                return Err(ApiError::bad_request(
                    "a namespaced object needs a namespace",
                ));
            }
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            m.remove(f);
        }
        if !opts.internal
            || m.get("uid")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            m.insert("uid".into(), json!(self.ids.uid()));
        }
        if !opts.internal || m.get("creationTimestamp").is_none_or(Value::is_null) {
            m.insert("creationTimestamp".into(), json!(meta::now()));
        }
        if !opts.internal || m.get("generation").is_none() {
            m.insert("generation".into(), json!(1));
        }
        if managed == Managed::Track && !opts.internal {
            m.remove("managedFields");
        }
        if rt.namespaced && !opts.internal {
            match st.get(&namespaces_gr(), &(String::new(), ns.to_string())) {
                None => return Err(ApiError::namespace_not_found(ns)),
                Some(n) if meta::is_deleting(n) => {
                    return Err(ApiError::forbidden(format!(
                        "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                        rt.qualified_name()
                    )))
                }
                Some(_) => {}
            }
        }
        let key = (
            if rt.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.clone(),
        );
        if st.get(&gr, &key).is_some() {
            return Err(ApiError::already_exists(rt, &name));
        }
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), json!(rt.api_version()));
            o.insert("kind".into(), json!(rt.kind));
            if rt.status_subresource && !opts.internal {
                o.remove("status");
            }
        }
        let mut cluster_ip = None;
        if rt.plural == "services" && rt.group.is_empty() {
            cluster_ip = Some(Self::allocate_cluster_ip(st));
        }
        defaults::apply(rt, &mut obj, None, &|| {
            cluster_ip.clone().unwrap_or_default()
        });
        schema::normalize(rt, &mut obj, Scope::Main)
            .map_err(|e| ApiError::invalid(rt, &name, e))?;
        if rt.status_subresource {
            schema::normalize(rt, &mut obj, Scope::Status)
                .map_err(|e| ApiError::invalid(rt, &name, e))?;
        }
        if managed == Managed::Track && !opts.internal {
            apply::track_update(rt, Scope::Main, &opts.manager, None, &mut obj);
        }
        if opts.dry_run {
            return Ok(obj);
        }
        st.rv += 1;
        let rv = st.rv;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        st.put(&gr, key, obj.clone());
        st.log(
            &gr,
            self.history_limit,
            LoggedEvent {
                rv,
                kind: EventKind::Added,
                old: None,
                obj: obj.clone(),
            },
        );
        Ok(obj)
    }

    #[allow(clippy::too_many_arguments)]
    fn update_locked(
        &self,
        st: &mut State,
        rt: &ResourceType,
        old: Value,
        new: Value,
        scope: Scope,
        opts: &WriteOpts,
        managed: Managed,
    ) -> Result<Value, ApiError> {
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_type(rt, &new)?;
        let gr = rt.group_resource();
        let name = meta::meta_str(&old, "name").unwrap_or_default().to_string();
        let ns = meta::meta_str(&old, "namespace")
            .unwrap_or_default()
            .to_string();
        let old_rv = meta::meta_str(&old, "resourceVersion")
            .unwrap_or_default()
            .to_string();
        if let Some(want) = meta::meta_str(&new, "resourceVersion") {
            if !want.is_empty() && want != old_rv {
                return Err(ApiError::conflict(rt, &name));
            }
        }
        // A uid in the body is a precondition, as upstream.
        if let Some(want) = meta::meta_str(&new, "uid") {
            if !want.is_empty() && Some(want) != meta::meta_str(&old, "uid") {
                return Err(ApiError::conflict(rt, &name));
            }
        }
        let preset_managed = new
            .get("metadata")
            .and_then(|m| m.get("managedFields"))
            .cloned();
        let mut result = match scope {
            Scope::Status => {
                let mut r = old.clone();
                if let Some(o) = r.as_object_mut() {
                    match new.get("status") {
                        Some(s) => o.insert("status".into(), s.clone()),
                        None => o.remove("status"),
                    };
                }
                r
            }
            Scope::Main => {
                let mut r = new;
                if let Some(o) = r.as_object_mut() {
                    o.insert("apiVersion".into(), json!(rt.api_version()));
                    o.insert("kind".into(), json!(rt.kind));
                    if rt.status_subresource {
                        match old.get("status") {
                            Some(s) => o.insert("status".into(), s.clone()),
                            None => o.remove("status"),
                        };
                    }
                }
                let old_meta = old
                    .get("metadata")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let m = meta::meta_mut(&mut r);
                for f in [
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "managedFields",
                ] {
                    match old_meta.get(f) {
                        Some(v) => m.insert(f.into(), v.clone()),
                        None => m.remove(f),
                    };
                }
                r
            }
        };
        {
            let m = meta::meta_mut(&mut result);
            m.insert("resourceVersion".into(), json!(old_rv));
            m.remove("selfLink");
        }
        if meta::is_deleting(&old) {
            let before = meta::finalizers(&old);
            if meta::finalizers(&result)
                .iter()
                .any(|f| !before.contains(f))
            {
                let added: Vec<String> = meta::finalizers(&result)
                    .into_iter()
                    .filter(|f| !before.contains(f))
                    .map(|f| format!("{f:?}"))
                    .collect();
                return Err(ApiError::invalid(
                    rt,
                    &name,
                    format!(
                        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        added.join(", ")
                    ),
                ));
            }
        }
        if scope == Scope::Main {
            defaults::apply(rt, &mut result, Some(&old), &String::new);
            check_immutable_data(rt, &name, &old, &result)?;
        }
        schema::normalize(rt, &mut result, scope).map_err(|e| ApiError::invalid(rt, &name, e))?;
        if scope == Scope::Main && spec_part(&result) != spec_part(&old) {
            let gen = old
                .get("metadata")
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta::meta_mut(&mut result).insert("generation".into(), json!(gen + 1));
        }
        match managed {
            Managed::Track => {
                apply::track_update(rt, scope, &opts.manager, Some(&old), &mut result)
            }
            Managed::Preset => {
                if let Some(mf) = preset_managed {
                    meta::meta_mut(&mut result).insert("managedFields".into(), mf);
                }
            }
        }
        if result == old {
            return Ok(old);
        }
        if opts.dry_run {
            return Ok(result);
        }
        let key = (ns, name);
        st.rv += 1;
        let rv = st.rv;
        meta::meta_mut(&mut result).insert("resourceVersion".into(), json!(rv.to_string()));
        if meta::is_deleting(&result)
            && meta::finalizers(&result).is_empty()
            && !is_terminating_namespace(rt, &result)
        {
            st.take(&gr, &key);
            st.log(
                &gr,
                self.history_limit,
                LoggedEvent {
                    rv,
                    kind: EventKind::Deleted,
                    old: Some(old),
                    obj: result.clone(),
                },
            );
            return Ok(result);
        }
        st.put(&gr, key, result.clone());
        st.log(
            &gr,
            self.history_limit,
            LoggedEvent {
                rv,
                kind: EventKind::Modified,
                old: Some(old),
                obj: result.clone(),
            },
        );
        Ok(result)
    }

    fn delete_locked(
        &self,
        st: &mut State,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let gr = rt.group_resource();
        let key = (
            if rt.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        );
        let old = st
            .get(&gr, &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        if let Some(uid) = &opts.precondition_uid {
            if Some(uid.as_str()) != meta::meta_str(&old, "uid") {
                return Err(ApiError::precondition_failed(
                    rt,
                    name,
                    &format!("UID in precondition: {uid}"),
                ));
            }
        }
        if let Some(rv) = &opts.precondition_rv {
            if Some(rv.as_str()) != meta::meta_str(&old, "resourceVersion") {
                return Err(ApiError::precondition_failed(
                    rt,
                    name,
                    &format!("ResourceVersion in precondition: {rv}"),
                ));
            }
        }
        if opts.dry_run {
            return Ok(old);
        }
        let finalizers = deletion_finalizers(rt, &old, opts.propagation.as_deref());
        let namespace = rt.group.is_empty() && rt.plural == "namespaces";
        if meta::is_deleting(&old) {
            return Ok(self.redelete_locked(st, rt, old, finalizers, namespace));
        }
        if !finalizers.is_empty() || namespace {
            let mut marked = old.clone();
            let m = meta::meta_mut(&mut marked);
            m.insert("deletionTimestamp".into(), json!(meta::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            // As upstream, marking for deletion bumps the generation.
            if let Some(gen) = m.get("generation").and_then(Value::as_i64) {
                m.insert("generation".into(), json!(gen + 1));
            }
            if !finalizers.is_empty() {
                m.insert("finalizers".into(), json!(finalizers));
            }
            if namespace {
                if let Some(o) = marked.as_object_mut() {
                    let status = o.entry("status").or_insert_with(|| json!({}));
                    if let Some(s) = status.as_object_mut() {
                        s.insert("phase".into(), json!("Terminating"));
                    }
                }
            }
            st.rv += 1;
            let rv = st.rv;
            meta::meta_mut(&mut marked).insert("resourceVersion".into(), json!(rv.to_string()));
            st.put(&gr, key, marked.clone());
            st.log(
                &gr,
                self.history_limit,
                LoggedEvent {
                    rv,
                    kind: EventKind::Modified,
                    old: Some(old),
                    obj: marked.clone(),
                },
            );
            return Ok(marked);
        }
        Ok(self.remove_locked(st, rt, &key))
    }

    /// A delete of an object already being deleted: only its
    /// garbage-collection finalizers change (another `propagationPolicy`),
    /// and without finalizers left it goes.
    fn redelete_locked(
        &self,
        st: &mut State,
        rt: &ResourceType,
        old: Value,
        finalizers: Vec<String>,
        namespace: bool,
    ) -> Value {
        let mut before = meta::finalizers(&old);
        let mut after = finalizers.clone();
        before.sort();
        after.sort();
        if before == after {
            return old;
        }
        let gr = rt.group_resource();
        let key = (
            meta::meta_str(&old, "namespace")
                .unwrap_or_default()
                .to_string(),
            meta::meta_str(&old, "name").unwrap_or_default().to_string(),
        );
        if finalizers.is_empty() && !namespace {
            return self.remove_locked(st, rt, &key);
        }
        let mut updated = old.clone();
        st.rv += 1;
        let rv = st.rv;
        let m = meta::meta_mut(&mut updated);
        if finalizers.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(finalizers));
        }
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        st.put(&gr, key, updated.clone());
        st.log(
            &gr,
            self.history_limit,
            LoggedEvent {
                rv,
                kind: EventKind::Modified,
                old: Some(old),
                obj: updated.clone(),
            },
        );
        updated
    }

    /// Removes an object now (no finalizer check); returns it.
    pub fn remove_locked(&self, st: &mut State, rt: &ResourceType, key: &ObjKey) -> Value {
        let gr = rt.group_resource();
        let Some(mut obj) = st.take(&gr, key) else {
            return Value::Null;
        };
        st.rv += 1;
        let rv = st.rv;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        st.log(
            &gr,
            self.history_limit,
            LoggedEvent {
                rv,
                kind: EventKind::Deleted,
                old: None,
                obj: obj.clone(),
            },
        );
        obj
    }

    /// Deletes from background tasks, with background propagation (as the
    /// garbage collector asks); missing objects are ignored.
    pub fn delete_internal(&self, st: &mut State, rt: &ResourceType, key: &ObjKey) {
        let opts = DeleteOpts {
            propagation: Some("Background".into()),
            ..Default::default()
        };
        let _ = self.delete_locked(st, rt, &key.0, &key.1, &opts);
    }

    /// Creates from a background task.
    pub fn create_internal(
        &self,
        st: &mut State,
        rt: &ResourceType,
        obj: Value,
        manager: &str,
    ) -> Result<Value, ApiError> {
        let ns = meta::meta_str(&obj, "namespace")
            .unwrap_or_default()
            .to_string();
        self.create_locked(
            st,
            rt,
            &ns,
            obj,
            &WriteOpts::internal(manager),
            Managed::Track,
        )
    }

    /// Replaces (main resource or status) from a background task.
    pub fn update_internal(
        &self,
        st: &mut State,
        rt: &ResourceType,
        old: Value,
        new: Value,
        scope: Scope,
        manager: &str,
    ) -> Result<Value, ApiError> {
        self.update_locked(
            st,
            rt,
            old,
            new,
            scope,
            &WriteOpts::internal(manager),
            Managed::Track,
        )
    }
}

/// The `orphan` finalizer: dependents lose their owner reference.
const ORPHAN: &str = "orphan";
/// The `foregroundDeletion` finalizer: dependents go first.
const FOREGROUND: &str = "foregroundDeletion";

/// The finalizers of an object after a delete with `propagation`, as
/// upstream computes them: the request's policy, else the one the object
/// is already being deleted with, else the type's default (`Orphan` for
/// `batch/v1` Jobs, for compatibility, `Background` otherwise).
fn deletion_finalizers(rt: &ResourceType, obj: &Value, propagation: Option<&str>) -> Vec<String> {
    let current = meta::finalizers(obj);
    let policy = propagation
        .or_else(|| {
            current.iter().find_map(|f| match f.as_str() {
                ORPHAN => Some("Orphan"),
                FOREGROUND => Some("Foreground"),
                _ => None,
            })
        })
        .unwrap_or(if rt.group == "batch" && rt.kind == "Job" {
            "Orphan"
        } else {
            "Background"
        });
    let mut out: Vec<String> = current
        .into_iter()
        .filter(|f| f != ORPHAN && f != FOREGROUND)
        .collect();
    match policy {
        "Orphan" => out.push(ORPHAN.into()),
        "Foreground" => out.push(FOREGROUND.into()),
        _ => {}
    }
    out
}

/// Whether a delete that removes an object answers with the object (as
/// upstream's registries of these types do) rather than a `Status`.
fn returns_deleted_object(rt: &ResourceType) -> bool {
    match rt.group.as_str() {
        "" => matches!(
            rt.plural.as_str(),
            "pods"
                | "services"
                | "serviceaccounts"
                | "namespaces"
                | "persistentvolumeclaims"
                | "persistentvolumes"
        ),
        "apiextensions.k8s.io" => true,
        _ => false,
    }
}

/// The `Status` a delete that removed `obj` answers with.
fn deleted_status(rt: &ResourceType, obj: &Value) -> Value {
    let mut details = json!({
        "name": meta::meta_str(obj, "name").unwrap_or_default(),
        "kind": rt.plural,
        "uid": meta::meta_str(obj, "uid").unwrap_or_default(),
    });
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

/// A namespace being deleted stays until the garbage collector has
/// emptied it.
fn is_terminating_namespace(rt: &ResourceType, obj: &Value) -> bool {
    rt.group.is_empty()
        && rt.plural == "namespaces"
        && obj
            .get("status")
            .and_then(|s| s.get("phase"))
            .and_then(Value::as_str)
            == Some("Terminating")
}

fn encode_continue(key: &ObjKey) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}/{}", key.0, key.1))
}

fn decode_continue(token: &str) -> Result<ObjKey, ApiError> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (ns, name) = text.split_once('/').ok_or_else(bad)?;
    Ok((ns.to_string(), name.to_string()))
}

/// Builds a `metadata.ownerReferences` entry pointing at `owner`.
pub(crate) fn owner_reference(rt: &ResourceType, owner: &Value) -> Value {
    json!({
        "apiVersion": rt.api_version(),
        "kind": rt.kind,
        "name": meta::meta_str(owner, "name").unwrap_or_default(),
        "uid": meta::meta_str(owner, "uid").unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// An immutable ConfigMap or Secret (`immutable: true`) keeps its data and
/// stays immutable, as upstream validates.
fn check_immutable_data(
    rt: &ResourceType,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let kinds = rt.group.is_empty() && matches!(rt.kind.as_str(), "ConfigMap" | "Secret");
    if !kinds || old.get("immutable") != Some(&json!(true)) {
        return Ok(());
    }
    for field in ["data", "binaryData", "immutable"] {
        if old.get(field) != new.get(field) {
            return Err(ApiError::invalid(
                rt,
                name,
                format!("{field}: Forbidden: field is immutable when `immutable` is set"),
            ));
        }
    }
    Ok(())
}
