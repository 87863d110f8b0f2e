//! The example manifests under `crds/examples/` deserialize into the Rust
//! types and validate against the generated schemas (see `support` for what
//! the offline validator checks), both as written and as the types
//! serialize them back.

use crate::support;

use std::fs;
use std::path::Path;

use flexinfer_crds::{manifests, v1alpha1, v1alpha2};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// The `openAPIV3Schema` of `kind`, from the rendered manifests.
fn schema_of(kind: &str) -> Value {
    manifests::render_all()
        .iter()
        .map(|(_, yaml)| serde_yaml::from_str::<Value>(yaml).expect("manifest parses"))
        .find(|crd| crd["spec"]["names"]["kind"] == kind)
        .map(|crd| crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone())
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

/// The YAML documents of an example file.
fn documents(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(file);
    let text = fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| Value::deserialize_from(document, &path))
        .collect()
}

trait DeserializeFrom {
    fn deserialize_from(document: serde_yaml::Deserializer<'_>, path: &Path) -> Self;
}

impl DeserializeFrom for Value {
    fn deserialize_from(document: serde_yaml::Deserializer<'_>, path: &Path) -> Value {
        serde::Deserialize::deserialize(document)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }
}

/// Checks every document of `file`: kind and version, schema validity,
/// deserialization into `T`, and schema validity of `T`'s serialization.
fn check_example<T: DeserializeOwned + Serialize>(
    file: &str,
    api_version: &str,
    kind: &str,
) -> Vec<T> {
    let schema = schema_of(kind);
    let docs = documents(file);
    assert!(!docs.is_empty(), "{file} has no documents");
    docs.into_iter()
        .enumerate()
        .map(|(index, doc)| {
            let label = format!("{file} document {}", index + 1);
            assert_eq!(doc["apiVersion"], api_version, "{label}");
            assert_eq!(doc["kind"], kind, "{label}");
            let errors = support::validate(&schema, &doc);
            assert!(
                errors.is_empty(),
                "{label} fails the {kind} schema:\n{}",
                errors.join("\n")
            );
            let typed: T =
                serde_json::from_value(doc).unwrap_or_else(|err| panic!("{label}: {err}"));
            let reserialized = serde_json::to_value(&typed).expect("serializes");
            let errors = support::validate(&schema, &reserialized);
            assert!(
                errors.is_empty(),
                "{label} as serialized by the types fails the schema:\n{}",
                errors.join("\n")
            );
            typed
        })
        .collect()
}

#[test]
fn model_examples() {
    let models: Vec<v1alpha2::Model> =
        check_example("model.yaml", "ai.flexinfer/v1alpha2", "Model");
    assert_eq!(models.len(), 2);
    let llamacpp = &models[0];
    assert_eq!(llamacpp.spec.backend, "llamacpp");
    assert_eq!(llamacpp.spec.idle_timeout().as_secs(), 600);
    assert_eq!(llamacpp.spec.cold_start_timeout().as_secs(), 90);
    assert_eq!(llamacpp.spec.context_window(), Some(8192));
    assert_eq!(
        llamacpp.routing_strategy(),
        flexinfer_crds::RoutingStrategy::SessionAffinity
    );
    assert_eq!(llamacpp.spec.served_model_name("qwen3-0-6b"), "qwen3-small");
    assert_eq!(
        llamacpp.spec.client_aliases("qwen3-0-6b"),
        ["qwen3-small", "qwen3"]
    );

    let vllm = &models[1];
    assert_eq!(vllm.spec.shared_group(), Some("rdna3-24g"));
    assert_eq!(vllm.spec.priority(), 200);
    assert_eq!(vllm.spec.gpu_vendor(), v1alpha2::GpuVendor::Amd);
    assert_eq!(vllm.spec.cache_strategy(), v1alpha2::CacheStrategy::Memory);
    assert_eq!(vllm.spec.backend_model_name(), "Qwen/Qwen3-8B-AWQ");
    assert_eq!(
        vllm.spec
            .kv_cache
            .as_ref()
            .map(v1alpha2::KvCacheSpec::low_watermark),
        Some(0.7)
    );
    assert_eq!(
        vllm.serve_paths(),
        ["/v1/chat/completions", "/v1/completions"]
    );
    assert!(vllm.is_ready());
    let status = vllm.status.as_ref().expect("status");
    assert_eq!(status.ready_replicas, Some(1));
    assert_eq!(
        status
            .shared_group
            .as_ref()
            .and_then(|group| group.active_model.as_deref()),
        Some("qwen3-8b-awq")
    );
}

#[test]
fn lora_adapter_example() {
    let adapters: Vec<v1alpha2::LoRAAdapter> =
        check_example("loraadapter.yaml", "ai.flexinfer/v1alpha2", "LoRAAdapter");
    assert_eq!(
        adapters[0].spec.source.type_,
        v1alpha2::LoRASourceType::HuggingFace
    );
    assert!(adapters[0].spec.preload);
}

#[test]
fn model_catalog_example() {
    let catalogs: Vec<v1alpha2::ModelCatalog> =
        check_example("modelcatalog.yaml", "ai.flexinfer/v1alpha2", "ModelCatalog");
    assert_eq!(catalogs[0].spec.registries.len(), 4);
    assert_eq!(catalogs[0].spec.sync_interval().as_secs(), 1800);
}

#[test]
fn cluster_example() {
    let clusters: Vec<v1alpha2::Cluster> =
        check_example("cluster.yaml", "ai.flexinfer/v1alpha2", "Cluster");
    assert_eq!(clusters[0].spec.validate_basic(), Ok(()));
    assert_eq!(clusters[0].spec.probe_interval().as_secs(), 60);
}

#[test]
fn federated_model_example() {
    let models: Vec<v1alpha2::FederatedModel> = check_example(
        "federatedmodel.yaml",
        "ai.flexinfer/v1alpha2",
        "FederatedModel",
    );
    assert_eq!(models[0].spec.validate_basic(), Ok(()));
    assert_eq!(models[0].spec.placement.replicas_per_cluster, 2);
}

#[test]
fn global_proxy_example() {
    let proxies: Vec<v1alpha2::GlobalProxy> =
        check_example("globalproxy.yaml", "ai.flexinfer/v1alpha2", "GlobalProxy");
    assert_eq!(proxies[0].spec.validate_basic(), Ok(()));
    assert_eq!(
        proxies[0].spec.clusters[1].gpu_vendor,
        Some(flexinfer_crds::gpu::Vendor::Amd)
    );
}

#[test]
fn model_deployment_examples() {
    let deployments: Vec<v1alpha1::ModelDeployment> = check_example(
        "modeldeployment.yaml",
        "ai.flexinfer/v1alpha1",
        "ModelDeployment",
    );
    assert_eq!(deployments.len(), 2);
    assert_eq!(deployments[0].spec.idle_timeout().as_secs(), 600);
    assert_eq!(
        deployments[0].spec.gpu_group_ref.as_deref(),
        Some("rtx4090")
    );
    let vllm = deployments[1].spec.vllm.as_ref().expect("vllm config");
    assert_eq!(vllm.kv_cache_dtype, Some(v1alpha1::KvCacheDtype::Fp8E4m3));
    // Unset fields take the spec defaults.
    assert_eq!(deployments[1].spec.replicas, 1);
    assert_eq!(deployments[1].spec.cold_start_timeout().as_secs(), 60);
}

#[test]
fn model_cache_example() {
    let caches: Vec<v1alpha1::ModelCache> =
        check_example("modelcache.yaml", "ai.flexinfer/v1alpha1", "ModelCache");
    let spec = &caches[0].spec;
    assert!(spec.is_oci_source());
    assert_eq!(spec.storage_strategy, v1alpha1::StorageStrategy::SharedPvc);
    assert_eq!(spec.eviction_threshold_percent, 85);
    let quantization = spec.quantization.as_ref().expect("quantization");
    assert!(quantization.use_gpu());
    assert_eq!(quantization.max_memory_gb(), 48);
}

#[test]
fn gpu_group_example() {
    let groups: Vec<v1alpha1::GPUGroup> =
        check_example("gpugroup.yaml", "ai.flexinfer/v1alpha1", "GPUGroup");
    let group = &groups[0];
    assert_eq!(group.active_model(), Some("llama3-chat"));
    assert_eq!(group.member("mistral-vllm").map(|m| m.priority), Some(100));
    // Fields the example leaves out keep their defaults.
    assert_eq!(group.spec.anti_thrashing.minimum_run_duration_seconds, 45);
    assert_eq!(
        group.spec.anti_thrashing.cooldown_after_preemption_seconds,
        60
    );
    assert_eq!(group.spec.anti_thrashing.hysteresis_window_seconds, 10);
    let annotations = group.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(
        annotations[&flexinfer_crds::labels::queue_annotation("mistral-vllm")],
        "4"
    );
}

#[test]
fn every_example_file_is_checked() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<String> = fs::read_dir(dir)
        .expect("examples directory")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "cluster.yaml",
            "federatedmodel.yaml",
            "globalproxy.yaml",
            "gpugroup.yaml",
            "loraadapter.yaml",
            "model.yaml",
            "modelcache.yaml",
            "modelcatalog.yaml",
            "modeldeployment.yaml",
        ]
    );
}

#[test]
fn validator_rejects_what_the_api_server_would() {
    let schema = schema_of("Model");
    let valid = serde_json::json!({
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": "m"},
        "spec": {"backend": "vllm", "source": "HF://org/m"},
    });
    assert!(support::validate(&schema, &valid).is_empty());

    let cases = [
        (
            "/spec/gpu",
            serde_json::json!({"vendor": "intel"}),
            "is not one of",
        ),
        (
            "/spec/gpu",
            serde_json::json!({"priority": 5000}),
            "greater than the maximum",
        ),
        (
            "/spec/gpu",
            serde_json::json!({"count": 0}),
            "less than the minimum",
        ),
        (
            "/spec/gpu",
            serde_json::json!({"count": "two"}),
            "expected integer",
        ),
        (
            "/spec/serverless",
            serde_json::json!({"minReplicas": -1}),
            "less than the minimum",
        ),
        (
            "/spec/cache",
            serde_json::json!({"strategy": "Disk"}),
            "is not one of",
        ),
        (
            "/spec/serviceLabels",
            serde_json::json!(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]),
            "more than 10 items",
        ),
        (
            "/spec/unknownField",
            serde_json::json!(true),
            "unknown field",
        ),
        (
            "/spec/kvCache",
            serde_json::json!({"highWatermark": true}),
            "integer or string",
        ),
        (
            "/status",
            serde_json::json!({"phase": "Running"}),
            "is not one of",
        ),
        (
            "/status",
            serde_json::json!({"lastActiveTime": "yesterday"}),
            "date-time",
        ),
    ];
    for (pointer, value, expected) in cases {
        let mut object = valid.clone();
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        let target = if parent.is_empty() {
            &mut object
        } else {
            object.pointer_mut(parent).expect("parent")
        };
        target[key] = value;
        let errors = support::validate(&schema, &object);
        assert!(
            errors.iter().any(|error| error.contains(expected)),
            "{pointer}: expected an error containing {expected:?}, got {errors:?}"
        );
    }

    let mut missing = valid.clone();
    missing["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("source");
    assert!(support::validate(&schema, &missing)
        .iter()
        .any(|e| e.contains("missing required field \"source\"")));

    // Free-form backend config is kept as written.
    let mut config = valid;
    config["spec"]["config"] = serde_json::json!({"anything": {"nested": [1, 2]}});
    assert!(support::validate(&schema, &config).is_empty());
}

#[test]
fn cluster_endpoint_pattern_is_enforced() {
    let schema = schema_of("Cluster");
    let object = serde_json::json!({
        "spec": {"apiEndpoint": "http://insecure.example.com", "secretRef": {"name": "kc"}},
    });
    let errors = support::validate(&schema, &object);
    assert!(
        errors.iter().any(|e| e.contains("does not match")),
        "{errors:?}"
    );
}
