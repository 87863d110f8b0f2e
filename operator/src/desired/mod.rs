//! Desired objects of a model: pure functions from a resolved [`ModelPlan`]
//! to the Deployment, Service, PVC and Jobs the operator applies.
//!
//! Nothing here performs I/O or reads the clock; the controllers resolve
//! placement, replicas and cache readiness first and the builders only
//! render them, so every object is unit-tested as JSON.

pub mod args;
pub mod cache;
pub mod deployment;
pub mod download;
pub mod model_cache;
pub mod oci;
pub mod security;
pub mod service;

use std::collections::BTreeMap;

use flexinfer_crds::backend::{ArgContext, Backend};
use flexinfer_crds::gpu::Vendor;
use flexinfer_crds::labels;
use flexinfer_crds::v1alpha2::{CacheStrategy, Model, ModelSource, ModelSpec, QuantizationFormat};
use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

/// The owner reference of an object the operator makes for `owner`: its
/// controller, and blocking the owner's foreground deletion until the
/// object is gone (`kubectl delete --cascade=foreground` then waits for
/// Deployments, Services and Jobs, as with controller-runtime's
/// `SetControllerReference`).
pub fn controller_owner<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let mut reference = owner.controller_owner_ref(&())?;
    reference.block_owner_deletion = Some(true);
    Some(reference)
}

/// Mount path of the model volume inside backend containers.
pub const MODELS_MOUNT: &str = "/models";
/// Default image of the flash-loader init container.
pub const DEFAULT_FLASH_LOADER_IMAGE: &str = "registry.harbor.lan/flexinfer/flash-loader:latest";
/// Default image of quantization Jobs.
pub const DEFAULT_QUANTIZER_IMAGE: &str = "registry.harbor.lan/flexinfer/quantizer:latest";
/// Default size limit of the `/dev/shm` volume of model pods.
pub const DEFAULT_SHM_SIZE_LIMIT: &str = "8Gi";
/// Image of the tmpfs cleanup Job.
pub const CLEANUP_IMAGE: &str = "busybox:1.37";
/// Annotation holding a digest of the applied desired object, so that an
/// unchanged object is never re-applied.
pub const APPLIED_HASH: &str = "flexinfer.ai/applied-hash";

/// Cluster-wide knobs of the builders (flags of the operator binary).
#[derive(Debug, Clone, PartialEq)]
pub struct BuildSettings {
    /// `schedulerName` of model pods (the FlexInfer scheduler extender's
    /// scheduler); `None` keeps the default scheduler.
    pub scheduler_name: Option<String>,
    /// Image of the flash-loader init container.
    pub flash_loader_image: String,
    /// Image of quantization Jobs.
    pub quantizer_image: String,
    /// Size limit of the `/dev/shm` volume.
    pub shm_size_limit: String,
    /// Image overrides of the backend catalog (`DEFAULT_VLLM_IMAGE`, ...).
    pub image_overrides: BTreeMap<String, String>,
    /// StorageClass of cache PVCs whose Model names none; `None` leaves
    /// `storageClassName` unset, so the cluster's default class binds.
    pub cache_storage_class: Option<String>,
    /// `runtimeClassName` of NVIDIA GPU pods whose Model names none;
    /// `None` sets none (the node's default runtime).
    pub nvidia_runtime_class: Option<String>,
    /// Tolerations of GPU model pods and of their cache Jobs.
    pub gpu_tolerations: Vec<Toleration>,
}

impl Default for BuildSettings {
    fn default() -> Self {
        Self {
            scheduler_name: None,
            flash_loader_image: DEFAULT_FLASH_LOADER_IMAGE.to_owned(),
            quantizer_image: DEFAULT_QUANTIZER_IMAGE.to_owned(),
            shm_size_limit: DEFAULT_SHM_SIZE_LIMIT.to_owned(),
            image_overrides: BTreeMap::new(),
            cache_storage_class: None,
            nvidia_runtime_class: None,
            gpu_tolerations: default_gpu_tolerations(),
        }
    }
}

/// The GPU-node tolerations model pods get by default: the FlexInfer
/// `dedicated=gpu:NoSchedule` taint and the device taints managed clusters
/// put on GPU nodes (`nvidia.com/gpu`, `amd.com/gpu`, any value,
/// NoSchedule).
pub fn default_gpu_tolerations() -> Vec<Toleration> {
    let exists = |key: &str| Toleration {
        key: Some(key.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some("NoSchedule".to_owned()),
        ..Default::default()
    };
    vec![
        gpu_toleration(),
        exists("nvidia.com/gpu"),
        exists("amd.com/gpu"),
    ]
}

/// Everything the builders need about one model, resolved by the
/// controller: placement, replicas and shared-group role.
#[derive(Debug, Clone)]
pub struct ModelPlan<'a> {
    /// Object name (Model or ModelDeployment).
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// The model's desired state (a ModelDeployment is converted first).
    pub spec: &'a ModelSpec,
    /// Annotations of the owning resource (`flexinfer.ai/serving-priority-class`).
    pub annotations: BTreeMap<String, String>,
    /// Controller owner reference put on every owned object.
    pub owner: Option<OwnerReference>,
    /// Catalog entry of the backend.
    pub backend: &'static Backend,
    /// Detected (or CPU) vendor.
    pub vendor: Vendor,
    /// Detected GPU architecture, empty when unknown or CPU.
    pub arch: String,
    /// Replicas to run.
    pub replicas: i32,
    /// For shared-group members: whether this one holds the GPU.
    pub shared_active: Option<bool>,
    /// Cluster-wide knobs.
    pub settings: &'a BuildSettings,
}

impl<'a> ModelPlan<'a> {
    /// A plan for a Model with defaults for placement (CPU when the model
    /// requests no GPU, NVIDIA otherwise) and one replica; the controller
    /// overrides what it resolved.
    pub fn for_model(
        model: &'a Model,
        backend: &'static Backend,
        settings: &'a BuildSettings,
    ) -> ModelPlan<'a> {
        let vendor = if model.spec.gpu_count() == 0 {
            Vendor::Cpu
        } else {
            Vendor::Nvidia
        };
        ModelPlan {
            name: model.name_any(),
            namespace: model.namespace().unwrap_or_else(|| "default".into()),
            spec: &model.spec,
            annotations: model.annotations().clone(),
            owner: controller_owner(model),
            backend,
            vendor,
            arch: String::new(),
            replicas: 1,
            shared_active: None,
            settings,
        }
    }

    /// GPUs requested per pod.
    pub fn gpu_count(&self) -> i32 {
        if self.vendor == Vendor::Cpu {
            0
        } else {
            self.spec.gpu_count()
        }
    }

    /// Labels of every owned object: the selector labels plus the shared
    /// group.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut out = self.pod_labels();
        if let Some(group) = self.spec.shared_group() {
            out.insert(labels::GPU_GROUP.to_owned(), group.to_owned());
        }
        out
    }

    /// Labels of the model's pods and owned objects (identity and
    /// backend).
    pub fn pod_labels(&self) -> BTreeMap<String, String> {
        labels::selector_labels(&self.name, self.backend.name)
    }

    /// Labels selecting the model's pods: identity only, so that the
    /// Deployment's immutable selector survives a change of backend.
    pub fn selector_labels(&self) -> BTreeMap<String, String> {
        labels::identity_labels(&self.name)
    }

    /// Name of the Deployment and Service: the model's name when it is a
    /// valid Service name, else a derived one
    /// ([`flexinfer_crds::names::service_name`]).
    pub fn child_name(&self) -> String {
        flexinfer_crds::names::service_name(&self.name)
    }

    /// Metadata of an owned object called `name`.
    pub fn meta(&self, name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels()),
            owner_references: self.owner.clone().map(|o| vec![o]),
            ..Default::default()
        }
    }

    /// `runtimeClassName` of the pods: the Model's own, else the
    /// operator's NVIDIA runtime class for NVIDIA GPU pods.
    pub fn runtime_class_name(&self) -> Option<String> {
        if let Some(own) = self
            .spec
            .runtime_class_name
            .as_ref()
            .filter(|c| !c.is_empty())
        {
            return Some(own.clone());
        }
        (self.vendor == Vendor::Nvidia && self.gpu_count() > 0)
            .then(|| self.settings.nvidia_runtime_class.clone())
            .flatten()
            .filter(|c| !c.is_empty())
    }

    /// Tolerations of the model's pods and cache Jobs: the Model's own,
    /// then the operator's GPU tolerations for GPU models.
    pub fn tolerations(&self) -> Vec<Toleration> {
        let mut out = self.spec.tolerations.clone();
        if self.gpu_count() > 0 {
            for t in &self.settings.gpu_tolerations {
                if !out.contains(t) {
                    out.push(t.clone());
                }
            }
        }
        out
    }

    /// Node selector of the model's pods and cache Jobs: the Model's own
    /// plus the GPU architecture it asks for.
    pub fn node_selector(&self) -> BTreeMap<String, String> {
        let mut out = self.spec.node_selector.clone();
        if let Some(arch) = self
            .spec
            .gpu
            .as_ref()
            .and_then(|g| g.arch.clone())
            .filter(|a| !a.is_empty())
        {
            out.insert(labels::NODE_GPU_ARCH.to_owned(), arch);
        }
        out
    }

    /// Access mode of the cache PVC: `spec.cache.accessMode`, else
    /// ReadWriteOnce.
    pub fn cache_access_mode(&self) -> String {
        self.spec
            .cache
            .as_ref()
            .and_then(|c| c.access_mode.clone())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "ReadWriteOnce".to_owned())
    }

    /// Whether the pods mount a cache PVC only one node can attach
    /// (ReadWriteOnce or ReadWriteOncePod): rollouts must then stop the old
    /// pod before starting the new one.
    pub fn mounts_single_node_volume(&self) -> bool {
        if !self.needs_volume() {
            return false;
        }
        match self.source() {
            // A user's own claim: its access mode is unknown here.
            ModelSource::Pvc { .. } => false,
            _ => {
                self.cache_strategy() == CacheStrategy::SharedPvc
                    && self.cache_access_mode().starts_with("ReadWriteOnce")
            }
        }
    }

    /// The effective cache strategy.
    pub fn cache_strategy(&self) -> CacheStrategy {
        self.spec.cache_strategy()
    }

    /// The parsed source.
    pub fn source(&self) -> ModelSource {
        self.spec.model_source()
    }

    /// Name of the cache PVC (`spec.cache.pvcName`, else `<name>-cache`).
    pub fn cache_pvc_name(&self) -> String {
        self.spec
            .cache
            .as_ref()
            .and_then(|c| c.pvc_name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| flexinfer_crds::names::cache_pvc_name(&self.name))
    }

    /// Whether the backend needs the model volume.
    pub fn needs_volume(&self) -> bool {
        self.backend.needs_volume
    }

    /// Directory of the model inside the model volume for cached sources.
    pub fn cache_dest(&self) -> String {
        format!("{MODELS_MOUNT}/{}", self.name)
    }

    /// Whether the source is fetched into the cache by a prefetch Job.
    pub fn needs_prefetch(&self) -> bool {
        self.needs_volume()
            && matches!(
                self.source(),
                ModelSource::HuggingFace { .. } | ModelSource::Oci { .. }
            )
            && self.cache_strategy() == CacheStrategy::SharedPvc
    }

    /// Path (or name) of the model the backend serves.
    pub fn model_path(&self) -> String {
        if !self.needs_volume() {
            return self.spec.backend_model_name();
        }
        let gguf = self
            .spec
            .config_str("ggufFile")
            .filter(|f| !f.is_empty())
            .map(str::to_owned);
        match self.source() {
            ModelSource::Pvc { path, .. } => {
                if path.is_empty() {
                    MODELS_MOUNT.to_owned()
                } else {
                    format!("{MODELS_MOUNT}/{path}")
                }
            }
            ModelSource::File { path } => path,
            ModelSource::HuggingFace { repo } => {
                if self.cache_strategy() == CacheStrategy::None {
                    return repo;
                }
                let dest = self.cache_dest();
                if let Some(q) = &self.spec.quantize {
                    let bits = q.bits.unwrap_or(4);
                    let gs = q.group_size.unwrap_or(128);
                    match q.format {
                        QuantizationFormat::Awq => return format!("{dest}/awq-w{bits}-g{gs}"),
                        QuantizationFormat::Gptq => return format!("{dest}/gptq-w{bits}-g{gs}"),
                        _ => {}
                    }
                }
                match gguf {
                    Some(file) => format!("{dest}/{file}"),
                    None => dest,
                }
            }
            ModelSource::Oci { .. } if self.cache_strategy() == CacheStrategy::SharedPvc => {
                let dest = self.cache_dest();
                match gguf {
                    Some(file) => format!("{dest}/{file}"),
                    None => dest,
                }
            }
            other => other.backend_model_name(),
        }
    }

    /// Substitution values of the backend's default args and env.
    pub fn arg_context(&self, model_path: &'a str) -> ArgContext<'a> {
        ArgContext {
            model: model_path,
            port: self.backend.port,
        }
    }

    /// Whether the flash-loader init container copies the model into
    /// tmpfs: `spec.cache.flashLoader.enabled`, else on for shared models
    /// on the Local strategy; only for sources it can read (pvc://,
    /// SharedPVC, Local).
    pub fn flash_loader_enabled(&self) -> bool {
        let strategy = self.cache_strategy();
        let eligible = self.needs_volume()
            && (matches!(self.source(), ModelSource::Pvc { .. })
                || matches!(strategy, CacheStrategy::SharedPvc | CacheStrategy::Local));
        let wanted = self
            .spec
            .cache
            .as_ref()
            .and_then(|c| c.flash_loader_enabled())
            .unwrap_or(self.spec.is_shared() && strategy == CacheStrategy::Local);
        eligible && wanted
    }

    /// Host path of the tmpfs of a shared model's flash loader.
    pub fn shared_tmpfs_path(&self) -> String {
        format!("/dev/shm/flexinfer/{}/{}", self.namespace, self.name)
    }

    /// The image of the backend container.
    pub fn image(&self) -> String {
        if let Some(image) = self.spec.image.as_ref().filter(|i| !i.is_empty()) {
            return image.clone();
        }
        let overrides = &self.settings.image_overrides;
        self.backend
            .image(self.vendor, &self.arch, |key| overrides.get(key).cloned())
            .unwrap_or_default()
    }
}

/// The `dedicated=gpu:NoSchedule` toleration of GPU workloads (the taint
/// the FlexInfer node agent documents for dedicated GPU nodes).
pub fn gpu_toleration() -> Toleration {
    Toleration {
        key: Some(labels::GPU_TAINT_KEY.to_owned()),
        operator: Some("Equal".to_owned()),
        value: Some(labels::GPU_TAINT_VALUE.to_owned()),
        effect: Some(labels::GPU_TAINT_EFFECT.to_owned()),
        ..Default::default()
    }
}

/// Comma-joined, sorted, unique values.
pub(crate) fn join_sorted(values: impl IntoIterator<Item = String>) -> String {
    let set: std::collections::BTreeSet<String> =
        values.into_iter().filter(|v| !v.is_empty()).collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// The LiteLLM and service-label annotations of the Service and the
/// Deployment.
pub fn routing_annotations(plan: &ModelPlan<'_>) -> BTreeMap<String, String> {
    let spec = plan.spec;
    let served = spec.served_model_name(&plan.name).to_owned();
    let mut out = BTreeMap::new();
    out.insert(labels::LITELLM_SERVED_MODEL.to_owned(), served.clone());
    let aliases = join_sorted(
        spec.service_labels
            .iter()
            .cloned()
            .chain(spec.litellm.iter().flat_map(|l| l.aliases.iter().cloned()))
            .filter(|a| *a != served),
    );
    if !aliases.is_empty() {
        out.insert(labels::LITELLM_ALIASES.to_owned(), aliases);
    }
    if let Some(copilot) = spec
        .litellm
        .as_ref()
        .and_then(|l| l.copilot_alias.clone())
        .filter(|c| !c.is_empty())
    {
        out.insert(labels::LITELLM_COPILOT_MODEL.to_owned(), copilot);
    }
    if !spec.service_labels.is_empty() {
        out.insert(
            labels::SERVICE_LABELS.to_owned(),
            spec.service_labels.join(","),
        );
    }
    if let Some(active) = plan.shared_active {
        let value = if active {
            spec.service_labels.join(",")
        } else {
            String::new()
        };
        out.insert(labels::ACTIVE_SERVICES.to_owned(), value);
    }
    out
}
