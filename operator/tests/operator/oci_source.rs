//! `oci://` model sources: the prefetch Job of a Model and the download Job
//! of a ModelCache run `flexinfer-flashload pull` from the flash-loader
//! image, with the registry Secret mounted, and the backend serves the
//! pulled files from the cache volume.

use crate::common;

use common::*;
use flexinfer_crds::backend;
use flexinfer_crds::v1alpha1::{ModelCache, ModelCacheSpec};
use flexinfer_crds::v1alpha2::{Model, ModelSpec};
use flexinfer_operator::desired::{
    cache, deployment, model_cache, oci, BuildSettings, ModelPlan, DEFAULT_FLASH_LOADER_IMAGE,
};
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use serde_json::{json, Value};

fn oci_model(name: &str, secret: bool) -> Model {
    let mut config = serde_json::Map::new();
    config.insert("ggufFile".into(), json!("qwen3-0.6b.Q4_K_M.gguf"));
    if secret {
        config.insert(oci::SECRET_CONFIG_KEY.into(), json!("harbor-pull"));
    }
    let mut m = Model::new(
        name,
        ModelSpec {
            backend: "llamacpp".into(),
            source: "oci://registry.harbor.lan/models/qwen3:0.6b".into(),
            config: Some(config),
            ..Default::default()
        },
    );
    m.metadata.namespace = Some("ml".into());
    m.metadata.uid = Some(format!("uid-{name}"));
    m
}

fn pod(job: &Value) -> &Value {
    &job["spec"]["template"]["spec"]
}

#[test]
fn a_model_prefetch_job_pulls_with_flashload() {
    let settings = BuildSettings {
        flash_loader_image: "ghcr.io/flexinfer/flexinfer-flashload:0.1.0".into(),
        ..Default::default()
    };
    let m = oci_model("qwen", true);
    let plan = ModelPlan::for_model(&m, backend::get("llamacpp").unwrap(), &settings);
    assert!(plan.needs_prefetch());
    let job = serde_json::to_value(cache::prefetch_job(&plan).unwrap()).unwrap();
    assert_eq!(job["metadata"]["name"], "qwen-cache-prefetch");
    let c = &pod(&job)["containers"][0];
    assert_eq!(c["image"], "ghcr.io/flexinfer/flexinfer-flashload:0.1.0");
    assert_eq!(
        c["command"],
        json!([
            "flexinfer-flashload",
            "pull",
            "oci://registry.harbor.lan/models/qwen3:0.6b",
            "--dest",
            "/models/qwen",
            "--progress",
            "log",
            "--docker-config",
            "/var/run/secrets/flexinfer/registry/.dockerconfigjson"
        ])
    );
    assert_eq!(pod(&job)["securityContext"]["fsGroup"], 65532);
    let volumes = pod(&job)["volumes"].as_array().unwrap();
    assert_eq!(
        volumes[0]["persistentVolumeClaim"]["claimName"],
        "qwen-cache"
    );
    assert_eq!(volumes[1]["secret"]["secretName"], "harbor-pull");
    assert_eq!(volumes[1]["secret"]["items"][0]["key"], ".dockerconfigjson");
    // ECR keys, when the Secret has them, reach `pull` as AWS_* variables.
    let env = c["env"].as_array().unwrap();
    assert_eq!(env[0]["name"], "AWS_ACCESS_KEY_ID");
    assert_eq!(
        env[0]["valueFrom"]["secretKeyRef"],
        json!({"name": "harbor-pull", "key": "aws_access_key_id", "optional": true})
    );
    assert_eq!(volumes[1]["secret"]["optional"], true);
    let mounts = c["volumeMounts"].as_array().unwrap();
    assert_eq!(mounts[0]["mountPath"], "/models");
    assert_eq!(mounts[1]["readOnly"], true);
    // The backend serves the pulled GGUF from the cache.
    assert_eq!(plan.model_path(), "/models/qwen/qwen3-0.6b.Q4_K_M.gguf");
    let d = serde_json::to_value(deployment::deployment(&plan)).unwrap();
    let args = d["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("/models/qwen/qwen3-0.6b.Q4_K_M.gguf"),
        "{args}"
    );

    // Anonymous pulls mount no Secret.
    let m = oci_model("anon", false);
    let plan = ModelPlan::for_model(&m, backend::get("llamacpp").unwrap(), &settings);
    let job = serde_json::to_value(cache::prefetch_job(&plan).unwrap()).unwrap();
    assert_eq!(pod(&job)["volumes"].as_array().unwrap().len(), 1);
    assert!(!pod(&job)["containers"][0]["command"]
        .to_string()
        .contains("--docker-config"));
}

#[test]
fn a_model_cache_download_job_pulls_with_flashload() {
    let mut spec = ModelCacheSpec::new("oras://ghcr.io/org/model@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    spec.oci_registry_secret_ref = Some("ghcr-pull".into());
    let mut c = ModelCache::new("m", spec);
    c.metadata.namespace = Some("ml".into());
    let job =
        serde_json::to_value(model_cache::download_job(&c, &BuildSettings::default())).unwrap();
    let container = &pod(&job)["containers"][0];
    assert_eq!(container["image"], DEFAULT_FLASH_LOADER_IMAGE);
    let command = container["command"].as_array().unwrap();
    assert_eq!(command[..3], [json!("flexinfer-flashload"), json!("pull"), json!("oci://ghcr.io/org/model@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")]);
    assert_eq!(command[4], "/models/m");
    assert_eq!(
        job["metadata"]["labels"]["app.kubernetes.io/component"],
        "oci-puller"
    );
    assert_eq!(pod(&job)["volumes"][1]["secret"]["secretName"], "ghcr-pull");
}

#[tokio::test]
async fn the_model_controller_creates_the_pull_job_and_gates_on_it() {
    let (_server, ctx, _clock) = setup().await;
    let mut m = oci_model("pulled", true);
    m.metadata.namespace = None;
    m.metadata.uid = None;
    create(&ctx, &m).await;
    reconcile_n(&ctx, "pulled", 3).await;
    let jobs: Api<Job> = Api::default_namespaced(ctx.client.clone());
    let job = jobs.get("pulled-cache-prefetch").await.unwrap();
    let command = job.spec.unwrap().template.spec.unwrap().containers[0]
        .command
        .clone()
        .unwrap();
    assert_eq!(
        command[..2],
        ["flexinfer-flashload".to_owned(), "pull".to_owned()]
    );
    let model = get(&ctx, "pulled").await;
    let status = serde_json::to_value(model.status.unwrap()).unwrap();
    assert_eq!(
        (
            &status["phase"],
            &status["cache"]["ready"],
            &status["cache"]["jobName"]
        ),
        (
            &serde_json::json!("Pending"),
            &serde_json::json!(false),
            &serde_json::json!("pulled-cache-prefetch")
        ),
        "the cache is gated on the pull: {status}"
    );
}
