//! Cache-aware routing: each request goes to an endpoint that probably
//! holds a long prefix of its prompt in its prefix cache, unless that
//! endpoint is too busy.
//!
//! Endpoints busier than [`CacheAwareOptions::load_bound_floor`] that took
//! more than their bounded share of the recent picks (`boundedLoad ÷
//! endpoints` of [`RoutingOptions`](super::RoutingOptions),
//! [`CACHE_AWARE_BOUNDED_LOAD_FACTOR`] unless the model sets one; see
//! [`super::pick_share`]), and those with [`IN_FLIGHT_CAP_MULTIPLE`] times
//! the bounded-load limit in flight, are passed over while another is
//! within it, so a hot prefix overflows to the next endpoint (which then
//! caches it too) instead of melting one pod. Among the others:
//!
//! 1. when one holds more than [`CacheAwareOptions::match_threshold`] of the
//!    prompt (as SGLang's `cache_aware` policy, with its cache threshold),
//!    one of the endpoints holding the longest prefix serves it;
//! 2. otherwise the prompt is placed on one of the endpoints whose index
//!    holds the fewest blocks, where it evicts least (as SGLang places one
//!    on its smallest tree).
//!
//! Among the equals of either case a rendezvous hash of the prompt's first
//! block chooses, the same on every gateway replica whatever its own load,
//! and an endpoint with the requested LoRA adapter loaded comes first. With
//! the threshold at 1, and for requests without prompt text, a score
//! decides instead (equal scores: adapter, fewest blocks held, rotation):
//!
//! ```text
//! score = prefix_weight × (leading prompt blocks the endpoint holds ÷ prompt blocks)
//!       − load_weight   × (load ÷ highest load among the candidates)
//!       − kv_weight     × KV-cache use reported by the engine (0..1)
//! load  = max(requests in flight from this gateway,
//!             requests the engine reports running + waiting)
//! ```
//!
//! A request that names a session (`X-Session-ID`, `X-Conversation-ID`,
//! body `session_id`) keeps to its session's pod on the hash ring, as
//! session affinity does.

use super::endpoints::EndpointSet;
use super::prefix_index::DEFAULT_BLOCKS_PER_ENDPOINT;
use super::{RoutingOptions, DEFAULT_BLOCK_SIZE, DEFAULT_BOUNDED_LOAD_FACTOR};

/// The bounded-load factor of cache-aware picks when the model sets none:
/// a pod may take 1.6 times its share of the recent picks before its
/// cached prefixes overflow elsewhere, which keeps the pod of a tenant
/// sending half the traffic under twice the mean. Looser than the hash
/// strategies' [`DEFAULT_BOUNDED_LOAD_FACTOR`], because a cache-aware
/// overflow costs a prefill.
pub const CACHE_AWARE_BOUNDED_LOAD_FACTOR: f64 = 1.6;

/// How many times the bounded-load factor a pod's requests in flight may
/// reach (relative to the mean, with [`CacheAwareOptions::load_bound_floor`]
/// below it) before it is passed over whatever its share of the recent
/// picks: a momentary pile-up stays where the prefix is cached, a lasting
/// one overflows.
pub const IN_FLIGHT_CAP_MULTIPLE: f64 = 2.0;

/// How many times the engine's own KV cache the index remembers per
/// endpoint. An engine evicts a prefix that goes unused for a while; the
/// index keeps where it went for longer, so the prefix's next request goes
/// back to that endpoint (a miss either way, but it evicts nothing
/// elsewhere) instead of being placed anew on an endpoint that holds other
/// prefixes.
pub const INDEX_MEMORY_FACTOR: u64 = 2;

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
    /// Blocks remembered per endpoint. `None`: [`INDEX_MEMORY_FACTOR`] times
    /// as many as the engine reports its KV cache holds
    /// (`vllm:cache_config_info`, `sglang:max_total_num_tokens`), else
    /// [`DEFAULT_BLOCKS_PER_ENDPOINT`].
    pub blocks_per_endpoint: Option<usize>,
    /// Requests in flight a pod may always hold before the load bound
    /// passes it over, whatever its share of the recent picks: at low
    /// traffic the bound would otherwise scatter a tenant's few requests.
    pub load_bound_floor: usize,
    /// Share of the prompt (0..1) an endpoint must hold for the longest
    /// cached prefix to decide the pick; below it the prompt is placed
    /// where the index holds least. 1 turns both rules off for the
    /// weighted score.
    pub match_threshold: f64,
}

impl Default for CacheAwareOptions {
    /// Match threshold 0.3 (SGLang's default cache threshold); score
    /// weights prefix 2, load 1, KV use 0.5; blocks as the engine reports.
    fn default() -> Self {
        Self {
            prefix_weight: 2.0,
            load_weight: 1.0,
            kv_weight: 0.5,
            block_size: DEFAULT_BLOCK_SIZE,
            blocks_per_endpoint: None,
            load_bound_floor: 4,
            match_threshold: 0.3,
        }
    }
}

impl CacheAwareOptions {
    /// Blocks to remember for an endpoint whose engine reported a KV cache
    /// of `engine_tokens` tokens (if it did).
    pub fn capacity(&self, engine_tokens: Option<u64>) -> usize {
        self.blocks_per_endpoint
            .or_else(|| {
                let blocks = INDEX_MEMORY_FACTOR
                    .saturating_mul(engine_tokens? / self.block_size.max(1) as u64);
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
        if !(0.0..=1.0).contains(&self.match_threshold) {
            return Err(format!(
                "cacheAware.matchThreshold must be between 0 and 1, got {}",
                self.match_threshold
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
                "matchThreshold" => {
                    opts.match_threshold = value.parse().map_err(|_| number("a number"))?;
                }
                _ => {
                    return Err(format!(
                        "unknown key {key:?}: expected prefixWeight, loadWeight, kvWeight, \
                         blockSize, blocksPerEndpoint, loadBoundFloor or matchThreshold"
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
    /// Requests in flight from this gateway.
    in_flight: usize,
    within_bound: bool,
    /// Busier than the floor and over its share of the recent picks.
    over_share: bool,
    /// Blocks the endpoint's index holds (filled only when placing a
    /// prompt no endpoint holds enough of).
    held: usize,
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
        let factor = opts.bounded_load.unwrap_or(CACHE_AWARE_BOUNDED_LOAD_FACTOR);
        let floor = weights.load_bound_floor;
        // A pile-up of requests in flight passes a pod over whatever its
        // share; below that, a pod busier than the floor is passed over
        // while it takes more than its bounded share of the recent picks.
        let cap = RoutingOptions::with_bounded_load(IN_FLIGHT_CAP_MULTIPLE * factor)
            .load_bound(self.total_in_flight(), n)
            .map(|b| b.max(floor));
        let share_bound = factor / n as f64;
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
                in_flight,
                within_bound: cap.is_none_or(|b| in_flight <= b),
                over_share: false,
                held: 0,
            });
        }
        if candidates.is_empty() {
            return None;
        }
        // Shares matter only for pods busier than the floor: at low load,
        // none are computed.
        if candidates.iter().any(|c| c.in_flight > floor) {
            let shares = self.pick_shares();
            for c in candidates.iter_mut() {
                c.over_share = c.in_flight > floor && shares[c.idx] > share_bound;
            }
        }
        pass_over_shares(&mut candidates, weights.match_threshold);
        let max_load = candidates.iter().map(|c| c.load).fold(1.0, f64::max);
        let any_within = candidates.iter().any(|c| c.within_bound);
        let eligible = |c: &Candidate| c.within_bound || !any_within;
        // The longest prefix among the eligible decides when it is long
        // enough (shares are whole blocks: half a block absorbs rounding).
        let longest_eligible = candidates
            .iter()
            .filter(|c| eligible(c))
            .map(|c| c.share)
            .fold(0.0, f64::max);
        let long_match = longest_eligible > weights.match_threshold;
        let min_share = if long_match {
            longest_eligible - 0.5 / prompt_blocks
        } else {
            f64::NEG_INFINITY
        };
        // With the threshold rule on, a prompt goes to one endpoint among
        // equals chosen by a rendezvous hash of its first block, the same on
        // every gateway replica whatever its own load:
        // - equals are the eligible endpoints holding its longest prefix,
        //   when that is long enough: the prefix keeps to one of them until
        //   it is over the bound, then overflows to the next;
        // - otherwise, the eligible endpoints whose index holds the fewest
        //   blocks, where a new prefix evicts least (as SGLang places one on
        //   its smallest tree); prompts arriving at once spread over them.
        // With the rule off (1), or without a prompt, the score decides.
        let hashed = weights.match_threshold < 1.0 && !request.blocks.is_empty();
        let most_held = if !hashed || long_match {
            usize::MAX
        } else {
            let held = self
                .prefix_index()
                .held_counts(candidates.iter().map(|c| self.upstream(c.idx).addr));
            for (c, h) in candidates.iter_mut().zip(held) {
                c.held = h;
            }
            candidates
                .iter()
                .filter(|c| eligible(c))
                .map(|c| c.held)
                .min()
                .unwrap_or(usize::MAX)
        };
        // Among those, a new prefix skips the pods more than one request
        // busier than their mean, so that prompts sharing nothing (every
        // index equally full) are still spread by load, while the small
        // differences between replicas' own counts do not split a tenant.
        let placing_load = if most_held == usize::MAX {
            f64::INFINITY
        } else {
            let (sum, count) = candidates
                .iter()
                .filter(|c| eligible(c) && c.held == most_held)
                .fold((0.0, 0.0), |(s, n), c| (s + c.load, n + 1.0));
            sum / f64::max(count, 1.0) + 1.0
        };
        let score = |c: &Candidate| {
            weights.prefix_weight * c.share
                - weights.load_weight * c.load / max_load
                - weights.kv_weight * c.kv
        };

        let mut best = f64::NEG_INFINITY;
        let mut ties: Vec<usize> = Vec::new();
        for (pos, c) in candidates.iter().enumerate() {
            if !eligible(c) || c.share < min_share || c.held > most_held || c.load > placing_load {
                continue;
            }
            let s = if hashed { 0.0 } else { score(c) };
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
        if ties.len() > 1 && !hashed {
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
        let chosen = if hashed {
            let root = request.blocks[0];
            ties.iter()
                .map(|&pos| &candidates[pos])
                .max_by_key(|c| rendezvous(root, self.upstream(c.idx).addr))
                .unwrap_or(&candidates[ties[0]])
        } else {
            &candidates[ties[self.tick() % ties.len()]]
        };
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

/// Takes the pods over their share out of the bound, except one that alone
/// holds the longest prefix of the prompt (a conversation only it has seen)
/// while a pod within its share holds more than `threshold` of it: the
/// pod's new conversations already go elsewhere, and moving this one would
/// cost its history. A pod holding its prefix alone is passed over, so the
/// prefix spills.
fn pass_over_shares(candidates: &mut [Candidate], threshold: f64) {
    if !candidates.iter().any(|c| c.over_share && c.within_bound) {
        return;
    }
    let longest = candidates.iter().map(|c| c.share).fold(0.0, f64::max);
    let sole_holder = {
        let mut holders = candidates
            .iter()
            .filter(|c| c.share >= longest && longest > 0.0);
        match (holders.next(), holders.next()) {
            (Some(c), None) => Some(c.idx),
            _ => None,
        }
    };
    let spill_ready = candidates
        .iter()
        .any(|c| c.within_bound && !c.over_share && c.share > threshold);
    for c in candidates.iter_mut() {
        if c.over_share && !(spill_ready && sole_holder == Some(c.idx)) {
            c.within_bound = false;
        }
    }
}

/// The rendezvous (highest random weight) hash of a prompt's first block on
/// an endpoint: every gateway computes the same one.
fn rendezvous(root: u64, addr: std::net::SocketAddr) -> u64 {
    let mut key = [0u8; 18];
    match addr.ip() {
        std::net::IpAddr::V4(ip) => key[..4].copy_from_slice(&ip.octets()),
        std::net::IpAddr::V6(ip) => key[..16].copy_from_slice(&ip.octets()),
    }
    key[16..].copy_from_slice(&addr.port().to_be_bytes());
    xxhash_rust::xxh3::xxh3_64_with_seed(&key, root)
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
    fn equal_holders_keep_a_prefix_on_one_until_it_is_over_its_share() {
        let set = EndpointSet::new(pods(4));
        let blocks = prompt("alpha ", "x");
        for pod in [0, 1] {
            set.prefix_index()
                .record(set.upstream(pod).addr, blocks.hashes(), 1000);
        }
        let (first, why) = pick(&set, &blocks);
        assert!(first < 2);
        assert_eq!(why, Decision::PrefixHit);
        // Busier than the other holder, even over the floor, yet within
        // its share of the picks: it keeps the prefix.
        let _busy: Vec<_> = (0..6).map(|_| set.track(first)).collect();
        for _ in 0..4 {
            assert_eq!(pick(&set, &blocks), (first, Decision::PrefixHit));
        }
        // Once it has taken most of the recent picks, the other holder
        // serves.
        set.record_picks(first, 100);
        assert_eq!(pick(&set, &blocks), (1 - first, Decision::PrefixHit));
    }

    #[test]
    fn a_momentary_pile_up_on_the_holder_does_not_move_its_prefix() {
        let set = EndpointSet::new(pods(4));
        let blocks = prompt("hot ", "x");
        let (home, _) = pick(&set, &blocks);
        // Picks spread evenly so far; now eight requests pile up on the
        // prefix's pod (the bounded-load bound of 1.6 would be 4).
        for pod in 0..4 {
            set.record_picks(pod, 30);
        }
        let _busy: Vec<_> = (0..8).map(|_| set.track(home)).collect();
        for _ in 0..3 {
            assert_eq!(pick(&set, &blocks), (home, Decision::PrefixHit));
        }
    }

    #[test]
    fn the_in_flight_cap_passes_over_a_pod_whatever_its_share() {
        let set = EndpointSet::new(pods(4));
        let blocks = prompt("hot ", "x");
        let (home, _) = pick(&set, &blocks);
        for pod in 0..4 {
            set.record_picks(pod, 30);
        }
        let _others: Vec<_> = (0..4)
            .filter(|&i| i != home)
            .map(|i| set.track(i))
            .collect();
        // Cap: ceil(2 × 1.6 × (total + 1) / 4): with one in flight on each
        // other pod, 20 on the home pod stay (cap 20) and 21 are over it.
        let mut busy: Vec<_> = (0..20).map(|_| set.track(home)).collect();
        assert_eq!(pick(&set, &blocks), (home, Decision::PrefixHit));
        busy.push(set.track(home));
        let (spilled, why) = pick(&set, &blocks);
        assert_ne!(spilled, home);
        assert_eq!(why, Decision::Load);
    }

    #[test]
    fn a_flood_of_picks_is_bounded() {
        let set = EndpointSet::new(pods(4));
        for pod in 0..4 {
            set.record_picks(pod, 30);
        }
        // A peer claiming billions of picks cannot wrap the stamps: the
        // pod's share is near one, not garbage, and fades as picks go on.
        set.record_picks(0, u32::MAX);
        let shares = set.pick_shares();
        assert!(shares[0] > 0.9 && shares[0] <= 1.0, "{shares:?}");
        for i in 0..2000 {
            set.record_picks(1 + i % 3, 1);
        }
        let shares = set.pick_shares();
        assert!(shares[0] < 0.01, "{shares:?}");
        assert!(shares[1..].iter().all(|s| (s - 1.0 / 3.0).abs() < 0.05));
    }

    #[test]
    fn a_quiet_pod_keeps_its_prefix_whatever_its_share() {
        // Under the floor of requests in flight, the share does not count:
        // at low traffic a tenant's few requests stay together.
        let set = EndpointSet::new(pods(4));
        let blocks = prompt("hot ", "x");
        let (home, _) = pick(&set, &blocks);
        set.record_picks(home, 500);
        let _busy: Vec<_> = (0..4).map(|_| set.track(home)).collect();
        assert_eq!(pick(&set, &blocks), (home, Decision::PrefixHit));
    }

    #[test]
    fn a_pod_over_its_share_keeps_the_conversations_only_it_holds() {
        let set = EndpointSet::new(pods(4));
        let (home, _) = pick(&set, &prompt("hot ", "x"));
        set.record_picks(home, 200);
        let _busy: Vec<_> = (0..6).map(|_| set.track(home)).collect();
        // Over its share, the sole holder of the tenant's prompt is passed
        // over: the tenant spills to a second pod.
        let (second, why) = pick(&set, &prompt("hot ", "y"));
        assert_ne!(second, home);
        assert_eq!(why, Decision::Load);
        // From then on new conversations go to the second pod, while one
        // whose history only the home pod holds stays there.
        let conversation = {
            let system = "hot ".repeat(1000);
            let text = format!(
                "{system}\nx\n{}\n",
                "a long answer and a follow-up ".repeat(40)
            );
            PromptBlocks::of_text(text.as_bytes(), 16)
        };
        set.prefix_index()
            .record(set.upstream(home).addr, conversation.hashes(), 1000);
        assert_eq!(
            pick(&set, &prompt("hot ", "z")),
            (second, Decision::PrefixHit)
        );
        assert_eq!(pick(&set, &conversation), (home, Decision::PrefixHit));
    }

    #[test]
    fn load_and_engine_queues_place_a_request_without_prompt_text() {
        let set = EndpointSet::new(pods(2));
        let none = PromptBlocks::default();
        let _busy = set.track(0);
        assert_eq!(pick(&set, &none), (1, Decision::Fallback));
        drop(_busy);
        // The gateway sends nothing to pod 1, but its engine reports a queue
        // (other gateways' requests).
        let queued = LoadReading {
            running: 8,
            waiting: 4,
            ..LoadReading::default()
        };
        set.backend_load(1).store(&queued, Duration::from_secs(60));
        assert_eq!(pick(&set, &none), (0, Decision::Fallback));
    }

    #[test]
    fn a_hot_prefix_spills_once_its_pod_takes_over_its_share() {
        let set = EndpointSet::new(pods(4));
        let blocks = prompt("hot ", "x");
        let (home, _) = pick(&set, &blocks);
        // Share bound: 1.6 ÷ 4 pods = 0.4 of the recent picks, counted once
        // the pod is busier than the floor of 4 in flight.
        set.record_picks(home, 100);
        let guards: Vec<_> = (0..5).map(|_| set.track(home)).collect();
        let (spilled, why) = pick(&set, &blocks);
        assert_ne!(spilled, home);
        assert_eq!(why, Decision::Load);
        drop(guards);
        // Both now hold the prompt, and one of them keeps it.
        let (kept, why) = pick(&set, &blocks);
        assert!(kept == home || kept == spilled);
        assert_eq!(why, Decision::PrefixHit);
        assert_eq!(pick(&set, &blocks).0, kept);
    }

    #[test]
    fn a_prefix_over_the_match_threshold_beats_an_idle_pod() {
        // Pod 0 holds the first `held` blocks of the prompt and has 3
        // requests in flight; pod 1 holds nothing and is idle. (A pick
        // records the whole prompt on its pod, so each case starts afresh.)
        let blocks = prompt("alpha ", "x");
        let request = CacheAwareRequest {
            blocks: blocks.hashes(),
            ..CacheAwareRequest::default()
        };
        let pick_with = |held: usize, opts: &RoutingOptions| {
            let set = EndpointSet::new(pods(2));
            set.prefix_index()
                .record(set.upstream(0).addr, &blocks.hashes()[..held], 1000);
            let _busy: Vec<_> = (0..3).map(|_| set.track(0)).collect();
            let (idx, _g, why) = set.pick_cache_aware(&request, opts, &[]).unwrap();
            (idx, why)
        };
        let forty_percent = blocks.hashes().len() * 2 / 5;
        // The weighted score alone (2 × 0.4 − 1 against 0) would pick pod 1.
        assert_eq!(pick_with(forty_percent, &opts()), (0, Decision::PrefixHit));
        // Under the threshold, or with the rule off, the score decides.
        assert_eq!(pick_with(forty_percent / 2, &opts()), (1, Decision::Load));
        let off = RoutingOptions {
            cache_aware: CacheAwareOptions {
                match_threshold: 1.0,
                ..CacheAwareOptions::default()
            },
            ..RoutingOptions::default()
        };
        assert_eq!(pick_with(forty_percent, &off), (1, Decision::Load));
    }

    #[test]
    fn a_new_prefix_goes_where_the_index_holds_least_even_when_busier() {
        let set = EndpointSet::new(pods(3));
        // Pods 0 and 1 hold a tenant each and are idle; pod 2 holds nothing
        // and has two requests in flight.
        for (pod, tenant) in [(0, "alpha "), (1, "beta ")] {
            set.prefix_index()
                .record(set.upstream(pod).addr, prompt(tenant, "x").hashes(), 1000);
        }
        let _busy = [set.track(2), set.track(2)];
        assert_eq!(pick(&set, &prompt("gamma ", "x")), (2, Decision::Load));
        // Well above the mean load it is passed over like any other.
        let _more: Vec<_> = (0..4).map(|_| set.track(2)).collect();
        assert_ne!(pick(&set, &prompt("delta ", "x")).0, 2);
    }

    #[test]
    fn replicas_place_new_prefixes_alike_whatever_their_own_load() {
        // Two gateways over the same pods, each with its own requests in
        // flight, place the same new prompt on the same pod; four tenants
        // arriving one after another take four pods.
        let (a, b) = (EndpointSet::new(pods(4)), EndpointSet::new(pods(4)));
        let _a_busy = [a.track(0), a.track(1)];
        let _b_busy = [b.track(2), b.track(3)];
        let tenants = ["alpha ", "beta ", "gamma ", "delta "];
        let placed: Vec<usize> = tenants
            .iter()
            .map(|t| {
                let (on_a, why) = pick(&a, &prompt(t, "x"));
                assert_eq!(why, Decision::Load);
                assert_eq!(pick(&b, &prompt(t, "x")).0, on_a, "{t}");
                on_a
            })
            .collect();
        let distinct: std::collections::HashSet<_> = placed.iter().collect();
        assert_eq!(distinct.len(), 4, "{placed:?}");
    }

    #[test]
    fn new_prefixes_skip_a_pod_well_above_the_mean_load() {
        // Nothing is shared, so every index holds as much; pod 0 has three
        // requests in flight (mean 1.5): every new prompt goes to pod 1.
        let set = EndpointSet::new(pods(2));
        let _busy: Vec<_> = (0..3).map(|_| set.track(0)).collect();
        for i in 0..8 {
            let blocks = prompt(&format!("tenant{i} "), "x");
            set.prefix_index().retain(|_| false);
            assert_eq!(pick(&set, &blocks), (1, Decision::Load), "{i}");
        }
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
    fn the_index_remembers_twice_what_the_engine_says_it_caches() {
        let auto = CacheAwareOptions::default();
        assert_eq!(auto.capacity(None), DEFAULT_BLOCKS_PER_ENDPOINT);
        assert_eq!(auto.capacity(Some(3_200)), 400);
        assert_eq!(auto.capacity(Some(3)), DEFAULT_BLOCKS_PER_ENDPOINT);
        let fixed = CacheAwareOptions {
            blocks_per_endpoint: Some(50),
            ..auto
        };
        assert_eq!(fixed.capacity(Some(3_200)), 50);
    }

    #[test]
    fn options_parse_from_an_annotation() {
        let opts: CacheAwareOptions =
            " prefixWeight=3, blockSize=32 ,blocksPerEndpoint=100,matchThreshold=0.5"
                .parse()
                .unwrap();
        assert_eq!(opts.match_threshold, 0.5);
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
            "matchThreshold=1.5",
            "matchThreshold=-0.1",
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
