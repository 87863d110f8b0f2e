//! The HTTP front: turns API paths and query parameters into store
//! operations, and failures into `Status` responses.
//!
//! Paths served: `/version`, `/healthz`, `/livez`, `/readyz`, discovery
//! (`/api`, `/api/v1`, `/apis`, `/apis/<g>`, `/apis/<g>/<v>`), and for every
//! registered type the collection, object and `/status` paths, namespaced
//! (`/api/v1/namespaces/<ns>/pods/<name>`) or not. Other subresources
//! (`scale`, `log`, `exec`, `eviction`, ...) and `/openapi` answer 404.
//! Bodies are JSON (apply bodies may be YAML); protobuf and table output
//! are not supported.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;

use crate::discovery;
use crate::error::ApiError;
use crate::fields::Scope;
use crate::registry::ResourceType;
use crate::requests::{RequestLog, Verb};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{partial, partial_list, DeleteOpts, ListQuery, PatchBody, Store, WriteOpts};
use crate::watch::{self, WatchQuery};

/// What handlers share.
#[derive(Debug)]
pub(crate) struct AppState {
    pub store: Arc<Store>,
    pub requests: Arc<RequestLog>,
    pub bookmark_interval: Duration,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    pub address: String,
}

/// The router of one server.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

fn json_response(code: u16, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(bytes))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.to_status())
}

async fn handle(
    State(app): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match dispatch(&app, &method, &uri, &headers, body).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

/// A parsed resource path.
struct Target {
    rt: ResourceType,
    /// `Some("")` for cluster-scoped types; `None` for all namespaces.
    ns: Option<String>,
    name: Option<String>,
    status: bool,
}

impl Target {
    fn counter_name(&self) -> String {
        if self.status {
            format!("{}/status", self.rt.plural)
        } else {
            self.rt.plural.clone()
        }
    }
}

async fn dispatch(
    app: &Arc<AppState>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let path = uri.path();
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let registry = &app.store.registry;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["healthz" | "livez" | "readyz"] => {
            return Ok((StatusCode::OK, "ok").into_response());
        }
        ["version"] => return Ok(json_response(200, &discovery::version())),
        ["api"] => {
            return Ok(if discovery::wants_aggregated(accept) {
                aggregated_response(&discovery::aggregated(registry, true))
            } else {
                json_response(200, &discovery::core_versions(&app.address))
            });
        }
        ["apis"] => {
            return Ok(if discovery::wants_aggregated(accept) {
                aggregated_response(&discovery::aggregated(registry, false))
            } else {
                json_response(200, &discovery::groups(registry))
            });
        }
        ["apis", g] => {
            return discovery::group(registry, g)
                .map(|d| json_response(200, &d))
                .ok_or_else(|| ApiError::path_not_found(path));
        }
        ["api", "v1"] => {
            return discovery::resources(registry, "", "v1")
                .map(|d| json_response(200, &d))
                .ok_or_else(|| ApiError::path_not_found(path));
        }
        ["apis", g, v] => {
            return discovery::resources(registry, g, v)
                .map(|d| json_response(200, &d))
                .ok_or_else(|| ApiError::path_not_found(path));
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::path_not_found(path)),
    };
    let target =
        parse_target(app, group, version, rest).ok_or_else(|| ApiError::path_not_found(path))?;
    let query: HashMap<String, String> = Query::<HashMap<String, String>>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
    let is_true = |k: &str| query.get(k).is_some_and(|v| v == "true" || v == "1");
    let verb = match (method, &target.name) {
        (&Method::GET, Some(_)) if is_true("watch") => Verb::Watch,
        (&Method::GET, Some(_)) => Verb::Get,
        (&Method::GET, None) if is_true("watch") => Verb::Watch,
        (&Method::GET, None) => Verb::List,
        (&Method::POST, None) => Verb::Create,
        (&Method::PUT, Some(_)) => Verb::Update,
        (&Method::PATCH, Some(_)) => Verb::Patch,
        (&Method::DELETE, Some(_)) => Verb::Delete,
        (&Method::DELETE, None) => Verb::DeleteCollection,
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({method} {path})"
            )))
        }
    };
    if target.status && !matches!(verb, Verb::Get | Verb::Update | Verb::Patch) {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method} {path})"
        )));
    }
    if let Some(injected) = app.requests.record(verb, &target.counter_name()) {
        return Err(injected);
    }
    if target.ns.is_none()
        && matches!(
            verb,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
        )
    {
        return Err(ApiError::path_not_found(path));
    }
    let rt = &target.rt;
    let ns = target.ns.clone().unwrap_or_default();
    let name = target.name.clone().unwrap_or_default();
    let scope = if target.status {
        Scope::Status
    } else {
        Scope::Main
    };
    let dry_run = query.get("dryRun").is_some_and(|v| v == "All");
    let manager = query.get("fieldManager").cloned().filter(|m| !m.is_empty());
    let store = &app.store;
    // Metadata-only requests (`Api<PartialObjectMeta<K>>`).
    let metadata_only = accept.contains("as=PartialObjectMetadata");
    let object = |code: u16, obj: &Value| {
        if metadata_only {
            json_response(code, &partial(obj))
        } else {
            json_response(code, obj)
        }
    };
    let list = |list: &Value| {
        if metadata_only {
            json_response(200, &partial_list(list))
        } else {
            json_response(200, list)
        }
    };
    match verb {
        Verb::Get => Ok(object(200, &store.get(rt, &ns, &name)?)),
        Verb::List => {
            validate_list_options(&query, false)?;
            if let Some(rv) = query.get("resourceVersion").filter(|rv| !rv.is_empty()) {
                WatchQuery::parse_resource_version(rv)?;
            }
            let q = list_query(&query, None)?;
            Ok(list(&store.list(rt, target.ns.as_deref(), &q)?))
        }
        Verb::Watch => {
            validate_list_options(&query, true)?;
            let filter = list_query(&query, target.name.as_deref())?;
            let send_initial_events = query.get("sendInitialEvents").map(|v| v == "true");
            let wq = WatchQuery {
                start: WatchQuery::start_from(
                    query.get("resourceVersion").map(String::as_str),
                    send_initial_events,
                )?,
                bookmarks: is_true("allowWatchBookmarks"),
                timeout: query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse::<u64>().ok())
                    .filter(|t| *t > 0)
                    .map(Duration::from_secs),
                filter,
                metadata_only,
            };
            let stream = watch::stream(
                store.clone(),
                rt.clone(),
                target.ns.clone(),
                wq,
                app.bookmark_interval,
                app.shutdown.clone(),
            );
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from_stream(stream))
                .map_err(|e| ApiError::with_code(500, e.to_string()))
        }
        Verb::Create => {
            let obj = parse_json(&body)?;
            let opts = WriteOpts::client(
                manager.unwrap_or_else(|| user_agent_manager(headers)),
                dry_run,
            );
            Ok(object(201, &store.create(rt, &ns, obj, &opts)?))
        }
        Verb::Update => {
            let obj = parse_json(&body)?;
            let opts = WriteOpts::client(
                manager.unwrap_or_else(|| user_agent_manager(headers)),
                dry_run,
            );
            Ok(object(
                200,
                &store.replace(rt, &ns, &name, obj, scope, &opts)?,
            ))
        }
        Verb::Patch => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            let patch = match content_type.as_str() {
                "application/merge-patch+json" => PatchBody::Merge(parse_json(&body)?),
                "application/strategic-merge-patch+json" => {
                    PatchBody::Strategic(parse_json(&body)?)
                }
                "application/json-patch+json" => PatchBody::Json(parse_json(&body)?),
                "application/apply-patch+yaml" => {
                    if manager.is_none() {
                        return Err(ApiError::with_code(
                            422,
                            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                        ));
                    }
                    let config: Value = serde_yaml::from_slice(&body)
                        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                    PatchBody::Apply {
                        config,
                        force: is_true("force"),
                    }
                }
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let opts = WriteOpts::client(
                manager.unwrap_or_else(|| user_agent_manager(headers)),
                dry_run,
            );
            let (obj, created) = store.patch(rt, &ns, &name, patch, scope, &opts)?;
            Ok(object(if created { 201 } else { 200 }, &obj))
        }
        Verb::Delete => {
            let opts = delete_opts(&query, &body)?;
            let deleted = store.delete(rt, &ns, &name, &opts)?;
            if deleted["kind"] == "Status" {
                return Ok(json_response(200, &deleted));
            }
            Ok(object(200, &deleted))
        }
        Verb::DeleteCollection => {
            let opts = delete_opts(&query, &body)?;
            let q = list_query(&query, None)?;
            Ok(list(&store.delete_collection(
                rt,
                target.ns.as_deref(),
                &q,
                &opts,
            )?))
        }
    }
}

fn aggregated_response(doc: &Value) -> Response {
    let mut resp = json_response(200, doc);
    if let Ok(v) = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList".parse() {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

fn parse_target(app: &AppState, group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let registry = &app.store.registry;
    let (ns, res, tail): (Option<&str>, &str, &[&str]) = match rest {
        ["namespaces", ns, res, tail @ ..] if !matches!(*res, "status" | "finalize") => {
            (Some(*ns), *res, tail)
        }
        [res, tail @ ..] => (None, *res, tail),
        [] => return None,
    };
    let rt = registry.lookup(group, version, res)?.clone();
    let (name, status) = match tail {
        [] => (None, false),
        [name] => (Some(name.to_string()), false),
        [name, "status"] if rt.status_subresource => (Some(name.to_string()), true),
        _ => return None,
    };
    let ns = match (rt.namespaced, ns) {
        (true, Some(ns)) => Some(ns.to_string()),
        (true, None) if name.is_none() => None,
        (true, None) => return None,
        (false, None) => Some(String::new()),
        (false, Some(_)) => return None,
    };
    Some(Target {
        rt,
        ns,
        name,
        status,
    })
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Kubernetes defaults the field manager to the user agent's first word.
fn user_agent_manager(headers: &HeaderMap) -> String {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

fn list_query(query: &HashMap<String, String>, name: Option<&str>) -> Result<ListQuery, ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let mut fs = query.get("fieldSelector").cloned().unwrap_or_default();
    if let Some(name) = name {
        if !fs.is_empty() {
            fs.push(',');
        }
        fs.push_str(&format!("metadata.name={name}"));
    }
    let fields = FieldSelector::parse(&fs).map_err(ApiError::bad_request)?;
    let limit = match query.get("limit") {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    Ok(ListQuery {
        labels,
        fields,
        limit,
        continue_token: query.get("continue").cloned(),
    })
}

/// Checks `resourceVersionMatch` and `sendInitialEvents` as upstream's
/// `ValidateListOptions` does (422 Invalid): lists take a match only with a
/// `resourceVersion` (and `Exact` not with `0`) and no `sendInitialEvents`;
/// watches take `sendInitialEvents` only with `NotOlderThan`, and a match
/// only with `sendInitialEvents`.
fn validate_list_options(query: &HashMap<String, String>, watch: bool) -> Result<(), ApiError> {
    let matching = query
        .get("resourceVersionMatch")
        .map(String::as_str)
        .filter(|m| !m.is_empty());
    let rv = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let initial_events = query.contains_key("sendInitialEvents");
    let continued = query.get("continue").is_some_and(|c| !c.is_empty());
    let mut errors: Vec<String> = Vec::new();
    let mut forbid = |field: &str, why: &str| errors.push(format!("{field}: Forbidden: {why}"));
    if watch {
        if initial_events && matching != Some("NotOlderThan") {
            forbid(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            );
        }
        if matching.is_some() && !initial_events {
            forbid(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            );
        }
    } else {
        if matching.is_some() && rv.is_empty() {
            forbid(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            );
        }
        if matching == Some("Exact") && rv == "0" {
            forbid(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            );
        }
        if initial_events {
            forbid(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            );
        }
    }
    if matching.is_some() && continued {
        forbid(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden when continue is provided",
        );
    }
    if let Some(m) = matching.filter(|m| !matches!(*m, "Exact" | "NotOlderThan")) {
        errors.push(format!(
            "resourceVersionMatch: Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
        ));
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(ApiError::invalid_list_options(&errors[0])),
        _ => Err(ApiError::invalid_list_options(&format!(
            "[{}]",
            errors.join(", ")
        ))),
    }
}

fn delete_opts(query: &HashMap<String, String>, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let mut opts = DeleteOpts {
        dry_run: query.get("dryRun").is_some_and(|v| v == "All"),
        propagation: query.get("propagationPolicy").cloned(),
        ..Default::default()
    };
    if !body.iter().all(u8::is_ascii_whitespace) {
        let b = parse_json(body)?;
        if let Some(p) = b.get("propagationPolicy").and_then(Value::as_str) {
            opts.propagation = Some(p.to_string());
        }
        if let Some(pre) = b.get("preconditions") {
            opts.precondition_uid = pre.get("uid").and_then(Value::as_str).map(str::to_string);
            opts.precondition_rv = pre
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        if b.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"))
        {
            opts.dry_run = true;
        }
    }
    if let Some(p) = &opts.propagation {
        if !matches!(p.as_str(), "Orphan" | "Background" | "Foreground") {
            return Err(ApiError::bad_request(format!(
                "invalid propagationPolicy {p:?}"
            )));
        }
    }
    Ok(opts)
}
