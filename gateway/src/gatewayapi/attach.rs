//! Which listeners of a Gateway a route's parent reference attaches to:
//! the reference's section and port, the listener's protocol, the
//! namespaces and kinds it allows, and whether their hostnames meet.

use std::collections::BTreeMap;

use super::table::host_matches;
use super::types::{Gateway, HTTPRoute, Listener, ParentReference, GATEWAY_GROUP};

/// Why a parent reference attached to no listener (the route's
/// `Accepted=False` reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotAttached {
    /// No listener by that section name or port.
    NoMatchingParent,
    /// The listeners do not allow the route's namespace or kind.
    NotAllowedByListeners,
    /// No listener's hostname meets the route's.
    NoMatchingListenerHostname,
}

impl NotAttached {
    /// The condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            NotAttached::NoMatchingParent => "NoMatchingParent",
            NotAttached::NotAllowedByListeners => "NotAllowedByListeners",
            NotAttached::NoMatchingListenerHostname => "NoMatchingListenerHostname",
        }
    }
}

/// Whether `reference` names a Gateway (group and kind, with defaults).
pub fn names_gateway(reference: &ParentReference) -> bool {
    reference.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
        && reference.kind.as_deref().unwrap_or("Gateway") == "Gateway"
}

/// Whether the listener carries plain HTTP, the protocol served.
pub fn serves_http(listener: &Listener) -> bool {
    listener.protocol == "HTTP"
}

/// Whether a listener takes HTTPRoutes (its `allowedRoutes.kinds`).
pub fn takes_http_routes(listener: &Listener) -> bool {
    let kinds = listener
        .allowed_routes
        .as_ref()
        .map(|a| a.kinds.as_slice())
        .unwrap_or_default();
    kinds.is_empty()
        || kinds.iter().any(|k| {
            k.kind == "HTTPRoute" && k.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
        })
}

/// Whether `listener` of a Gateway in `gateway_ns` allows routes from
/// `route_ns`, whose labels are `ns_labels`.
fn allows_namespace(
    listener: &Listener,
    gateway_ns: &str,
    route_ns: &str,
    ns_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let from = listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match from.and_then(|f| f.from.as_deref()).unwrap_or("Same") {
        "All" => true,
        "Selector" => {
            let selector = from.and_then(|f| f.selector.as_ref());
            match (selector, ns_labels) {
                (Some(s), Some(labels)) => s.matches(labels),
                _ => false,
            }
        }
        _ => gateway_ns == route_ns,
    }
}

/// The hosts a route serves through `listener`: the route's hostnames that
/// meet the listener's (narrowed to the listener's where it is the
/// narrower), or the listener's own when the route names none. `None`:
/// they do not meet.
pub fn hosts_through(listener: &Listener, route_hosts: &[String]) -> Option<Vec<String>> {
    let own = listener.hostname.as_deref().map(str::to_ascii_lowercase);
    let route_hosts: Vec<String> = route_hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
    match (own, route_hosts.is_empty()) {
        (None, true) => Some(Vec::new()),
        (Some(own), true) => Some(vec![own]),
        (None, false) => Some(route_hosts),
        (Some(own), false) => {
            let met: Vec<String> = route_hosts.iter().filter_map(|h| meet(&own, h)).collect();
            (!met.is_empty()).then_some(met)
        }
    }
}

/// The narrower of two hostnames when they overlap.
fn meet(listener: &str, route: &str) -> Option<String> {
    if listener == route {
        return Some(route.to_string());
    }
    let l_wild = listener.starts_with("*.");
    let r_wild = route.starts_with("*.");
    match (l_wild, r_wild) {
        (true, false) => host_matches(listener, route).then(|| route.to_string()),
        (false, true) => host_matches(route, listener).then(|| listener.to_string()),
        (true, true) => {
            // `*.a.example.com` is within `*.example.com`.
            if route.ends_with(&listener[1..]) {
                Some(route.to_string())
            } else if listener.ends_with(&route[1..]) {
                Some(listener.to_string())
            } else {
                None
            }
        }
        (false, false) => None,
    }
}

/// The listeners of `gateway` a reference of `route` attaches to, with
/// the hosts served through each; or why none.
pub fn attach<'g>(
    gateway: &'g Gateway,
    reference: &ParentReference,
    route: &HTTPRoute,
    ns_labels: Option<&BTreeMap<String, String>>,
) -> Result<Vec<(&'g Listener, Vec<String>)>, NotAttached> {
    let gateway_ns = gateway.metadata.namespace.as_deref().unwrap_or("default");
    let route_ns = route.metadata.namespace.as_deref().unwrap_or("default");
    let named: Vec<&Listener> = gateway
        .spec
        .listeners
        .iter()
        .filter(|l| reference.section_name.as_ref().is_none_or(|s| *s == l.name))
        .filter(|l| reference.port.is_none_or(|p| p == l.port))
        .collect();
    if named.is_empty() {
        return Err(NotAttached::NoMatchingParent);
    }
    let allowed: Vec<&Listener> = named
        .into_iter()
        .filter(|l| serves_http(l) && takes_http_routes(l))
        .filter(|l| allows_namespace(l, gateway_ns, route_ns, ns_labels))
        .collect();
    if allowed.is_empty() {
        return Err(NotAttached::NotAllowedByListeners);
    }
    let attached: Vec<_> = allowed
        .into_iter()
        .filter_map(|l| hosts_through(l, &route.spec.hostnames).map(|h| (l, h)))
        .collect();
    if attached.is_empty() {
        return Err(NotAttached::NoMatchingListenerHostname);
    }
    Ok(attached)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway(listeners: serde_json::Value) -> Gateway {
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "infra"},
            "spec": {"gatewayClassName": "flexinfer", "listeners": listeners}
        }))
        .unwrap()
    }

    fn route(ns: &str, hostnames: &[&str]) -> HTTPRoute {
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": ns},
            "spec": {"hostnames": hostnames}
        }))
        .unwrap()
    }

    fn parent(section: Option<&str>) -> ParentReference {
        ParentReference {
            name: "gw".into(),
            namespace: Some("infra".into()),
            section_name: section.map(str::to_string),
            ..ParentReference::default()
        }
    }

    #[test]
    fn namespaces_sections_and_hostnames_decide_attachment() {
        let gw = gateway(json!([
            {"name": "same", "port": 80, "protocol": "HTTP"},
            {"name": "all", "port": 80, "protocol": "HTTP", "hostname": "*.example.com",
             "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "tls", "port": 443, "protocol": "HTTPS"}
        ]));
        let other = route("apps", &[]);
        let got = attach(&gw, &parent(None), &other, None).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.name, "all");
        assert_eq!(got[0].1, vec!["*.example.com".to_string()]);
        assert_eq!(
            attach(&gw, &parent(Some("same")), &other, None).unwrap_err(),
            NotAttached::NotAllowedByListeners
        );
        assert_eq!(
            attach(&gw, &parent(Some("nope")), &other, None).unwrap_err(),
            NotAttached::NoMatchingParent
        );
        let foreign = route("apps", &["a.other.org"]);
        assert_eq!(
            attach(&gw, &parent(Some("all")), &foreign, None).unwrap_err(),
            NotAttached::NoMatchingListenerHostname
        );
        let narrow = route("apps", &["a.example.com", "b.other.org"]);
        let got = attach(&gw, &parent(Some("all")), &narrow, None).unwrap();
        assert_eq!(got[0].1, vec!["a.example.com".to_string()]);
        let same_ns = route("infra", &[]);
        assert_eq!(attach(&gw, &parent(None), &same_ns, None).unwrap().len(), 2);
    }

    #[test]
    fn selector_namespaces_need_matching_labels() {
        let gw = gateway(json!([{"name": "sel", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "Selector",
                "selector": {"matchLabels": {"team": "ml"}}}}}]));
        let r = route("apps", &[]);
        let ml = BTreeMap::from([("team".to_string(), "ml".to_string())]);
        assert!(attach(&gw, &parent(None), &r, Some(&ml)).is_ok());
        assert!(attach(&gw, &parent(None), &r, Some(&BTreeMap::new())).is_err());
    }
}
