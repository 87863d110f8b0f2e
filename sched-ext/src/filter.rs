//! The filter: hard gates a node must pass to run a pod.
//!
//! Checks run in this order and the first failure is the reason:
//!
//! 1. The node has the `flexinfer.ai/gpu.vendor` label — "No vendor label".
//! 2. Free VRAM (node annotation `flexinfer.ai/gpu-free-memory`, MiB) is at
//!    least the pod's `flexinfer.ai/gpu.vram-estimate-mb` × its GPU count —
//!    "Insufficient VRAM". Runs only when the pod has a positive estimate
//!    and the node has the annotation.
//! 3. The pod's backend (`flexinfer.ai/backend`) supports the node's
//!    architecture (`flexinfer.ai/gpu.arch`) according to the backend
//!    catalog — "Unsupported arch". Runs only when both are present.
//!
//! All three are GPU placement rules: a pod that asks for no GPU passes
//! every node (a CPU-only pod is not rejected for a missing vendor label,
//! nor for the GPU architecture of a node it will not use).

use std::fmt;

use flexinfer_crds::backend;

use crate::facts::{NodeFacts, PodFacts};

/// Why a node cannot run a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// The node has no `flexinfer.ai/gpu.vendor` label.
    NoVendorLabel,
    /// The node's free VRAM is below what the pod needs.
    InsufficientVram {
        /// Free VRAM on the node, MiB.
        have_mb: f64,
        /// Estimate × GPU count, MiB.
        need_mb: f64,
    },
    /// The backend does not run on the node's GPU architecture (or is not
    /// in the catalog).
    UnsupportedArch {
        /// Canonical backend name.
        backend: String,
        /// Node architecture.
        arch: String,
    },
    /// The request named a node the extender's node cache does not know.
    UnknownNode,
}

impl Rejection {
    /// The short reason, the prefix of every message.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::NoVendorLabel => "No vendor label",
            Rejection::InsufficientVram { .. } => "Insufficient VRAM",
            Rejection::UnsupportedArch { .. } => "Unsupported arch",
            Rejection::UnknownNode => "Unknown node",
        }
    }

    /// Value of the `reason` label of the rejection metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Rejection::NoVendorLabel => "no_vendor_label",
            Rejection::InsufficientVram { .. } => "insufficient_vram",
            Rejection::UnsupportedArch { .. } => "unsupported_arch",
            Rejection::UnknownNode => "unknown_node",
        }
    }

    /// Whether evicting pods could make the node fit. Only a VRAM shortage
    /// can be resolved that way; the others go to
    /// `FailedAndUnresolvableNodes` so that kube-scheduler does not preempt
    /// pods in vain.
    pub fn resolvable_by_preemption(&self) -> bool {
        matches!(self, Rejection::InsufficientVram { .. })
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reason = self.reason();
        match self {
            Rejection::NoVendorLabel => write!(
                f,
                "{reason}: node has no {} label",
                flexinfer_crds::labels::NODE_GPU_VENDOR
            ),
            Rejection::InsufficientVram { have_mb, need_mb } => {
                write!(f, "{reason}: have {have_mb:.0}MB need {need_mb:.0}MB")
            }
            Rejection::UnsupportedArch { backend, arch } => {
                if backend::get(backend).is_ok() {
                    write!(
                        f,
                        "{reason}: backend {backend} unsupported on GPU arch {arch}"
                    )
                } else {
                    write!(f, "{reason}: unknown backend {backend} (GPU arch {arch})")
                }
            }
            Rejection::UnknownNode => write!(f, "{reason}: not in the extender's node cache"),
        }
    }
}

/// Checks whether `node` may run `pod`.
pub fn check(pod: &PodFacts, node: &NodeFacts<'_>) -> Result<(), Rejection> {
    if !pod.wants_gpu() {
        return Ok(());
    }
    if node.vendor.is_none() {
        return Err(Rejection::NoVendorLabel);
    }
    if let (Some(estimate), Some(free)) = (pod.vram_estimate_mb, node.free_mb) {
        let need = estimate * pod.gpu_count;
        if free < need {
            return Err(Rejection::InsufficientVram {
                have_mb: free,
                need_mb: need,
            });
        }
    }
    if let (Some(backend), Some(arch)) = (&pod.backend, node.arch) {
        if !backend::supports_arch(backend, arch) {
            return Err(Rejection::UnsupportedArch {
                backend: backend.clone(),
                arch: arch.to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_pod() -> PodFacts {
        PodFacts {
            gpu_count: 1.0,
            ..Default::default()
        }
    }

    fn gpu_node() -> NodeFacts<'static> {
        NodeFacts {
            name: "n",
            vendor: Some("AMD"),
            ..Default::default()
        }
    }

    #[test]
    fn gpu_pod_needs_a_vendor_label() {
        let node = NodeFacts {
            name: "n",
            ..Default::default()
        };
        let rejection = check(&gpu_pod(), &node).unwrap_err();
        assert_eq!(rejection, Rejection::NoVendorLabel);
        assert_eq!(rejection.reason(), "No vendor label");
        assert_eq!(
            rejection.to_string(),
            "No vendor label: node has no flexinfer.ai/gpu.vendor label"
        );
        assert!(!rejection.resolvable_by_preemption());
        assert!(check(&gpu_pod(), &gpu_node()).is_ok());
    }

    #[test]
    fn cpu_pod_passes_nodes_without_gpu_labels() {
        let pod = PodFacts {
            backend: Some("vllm".into()),
            vram_estimate_mb: Some(1e9),
            ..Default::default()
        };
        let bare = NodeFacts {
            name: "n",
            arch: Some("sm_52"),
            free_mb: Some(0.0),
            ..Default::default()
        };
        assert!(check(&pod, &bare).is_ok());
    }

    #[test]
    fn vram_check_multiplies_the_estimate_by_the_gpu_count() {
        let pod = PodFacts {
            gpu_count: 2.0,
            vram_estimate_mb: Some(10_000.0),
            ..Default::default()
        };
        let node = |free| NodeFacts {
            free_mb: Some(free),
            ..gpu_node()
        };
        let rejection = check(&pod, &node(19_999.0)).unwrap_err();
        assert_eq!(
            rejection,
            Rejection::InsufficientVram {
                have_mb: 19_999.0,
                need_mb: 20_000.0
            }
        );
        assert_eq!(rejection.reason(), "Insufficient VRAM");
        assert_eq!(
            rejection.to_string(),
            "Insufficient VRAM: have 19999MB need 20000MB"
        );
        assert!(rejection.resolvable_by_preemption());
        assert!(check(&pod, &node(20_000.0)).is_ok());
        // A node reporting zero free VRAM is checked; a node without the
        // annotation is not.
        assert!(check(&pod, &node(0.0)).is_err());
        assert!(check(&pod, &gpu_node()).is_ok());
        // No estimate: no check.
        let no_estimate = PodFacts {
            vram_estimate_mb: None,
            ..pod
        };
        assert!(check(&no_estimate, &node(0.0)).is_ok());
    }

    #[test]
    fn backend_must_support_the_node_arch() {
        let pod = PodFacts {
            backend: Some("vllm".into()),
            ..gpu_pod()
        };
        let node = |arch| NodeFacts {
            arch: Some(arch),
            ..gpu_node()
        };
        let rejection = check(&pod, &node("sm_52")).unwrap_err();
        assert_eq!(rejection.reason(), "Unsupported arch");
        assert_eq!(
            rejection.to_string(),
            "Unsupported arch: backend vllm unsupported on GPU arch sm_52"
        );
        assert!(check(&pod, &node("gfx1100")).is_ok());
        assert!(check(&pod, &node("sm_89")).is_ok());
        // llama.cpp runs on Maxwell.
        let llamacpp = PodFacts {
            backend: Some("llamacpp".into()),
            ..gpu_pod()
        };
        assert!(check(&llamacpp, &node("sm_52")).is_ok());
        // Without an arch label or a backend, there is nothing to check.
        assert!(check(&pod, &gpu_node()).is_ok());
        assert!(check(&gpu_pod(), &node("sm_52")).is_ok());
    }

    #[test]
    fn unknown_backends_are_unsupported_everywhere() {
        let pod = PodFacts {
            backend: Some("tgi".into()),
            ..gpu_pod()
        };
        let node = NodeFacts {
            arch: Some("gfx1100"),
            ..gpu_node()
        };
        let rejection = check(&pod, &node).unwrap_err();
        assert_eq!(
            rejection.to_string(),
            "Unsupported arch: unknown backend tgi (GPU arch gfx1100)"
        );
    }

    #[test]
    fn checks_run_in_spec_order() {
        let pod = PodFacts {
            backend: Some("vllm".into()),
            vram_estimate_mb: Some(100.0),
            ..gpu_pod()
        };
        // Fails VRAM and arch: VRAM is reported.
        let node = NodeFacts {
            arch: Some("sm_50"),
            free_mb: Some(10.0),
            ..gpu_node()
        };
        assert_eq!(
            check(&pod, &node).unwrap_err().reason(),
            "Insufficient VRAM"
        );
        // Fails all three: the vendor label is reported.
        let node = NodeFacts {
            vendor: None,
            ..node
        };
        assert_eq!(check(&pod, &node).unwrap_err().reason(), "No vendor label");
    }
}
