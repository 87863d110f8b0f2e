//! The pods' Prometheus metrics: a parser for the text exposition format
//! (enough of it for vLLM's counters and gauges), the figures a routing run
//! reads from each pod, and their change over a run.

use std::time::Duration;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::client::Client;
use crate::target::Target;

/// Prompt tokens looked up in the prefix cache.
pub const PREFIX_CACHE_QUERIES: &str = "vllm:prefix_cache_queries_total";
/// Of those, tokens found.
pub const PREFIX_CACHE_HITS: &str = "vllm:prefix_cache_hits_total";
/// Requests finished (one series per `finished_reason`).
pub const REQUEST_SUCCESS: &str = "vllm:request_success_total";
/// Requests holding a generation slot.
pub const RUNNING: &str = "vllm:num_requests_running";
/// Requests queued for a slot.
pub const WAITING: &str = "vllm:num_requests_waiting";
/// The names older vLLM versions used for the prefix-cache counters.
const LEGACY_QUERIES: &str = "vllm:gpu_prefix_cache_queries_total";
const LEGACY_HITS: &str = "vllm:gpu_prefix_cache_hits_total";

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Metric name.
    pub name: String,
    /// Label pairs, in the order written.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// Parses the text exposition format. Comments, blank lines and lines that
/// are not `name[{labels}] value [timestamp]` are skipped.
pub fn parse(text: &str) -> Vec<Series> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Series> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next()?)?;
    // An optional integer timestamp; anything else makes the line invalid.
    match (fields.next(), fields.next()) {
        (None, _) => {}
        (Some(ts), None) if ts.parse::<i64>().is_ok() => {}
        _ => return None,
    }
    Some(Series {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `a="x",b="y"}` and returns the pairs and what follows the `}`.
fn parse_labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start();
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = text.find('=')?;
        let key = text[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        text = text[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = text.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.push((key.to_owned(), value));
        text = text[end + 1..].trim_start();
        text = text.strip_prefix(',').unwrap_or(text);
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse().ok(),
    }
}

/// The sum of every series named `name`; `None` when there is none.
pub fn sum(series: &[Series], name: &str) -> Option<f64> {
    series
        .iter()
        .filter(|s| s.name == name && s.value.is_finite())
        .map(|s| s.value)
        .reduce(|a, b| a + b)
}

/// What a routing run reads from one pod; `None` where the pod does not
/// expose the metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PodMetrics {
    /// Prompt tokens looked up in the prefix cache (counter).
    pub prefix_cache_queries: Option<f64>,
    /// Prompt tokens found in it (counter).
    pub prefix_cache_hits: Option<f64>,
    /// Requests finished, all reasons (counter).
    pub requests_finished: Option<f64>,
    /// Requests generating now (gauge).
    pub running: Option<f64>,
    /// Requests queued now (gauge).
    pub waiting: Option<f64>,
}

impl PodMetrics {
    /// Reads the figures from a `/metrics` answer.
    pub fn from_text(text: &str) -> PodMetrics {
        let series = parse(text);
        PodMetrics {
            prefix_cache_queries: sum(&series, PREFIX_CACHE_QUERIES)
                .or_else(|| sum(&series, LEGACY_QUERIES)),
            prefix_cache_hits: sum(&series, PREFIX_CACHE_HITS)
                .or_else(|| sum(&series, LEGACY_HITS)),
            requests_finished: sum(&series, REQUEST_SUCCESS),
            running: sum(&series, RUNNING),
            waiting: sum(&series, WAITING),
        }
    }
}

/// A pod whose `/metrics` is scraped.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Its base URL, as given.
    pub url: String,
    client: Client,
    path: String,
}

impl Pod {
    /// A pod at `url` (`http://host:port`; a trailing `/metrics` is accepted).
    pub fn new(url: &str) -> Result<Pod> {
        let base = url.trim().trim_end_matches('/');
        let base = base.strip_suffix("/metrics").unwrap_or(base);
        let target = Target::parse(base)?;
        let path = target.root_path("/metrics");
        Ok(Pod {
            url: base.to_owned(),
            client: Client::new(target, None, None, Duration::from_secs(5))?,
            path,
        })
    }

    /// Scrapes it once.
    pub async fn scrape(&self, timeout: Duration) -> Result<PodMetrics> {
        Ok(PodMetrics::from_text(&self.scrape_text(timeout).await?))
    }

    /// Its `/metrics` text.
    pub async fn scrape_text(&self, timeout: Duration) -> Result<String> {
        let (status, body) = self
            .client
            .fetch(self.client.get(&self.path), timeout)
            .await?;
        if !status.is_success() {
            bail!("GET {}/metrics answered {status}", self.url);
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

/// Change of one pod's counters over a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodDelta {
    /// The pod's base URL.
    pub url: String,
    /// Requests it finished.
    pub requests: Option<f64>,
    /// Prompt tokens it looked up in its prefix cache.
    pub prefix_cache_queries: Option<f64>,
    /// Prompt tokens it found there.
    pub prefix_cache_hits: Option<f64>,
    /// `prefix_cache_hits / prefix_cache_queries`.
    pub hit_rate: Option<f64>,
}

impl PodDelta {
    /// The change from `before` to `after`; a figure missing from either
    /// scrape (or a counter that went down: a restarted pod) is `None`.
    pub fn between(url: &str, before: Option<&PodMetrics>, after: Option<&PodMetrics>) -> Self {
        let diff = |f: fn(&PodMetrics) -> Option<f64>| match (before.and_then(f), after.and_then(f))
        {
            (Some(b), Some(a)) if a >= b => Some(a - b),
            _ => None,
        };
        let queries = diff(|m| m.prefix_cache_queries);
        let hits = diff(|m| m.prefix_cache_hits);
        PodDelta {
            url: url.to_owned(),
            requests: diff(|m| m.requests_finished),
            prefix_cache_queries: queries,
            prefix_cache_hits: hits,
            hit_rate: ratio(hits, queries),
        }
    }
}

fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

/// Σ hits ÷ Σ queries over the pods that report both; `None` when none
/// does or nothing was looked up.
pub fn hit_rate(pods: &[PodDelta]) -> Option<f64> {
    let (mut hits, mut queries, mut any) = (0.0, 0.0, false);
    for pod in pods {
        if let (Some(h), Some(q)) = (pod.prefix_cache_hits, pod.prefix_cache_queries) {
            hits += h;
            queries += q;
            any = true;
        }
    }
    if any {
        ratio(Some(hits), Some(queries))
    } else {
        None
    }
}

/// The busiest pod's finished requests ÷ the mean over all pods (1 = even);
/// `None` unless every pod reports the counter and some request finished.
pub fn imbalance(pods: &[PodDelta]) -> Option<f64> {
    let counts: Option<Vec<f64>> = pods.iter().map(|p| p.requests).collect();
    let counts = counts.filter(|c| !c.is_empty())?;
    let mean = counts.iter().sum::<f64>() / counts.len() as f64;
    let max = counts.iter().copied().fold(0.0, f64::max);
    (mean > 0.0).then(|| max / mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# HELP vllm:prefix_cache_queries_total Prefix cache queries, in tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m"} 12000
vllm:prefix_cache_hits_total{model_name="m"} 9000.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="length",model_name="m"} 30
vllm:request_success_total{finished_reason="stop",model_name="m"} 10 1712345678000
vllm:request_success_total{finished_reason="abort",model_name="m, \"quoted\" \\ {x}"} 2
vllm:num_requests_running{model_name="m"} 3
vllm:num_requests_waiting 1.5e0
vllm:gpu_cache_usage_perc{model_name="m"} NaN
histogram_bucket{le="+Inf"} +Inf
this is not a metric
{model_name="m"} 4
vllm:broken{model_name="m" 5
vllm:no_value{model_name="m"}
vllm:bad_value 12abc
vllm:trailing 1 2 3
9starts_with_digit 1

"#;

    #[test]
    fn parses_labelled_series_and_skips_garbage() {
        let series = parse(SAMPLE);
        let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "vllm:prefix_cache_queries_total",
                "vllm:prefix_cache_hits_total",
                "vllm:request_success_total",
                "vllm:request_success_total",
                "vllm:request_success_total",
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:gpu_cache_usage_perc",
                "histogram_bucket",
            ]
        );
        assert_eq!(
            series[2].labels,
            [
                ("finished_reason".to_owned(), "length".to_owned()),
                ("model_name".to_owned(), "m".to_owned())
            ]
        );
        assert_eq!(series[4].labels[1].1, r#"m, "quoted" \ {x}"#);
        assert_eq!(series[3].value, 10.0);
        assert!(series[7].value.is_nan());
        assert_eq!(series[8].value, f64::INFINITY);
        assert_eq!(sum(&series, REQUEST_SUCCESS), Some(42.0));
        assert_eq!(sum(&series, "vllm:absent"), None);
        // NaN and infinities are left out of sums.
        assert_eq!(sum(&series, "vllm:gpu_cache_usage_perc"), None);
    }

    #[test]
    fn pod_figures_and_their_change() {
        let before = PodMetrics::from_text(SAMPLE);
        assert_eq!(
            before,
            PodMetrics {
                prefix_cache_queries: Some(12000.0),
                prefix_cache_hits: Some(9000.0),
                requests_finished: Some(42.0),
                running: Some(3.0),
                waiting: Some(1.5),
            }
        );
        let after = PodMetrics {
            prefix_cache_queries: Some(22000.0),
            prefix_cache_hits: Some(15000.0),
            requests_finished: Some(52.0),
            ..before
        };
        let a = PodDelta::between("http://a", Some(&before), Some(&after));
        assert_eq!(a.requests, Some(10.0));
        assert_eq!(a.hit_rate, Some(0.6));
        let empty = PodMetrics::from_text("# nothing\n");
        assert_eq!(empty, PodMetrics::default());
        let b = PodDelta::between("http://b", Some(&empty), Some(&empty));
        assert_eq!((b.requests, b.hit_rate), (None, None));
        // A restarted pod's counters go down: no figure rather than a negative one.
        let c = PodDelta::between("http://c", Some(&after), Some(&before));
        assert_eq!(c.requests, None);
        assert_eq!(
            PodDelta::between("http://d", None, Some(&after)).requests,
            None
        );

        let d = PodDelta {
            url: "http://d".into(),
            requests: Some(30.0),
            prefix_cache_queries: Some(10000.0),
            prefix_cache_hits: Some(1000.0),
            hit_rate: Some(0.1),
        };
        // Pooled over pods, not averaged: (6000 + 1000) / (10000 + 10000).
        assert_eq!(hit_rate(&[a.clone(), b.clone(), d.clone()]), Some(0.35));
        assert_eq!(hit_rate(std::slice::from_ref(&b)), None);
        // Busiest 30 against a mean of 20.
        assert_eq!(imbalance(&[a.clone(), d.clone()]), Some(1.5));
        assert_eq!(imbalance(&[a, b, d]), None);
        assert_eq!(imbalance(&[]), None);
    }

    #[test]
    fn legacy_counter_names_are_read_too() {
        let m = PodMetrics::from_text(
            "vllm:gpu_prefix_cache_queries_total 10\nvllm:gpu_prefix_cache_hits_total 4\n",
        );
        assert_eq!(
            (m.prefix_cache_queries, m.prefix_cache_hits),
            (Some(10.0), Some(4.0))
        );
    }

    #[test]
    fn pod_urls() {
        assert_eq!(
            Pod::new("http://p:8000/metrics").unwrap().url,
            "http://p:8000"
        );
        assert_eq!(Pod::new("http://p:8000/").unwrap().path, "/metrics");
        assert!(Pod::new("https://p").is_err());
    }
}
