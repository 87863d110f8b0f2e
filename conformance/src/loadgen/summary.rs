//! Turns a run's samples into figures: throughput, latency and TTFT
//! percentiles, errors by kind, and a per-second timeline.

use std::collections::BTreeMap;

use serde::Serialize;

use super::engine::{RunOutput, Sample};

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// Percentiles of `values` (microseconds), which this sorts.
    pub fn of(values: &mut [u32]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let at = |q: f64| {
            let rank = (q * (values.len() - 1) as f64).round() as usize;
            f64::from(values[rank.min(values.len() - 1)]) / 1000.0
        };
        let sum: u64 = values.iter().map(|&v| u64::from(v)).sum();
        Some(Self {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
            mean: sum as f64 / values.len() as f64 / 1000.0,
        })
    }
}

/// One second of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Second {
    /// Seconds since the start.
    pub second: u32,
    /// Requests due (or sent) in this second.
    pub requests: u64,
    /// Of which failed.
    pub errors: u64,
    /// Median latency of its successful requests, ms.
    pub p50_ms: f64,
    /// 99th percentile latency of its successful requests, ms.
    pub p99_ms: f64,
}

/// The figures of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Requests finished (any outcome).
    pub requests: u64,
    /// Requests answered 2xx (and, for streams, ended by `[DONE]`).
    pub succeeded: u64,
    /// Failed requests by kind (`status_503`, `timeout`, ...).
    pub errors: BTreeMap<String, u64>,
    /// Wall time of the run, seconds.
    pub elapsed_s: f64,
    /// Finished requests per second.
    pub requests_per_second: f64,
    /// Successful requests per second.
    pub successes_per_second: f64,
    /// Latency of successful requests.
    pub latency_ms: Option<Percentiles>,
    /// Time to first byte of the stream, successful streamed requests only.
    pub ttft_ms: Option<Percentiles>,
    /// Open loop: requests sent more than 1 ms after they were due.
    pub late: u64,
    /// Per-second figures.
    pub timeline: Vec<Second>,
}

impl Summary {
    /// Computes the figures of `output`.
    pub fn of(output: &RunOutput) -> Self {
        let samples = &output.samples;
        let mut errors: BTreeMap<String, u64> = BTreeMap::new();
        let mut latencies = Vec::with_capacity(samples.len());
        let mut ttfts = Vec::new();
        for s in samples {
            match s.error {
                Some(kind) => *errors.entry(kind.label()).or_default() += 1,
                None => {
                    latencies.push(s.latency_us);
                    if s.ttft_us != u32::MAX {
                        ttfts.push(s.ttft_us);
                    }
                }
            }
        }
        let requests = samples.len() as u64;
        let succeeded = latencies.len() as u64;
        let elapsed_s = output.elapsed.as_secs_f64().max(f64::EPSILON);
        Self {
            requests,
            succeeded,
            errors,
            elapsed_s,
            requests_per_second: requests as f64 / elapsed_s,
            successes_per_second: succeeded as f64 / elapsed_s,
            latency_ms: Percentiles::of(&mut latencies),
            ttft_ms: Percentiles::of(&mut ttfts),
            late: output.late,
            timeline: timeline(samples),
        }
    }
}

fn timeline(samples: &[Sample]) -> Vec<Second> {
    let mut buckets: BTreeMap<u32, (u64, u64, Vec<u32>)> = BTreeMap::new();
    for s in samples {
        let bucket = buckets.entry(s.at_us / 1_000_000).or_default();
        bucket.0 += 1;
        match s.error {
            Some(_) => bucket.1 += 1,
            None => bucket.2.push(s.latency_us),
        }
    }
    buckets
        .into_iter()
        .map(|(second, (requests, errors, mut latencies))| {
            let p = Percentiles::of(&mut latencies).unwrap_or_default();
            Second {
                second,
                requests,
                errors,
                p50_ms: p.p50,
                p99_ms: p.p99,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::engine::ErrorKind;
    use super::*;
    use std::time::Duration;

    fn sample(at_ms: u32, latency_ms: u32, error: Option<ErrorKind>) -> Sample {
        Sample {
            at_us: at_ms * 1000,
            latency_us: latency_ms * 1000,
            ttft_us: if error.is_none() {
                latency_ms * 500
            } else {
                u32::MAX
            },
            error,
        }
    }

    #[test]
    fn figures_of_a_run() {
        let mut samples: Vec<Sample> = (1..=100).map(|i| sample(i * 15, i, None)).collect();
        samples.push(sample(10, 7, Some(ErrorKind::Status(503))));
        samples.push(sample(1900, 7, Some(ErrorKind::Timeout)));
        let summary = Summary::of(&RunOutput {
            samples,
            elapsed: Duration::from_secs(2),
            late: 3,
        });
        assert_eq!(summary.requests, 102);
        assert_eq!(summary.succeeded, 100);
        assert_eq!(summary.requests_per_second, 51.0);
        assert_eq!(summary.errors["status_503"], 1);
        assert_eq!(summary.errors["timeout"], 1);
        let latency = summary.latency_ms.unwrap();
        assert_eq!((latency.p50, latency.p99, latency.max), (51.0, 99.0, 100.0));
        assert_eq!(latency.mean, 50.5);
        assert_eq!(summary.ttft_ms.unwrap().max, 50.0);
        assert_eq!(summary.late, 3);
        // Due times 15..=990 ms fall in second 0, 1005..=1500 in second 1.
        assert_eq!(summary.timeline.len(), 2);
        assert_eq!(summary.timeline[0].requests, 67);
        assert_eq!(summary.timeline[0].errors, 1);
        assert_eq!(summary.timeline[1].requests, 35);
    }
}
