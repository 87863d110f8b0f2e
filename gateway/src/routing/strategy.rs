//! Routing strategy names and per-model routing options.

use std::fmt;
use std::str::FromStr;

use super::cache_aware::CacheAwareOptions;

/// How requests for one model are spread over its ready endpoints.
///
/// Parsed from the model's `flexinfer.ai/routing` value (or the equivalent
/// config field) once, when the model is loaded, so the request path only
/// ever sees a validated strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// No affinity: requests rotate over the endpoints, which is what the
    /// Service's own load balancing would give.
    #[default]
    Default,
    /// Requests of one conversation stay on one pod, so its KV cache is reused
    /// across turns.
    SessionAffinity,
    /// Requests sharing a prompt prefix (system prompt, document, explicit
    /// cache key) go to the same pod, to hit its prefix cache.
    Prefix,
    /// Each request goes to the pod with the fewest requests in flight.
    LeastLoaded,
    /// Each request goes to the pod with the best score of cached prompt
    /// prefix, load and KV-cache use ([`super::cache_aware`]).
    CacheAware,
    /// The first endpoint in list order; a retry takes the next one. Used by
    /// the global mode, whose endpoints are member clusters' gateways listed
    /// nearest (and warmest) first. Not a model annotation value.
    Failover,
    /// Requests spread in proportion to each endpoint's
    /// [`Upstream::weight`](super::Upstream::weight); endpoints of weight 0 are
    /// backups, taken in list order only when every weighted one is excluded.
    /// Used by the global mode; not a model annotation value.
    Weighted,
}

impl Strategy {
    /// Every strategy a model may name, in the order they are listed in
    /// error messages. [`Strategy::Failover`] and [`Strategy::Weighted`] are
    /// chosen by the global mode's cluster policy, never by a model.
    pub const ALL: [Strategy; 5] = [
        Strategy::Default,
        Strategy::SessionAffinity,
        Strategy::Prefix,
        Strategy::LeastLoaded,
        Strategy::CacheAware,
    ];

    /// The canonical annotation value, also used as the `strategy` metrics
    /// label so dashboards and annotations use the same words.
    pub const fn as_str(self) -> &'static str {
        match self {
            Strategy::Default => "default",
            Strategy::SessionAffinity => "session-affinity",
            Strategy::Prefix => "prefix",
            Strategy::LeastLoaded => "least-loaded",
            Strategy::CacheAware => "cache-aware",
            Strategy::Failover => "failover",
            Strategy::Weighted => "weighted",
        }
    }

    /// Whether the strategy needs a routing key from the request; lets the
    /// proxy skip body inspection entirely for the other strategies.
    pub const fn uses_key(self) -> bool {
        matches!(self, Strategy::SessionAffinity | Strategy::Prefix)
    }

    /// Whether the strategy scores the prompt itself (its blocks), so the
    /// proxy hashes them for this request.
    pub const fn uses_prompt(self) -> bool {
        matches!(self, Strategy::CacheAware)
    }

    /// Whether the order of the endpoints is part of the routing decision,
    /// so that a reordered endpoint list needs a rebuilt set.
    pub const fn is_ordered(self) -> bool {
        matches!(self, Strategy::Failover | Strategy::Weighted)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A routing value that names no known strategy.
///
/// Returned instead of silently falling back to the default so that a typo in
/// an annotation or config file is reported where the config is validated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown routing strategy {value:?}: expected one of \"default\", \"session-affinity\", \
     \"prefix\", \"least-loaded\", \"cache-aware\" (empty means \"default\")"
)]
pub struct ParseStrategyError {
    /// The rejected value, as given.
    pub value: String,
}

impl FromStr for Strategy {
    type Err = ParseStrategyError;

    /// Accepts the annotation values case-insensitively, ignoring surrounding
    /// whitespace; the empty string means [`Strategy::Default`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        if trimmed.is_empty() {
            return Ok(Strategy::Default);
        }
        Strategy::ALL
            .into_iter()
            .find(|strategy| strategy.as_str().eq_ignore_ascii_case(trimmed))
            .ok_or_else(|| ParseStrategyError {
                value: s.to_owned(),
            })
    }
}

impl<'de> serde::Deserialize<'de> for Strategy {
    /// Deserializes through [`FromStr`], so config files are validated with
    /// the same rules and error message as annotations.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
        value.parse().map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Strategy {
    /// Serializes as the annotation value, the inverse of deserialization.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The bounded-load factor KubeAI uses by default; a reasonable value when a
/// model enables bounded load without choosing one.
pub const DEFAULT_BOUNDED_LOAD_FACTOR: f64 = 1.25;

/// Per-model knobs for endpoint selection, parsed once with the model config.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoutingOptions {
    /// Weights and sizes of [`Strategy::CacheAware`].
    pub cache_aware: CacheAwareOptions,
    /// Consistent hashing with bounded loads (CHWBL) for the hash strategies.
    ///
    /// Affinity alone lets one hot key overload its pod while others idle.
    /// With a factor `c`, a key's pod is skipped while its in-flight count
    /// exceeds `ceil(c * (total_in_flight + 1) / n)` and the ring is walked to
    /// the next pod within the bound, so affinity holds until a pod is
    /// really hot and returns as soon as its load drops. `None` disables it;
    /// factors below 1 are treated as 1 (a smaller bound could exclude every
    /// pod), NaN disables it.
    pub bounded_load: Option<f64>,
}

impl RoutingOptions {
    /// Options with bounded load enabled at `factor`.
    pub fn with_bounded_load(factor: f64) -> Self {
        RoutingOptions {
            bounded_load: Some(factor),
            ..RoutingOptions::default()
        }
    }

    /// Checks the options for config validation, so a bad factor is reported
    /// at load time rather than quietly clamped on the request path.
    pub fn validate(&self) -> Result<(), String> {
        match self.bounded_load {
            Some(factor) if !factor.is_finite() || factor < 1.0 => Err(format!(
                "bounded-load factor must be a finite number >= 1.0, got {factor}"
            )),
            _ => self.cache_aware.validate(),
        }
    }

    /// The in-flight count above which a pod is skipped, given the current
    /// total and the number of endpoints; `None` when bounded load is off.
    pub(crate) fn load_bound(&self, total_in_flight: usize, endpoints: usize) -> Option<usize> {
        let factor = self.bounded_load?;
        if factor.is_nan() || endpoints == 0 {
            return None;
        }
        let factor = factor.max(1.0);
        let bound = (factor * (total_in_flight as f64 + 1.0) / endpoints as f64).ceil();
        // Float-to-int `as` saturates, so an infinite factor means "no bound".
        Some(bound as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_value() {
        assert_eq!("".parse::<Strategy>(), Ok(Strategy::Default));
        assert_eq!("  ".parse::<Strategy>(), Ok(Strategy::Default));
        assert_eq!("default".parse::<Strategy>(), Ok(Strategy::Default));
        assert_eq!(
            "session-affinity".parse::<Strategy>(),
            Ok(Strategy::SessionAffinity)
        );
        assert_eq!("prefix".parse::<Strategy>(), Ok(Strategy::Prefix));
        assert_eq!(
            "least-loaded".parse::<Strategy>(),
            Ok(Strategy::LeastLoaded)
        );
        assert_eq!(" Prefix\n".parse::<Strategy>(), Ok(Strategy::Prefix));
    }

    #[test]
    fn round_trips_through_as_str() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.as_str().parse::<Strategy>(), Ok(strategy));
            assert_eq!(strategy.to_string(), strategy.as_str());
        }
    }

    #[test]
    fn unknown_value_lists_valid_ones() {
        // Cluster strategies of the global mode are not model annotations.
        assert!("failover".parse::<Strategy>().is_err());
        assert!("weighted".parse::<Strategy>().is_err());
        let err = "round-robin".parse::<Strategy>().unwrap_err();
        assert_eq!(err.value, "round-robin");
        let message = err.to_string();
        for strategy in Strategy::ALL {
            assert!(message.contains(strategy.as_str()), "{message}");
        }
        assert!(message.contains("round-robin"), "{message}");
    }

    #[test]
    fn deserializes_with_validation() {
        let parsed: Strategy = serde_json::from_str("\"least-loaded\"").unwrap();
        assert_eq!(parsed, Strategy::LeastLoaded);
        let err = serde_json::from_str::<Strategy>("\"sticky\"").unwrap_err();
        assert!(err.to_string().contains("session-affinity"), "{err}");
        assert_eq!(
            serde_json::to_string(&Strategy::SessionAffinity).unwrap(),
            "\"session-affinity\""
        );
    }

    #[test]
    fn load_bound_follows_chwbl_formula() {
        let opts = RoutingOptions::with_bounded_load(1.25);
        // ceil(1.25 * 11 / 4) = ceil(3.4375) = 4
        assert_eq!(opts.load_bound(10, 4), Some(4));
        assert_eq!(opts.load_bound(0, 4), Some(1));
        assert_eq!(RoutingOptions::default().load_bound(10, 4), None);
        // Factors below one are raised to one; NaN disables; infinity never bounds.
        assert_eq!(
            RoutingOptions::with_bounded_load(0.5).load_bound(3, 4),
            Some(1)
        );
        assert_eq!(
            RoutingOptions::with_bounded_load(f64::NAN).load_bound(3, 4),
            None
        );
        assert_eq!(
            RoutingOptions::with_bounded_load(f64::INFINITY).load_bound(3, 4),
            Some(usize::MAX)
        );
    }

    #[test]
    fn validate_rejects_unusable_factors() {
        assert!(RoutingOptions::default().validate().is_ok());
        assert!(RoutingOptions::with_bounded_load(1.25).validate().is_ok());
        assert!(RoutingOptions::with_bounded_load(1.0).validate().is_ok());
        assert!(RoutingOptions::with_bounded_load(0.9).validate().is_err());
        assert!(RoutingOptions::with_bounded_load(f64::NAN)
            .validate()
            .is_err());
        assert!(RoutingOptions::with_bounded_load(f64::INFINITY)
            .validate()
            .is_err());
    }
}
