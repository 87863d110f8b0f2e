//! Mapping raw scores into the extender's integer range.
//!
//! kube-scheduler accepts extender scores in `0..=10`
//! ([`MAX_EXTENDER_PRIORITY`]) and scales them by the extender's weight
//! and `MaxNodeScore / 10`. Raw scores are unbounded (tokens/s alone can be
//! in the hundreds), so they are anchored at the best node:
//!
//! ```text
//! normalised = clamp(10 − round(best − raw), 0, 10)
//! ```
//!
//! The best node gets 10 and every node loses one point per whole raw
//! unit it trails the best by, down to 0. This is order-preserving (a
//! higher raw score never gets a lower normalised score), keeps the score
//! weights meaningful in absolute terms (the free-VRAM term is worth up to
//! 10 points, the same as the whole range), and, unlike min–max scaling,
//! does not blow a difference of a few MiB of free VRAM up into the full
//! 0–10 spread. A term that is the same for every node (the tenant
//! fair-share adjustment) shifts all raw scores alike and so does not
//! change the normalised ones. Non-finite raw scores get 0.

pub use crate::api::MAX_EXTENDER_PRIORITY;

/// Normalises raw scores, keeping their order.
pub fn normalize(raw: &[f64]) -> Vec<i64> {
    let best = raw
        .iter()
        .copied()
        .filter(|score| score.is_finite())
        .fold(f64::NEG_INFINITY, f64::max);
    let max = MAX_EXTENDER_PRIORITY as f64;
    raw.iter()
        .map(|&score| {
            if !score.is_finite() || !best.is_finite() {
                return 0;
            }
            (max - (best - score).round()).clamp(0.0, max) as i64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_node_gets_the_maximum_and_others_trail_by_raw_units() {
        assert_eq!(
            normalize(&[70.0, 69.0, 66.4, 65.5, 60.0, -100.0]),
            [10, 9, 6, 5, 0, 0]
        );
    }

    #[test]
    fn equal_scores_are_all_maximal() {
        assert_eq!(normalize(&[3.0, 3.0]), [10, 10]);
        assert_eq!(normalize(&[-7.5]), [10]);
        assert!(normalize(&[]).is_empty());
    }

    #[test]
    fn small_differences_stay_small() {
        assert_eq!(normalize(&[9.001, 9.0]), [10, 10]);
        assert_eq!(normalize(&[9.0, 8.4]), [10, 9]);
    }

    #[test]
    fn constant_shifts_do_not_change_the_result() {
        let raw = [12.0, 8.0, 3.5];
        let shifted: Vec<f64> = raw.iter().map(|s| s - 45.0).collect();
        assert_eq!(normalize(&raw), normalize(&shifted));
    }

    #[test]
    fn non_finite_scores_get_zero() {
        assert_eq!(normalize(&[f64::NAN, 1.0, f64::INFINITY]), [0, 10, 0]);
        assert_eq!(normalize(&[f64::NAN]), [0]);
    }

    #[test]
    fn order_is_preserved_and_range_respected() {
        // A deterministic sweep over many raw values.
        let raw: Vec<f64> = (0..500)
            .map(|i| ((i * 7919) % 1000) as f64 / 37.0 - 5.0)
            .collect();
        let normalised = normalize(&raw);
        for (i, a) in raw.iter().enumerate() {
            assert!((0..=MAX_EXTENDER_PRIORITY).contains(&normalised[i]));
            for (j, b) in raw.iter().enumerate() {
                if a > b {
                    assert!(normalised[i] >= normalised[j], "{a} vs {b}");
                }
            }
        }
    }
}
