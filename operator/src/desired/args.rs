//! Backend args driven by `spec.config` and by what the gateway expects:
//! the name the backend serves must equal `ModelSpec::backend_model_name`,
//! the name the gateway writes into request bodies.

use flexinfer_crds::backend::GPU_LAYERS_ALL;
use flexinfer_crds::gpu::Vendor;

use super::ModelPlan;

fn push_str(args: &mut Vec<String>, flag: &str, value: Option<&str>) {
    if let Some(v) = value.filter(|v| !v.is_empty()) {
        args.push(flag.to_owned());
        args.push(v.to_owned());
    }
}

fn push_num(args: &mut Vec<String>, flag: &str, value: Option<i64>) {
    if let Some(v) = value {
        args.push(flag.to_owned());
        args.push(v.to_string());
    }
}

/// A config value as an argument string (strings as they are, numbers
/// formatted).
fn config_text(plan: &ModelPlan<'_>, key: &str) -> Option<String> {
    match plan.spec.config_value(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Args appended after the catalog's default args.
pub fn config_args(plan: &ModelPlan<'_>) -> Vec<String> {
    let spec = plan.spec;
    let served = spec.backend_model_name();
    let mut args = Vec::new();
    match plan.backend.name {
        "vllm" | "vllm-omni" => {
            push_str(&mut args, "--served-model-name", Some(&served));
            push_num(&mut args, "--max-model-len", spec.config_i64("maxModelLen"));
            push_str(
                &mut args,
                "--gpu-memory-utilization",
                config_text(plan, "gpuMemoryUtilization").as_deref(),
            );
            push_str(&mut args, "--dtype", spec.config_str("dtype"));
            push_num(&mut args, "--max-num-seqs", spec.config_i64("maxNumSeqs"));
            push_num(
                &mut args,
                "--tensor-parallel-size",
                spec.config_i64("tensorParallelSize"),
            );
            push_str(&mut args, "--quantization", spec.config_str("quantization"));
            if spec.config_bool("trustRemoteCode") == Some(true) {
                args.push("--trust-remote-code".to_owned());
            }
            if spec.config_bool("enforceEager") == Some(true) {
                args.push("--enforce-eager".to_owned());
            }
            if let Some(kv) = &spec.kv_cache {
                push_num(&mut args, "--block-size", kv.max_block_size.map(i64::from));
                push_str(
                    &mut args,
                    "--swap-space",
                    kv.swap_space.as_ref().map(|q| q.0.as_str()),
                );
            }
            if plan.backend.supports_lora && lora_enabled(plan) {
                args.push("--enable-lora".to_owned());
                push_num(
                    &mut args,
                    "--max-loras",
                    Some(spec.config_i64("maxLoras").unwrap_or(4).max(1)),
                );
            }
        }
        "llamacpp" => {
            push_str(&mut args, "--alias", Some(&served));
            push_num(&mut args, "--ctx-size", spec.config_i64("contextSize"));
            let layers = if plan.vendor == Vendor::Cpu || plan.gpu_count() == 0 {
                0
            } else {
                spec.config_i64("nGPULayers")
                    .unwrap_or(i64::from(GPU_LAYERS_ALL))
            };
            push_num(&mut args, "--n-gpu-layers", Some(layers));
            push_num(&mut args, "--threads", spec.config_i64("threads"));
            if spec.config_bool("jinja") == Some(true) {
                args.push("--jinja".to_owned());
            }
            push_str(&mut args, "--mmproj", spec.config_str("mmproj"));
            if spec.config_bool("embedding") == Some(true) {
                args.push("--embeddings".to_owned());
            }
            if spec.config_bool("metrics") == Some(true) {
                args.push("--metrics".to_owned());
            }
        }
        _ => {}
    }
    args
}

/// Whether the model serves LoRA adapters (`config.enableLora: true`).
pub fn lora_enabled(plan: &ModelPlan<'_>) -> bool {
    plan.spec.config_bool("enableLora") == Some(true)
}
