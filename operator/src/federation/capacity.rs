//! A member cluster's capacity, from its Nodes and Pods.
//!
//! Capacity is the sum of the allocatable resources (falling back to the
//! capacity where a Node reports no allocatable) of schedulable Nodes: not
//! cordoned and not reporting `Ready` other than `True`. Available is that
//! minus the requests of Pods bound to those Nodes that have not finished
//! (a container's limit stands in for a missing request, as the API server
//! defaults it; init containers count with their largest request),
//! never below zero. Tracked resources: `cpu`, `memory` and GPU devices
//! ([`is_tracked`]).

use std::collections::{BTreeMap, BTreeSet};

use flexinfer_crds::v1alpha2::{ClusterStatus, GpuVendor, ModelSpec};
use flexinfer_crds::{gpu, quantity};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource amounts by name, as numbers.
pub type Amounts = BTreeMap<String, f64>;

/// Whether a resource is reported: `cpu`, `memory`, and device plugins'
/// GPUs (`nvidia.com/gpu`, `amd.com/gpu`, `gpu.intel.com/*`).
pub fn is_tracked(resource: &str) -> bool {
    resource == "cpu"
        || resource == "memory"
        || resource.ends_with("/gpu")
        || resource.starts_with("gpu.intel.com/")
}

/// Whether pods can be placed on `node`.
pub fn is_schedulable(node: &Node) -> bool {
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return false;
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    ready.is_none_or(|c| c.status == "True")
}

fn add(into: &mut Amounts, from: &BTreeMap<String, Quantity>) {
    for (name, q) in from {
        if is_tracked(name) {
            if let Some(v) = quantity::to_f64(q) {
                *into.entry(name.clone()).or_default() += v;
            }
        }
    }
}

/// Total allocatable resources of the schedulable `nodes`.
pub fn node_capacity(nodes: &[Node]) -> Amounts {
    let mut total = Amounts::new();
    for node in nodes.iter().filter(|n| is_schedulable(n)) {
        let Some(status) = &node.status else { continue };
        match status.allocatable.as_ref().filter(|a| !a.is_empty()) {
            Some(allocatable) => add(&mut total, allocatable),
            None => add(
                &mut total,
                status.capacity.as_ref().unwrap_or(&BTreeMap::new()),
            ),
        }
    }
    total
}

fn container_requests(c: &Container) -> Amounts {
    let mut out = Amounts::new();
    let Some(res) = &c.resources else { return out };
    if let Some(limits) = &res.limits {
        add(&mut out, limits);
    }
    if let Some(requests) = &res.requests {
        let mut req = Amounts::new();
        add(&mut req, requests);
        out.extend(req);
    }
    out
}

/// Requests of one pod: the sum over its containers, raised to the largest
/// init container request where that is higher.
pub fn pod_requests(pod: &Pod) -> Amounts {
    let mut total = Amounts::new();
    let Some(spec) = &pod.spec else { return total };
    for c in &spec.containers {
        for (k, v) in container_requests(c) {
            *total.entry(k).or_default() += v;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in container_requests(c) {
            let slot = total.entry(k).or_default();
            *slot = slot.max(v);
        }
    }
    total
}

/// Capacity minus the requests of unfinished `pods` bound to schedulable
/// `nodes`, floored at zero.
pub fn available(nodes: &[Node], pods: &[Pod]) -> Amounts {
    let mut free = node_capacity(nodes);
    let counted: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| is_schedulable(n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    for pod in pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if !on.is_some_and(|n| counted.contains(n)) {
            continue;
        }
        for (k, v) in pod_requests(pod) {
            if let Some(slot) = free.get_mut(&k) {
                *slot = (*slot - v).max(0.0);
            }
        }
    }
    free
}

/// A resource amount as a canonical quantity: CPU in cores or millicores
/// (`8`, `7500m`), memory in the largest exact binary unit (`64Gi`,
/// `1536Mi`, bytes otherwise), counts as whole numbers.
pub fn format_quantity(resource: &str, value: f64) -> Quantity {
    let value = value.max(0.0);
    let text = match resource {
        "cpu" => {
            let milli = (value * 1000.0).round() as u64;
            if milli.is_multiple_of(1000) {
                (milli / 1000).to_string()
            } else {
                format!("{milli}m")
            }
        }
        "memory" => {
            let bytes = value.round() as u64;
            let units = [
                ("Ti", 1u64 << 40),
                ("Gi", 1 << 30),
                ("Mi", 1 << 20),
                ("Ki", 1 << 10),
            ];
            units
                .iter()
                .find(|(_, size)| bytes > 0 && bytes.is_multiple_of(*size))
                .map_or_else(
                    || bytes.to_string(),
                    |(unit, size)| format!("{}{unit}", bytes / size),
                )
        }
        _ => (value.round() as u64).to_string(),
    };
    Quantity(text)
}

/// [`Amounts`] as status quantities.
pub fn to_quantities(amounts: &Amounts) -> BTreeMap<String, Quantity> {
    amounts
        .iter()
        .map(|(k, v)| (k.clone(), format_quantity(k, *v)))
        .collect()
}

/// Replicas of a model with `template` that a member cluster reporting
/// `status` has room for, from its free GPUs of the model's vendor (all
/// GPU kinds for `auto`): `None` for CPU models and for clusters not
/// probed yet (no capacity reported). A cluster that reports capacity but
/// no free GPU of the kind has room for none.
pub fn replica_room(template: &ModelSpec, status: &ClusterStatus) -> Option<u32> {
    let per_replica = template.gpu_count();
    if per_replica <= 0 || status.capacity.is_empty() {
        return None;
    }
    let resources: &[&str] = match template.gpu_vendor() {
        GpuVendor::Nvidia => &[gpu::NVIDIA_GPU_RESOURCE],
        GpuVendor::Amd => &[gpu::AMD_GPU_RESOURCE],
        GpuVendor::Auto => &gpu::GPU_RESOURCES,
        GpuVendor::Cpu => return None,
    };
    let free: f64 = resources
        .iter()
        .filter_map(|r| status.available.get(*r))
        .filter_map(quantity::to_f64)
        .filter(|v| v.is_finite() && *v > 0.0)
        .sum();
    Some(
        (free / f64::from(per_replica))
            .floor()
            .min(f64::from(u32::MAX)) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        NodeCondition, NodeSpec, NodeStatus, PodSpec, PodStatus, ResourceRequirements,
    };

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

    #[test]
    fn replica_room_counts_free_gpus_of_the_models_vendor() {
        use flexinfer_crds::v1alpha2::GpuSpec;

        let model = |vendor, count| ModelSpec {
            gpu: Some(GpuSpec {
                vendor,
                count: Some(count),
                ..Default::default()
            }),
            ..Default::default()
        };
        let status = ClusterStatus {
            capacity: q(&[("nvidia.com/gpu", "8"), ("amd.com/gpu", "4"), ("cpu", "64")]),
            available: q(&[("nvidia.com/gpu", "5"), ("amd.com/gpu", "3"), ("cpu", "10")]),
            ..Default::default()
        };
        assert_eq!(replica_room(&model(GpuVendor::Nvidia, 2), &status), Some(2));
        assert_eq!(replica_room(&model(GpuVendor::Amd, 1), &status), Some(3));
        assert_eq!(replica_room(&model(GpuVendor::Auto, 4), &status), Some(2));
        // CPU models and unprobed clusters: no limit known.
        assert_eq!(replica_room(&model(GpuVendor::Cpu, 1), &status), None);
        assert_eq!(replica_room(&ModelSpec::default(), &status), None);
        assert_eq!(
            replica_room(&model(GpuVendor::Nvidia, 1), &ClusterStatus::default()),
            None
        );
        // Probed, but no GPU of the kind free (or at all): room for none.
        let cpu_only = ClusterStatus {
            capacity: q(&[("cpu", "64")]),
            available: q(&[("cpu", "64")]),
            ..Default::default()
        };
        assert_eq!(
            replica_room(&model(GpuVendor::Nvidia, 1), &cpu_only),
            Some(0)
        );
    }

    fn node(name: &str, allocatable: &[(&str, &str)], ready: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.status = Some(NodeStatus {
            allocatable: Some(q(allocatable)),
            capacity: Some(q(&[("cpu", "999")])),
            conditions: ready.map(|s| {
                vec![NodeCondition {
                    type_: "Ready".into(),
                    status: s.into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        n
    }

    fn pod(node: &str, phase: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(q(requests)),
                        limits: Some(q(limits)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn capacity_sums_schedulable_nodes_and_tracked_resources() {
        let gpu = [
            ("nvidia.com/gpu", "4"),
            ("cpu", "8"),
            ("memory", "32Gi"),
            ("pods", "110"),
        ];
        let mut cordoned = node("c", &gpu, Some("True"));
        cordoned.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        let nodes = [
            node("a", &gpu, Some("True")),
            node("b", &gpu, None),
            node("down", &gpu, Some("False")),
            cordoned,
        ];
        let cap = to_quantities(&node_capacity(&nodes));
        assert_eq!(
            cap,
            q(&[("cpu", "16"), ("memory", "64Gi"), ("nvidia.com/gpu", "8")])
        );

        // Without allocatable the capacity counts.
        let bare = Node {
            status: Some(NodeStatus {
                capacity: Some(q(&[("amd.com/gpu", "2")])),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            to_quantities(&node_capacity(&[bare])),
            q(&[("amd.com/gpu", "2")])
        );
    }

    #[test]
    fn available_subtracts_running_pods_on_counted_nodes() {
        let nodes = [node(
            "a",
            &[("nvidia.com/gpu", "4"), ("cpu", "8"), ("memory", "16Gi")],
            None,
        )];
        let pods = [
            pod(
                "a",
                "Running",
                &[("cpu", "1500m"), ("memory", "512Mi")],
                &[("nvidia.com/gpu", "1")],
            ),
            pod("a", "Pending", &[("cpu", "500m")], &[]),
            pod("a", "Succeeded", &[("cpu", "4")], &[]),
            pod("elsewhere", "Running", &[("cpu", "4")], &[]),
        ];
        let free = to_quantities(&available(&nodes, &pods));
        assert_eq!(
            free,
            q(&[("cpu", "6"), ("memory", "15872Mi"), ("nvidia.com/gpu", "3")])
        );
        // Never negative.
        let greedy = [pod("a", "Running", &[("cpu", "100")], &[])];
        assert_eq!(
            to_quantities(&available(&nodes, &greedy))["cpu"],
            Quantity("0".into())
        );
    }

    #[test]
    fn init_containers_count_with_their_largest_request() {
        let mut p = pod("a", "Running", &[("cpu", "1")], &[]);
        if let Some(spec) = p.spec.as_mut() {
            spec.init_containers = Some(vec![Container {
                name: "init".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(q(&[("cpu", "3")])),
                    ..Default::default()
                }),
                ..Default::default()
            }]);
        }
        assert_eq!(pod_requests(&p)["cpu"], 3.0);
    }

    #[test]
    fn quantity_formats() {
        assert_eq!(format_quantity("cpu", 7.5).0, "7500m");
        assert_eq!(format_quantity("cpu", 16.0).0, "16");
        assert_eq!(
            format_quantity("memory", 1.5 * 1024.0 * 1024.0 * 1024.0).0,
            "1536Mi"
        );
        assert_eq!(format_quantity("memory", 1000.0).0, "1000");
        assert_eq!(format_quantity("memory", 0.0).0, "0");
        assert_eq!(format_quantity("nvidia.com/gpu", 3.0).0, "3");
        assert!(is_tracked("gpu.intel.com/i915"));
        assert!(!is_tracked("pods"));
        assert!(!is_tracked("ephemeral-storage"));
    }
}
