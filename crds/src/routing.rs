//! Per-model routing strategy.
//!
//! A model picks how the gateway spreads its requests over pods with the
//! [`crate::labels::ROUTING`] annotation (`flexinfer.ai/routing`). The value
//! is an annotation rather than a spec field so that existing manifests and
//! tools that set it keep working.

use std::fmt;

/// How the gateway chooses a pod for a request to one model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RoutingStrategy {
    /// No annotation (or an unrecognised value): send to the model's
    /// Service and let kube-proxy balance.
    #[default]
    ServiceDns,
    /// `session-affinity`: consistent hash of the session key, so one
    /// conversation keeps hitting the same pod.
    SessionAffinity,
    /// `prefix`: consistent hash of the prompt-prefix key, so requests
    /// sharing a prefix reuse a pod's KV cache.
    Prefix,
    /// `least-loaded`: the pod with the fewest active connections.
    LeastLoaded,
    /// `cache-aware`: the pod with the best score of cached prompt prefix
    /// and load (the gateway's prefix index and the engines' metrics).
    CacheAware,
}

impl RoutingStrategy {
    /// Reads the strategy from the annotation value; absent, empty or
    /// unrecognised values (including different letter case) mean
    /// [`RoutingStrategy::ServiceDns`], as in the original implementation.
    pub fn from_annotation(value: Option<&str>) -> RoutingStrategy {
        match value.map(str::trim) {
            Some("session-affinity") => RoutingStrategy::SessionAffinity,
            Some("prefix") => RoutingStrategy::Prefix,
            Some("least-loaded") => RoutingStrategy::LeastLoaded,
            Some("cache-aware") => RoutingStrategy::CacheAware,
            _ => RoutingStrategy::ServiceDns,
        }
    }

    /// The annotation value selecting this strategy; `None` for the default.
    pub fn annotation_value(self) -> Option<&'static str> {
        match self {
            RoutingStrategy::ServiceDns => None,
            RoutingStrategy::SessionAffinity => Some("session-affinity"),
            RoutingStrategy::Prefix => Some("prefix"),
            RoutingStrategy::LeastLoaded => Some("least-loaded"),
            RoutingStrategy::CacheAware => Some("cache-aware"),
        }
    }

    /// Whether the gateway must track the model's pod endpoints (every
    /// strategy except Service DNS picks a pod itself).
    pub fn needs_endpoints(self) -> bool {
        self != RoutingStrategy::ServiceDns
    }
}

impl fmt::Display for RoutingStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.annotation_value().unwrap_or("default"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_values() {
        assert_eq!(
            RoutingStrategy::from_annotation(Some("session-affinity")),
            RoutingStrategy::SessionAffinity
        );
        assert_eq!(
            RoutingStrategy::from_annotation(Some("prefix")),
            RoutingStrategy::Prefix
        );
        assert_eq!(
            RoutingStrategy::from_annotation(Some(" least-loaded ")),
            RoutingStrategy::LeastLoaded
        );
    }

    #[test]
    fn anything_else_is_service_dns() {
        for value in [None, Some(""), Some("Prefix"), Some("round-robin")] {
            assert_eq!(
                RoutingStrategy::from_annotation(value),
                RoutingStrategy::ServiceDns
            );
        }
    }

    #[test]
    fn annotation_values_round_trip() {
        for strategy in [
            RoutingStrategy::ServiceDns,
            RoutingStrategy::SessionAffinity,
            RoutingStrategy::Prefix,
            RoutingStrategy::LeastLoaded,
            RoutingStrategy::CacheAware,
        ] {
            assert_eq!(
                RoutingStrategy::from_annotation(strategy.annotation_value()),
                strategy
            );
        }
        assert!(!RoutingStrategy::ServiceDns.needs_endpoints());
        assert!(RoutingStrategy::Prefix.needs_endpoints());
    }
}
