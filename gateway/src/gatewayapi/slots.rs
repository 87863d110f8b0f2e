//! Each Gateway's address: a Service in the gateway's own namespace that
//! selects the gateway's pods and maps the Gateway's listener ports to one
//! data-plane port (a slot) of its own, so that the port a request arrives
//! on tells which Gateway it came through. The slot a Gateway holds is
//! recorded in its Service (the target port), so every replica reads the
//! same assignment; a new Gateway takes the lowest free slot, in order of
//! creation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use super::attach::serves_http;
use super::compile::Settings;
use super::types::Gateway;

/// Label marking the Services the gateway made for Gateways.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY_VALUE: &str = "flexinfer-gateway";
/// Annotation naming the Gateway (`namespace/name`) a Service is for.
pub const FOR_GATEWAY: &str = "flexinfer.ai/gateway";

/// A Gateway's slot and, once its Service has one, its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The data-plane port its traffic arrives on.
    pub port: u16,
    /// The Service's load-balancer ingress, else its cluster IP.
    pub address: Option<String>,
}

/// Slots of every Gateway and the Service writes they need.
#[derive(Clone, Debug, Default)]
pub struct Slots {
    /// (namespace, name) → slot.
    pub by_gateway: HashMap<(String, String), Slot>,
    /// Services to create or update.
    pub wanted: Vec<Service>,
    /// Managed Services whose Gateway is gone.
    pub stale: Vec<String>,
}

/// The Service name for Gateway `ns/name`: readable, unique, a DNS label.
pub fn service_name(ns: &str, name: &str) -> String {
    let digest = Sha256::digest(format!("{ns}/{name}").as_bytes());
    let hash: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    let readable: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!("gw-{}-{hash}", readable.trim_end_matches('-'))
}

fn slot_of(svc: &Service) -> Option<u16> {
    let port = svc
        .spec
        .as_ref()?
        .ports
        .as_ref()?
        .first()?
        .target_port
        .as_ref()?;
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(_) => None,
    }
}

fn address_of(svc: &Service) -> Option<String> {
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|i| i.first());
    if let Some(i) = ingress {
        if let Some(a) = i.ip.clone().or_else(|| i.hostname.clone()) {
            return Some(a);
        }
    }
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .filter(|ip| !ip.is_empty() && ip != "None")
}

fn wanted_service(gateway: &Gateway, name: &str, slot: u16, settings: &Settings) -> Service {
    let ns = gateway.namespace().unwrap_or_else(|| "default".into());
    let ports: BTreeSet<u16> = gateway
        .spec
        .listeners
        .iter()
        .filter(|l| serves_http(l))
        .map(|l| l.port)
        .collect();
    Service {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(settings.namespace.clone()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY.into(),
                MANAGED_BY_VALUE.into(),
            )])),
            annotations: Some(BTreeMap::from([(
                FOR_GATEWAY.into(),
                format!("{ns}/{}", gateway.name_any()),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(settings.pod_selector.clone()),
            ports: Some(
                ports
                    .iter()
                    .map(|p| ServicePort {
                        name: Some(format!("http-{p}")),
                        port: i32::from(*p),
                        target_port: Some(IntOrString::Int(i32::from(slot))),
                        protocol: Some("TCP".into()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Whether `have` already is `want` in what the gateway sets.
fn up_to_date(have: &Service, want: &Service) -> bool {
    let ports = |s: &Service| {
        s.spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.port, p.target_port))
            .collect::<Vec<_>>()
    };
    let selector = |s: &Service| s.spec.as_ref().and_then(|s| s.selector.clone());
    ports(have) == ports(want)
        && selector(have) == selector(want)
        && have.annotations().get(FOR_GATEWAY) == want.annotations().get(FOR_GATEWAY)
}

/// Assigns slots to `gateways` (in creation order) from the Services that
/// record them, and lists the Service writes.
pub fn assign(gateways: &[&Arc<Gateway>], services: &[Arc<Service>], settings: &Settings) -> Slots {
    let managed: HashMap<String, &Arc<Service>> = services
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(settings.namespace.as_str()))
        .filter(|s| s.labels().get(MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE))
        .map(|s| (s.name_any(), s))
        .collect();
    let allowed: BTreeSet<u16> = settings.slots.iter().copied().collect();
    let mut taken: BTreeSet<u16> = BTreeSet::new();
    let mut out = Slots::default();
    let mut pending = Vec::new();
    // Slots already recorded are kept (first come, first kept).
    for g in gateways {
        let ns = g.namespace().unwrap_or_else(|| "default".into());
        let name = service_name(&ns, &g.name_any());
        let recorded = managed
            .get(&name)
            .and_then(|s| slot_of(s))
            .filter(|p| allowed.contains(p) && !taken.contains(p));
        match recorded {
            Some(port) => {
                taken.insert(port);
                out.by_gateway.insert(
                    (ns, g.name_any()),
                    Slot {
                        port,
                        address: managed.get(&name).and_then(|s| address_of(s)),
                    },
                );
            }
            None => pending.push((ns, g)),
        }
    }
    for (ns, g) in pending {
        let Some(port) = allowed.iter().copied().find(|p| !taken.contains(p)) else {
            continue;
        };
        taken.insert(port);
        let name = service_name(&ns, &g.name_any());
        out.by_gateway.insert(
            (ns, g.name_any()),
            Slot {
                port,
                address: managed.get(&name).and_then(|s| address_of(s)),
            },
        );
    }
    let mut wanted_names = BTreeSet::new();
    for g in gateways {
        let ns = g.namespace().unwrap_or_else(|| "default".into());
        let Some(slot) = out.by_gateway.get(&(ns.clone(), g.name_any())) else {
            continue;
        };
        let name = service_name(&ns, &g.name_any());
        let want = wanted_service(g, &name, slot.port, settings);
        wanted_names.insert(name.clone());
        if managed
            .get(&name)
            .is_none_or(|have| !up_to_date(have, &want))
        {
            out.wanted.push(want);
        }
    }
    out.stale = managed
        .keys()
        .filter(|n| !wanted_names.contains(*n))
        .cloned()
        .collect();
    out.stale.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway(name: &str, created: &str) -> Arc<Gateway> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": name, "namespace": "infra", "creationTimestamp": created},
                "spec": {"gatewayClassName": "flexinfer",
                         "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
            }))
            .unwrap(),
        )
    }

    fn settings(slots: &[u16]) -> Settings {
        Settings {
            controller_name: "flexinfer.ai/gateway-controller".into(),
            slots: slots.to_vec(),
            namespace: "flexinfer".into(),
            pod_selector: BTreeMap::from([("app".into(), "gw".into())]),
        }
    }

    #[test]
    fn recorded_slots_are_kept_and_new_gateways_take_free_ones() {
        let a = gateway("a", "2026-01-01T00:00:00Z");
        let b = gateway("b", "2026-01-02T00:00:00Z");
        let c = gateway("c", "2026-01-03T00:00:00Z");
        let s = settings(&[9000, 9001]);
        // b's Service records 9000 (b was first); a is new.
        let mut recorded = wanted_service(&b, &service_name("infra", "b"), 9000, &s);
        recorded.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.7".into());
        let stale = wanted_service(
            &gateway("gone", "2025-01-01T00:00:00Z"),
            "gw-gone-x",
            9001,
            &s,
        );
        let services = vec![Arc::new(recorded), Arc::new(stale)];
        let got = assign(&[&a, &b, &c], &services, &s);
        let slot = |n: &str| {
            got.by_gateway
                .get(&("infra".to_string(), n.to_string()))
                .cloned()
        };
        assert_eq!(
            slot("b"),
            Some(Slot {
                port: 9000,
                address: Some("10.96.0.7".into())
            })
        );
        assert_eq!(
            slot("a"),
            Some(Slot {
                port: 9001,
                address: None
            })
        );
        assert_eq!(slot("c"), None, "no slot left");
        assert_eq!(got.wanted.len(), 1, "only a's Service is written");
        assert_eq!(got.stale, vec!["gw-gone-x".to_string()]);
    }

    #[test]
    fn service_names_are_dns_labels() {
        let n = service_name("ns", "My.Gateway.With.A.Very.Long.Name.That.Goes.On.And.On");
        assert!(n.len() <= 63, "{n}");
        assert!(n
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        assert_ne!(service_name("a", "x"), service_name("b", "x"));
    }
}
