//! The score formula.
//!
//! ```text
//! score = tps        × tpsWeight
//!       − util       × utilWeight
//!       − cost       × costWeight
//!       − cacheUsage × cacheWeight
//!       + freeRatio  × vramFreeWeight
//!       − kvPressurePenalty
//!       + tenantHeadroom × tenantFairShareWeight
//! ```
//!
//! with `kvPressurePenalty = (cacheUsage − 0.85) × 20` when `cacheUsage >
//! 0.85`, else 0. The inputs and where they come from:
//!
//! | input | source | absent |
//! |---|---|---|
//! | `tps` | benchmark ConfigMaps ([`crate::tps`]) | 0 |
//! | `util` | node annotation `flexinfer.ai/gpu.util` (percent, node agent) | 0 |
//! | `cost` | node annotation `flexinfer.ai/cost` (set by the cluster admin) | 0 |
//! | `cacheUsage` | node annotation `flexinfer.ai/kv-cache-usage` (ratio 0–1, node agent) | 0 |
//! | `freeRatio` | annotation `flexinfer.ai/gpu-free-memory` ÷ (label `gpu.vram` × label `gpu.count`), clamped to 0–1 | 0 |
//! | `tenantHeadroom` | `1 − usedGPUs ÷ budget` ([`crate::tenant`]) | 0 (fair share disabled) |
//!
//! The result is a raw `f64`; [`crate::normalize`] maps it into the
//! extender's integer range.

use crate::facts::NodeFacts;

/// KV-cache usage above which the pressure penalty applies.
pub const KV_PRESSURE_THRESHOLD: f64 = 0.85;
/// Penalty points per unit of KV-cache usage above the threshold.
pub const KV_PRESSURE_RAMP: f64 = 20.0;

/// Score weights (`SCHED_*_WEIGHT`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// `SCHED_TPS_WEIGHT`: prefer faster nodes.
    pub tps: f64,
    /// `SCHED_UTIL_WEIGHT`: avoid busy nodes.
    pub util: f64,
    /// `SCHED_COST_WEIGHT`: prefer cheaper nodes.
    pub cost: f64,
    /// `SCHED_CACHE_WEIGHT`: avoid KV-cache-heavy nodes.
    pub cache: f64,
    /// `SCHED_VRAM_FREE_WEIGHT`: prefer VRAM headroom.
    pub vram_free: f64,
    /// `SCHED_TENANT_FAIRSHARE_WEIGHT`: fair-share adjustment.
    pub tenant_fair_share: f64,
}

impl Weights {
    /// The default weights.
    pub const DEFAULT: Weights = Weights {
        tps: 0.7,
        util: 0.2,
        cost: 0.1,
        cache: 0.3,
        vram_free: 10.0,
        tenant_fair_share: 5.0,
    };
}

impl Default for Weights {
    fn default() -> Self {
        Weights::DEFAULT
    }
}

/// The inputs of one node's score.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScoreInputs {
    /// Measured tokens/s of the pod's model on this kind of node.
    pub tps: f64,
    /// GPU utilisation, percent.
    pub util: f64,
    /// Relative node cost.
    pub cost: f64,
    /// KV-cache usage ratio.
    pub cache_usage: f64,
    /// Free VRAM over total VRAM, 0–1.
    pub free_ratio: f64,
    /// Tenant fair-share headroom, `1 − used/budget` (0 when disabled).
    pub tenant_headroom: f64,
}

impl ScoreInputs {
    /// The node-derived inputs, with the given tokens/s and tenant headroom.
    pub fn for_node(node: &NodeFacts<'_>, tps: f64, tenant_headroom: f64) -> Self {
        ScoreInputs {
            tps,
            util: node.util.unwrap_or(0.0),
            cost: node.cost.unwrap_or(0.0),
            cache_usage: node.kv_cache_usage.unwrap_or(0.0),
            free_ratio: free_ratio(node),
            tenant_headroom,
        }
    }
}

/// `(cacheUsage − 0.85) × 20` above 0.85, else 0.
pub fn kv_pressure_penalty(cache_usage: f64) -> f64 {
    if cache_usage > KV_PRESSURE_THRESHOLD {
        (cache_usage - KV_PRESSURE_THRESHOLD) * KV_PRESSURE_RAMP
    } else {
        0.0
    }
}

/// Free VRAM over total VRAM (`gpu.vram` per GPU × `gpu.count`), clamped
/// to 0–1; 0 when either is unknown.
pub fn free_ratio(node: &NodeFacts<'_>) -> f64 {
    match (node.free_mb, node.vram_per_gpu_mb()) {
        (Some(free), Some(per_gpu)) => (free / (per_gpu * node.gpu_count())).clamp(0.0, 1.0),
        _ => 0.0,
    }
}

/// The raw score of one node.
pub fn raw_score(inputs: &ScoreInputs, weights: &Weights) -> f64 {
    inputs.tps * weights.tps
        - inputs.util * weights.util
        - inputs.cost * weights.cost
        - inputs.cache_usage * weights.cache
        + inputs.free_ratio * weights.vram_free
        - kv_pressure_penalty(inputs.cache_usage)
        + inputs.tenant_headroom * weights.tenant_fair_share
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn default_weights_are_the_spec_defaults() {
        let w = Weights::default();
        assert_eq!(
            (
                w.tps,
                w.util,
                w.cost,
                w.cache,
                w.vram_free,
                w.tenant_fair_share
            ),
            (0.7, 0.2, 0.1, 0.3, 10.0, 5.0)
        );
    }

    #[test]
    fn formula_with_default_weights() {
        let inputs = ScoreInputs {
            tps: 100.0,
            util: 50.0,
            cost: 3.0,
            cache_usage: 0.5,
            free_ratio: 0.25,
            tenant_headroom: 0.5,
        };
        // 70 − 10 − 0.3 − 0.15 + 2.5 − 0 + 2.5
        assert!(close(raw_score(&inputs, &Weights::DEFAULT), 64.55));
    }

    #[test]
    fn each_weight_scales_only_its_own_term() {
        let inputs = ScoreInputs {
            tps: 2.0,
            util: 3.0,
            cost: 5.0,
            cache_usage: 0.5,
            free_ratio: 0.75,
            tenant_headroom: -0.5,
        };
        let zero = Weights {
            tps: 0.0,
            util: 0.0,
            cost: 0.0,
            cache: 0.0,
            vram_free: 0.0,
            tenant_fair_share: 0.0,
        };
        assert_eq!(raw_score(&inputs, &zero), 0.0);
        let cases: [(Weights, f64); 6] = [
            (Weights { tps: 2.0, ..zero }, 4.0),
            (Weights { util: 2.0, ..zero }, -6.0),
            (Weights { cost: 2.0, ..zero }, -10.0),
            (Weights { cache: 2.0, ..zero }, -1.0),
            (
                Weights {
                    vram_free: 2.0,
                    ..zero
                },
                1.5,
            ),
            (
                Weights {
                    tenant_fair_share: 2.0,
                    ..zero
                },
                -1.0,
            ),
        ];
        for (weights, expected) in cases {
            assert!(close(raw_score(&inputs, &weights), expected), "{weights:?}");
        }
    }

    #[test]
    fn kv_pressure_penalty_ramps_above_085() {
        assert_eq!(kv_pressure_penalty(0.0), 0.0);
        assert_eq!(kv_pressure_penalty(0.85), 0.0);
        assert!(close(kv_pressure_penalty(0.90), 1.0));
        assert!(close(kv_pressure_penalty(0.95), 2.0));
        assert!(close(kv_pressure_penalty(1.0), 3.0));
        // The penalty is unweighted and adds to the weighted cache term.
        let inputs = ScoreInputs {
            cache_usage: 0.95,
            ..Default::default()
        };
        assert!(close(
            raw_score(&inputs, &Weights::DEFAULT),
            -0.95 * 0.3 - 2.0 + 0.0
        ));
    }

    #[test]
    fn free_ratio_uses_vram_and_count_labels() {
        let node = NodeFacts {
            vram: Some("24Gi"),
            count: Some("2"),
            free_mb: Some(24_576.0),
            ..Default::default()
        };
        assert!(close(free_ratio(&node), 0.5));
        let over = NodeFacts {
            free_mb: Some(1e9),
            ..node
        };
        assert_eq!(free_ratio(&over), 1.0);
        let negative = NodeFacts {
            free_mb: Some(-1.0),
            ..node
        };
        assert_eq!(free_ratio(&negative), 0.0);
        let unknown = NodeFacts { vram: None, ..node };
        assert_eq!(free_ratio(&unknown), 0.0);
    }

    #[test]
    fn inputs_from_node_annotations() {
        let node = NodeFacts {
            util: Some(40.0),
            cost: Some(1.5),
            kv_cache_usage: Some(0.9),
            ..Default::default()
        };
        assert_eq!(
            ScoreInputs::for_node(&node, 12.0, 0.25),
            ScoreInputs {
                tps: 12.0,
                util: 40.0,
                cost: 1.5,
                cache_usage: 0.9,
                free_ratio: 0.0,
                tenant_headroom: 0.25,
            }
        );
    }
}
