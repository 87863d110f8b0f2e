//! A Bearer-token front for a loopback registry, as Harbor, GHCR and
//! Docker Hub deploy one: `/v2/…` answers 401 with
//! `WWW-Authenticate: Bearer realm=…,service=…,scope=…` unless the request
//! carries a token for the repository; `/token` hands tokens out for the
//! right Basic credentials. Authorized requests are forwarded to the real
//! registry behind it. It also answers Harbor's project listing
//! (`/api/v2.0/projects/<p>/repositories`, Basic auth, one repository per
//! page with a `Link` to the next) from the registry's catalog.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// Service name in the challenges.
pub const SERVICE: &str = "flexinfer-test";

struct Front {
    upstream: String,
    realm: String,
    basic: String,
    http: reqwest::Client,
    token_requests: Mutex<Vec<String>>,
}

/// A running front; what its token endpoint was asked.
pub struct TokenFront {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    state: Arc<Front>,
}

impl TokenFront {
    /// Scopes the token endpoint issued or refused tokens for, in order.
    pub fn token_requests(&self) -> Vec<String> {
        self.state.token_requests.lock().unwrap().clone()
    }
}

/// Starts a front for `upstream` (`127.0.0.1:<port>`) accepting
/// `user`/`password` at its token endpoint.
pub async fn start(upstream: &str, user: &str, password: &str) -> TokenFront {
    use base64::Engine as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let state = Arc::new(Front {
        upstream: upstream.to_owned(),
        realm: format!("http://{addr}/token"),
        basic: format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        ),
        http: reqwest::Client::new(),
        token_requests: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/token", get(token))
        .route(
            "/api/v2.0/projects/{project}/repositories",
            get(harbor_repositories),
        )
        .fallback(forward)
        .with_state(state.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    TokenFront { addr, state }
}

#[derive(serde::Deserialize)]
struct TokenQuery {
    service: Option<String>,
    scope: Option<String>,
}

async fn token(
    State(front): State<Arc<Front>>,
    Query(q): Query<TokenQuery>,
    headers: HeaderMap,
) -> Response {
    let scope = q.scope.unwrap_or_default();
    front.token_requests.lock().unwrap().push(scope.clone());
    let basic_ok = headers
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == front.basic.as_bytes());
    if q.service.as_deref() != Some(SERVICE) || !basic_ok {
        return (StatusCode::UNAUTHORIZED, "bad credentials").into_response();
    }
    axum::Json(serde_json::json!({"token": format!("tok:{scope}"), "expires_in": 300}))
        .into_response()
}

/// `repository:<name>:pull` for `/v2/<name>/{tags,manifests,blobs}/…`,
/// `registry:catalog:*` for the catalog.
fn scope_of(path: &str) -> String {
    if path.starts_with("/v2/_catalog") {
        return "registry:catalog:*".to_owned();
    }
    let rest = path.trim_start_matches("/v2/");
    for marker in ["/tags/", "/manifests/", "/blobs/"] {
        if let Some(i) = rest.find(marker) {
            return format!("repository:{}:pull", &rest[..i]);
        }
    }
    "registry:base:*".to_owned()
}

async fn forward(State(front): State<Arc<Front>>, request: Request) -> Response {
    let path_and_query = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let scope = scope_of(request.uri().path());
    let want = format!("Bearer tok:{scope}");
    let authorized = request
        .headers()
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == want.as_bytes());
    if !authorized {
        let challenge = format!(
            "Bearer realm=\"{}\",service=\"{SERVICE}\",scope=\"{scope}\"",
            front.realm
        );
        let mut response = (StatusCode::UNAUTHORIZED, "authentication required").into_response();
        response.headers_mut().insert(
            "www-authenticate",
            HeaderValue::from_str(&challenge).unwrap(),
        );
        return response;
    }
    let mut upstream = front.http.request(
        request.method().clone(),
        format!("http://{}{path_and_query}", front.upstream),
    );
    for name in ["accept", "range"] {
        if let Some(v) = request.headers().get(name) {
            upstream = upstream.header(name, v);
        }
    }
    let Ok(answer) = upstream.send().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let mut response = Response::builder().status(answer.status().as_u16());
    for name in [
        "content-type",
        "content-length",
        "content-range",
        "docker-content-digest",
        "link",
    ] {
        if let Some(v) = answer.headers().get(name) {
            response = response.header(name, v.as_bytes());
        }
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap()
}

#[derive(serde::Deserialize)]
struct PageQuery {
    page: Option<usize>,
}

async fn harbor_repositories(
    State(front): State<Arc<Front>>,
    Path(project): Path<String>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let basic_ok = headers
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == front.basic.as_bytes());
    if !basic_ok {
        return (StatusCode::UNAUTHORIZED, "unauthorized").into_response();
    }
    let Ok(answer) = front
        .http
        .get(format!("http://{}/v2/_catalog", front.upstream))
        .send()
        .await
    else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let catalog: serde_json::Value = answer.json().await.unwrap_or_default();
    let names: Vec<String> = catalog["repositories"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str())
        .filter(|n| n.starts_with(&format!("{project}/")))
        .map(str::to_owned)
        .collect();
    let page = q.page.unwrap_or(1).max(1);
    let body: Vec<serde_json::Value> = names
        .get(page - 1)
        .map(|n| serde_json::json!({"name": n, "artifact_count": 1}))
        .into_iter()
        .collect();
    let mut response = axum::Json(body).into_response();
    if page < names.len() {
        let link = format!(
            "</api/v2.0/projects/{project}/repositories?page={}&page_size=1>; rel=\"next\"",
            page + 1
        );
        response
            .headers_mut()
            .insert("link", HeaderValue::from_str(&link).unwrap());
    }
    response
}
