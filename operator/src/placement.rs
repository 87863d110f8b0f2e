//! GPU detection from node labels and backend compatibility checks: pure
//! functions of the Model and the nodes, so every rule is unit-tested.

use std::collections::BTreeMap;

use flexinfer_crds::backend::{Backend, SupportLevel};
use flexinfer_crds::gpu::{Vendor, AMD_GPU_RESOURCE, NVIDIA_GPU_RESOURCE};
use flexinfer_crds::labels;
use flexinfer_crds::v1alpha2::model::reason;
use flexinfer_crds::v1alpha2::{GpuVendor, ModelSpec};
use k8s_openapi::api::core::v1::Node;

/// Where a model will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Hardware vendor.
    pub vendor: Vendor,
    /// GPU architecture (`sm_8`, `gfx1100`), empty when unknown or CPU.
    pub arch: String,
    /// VRAM of one GPU in MB, when a node label says.
    pub vram_mb: Option<i64>,
}

impl Placement {
    /// CPU-only placement.
    pub fn cpu() -> Placement {
        Placement {
            vendor: Vendor::Cpu,
            arch: String::new(),
            vram_mb: None,
        }
    }
}

/// Why a model cannot be placed or run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementError {
    /// Condition reason (`AmbiguousGPUVendor`, `NoMatchingNodes`,
    /// `BackendUnsupported`, `VRAMInsufficient`).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

impl PlacementError {
    fn new(reason: &'static str, message: String) -> Self {
        Self { reason, message }
    }
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_none_or(|conds| {
            conds
                .iter()
                .find(|c| c.type_ == "Ready")
                .is_none_or(|c| c.status == "True")
        })
}

fn capacity(node: &Node, resource: &str) -> i64 {
    node.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref().or(s.allocatable.as_ref()))
        .and_then(|c| c.get(resource))
        .and_then(|q| q.0.trim().parse::<i64>().ok())
        .unwrap_or(0)
}

fn label_vendor(node: &Node) -> Option<Vendor> {
    node_labels(node)
        .get(labels::NODE_GPU_VENDOR)
        .and_then(|v| Vendor::parse(v))
}

fn has_vendor(node: &Node, vendor: Vendor) -> bool {
    let resource = match vendor {
        Vendor::Nvidia => NVIDIA_GPU_RESOURCE,
        Vendor::Amd => AMD_GPU_RESOURCE,
        _ => return false,
    };
    capacity(node, resource) >= 1 || label_vendor(node) == Some(vendor)
}

/// GPU architecture of a node for `vendor`.
pub fn node_arch(node: &Node, vendor: Vendor) -> String {
    let l = node_labels(node);
    let generic = l.get(labels::NODE_GPU_ARCH).cloned();
    match vendor {
        Vendor::Nvidia => l
            .get(labels::NVIDIA_COMPUTE_MAJOR)
            .map(|major| format!("sm_{major}"))
            .or(generic)
            .unwrap_or_default(),
        Vendor::Amd => l
            .get(labels::AMD_GPU_ARCHITECTURE)
            .cloned()
            .or(generic)
            .or_else(|| {
                l.keys()
                    .find_map(|k| match k.strip_prefix(labels::AMD_GPU_FAMILY_PREFIX)? {
                        "GC_11_0_0" => Some("gfx1100".to_owned()),
                        "GC_10_3_6" => Some("gfx1036".to_owned()),
                        _ => None,
                    })
            })
            .or_else(|| {
                l.get(labels::AMD_GPU_MODEL)
                    .filter(|m| m.contains("7900"))
                    .map(|_| "gfx1100".to_owned())
            })
            .unwrap_or_default(),
        _ => String::new(),
    }
}

fn node_vram_mb(node: &Node) -> Option<i64> {
    let raw = node_labels(node).get(labels::NODE_GPU_VRAM)?;
    let gib: i64 = raw
        .trim()
        .trim_end_matches("Gi")
        .trim_end_matches('G')
        .parse()
        .ok()?;
    Some(gib * 1024)
}

/// Detects vendor and architecture from the Ready nodes matching the
/// model's nodeSelector: the architecture of the first of them that has
/// one (see [`place`], which picks one the backend runs on).
pub fn detect(name: &str, spec: &ModelSpec, nodes: &[Node]) -> Result<Placement, PlacementError> {
    let Some((vendor, nodes)) = candidates(name, spec, nodes)? else {
        return Ok(Placement::cpu());
    };
    let arch = nodes
        .iter()
        .map(|n| node_arch(n, vendor))
        .find(|a| !a.is_empty())
        .unwrap_or_default();
    let vram_mb = nodes.iter().filter_map(|n| node_vram_mb(n)).max();
    Ok(Placement {
        vendor,
        arch,
        vram_mb,
    })
}

/// Where `backend` runs the model: the vendor of the Ready nodes matching
/// its nodeSelector and, of their GPU architectures (in the order of the
/// nodes' names), the first one the backend runs on with the model's VRAM
/// estimate, with that architecture's largest GPU. A selection mixing
/// architectures is refused only when the backend runs on none of them
/// (the first one's error): the scheduler extender, where it runs, keeps
/// the pods off the nodes the backend does not run on. Returns the experimental-support warnings of
/// the chosen architecture.
pub fn place(
    name: &str,
    backend: &Backend,
    spec: &ModelSpec,
    nodes: &[Node],
) -> Result<(Placement, Vec<String>), PlacementError> {
    let Some((vendor, mut nodes)) = candidates(name, spec, nodes)? else {
        let cpu = Placement::cpu();
        return check_compatibility(backend, spec, &cpu).map(|w| (cpu, w));
    };
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut archs: Vec<String> = Vec::new();
    for arch in nodes.iter().map(|n| node_arch(n, vendor)) {
        if !arch.is_empty() && !archs.contains(&arch) {
            archs.push(arch);
        }
    }
    let of_arch = |arch: &str| -> Placement {
        let vram_mb = nodes
            .iter()
            .filter(|n| arch.is_empty() || node_arch(n, vendor) == arch)
            .filter_map(|n| node_vram_mb(n))
            .max();
        Placement {
            vendor,
            arch: arch.to_owned(),
            vram_mb,
        }
    };
    if archs.is_empty() {
        let placement = of_arch("");
        return check_compatibility(backend, spec, &placement).map(|w| (placement, w));
    }
    let mut first_error = None;
    for arch in &archs {
        let placement = of_arch(arch);
        match check_compatibility(backend, spec, &placement) {
            Ok(warnings) => return Ok((placement, warnings)),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.expect("at least one architecture"))
}

/// The GPU vendor of the model and the Ready nodes of that vendor matching
/// its nodeSelector (and `gpu.arch`); `None` for a CPU model.
fn candidates<'n>(
    name: &str,
    spec: &ModelSpec,
    nodes: &'n [Node],
) -> Result<Option<(Vendor, Vec<&'n Node>)>, PlacementError> {
    let wanted = spec.gpu_vendor();
    if spec.gpu_count() == 0 || wanted == GpuVendor::Cpu {
        return Ok(None);
    }
    let matching: Vec<&Node> = nodes
        .iter()
        .filter(|n| is_ready(n))
        .filter(|n| {
            let l = node_labels(n);
            spec.node_selector.iter().all(|(k, v)| l.get(k) == Some(v))
        })
        .filter(|n| {
            spec.gpu
                .as_ref()
                .and_then(|g| g.arch.as_deref())
                .is_none_or(|arch| {
                    node_labels(n)
                        .get(labels::NODE_GPU_ARCH)
                        .map(String::as_str)
                        == Some(arch)
                })
        })
        .collect();
    let nvidia: Vec<&Node> = matching
        .iter()
        .copied()
        .filter(|n| has_vendor(n, Vendor::Nvidia))
        .collect();
    let amd: Vec<&Node> = matching
        .iter()
        .copied()
        .filter(|n| has_vendor(n, Vendor::Amd))
        .collect();
    let (vendor, nodes) = match wanted {
        GpuVendor::Nvidia if nvidia.is_empty() => {
            return Err(PlacementError::new(
                reason::NO_MATCHING_NODES,
                format!("no NVIDIA GPU nodes match selector for model {name}"),
            ))
        }
        GpuVendor::Nvidia => (Vendor::Nvidia, nvidia),
        GpuVendor::Amd if amd.is_empty() => {
            return Err(PlacementError::new(
                reason::NO_MATCHING_NODES,
                format!("no AMD GPU nodes match selector for model {name}"),
            ))
        }
        GpuVendor::Amd => (Vendor::Amd, amd),
        _ => match (nvidia.is_empty(), amd.is_empty()) {
            (false, false) => {
                return Err(PlacementError::new(
                    reason::AMBIGUOUS_GPU_VENDOR,
                    format!("gpu.vendor is \"auto\" but both NVIDIA and AMD GPU nodes match selector for model {name}; set spec.gpu.vendor explicitly"),
                ))
            }
            (false, true) => (Vendor::Nvidia, nvidia),
            (true, false) => (Vendor::Amd, amd),
            (true, true) => {
                return Err(PlacementError::new(
                    reason::NO_MATCHING_NODES,
                    format!("no GPU nodes match selector for model {name}"),
                ))
            }
        },
    };
    Ok(Some((vendor, nodes)))
}

/// Checks that the backend runs on the placement and that the VRAM
/// estimate fits. Returns experimental-support warnings on success.
pub fn check_compatibility(
    backend: &Backend,
    spec: &ModelSpec,
    placement: &Placement,
) -> Result<Vec<String>, PlacementError> {
    if !backend.supports_vendor(placement.vendor) {
        return Err(PlacementError::new(
            reason::BACKEND_UNSUPPORTED,
            format!(
                "backend \"{}\" does not support vendor \"{}\"",
                backend.name, placement.vendor
            ),
        ));
    }
    let mut warnings = Vec::new();
    if placement.vendor == Vendor::Cpu || placement.arch.is_empty() {
        return Ok(warnings);
    }
    let support = backend.arch_support(&placement.arch);
    match support.map(|s| s.level) {
        Some(SupportLevel::Unsupported) => {
            return Err(PlacementError::new(
                reason::BACKEND_UNSUPPORTED,
                format!(
                    "{} backend is not supported on {} GPUs. Use a compatible backend instead",
                    backend.name, placement.arch
                ),
            ))
        }
        Some(SupportLevel::Experimental) => warnings.push(format!(
            "{} support on {} is experimental",
            backend.name, placement.arch
        )),
        _ => {}
    }
    if placement.arch.starts_with("sm_5") {
        let src = spec.source.to_ascii_lowercase();
        if src.contains("f16") || src.contains("fp16") {
            return Err(PlacementError::new(
                reason::BACKEND_UNSUPPORTED,
                "FP16 models are not supported on Maxwell GPUs (no native FP16). Use q4f32_1, q0f32, or GGUF quantized models instead".to_owned(),
            ));
        }
    }
    let per_gpu = placement
        .vram_mb
        .or_else(|| support.map(|s| s.max_vram_mb).filter(|v| *v > 0));
    if let (Some(estimate), Some(per_gpu)) = (spec.vram_estimate_mb(), per_gpu) {
        let count = i64::from(spec.gpu_count().max(1));
        let total = per_gpu * count;
        if estimate * 100 > total * 95 {
            return Err(PlacementError::new(
                reason::VRAM_INSUFFICIENT,
                format!(
                    "model VRAM estimate ({estimate}MB) exceeds 95% of available GPU VRAM ({total}MB across {count} GPU(s)) for {} on {}",
                    backend.name, placement.arch
                ),
            ));
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexinfer_crds::v1alpha2::GpuSpec;
    use k8s_openapi::api::core::v1::NodeStatus;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node(name: &str, resource: &str, extra: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some(
            extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n.status = Some(NodeStatus {
            capacity: Some(BTreeMap::from([(
                resource.to_owned(),
                Quantity("1".into()),
            )])),
            ..Default::default()
        });
        n
    }

    fn gpu_spec(vendor: GpuVendor) -> ModelSpec {
        ModelSpec {
            backend: "vllm".into(),
            source: "HF://org/m".into(),
            gpu: Some(GpuSpec {
                vendor,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn auto_with_both_vendors_is_ambiguous() {
        let nodes = [
            node("a", NVIDIA_GPU_RESOURCE, &[]),
            node("b", AMD_GPU_RESOURCE, &[]),
        ];
        let err = detect("m", &gpu_spec(GpuVendor::Auto), &nodes).unwrap_err();
        assert_eq!(err.reason, reason::AMBIGUOUS_GPU_VENDOR);
        let ok = detect("m", &gpu_spec(GpuVendor::Amd), &nodes).unwrap();
        assert_eq!(ok.vendor, Vendor::Amd);
    }

    #[test]
    fn arch_from_labels() {
        let nodes = [node(
            "a",
            NVIDIA_GPU_RESOURCE,
            &[
                (labels::NVIDIA_COMPUTE_MAJOR, "8"),
                (labels::NODE_GPU_VRAM, "24Gi"),
            ],
        )];
        let p = detect("m", &gpu_spec(GpuVendor::Auto), &nodes).unwrap();
        assert_eq!(
            (p.vendor, p.arch.as_str(), p.vram_mb),
            (Vendor::Nvidia, "sm_8", Some(24576))
        );
        let amd = [node(
            "b",
            AMD_GPU_RESOURCE,
            &[("amd.com/gpu.family.GC_11_0_0", "true")],
        )];
        assert_eq!(
            detect("m", &gpu_spec(GpuVendor::Auto), &amd).unwrap().arch,
            "gfx1100"
        );
    }

    /// A selection mixing GPU architectures: the model is placed on one
    /// its backend runs on, whichever order the nodes are listed in, and
    /// refused only when it runs on none of them.
    #[test]
    fn a_mixed_selection_is_placed_on_an_architecture_the_backend_runs_on() {
        let gpu = |name: &str, arch: &str, vram: &str| {
            node(
                name,
                NVIDIA_GPU_RESOURCE,
                &[(labels::NODE_GPU_ARCH, arch), (labels::NODE_GPU_VRAM, vram)],
            )
        };
        let old = gpu("a-old", "sm_52", "24Gi");
        let new = gpu("b-new", "sm_89", "16Gi");
        let spec = gpu_spec(GpuVendor::Nvidia);
        let vllm = flexinfer_crds::backend::get("vllm").unwrap();
        for nodes in [[old.clone(), new.clone()], [new.clone(), old.clone()]] {
            let (p, _) = place("m", vllm, &spec, &nodes).unwrap();
            assert_eq!((p.arch.as_str(), p.vram_mb), ("sm_89", Some(16_384)));
        }
        // llama.cpp runs on both: the first node's by name.
        let llamacpp = flexinfer_crds::backend::get("llamacpp").unwrap();
        let (p, _) = place("m", llamacpp, &spec, &[new.clone(), old.clone()]).unwrap();
        assert_eq!((p.arch.as_str(), p.vram_mb), ("sm_52", Some(24_576)));
        // Only Maxwell: refused as before.
        let err = place("m", vllm, &spec, &[old]).unwrap_err();
        assert_eq!(err.reason, reason::BACKEND_UNSUPPORTED);
        assert!(err.message.contains("sm_52"), "{}", err.message);
        // The estimate fits only the larger GPU, of an architecture vLLM
        // does not run on.
        let mut big = gpu_spec(GpuVendor::Nvidia);
        big.gpu.as_mut().unwrap().vram_estimate_mb = Some(20_000);
        let err = place("m", vllm, &big, &[gpu("a-old", "sm_52", "24Gi"), new]).unwrap_err();
        assert_eq!(err.reason, reason::BACKEND_UNSUPPORTED);
    }

    #[test]
    fn no_nodes_and_cpu() {
        let err = detect("m", &gpu_spec(GpuVendor::Nvidia), &[]).unwrap_err();
        assert_eq!(
            err.message,
            "no NVIDIA GPU nodes match selector for model m"
        );
        let cpu = ModelSpec {
            backend: "llamacpp".into(),
            ..Default::default()
        };
        assert_eq!(detect("m", &cpu, &[]).unwrap(), Placement::cpu());
    }

    #[test]
    fn compatibility_rules() {
        let vllm = flexinfer_crds::backend::get("vllm").unwrap();
        let spec = gpu_spec(GpuVendor::Auto);
        let err = check_compatibility(vllm, &spec, &Placement::cpu()).unwrap_err();
        assert_eq!(err.reason, reason::BACKEND_UNSUPPORTED);
        let maxwell = Placement {
            vendor: Vendor::Nvidia,
            arch: "sm_5".into(),
            vram_mb: None,
        };
        assert!(check_compatibility(vllm, &spec, &maxwell).is_err());
        let mut big = gpu_spec(GpuVendor::Auto);
        big.gpu.as_mut().unwrap().vram_estimate_mb = Some(24_000);
        let p = Placement {
            vendor: Vendor::Nvidia,
            arch: "sm_8".into(),
            vram_mb: Some(24_576),
        };
        assert_eq!(
            check_compatibility(vllm, &big, &p).unwrap_err().reason,
            reason::VRAM_INSUFFICIENT
        );
        big.gpu.as_mut().unwrap().vram_estimate_mb = Some(20_000);
        assert!(check_compatibility(vllm, &big, &p).is_ok());
    }
}
