//! Kubernetes mode, start-up: clear errors when CRDs are missing or RBAC
//! denies a list.

use flexinfer_testkube::{TestApiServer, Verb};

use crate::kube_mode::kube_support::KubeGateway;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_model_crd_stops_start_up_with_a_clear_message() {
    let server = TestApiServer::builder()
        .without_resource("ai.flexinfer", "v1alpha2", "models")
        .start()
        .await
        .unwrap();
    let err = KubeGateway::start_error(&server, &[]).await;
    assert!(
        err.contains("the Model CRD (models.ai.flexinfer, version v1alpha2) is not installed"),
        "{err}"
    );
    assert!(err.contains("install the FlexInfer CRDs"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_crds_may_be_missing() {
    let server = TestApiServer::builder()
        .without_resource("ai.flexinfer", "v1alpha1", "gpugroups")
        .without_resource("ai.flexinfer", "v1alpha1", "modeldeployments")
        .start()
        .await
        .unwrap();
    let gw = KubeGateway::start(&server, &[]).await;
    let resp = crate::support::client()
        .get(gw.url("/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(server.requests(Verb::List, "gpugroups"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_denial_names_the_resource_and_the_rules() {
    let server = TestApiServer::start().await;
    server.fail_next(Verb::List, "endpointslices", 1, 403);
    let err = KubeGateway::start_error(&server, &[]).await;
    assert!(
        err.contains("RBAC denies listing endpointslices.discovery.k8s.io in namespace default"),
        "{err}"
    );
    assert!(err.contains("RBAC_RULES"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_reported() {
    let server = TestApiServer::start().await;
    let kubeconfig = std::fs::read_to_string(server.kubeconfig_path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    let dead = format!("http://127.0.0.1:{}", crate::support::free_port());
    std::fs::write(&path, kubeconfig.replace(&server.url(), &dead)).unwrap();
    let err = KubeGateway::start_error_with(&path, &[]).await;
    assert!(
        err.contains("cannot reach the Kubernetes API server"),
        "{err}"
    );
}
