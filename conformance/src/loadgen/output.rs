//! The `load` report: what was run and what it measured, as JSON and as
//! Markdown, plus the progress line printed while it runs.

use std::fmt::Write as _;

use serde::Serialize;

use super::summary::{Percentiles, Summary};

/// A finished `load` run.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Base URL loaded.
    pub target: String,
    /// Request path.
    pub path: String,
    /// Model asked for.
    pub model: String,
    /// `open` (fixed rate) or `closed` (fixed concurrency).
    pub mode: &'static str,
    /// Open loop: requests per second asked for.
    pub rate: Option<f64>,
    /// Connections used (the concurrency of the closed loop).
    pub connections: usize,
    /// Whether responses were streamed.
    pub stream: bool,
    /// `max_tokens` of each request.
    pub max_tokens: u32,
    /// Length asked for, seconds.
    pub duration_s: f64,
    /// The figures.
    #[serde(flatten)]
    pub summary: Summary,
}

impl LoadReport {
    /// The JSON document.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// A one-paragraph summary for the console.
    pub fn console(&self) -> String {
        let s = &self.summary;
        let mut out = format!(
            "{} requests in {:.1} s: {:.0} req/s, {} succeeded, {} failed\n",
            s.requests,
            s.elapsed_s,
            s.requests_per_second,
            s.succeeded,
            s.requests - s.succeeded
        );
        if let Some(l) = &s.latency_ms {
            let _ = writeln!(
                out,
                "latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
                l.p50, l.p90, l.p99, l.p999, l.max
            );
        }
        if let Some(t) = &s.ttft_ms {
            let _ = writeln!(
                out,
                "TTFT ms:    p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
                t.p50, t.p90, t.p99, t.p999, t.max
            );
        }
        for (kind, n) in &s.errors {
            let _ = writeln!(out, "errors {kind}: {n}");
        }
        if self.mode == "open" && s.late > 0 {
            let _ = writeln!(
                out,
                "{} requests were sent more than 1 ms after they were due (add --connections)",
                s.late
            );
        }
        out
    }

    /// The Markdown document.
    pub fn markdown(&self) -> String {
        let s = &self.summary;
        let mut md = String::from("# flexinfer-conformance load\n\n| | |\n|---|---|\n");
        let mode = match self.rate {
            Some(rate) => format!(
                "open loop, {rate} req/s over {} connections",
                self.connections
            ),
            None => format!("closed loop, {} connections", self.connections),
        };
        for (k, v) in [
            ("target", format!("`{}{}`", self.target, self.path)),
            ("model", format!("`{}`", self.model)),
            ("mode", mode),
            ("stream", if self.stream { "yes" } else { "no" }.to_owned()),
            ("max_tokens", self.max_tokens.to_string()),
            ("duration", format!("{:.1} s", self.duration_s)),
        ] {
            let _ = writeln!(md, "| {k} | {v} |");
        }
        let _ = write!(
            md,
            "\n## Throughput\n\n| requests | succeeded | failed | req/s | successes/s | late |\n\
             |---:|---:|---:|---:|---:|---:|\n| {} | {} | {} | {:.0} | {:.0} | {} |\n",
            s.requests,
            s.succeeded,
            s.requests - s.succeeded,
            s.requests_per_second,
            s.successes_per_second,
            s.late
        );
        md.push_str(
            "\n## Latency (ms)\n\n| | p50 | p90 | p99 | p99.9 | max | mean |\n\
             |---|---:|---:|---:|---:|---:|---:|\n",
        );
        let row = |md: &mut String, name: &str, p: &Option<Percentiles>| {
            if let Some(p) = p {
                let _ = writeln!(
                    md,
                    "| {name} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    p.p50, p.p90, p.p99, p.p999, p.max, p.mean
                );
            }
        };
        row(&mut md, "latency", &s.latency_ms);
        row(&mut md, "TTFT", &s.ttft_ms);
        if !s.errors.is_empty() {
            md.push_str("\n## Errors\n\n| kind | count |\n|---|---:|\n");
            for (kind, n) in &s.errors {
                let _ = writeln!(md, "| {kind} | {n} |");
            }
        }
        md.push_str(
            "\n## Timeline\n\n| second | requests | errors | p50 ms | p99 ms |\n\
             |---:|---:|---:|---:|---:|\n",
        );
        for t in &s.timeline {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.3} | {:.3} |",
                t.second, t.requests, t.errors, t.p50_ms, t.p99_ms
            );
        }
        md
    }
}

/// The progress line for second `second`: `done` requests so far, `last`
/// of them in the past second.
pub fn progress_line(second: u64, done: u64, last: u64, failed: u64, mean_ms: f64) -> String {
    format!(
        "[{second:>4}s] {last:>7} req/s  total {done:>9}  failed {failed:>6}  mean latency {mean_ms:>8.3} ms"
    )
}

#[cfg(test)]
mod tests {
    use super::super::summary::Second;
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn markdown_and_json_carry_the_figures() {
        let report = LoadReport {
            target: "http://127.0.0.1:1".into(),
            path: "/v1/chat/completions".into(),
            model: "m".into(),
            mode: "open",
            rate: Some(100.0),
            connections: 8,
            stream: true,
            max_tokens: 16,
            duration_s: 2.0,
            summary: Summary {
                requests: 200,
                succeeded: 199,
                errors: BTreeMap::from([("status_503".to_owned(), 1)]),
                elapsed_s: 2.0,
                requests_per_second: 100.0,
                successes_per_second: 99.5,
                latency_ms: Some(Percentiles {
                    p50: 1.5,
                    ..Percentiles::default()
                }),
                ttft_ms: Some(Percentiles::default()),
                late: 0,
                timeline: vec![Second {
                    second: 0,
                    requests: 100,
                    errors: 1,
                    p50_ms: 1.5,
                    p99_ms: 2.0,
                }],
            },
        };
        let md = report.markdown();
        assert!(md.contains("| mode | open loop, 100 req/s over 8 connections |"));
        assert!(md.contains("| 200 | 199 | 1 | 100 | 100 | 0 |"));
        assert!(md.contains("| latency | 1.500 |"));
        assert!(md.contains("| TTFT | 0.000 |"));
        assert!(md.contains("| status_503 | 1 |"));
        assert!(md.contains("| 0 | 100 | 1 | 1.500 | 2.000 |"));
        let v: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(v["requests_per_second"], 100.0);
        assert_eq!(v["errors"]["status_503"], 1);
        assert_eq!(v["latency_ms"]["p50"], 1.5);
        assert_eq!(v["mode"], "open");
        assert!(report
            .console()
            .contains("200 requests in 2.0 s: 100 req/s"));
    }
}
