//! Results of a load run: the JSON document (`--json`, schema
//! `flexinfer-bench/load/v1`, documented in the README) and the text table.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::load::LevelResult;
use crate::stats::{self, Summary};
use crate::target::Api;

/// Schema identifier of [`LoadReport`].
pub const LOAD_SCHEMA: &str = "flexinfer-bench/load/v1";

/// A whole load run.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Always [`LOAD_SCHEMA`].
    pub schema: &'static str,
    /// Base URL measured (with the `/v1` prefix).
    pub url: String,
    /// API measured.
    pub api: Api,
    /// Model name sent.
    pub model: String,
    /// Whether responses were streamed.
    pub stream: bool,
    /// Prompt length distribution, as given.
    pub prompt_tokens: String,
    /// Output length distribution (`max_tokens`), as given.
    pub max_tokens: String,
    /// One entry per concurrency level, in the order run.
    pub levels: Vec<LevelReport>,
}

/// Where output token counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage` for every successful request.
    Usage,
    /// Counted: stream content chunks, or words of a non-streamed answer.
    Counted,
    /// Some of each.
    Mixed,
    /// No successful request.
    None,
}

/// One concurrency level.
#[derive(Debug, Clone, Serialize)]
pub struct LevelReport {
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Requests sent.
    pub requests: u64,
    /// Requests that completed with 2xx and a whole body.
    pub succeeded: u64,
    /// Requests that did not.
    pub failed: u64,
    /// Failed requests by class: `http_<status>`, `connect`, `timeout`,
    /// `connection_closed`, `send`, `stream_cut`, `incomplete_stream`,
    /// `error_event`, `bad_chunk`, `bad_body`, `body`.
    pub errors: BTreeMap<String, u64>,
    /// Wall time of the level, seconds.
    pub duration_s: f64,
    /// Successful requests per second.
    pub requests_per_second: f64,
    /// Output tokens of successful requests.
    pub output_tokens: u64,
    /// Output tokens per second, all requests together.
    pub output_tokens_per_second: f64,
    /// Prompt tokens the server reported (0 when it reported none).
    pub prompt_tokens: u64,
    /// Output tokens per second of each request (decode speed for streams).
    pub request_tokens_per_second: Option<Summary>,
    /// Time to first token, milliseconds (streams only).
    pub ttft_ms: Option<Summary>,
    /// Gap between consecutive content chunks, milliseconds (streams only).
    pub itl_ms: Option<Summary>,
    /// Whole-request latency, milliseconds.
    pub latency_ms: Option<Summary>,
    /// Where output token counts came from.
    pub token_source: TokenSource,
}

impl LevelReport {
    /// Summarises a level.
    pub fn from_result(mut result: LevelResult) -> LevelReport {
        let mut errors = BTreeMap::new();
        let mut ttft = Vec::new();
        let mut latency = Vec::new();
        let mut per_request = Vec::new();
        let (mut succeeded, mut output_tokens, mut prompt_tokens) = (0u64, 0u64, 0u64);
        let (mut from_usage, mut counted) = (0u64, 0u64);
        for sample in &result.samples {
            match &sample.outcome {
                Ok(s) => {
                    succeeded += 1;
                    output_tokens += s.output_tokens;
                    prompt_tokens += s.prompt_tokens.unwrap_or(0);
                    if s.from_usage {
                        from_usage += 1;
                    } else {
                        counted += 1;
                    }
                    latency.push(sample.latency.as_secs_f64() * 1000.0);
                    if let Some(t) = s.ttft {
                        ttft.push(t.as_secs_f64() * 1000.0);
                    }
                    if let Some(r) = s.tokens_per_second {
                        per_request.push(r);
                    }
                }
                Err(class) => *errors.entry(class.clone()).or_insert(0) += 1,
            }
        }
        let requests = result.samples.len() as u64;
        let secs = result.elapsed.as_secs_f64();
        let rate = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        LevelReport {
            concurrency: result.concurrency,
            requests,
            succeeded,
            failed: requests - succeeded,
            errors,
            duration_s: secs,
            requests_per_second: rate(succeeded),
            output_tokens,
            output_tokens_per_second: rate(output_tokens),
            prompt_tokens,
            request_tokens_per_second: stats::summarize(&mut per_request),
            ttft_ms: stats::summarize(&mut ttft),
            itl_ms: stats::summarize_micros_as_ms(&mut result.gaps),
            latency_ms: stats::summarize(&mut latency),
            token_source: match (from_usage, counted) {
                (0, 0) => TokenSource::None,
                (_, 0) => TokenSource::Usage,
                (0, _) => TokenSource::Counted,
                _ => TokenSource::Mixed,
            },
        }
    }
}

impl LoadReport {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The text table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} {} model={} stream={} prompt_tokens={} max_tokens={}\n",
            self.url,
            match self.api {
                Api::Chat => "chat",
                Api::Completions => "completions",
            },
            self.model,
            self.stream,
            self.prompt_tokens,
            self.max_tokens
        );
        let header = [
            "conc",
            "reqs",
            "errors",
            "req/s",
            "out tok/s",
            "tok/s/req p50",
            "TTFT p50/p90/p99 ms",
            "ITL p50/p90/p99 ms",
            "latency p50/p99 ms",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
        for level in &self.levels {
            let three = |s: &Option<Summary>| match s {
                Some(s) => format!("{:.1}/{:.1}/{:.1}", s.p50, s.p90, s.p99),
                None => "-".to_owned(),
            };
            rows.push(vec![
                level.concurrency.to_string(),
                level.requests.to_string(),
                level.failed.to_string(),
                format!("{:.1}", level.requests_per_second),
                format!("{:.1}", level.output_tokens_per_second),
                level
                    .request_tokens_per_second
                    .map_or("-".to_owned(), |s| format!("{:.1}", s.p50)),
                three(&level.ttft_ms),
                three(&level.itl_ms),
                level
                    .latency_ms
                    .map_or("-".to_owned(), |s| format!("{:.1}/{:.1}", s.p50, s.p99)),
            ]);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:>w$}"))
                .collect();
            let _ = writeln!(out, "{}", line.join("  "));
        }
        for level in self.levels.iter().filter(|l| !l.errors.is_empty()) {
            let list: Vec<String> = level
                .errors
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(
                out,
                "errors at concurrency {}: {}",
                level.concurrency,
                list.join(" ")
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

    fn ok(ms: u64, tokens: u64) -> Sample {
        Sample {
            started: Duration::ZERO,
            latency: Duration::from_millis(ms),
            outcome: Ok(Success {
                ttft: Some(Duration::from_millis(ms / 4)),
                output_tokens: tokens,
                prompt_tokens: Some(3),
                cached_tokens: None,
                from_usage: true,
                tokens_per_second: Some(50.0),
            }),
        }
    }

    #[test]
    fn level_figures() {
        let result = LevelResult {
            concurrency: 2,
            samples: vec![
                ok(400, 10),
                ok(800, 30),
                Sample {
                    started: Duration::ZERO,
                    latency: Duration::from_millis(5),
                    outcome: Err("http_503".into()),
                },
            ],
            gaps: vec![20_000, 20_000, 40_000],
            elapsed: Duration::from_secs(2),
        };
        let level = LevelReport::from_result(result);
        assert_eq!((level.requests, level.succeeded, level.failed), (3, 2, 1));
        assert_eq!(level.errors["http_503"], 1);
        assert_eq!(level.requests_per_second, 1.0);
        assert_eq!(level.output_tokens_per_second, 20.0);
        assert_eq!(level.prompt_tokens, 6);
        assert_eq!(level.ttft_ms.unwrap().p50, 100.0);
        assert_eq!(level.itl_ms.unwrap().p50, 20.0);
        assert_eq!(level.token_source, TokenSource::Usage);
        let report = LoadReport {
            schema: LOAD_SCHEMA,
            url: "http://x/v1".into(),
            api: Api::Chat,
            model: "m".into(),
            stream: true,
            prompt_tokens: "8".into(),
            max_tokens: "16".into(),
            levels: vec![level],
        };
        let table = report.table();
        assert!(
            table.contains("errors at concurrency 2: http_503=1"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["levels"][0]["ttft_ms"]["p50"], 100.0);
    }
}
