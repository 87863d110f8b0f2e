//! Desired-object builders compared to JSON fixtures under
//! `tests/fixtures/`, for every backend and vendor, with and without cache,
//! flash-loader, shared GPU and quantization. `FLEXINFER_BLESS=1`
//! regenerates the fixtures; the behavioural assertions below hold either
//! way.

use std::path::PathBuf;

use flexinfer_crds::backend;
use flexinfer_crds::gpu::Vendor;
use flexinfer_crds::v1alpha2::{
    CacheSpec, CacheStrategy, FlashLoaderSpec, GpuSpec, GpuVendor, Model, ModelSpec,
    QuantizationFormat, QuantizationSpec,
};
use flexinfer_operator::desired::{self, cache, deployment, service, BuildSettings, ModelPlan};
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::{json, Value};

fn model(name: &str, spec: ModelSpec) -> Model {
    let mut m = Model::new(name, spec);
    m.metadata.namespace = Some("ml".into());
    m.metadata.uid = Some(format!("uid-{name}"));
    m
}

fn spec(backend: &str, vendor: Vendor) -> ModelSpec {
    let source = match backend {
        "ollama" => "ollama://llama3:8b".to_owned(),
        _ => format!("HF://org/{backend}-model"),
    };
    let gpu = match vendor {
        Vendor::Cpu => None,
        Vendor::Amd => Some(GpuSpec {
            vendor: GpuVendor::Amd,
            ..Default::default()
        }),
        _ => Some(GpuSpec {
            vendor: GpuVendor::Nvidia,
            ..Default::default()
        }),
    };
    ModelSpec {
        backend: backend.into(),
        source,
        gpu,
        ..Default::default()
    }
}

fn render(model: &Model, vendor: Vendor, arch: &str, settings: &BuildSettings) -> Value {
    let backend = backend::get(&model.spec.backend).unwrap();
    let mut plan = ModelPlan::for_model(model, backend, settings);
    plan.vendor = vendor;
    plan.arch = arch.into();
    plan.shared_active = model.spec.is_shared().then_some(true);
    json!({
        "deployment": deployment::deployment(&plan),
        "service": service::service(&plan),
        "pvc": cache::cache_pvc(&plan),
        "prefetchJob": cache::prefetch_job(&plan),
        "quantizeJob": cache::quantize_job(&plan),
        "cleanupJob": cache::tmpfs_cleanup_job(&plan),
    })
}

fn check_fixture(name: &str, actual: &Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.json"));
    let pretty = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var("FLEXINFER_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &pretty).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing fixture {}; run with FLEXINFER_BLESS=1 to create it",
            path.display()
        )
    });
    let expected: Value = serde_json::from_str(&expected).unwrap();
    assert_eq!(
        &expected,
        actual,
        "{name} differs from {} (FLEXINFER_BLESS=1 regenerates)",
        path.display()
    );
}

fn dep(v: &Value) -> Deployment {
    serde_json::from_value(v["deployment"].clone()).unwrap()
}

fn limits(d: &Deployment) -> Value {
    json!(d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone()))
}

fn has_gpu_toleration(v: &Value) -> bool {
    v["tolerations"].as_array().is_some_and(|ts| {
        ts.iter()
            .any(|t| t["key"] == "dedicated" && t["value"] == "gpu" && t["effect"] == "NoSchedule")
    })
}

#[test]
fn every_backend_and_vendor_with_cache() {
    let settings = BuildSettings::default();
    for b in backend::all() {
        for &vendor in b.vendors {
            let arch = match vendor {
                Vendor::Amd => "gfx1100",
                Vendor::Nvidia => "sm_8",
                _ => "",
            };
            let m = model(&format!("{}-{}", b.name, vendor), spec(b.name, vendor));
            let out = render(&m, vendor, arch, &settings);
            check_fixture(&format!("{}_{}", b.name, vendor), &out);

            let d = dep(&out);
            let pod = &out["deployment"]["spec"]["template"]["spec"];
            let container = &pod["containers"][0];
            assert_eq!(container["ports"][0]["name"], "http");
            assert_eq!(container["ports"][0]["containerPort"], b.port);
            assert_eq!(out["service"]["spec"]["ports"][0]["port"], b.port);
            assert_eq!(
                out["service"]["metadata"]["name"],
                m.metadata.name.clone().unwrap()
            );
            assert_eq!(
                out["service"]["metadata"]["labels"]["flexinfer.ai/model"],
                m.metadata.name.clone().unwrap()
            );
            assert_eq!(
                out["service"]["metadata"]["labels"]["app.kubernetes.io/managed-by"],
                "flexinfer"
            );
            assert_eq!(
                pod["containers"][0]["image"],
                b.default_image(vendor, arch).unwrap()
            );
            assert_eq!(
                container["readinessProbe"]["periodSeconds"],
                b.readiness.period_seconds
            );
            match vendor {
                Vendor::Nvidia => {
                    assert_eq!(limits(&d)["nvidia.com/gpu"], "1");
                    assert!(has_gpu_toleration(pod));
                    // No RuntimeClass unless the operator or the Model names
                    // one: most clusters define none called `nvidia`.
                    assert!(pod["runtimeClassName"].is_null());
                }
                Vendor::Amd => {
                    assert_eq!(limits(&d)["amd.com/gpu"], "1");
                    assert!(has_gpu_toleration(pod));
                    assert_eq!(
                        pod["securityContext"]["supplementalGroups"],
                        json!([109, 992])
                    );
                    assert!(container["env"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|e| e["name"] == "HSA_OVERRIDE_GFX_VERSION"));
                }
                _ => {
                    assert!(limits(&d).is_null());
                    assert!(!has_gpu_toleration(pod));
                }
            }
            // The same model without a cache: no PVC, no Job.
            let mut no_cache = m.clone();
            no_cache.spec.cache = Some(CacheSpec {
                strategy: Some(CacheStrategy::None),
                ..Default::default()
            });
            let plain = render(&no_cache, vendor, arch, &settings);
            check_fixture(&format!("{}_{}_no_cache", b.name, vendor), &plain);
            assert!(plain["pvc"].is_null() && plain["prefetchJob"].is_null());
            // Cache: HF sources on SharedPVC get a PVC and a prefetch Job.
            if b.needs_volume {
                assert_eq!(
                    out["pvc"]["metadata"]["name"],
                    format!("{}-cache", m.metadata.name.clone().unwrap())
                );
                assert_eq!(
                    out["prefetchJob"]["metadata"]["name"],
                    format!("{}-cache-prefetch", m.metadata.name.clone().unwrap())
                );
                assert_eq!(
                    pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
                    out["pvc"]["metadata"]["name"]
                );
            } else {
                assert!(out["pvc"].is_null() && out["prefetchJob"].is_null());
            }
        }
    }
}

#[test]
fn without_cache() {
    let mut s = spec("vllm", Vendor::Nvidia);
    s.cache = Some(CacheSpec {
        strategy: Some(CacheStrategy::None),
        ..Default::default()
    });
    let out = render(
        &model("plain", s),
        Vendor::Nvidia,
        "sm_8",
        &BuildSettings::default(),
    );
    check_fixture("vllm_nvidia_plain", &out);
    assert!(out["pvc"].is_null() && out["prefetchJob"].is_null());
    let args = &out["deployment"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array().unwrap().contains(&json!("org/vllm-model")),
        "{args}"
    );
}

#[test]
fn flash_loader() {
    let mut s = spec("vllm", Vendor::Nvidia);
    s.cache = Some(CacheSpec {
        flash_loader: Some(FlashLoaderSpec {
            enabled: Some(true),
            tmpfs_size_limit: Some("40Gi".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    let out = render(
        &model("flash", s),
        Vendor::Nvidia,
        "sm_8",
        &BuildSettings::default(),
    );
    check_fixture("vllm_nvidia_flash_loader", &out);
    let pod = &out["deployment"]["spec"]["template"]["spec"];
    assert_eq!(pod["initContainers"][0]["name"], "flash-loader");
    assert_eq!(
        pod["initContainers"][0]["image"],
        desired::DEFAULT_FLASH_LOADER_IMAGE
    );
    let tmpfs = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "flash-tmpfs")
        .unwrap();
    assert_eq!(tmpfs["emptyDir"]["medium"], "Memory");
    assert_eq!(tmpfs["emptyDir"]["sizeLimit"], "40Gi");
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["name"],
        "flash-tmpfs"
    );
}

#[test]
fn shared_gpu() {
    let mut s = spec("vllm", Vendor::Amd);
    s.gpu.as_mut().unwrap().shared = Some("gfx1100-a".into());
    s.gpu.as_mut().unwrap().vram_estimate_mb = Some(12_000);
    s.cache = Some(CacheSpec {
        strategy: Some(CacheStrategy::Local),
        ..Default::default()
    });
    s.node_selector
        .insert("kubernetes.io/hostname".into(), "gpu-1".into());
    s.service_labels = vec!["code".into()];
    let out = render(
        &model("shared", s),
        Vendor::Amd,
        "gfx1100",
        &BuildSettings::default(),
    );
    check_fixture("vllm_amd_shared", &out);
    let pod = &out["deployment"]["spec"]["template"]["spec"];
    assert_eq!(
        out["deployment"]["metadata"]["labels"]["flexinfer.ai/gpu-group"],
        "gfx1100-a"
    );
    assert_eq!(
        out["service"]["metadata"]["annotations"]["ai.flexinfer/active-services"],
        "code"
    );
    // Shared + Local: flash loader into the node's /dev/shm.
    let tmpfs = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "flash-tmpfs")
        .unwrap();
    assert_eq!(tmpfs["hostPath"]["path"], "/dev/shm/flexinfer/ml/shared");
    assert_eq!(
        out["deployment"]["spec"]["template"]["metadata"]["annotations"]
            ["flexinfer.ai/gpu.vram-estimate-mb"],
        "12000"
    );
    assert_eq!(
        out["cleanupJob"]["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["rm", "-rf", "/dev/shm/flexinfer/ml/shared"])
    );
    assert!(out["cleanupJob"]["metadata"]["ownerReferences"].is_null());
}

#[test]
fn quantization_on_gpu() {
    let mut s = spec("vllm", Vendor::Nvidia);
    s.quantize = Some(QuantizationSpec {
        format: QuantizationFormat::Awq,
        bits: Some(4),
        group_size: Some(128),
        use_gpu: Some(true),
        ..serde_json::from_value(json!({"format": "AWQ"})).unwrap()
    });
    let settings = BuildSettings {
        scheduler_name: Some("flexinfer-scheduler".into()),
        ..Default::default()
    };
    let out = render(
        &model("quant", s.clone()),
        Vendor::Nvidia,
        "sm_8",
        &settings,
    );
    check_fixture("vllm_nvidia_quantized", &out);
    let job = &out["quantizeJob"]["spec"]["template"]["spec"];
    assert!(has_gpu_toleration(job));
    assert_eq!(
        job["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
    assert_eq!(
        out["deployment"]["spec"]["template"]["spec"]["schedulerName"],
        "flexinfer-scheduler"
    );
    let args = out["deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        args.contains(&json!("/models/quant/awq-w4-g128")),
        "{args:?}"
    );
    // Without useGPU: no toleration, no GPU.
    s.quantize.as_mut().unwrap().use_gpu = Some(false);
    let out = render(
        &model("quant", s),
        Vendor::Nvidia,
        "sm_8",
        &BuildSettings::default(),
    );
    let job = &out["quantizeJob"]["spec"]["template"]["spec"];
    assert!(!has_gpu_toleration(job));
    assert!(job["containers"][0]["resources"]["limits"]["nvidia.com/gpu"].is_null());
}

#[test]
fn builders_are_deterministic() {
    let m = model("same", spec("llamacpp", Vendor::Cpu));
    let a = render(&m, Vendor::Cpu, "", &BuildSettings::default());
    let b = render(&m, Vendor::Cpu, "", &BuildSettings::default());
    assert_eq!(a, b);
    assert_eq!(
        service::endpoint("same", "ml", 8080),
        "http://same.ml.svc:8080"
    );
}

fn args_of(out: &Value) -> Vec<String> {
    serde_json::from_value(
        out["deployment"]["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .unwrap_or_default()
}

fn after<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

#[test]
fn served_name_matches_what_the_gateway_sends_and_config_args() {
    let mut s = spec("vllm", Vendor::Nvidia);
    s.config = Some(
        json!({"maxModelLen": 8192, "gpuMemoryUtilization": "0.9", "enableLora": true, "maxLoras": 8})
            .as_object()
            .unwrap()
            .clone(),
    );
    let m = model("cfg", s.clone());
    let out = render(&m, Vendor::Nvidia, "sm_8", &BuildSettings::default());
    check_fixture("vllm_nvidia_config", &out);
    let args = args_of(&out);
    assert_eq!(
        after(&args, "--served-model-name"),
        Some(s.backend_model_name().as_str())
    );
    assert_eq!(after(&args, "--served-model-name"), Some("org/vllm-model"));
    assert_eq!(after(&args, "--max-model-len"), Some("8192"));
    assert_eq!(after(&args, "--gpu-memory-utilization"), Some("0.9"));
    assert_eq!(after(&args, "--max-loras"), Some("8"));
    let env = &out["deployment"]["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(env
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "VLLM_ALLOW_RUNTIME_LORA_UPDATING"));

    // llama.cpp: alias, and every layer on the GPU unless CPU.
    let gpu = render(
        &model("l", spec("llamacpp", Vendor::Nvidia)),
        Vendor::Nvidia,
        "sm_8",
        &BuildSettings::default(),
    );
    assert_eq!(after(&args_of(&gpu), "--n-gpu-layers"), Some("999"));
    assert_eq!(after(&args_of(&gpu), "--alias"), Some("org/llamacpp-model"));
    let cpu = render(
        &model("l", spec("llamacpp", Vendor::Cpu)),
        Vendor::Cpu,
        "",
        &BuildSettings::default(),
    );
    assert_eq!(after(&args_of(&cpu), "--n-gpu-layers"), Some("0"));
    // The image's own entrypoint starts llama-server: the official images
    // (the catalog's defaults) have nothing at a fixed build path.
    for out in [&gpu, &cpu] {
        let container = &out["deployment"]["spec"]["template"]["spec"]["containers"][0];
        assert!(container.get("command").is_none(), "{container}");
    }
}

#[test]
fn model_cache_objects() {
    use flexinfer_crds::v1alpha1::{ModelCache, ModelCacheSpec};
    use flexinfer_operator::desired::model_cache;
    for (name, source) in [
        ("hf", "HF://Qwen/Qwen3-8B"),
        ("oci", "oci://ghcr.io/org/model:v1"),
    ] {
        let mut c = ModelCache::new(name, ModelCacheSpec::new(source));
        c.metadata.namespace = Some("ml".into());
        c.metadata.uid = Some(format!("uid-{name}"));
        let out = json!({
            "pvc": model_cache::pvc(&c),
            "job": model_cache::download_job(&c, &BuildSettings::default()),
        });
        check_fixture(&format!("modelcache_{name}"), &out);
        assert_eq!(out["pvc"]["spec"]["accessModes"], json!(["ReadWriteMany"]));
        assert_eq!(
            out["pvc"]["spec"]["resources"]["requests"]["storage"],
            "50Gi"
        );
        assert_eq!(out["job"]["metadata"]["name"], format!("{name}-downloader"));
        let image = out["job"]["spec"]["template"]["spec"]["containers"][0]["image"].clone();
        let want = if name == "oci" {
            desired::DEFAULT_FLASH_LOADER_IMAGE
        } else {
            model_cache::HF_IMAGE
        };
        assert_eq!(image, want);
    }
}

#[test]
fn model_deployment_converts_to_the_model_spec() {
    use flexinfer_crds::v1alpha1::{ModelDeployment, ModelDeploymentSpec};
    use flexinfer_operator::controllers::model_deployment::to_model_spec;
    let mut spec = ModelDeploymentSpec::new("ollama", "llama3:8b");
    spec.min_replicas = 1;
    spec.idle_timeout_seconds = 120;
    let s = to_model_spec(&ModelDeployment::new("legacy", spec));
    assert_eq!(s.source, "ollama://llama3:8b");
    assert_eq!(s.min_replicas(), 1);
    assert_eq!(s.idle_timeout(), std::time::Duration::from_secs(120));
    assert_eq!(s.cache_strategy(), CacheStrategy::None);
    let hf = to_model_spec(&ModelDeployment::new(
        "v",
        ModelDeploymentSpec::new("vllm", "org/m"),
    ));
    assert_eq!(hf.source, "HF://org/m");
    assert_eq!(hf.gpu_count(), 1);
}

fn plan_json(m: &Model, vendor: Vendor, settings: &BuildSettings) -> Value {
    render(m, vendor, "", settings)
}

/// Names a Model may have but a Service may not: the children get
/// DNS-1035 names of at most 63 characters, label values fit, and the
/// Model's own name stays in the pod annotation and the served name.
#[test]
fn children_of_models_with_dotted_or_long_names_are_valid_objects() {
    let settings = BuildSettings::default();
    let long = format!("model-{}", "x".repeat(60));
    for name in ["qwen2.5-7b", "llama-3.1-8b", "7b-chat", long.as_str()] {
        let m = model(name, spec("vllm", Vendor::Nvidia));
        let out = plan_json(&m, Vendor::Nvidia, &settings);
        let names = [
            &out["service"]["metadata"]["name"],
            &out["deployment"]["metadata"]["name"],
            &out["prefetchJob"]["metadata"]["name"],
        ];
        for n in names {
            let n = n.as_str().unwrap();
            assert!(
                flexinfer_crds::names::is_dns1035_label(n),
                "{name}: {n} is not a DNS-1035 label"
            );
        }
        assert_eq!(
            out["pvc"]["metadata"]["name"],
            format!(
                "{}-cache",
                out["service"]["metadata"]["name"].as_str().unwrap()
            )
        );
        let labels = out["deployment"]["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .unwrap();
        for v in labels.values() {
            assert!(flexinfer_crds::names::is_label_value(v.as_str().unwrap()));
        }
        let pod = &out["deployment"]["spec"]["template"]["metadata"];
        assert_eq!(pod["annotations"]["flexinfer.ai/model"], name);
        // The pods' volume is the PVC the operator creates.
        assert_eq!(
            out["deployment"]["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]
                ["claimName"],
            out["pvc"]["metadata"]["name"]
        );
    }
}

/// The Deployment selects by identity only: a change of backend keeps the
/// (immutable) selector.
#[test]
fn the_deployment_selector_survives_a_change_of_backend() {
    let settings = BuildSettings::default();
    let a = plan_json(
        &model("m", spec("vllm", Vendor::Cpu)),
        Vendor::Cpu,
        &settings,
    );
    let b = plan_json(
        &model("m", spec("llamacpp", Vendor::Cpu)),
        Vendor::Cpu,
        &settings,
    );
    let selector = |v: &Value| v["deployment"]["spec"]["selector"].clone();
    assert_eq!(selector(&a), selector(&b));
    assert!(selector(&a)["matchLabels"]["flexinfer.ai/backend"].is_null());
    assert_eq!(
        a["deployment"]["spec"]["template"]["metadata"]["labels"]["flexinfer.ai/backend"],
        "vllm"
    );
    assert_eq!(
        a["service"]["spec"]["selector"],
        selector(&a)["matchLabels"]
    );
}

/// Storage class, runtime class and GPU tolerations come from the Model,
/// else from the operator's settings, else are left to the cluster.
#[test]
fn cluster_specific_pod_settings_are_values() {
    let defaults = BuildSettings::default();
    let m = model("m", spec("vllm", Vendor::Nvidia));
    let out = plan_json(&m, Vendor::Nvidia, &defaults);
    assert!(out["pvc"]["spec"]["storageClassName"].is_null());
    assert_eq!(out["pvc"]["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    let pod = &out["deployment"]["spec"]["template"]["spec"];
    assert!(pod["runtimeClassName"].is_null());
    let keys: Vec<&str> = pod["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["dedicated", "nvidia.com/gpu", "amd.com/gpu"]);

    let settings = BuildSettings {
        cache_storage_class: Some("fast".into()),
        nvidia_runtime_class: Some("nvidia".into()),
        gpu_tolerations: vec![],
        ..Default::default()
    };
    let out = plan_json(&m, Vendor::Nvidia, &settings);
    assert_eq!(out["pvc"]["spec"]["storageClassName"], "fast");
    let pod = &out["deployment"]["spec"]["template"]["spec"];
    assert_eq!(pod["runtimeClassName"], "nvidia");
    assert!(pod["tolerations"].is_null());
    // CPU pods never get the NVIDIA runtime class.
    let cpu = plan_json(
        &model("c", spec("vllm", Vendor::Cpu)),
        Vendor::Cpu,
        &settings,
    );
    assert!(cpu["deployment"]["spec"]["template"]["spec"]["runtimeClassName"].is_null());

    let mut own = m.clone();
    own.spec.runtime_class_name = Some("kata".into());
    own.spec.cache = Some(CacheSpec {
        storage_class: Some("local-nvme".into()),
        access_mode: Some("ReadWriteMany".into()),
        ..Default::default()
    });
    let out = plan_json(&own, Vendor::Nvidia, &settings);
    assert_eq!(out["pvc"]["spec"]["storageClassName"], "local-nvme");
    assert_eq!(out["pvc"]["spec"]["accessModes"], json!(["ReadWriteMany"]));
    assert_eq!(
        out["deployment"]["spec"]["template"]["spec"]["runtimeClassName"],
        "kata"
    );
}

/// The prefetch Job goes where the model goes (so a volume bound on first
/// use binds where the model can run), and a pod holding a single-node
/// volume is replaced, never overlapped.
#[test]
fn cache_jobs_follow_the_model_and_single_node_volumes_roll_by_recreate() {
    let settings = BuildSettings::default();
    let mut m = model("m", spec("vllm", Vendor::Nvidia));
    m.spec.node_selector = [("zone".to_owned(), "a".to_owned())].into();
    m.spec.tolerations =
        vec![serde_json::from_value(json!({"key": "spot", "operator": "Exists"})).unwrap()];
    let out = plan_json(&m, Vendor::Nvidia, &settings);
    let job = &out["prefetchJob"]["spec"]["template"]["spec"];
    let pod = &out["deployment"]["spec"]["template"]["spec"];
    assert_eq!(job["nodeSelector"], pod["nodeSelector"]);
    assert_eq!(job["tolerations"], pod["tolerations"]);
    assert_eq!(
        job["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
            ["preference"]["matchExpressions"][0]["values"],
        json!(["nvidia"])
    );
    assert_eq!(out["deployment"]["spec"]["strategy"]["type"], "Recreate");
    // CPU models on a ReadWriteOnce cache too (Kubernetes' default rolling
    // update would start the new pod first).
    let cpu = plan_json(
        &model("c", spec("vllm", Vendor::Cpu)),
        Vendor::Cpu,
        &settings,
    );
    assert_eq!(cpu["deployment"]["spec"]["strategy"]["type"], "Recreate");
    // ReadWriteMany: GPU pods roll one at a time without a surge pod.
    let mut rwx = m.clone();
    rwx.spec.cache = Some(CacheSpec {
        access_mode: Some("ReadWriteMany".into()),
        ..Default::default()
    });
    let out = plan_json(&rwx, Vendor::Nvidia, &settings);
    assert_eq!(
        out["deployment"]["spec"]["strategy"]["type"],
        "RollingUpdate"
    );
    assert_eq!(
        out["deployment"]["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        0
    );
}

/// Model and cache pods pass the Pod Security `baseline` level and carry
/// what `restricted` asks for besides a non-root user, which the Model
/// sets when its image allows.
#[test]
fn model_and_cache_pods_are_hardened() {
    let settings = BuildSettings::default();
    let mut m = model("m", spec("vllm", Vendor::Cpu));
    m.spec.security_context =
        Some(serde_json::from_value(json!({"runAsNonRoot": true, "runAsUser": 1000})).unwrap());
    let out = plan_json(&m, Vendor::Cpu, &settings);
    for pod in [
        &out["deployment"]["spec"]["template"]["spec"],
        &out["prefetchJob"]["spec"]["template"]["spec"],
    ] {
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        for c in pod["containers"].as_array().unwrap() {
            assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
            assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        }
    }
    let pod = &out["deployment"]["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 1000);
}
