//! A stand-in for the ECR API's `GetAuthorizationToken` on loopback: it
//! checks the request is a SigV4-signed ECR call for the expected access
//! key and region, and answers with `base64("AWS:<password>")`, the
//! password of the (real, htpasswd-protected) registry under test.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

struct Ecr {
    access_key: String,
    region: String,
    password: String,
    calls: Mutex<Vec<String>>,
}

/// A running fake; the `Authorization` headers it received.
pub struct FakeEcr {
    /// `http://127.0.0.1:<port>/`.
    pub endpoint: String,
    state: Arc<Ecr>,
}

impl FakeEcr {
    /// `Authorization` headers received, in order.
    pub fn calls(&self) -> Vec<String> {
        self.state.calls.lock().unwrap().clone()
    }
}

/// Starts a fake accepting `access_key` in `region`, handing out
/// `password` for user `AWS`.
pub async fn start(access_key: &str, region: &str, password: &str) -> FakeEcr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/", listener.local_addr().unwrap());
    let state = Arc::new(Ecr {
        access_key: access_key.into(),
        region: region.into(),
        password: password.into(),
        calls: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/", post(token))
        .with_state(state.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    FakeEcr { endpoint, state }
}

async fn token(State(ecr): State<Arc<Ecr>>, headers: HeaderMap, body: String) -> Response {
    use base64::Engine as _;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let auth = header("authorization");
    ecr.calls.lock().unwrap().push(auth.clone());
    let date = header("x-amz-date");
    let scope = format!(
        "Credential={}/{}/{}/ecr/aws4_request",
        ecr.access_key,
        date.get(..8).unwrap_or_default(),
        ecr.region
    );
    let well_formed = header("x-amz-target")
        == "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken"
        && header("content-type") == "application/x-amz-json-1.1"
        && body == "{}"
        && date.len() == 16;
    if !well_formed {
        return (StatusCode::BAD_REQUEST, "malformed GetAuthorizationToken").into_response();
    }
    if !auth.starts_with("AWS4-HMAC-SHA256 ") || !auth.contains(&scope) {
        return (
            StatusCode::BAD_REQUEST,
            r#"{"__type":"UnrecognizedClientException","message":"The security token included in the request is invalid."}"#,
        )
            .into_response();
    }
    let token = base64::engine::general_purpose::STANDARD.encode(format!("AWS:{}", ecr.password));
    axum::Json(serde_json::json!({"authorizationData": [{
        "authorizationToken": token,
        "expiresAt": 1.9e9,
        "proxyEndpoint": "https://123456789012.dkr.ecr.us-west-2.amazonaws.com"
    }]}))
    .into_response()
}
