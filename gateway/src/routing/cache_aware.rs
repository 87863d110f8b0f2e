//! Cache-aware routing: every ready endpoint of the model is scored by how
//! much of the prompt it probably holds in its prefix cache and by how busy
//! it is, and the best one serves the request.
//!
//! ```text
//! score = prefix_weight × (leading prompt blocks the endpoint holds ÷ prompt blocks)
//!       − load_weight   × (load ÷ highest load among the candidates)
//!       − kv_weight     × KV-cache use reported by the engine (0..1)
//! load  = max(requests in flight from this gateway,
//!             requests the engine reports running + waiting)
//! ```
//!
//! Endpoints over the bounded-load limit (the CHWBL bound of
//! [`RoutingOptions`](super::RoutingOptions), [`DEFAULT_BOUNDED_LOAD_FACTOR`]
//! unless the model sets one, never below
//! [`CacheAwareOptions::load_bound_floor`]) are passed over while another
//! is within it,
//! so a hot prefix spills to the next best endpoint (which then caches it
//! too) instead of melting one pod. Equal scores go to an endpoint that has
//! the requested LoRA adapter loaded, then to the one whose index holds the
//! fewest blocks (least cache pressure; replicas sharing their indexes
//! agree on it), then rotate. A request that names a
//! session (`X-Session-ID`, `X-Conversation-ID`, body `session_id`) keeps to
//! its session's pod on the hash ring, as session affinity does.

use super::endpoints::EndpointSet;
use super::prefix_index::DEFAULT_BLOCKS_PER_ENDPOINT;
use super::{RoutingOptions, DEFAULT_BLOCK_SIZE, DEFAULT_BOUNDED_LOAD_FACTOR};

/// Per-model weights and sizes of cache-aware routing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheAwareOptions {
    /// Weight of the cached-prefix share (0..1).
    pub prefix_weight: f64,
    /// Weight of the load relative to the busiest candidate (0..1).
    pub load_weight: f64,
    /// Weight of the engine's KV-cache use (0..1).
    pub kv_weight: f64,
    /// Tokens per block (the engine's block size).
    pub block_size: usize,
    /// Blocks remembered per endpoint. `None`: as many as the engine
    /// reports its KV cache holds (`vllm:cache_config_info`,
    /// `sglang:max_total_num_tokens`), else
    /// [`DEFAULT_BLOCKS_PER_ENDPOINT`].
    pub blocks_per_endpoint: Option<usize>,
    /// Requests in flight a pod may always hold before the load bound
    /// passes it over: at low traffic the bound (which scales with the
    /// total) would otherwise scatter a tenant's few requests.
    pub load_bound_floor: usize,
}

impl Default for CacheAwareOptions {
    /// Prefix 2, load 1, KV use 0.5, blocks as the engine reports: a pod holding more than half of the
    /// prompt wins over an idle one that holds nothing, unless it is the
    /// busiest by far or over the load bound.
    fn default() -> Self {
        Self {
            prefix_weight: 2.0,
            load_weight: 1.0,
            kv_weight: 0.5,
            block_size: DEFAULT_BLOCK_SIZE,
            blocks_per_endpoint: None,
            load_bound_floor: 4,
        }
    }
}

impl CacheAwareOptions {
    /// Blocks to remember for an endpoint whose engine reported a KV cache
    /// of `engine_tokens` tokens (if it did).
    pub fn capacity(&self, engine_tokens: Option<u64>) -> usize {
        self.blocks_per_endpoint
            .or_else(|| {
                let blocks = engine_tokens? / self.block_size.max(1) as u64;
                (blocks > 0).then(|| usize::try_from(blocks).unwrap_or(usize::MAX))
            })
            .unwrap_or(DEFAULT_BLOCKS_PER_ENDPOINT)
    }

    /// Checks the options when the model config is loaded.
    pub fn validate(&self) -> Result<(), String> {
        for (name, weight) in [
            ("prefixWeight", self.prefix_weight),
            ("loadWeight", self.load_weight),
            ("kvWeight", self.kv_weight),
        ] {
            if !weight.is_finite() || weight < 0.0 {
                return Err(format!(
                    "cacheAware.{name} must be a finite number >= 0, got {weight}"
                ));
            }
        }
        if !(1..=1024).contains(&self.block_size) {
            return Err(format!(
                "cacheAware.blockSize must be between 1 and 1024 tokens, got {}",
                self.block_size
            ));
        }
        if self.blocks_per_endpoint == Some(0) {
            return Err("cacheAware.blocksPerEndpoint must be at least 1".to_owned());
        }
        Ok(())
    }
}

impl std::str::FromStr for CacheAwareOptions {
    type Err = String;

    /// Reads `key=value` pairs separated by commas, with the model file's
    /// field names (`prefixWeight=3, blockSize=32`); absent keys keep their
    /// defaults. The result is validated.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut opts = CacheAwareOptions::default();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| format!("expected key=value, got {pair:?}"))?;
            let number = |what: &str| format!("{key}: {value:?} is not {what}");
            match key {
                "prefixWeight" => {
                    opts.prefix_weight = value.parse().map_err(|_| number("a number"))?
                }
                "loadWeight" => opts.load_weight = value.parse().map_err(|_| number("a number"))?,
                "kvWeight" => opts.kv_weight = value.parse().map_err(|_| number("a number"))?,
                "blockSize" => opts.block_size = value.parse().map_err(|_| number("a count"))?,
                "blocksPerEndpoint" => {
                    opts.blocks_per_endpoint = Some(value.parse().map_err(|_| number("a count"))?);
                }
                "loadBoundFloor" => {
                    opts.load_bound_floor = value.parse().map_err(|_| number("a count"))?;
                }
                _ => {
                    return Err(format!(
                        "unknown key {key:?}: expected prefixWeight, loadWeight, kvWeight, \
                         blockSize, blocksPerEndpoint or loadBoundFloor"
                    ))
                }
            }
        }
        opts.validate()?;
        Ok(opts)
    }
}

/// What cache-aware routing knows of one request.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheAwareRequest<'a> {
    /// The prompt's chained block hashes ([`super::PromptBlocks`]).
    pub blocks: &'a [u64],
    /// A session the client named, kept on its pod.
    pub session: Option<&'a str>,
    /// The LoRA adapter the request asks for.
    pub adapter: Option<&'a str>,
}

/// Why cache-aware routing chose an endpoint (the `reason` metrics label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The endpoint holds the longest cached prefix of the prompt.
    PrefixHit,
    /// Chosen on load: no endpoint holds a prefix, or the one that does was
    /// too busy.
    Load,
    /// The client's session key placed it.
    Session,
    /// Nothing to score the prompt by (no prompt text, or too short for
    /// one block): chosen on load alone.
    Fallback,
}

impl Decision {
    /// The metrics label and debug-header value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::PrefixHit => "prefix_hit",
            Decision::Load => "load",
            Decision::Session => "session",
            Decision::Fallback => "fallback",
        }
    }
}

/// One candidate's figures.
struct Candidate {
    idx: usize,
    share: f64,
    load: f64,
    kv: f64,
    within_bound: bool,
}

impl EndpointSet {
    /// The cache-aware pick among the endpoints `usable` admits; `matched`
    /// lists `(endpoint index, leading blocks held)` from the prefix index.
    pub(super) fn cache_aware(
        &self,
        request: &CacheAwareRequest<'_>,
        matched: &[(usize, usize)],
        opts: &RoutingOptions,
        usable: &impl Fn(usize) -> bool,
    ) -> Option<(usize, Decision)> {
        if let Some(session) = request.session {
            let bounded = RoutingOptions {
                bounded_load: Some(opts.bounded_load.unwrap_or(DEFAULT_BOUNDED_LOAD_FACTOR)),
                ..*opts
            };
            return self
                .hashed(session.as_bytes(), &bounded, usable)
                .map(|i| (i, Decision::Session));
        }
        let weights = &opts.cache_aware;
        let n = self.len();
        let factor = opts.bounded_load.unwrap_or(DEFAULT_BOUNDED_LOAD_FACTOR);
        let bound = RoutingOptions::with_bounded_load(factor)
            .load_bound(self.total_in_flight(), n)
            .map(|b| b.max(weights.load_bound_floor));
        let now = super::backend_load::now_ms();
        let prompt_blocks = request.blocks.len().max(1) as f64;

        let mut candidates: Vec<Candidate> = Vec::with_capacity(n);
        for idx in (0..n).filter(|&i| usable(i)) {
            let in_flight = self.in_flight(idx);
            let engine = self.backend_load(idx).view(now);
            let queued = engine.map_or(0, |v| v.queued as usize);
            let held = matched
                .iter()
                .find_map(|&(i, blocks)| (i == idx).then_some(blocks))
                .unwrap_or(0);
            candidates.push(Candidate {
                idx,
                share: held as f64 / prompt_blocks,
                load: in_flight.max(queued) as f64,
                kv: engine.map_or(0.0, |v| v.kv_usage),
                within_bound: bound.is_none_or(|b| in_flight <= b),
            });
        }
        if candidates.is_empty() {
            return None;
        }
        let max_load = candidates.iter().map(|c| c.load).fold(1.0, f64::max);
        let any_within = candidates.iter().any(|c| c.within_bound);
        let score = |c: &Candidate| {
            weights.prefix_weight * c.share
                - weights.load_weight * c.load / max_load
                - weights.kv_weight * c.kv
        };

        let mut best = f64::NEG_INFINITY;
        let mut ties: Vec<usize> = Vec::new();
        for (pos, c) in candidates.iter().enumerate() {
            if any_within && !c.within_bound {
                continue;
            }
            let s = score(c);
            if s > best + 1e-9 {
                best = s;
                ties.clear();
                ties.push(pos);
            } else if (s - best).abs() <= 1e-9 {
                ties.push(pos);
            }
        }
        if let Some(adapter) = request.adapter {
            let with_adapter: Vec<usize> = ties
                .iter()
                .copied()
                .filter(|&pos| {
                    self.backend_load(candidates[pos].idx)
                        .has_adapter(adapter, now)
                })
                .collect();
            if !with_adapter.is_empty() {
                ties = with_adapter;
            }
        }
        if ties.len() > 1 {
            // The endpoint holding the fewest blocks: the least cache
            // pressure, and a picture replicas sharing their indexes agree
            // on, where their own rotations would not.
            let held = self.prefix_index().held_counts(
                ties.iter()
                    .map(|&pos| self.upstream(candidates[pos].idx).addr),
            );
            let least = held.iter().copied().min().unwrap_or(0);
            ties = ties
                .iter()
                .zip(&held)
                .filter(|(_, &h)| h == least)
                .map(|(&pos, _)| pos)
                .collect();
        }
        let chosen = &candidates[ties[self.tick() % ties.len()]];
        let longest = candidates.iter().map(|c| c.share).fold(0.0, f64::max);
        let decision = if request.blocks.is_empty() {
            Decision::Fallback
        } else if chosen.share > 0.0 && chosen.share >= longest {
            Decision::PrefixHit
        } else {
            Decision::Load
        };
        Some((chosen.idx, decision))
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::*;
    use crate::routing::backend_load::LoadReading;
    use crate::routing::{PromptBlocks, Upstream};

    fn pods(n: u8) -> Vec<Upstream> {
        (1..=n)
            .map(|i| SocketAddr::from(([10, 0, 0, i], 8000)).into())
            .collect()
    }

    fn prompt(tenant: &str, turn: &str) -> PromptBlocks {
        let system = tenant.repeat(4000 / tenant.len());
        PromptBlocks::of_text(format!("{system}\n{turn}\n").as_bytes(), 16)
    }

    fn opts() -> RoutingOptions {
        RoutingOptions::default()
    }

    fn pick(set: &EndpointSet, blocks: &PromptBlocks) -> (usize, Decision) {
        let request = CacheAwareRequest {
            blocks: blocks.hashes(),
            ..CacheAwareRequest::default()
        };
        let (idx, _guard, decision) = set.pick_cache_aware(&request, &opts(), &[]).unwrap();
        (idx, decision)
    }

    #[test]
    fn a_shared_prefix_returns_to_its_pod_even_when_it_is_busier() {
        let set = EndpointSet::new(pods(4));
        let (first, why) = pick(&set, &prompt("alpha ", "hello"));
        assert_eq!(why, Decision::Load);
        // The pod that holds the prefix has two requests in flight, the
        // others none: a least-loaded pick would go elsewhere.
        let _busy = [set.track(first), set.track(first)];
        for turn in ["second turn", "third turn", "fourth"] {
            assert_eq!(
                pick(&set, &prompt("alpha ", turn)),
                (first, Decision::PrefixHit)
            );
        }
        // Another tenant goes elsewhere: nothing of it is cached anywhere.
        let (other, why) = pick(&set, &prompt("beta ", "hello"));
        assert_ne!(other, first);
        assert_eq!(why, Decision::Load);
    }

    #[test]
    fn load_decides_between_equal_prefixes_and_the_engine_queue_counts() {
        let set = EndpointSet::new(pods(2));
        let blocks = prompt("alpha ", "x");
        set.prefix_index()
            .record(set.upstream(0).addr, blocks.hashes(), 1000);
        set.prefix_index()
            .record(set.upstream(1).addr, blocks.hashes(), 1000);
        let _busy = set.track(0);
        assert_eq!(pick(&set, &blocks).0, 1);
        drop(_busy);
        // The gateway sends nothing to pod 1, but its engine reports a queue
        // (other gateways' requests).
        let queued = LoadReading {
            running: 8,
            waiting: 4,
            ..LoadReading::default()
        };
        set.backend_load(1).store(&queued, Duration::from_secs(60));
        assert_eq!(pick(&set, &blocks).0, 0);
    }

    #[test]
    fn a_hot_prefix_spills_over_the_load_bound() {
        let set = EndpointSet::new(pods(4));
        let blocks = prompt("hot ", "x");
        let (home, _) = pick(&set, &blocks);
        // Bound: ceil(1.25 × (total + 1) / 4), at least the floor of 4.
        let guards: Vec<_> = (0..5).map(|_| set.track(home)).collect();
        let (spilled, why) = pick(&set, &blocks);
        assert_ne!(spilled, home);
        assert_eq!(why, Decision::Load);
        drop(guards);
        assert_eq!(pick(&set, &blocks), (home, Decision::PrefixHit));
    }

    #[test]
    fn kv_cache_use_counts_and_garbage_readings_change_nothing() {
        let set = EndpointSet::new(pods(2));
        let full = LoadReading {
            kv_usage: 0.95,
            ..LoadReading::default()
        };
        set.backend_load(0).store(&full, Duration::from_secs(60));
        for _ in 0..4 {
            assert_eq!(
                pick(&set, &PromptBlocks::default()),
                (1, Decision::Fallback)
            );
        }
        // An expired or cleared reading leaves local data only: both pods
        // are picked in turn.
        set.backend_load(0).clear();
        let picks: std::collections::HashSet<usize> = (0..4)
            .map(|_| pick(&set, &PromptBlocks::default()).0)
            .collect();
        assert_eq!(picks.len(), 2);
    }

    #[test]
    fn a_removed_endpoint_is_forgotten_and_never_picked() {
        let set = EndpointSet::new(pods(3));
        let blocks = prompt("alpha ", "x");
        let (home, _) = pick(&set, &blocks);
        let gone = set.upstream(home).addr;
        let remaining: Vec<Upstream> = set
            .upstreams()
            .iter()
            .filter(|u| u.addr != gone)
            .cloned()
            .collect();
        let set = set.rebuild(remaining);
        assert!(set
            .prefix_index()
            .longest_prefixes(blocks.hashes())
            .is_empty());
        for _ in 0..10 {
            let (idx, _) = pick(&set, &blocks);
            assert_ne!(set.upstream(idx).addr, gone);
        }
    }

    #[test]
    fn adapters_win_ties_and_sessions_keep_their_pod() {
        let set = EndpointSet::new(pods(3));
        let lora = LoadReading {
            adapters: vec!["sql".into()],
            ..LoadReading::default()
        };
        set.backend_load(2).store(&lora, Duration::from_secs(60));
        let request = CacheAwareRequest {
            adapter: Some("sql"),
            ..CacheAwareRequest::default()
        };
        for _ in 0..5 {
            let (idx, _g, _) = set.pick_cache_aware(&request, &opts(), &[]).unwrap();
            assert_eq!(idx, 2);
        }
        let session = CacheAwareRequest {
            session: Some("conversation-7"),
            ..CacheAwareRequest::default()
        };
        let (first, _g, why) = set.pick_cache_aware(&session, &opts(), &[]).unwrap();
        assert_eq!(why, Decision::Session);
        for _ in 0..5 {
            assert_eq!(
                set.pick_cache_aware(&session, &opts(), &[]).unwrap().0,
                first
            );
        }
    }

    #[test]
    fn retries_skip_the_failed_endpoint() {
        let set = EndpointSet::new(pods(2));
        let blocks = prompt("alpha ", "x");
        let (home, _) = pick(&set, &blocks);
        let request = CacheAwareRequest {
            blocks: blocks.hashes(),
            ..CacheAwareRequest::default()
        };
        let (retry, _g, _) = set.pick_cache_aware(&request, &opts(), &[home]).unwrap();
        assert_ne!(retry, home);
    }

    #[test]
    fn the_index_holds_as_much_as_the_engine_says_it_caches() {
        let auto = CacheAwareOptions::default();
        assert_eq!(auto.capacity(None), DEFAULT_BLOCKS_PER_ENDPOINT);
        assert_eq!(auto.capacity(Some(3_200)), 200);
        assert_eq!(auto.capacity(Some(3)), DEFAULT_BLOCKS_PER_ENDPOINT);
        let fixed = CacheAwareOptions {
            blocks_per_endpoint: Some(50),
            ..auto
        };
        assert_eq!(fixed.capacity(Some(3_200)), 50);
    }

    #[test]
    fn options_parse_from_an_annotation() {
        let opts: CacheAwareOptions = " prefixWeight=3, blockSize=32 ,blocksPerEndpoint=100"
            .parse()
            .unwrap();
        assert_eq!(opts.prefix_weight, 3.0);
        assert_eq!(opts.block_size, 32);
        assert_eq!(opts.blocks_per_endpoint, Some(100));
        assert_eq!(opts.load_weight, 1.0);
        assert_eq!(
            "".parse::<CacheAwareOptions>(),
            Ok(CacheAwareOptions::default())
        );
        for bad in [
            "prefixWeight",
            "prefixWeight=x",
            "speed=3",
            "blockSize=0",
            "kvWeight=-1",
        ] {
            assert!(bad.parse::<CacheAwareOptions>().is_err(), "{bad}");
        }
    }

    #[test]
    fn options_validate() {
        assert!(CacheAwareOptions::default().validate().is_ok());
        let bad = CacheAwareOptions {
            load_weight: -1.0,
            ..CacheAwareOptions::default()
        };
        assert!(bad.validate().unwrap_err().contains("loadWeight"));
        let bad = CacheAwareOptions {
            block_size: 0,
            ..CacheAwareOptions::default()
        };
        assert!(bad.validate().unwrap_err().contains("blockSize"));
    }
}
