//! Cache objects of a model: the cache PVC, the prefetch Job that fills it,
//! the quantization Job, and the tmpfs cleanup Job run on deletion.

use std::collections::BTreeMap;

use flexinfer_crds::v1alpha2::{CacheStrategy, ModelSource};
use flexinfer_crds::{labels, names};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Container, HostPathVolumeSource, NodeAffinity, NodeSelectorRequirement,
    NodeSelectorTerm, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, PreferredSchedulingTerm, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::deployment::env_var;
use super::download::{download_job, DownloadSource, HfDownload};
use super::{oci, ModelPlan, CLEANUP_IMAGE, MODELS_MOUNT};

/// Container name of quantization Jobs (its termination message carries
/// the result).
pub const QUANTIZER: &str = "quantizer";

/// Name of the prefetch Job.
pub fn prefetch_job_name(model: &str) -> String {
    names::child_name(model, names::PREFETCH_JOB_SUFFIX)
}

/// Name of the quantization Job.
pub fn quantize_job_name(model: &str) -> String {
    names::child_name(model, names::QUANTIZE_JOB_SUFFIX)
}

/// Name of the tmpfs cleanup Job.
pub fn cleanup_job_name(model: &str) -> String {
    names::child_name(model, names::CLEANUP_JOB_SUFFIX)
}

/// The cache PVC, when the model keeps its weights on one the operator
/// creates (SharedPVC strategy without an existing `pvcName`).
pub fn cache_pvc(plan: &ModelPlan<'_>) -> Option<PersistentVolumeClaim> {
    let explicit = plan
        .spec
        .cache
        .as_ref()
        .and_then(|c| c.pvc_name.as_ref())
        .is_some_and(|n| !n.is_empty());
    if !plan.needs_volume()
        || explicit
        || plan.cache_strategy() != CacheStrategy::SharedPvc
        || matches!(plan.source(), ModelSource::Pvc { .. })
    {
        return None;
    }
    let cache = plan.spec.cache.clone().unwrap_or_default();
    let class = cache
        .storage_class
        .or_else(|| plan.settings.cache_storage_class.clone())
        .filter(|c| !c.is_empty());
    Some(super::download::cache_pvc(
        plan.meta(plan.cache_pvc_name()),
        &plan.cache_access_mode(),
        class,
        cache.size,
    ))
}

fn job_meta(plan: &ModelPlan<'_>, name: String, kind: &str) -> ObjectMeta {
    let mut meta = plan.meta(name);
    meta.annotations = Some(BTreeMap::from([
        (labels::CACHE_SOURCE.to_owned(), plan.spec.source.clone()),
        (labels::CACHE_KIND.to_owned(), kind.to_owned()),
        (labels::CACHE_PVC.to_owned(), plan.cache_pvc_name()),
        (labels::CACHE_DEST.to_owned(), plan.cache_dest()),
    ]));
    meta
}

fn cache_volume(plan: &ModelPlan<'_>) -> Volume {
    Volume {
        name: "model".to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: plan.cache_pvc_name(),
            read_only: None,
        }),
        ..Default::default()
    }
}

fn cache_mount() -> VolumeMount {
    VolumeMount {
        name: "model".to_owned(),
        mount_path: MODELS_MOUNT.to_owned(),
        ..Default::default()
    }
}

/// The Job filling the cache PVC: a Hugging Face download, or
/// `flexinfer-flashload pull` for `oci://` sources (credentials from the
/// `kubernetes.io/dockerconfigjson` Secret named by
/// `spec.config.ociRegistrySecretRef`).
pub fn prefetch_job(plan: &ModelPlan<'_>) -> Option<Job> {
    if !plan.needs_prefetch() {
        return None;
    }
    let source = plan.source();
    let download = match &source {
        ModelSource::HuggingFace { repo } => DownloadSource::HuggingFace(hf_download(plan, repo)),
        ModelSource::Oci { reference } => DownloadSource::Oci {
            reference,
            flash_loader_image: &plan.settings.flash_loader_image,
            secret: plan.spec.config_str(oci::SECRET_CONFIG_KEY),
        },
        _ => return None,
    };
    let mut job = download_job(
        job_meta(
            plan,
            prefetch_job_name(&plan.name),
            labels::CACHE_KIND_PREFETCH,
        ),
        &download,
        &plan.cache_dest(),
        cache_volume(plan),
        cache_mount(),
    );
    if let Some(pod) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        place_with_model(pod, plan);
        super::security::harden(pod, None);
    }
    Some(job)
}

/// Places a cache Job's pod where the model's pods go: the same node
/// selector and tolerations and, for GPU models, a preference for nodes of
/// the model's GPU vendor. A volume that binds on first use
/// (`WaitForFirstConsumer`) then binds where the model can run, not on a
/// node or zone its pods can never reach.
fn place_with_model(pod: &mut PodSpec, plan: &ModelPlan<'_>) {
    let selector = plan.node_selector();
    pod.node_selector = (!selector.is_empty()).then_some(selector);
    let tolerations = plan.tolerations();
    pod.tolerations = (!tolerations.is_empty()).then_some(tolerations);
    if plan.gpu_count() > 0 {
        pod.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    PreferredSchedulingTerm {
                        weight: 100,
                        preference: NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: labels::NODE_GPU_VENDOR.to_owned(),
                                operator: "In".to_owned(),
                                values: Some(vec![plan.vendor.as_str().to_owned()]),
                            }]),
                            match_fields: None,
                        },
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
}

/// What a Hugging Face prefetch downloads: `config.hfAllowPatterns` plus
/// the `ggufFile` and `mmproj` files, at `config.hfRevision`.
fn hf_download<'p>(plan: &'p ModelPlan<'_>, repo: &'p str) -> HfDownload<'p> {
    let mut allow: Vec<String> = plan
        .spec
        .config_value("hfAllowPatterns")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for key in ["ggufFile", "mmproj"] {
        if let Some(file) = plan.spec.config_str(key).filter(|f| !f.is_empty()) {
            allow.push(file.to_owned());
        }
    }
    HfDownload {
        repo,
        allow_patterns: allow,
        revision: plan.spec.config_str("hfRevision"),
        token_secret: None,
        hf_home: Some(format!("{MODELS_MOUNT}/.cache/huggingface")),
        memory: ("1Gi", "8Gi"),
    }
}

/// The Job quantizing the cached model (`spec.quantize`). With
/// `quantize.useGPU` it requests one GPU of the model's vendor and
/// tolerates `dedicated=gpu:NoSchedule`.
pub fn quantize_job(plan: &ModelPlan<'_>) -> Option<Job> {
    let q = plan.spec.quantize.as_ref()?;
    if !plan.needs_volume() {
        return None;
    }
    let format = serde_json::to_value(q.format)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let use_gpu = q.use_gpu.unwrap_or(false);
    let mut env = vec![
        env_var("SOURCE_DIR", &plan.cache_dest()),
        env_var("OUTPUT_DIR", &plan.model_path()),
        env_var("QUANT_FORMAT", &format),
        env_var("QUANT_BITS", &q.bits.unwrap_or(4).to_string()),
        env_var("QUANT_GROUP_SIZE", &q.group_size.unwrap_or(128).to_string()),
        env_var("USE_GPU", if use_gpu { "true" } else { "false" }),
    ];
    if let Some(t) = q.gguf_type.as_ref().filter(|t| !t.is_empty()) {
        env.push(env_var("GGUF_TYPE", t));
    }
    let mut limits = BTreeMap::new();
    let mut tolerations = None;
    if use_gpu {
        if let Some(resource) = plan
            .vendor
            .resource_name()
            .or(Some(flexinfer_crds::gpu::NVIDIA_GPU_RESOURCE))
        {
            limits.insert(resource.to_owned(), Quantity("1".to_owned()));
        }
        tolerations = Some(plan.settings.gpu_tolerations.clone()).filter(|t| !t.is_empty());
    }
    let max_gb = q.max_memory_gb.unwrap_or(
        if q.format == flexinfer_crds::v1alpha2::QuantizationFormat::Gguf {
            flexinfer_crds::defaults::QUANTIZE_MAX_MEMORY_GB_GGUF
        } else {
            flexinfer_crds::defaults::QUANTIZE_MAX_MEMORY_GB
        },
    );
    limits.insert("memory".to_owned(), Quantity(format!("{max_gb}Gi")));
    Some(Job {
        metadata: job_meta(plan, quantize_job_name(&plan.name), "quantize"),
        spec: Some(JobSpec {
            backoff_limit: Some(1),
            active_deadline_seconds: Some(
                q.timeout_seconds
                    .unwrap_or(flexinfer_crds::defaults::QUANTIZE_TIMEOUT_SECONDS),
            ),
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_owned()),
                    containers: vec![Container {
                        name: QUANTIZER.to_owned(),
                        image: Some(plan.settings.quantizer_image.clone()),
                        env: Some(env),
                        resources: Some(ResourceRequirements {
                            limits: Some(limits),
                            ..Default::default()
                        }),
                        volume_mounts: Some(vec![cache_mount()]),
                        termination_message_path: Some("/dev/termination-log".to_owned()),
                        ..Default::default()
                    }],
                    volumes: Some(vec![cache_volume(plan)]),
                    node_selector: (!q.node_selector.is_empty()).then(|| q.node_selector.clone()),
                    tolerations,
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// The Job removing a shared model's tmpfs from its node after deletion;
/// `None` unless the model is shared and pinned by a nodeSelector. It has
/// no owner (the Model is going away) and deletes itself after 120 s.
pub fn tmpfs_cleanup_job(plan: &ModelPlan<'_>) -> Option<Job> {
    if !plan.spec.is_shared() || plan.spec.node_selector.is_empty() {
        return None;
    }
    let mut meta = plan.meta(cleanup_job_name(&plan.name));
    meta.owner_references = None;
    Some(Job {
        metadata: meta,
        spec: Some(JobSpec {
            backoff_limit: Some(1),
            ttl_seconds_after_finished: Some(120),
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_owned()),
                    node_selector: Some(plan.spec.node_selector.clone()),
                    tolerations: Some(plan.settings.gpu_tolerations.clone())
                        .filter(|t| !t.is_empty()),
                    containers: vec![Container {
                        name: "cleanup".to_owned(),
                        image: Some(CLEANUP_IMAGE.to_owned()),
                        command: Some(vec![
                            "rm".to_owned(),
                            "-rf".to_owned(),
                            plan.shared_tmpfs_path(),
                        ]),
                        volume_mounts: Some(vec![VolumeMount {
                            name: "shm".to_owned(),
                            mount_path: "/dev/shm/flexinfer".to_owned(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }],
                    volumes: Some(vec![Volume {
                        name: "shm".to_owned(),
                        host_path: Some(HostPathVolumeSource {
                            path: "/dev/shm/flexinfer".to_owned(),
                            type_: Some("DirectoryOrCreate".to_owned()),
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}
