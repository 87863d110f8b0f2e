//! What an endpoint's engine says about its own load: requests running and
//! waiting, KV-cache use and loaded LoRA adapters, read from its Prometheus
//! `/metrics` by a background scraper and kept per endpoint for the
//! cache-aware scorer.
//!
//! A reading is trusted until it expires (the scraper sets the expiry to a
//! few intervals ahead); after a failed or garbage scrape it is cleared, and
//! the endpoint is scored on the gateway's own counts alone: a pod is never
//! dropped because its metrics are unreadable.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

/// Milliseconds since the first call in this process: the clock readings
/// expire by.
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    // +1 so that no reading ever expires "at 0", which means "never read".
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// One engine's latest reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReading {
    /// Requests generating.
    pub running: u32,
    /// Requests queued in the engine.
    pub waiting: u32,
    /// KV-cache use, 0 to 1.
    pub kv_usage: f64,
    /// LoRA adapters loaded (running or waiting requests use them).
    pub adapters: Vec<String>,
    /// KV-cache capacity in tokens, when the engine states it.
    pub cache_tokens: Option<u64>,
    /// Prefix-cache hit rate, 0 to 1, when the engine reports it.
    pub prefix_hit_rate: Option<f64>,
}

/// The latest reading of one endpoint, readable without locks.
#[derive(Debug, Default)]
pub struct BackendLoad {
    running: AtomicU32,
    waiting: AtomicU32,
    kv_permille: AtomicU32,
    /// KV-cache capacity in tokens; 0 = not stated.
    cache_tokens: AtomicU64,
    /// Requests the engine runs at once, learned from the latest reading
    /// in which it kept requests waiting; 0 = not seen saturated yet.
    slots: AtomicU32,
    /// [`now_ms`] after which the reading is stale; 0 = none.
    valid_until: AtomicU64,
    adapters: ArcSwapOption<Vec<String>>,
    /// Prefix-cache hit rate in hundredths of a percent, plus one; 0 =
    /// not reported.
    prefix_hits: AtomicU32,
    /// A client asked for the hit rate of this endpoint
    /// (`X-Flexinfer-Want-Prefix-Hit`): scrape it even when its model
    /// does not route on load.
    hit_rate_wanted: AtomicBool,
}

/// A reading as the scorer sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadView {
    /// Requests the engine runs or queues (all clients).
    pub queued: u32,
    /// Of which waiting for a slot.
    pub waiting: u32,
    /// KV-cache use, 0 to 1.
    pub kv_usage: f64,
}

impl BackendLoad {
    /// Stores a reading, trusted for `ttl`.
    pub fn store(&self, reading: &LoadReading, ttl: Duration) {
        self.running.store(reading.running, Ordering::Relaxed);
        self.waiting.store(reading.waiting, Ordering::Relaxed);
        let permille = (reading.kv_usage.clamp(0.0, 1.0) * 1000.0).round() as u32;
        self.kv_permille.store(permille, Ordering::Relaxed);
        self.cache_tokens
            .store(reading.cache_tokens.unwrap_or(0), Ordering::Relaxed);
        let slots = self.slots.load(Ordering::Relaxed);
        if reading.running > 0 && (reading.waiting > 0 || (slots > 0 && reading.running > slots)) {
            // Requests waited while these ran: that is all it runs at once
            // (or it ran more than once learned: it grew).
            self.slots.store(reading.running, Ordering::Relaxed);
        }
        let adapters = (!reading.adapters.is_empty()).then(|| Arc::new(reading.adapters.clone()));
        self.adapters.store(adapters);
        let hits = reading
            .prefix_hit_rate
            .map_or(0, |r| (r.clamp(0.0, 1.0) * 10_000.0).round() as u32 + 1);
        self.prefix_hits.store(hits, Ordering::Relaxed);
        let until = now_ms() + ttl.as_millis() as u64;
        self.valid_until.store(until, Ordering::Release);
    }

    /// Forgets the reading (the scrape failed).
    pub fn clear(&self) {
        self.valid_until.store(0, Ordering::Release);
        self.adapters.store(None);
    }

    /// The reading, unless there is none or it expired by `now` ([`now_ms`]).
    pub fn view(&self, now: u64) -> Option<LoadView> {
        if self.valid_until.load(Ordering::Acquire) <= now {
            return None;
        }
        let running = self.running.load(Ordering::Relaxed);
        let waiting = self.waiting.load(Ordering::Relaxed);
        Some(LoadView {
            queued: running.saturating_add(waiting),
            waiting,
            kv_usage: f64::from(self.kv_permille.load(Ordering::Relaxed)) / 1000.0,
        })
    }

    /// The KV-cache capacity in tokens the engine stated in its latest
    /// scrape (kept while the engine is unreachable: it is configuration).
    pub fn cache_tokens(&self) -> Option<u64> {
        let tokens = self.cache_tokens.load(Ordering::Relaxed);
        (tokens > 0).then_some(tokens)
    }

    /// Requests the engine runs at once, as last seen when it kept others
    /// waiting (kept while it is unreachable: it is configuration).
    pub fn slots(&self) -> Option<u32> {
        let slots = self.slots.load(Ordering::Relaxed);
        (slots > 0).then_some(slots)
    }

    /// The prefix-cache hit rate (0 to 1, to four decimals) of a reading
    /// still valid at `now`, when the engine reports one.
    pub fn prefix_hit_rate(&self, now: u64) -> Option<f64> {
        if self.valid_until.load(Ordering::Acquire) <= now {
            return None;
        }
        match self.prefix_hits.load(Ordering::Relaxed) {
            0 => None,
            n => Some(f64::from(n - 1) / 10_000.0),
        }
    }

    /// Asks for this endpoint to be scraped from now on (a client wants
    /// its prefix-cache hit rate).
    pub fn want_hit_rate(&self) {
        if !self.hit_rate_wanted.load(Ordering::Relaxed) {
            self.hit_rate_wanted.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a client asked for this endpoint's hit rate.
    pub fn hit_rate_wanted(&self) -> bool {
        self.hit_rate_wanted.load(Ordering::Relaxed)
    }

    /// Whether the engine reported `adapter` loaded in a reading still valid.
    pub fn has_adapter(&self, adapter: &str, now: u64) -> bool {
        if self.valid_until.load(Ordering::Acquire) <= now {
            return false;
        }
        self.adapters
            .load()
            .as_ref()
            .is_some_and(|list| list.iter().any(|a| a == adapter))
    }
}

/// Reads the load figures out of a Prometheus text exposition, knowing the
/// names of vLLM, SGLang and the llama.cpp server. Several series of one
/// metric (one per served model name) are summed, KV use is the highest.
/// Returns `None` when no known metric is present: then nothing is known.
/// Lines that do not parse are skipped.
pub fn parse_metrics(text: &str) -> Option<LoadReading> {
    let mut reading = LoadReading::default();
    let mut found = false;
    let mut latest_lora = f64::NEG_INFINITY;
    // Prefix cache: a hit-rate gauge, else hits over queries (counters).
    let (mut rate_gauge, mut hits, mut queries) = (None, 0.0, 0.0);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, labels, value)) = split_sample(line) else {
            continue;
        };
        let counted = || value.clamp(0.0, f64::from(u32::MAX)) as u32;
        match name {
            "vllm:num_requests_running"
            | "sglang:num_running_reqs"
            | "llamacpp:requests_processing" => {
                reading.running = reading.running.saturating_add(counted());
            }
            "vllm:num_requests_waiting"
            | "sglang:num_queue_reqs"
            | "llamacpp:requests_deferred" => {
                reading.waiting = reading.waiting.saturating_add(counted());
            }
            "vllm:gpu_cache_usage_perc"
            | "vllm:kv_cache_usage_perc"
            | "sglang:token_usage"
            | "llamacpp:kv_cache_usage_ratio" => {
                reading.kv_usage = reading.kv_usage.max(value.clamp(0.0, 1.0));
            }
            "vllm:cache_config_info" => {
                // Configuration as labels: capacity = blocks × block size.
                let number = |key| label(labels, key).and_then(|v| v.parse::<u64>().ok());
                if let (Some(blocks), Some(size)) = (number("num_gpu_blocks"), number("block_size"))
                {
                    reading.cache_tokens = Some(blocks.saturating_mul(size));
                }
            }
            "sglang:max_total_num_tokens" => {
                reading.cache_tokens = Some(value.max(0.0) as u64);
            }
            "vllm:lora_requests_info" => {
                // One series per adapter set, valued by when it was seen:
                // the newest tells what is loaded now.
                if value >= latest_lora {
                    latest_lora = value;
                    reading.adapters = ["running_lora_adapters", "waiting_lora_adapters"]
                        .iter()
                        .filter_map(|key| label(labels, key))
                        .flat_map(|list| list.split(','))
                        .map(str::trim)
                        .filter(|a| !a.is_empty())
                        .map(str::to_owned)
                        .collect();
                }
            }
            "vllm:gpu_prefix_cache_hit_rate" | "vllm:prefix_cache_hit_rate" => {
                rate_gauge = Some(value.clamp(0.0, 1.0));
            }
            _ if name.ends_with("prefix_cache_hits_total") => hits += value.max(0.0),
            _ if name.ends_with("prefix_cache_queries_total") => queries += value.max(0.0),
            _ => continue,
        }
        found = true;
    }
    reading.prefix_hit_rate =
        rate_gauge.or_else(|| (queries > 0.0).then(|| (hits / queries).clamp(0.0, 1.0)));
    found.then_some(reading)
}

/// `name{labels} value [timestamp]` → name, labels (without braces), value;
/// `None` for anything else or a value that is not a finite number.
fn split_sample(line: &str) -> Option<(&str, &str, f64)> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = open + line[open..].rfind('}')?;
            (&line[..open], &line[open + 1..close], &line[close + 1..])
        }
        None => {
            let space = line.find(char::is_whitespace)?;
            (&line[..space], "", &line[space..])
        }
    };
    let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
    value.is_finite().then_some((name.trim(), labels, value))
}

/// The value of `key="…"` among Prometheus labels (escapes are not
/// expected in adapter names and are left as they are).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = labels;
    while let Some(pos) = rest.find(key) {
        let after = &rest[pos + key.len()..];
        let at_boundary = pos == 0 || matches!(rest.as_bytes()[pos - 1], b',' | b' ' | b'{');
        if at_boundary {
            if let Some(value) = after.strip_prefix("=\"") {
                return value.find('"').map(|end| &value[..end]);
            }
        }
        rest = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vllm_metrics_summing_series() {
        let text = "# HELP vllm:num_requests_running Number of requests running.\n\
            # TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_running{model_name=\"a\"} 3.0\n\
            vllm:num_requests_running{model_name=\"b\"} 2\n\
            vllm:num_requests_waiting{model_name=\"a\"} 4.0\n\
            vllm:gpu_cache_usage_perc{model_name=\"a\"} 0.25\n\
            vllm:kv_cache_usage_perc{model_name=\"a\"} 0.5\n\
            vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"sql,chat\",waiting_lora_adapters=\"\"} 1.7e9\n\
            vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 1.6e9\n";
        let reading = parse_metrics(text).unwrap();
        assert_eq!(reading.running, 5);
        assert_eq!(reading.waiting, 4);
        assert_eq!(reading.kv_usage, 0.5);
        assert_eq!(reading.adapters, ["sql", "chat"]);
        assert_eq!(reading.cache_tokens, None);
        assert_eq!(reading.prefix_hit_rate, None);
        let info = "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",num_gpu_blocks=\"2048\"} 1.0\n";
        assert_eq!(parse_metrics(info).unwrap().cache_tokens, Some(32_768));
    }

    #[test]
    fn reads_the_prefix_cache_hit_rate() {
        let counters = "vllm:prefix_cache_queries_total{model_name=\"a\"} 300\n\
            vllm:prefix_cache_hits_total{model_name=\"a\"} 279\n\
            vllm:prefix_cache_queries_total{model_name=\"b\"} 100\n\
            vllm:prefix_cache_hits_total{model_name=\"b\"} 93\n";
        assert_eq!(parse_metrics(counters).unwrap().prefix_hit_rate, Some(0.93));
        let gauge = format!("{counters}vllm:gpu_prefix_cache_hit_rate 0.5\n");
        assert_eq!(parse_metrics(&gauge).unwrap().prefix_hit_rate, Some(0.5));
        let none = "vllm:prefix_cache_queries_total 0\nvllm:prefix_cache_hits_total 0\n";
        assert_eq!(parse_metrics(none).unwrap().prefix_hit_rate, None);
        let load = BackendLoad::default();
        load.store(&parse_metrics(counters).unwrap(), Duration::from_secs(60));
        assert_eq!(load.prefix_hit_rate(now_ms()), Some(0.93));
        load.clear();
        assert_eq!(load.prefix_hit_rate(now_ms()), None);
    }

    #[test]
    fn reads_sglang_and_llama_cpp_names() {
        let sglang = "sglang:num_running_reqs{model_name=\"m\"} 7\nsglang:num_queue_reqs{model_name=\"m\"} 1\nsglang:token_usage{model_name=\"m\"} 0.9\n";
        let r = parse_metrics(sglang).unwrap();
        assert_eq!((r.running, r.waiting, r.kv_usage), (7, 1, 0.9));
        let llama = "llamacpp:requests_processing 1\nllamacpp:requests_deferred 2\nllamacpp:kv_cache_usage_ratio 0.125\n";
        let r = parse_metrics(llama).unwrap();
        assert_eq!((r.running, r.waiting, r.kv_usage), (1, 2, 0.125));
    }

    #[test]
    fn garbage_gives_nothing_and_bad_lines_are_skipped() {
        assert_eq!(parse_metrics(""), None);
        assert_eq!(parse_metrics("<html>not metrics</html>"), None);
        assert_eq!(parse_metrics("vllm:num_requests_running{"), None);
        assert_eq!(parse_metrics("vllm:num_requests_running NaN"), None);
        let mixed = "vllm:num_requests_waiting 2\n}}{{ 7\nvllm:num_requests_running -3\nvllm:gpu_cache_usage_perc 7\nvllm:num_requests_running 1e30\n";
        let r = parse_metrics(mixed).unwrap();
        assert_eq!(r.waiting, 2);
        assert_eq!(r.running, u32::MAX);
        assert_eq!(r.kv_usage, 1.0);
    }

    #[test]
    fn slots_are_learned_when_the_engine_keeps_requests_waiting() {
        let load = BackendLoad::default();
        let ttl = Duration::from_secs(60);
        let reading = |running, waiting| LoadReading {
            running,
            waiting,
            ..LoadReading::default()
        };
        load.store(&reading(3, 0), ttl);
        assert_eq!(load.slots(), None, "not saturated: nothing known");
        load.store(&reading(4, 2), ttl);
        assert_eq!(load.slots(), Some(4));
        load.store(&reading(1, 0), ttl);
        load.clear();
        assert_eq!(load.slots(), Some(4), "kept while idle or unreachable");
        load.store(&reading(6, 0), ttl);
        assert_eq!(load.slots(), Some(6), "it ran more: it grew");
        load.store(&reading(2, 1), ttl);
        assert_eq!(load.slots(), Some(2), "restarted smaller");
    }

    #[test]
    fn readings_expire_and_clear() {
        let load = BackendLoad::default();
        assert_eq!(load.view(now_ms()), None);
        let reading = LoadReading {
            running: 2,
            waiting: 3,
            kv_usage: 0.4,
            adapters: vec!["sql".into()],
            cache_tokens: Some(4096),
            prefix_hit_rate: None,
        };
        load.store(&reading, Duration::from_secs(60));
        assert_eq!(load.cache_tokens(), Some(4096));
        let now = now_ms();
        let view = load.view(now).unwrap();
        assert_eq!((view.queued, view.waiting, view.kv_usage), (5, 3, 0.4));
        assert!(load.has_adapter("sql", now));
        assert!(!load.has_adapter("chat", now));
        assert_eq!(load.view(now + 61_000), None);
        load.clear();
        assert_eq!(load.view(now), None);
        assert!(!load.has_adapter("sql", now));
    }
}
