//! The controllers run end to end (`Controller::run` through
//! `controllers::run`) against the in-memory API server.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use flexinfer_crds::v1alpha2::{Model, ModelPhase};
use flexinfer_operator::controllers::{self, ControllerSettings, LeaderElection, ManualClock};
use flexinfer_testkube::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn settings() -> ControllerSettings {
    ControllerSettings {
        clock: Arc::new(ManualClock::new(t0())),
        kv_cache_scrape: false,
        ..Default::default()
    }
}

/// The kubelet's part: Deployment `name` has its one replica ready.
async fn deployment_ready(deployments: &Api<Deployment>, name: &str) {
    deployments
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}}),
            ),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn model_reaches_ready_through_the_running_controller() {
    let server = TestApiServer::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let client = server.client();
    let s = settings();
    let ready = s.ready.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controllers::run(client.clone(), s, async {
        let _ = stop_rx.await;
    }));

    let models: Api<Model> = Api::default_namespaced(client.clone());
    models
        .create(&PostParams::default(), &cpu_model("e2e"))
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let services: Api<Service> = Api::default_namespaced(client.clone());
    eventually("deployment and service", || async {
        let d = deployments.get_opt("e2e").await.unwrap()?;
        services.get_opt("e2e").await.unwrap()?;
        Some(d)
    })
    .await;
    assert!(ready.load(std::sync::atomic::Ordering::SeqCst));
    let m = eventually("status pending or loading", || async {
        let m = models.get("e2e").await.unwrap();
        matches!(m.phase(), Some(ModelPhase::Pending | ModelPhase::Loading)).then_some(m)
    })
    .await;
    assert_eq!(
        m.status.as_ref().unwrap().endpoint.as_deref(),
        Some("http://e2e.default.svc:8080")
    );

    deployment_ready(&deployments, "e2e").await;
    let m = eventually("status ready", || async {
        let m = models.get("e2e").await.unwrap();
        (m.phase() == Some(ModelPhase::Ready)).then_some(m)
    })
    .await;
    let st = m.status.unwrap();
    assert_eq!(st.ready_replicas, Some(1));
    assert_eq!(st.observed_generation, m.metadata.generation);

    // Graceful shutdown: run returns once the trigger fires.
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("controllers stop after shutdown")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn leader_election_takes_the_lease_before_running() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let mut s = settings();
    let mut le = LeaderElection::new("default", "replica-a");
    le.retry_period = Duration::from_millis(100);
    s.leader_election = Some(le);
    let ready = s.ready.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controllers::run(client.clone(), s, async {
        let _ = stop_rx.await;
    }));
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    let lease = eventually("lease held", || async {
        leases.get_opt("flexinfer-operator").await.unwrap()
    })
    .await;
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("replica-a")
    );
    eventually("ready after the lease", || async {
        ready
            .load(std::sync::atomic::Ordering::SeqCst)
            .then_some(())
    })
    .await;
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
    // The lease is released on shutdown.
    let lease = leases.get("flexinfer-operator").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None);
}

#[tokio::test]
async fn a_held_lease_keeps_a_second_replica_waiting() {
    let server = TestApiServer::start().await;
    let client = server.client();
    let mut other = LeaderElection::new("default", "replica-a");
    other.retry_period = Duration::from_millis(100);
    let _held = other
        .acquire(client.clone(), Arc::new(controllers::SystemClock))
        .await
        .unwrap();
    let mut s = settings();
    s.clock = Arc::new(controllers::SystemClock);
    let mut le = LeaderElection::new("default", "replica-b");
    le.retry_period = Duration::from_millis(100);
    s.leader_election = Some(le);
    let ready = s.ready.clone();
    let task = tokio::spawn(controllers::run(client, s, std::future::pending::<()>()));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!ready.load(std::sync::atomic::Ordering::SeqCst));
    task.abort();
}

/// A contender of the Lease `flexinfer-operator` on the system clock, with
/// timings short enough for a test: its settings and its ready flag.
fn contender(identity: &str) -> (ControllerSettings, Arc<std::sync::atomic::AtomicBool>) {
    let mut s = settings();
    s.clock = Arc::new(controllers::SystemClock);
    let mut le = LeaderElection::new("default", identity);
    le.lease_duration = Duration::from_secs(1);
    le.renew_deadline = Duration::from_millis(700);
    le.retry_period = Duration::from_millis(100);
    s.leader_election = Some(le);
    let ready = s.ready.clone();
    (s, ready)
}

/// Two replicas contend for the Lease. The leader that loses it stops its
/// controllers but keeps running, and once the other replica lets the
/// Lease go it leads again in the same process: its controllers start
/// afresh and reconcile a Model created after the hand-back.
#[tokio::test]
async fn a_replica_that_loses_the_lease_leads_again_once_it_is_free() {
    use std::sync::atomic::Ordering::SeqCst;
    let server = TestApiServer::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let client = server.client();
    let (a, a_ready) = contender("replica-a");
    let a_task = tokio::spawn(controllers::run(
        client.clone(),
        a,
        std::future::pending::<()>(),
    ));
    eventually("replica-a leads", || async {
        a_ready.load(SeqCst).then_some(())
    })
    .await;

    let (b, b_ready) = contender("replica-b");
    let (b_stop, b_stopped) = tokio::sync::oneshot::channel::<()>();
    let b_task = tokio::spawn(controllers::run(client.clone(), b, async {
        let _ = b_stopped.await;
    }));
    // replica-a's renewals stall (a partition, a paused process) while
    // replica-b takes the Lease over: written as replica-b's own.
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    let mut lease = leases.get("flexinfer-operator").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("replica-b".into());
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    leases
        .replace("flexinfer-operator", &PostParams::default(), &lease)
        .await
        .unwrap();
    eventually("replica-b leads, replica-a stopped", || async {
        (b_ready.load(SeqCst) && !a_ready.load(SeqCst)).then_some(())
    })
    .await;
    assert!(
        !a_task.is_finished(),
        "replica-a ended instead of waiting to lead again"
    );

    // replica-b shuts down and releases the Lease: replica-a leads again.
    b_stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), b_task)
        .await
        .expect("replica-b stops")
        .unwrap()
        .unwrap();
    eventually("replica-a leads again", || async {
        a_ready.load(SeqCst).then_some(())
    })
    .await;
    let lease = leases.get("flexinfer-operator").await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("replica-a")
    );
    let models: Api<Model> = Api::default_namespaced(client.clone());
    models
        .create(&PostParams::default(), &cpu_model("after-handback"))
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    eventually("replica-a reconciles a new Model", || async {
        deployments.get_opt("after-handback").await.unwrap()
    })
    .await;
    a_task.abort();
}

#[tokio::test]
async fn missing_crds_fail_with_a_clear_message() {
    let server = TestApiServer::start().await;
    controllers::check_crds(&server.client()).await.unwrap();
    let err = controllers::check_crds_named(
        &server.client(),
        &["models.ai.flexinfer", "widgets.ai.flexinfer"],
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("FlexInfer CRDs are not installed: widgets.ai.flexinfer"),
        "{err}"
    );
    assert!(!err.contains("models.ai.flexinfer"), "{err}");
}

/// A GPUGroup follows its members as they change: the member it scaled up
/// turning Running makes the group Active at once, not at its next 5 s
/// requeue.
#[tokio::test]
async fn a_gpu_group_follows_its_members_at_once() {
    use flexinfer_crds::v1alpha1::{
        GPUGroup, GPUGroupPhase, GPUGroupSpec, ModelDeployment, ModelDeploymentPhase,
        ModelDeploymentSpec,
    };
    let server = TestApiServer::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    server
        .insert(&gpu_node("n1", "nvidia.com/gpu", &[]))
        .unwrap();
    let client = server.client();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controllers::run(client.clone(), settings(), async {
        let _ = stop_rx.await;
    }));

    let mds: Api<ModelDeployment> = Api::default_namespaced(client.clone());
    let mut spec = ModelDeploymentSpec::new("vllm", "org/a");
    spec.replicas = 0;
    spec.gpu_group_ref = Some("g".into());
    mds.create(&PostParams::default(), &ModelDeployment::new("a", spec))
        .await
        .unwrap();
    let groups: Api<GPUGroup> = Api::default_namespaced(client.clone());
    let spec: GPUGroupSpec = serde_json::from_value(json!({"models": [{"name": "a"}]})).unwrap();
    let mut group = GPUGroup::new("g", spec);
    group.metadata.annotations = Some(
        [
            ("flexinfer.ai/queue.a".to_string(), "1".to_string()),
            (
                "flexinfer.ai/queue-since.a".to_string(),
                "2026-01-01T00:00:00Z".to_string(),
            ),
        ]
        .into(),
    );
    groups.create(&PostParams::default(), &group).await.unwrap();
    // Demand on an empty group activates the member at once.
    eventually("a scaled up and its Deployment built", || async {
        let md = mds.get("a").await.unwrap();
        let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
        (md.spec.replicas == 1)
            .then_some(())
            .and(deployments.get_opt("a").await.unwrap())
    })
    .await;
    let g = groups.get("g").await.unwrap();
    assert_eq!(
        g.status.as_ref().and_then(|s| s.phase),
        Some(GPUGroupPhase::Swapping)
    );

    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    deployment_ready(&deployments, "a").await;
    eventually("a Running", || async {
        let md = mds.get("a").await.unwrap();
        (md.status.as_ref().and_then(|s| s.phase) == Some(ModelDeploymentPhase::Running))
            .then_some(())
    })
    .await;
    let running = std::time::Instant::now();
    eventually("the group Active", || async {
        let g = groups.get("g").await.unwrap();
        (g.status.as_ref().and_then(|s| s.phase) == Some(GPUGroupPhase::Active)).then_some(())
    })
    .await;
    assert!(
        running.elapsed() < Duration::from_millis(1500),
        "the group saw its member Running after {:?}",
        running.elapsed()
    );

    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("controllers stop after shutdown")
        .unwrap()
        .unwrap();
}
