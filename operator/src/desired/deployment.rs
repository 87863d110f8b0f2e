//! The model's Deployment: backend container from the catalog, GPU
//! resources per vendor, tolerations, cache volume, flash-loader init
//! container and scheduler hints.

use std::collections::BTreeMap;

use flexinfer_crds::backend::{Probe as CatalogProbe, ProbeAction};
use flexinfer_crds::gpu::Vendor;
use flexinfer_crds::labels;
use flexinfer_crds::v1alpha2::{CacheStrategy, ModelSource};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction, HostPathVolumeSource,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::service::PORT_NAME;
use super::{routing_annotations, ModelPlan, MODELS_MOUNT};

/// Name of the backend container.
pub const CONTAINER: &str = "model";
/// Name of the flash-loader init container.
pub const FLASH_LOADER: &str = "flash-loader";
/// Volume holding the model files.
pub const MODEL_VOLUME: &str = "model";
/// tmpfs volume the flash loader fills.
pub const FLASH_VOLUME: &str = "flash-tmpfs";
/// Supplemental groups of ROCm pods (`video`, `render`).
pub const AMD_SUPPLEMENTAL_GROUPS: [i64; 2] = [109, 992];

/// The desired Deployment of a model.
pub fn deployment(plan: &ModelPlan<'_>) -> Deployment {
    let mut meta = plan.meta(plan.child_name());
    let mut annotations = routing_annotations(plan);
    annotations.insert(
        labels::LITELLM_CAPABILITIES.to_owned(),
        capabilities_json(plan),
    );
    meta.annotations = Some(annotations);
    Deployment {
        metadata: meta,
        spec: Some(DeploymentSpec {
            replicas: Some(plan.replicas),
            selector: LabelSelector {
                match_labels: Some(plan.selector_labels()),
                ..Default::default()
            },
            strategy: strategy(plan),
            template: pod_template(plan),
            ..Default::default()
        }),
        status: None,
    }
}

/// How the Deployment rolls: a pod holding a volume only one node can
/// attach is stopped before its successor starts (`Recreate`), or the new
/// pod would wait forever for the volume (Multi-Attach); GPU pods roll one
/// at a time without a surge pod, which would need a GPU of its own; other
/// pods roll as Kubernetes defaults.
fn strategy(plan: &ModelPlan<'_>) -> Option<DeploymentStrategy> {
    if plan.mounts_single_node_volume() {
        return Some(DeploymentStrategy {
            type_: Some("Recreate".to_owned()),
            rolling_update: None,
        });
    }
    (plan.gpu_count() > 0).then(|| DeploymentStrategy {
        type_: Some("RollingUpdate".to_owned()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(0)),
            max_unavailable: Some(IntOrString::Int(1)),
        }),
    })
}

fn capabilities_json(plan: &ModelPlan<'_>) -> String {
    let spec = plan.spec;
    let name = plan.backend.name;
    let mut tool = matches!(name, "vllm" | "ollama");
    let mut vision = false;
    if name == "llamacpp" {
        tool = spec.config_bool("jinja").unwrap_or(false);
        vision = spec.config_str("mmproj").is_some_and(|m| !m.is_empty());
    }
    let mut image = plan.backend.image_generation;
    if let Some(caps) = &spec.capabilities {
        tool = caps.tool_calling.unwrap_or(tool);
        vision = caps.vision.unwrap_or(vision);
        image = caps.image_generation.unwrap_or(image);
    }
    serde_json::json!({"toolCalling": tool, "vision": vision, "imageGeneration": image}).to_string()
}

fn pod_template(plan: &ModelPlan<'_>) -> PodTemplateSpec {
    let spec = plan.spec;
    let mut pod_annotations = BTreeMap::from([
        (labels::MODEL.to_owned(), plan.name.clone()),
        (labels::BACKEND.to_owned(), plan.backend.name.to_owned()),
    ]);
    if let Some(vram) = spec.vram_estimate_mb() {
        pod_annotations.insert(labels::VRAM_ESTIMATE_MB.to_owned(), vram.to_string());
    }
    let gpu = plan.gpu_count() > 0;
    let tolerations = plan.tolerations();
    let node_selector = plan.node_selector();
    let (volumes, init) = volumes_and_init(plan);
    let security_context = (plan.vendor == Vendor::Amd && gpu).then(|| PodSecurityContext {
        supplemental_groups: Some(AMD_SUPPLEMENTAL_GROUPS.to_vec()),
        ..Default::default()
    });
    let mut template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(plan.labels()),
            annotations: Some(pod_annotations),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![container(plan)],
            init_containers: init.map(|c| vec![c]),
            volumes: (!volumes.is_empty()).then_some(volumes),
            tolerations: (!tolerations.is_empty()).then_some(tolerations),
            node_selector: (!node_selector.is_empty()).then_some(node_selector),
            scheduler_name: plan.settings.scheduler_name.clone(),
            runtime_class_name: plan.runtime_class_name(),
            security_context,
            priority_class_name: plan
                .annotations
                .get(labels::SERVING_PRIORITY_CLASS)
                .filter(|v| !v.is_empty())
                .cloned(),
            automount_service_account_token: Some(false),
            restart_policy: Some("Always".to_owned()),
            ..Default::default()
        }),
    };
    if let Some(pod) = template.spec.as_mut() {
        super::security::harden(pod, spec.security_context.as_ref());
    }
    template
}

fn container(plan: &ModelPlan<'_>) -> Container {
    let spec = plan.spec;
    let model_path = plan.model_path();
    let ctx = plan.arg_context(&model_path);
    let mut args = plan.backend.render_args(ctx);
    args.extend(super::args::config_args(plan));
    args.extend(spec.args.iter().cloned());
    let mut env: Vec<EnvVar> = plan
        .backend
        .render_env(ctx)
        .into_iter()
        .map(|(name, value)| env_var(&name, &value))
        .collect();
    if plan.vendor == Vendor::Amd {
        for (name, value) in flexinfer_crds::backend::rocm_env(&plan.arch) {
            env.push(env_var(name, &value));
        }
    }
    if matches!(plan.source(), ModelSource::HuggingFace { .. }) && plan.needs_volume() {
        let hf = format!("{MODELS_MOUNT}/.cache/huggingface");
        env.push(env_var("HF_HOME", &hf));
        env.push(env_var("HF_HUB_CACHE", &format!("{hf}/hub")));
        env.push(env_var("HUGGINGFACE_HUB_CACHE", &format!("{hf}/hub")));
        env.push(env_var("TRANSFORMERS_CACHE", &format!("{hf}/transformers")));
    }
    if plan.backend.supports_lora && super::args::lora_enabled(plan) {
        env.push(env_var("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True"));
    }
    env.extend(spec.env.iter().cloned());
    let mut mounts = Vec::new();
    if plan.needs_volume() {
        let volume = if plan.flash_loader_enabled() {
            FLASH_VOLUME
        } else {
            MODEL_VOLUME
        };
        mounts.push(VolumeMount {
            name: volume.to_owned(),
            mount_path: MODELS_MOUNT.to_owned(),
            ..Default::default()
        });
    }
    mounts.push(VolumeMount {
        name: "shm".to_owned(),
        mount_path: "/dev/shm".to_owned(),
        ..Default::default()
    });
    let port = plan.backend.port;
    Container {
        name: CONTAINER.to_owned(),
        image: Some(plan.image()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: (!plan.backend.command.is_empty()).then(|| {
            plan.backend
                .command
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
        }),
        args: (!args.is_empty()).then_some(args),
        env: (!env.is_empty()).then_some(env),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.to_owned()),
            container_port: port,
            protocol: Some("TCP".to_owned()),
            ..Default::default()
        }]),
        readiness_probe: Some(probe(&plan.backend.readiness, port)),
        startup_probe: plan.backend.startup.as_ref().map(|p| probe(p, port)),
        liveness_probe: plan.backend.liveness.as_ref().map(|p| probe(p, port)),
        resources: resources(plan),
        volume_mounts: Some(mounts),
        termination_message_path: Some("/dev/termination-log".to_owned()),
        ..Default::default()
    }
}

fn resources(plan: &ModelPlan<'_>) -> Option<ResourceRequirements> {
    let mut res = plan.spec.resources.clone().unwrap_or_default();
    let count = plan.gpu_count();
    if let Some(resource) = plan.vendor.resource_name().filter(|_| count > 0) {
        res.limits
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.to_owned(), Quantity(count.to_string()));
    }
    (res != ResourceRequirements::default()).then_some(res)
}

/// Volumes of the pod and the flash-loader init container, if enabled.
fn volumes_and_init(plan: &ModelPlan<'_>) -> (Vec<Volume>, Option<Container>) {
    let mut volumes = Vec::new();
    if plan.needs_volume() {
        volumes.push(model_volume(plan));
    }
    volumes.push(Volume {
        name: "shm".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_owned()),
            size_limit: Some(Quantity(plan.settings.shm_size_limit.clone())),
        }),
        ..Default::default()
    });
    if !plan.flash_loader_enabled() {
        return (volumes, None);
    }
    let fl = plan
        .spec
        .cache
        .as_ref()
        .and_then(|c| c.flash_loader.clone())
        .unwrap_or_default();
    let tmpfs = if plan.spec.is_shared() {
        Volume {
            name: super::deployment::FLASH_VOLUME.to_owned(),
            host_path: Some(HostPathVolumeSource {
                path: plan.shared_tmpfs_path(),
                type_: Some("DirectoryOrCreate".to_owned()),
            }),
            ..Default::default()
        }
    } else {
        Volume {
            name: FLASH_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: fl.tmpfs_size_limit.clone().map(Quantity),
            }),
            ..Default::default()
        }
    };
    volumes.push(tmpfs);
    let mut env = vec![
        env_var("FLASH_SRC", "/src"),
        env_var("FLASH_DST", MODELS_MOUNT),
        env_var("FLASH_CONCURRENCY", &fl.concurrency.to_string()),
        env_var("FLASH_BUFFER_KB", &fl.buffer_size_kb.to_string()),
        env_var(
            "FLASH_VERIFY",
            if fl.verify_integrity.unwrap_or(false) {
                "true"
            } else {
                "false"
            },
        ),
    ];
    if plan.spec.config_str("useFp16") == Some("1") {
        env.push(env_var("FLASH_VARIANT", "fp16"));
    }
    let init = Container {
        name: FLASH_LOADER.to_owned(),
        image: Some(
            fl.image
                .clone()
                .filter(|i| !i.is_empty())
                .unwrap_or_else(|| plan.settings.flash_loader_image.clone()),
        ),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        env: Some(env),
        volume_mounts: Some(vec![
            VolumeMount {
                name: MODEL_VOLUME.to_owned(),
                mount_path: "/src".to_owned(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: FLASH_VOLUME.to_owned(),
                mount_path: MODELS_MOUNT.to_owned(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    (volumes, Some(init))
}

fn model_volume(plan: &ModelPlan<'_>) -> Volume {
    let mut volume = Volume {
        name: MODEL_VOLUME.to_owned(),
        ..Default::default()
    };
    let pvc = |claim: String| PersistentVolumeClaimVolumeSource {
        claim_name: claim,
        read_only: None,
    };
    if let ModelSource::Pvc { claim, .. } = plan.source() {
        volume.persistent_volume_claim = Some(pvc(claim));
        return volume;
    }
    match plan.cache_strategy() {
        CacheStrategy::SharedPvc => {
            volume.persistent_volume_claim = Some(pvc(plan.cache_pvc_name()))
        }
        CacheStrategy::Memory => {
            volume.empty_dir = Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: None,
            })
        }
        CacheStrategy::Local => {
            let base = plan
                .spec
                .cache
                .as_ref()
                .map(|c| c.host_path.clone())
                .unwrap_or_else(|| flexinfer_crds::defaults::CACHE_HOST_PATH.to_owned());
            volume.host_path = Some(HostPathVolumeSource {
                path: format!("{base}/{}/{}", plan.namespace, plan.name),
                type_: Some("DirectoryOrCreate".to_owned()),
            });
        }
        CacheStrategy::None => volume.empty_dir = Some(EmptyDirVolumeSource::default()),
    }
    volume
}

/// A Kubernetes probe from a catalog probe against `port`.
pub fn probe(p: &CatalogProbe, port: i32) -> Probe {
    let mut out = Probe {
        initial_delay_seconds: Some(p.initial_delay_seconds),
        period_seconds: Some(p.period_seconds),
        timeout_seconds: Some(p.timeout_seconds),
        failure_threshold: Some(p.failure_threshold),
        ..Default::default()
    };
    match p.action {
        ProbeAction::Http(path) => {
            out.http_get = Some(HTTPGetAction {
                path: Some(path.to_owned()),
                port: IntOrString::Int(port),
                ..Default::default()
            })
        }
        ProbeAction::Tcp => {
            out.tcp_socket = Some(TCPSocketAction {
                port: IntOrString::Int(port),
                ..Default::default()
            })
        }
    }
    out
}

pub(crate) fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..Default::default()
    }
}
