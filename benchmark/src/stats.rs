//! Percentile summaries (nearest-rank, exact: every sample is kept).

use serde::Serialize;

/// Summary of a set of measurements, in the unit of the field's name.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of measurements.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// Nearest-rank percentile `q` (0..=1) of sorted values.
fn rank<T: Copy>(sorted: &[T], q: f64) -> T {
    let n = sorted.len();
    let index = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
    sorted[index]
}

/// Summarises `values` (sorted in place); `None` when empty or all NaN.
pub fn summarize(values: &mut Vec<f64>) -> Option<Summary> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_unstable_by(f64::total_cmp);
    Some(Summary {
        count: values.len() as u64,
        mean: values.iter().sum::<f64>() / values.len() as f64,
        min: values[0],
        p50: rank(values, 0.5),
        p90: rank(values, 0.9),
        p99: rank(values, 0.99),
        max: values[values.len() - 1],
    })
}

/// Summarises microsecond counts (sorted in place) in milliseconds.
pub fn summarize_micros_as_ms(values: &mut [u32]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let ms = |us: u32| f64::from(us) / 1000.0;
    let sum: u64 = values.iter().map(|&v| u64::from(v)).sum();
    Some(Summary {
        count: values.len() as u64,
        mean: sum as f64 / values.len() as f64 / 1000.0,
        min: ms(values[0]),
        p50: ms(rank(values, 0.5)),
        p90: ms(rank(values, 0.9)),
        p99: ms(rank(values, 0.99)),
        max: ms(values[values.len() - 1]),
    })
}

/// The median of `values` (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_unstable_by(f64::total_cmp);
    let n = sorted.len();
    Some(if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = summarize(&mut v).unwrap();
        assert_eq!(
            (s.count, s.min, s.p50, s.p90, s.p99, s.max),
            (100, 1.0, 50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(s.mean, 50.5);
        let s = summarize(&mut vec![7.0]).unwrap();
        assert_eq!((s.p50, s.p99), (7.0, 7.0));
        assert!(summarize(&mut vec![f64::NAN]).is_none());
    }

    #[test]
    fn micros_become_milliseconds() {
        let mut v = vec![3000, 1000, 2000];
        let s = summarize_micros_as_ms(&mut v).unwrap();
        assert_eq!((s.min, s.p50, s.max, s.mean), (1.0, 2.0, 3.0, 2.0));
        assert!(summarize_micros_as_ms(&mut []).is_none());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
