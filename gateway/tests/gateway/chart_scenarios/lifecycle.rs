//! Deleting a Model removes everything it ran.

use std::time::Duration;

use serde_json::{json, Value};

use crate::chart_scenarios::lane::{chat, eventually, fresh_client, model, Lane, MODEL_LABEL};
use crate::support::process_gone;

/// After `kubectl delete model`, its Deployment, Service, pods and pod
/// processes are gone, and the gateway no longer lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_model_removes_its_deployment_service_pods_and_processes() {
    let Some(lane) = Lane::install("lifecycle", json!({})).await else {
        return;
    };
    let obj = model(
        "doomed",
        json!({"backend": "llamacpp", "source": "file:///models/doomed.gguf",
               "gpu": {"vendor": "cpu"}, "serverless": {"enabled": false}}),
    );
    lane.apply(obj.clone()).await;
    let resp = chat(&lane, "doomed").await;
    assert_eq!(resp.status(), 200, "logs in {}", lane.logs.display());
    let running = lane.server.kubelet_pods();
    assert_eq!(running.len(), 1, "{running:?}");
    let pid = running[0].pid.expect("a running process");
    let addr = format!("{}:8080", running[0].ip);
    assert!(lane.object("v1", "Service", "doomed").is_some());

    lane.delete(&obj).await;
    eventually(
        "the model's objects and processes gone",
        Duration::from_secs(20),
        || async {
            let gone = lane
                .object("ai.flexinfer/v1alpha2", "Model", "doomed")
                .is_none()
                && lane.object("apps/v1", "Deployment", "doomed").is_none()
                && lane.object("v1", "Service", "doomed").is_none()
                && lane.server.kubelet_pods().is_empty()
                && process_gone(u64::from(pid));
            gone.then_some(())
        },
    )
    .await;
    let pods = lane.server.client();
    let list: kube::api::Api<k8s_openapi::api::core::v1::Pod> =
        kube::api::Api::namespaced(pods, crate::chart_scenarios::lane::NAMESPACE);
    let left = list
        .list(&kube::api::ListParams::default().labels(&format!("{MODEL_LABEL}=doomed")))
        .await
        .expect("list pods");
    assert!(left.items.is_empty(), "pods left: {}", left.items.len());
    assert!(
        tokio::net::TcpStream::connect(&addr).await.is_err(),
        "nothing listens on the pod's address {addr} any more"
    );
    eventually(
        "the gateway to drop the model",
        Duration::from_secs(10),
        || async {
            let listed: Value = fresh_client()
                .get(lane.gateway_url("/v1/models"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (!listed.to_string().contains("\"doomed\"")).then_some(())
        },
    )
    .await;
}
