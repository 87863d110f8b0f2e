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

/// Whether process `pid` is gone (or a zombie awaiting its parent).
fn process_gone(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().next());
    matches!(state, None | Some("Z") | Some("X"))
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn the_kubelet_runs_pods_as_processes_ready_when_their_probe_answers() {
    let server = TestApiServer::start().await;
    server.enable_deployment_controller(Duration::ZERO);
    server.enable_endpoint_slices();
    server.enable_kubelet("app=sleeper", |_pod, _ip| {
        Some(flexinfer_testkube::sim::PodProcess {
            program: "sleep".into(),
            args: vec!["60".into()],
            ..Default::default()
        })
    });
    let client = server.client();
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "sleeper"},
        "spec": {
            "selector": {"matchLabels": {"app": "sleeper"}},
            "template": {"metadata": {"labels": {"app": "sleeper"}}, "spec": {"containers": [{
                "name": "app", "image": "sleeper",
                "ports": [{"name": "probe", "containerPort": 7000}],
                "readinessProbe": {"tcpSocket": {"port": "probe"}},
            }]}}
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let (name, ip) = eventually("a running pod with its own address", || async {
        let pod = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .pop()?;
        let ip = pod.status.as_ref()?.pod_ip.clone()?;
        Some((pod.metadata.name.unwrap(), ip))
    })
    .await;
    assert!(ip.starts_with("127.0.") && ip != "127.0.0.1", "{ip}");
    let running = server.kubelet_pods();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].ip.to_string(), ip);
    let pid = eventually("a process", || async { server.kubelet_pods()[0].pid }).await;

    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !pod_ready(&pods.get(&name).await.unwrap()),
        "not ready while nothing answers the probe"
    );
    let _listener = tokio::net::TcpListener::bind((ip.as_str(), 7000))
        .await
        .unwrap();
    eventually("ready once the probe answers", || async {
        pod_ready(&pods.get(&name).await.unwrap()).then_some(())
    })
    .await;
    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "sleeper"},
        "spec": {"selector": {"app": "sleeper"}, "ports": [{"port": 80, "targetPort": "probe"}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    eventually("the pod's address in the slice", || async {
        let s = slices
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .pop()?;
        (s.endpoints[0].addresses == vec![ip.clone()]).then_some(())
    })
    .await;

    pods.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("the process killed", || async {
        process_gone(pid).then_some(())
    })
    .await;
    let replacement = eventually("a replacement pod", || async {
        let p = server.kubelet_pods().pop()?;
        (p.name != name).then_some(p)
    })
    .await;
    assert_ne!(
        replacement.ip.to_string(),
        ip,
        "a new pod gets a new address"
    );
}
