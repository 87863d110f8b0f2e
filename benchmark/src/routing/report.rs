//! Results of a routing run: one entry per strategy (the JSON document of
//! `--json`, schema `flexinfer-bench/routing/v1`, documented in the
//! README), the text table, and the cache-aware ratios.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::stats::{self, Summary};

use super::driver::DriveResult;
use super::fault::FaultReport;
use super::local::SimSettings;
use super::metrics::{self, PodDelta};
use super::workload::WorkloadKind;

/// Schema identifier of [`RoutingReport`].
pub const ROUTING_SCHEMA: &str = "flexinfer-bench/routing/v1";

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct RoutingReport {
    /// Always [`ROUTING_SCHEMA`].
    pub schema: &'static str,
    /// Every setting used.
    pub settings: Settings,
    /// One entry per strategy, in the order run.
    pub strategies: Vec<StrategyReport>,
    /// Cache-aware against the others, when the run has all four of
    /// `oracle`, `round-robin`, `least-loaded` and `cache-aware`.
    pub ratios: Option<Ratios>,
}

/// The settings of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// `url` (one gateway given by --url) or `local` (started here).
    pub mode: &'static str,
    /// The gateway measured (`url` mode).
    pub url: Option<String>,
    /// `model` sent.
    pub model: String,
    /// Workload kind.
    pub workload: WorkloadKind,
    /// Tenants (system prompts).
    pub tenants: usize,
    /// System prompt length, tokens.
    pub system_tokens: u32,
    /// User message length, tokens.
    pub user_tokens: u32,
    /// Requests per conversation.
    pub turns: u32,
    /// Conversations played at once.
    pub concurrency: usize,
    /// Requests per strategy (when not run for a duration).
    pub requests: Option<u64>,
    /// Time per strategy, seconds (when given).
    pub duration_s: Option<f64>,
    /// `max_tokens` of every request.
    pub max_tokens: u32,
    /// Seed of prompts and tenant draws.
    pub seed: u64,
    /// Per-request limit, seconds.
    pub timeout_s: f64,
    /// Times a request whose connection failed before any answer is sent
    /// again.
    pub client_retries: u32,
    /// Pods whose /metrics were scraped (`url` mode).
    pub pod_metrics: Vec<String>,
    /// The local topology (`local` mode).
    pub local: Option<LocalSettings>,
}

/// The settings of `--local`.
#[derive(Debug, Clone, Serialize)]
pub struct LocalSettings {
    /// Pods per strategy.
    pub pods: usize,
    /// Strategies, in the order run.
    pub strategies: Vec<String>,
    /// Gateway replicas per strategy.
    pub replicas: usize,
    /// Whether the replicas shared routing state.
    pub sharing: bool,
    /// How each pod was started.
    pub sim: SimSettings,
    /// The simulator binary.
    pub sim_bin: String,
    /// The gateway binary (absent when only the oracle ran).
    pub gateway_bin: Option<String>,
}

/// Where the hit rate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HitRateSource {
    /// The pods' prefix-cache counters.
    Metrics,
    /// The answers' `usage.prompt_tokens_details.cached_tokens`.
    Client,
}

/// One strategy.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyReport {
    /// Strategy name (`round-robin`, ..., `oracle`; the --label in `url` mode).
    pub strategy: String,
    /// The `routing` value the gateway was given (none for the oracle and `url` mode).
    pub gateway_routing: Option<String>,
    /// Why the strategy could not run (its other figures are then empty).
    pub error: Option<String>,
    /// Requests sent.
    pub requests: u64,
    /// Requests that completed with 2xx and a whole stream.
    pub succeeded: u64,
    /// Requests that did not.
    pub failed: u64,
    /// Failed requests by class (as in `load`).
    pub errors: BTreeMap<String, u64>,
    /// Wall time, seconds.
    pub duration_s: f64,
    /// Successful requests per second.
    pub requests_per_second: f64,
    /// Output tokens of successful requests.
    pub output_tokens: u64,
    /// Output tokens per second.
    pub output_tokens_per_second: f64,
    /// Prompt tokens the answers reported.
    pub prompt_tokens: u64,
    /// Cached prompt tokens the answers reported.
    pub cached_tokens: u64,
    /// Prefix-cache hit rate: `metrics_hit_rate`, else `client_hit_rate`.
    pub hit_rate: Option<f64>,
    /// Which of the two `hit_rate` is.
    pub hit_rate_source: Option<HitRateSource>,
    /// Σ Δhits ÷ Σ Δqueries of the pods' counters.
    pub metrics_hit_rate: Option<f64>,
    /// `cached_tokens ÷ prompt_tokens` of the answers that reported both.
    pub client_hit_rate: Option<f64>,
    /// Time to first content chunk, milliseconds.
    pub ttft_ms: Option<Summary>,
    /// Whole-request latency, milliseconds.
    pub latency_ms: Option<Summary>,
    /// Busiest pod's finished requests ÷ the mean over pods.
    pub imbalance: Option<f64>,
    /// Oracle lookups (`POST /sim/prefix-match`) that failed.
    pub oracle_errors: u64,
    /// Requests sent again after their connection failed before any answer
    /// (`--client-retries`); not among `failed` when a retry was served.
    pub retried: u64,
    /// Per pod: finished requests and prefix-cache counters over the run.
    pub pods: Vec<PodDelta>,
    /// Gateway replicas measured (0 for the oracle and `url` mode).
    pub replicas: usize,
    /// CPU time of all gateway processes ÷ requests, microseconds
    /// (`local` mode).
    pub router_cpu_us_per_request: Option<f64>,
    /// Bytes the replicas sent each other (record batches and snapshots)
    /// ÷ requests (`local` mode, sharing replicas).
    pub state_bytes_per_request: Option<f64>,
    /// A replica killed and restarted mid-run (`--kill-replica-at`).
    pub fault: Option<FaultReport>,
}

impl StrategyReport {
    /// A strategy that could not run.
    pub fn failed(strategy: &str, gateway_routing: Option<&str>, error: String) -> Self {
        Self::from_run(
            strategy,
            gateway_routing,
            DriveResult::default(),
            Vec::new(),
            Some(error),
        )
    }

    /// Summarises a run and the pods' counter changes over it.
    pub fn from_run(
        strategy: &str,
        gateway_routing: Option<&str>,
        result: DriveResult,
        pods: Vec<PodDelta>,
        error: Option<String>,
    ) -> Self {
        let mut errors = BTreeMap::new();
        let (mut ttft, mut latency) = (Vec::new(), Vec::new());
        let (mut succeeded, mut output_tokens) = (0u64, 0u64);
        let (mut prompt_tokens, mut cached_tokens) = (0u64, 0u64);
        let (mut reported_prompt, mut reported_cached) = (0u64, 0u64);
        let mut any_cached = false;
        for sample in &result.samples {
            match &sample.outcome {
                Ok(s) => {
                    succeeded += 1;
                    output_tokens += s.output_tokens;
                    prompt_tokens += s.prompt_tokens.unwrap_or(0);
                    cached_tokens += s.cached_tokens.unwrap_or(0);
                    if let (Some(p), Some(c)) = (s.prompt_tokens, s.cached_tokens) {
                        reported_prompt += p;
                        reported_cached += c;
                        any_cached = true;
                    }
                    latency.push(sample.latency.as_secs_f64() * 1000.0);
                    if let Some(t) = s.ttft {
                        ttft.push(t.as_secs_f64() * 1000.0);
                    }
                }
                Err(class) => *errors.entry(class.clone()).or_insert(0) += 1,
            }
        }
        let requests = result.samples.len() as u64;
        let secs = result.elapsed.as_secs_f64();
        let rate = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let metrics_hit_rate = metrics::hit_rate(&pods);
        let client_hit_rate = (any_cached && reported_prompt > 0)
            .then(|| reported_cached as f64 / reported_prompt as f64);
        let (hit_rate, hit_rate_source) = match (metrics_hit_rate, client_hit_rate) {
            (Some(r), _) => (Some(r), Some(HitRateSource::Metrics)),
            (None, Some(r)) => (Some(r), Some(HitRateSource::Client)),
            (None, None) => (None, None),
        };
        StrategyReport {
            strategy: strategy.to_owned(),
            gateway_routing: gateway_routing.map(str::to_owned),
            error,
            requests,
            succeeded,
            failed: requests - succeeded,
            errors,
            duration_s: secs,
            requests_per_second: rate(succeeded),
            output_tokens,
            output_tokens_per_second: rate(output_tokens),
            prompt_tokens,
            cached_tokens,
            hit_rate,
            hit_rate_source,
            metrics_hit_rate,
            client_hit_rate,
            ttft_ms: stats::summarize(&mut ttft),
            latency_ms: stats::summarize(&mut latency),
            imbalance: metrics::imbalance(&pods),
            oracle_errors: result.oracle_errors,
            retried: result.retried,
            pods,
            replicas: 0,
            router_cpu_us_per_request: None,
            state_bytes_per_request: None,
            fault: None,
        }
    }
}

/// Cache-aware routing against the references.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratios {
    /// cache-aware hit rate ÷ oracle's (1 = as good as the oracle).
    pub cache_aware_hit_rate_vs_oracle: Option<f64>,
    /// cache-aware TTFT p50 ÷ round-robin's (below 1 = faster).
    pub cache_aware_ttft_p50_vs_round_robin: Option<f64>,
    /// cache-aware requests/s ÷ least-loaded's (above 1 = more throughput).
    pub cache_aware_throughput_vs_least_loaded: Option<f64>,
}

impl Ratios {
    /// The ratios, when all four strategies are among `strategies`.
    pub fn of(strategies: &[StrategyReport]) -> Option<Ratios> {
        let find = |name: &str| strategies.iter().find(|s| s.strategy == name);
        let (cache_aware, oracle, round_robin, least_loaded) = (
            find("cache-aware")?,
            find("oracle")?,
            find("round-robin")?,
            find("least-loaded")?,
        );
        let divide = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let p50 = |s: &StrategyReport| s.ttft_ms.map(|t| t.p50);
        let rps = |s: &StrategyReport| (s.succeeded > 0).then_some(s.requests_per_second);
        Some(Ratios {
            cache_aware_hit_rate_vs_oracle: divide(cache_aware.hit_rate, oracle.hit_rate),
            cache_aware_ttft_p50_vs_round_robin: divide(p50(cache_aware), p50(round_robin)),
            cache_aware_throughput_vs_least_loaded: divide(rps(cache_aware), rps(least_loaded)),
        })
    }
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

fn times(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.2}x"))
}

impl RoutingReport {
    /// A report of `strategies` run with `settings`, with the ratios filled in.
    pub fn new(settings: Settings, strategies: Vec<StrategyReport>) -> RoutingReport {
        RoutingReport {
            schema: ROUTING_SCHEMA,
            ratios: Ratios::of(&strategies),
            settings,
            strategies,
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Whether every strategy ran and had a successful request.
    pub fn all_ran(&self) -> bool {
        self.strategies
            .iter()
            .all(|s| s.error.is_none() && s.succeeded > 0)
    }

    /// The text table.
    pub fn table(&self) -> String {
        let s = &self.settings;
        let mut out = format!(
            "routing {} model={} workload={} tenants={} system_tokens={} user_tokens={} turns={} concurrency={} max_tokens={}",
            match (&s.url, &s.local) {
                (Some(url), _) => url.clone(),
                (None, Some(local)) => format!("local pods={}", local.pods),
                (None, None) => "-".to_owned(),
            },
            s.model,
            s.workload.as_str(),
            s.tenants,
            s.system_tokens,
            s.user_tokens,
            s.turns,
            s.concurrency,
            s.max_tokens,
        );
        if let Some(local) = &s.local {
            let _ = write!(
                out,
                " block_size={} prefix_cache_blocks={} prefill_tok/s={} max_num_seqs={}",
                local.sim.block_size,
                local.sim.prefix_cache_blocks,
                local.sim.prefill_tokens_per_second,
                local.sim.max_num_seqs
            );
        }
        out.push('\n');
        let header = [
            "strategy",
            "reqs",
            "errors",
            "hit rate",
            "client hit",
            "TTFT p50/p99 ms",
            "req/s",
            "out tok/s",
            "imbalance",
            "CPU us/req",
            "state B/req",
            "reqs per pod",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
        for r in &self.strategies {
            let per_pod: Vec<String> = r
                .pods
                .iter()
                .map(|p| p.requests.map_or("?".to_owned(), |n| format!("{n:.0}")))
                .collect();
            rows.push(vec![
                r.strategy.clone(),
                r.requests.to_string(),
                r.failed.to_string(),
                percent(r.hit_rate),
                percent(r.client_hit_rate),
                r.ttft_ms
                    .map_or("-".to_owned(), |t| format!("{:.1}/{:.1}", t.p50, t.p99)),
                format!("{:.1}", r.requests_per_second),
                format!("{:.1}", r.output_tokens_per_second),
                times(r.imbalance),
                r.router_cpu_us_per_request
                    .map_or("-".to_owned(), |v| format!("{v:.0}")),
                r.state_bytes_per_request
                    .map_or("-".to_owned(), |v| format!("{v:.0}")),
                if per_pod.is_empty() {
                    "-".to_owned()
                } else {
                    per_pod.join("/")
                },
            ]);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, w))| {
                    if i == 0 {
                        format!("{cell:<w$}")
                    } else {
                        format!("{cell:>w$}")
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", line.join("  ").trim_end());
        }
        for r in &self.strategies {
            if let Some(error) = &r.error {
                let _ = writeln!(out, "{} did not run: {error}", r.strategy);
            }
            if !r.errors.is_empty() {
                let list: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let _ = writeln!(out, "errors of {}: {}", r.strategy, list.join(" "));
            }
            if r.retried > 0 {
                let _ = writeln!(
                    out,
                    "{}: {} requests sent again after their connection failed before any answer",
                    r.strategy, r.retried
                );
            }
            if r.oracle_errors > 0 {
                let _ = writeln!(
                    out,
                    "{}: {} prefix-match lookups failed (counted as nothing cached)",
                    r.strategy, r.oracle_errors
                );
            }
            if let Some(fault) = &r.fault {
                let _ = write!(out, "{}: {}", r.strategy, fault.lines());
            }
        }
        if let Some(ratios) = &self.ratios {
            let _ = writeln!(
                out,
                "cache-aware hit rate / oracle's: {}",
                times(ratios.cache_aware_hit_rate_vs_oracle)
            );
            let _ = writeln!(
                out,
                "cache-aware TTFT p50 / round-robin's: {}",
                times(ratios.cache_aware_ttft_p50_vs_round_robin)
            );
            let _ = writeln!(
                out,
                "cache-aware throughput (req/s) / least-loaded's: {}",
                times(ratios.cache_aware_throughput_vs_least_loaded)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{Sample, Success};
    use std::time::Duration;

    fn ok(ttft_ms: u64, prompt: u64, cached: Option<u64>) -> Sample {
        Sample {
            started: Duration::ZERO,
            latency: Duration::from_millis(ttft_ms * 2),
            outcome: Ok(Success {
                ttft: Some(Duration::from_millis(ttft_ms)),
                output_tokens: 16,
                prompt_tokens: Some(prompt),
                cached_tokens: cached,
                from_usage: true,
                tokens_per_second: Some(100.0),
            }),
        }
    }

    fn pod(url: &str, requests: f64, queries: f64, hits: f64) -> PodDelta {
        PodDelta {
            url: url.into(),
            requests: Some(requests),
            prefix_cache_queries: Some(queries),
            prefix_cache_hits: Some(hits),
            hit_rate: Some(hits / queries),
        }
    }

    fn settings() -> Settings {
        Settings {
            mode: "local",
            url: None,
            model: "m".into(),
            workload: WorkloadKind::Shared,
            tenants: 8,
            system_tokens: 1000,
            user_tokens: 50,
            turns: 4,
            concurrency: 16,
            requests: Some(4),
            duration_s: None,
            max_tokens: 16,
            seed: 1,
            timeout_s: 180.0,
            client_retries: 2,
            pod_metrics: Vec::new(),
            local: None,
        }
    }

    fn strategy(name: &str, ttft: u64, hits: f64, seconds: u64) -> StrategyReport {
        let result = DriveResult {
            samples: vec![ok(ttft, 1000, Some(500)), ok(ttft, 1000, Some(700))],
            elapsed: Duration::from_secs(seconds),
            ..DriveResult::default()
        };
        let pods = vec![
            pod("http://a", 1.0, 1000.0, hits),
            pod("http://b", 1.0, 1000.0, hits),
        ];
        StrategyReport::from_run(name, Some(name), result, pods, None)
    }

    #[test]
    fn strategy_figures() {
        let result = DriveResult {
            samples: vec![
                ok(100, 1000, Some(800)),
                ok(300, 1000, Some(200)),
                ok(200, 500, None),
                Sample {
                    started: Duration::ZERO,
                    latency: Duration::from_millis(5),
                    outcome: Err("http_503".into()),
                },
            ],
            elapsed: Duration::from_secs(2),
            ..DriveResult::default()
        };
        let pods = vec![
            pod("http://a", 2.0, 1500.0, 1000.0),
            pod("http://b", 1.0, 1000.0, 0.0),
        ];
        let r = StrategyReport::from_run("prefix", Some("prefix"), result.clone(), pods, None);
        assert_eq!((r.requests, r.succeeded, r.failed), (4, 3, 1));
        assert_eq!(r.errors["http_503"], 1);
        assert_eq!(r.requests_per_second, 1.5);
        assert_eq!(r.output_tokens_per_second, 24.0);
        assert_eq!(r.ttft_ms.unwrap().p50, 200.0);
        assert_eq!(r.metrics_hit_rate, Some(0.4));
        assert_eq!(r.hit_rate_source, Some(HitRateSource::Metrics));
        // Only answers that reported cached tokens count: 1000 of 2000.
        assert_eq!(r.client_hit_rate, Some(0.5));
        assert_eq!((r.prompt_tokens, r.cached_tokens), (2500, 1000));
        assert_eq!(r.imbalance, Some(2.0 / 1.5));
        // Without pod metrics, the answers give the hit rate.
        let r = StrategyReport::from_run("gateway", None, result, Vec::new(), None);
        assert_eq!(r.hit_rate, Some(0.5));
        assert_eq!(r.hit_rate_source, Some(HitRateSource::Client));
        assert_eq!(r.imbalance, None);
        let r = StrategyReport::failed("cache-aware", Some("cache-aware"), "no".into());
        assert_eq!((r.requests, r.hit_rate, r.ttft_ms), (0, None, None));
    }

    #[test]
    fn ratios_need_all_four_strategies() {
        let mut all = vec![
            strategy("round-robin", 400, 250.0, 4),
            strategy("least-loaded", 300, 300.0, 2),
            strategy("cache-aware", 100, 800.0, 1),
            strategy("oracle", 100, 1000.0, 1),
        ];
        let report = RoutingReport::new(settings(), all.clone());
        let ratios = report.ratios.unwrap();
        assert_eq!(ratios.cache_aware_hit_rate_vs_oracle, Some(0.8));
        assert_eq!(ratios.cache_aware_ttft_p50_vs_round_robin, Some(0.25));
        assert_eq!(ratios.cache_aware_throughput_vs_least_loaded, Some(2.0));
        let table = report.table();
        assert!(
            table.contains("cache-aware hit rate / oracle's: 0.80x"),
            "{table}"
        );
        assert!(table.contains("cache-aware TTFT p50 / round-robin's: 0.25x"));
        assert!(table.contains("least-loaded's: 2.00x"));
        assert!(table.contains("80.0%"));
        assert!(report.all_ran());
        all.remove(1);
        let report = RoutingReport::new(settings(), all);
        assert!(report.ratios.is_none());
        assert!(!report.table().contains("oracle's"));
    }

    #[test]
    fn json_and_failures() {
        let report = RoutingReport::new(
            settings(),
            vec![
                strategy("round-robin", 400, 250.0, 4),
                StrategyReport::failed(
                    "cache-aware",
                    Some("cache-aware"),
                    "unknown strategy".into(),
                ),
            ],
        );
        assert!(!report.all_ran());
        let table = report.table();
        assert!(
            table.contains("cache-aware did not run: unknown strategy"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["schema"], ROUTING_SCHEMA);
        assert_eq!(json["settings"]["workload"], "shared");
        assert_eq!(json["strategies"][0]["hit_rate"], 0.25);
        assert_eq!(json["strategies"][0]["hit_rate_source"], "metrics");
        assert_eq!(json["strategies"][0]["pods"][1]["requests"], 1.0);
        assert_eq!(json["strategies"][1]["error"], "unknown strategy");
        assert!(json["ratios"].is_null());
    }
}
