//! Deleting a Model removes everything it ran.

use std::time::Duration;

use serde_json::{json, Value};

use super::cluster::Cluster;
use super::lane::{eventually, fresh_client, Lane};
use crate::support::process_gone;

/// Chart values: the defaults.
pub fn values() -> Value {
    json!({})
}

/// After `kubectl delete model`, its Deployment, Service, cache claim,
/// pods and pod processes are gone, and the gateway no longer lists it.
pub async fn run(lane: &mut impl Cluster) {
    let obj = lane.model(
        "doomed",
        json!({"backend": "llamacpp", "source": "file:///models/doomed.gguf",
               "gpu": {"vendor": "cpu"}, "serverless": {"enabled": false}}),
    );
    lane.apply(obj.clone()).await;
    let resp = lane.chat("doomed").await;
    assert_eq!(resp.status(), 200, "logs in {}", lane.logs().display());
    let running = lane.pods();
    assert_eq!(running.len(), 1, "{running:?}");
    let pid = running[0].pid.expect("a running process");
    let addr = format!("{}:8080", running[0].ip);
    // The controllers hold the Model with a finalizer, and its Deployment
    // and Service name it as their controlling owner, which is how they go.
    let stored = lane
        .object("ai.flexinfer/v1alpha2", "Model", "doomed")
        .await
        .expect("the Model");
    let finalizers = &stored["metadata"]["finalizers"];
    assert!(
        finalizers.as_array().is_some_and(|f| !f.is_empty()),
        "the Model has a finalizer: {finalizers}"
    );
    for (api_version, kind) in [("apps/v1", "Deployment"), ("v1", "Service")] {
        let owned = lane
            .object(api_version, kind, "doomed")
            .await
            .unwrap_or_else(|| panic!("the Model's {kind}"));
        let owners = &owned["metadata"]["ownerReferences"];
        let by_model = owners.as_array().into_iter().flatten().any(|o| {
            o["kind"] == "Model"
                && o["uid"] == stored["metadata"]["uid"]
                && o["controller"] == true
                && o["blockOwnerDeletion"] == true
        });
        assert!(by_model, "the {kind} is owned by the Model: {owners}");
    }

    lane.delete(&obj).await;
    eventually(
        "the model's objects and processes gone",
        Duration::from_secs(30),
        || async {
            let gone = lane
                .object("ai.flexinfer/v1alpha2", "Model", "doomed")
                .await
                .is_none()
                && lane
                    .object("apps/v1", "Deployment", "doomed")
                    .await
                    .is_none()
                && lane.object("v1", "Service", "doomed").await.is_none()
                && lane
                    .object("v1", "PersistentVolumeClaim", "doomed-cache")
                    .await
                    .is_none()
                && lane.pods().is_empty()
                && process_gone(u64::from(pid));
            gone.then_some(())
        },
    )
    .await;
    let left = lane.model_pods("doomed").await;
    assert!(left.is_empty(), "pods left: {}", left.len());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_model_removes_its_deployment_service_pods_and_processes() {
    let Some(mut lane) = Lane::install("lifecycle", values()).await else {
        return;
    };
    run(&mut lane).await;
}
