//! Controllers that talk to backend pods: LoRA adapters loaded into and
//! unloaded from a fake vLLM server, and the KV-cache pressure check
//! reading its `/metrics`.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use common::*;
use flexinfer_crds::v1alpha2::{
    CacheStrategy, LoRAAdapter, LoRAAdapterPhase, LoRAAdapterSpec, Model, ModelPhase,
};
use flexinfer_operator::controllers::{lora, model, Context, ControllerSettings, ManualClock};
use flexinfer_testkube::{TestApiServer, Verb};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodCondition, PodSpec, PodStatus};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

#[derive(Clone, Default)]
struct FakeVllm {
    adapters: Arc<Mutex<Vec<String>>>,
    kv_usage: Arc<Mutex<f64>>,
}

async fn models(State(s): State<FakeVllm>) -> Json<Value> {
    let data: Vec<Value> = s
        .adapters
        .lock()
        .unwrap()
        .iter()
        .map(|a| json!({"id": a}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn load(State(s): State<FakeVllm>, Json(body): Json<Value>) -> &'static str {
    s.adapters
        .lock()
        .unwrap()
        .push(body["lora_name"].as_str().unwrap().to_owned());
    "ok"
}

async fn unload(State(s): State<FakeVllm>, Json(body): Json<Value>) -> &'static str {
    s.adapters
        .lock()
        .unwrap()
        .retain(|a| a != body["lora_name"].as_str().unwrap());
    "ok"
}

async fn metrics(State(s): State<FakeVllm>) -> String {
    format!(
        "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{{model_name=\"m\"}} {}\n",
        s.kv_usage.lock().unwrap()
    )
}

async fn start_fake() -> (FakeVllm, u16) {
    let fake = FakeVllm::default();
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/load_lora_adapter", post(load))
        .route("/v1/unload_lora_adapter", post(unload))
        .route("/metrics", get(metrics))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, port)
}

fn ready_pod(name: &str, model: &str, port: u16) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.labels = Some([("flexinfer.ai/model".to_owned(), model.to_owned())].into());
    p.spec = Some(PodSpec {
        containers: vec![Container {
            name: "model".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: i32::from(port),
                ..Default::default()
            }]),
            ..Default::default()
        }],
        ..Default::default()
    });
    p.status = Some(PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("127.0.0.1".into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    p
}

#[tokio::test]
async fn lora_adapter_is_loaded_into_ready_pods_and_unloaded_on_delete() {
    let (server, ctx, _clock) = setup().await;
    let (fake, port) = start_fake().await;
    create(&ctx, &gpu_model("base", CacheStrategy::None, false)).await;
    server.insert(&ready_pod("base-0", "base", port)).unwrap();
    let loras: Api<LoRAAdapter> = Api::default_namespaced(ctx.client.clone());
    let spec: LoRAAdapterSpec = serde_json::from_value(json!({
        "modelRef": "base", "adapterName": "sql",
        "source": {"type": "HuggingFace", "uri": "org/sql-lora"}
    }))
    .unwrap();
    loras
        .create(&PostParams::default(), &LoRAAdapter::new("sql", spec))
        .await
        .unwrap();
    let reconcile = || async {
        let l = loras.get("sql").await.unwrap();
        lora::reconcile(Arc::new(l), ctx.clone()).await.unwrap()
    };
    reconcile().await; // finalizer
    reconcile().await;
    assert_eq!(*fake.adapters.lock().unwrap(), ["sql"]);
    let st = loras.get("sql").await.unwrap().status.unwrap();
    assert_eq!(st.phase, Some(LoRAAdapterPhase::Loaded));
    assert_eq!((st.loaded_replicas, st.total_replicas), (Some(1), Some(1)));
    assert_eq!(st.message.as_deref(), Some("base-0: loaded"));
    // Already loaded: not loaded twice, nothing written.
    server.reset_counters();
    reconcile().await;
    assert_eq!(fake.adapters.lock().unwrap().len(), 1);
    assert_eq!(server.total_writes(), 0);

    loras.delete("sql", &DeleteParams::default()).await.unwrap();
    reconcile().await;
    assert!(fake.adapters.lock().unwrap().is_empty());
    assert!(loras.get_opt("sql").await.unwrap().is_none());
}

#[tokio::test]
async fn lora_on_a_backend_without_lora_support_fails() {
    let (_server, ctx, _clock) = setup().await;
    create(&ctx, &cpu_model("tiny")).await;
    let loras: Api<LoRAAdapter> = Api::default_namespaced(ctx.client.clone());
    let spec: LoRAAdapterSpec = serde_json::from_value(json!({
        "modelRef": "tiny", "adapterName": "x", "source": {"type": "HuggingFace", "uri": "org/x"}
    }))
    .unwrap();
    loras
        .create(&PostParams::default(), &LoRAAdapter::new("x", spec))
        .await
        .unwrap();
    for _ in 0..2 {
        let l = loras.get("x").await.unwrap();
        lora::reconcile(Arc::new(l), ctx.clone()).await.unwrap();
    }
    assert_eq!(
        loras.get("x").await.unwrap().status.unwrap().phase,
        Some(LoRAAdapterPhase::Failed)
    );
}

#[tokio::test]
async fn kv_cache_pressure_raises_a_condition_and_an_event() {
    let server = TestApiServer::start().await;
    let settings = ControllerSettings {
        clock: Arc::new(ManualClock::new(t0())),
        kv_cache_scrape: true,
        ..Default::default()
    };
    let ctx: Arc<Context> = Context::new(server.client(), settings).unwrap();
    let (fake, port) = start_fake().await;
    *fake.kv_usage.lock().unwrap() = 0.9;
    server
        .insert(&gpu_node("n1", "nvidia.com/gpu", &[]))
        .unwrap();
    create(&ctx, &gpu_model("busy", CacheStrategy::None, false)).await;
    reconcile_n(&ctx, "busy", 2).await;
    let deployments: Api<Deployment> = Api::default_namespaced(ctx.client.clone());
    deployments
        .patch_status(
            "busy",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 1}})),
        )
        .await
        .unwrap();
    server.insert(&ready_pod("busy-0", "busy", port)).unwrap();
    let events_before = server.writes(Verb::Create, "events");
    reconcile(&ctx, "busy").await;
    let m: Model = common::get(&ctx, "busy").await;
    assert_eq!(m.phase(), Some(ModelPhase::Ready));
    let st = m.status.unwrap();
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == model::KV_CACHE_PRESSURE)
        .unwrap();
    assert_eq!(c.status, "True");
    assert!(st.kv_cache.as_ref().unwrap().pressure);
    assert!(server.writes(Verb::Create, "events") > events_before);
    // Still high: no new write.
    server.reset_counters();
    reconcile(&ctx, "busy").await;
    assert_eq!(server.total_writes(), 0, "{:?}", server.request_counts());
    // Below the low watermark: cleared.
    *fake.kv_usage.lock().unwrap() = 0.3;
    reconcile(&ctx, "busy").await;
    let m = common::get(&ctx, "busy").await;
    let st = m.status.unwrap();
    assert!(!st.kv_cache.unwrap().pressure);
}

#[test]
fn kv_usage_parser() {
    let text = "# HELP x\nvllm:gpu_cache_usage_perc{model_name=\"a\"} 0.25\nvllm:kv_cache_usage_perc{a=\"b\"} 0.5\nother 9\n";
    assert_eq!(model::parse_kv_usage(text), Some(0.5));
    assert_eq!(model::parse_kv_usage("nothing 1\n"), None);
}
