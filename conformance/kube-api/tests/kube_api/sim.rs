use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use flexinfer_testkube::TestApiServer;

use crate::eventually;

/// A local process the simulated pods point at: answers "hello".
async fn local_backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let _ = sock.write_all(b"hello").await;
        }
    });
    port
}

#[tokio::test]
async fn deployments_run_pods_and_services_get_endpoint_slices() {
    let server = TestApiServer::start().await;
    server.enable_deployment_controller(Duration::from_millis(1500));
    server.enable_endpoint_slices();
    let client = server.client();
    let port = local_backend().await;

    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                {"name": "app", "image": "backend", "ports": [{"name": "http", "containerPort": port}]}
            ]}}
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    }))
    .unwrap();
    let svc = services.create(&PostParams::default(), &svc).await.unwrap();
    assert!(svc.spec.unwrap().cluster_ip.is_some());

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    eventually("two pods", || async {
        (pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap()
            .items
            .len()
            == 2)
            .then_some(())
    })
    .await;
    let status = deployments.get("web").await.unwrap().status.unwrap();
    assert_eq!(status.replicas, Some(2));
    assert_eq!(status.ready_replicas, None, "not ready before the delay");

    let ready = eventually("deployment ready", || async {
        let s = deployments.get("web").await.unwrap().status?;
        (s.ready_replicas == Some(2) && s.available_replicas == Some(2)).then_some(s)
    })
    .await;
    assert_eq!(ready.observed_generation, Some(1));

    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    let lp = ListParams::default().labels("kubernetes.io/service-name=web");
    let slice = eventually("ready endpoints", || async {
        let list = slices.list(&lp).await.unwrap();
        let s = list.items.into_iter().next()?;
        let ready = s
            .endpoints
            .iter()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .count();
        (ready == 2).then_some(s)
    })
    .await;
    let ep_port = slice.ports.as_ref().unwrap()[0].port.unwrap();
    assert_eq!(ep_port, i32::from(port));
    let address = &slice.endpoints[0].addresses[0];
    let mut conn = tokio::net::TcpStream::connect((address.as_str(), ep_port as u16))
        .await
        .unwrap();
    let mut buf = String::new();
    conn.read_to_string(&mut buf).await.unwrap();
    assert_eq!(buf, "hello");

    // Scaling down removes pods and endpoints.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually("one endpoint", || async {
        let list = slices.list(&lp).await.unwrap();
        (list.items.iter().map(|s| s.endpoints.len()).sum::<usize>() == 1).then_some(())
    })
    .await;

    // Deleting the Deployment garbage-collects its pods.
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("pods collected", || async {
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}
