//! Spec defaults: what an empty or partial manifest means, and that the
//! `Default` impls agree with deserializing `{}`.

use std::fmt::Debug;
use std::time::Duration;

use flexinfer_crds::defaults;
use flexinfer_crds::v1alpha1::{
    AntiThrashingPolicy, BenchmarkSpec, CacheFlashLoaderSpec, ComfyUiConfig, GPUGroupSpec,
    PreemptionPolicy, ScalingPolicy, ShareStrategy, VllmOmniConfig,
};
use flexinfer_crds::v1alpha2::{
    CacheSpec, CacheStrategy, CompilationCacheSpec, FlashLoaderSpec, GpuSpec, GpuVendor,
    KvCachePressurePolicy, KvCacheSpec, LiteLlmSpec, ModelSpec, ServerlessSpec,
};
use serde::de::DeserializeOwned;
use serde_json::json;

fn from_json<T: DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("deserializes")
}

fn empty_matches_default<T: DeserializeOwned + Default + PartialEq + Debug>() {
    assert_eq!(
        from_json::<T>(json!({})),
        T::default(),
        "{}",
        std::any::type_name::<T>()
    );
}

#[test]
fn default_impls_agree_with_serde_defaults() {
    empty_matches_default::<GpuSpec>();
    empty_matches_default::<ServerlessSpec>();
    empty_matches_default::<CacheSpec>();
    empty_matches_default::<CompilationCacheSpec>();
    empty_matches_default::<FlashLoaderSpec>();
    empty_matches_default::<LiteLlmSpec>();
    empty_matches_default::<KvCacheSpec>();
    empty_matches_default::<AntiThrashingPolicy>();
    empty_matches_default::<ScalingPolicy>();
    empty_matches_default::<BenchmarkSpec>();
    empty_matches_default::<ComfyUiConfig>();
    empty_matches_default::<VllmOmniConfig>();
    empty_matches_default::<CacheFlashLoaderSpec>();
}

fn model(spec: serde_json::Value) -> ModelSpec {
    from_json(spec)
}

#[test]
fn idle_timeout_defaults_to_five_minutes() {
    assert_eq!(defaults::IDLE_TIMEOUT, Duration::from_secs(300));
    assert_eq!(
        ServerlessSpec::default().idle_timeout(),
        Duration::from_secs(300)
    );
    let llm = model(json!({"backend": "vllm", "source": "HF://org/m"}));
    assert_eq!(llm.idle_timeout(), Duration::from_secs(300));
    let llm = model(json!({"backend": "vllm", "source": "HF://org/m", "serverless": {}}));
    assert_eq!(llm.idle_timeout(), Duration::from_secs(300));
    // Image backends wait longer unless told otherwise.
    let image = model(json!({"backend": "comfyui", "source": "HF://org/m"}));
    assert_eq!(image.idle_timeout(), Duration::from_secs(600));
    let explicit =
        model(json!({"backend": "comfyui", "source": "x", "serverless": {"idleTimeout": "1m30s"}}));
    assert_eq!(explicit.idle_timeout(), Duration::from_secs(90));
    // Unknown backends fall back to the spec default.
    assert_eq!(
        model(json!({"backend": "tgi", "source": "x"})).idle_timeout(),
        Duration::from_secs(300)
    );
}

#[test]
fn serverless_defaults() {
    let spec = model(json!({"backend": "vllm", "source": "x"}));
    assert!(spec.is_serverless());
    assert_eq!(spec.min_replicas(), 0);
    assert_eq!(spec.cold_start_timeout(), Duration::from_secs(60));
    let warm = model(json!({"backend": "vllm", "source": "x", "serverless": {"minReplicas": 1}}));
    assert_eq!(warm.min_replicas(), 1);
    let always_on = model(
        json!({"backend": "vllm", "source": "x", "serverless": {"enabled": false, "minReplicas": 0}}),
    );
    assert!(!always_on.is_serverless());
    assert_eq!(always_on.min_replicas(), 1);
    // Durations serialize in a form Go's time.ParseDuration accepts.
    let serialized = serde_json::to_value(ServerlessSpec::default()).expect("serializes");
    assert_eq!(serialized["coldStartTimeout"], "60s");
}

#[test]
fn gpu_defaults() {
    let no_gpu = model(json!({"backend": "llamacpp", "source": "x"}));
    assert_eq!(no_gpu.gpu_vendor(), GpuVendor::Cpu);
    assert_eq!(no_gpu.gpu_count(), 0);
    assert_eq!(no_gpu.priority(), 100);
    assert!(!no_gpu.is_shared());

    let gpu = model(json!({"backend": "vllm", "source": "x", "gpu": {}}));
    assert_eq!(gpu.gpu_vendor(), GpuVendor::Auto);
    assert_eq!(gpu.gpu_count(), 1);
    assert_eq!(gpu.priority(), 100);
    assert_eq!(
        gpu.gpu.as_ref().map(GpuSpec::swap_cooldown),
        Some(Duration::from_secs(300))
    );

    let cpu = model(json!({"backend": "llamacpp", "source": "x", "gpu": {"vendor": "cpu"}}));
    assert_eq!(cpu.gpu_count(), 0);

    let shared = model(
        json!({"backend": "vllm", "source": "x", "gpu": {"shared": " rdna3 ", "priority": 10, "count": 2}}),
    );
    assert_eq!(shared.shared_group(), Some("rdna3"));
    assert_eq!(shared.priority(), 10);
    assert_eq!(shared.gpu_count(), 2);
    let blank = model(json!({"backend": "vllm", "source": "x", "gpu": {"shared": "  "}}));
    assert!(!blank.is_shared());
}

#[test]
fn cache_defaults() {
    let cache = CacheSpec::default();
    // No class: the cluster's default StorageClass binds the PVC.
    assert_eq!(cache.storage_class, None);
    assert_eq!(cache.size, "50Gi");
    assert_eq!(cache.host_path, "/var/lib/flexinfer/models");
    assert_eq!(cache.flash_loader_enabled(), None);
    let loader = FlashLoaderSpec::default();
    assert_eq!((loader.concurrency, loader.buffer_size_kb), (4, 4096));

    let exclusive = model(json!({"backend": "vllm", "source": "x"}));
    assert_eq!(exclusive.cache_strategy(), CacheStrategy::SharedPvc);
    let shared = model(json!({"backend": "vllm", "source": "x", "gpu": {"shared": "g"}}));
    assert_eq!(shared.cache_strategy(), CacheStrategy::Memory);
    let explicit = model(
        json!({"backend": "vllm", "source": "x", "gpu": {"shared": "g"}, "cache": {"strategy": "Local", "flashLoader": {"enabled": false}}}),
    );
    assert_eq!(explicit.cache_strategy(), CacheStrategy::Local);
    assert_eq!(
        explicit
            .cache
            .as_ref()
            .and_then(CacheSpec::flash_loader_enabled),
        Some(false)
    );
}

#[test]
fn kv_cache_and_litellm_defaults() {
    let kv = KvCacheSpec::default();
    assert_eq!(kv.pressure_policy, KvCachePressurePolicy::Observe);
    assert_eq!(kv.high_watermark(), 0.85);
    assert_eq!(kv.low_watermark(), 0.60);
    assert_eq!(kv.reconfigure_cooldown(), Duration::from_secs(300));

    assert!(LiteLlmSpec::default().enabled);
    let parked = model(json!({"backend": "vllm", "source": "x", "litellm": {"enabled": false}}));
    assert!(parked.is_parked());
    assert!(!model(json!({"backend": "vllm", "source": "x", "litellm": {}})).is_parked());
}

#[test]
fn backend_model_name_and_token_limits() {
    let spec = model(json!({
        "backend": "vllm",
        "source": "HF://org/m",
        "config": {"maxModelLen": 8192, "maxOutputTokens": 4096, "maxInputTokens": 100000},
    }));
    assert_eq!(spec.backend_model_name(), "org/m");
    assert_eq!(spec.context_window(), Some(8192));
    assert_eq!(spec.max_input_tokens(), Some(8192));
    assert_eq!(spec.max_output_tokens(), Some(4096));
    let served = model(
        json!({"backend": "vllm", "source": "pvc://claim/qwen", "config": {"servedModelName": "qwen"}}),
    );
    assert_eq!(served.backend_model_name(), "qwen");
    let bare = model(json!({"backend": "ollama", "source": "ollama://llama3:8b"}));
    assert_eq!(bare.backend_model_name(), "llama3:8b");
    assert_eq!(bare.context_window(), None);
    assert_eq!(bare.max_output_tokens(), None);
}

#[test]
fn client_aliases_skip_blanks_duplicates_and_the_name() {
    let spec = model(json!({
        "backend": "vllm",
        "source": "x",
        "litellm": {"servedModelName": "qwen", "aliases": ["qwen", " q ", "", "m", "q"]},
    }));
    assert_eq!(spec.client_aliases("m"), ["qwen", "q"]);
    assert_eq!(spec.served_model_name("m"), "qwen");
    assert_eq!(
        model(json!({"backend": "vllm", "source": "x"})).served_model_name("m"),
        "m"
    );
}

#[test]
fn gpu_group_policy_defaults() {
    let spec: GPUGroupSpec =
        from_json(json!({"models": [{"name": "a"}, {"name": "b", "priority": 7}]}));
    let policy = &spec.anti_thrashing;
    assert!(policy.enabled);
    assert_eq!(policy.minimum_run_duration(), Duration::from_secs(30));
    assert_eq!(policy.cooldown_after_preemption(), Duration::from_secs(60));
    assert_eq!(policy.request_queue_threshold, 3);
    assert_eq!(policy.hysteresis_window(), Duration::from_secs(10));
    assert_eq!(spec.scaling_policy.strategy, ShareStrategy::Exclusive);
    assert_eq!(
        spec.scaling_policy.preemption_policy,
        PreemptionPolicy::Graceful
    );
    assert_eq!(spec.scaling_policy.drain_timeout(), Duration::from_secs(60));
    assert_eq!(spec.models[0].priority, 100);
    assert_eq!(spec.models[1].priority, 7);
    assert!(!spec.auto_cache_models);

    // Explicit zero and false survive (hysteresis 0 disables the window).
    let spec: GPUGroupSpec = from_json(json!({
        "models": [{"name": "a"}],
        "antiThrashing": {"enabled": false, "hysteresisWindowSeconds": 0},
    }));
    assert!(!spec.anti_thrashing.enabled);
    assert_eq!(spec.anti_thrashing.hysteresis_window(), Duration::ZERO);
    assert_eq!(spec.anti_thrashing.minimum_run_duration_seconds, 30);
    let round_trip = serde_json::to_value(&spec.anti_thrashing).expect("serializes");
    assert_eq!(round_trip["enabled"], false);
    assert_eq!(round_trip["hysteresisWindowSeconds"], 0);
}

#[test]
fn model_phase_strings_match_the_wire_format() {
    use flexinfer_crds::v1alpha2::ModelPhase;
    for phase in [
        ModelPhase::Pending,
        ModelPhase::Loading,
        ModelPhase::Ready,
        ModelPhase::Idle,
        ModelPhase::Failed,
        ModelPhase::Preempted,
    ] {
        assert_eq!(
            serde_json::to_value(phase).expect("serializes"),
            phase.as_str()
        );
        assert_eq!(phase.to_string(), phase.as_str());
    }
}
