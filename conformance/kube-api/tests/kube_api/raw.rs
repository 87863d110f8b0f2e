//! Malformed requests get `Status` errors, never a crash.

use axum::http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::Value;

use flexinfer_testkube::TestApiServer;

#[tokio::test]
async fn malformed_requests_get_status_errors() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let cm = "/api/v1/namespaces/default/configmaps";
    let model = "/apis/ai.flexinfer/v1alpha2/namespaces/default/models";
    client
        .request_text(
            Request::post(cm)
                .header("content-type", "application/json")
                .body(br#"{"metadata":{"name":"x"}}"#.to_vec())
                .unwrap(),
        )
        .await
        .unwrap();
    let cases: &[(Method, String, &str, &str, u16)] = &[
        (Method::POST, cm.into(), "application/json", "not json", 400),
        (Method::POST, cm.into(), "application/json", "[]", 400),
        (Method::POST, cm.into(), "application/json", "{}", 422),
        (
            Method::POST,
            cm.into(),
            "application/json",
            r#"{"kind":"Secret","metadata":{"name":"y"}}"#,
            400,
        ),
        (
            Method::POST,
            cm.into(),
            "application/json",
            r#"{"metadata":{"name":"y","namespace":"other"}}"#,
            400,
        ),
        (
            Method::POST,
            cm.into(),
            "application/json",
            r#"{"metadata":{"name":"a/b"}}"#,
            422,
        ),
        (Method::PUT, format!("{cm}/x"), "application/json", "7", 400),
        (
            Method::PUT,
            format!("{cm}/x"),
            "application/json",
            r#"{"metadata":{"name":"other"}}"#,
            400,
        ),
        (
            Method::PATCH,
            format!("{cm}/x"),
            "application/merge-patch+json",
            "[1]",
            400,
        ),
        (
            Method::PATCH,
            format!("{cm}/x"),
            "application/merge-patch+json",
            r#"{"metadata":"x"}"#,
            200,
        ),
        (
            Method::PATCH,
            format!("{cm}/x"),
            "application/json-patch+json",
            r#"[{"op":"replace","path":"","value":3}]"#,
            400,
        ),
        (
            Method::PATCH,
            format!("{cm}/x"),
            "application/json-patch+json",
            r#"{"op":1}"#,
            422,
        ),
        (
            Method::PATCH,
            format!("{cm}/x"),
            "application/strategic-merge-patch+json",
            r#""s""#,
            400,
        ),
        (Method::PATCH, format!("{cm}/x"), "text/plain", "{}", 415),
        (
            Method::PATCH,
            format!("{cm}/x?fieldManager=m"),
            "application/apply-patch+yaml",
            "- a\n- b",
            400,
        ),
        (
            Method::PATCH,
            format!("{cm}/x?fieldManager=m"),
            "application/apply-patch+yaml",
            "{{{",
            400,
        ),
        (
            Method::PATCH,
            format!("{cm}/x?fieldManager=m"),
            "application/apply-patch+yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n",
            400,
        ),
        (
            Method::PATCH,
            format!("{cm}/missing"),
            "application/merge-patch+json",
            "{}",
            404,
        ),
        (
            Method::PATCH,
            format!("{model}/none/status?fieldManager=m"),
            "application/apply-patch+yaml",
            "apiVersion: ai.flexinfer/v1alpha2\nkind: Model\nmetadata:\n  name: none\n",
            404,
        ),
        (
            Method::POST,
            model.into(),
            "application/json",
            r#"{"metadata":{"name":"m"},"spec":{"backend":["x"],"source":"s"}}"#,
            422,
        ),
        (
            Method::GET,
            format!("{cm}?labelSelector=a+in+(b"),
            "",
            "",
            400,
        ),
        (
            Method::GET,
            format!("{cm}?fieldSelector=nonsense"),
            "",
            "",
            400,
        ),
        (Method::GET, format!("{cm}?limit=-1"), "", "", 400),
        (Method::GET, format!("{cm}?continue=%25%25"), "", "", 400),
        (
            Method::GET,
            format!("{cm}?watch=true&resourceVersion=abc"),
            "",
            "",
            400,
        ),
        (
            Method::DELETE,
            format!("{cm}/x"),
            "application/json",
            "{",
            400,
        ),
        (
            Method::DELETE,
            format!("{cm}/x?propagationPolicy=Sideways"),
            "",
            "",
            400,
        ),
        (
            Method::POST,
            format!("{cm}/x"),
            "application/json",
            "{}",
            405,
        ),
        (Method::DELETE, format!("{cm}/x/status"), "", "", 404),
        (
            Method::GET,
            "/api/v1/namespaces/default/nothings".into(),
            "",
            "",
            404,
        ),
        (Method::GET, "/apis/nope/v1".into(), "", "", 404),
        (Method::GET, "/api/v1/pods/p".into(), "", "", 404),
        (Method::GET, "/random/path".into(), "", "", 404),
    ];
    for (method, path, content_type, body, code) in cases {
        let mut req = Request::builder().method(method.clone()).uri(path.as_str());
        if !content_type.is_empty() {
            req = req.header("content-type", *content_type);
        }
        let resp = client
            .send(req.body(body.as_bytes().to_vec().into()).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            status,
            *code,
            "{method} {path} {body}: {}",
            String::from_utf8_lossy(&bytes)
        );
        if status >= 400 {
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v["kind"], "Status", "{method} {path}");
            assert_eq!(v["code"], *code);
        }
    }
    // Still serving.
    assert_eq!(client.apiserver_version().await.unwrap().major, "1");
}
