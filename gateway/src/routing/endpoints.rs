//! Ready endpoints of one model: the ketama ring, in-flight counters and
//! endpoint selection.

mod strategies;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pingora_ketama::{Bucket, Continuum, Version};

use super::backend_load::BackendLoad;
use super::cache_aware::{CacheAwareRequest, Decision};
use super::health::{EndpointHealth, Standing};
use super::in_flight::EndpointState;
pub use super::in_flight::InFlight;
use super::pick_share::{self, PickClock};
use super::prefix_index::PrefixIndex;
use super::strategy::{RoutingOptions, Strategy};
pub use super::upstream::Upstream;

/// Virtual nodes per endpoint on the hash ring: 150, enough points for an
/// even spread over a handful of pods.
pub const VIRTUAL_NODES_PER_ENDPOINT: u32 = 150;

/// Ring node indices are 16-bit, so a set holds at most this many endpoints;
/// further ones are ignored. No model comes anywhere near it.
pub const MAX_ENDPOINTS: usize = u16::MAX as usize;

/// The ready endpoints of one model, with their hash ring and in-flight
/// counters.
///
/// The endpoint list is immutable: when the ready set changes, a new set is
/// built off the request path with [`EndpointSet::rebuild`] and swapped in,
/// while requests still holding the old one finish undisturbed. In-flight
/// counters and health are shared (`Arc`) between a set and its rebuilds,
/// so the load and ejection of a pod that stays are not forgotten when
/// another pod comes or goes.
pub struct EndpointSet {
    upstreams: Box<[Upstream]>,
    counters: Box<[Arc<EndpointState>]>,
    /// `(addr, index)` sorted by address: maps ring nodes back to indices.
    by_addr: Box<[(SocketAddr, usize)]>,
    ring: Continuum,
    /// Rotates round-robin order and least-loaded tie breaks.
    cursor: AtomicUsize,
    /// What cache-aware routing sent where; shared with rebuilds.
    prefix_index: Arc<PrefixIndex>,
    /// Cache-aware picks made so far; shared with rebuilds.
    pick_clock: Arc<PickClock>,
}

impl EndpointSet {
    /// Builds the set and its ring.
    ///
    /// Duplicate addresses are dropped (the first one wins), since the ring
    /// identifies pods by address only; so is anything beyond
    /// [`MAX_ENDPOINTS`]. Building sorts `150 × n` ring points: do it when
    /// the endpoint set changes, never per request.
    pub fn new(upstreams: Vec<Upstream>) -> Self {
        Self::build(upstreams, |_| None, 0, Arc::default(), Arc::default())
    }

    fn build(
        upstreams: Vec<Upstream>,
        existing: impl Fn(&SocketAddr) -> Option<Arc<EndpointState>>,
        cursor: usize,
        prefix_index: Arc<PrefixIndex>,
        pick_clock: Arc<PickClock>,
    ) -> Self {
        let mut kept: Vec<Upstream> = Vec::with_capacity(upstreams.len().min(MAX_ENDPOINTS));
        let mut by_addr: Vec<(SocketAddr, usize)> = Vec::with_capacity(kept.capacity());
        for upstream in upstreams {
            if kept.len() == MAX_ENDPOINTS {
                break;
            }
            if let Err(pos) = by_addr.binary_search_by(|(addr, _)| addr.cmp(&upstream.addr)) {
                by_addr.insert(pos, (upstream.addr, kept.len()));
                kept.push(upstream);
            }
        }
        let counters = kept
            .iter()
            .map(|u| existing(&u.addr).unwrap_or_default())
            .collect();
        let buckets: Vec<Bucket> = kept.iter().map(|u| Bucket::new(u.addr, 1)).collect();
        let ring = Continuum::new_with_version(
            &buckets,
            Version::V2 {
                point_multiple: VIRTUAL_NODES_PER_ENDPOINT,
            },
        );
        EndpointSet {
            upstreams: kept.into_boxed_slice(),
            counters,
            by_addr: by_addr.into_boxed_slice(),
            ring,
            cursor: AtomicUsize::new(cursor),
            prefix_index,
            pick_clock,
        }
    }

    /// Builds the set that replaces this one when the ready endpoints change,
    /// carrying over the in-flight counters (and requests already tracked on
    /// them) of every endpoint that remains.
    /// The prefix index goes along too, forgetting the endpoints that left.
    pub fn rebuild(&self, upstreams: Vec<Upstream>) -> EndpointSet {
        let set = Self::build(
            upstreams,
            |addr| self.index_of(addr).map(|i| Arc::clone(&self.counters[i])),
            self.cursor.load(Ordering::Relaxed),
            Arc::clone(&self.prefix_index),
            Arc::clone(&self.pick_clock),
        );
        set.prefix_index.retain(|addr| set.index_of(addr).is_some());
        set
    }

    /// Whether `upstreams` describes exactly this set (same addresses,
    /// names and weights, in any order, duplicates collapsed as
    /// [`EndpointSet::new`] does), so a periodic refresh can skip the
    /// rebuild. No allocation for up to 128 endpoints.
    pub fn same_endpoints(&self, upstreams: &[Upstream]) -> bool {
        let mut seen = Seen::new(self.len());
        let mut distinct = 0;
        for upstream in upstreams {
            let Some(i) = self.index_of(&upstream.addr) else {
                return false;
            };
            if seen.insert(i) {
                let mine = &self.upstreams[i];
                if mine.name != upstream.name || mine.weight != upstream.weight {
                    return false;
                }
                distinct += 1;
            }
        }
        distinct == self.len()
    }

    /// [`EndpointSet::same_endpoints`], and in the same order: what
    /// [`Strategy::is_ordered`] strategies need before skipping a rebuild.
    pub fn same_sequence(&self, upstreams: &[Upstream]) -> bool {
        self.same_endpoints(upstreams)
            && upstreams.len() == self.len()
            && upstreams
                .iter()
                .zip(self.upstreams.iter())
                .all(|(a, b)| a == b)
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.upstreams.len()
    }

    /// Whether there is no endpoint, in which case the caller falls back to
    /// the Service (or queues the request).
    pub fn is_empty(&self) -> bool {
        self.upstreams.is_empty()
    }

    /// The endpoint at `idx`, as returned by [`EndpointSet::select`].
    ///
    /// # Panics
    /// When `idx` is not below [`EndpointSet::len`].
    pub fn upstream(&self, idx: usize) -> &Upstream {
        &self.upstreams[idx]
    }

    /// All endpoints, in index order.
    pub fn upstreams(&self) -> &[Upstream] {
        &self.upstreams
    }

    /// The index of the endpoint with this address, e.g. to exclude a peer
    /// that just failed when only its address is at hand.
    pub fn index_of(&self, addr: &SocketAddr) -> Option<usize> {
        self.by_addr
            .binary_search_by(|(a, _)| a.cmp(addr))
            .ok()
            .map(|pos| self.by_addr[pos].1)
    }

    /// Requests currently in flight to the endpoint at `idx` (the load that
    /// least-loaded and bounded-load routing compare).
    ///
    /// # Panics
    /// When `idx` is not below [`EndpointSet::len`].
    pub fn in_flight(&self, idx: usize) -> usize {
        self.counters[idx].get()
    }

    /// Requests currently in flight to all endpoints of the set.
    pub fn total_in_flight(&self) -> usize {
        self.counters.iter().map(|c| c.get()).sum()
    }

    /// Picks the endpoint for one request (or one retry).
    ///
    /// - [`Strategy::Default`]: round-robin over the endpoints.
    /// - [`Strategy::SessionAffinity`] / [`Strategy::Prefix`] with a `key`:
    ///   the key's pod on the ring, O(log n); with
    ///   [`RoutingOptions::bounded_load`], walks on along the ring past pods
    ///   over the load bound. Without a key there is no affinity to keep, so
    ///   the request is balanced as [`Strategy::LeastLoaded`] rather than
    ///   sent to an arbitrary pod.
    /// - [`Strategy::LeastLoaded`]: fewest in-flight requests; ties rotate
    ///   among the tied pods rather than always favouring the first.
    /// - [`Strategy::Failover`]: the first endpoint in list order.
    /// - [`Strategy::Weighted`]: rotation in proportion to the weights; when
    ///   every endpoint of weight > 0 is excluded, the first backup (weight
    ///   0) in list order.
    ///
    /// `exclude` lists indices already tried for this request: a retry after
    /// a connect failure goes to another endpoint (for hash strategies, the
    /// next distinct pod along the ring, so retries of one key agree).
    /// Returns `None` when the set is empty or every endpoint is excluded;
    /// when all pods are over the load bound, the key's first non-excluded pod
    /// is returned anyway.
    pub fn select(
        &self,
        strategy: Strategy,
        key: Option<&str>,
        opts: &RoutingOptions,
        exclude: &[usize],
    ) -> Option<usize> {
        self.select_where(strategy, key, opts, |i| !exclude.contains(&i))
    }

    /// [`EndpointSet::select`] among the endpoints `allowed` admits:
    /// those out of rotation ([`EndpointHealth`]) are skipped, unless every
    /// allowed endpoint is out, in which case one is chosen as if none
    /// were, so that a model is never left without an endpoint on the
    /// strength of its health alone.
    fn select_where(
        &self,
        strategy: Strategy,
        key: Option<&str>,
        opts: &RoutingOptions,
        allowed: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let in_rotation =
            |i: usize| allowed(i) && self.counters[i].health.standing() != Standing::Out;
        self.choose(strategy, key, opts, &in_rotation)
            .or_else(|| self.choose(strategy, key, opts, &allowed))
    }

    /// The strategy's pick among the endpoints `usable` admits.
    fn choose(
        &self,
        strategy: Strategy,
        key: Option<&str>,
        opts: &RoutingOptions,
        usable: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        match self.len() {
            0 => return None,
            1 => return usable(0).then_some(0),
            _ => {}
        }
        match (strategy, key) {
            (Strategy::Default, _) => self.round_robin(usable),
            (Strategy::Failover, _) => self.first_usable(usable),
            (Strategy::Weighted, _) => self.weighted(usable),
            (Strategy::SessionAffinity | Strategy::Prefix, Some(key)) => {
                self.hashed(key.as_bytes(), opts, usable)
            }
            (Strategy::LeastLoaded | Strategy::CacheAware, _)
            | (Strategy::SessionAffinity | Strategy::Prefix, None) => self.least_loaded(usable),
        }
    }

    /// Picks the endpoint for one attempt as [`EndpointSet::select`] does
    /// and counts the request on it. An endpoint whose ejection is over is
    /// picked only as its one trial request (the returned guard says so);
    /// when another request holds that trial, the pick moves on.
    pub fn pick(
        &self,
        strategy: Strategy,
        key: Option<&str>,
        opts: &RoutingOptions,
        exclude: &[usize],
    ) -> Option<(usize, InFlight)> {
        self.pick_by(exclude, |usable| self.choose(strategy, key, opts, &usable))
    }

    /// Picks the endpoint for one attempt of a [`Strategy::CacheAware`]
    /// request, with [`EndpointSet::pick`]'s health rules, counts the
    /// request on it and records its prompt blocks as sent there.
    pub fn pick_cache_aware(
        &self,
        request: &CacheAwareRequest<'_>,
        opts: &RoutingOptions,
        exclude: &[usize],
    ) -> Option<(usize, InFlight, Decision)> {
        self.pick_cache_aware_touched(request, opts, exclude, None)
    }

    /// [`EndpointSet::pick_cache_aware`], appending to `touched` the blocks
    /// the prefix index learned ([`PrefixIndex::record_touched`]), for the
    /// gateway's peers.
    pub fn pick_cache_aware_touched(
        &self,
        request: &CacheAwareRequest<'_>,
        opts: &RoutingOptions,
        exclude: &[usize],
        touched: Option<&mut Vec<u64>>,
    ) -> Option<(usize, InFlight, Decision)> {
        let matched: Vec<(usize, usize)> = if request.session.is_some() {
            Vec::new()
        } else {
            self.prefix_index
                .longest_prefixes(request.blocks)
                .into_iter()
                .filter_map(|m| Some((self.index_of(&m.addr)?, m.blocks)))
                .collect()
        };
        let mut decision = Decision::Fallback;
        let (idx, in_flight) = self.pick_by(exclude, |usable| {
            let (idx, why) = self.cache_aware(request, &matched, opts, &usable)?;
            decision = why;
            Some(idx)
        })?;
        self.record_picks(idx, 1);
        let capacity = self.index_capacity(idx, opts);
        let addr = self.upstreams[idx].addr;
        match touched {
            Some(out) => self
                .prefix_index
                .record_touched(addr, request.blocks, capacity, out),
            None => self.prefix_index.record(addr, request.blocks, capacity),
        }
        Some((idx, in_flight, decision))
    }

    /// Blocks the prefix index keeps for the endpoint at `idx`: as many as
    /// its engine says it caches, or the model's bound.
    ///
    /// # Panics
    /// When `idx` is not below [`EndpointSet::len`].
    pub fn index_capacity(&self, idx: usize, opts: &RoutingOptions) -> usize {
        opts.cache_aware
            .capacity(self.counters[idx].backend.cache_tokens())
    }

    /// Counts `picks` cache-aware picks of the endpoint at `idx` (this
    /// gateway's, or a peer's).
    ///
    /// # Panics
    /// When `idx` is not below [`EndpointSet::len`].
    /// More than four windows at once (a peer's garbage) counts as four:
    /// the other counts have decayed to 2% by then either way.
    pub fn record_picks(&self, idx: usize, picks: u32) {
        let window = pick_share::window(self.len());
        let picks = picks.min(window.saturating_mul(4));
        if picks == 0 {
            return;
        }
        let stamp = self.pick_clock.advance(picks);
        self.counters[idx].picks.add(picks, stamp, window);
    }

    /// Each endpoint's share of the recent cache-aware picks, in index
    /// order.
    pub fn pick_shares(&self) -> Vec<f64> {
        pick_share::shares(
            self.counters.iter().map(|c| &c.picks),
            self.pick_clock.now(),
            pick_share::window(self.len()),
        )
    }

    /// The prefix index cache-aware routing keeps for these endpoints.
    pub fn prefix_index(&self) -> &PrefixIndex {
        &self.prefix_index
    }

    /// What the engine of the endpoint at `idx` last reported of its load.
    ///
    /// # Panics
    /// When `idx` is not below [`EndpointSet::len`].
    pub fn backend_load(&self, idx: usize) -> &BackendLoad {
        &self.counters[idx].backend
    }

    /// Requests to let through to all endpoints at once by their engines'
    /// own account ([`BackendLoad::slots`]): what each runs at once, plus
    /// one to wait in it, so that an engine that grows can show it. `None`
    /// until every one was seen saturated.
    pub fn engine_capacity(&self) -> Option<usize> {
        if self.counters.is_empty() {
            return None;
        }
        self.counters
            .iter()
            .map(|c| c.backend.slots().map(|n| n as usize + 1))
            .sum()
    }

    /// The pick loop behind [`EndpointSet::pick`]: `choose` names the
    /// strategy's endpoint among those a filter admits, and is asked again
    /// with a looser filter when health or trials rule out every endpoint.
    fn pick_by(
        &self,
        exclude: &[usize],
        mut choose: impl FnMut(&dyn Fn(usize) -> bool) -> Option<usize>,
    ) -> Option<(usize, InFlight)> {
        let mut taken: Vec<usize> = Vec::new();
        loop {
            let allowed = |i: usize| !exclude.contains(&i) && !taken.contains(&i);
            let in_rotation =
                |i: usize| allowed(i) && self.counters[i].health.standing() != Standing::Out;
            let Some(idx) = choose(&in_rotation).or_else(|| choose(&allowed)) else {
                // Every endpoint left is some other request's trial: go
                // where the strategy would without health.
                let not_excluded = |i: usize| !exclude.contains(&i);
                let in_rotation = |i: usize| {
                    not_excluded(i) && self.counters[i].health.standing() != Standing::Out
                };
                let idx = choose(&in_rotation).or_else(|| choose(&not_excluded))?;
                return Some((idx, self.track(idx)));
            };
            let health = &self.counters[idx].health;
            if health.standing() != Standing::TrialDue {
                return Some((idx, self.track(idx)));
            }
            if health.claim_trial() {
                return Some((idx, self.track_as(idx, true)));
            }
            taken.push(idx);
        }
    }

    /// The health of the endpoint at `idx`.
    ///
    /// # Panics
    /// When `idx` is not below [`EndpointSet::len`].
    pub fn health(&self, idx: usize) -> &EndpointHealth {
        &self.counters[idx].health
    }

    /// Counts a request as in flight on the endpoint at `idx` until the
    /// returned guard is dropped. The guard owns its counter, so it can live
    /// in the per-request context and outlive a rebuild of this set.
    ///
    /// # Panics
    /// When `idx` is not below [`EndpointSet::len`].
    pub fn track(&self, idx: usize) -> InFlight {
        self.track_as(idx, false)
    }

    fn track_as(&self, idx: usize, trial: bool) -> InFlight {
        let state = Arc::clone(&self.counters[idx]);
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight {
            state,
            trial,
            settled: false,
        }
    }

    pub(super) fn tick(&self) -> usize {
        self.cursor.fetch_add(1, Ordering::Relaxed)
    }
}

impl Default for EndpointSet {
    /// An empty set: every selection returns `None`.
    fn default() -> Self {
        EndpointSet::new(Vec::new())
    }
}

impl fmt::Debug for EndpointSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointSet")
            .field(
                "endpoints",
                &self
                    .upstreams
                    .iter()
                    .zip(self.counters.iter())
                    .map(|(u, c)| (&u.name, c.get()))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// A set of endpoint indices, on the stack for up to 128 endpoints.
enum Seen {
    Small(u128),
    Large(Vec<u64>),
}

impl Seen {
    fn new(n: usize) -> Self {
        if n <= 128 {
            Seen::Small(0)
        } else {
            Seen::Large(vec![0; n.div_ceil(64)])
        }
    }

    /// Adds `i`; returns whether it was not there yet.
    fn insert(&mut self, i: usize) -> bool {
        match self {
            Seen::Small(word) => {
                let bit = 1u128 << i;
                let fresh = *word & bit == 0;
                *word |= bit;
                fresh
            }
            Seen::Large(words) => {
                let bit = 1u64 << (i % 64);
                let word = &mut words[i / 64];
                let fresh = *word & bit == 0;
                *word |= bit;
                fresh
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn pods(n: u8) -> Vec<Upstream> {
        (1..=n)
            .map(|i| Upstream::from(SocketAddr::from(([10, 0, 0, i], 8000))))
            .collect()
    }

    fn affinity(set: &EndpointSet, key: &str) -> usize {
        set.select(
            Strategy::SessionAffinity,
            Some(key),
            &RoutingOptions::default(),
            &[],
        )
        .unwrap()
    }

    fn addr_of(set: &EndpointSet, key: &str) -> SocketAddr {
        set.upstream(affinity(set, key)).addr
    }

    #[test]
    fn empty_set_selects_nothing() {
        let set = EndpointSet::default();
        assert!(set.is_empty());
        for strategy in Strategy::ALL {
            assert_eq!(
                set.select(strategy, Some("k"), &RoutingOptions::default(), &[]),
                None
            );
        }
    }

    #[test]
    fn single_endpoint_is_always_chosen_unless_excluded() {
        let set = EndpointSet::new(pods(1));
        for strategy in Strategy::ALL {
            assert_eq!(
                set.select(strategy, Some("k"), &RoutingOptions::default(), &[]),
                Some(0)
            );
            assert_eq!(
                set.select(strategy, Some("k"), &RoutingOptions::default(), &[0]),
                None
            );
        }
    }

    #[test]
    fn one_session_key_always_hits_one_pod() {
        let set = EndpointSet::new(pods(4));
        let first = affinity(&set, "session-abc");
        for _ in 0..200 {
            assert_eq!(affinity(&set, "session-abc"), first);
        }
        // Prefix uses the same ring.
        let prefix = set
            .select(
                Strategy::Prefix,
                Some("session-abc"),
                &RoutingOptions::default(),
                &[],
            )
            .unwrap();
        assert_eq!(prefix, first);
    }

    #[test]
    fn sessions_spread_evenly_over_pods() {
        let set = EndpointSet::new(pods(4));
        let mut hits = [0usize; 4];
        for s in 0..200 {
            hits[affinity(&set, &format!("session-{s}"))] += 1;
        }
        // Within ±50% of the even share of 50.
        for (pod, &count) in hits.iter().enumerate() {
            assert!((25..=75).contains(&count), "pod {pod}: {hits:?}");
        }
    }

    #[test]
    fn removing_an_endpoint_remaps_only_its_keys() {
        let all = pods(5);
        let before = EndpointSet::new(all.clone());
        let removed = all[2].addr;
        let after = before.rebuild(all.iter().filter(|u| u.addr != removed).cloned().collect());
        let mut moved = 0;
        for s in 0..2000 {
            let key = format!("session-{s}");
            let (was, is) = (addr_of(&before, &key), addr_of(&after, &key));
            if was == removed {
                moved += 1;
                assert_ne!(is, removed);
            } else {
                assert_eq!(was, is, "key {key} moved although its pod stayed");
            }
        }
        assert!(moved > 0);
    }

    #[test]
    fn adding_an_endpoint_moves_about_one_nth() {
        let all = pods(5);
        let before = EndpointSet::new(all[..4].to_vec());
        let after = before.rebuild(all.clone());
        let added = all[4].addr;
        let keys = 2000;
        let mut moved = 0;
        for s in 0..keys {
            let key = format!("session-{s}");
            let (was, is) = (addr_of(&before, &key), addr_of(&after, &key));
            if was != is {
                assert_eq!(is, added, "key {key} moved to an old pod");
                moved += 1;
            }
        }
        // Ideal is 1/5 = 400 keys; allow the spread of 150 virtual nodes.
        assert!((200..=600).contains(&moved), "moved {moved} of {keys}");
    }

    #[test]
    fn ring_does_not_depend_on_endpoint_order() {
        let mut all = pods(4);
        let forward = EndpointSet::new(all.clone());
        all.reverse();
        let backward = EndpointSet::new(all);
        for s in 0..200 {
            let key = format!("k{s}");
            assert_eq!(addr_of(&forward, &key), addr_of(&backward, &key));
        }
    }

    #[test]
    fn duplicates_collapse_and_same_endpoints_ignores_order() {
        let mut list = pods(3);
        list.push(list[0].clone());
        let set = EndpointSet::new(list.clone());
        assert_eq!(set.len(), 3);
        assert!(set.same_endpoints(&list));
        let mut reordered = pods(3);
        reordered.reverse();
        assert!(set.same_endpoints(&reordered));
        assert!(!set.same_endpoints(&pods(2)));
        assert!(!set.same_endpoints(&pods(4)));
        let mut renamed = pods(3);
        renamed[1].name = "pod-b".into();
        assert!(!set.same_endpoints(&renamed));
        assert!(EndpointSet::default().same_endpoints(&[]));
    }

    #[test]
    fn counters_survive_rebuild_for_remaining_endpoints() {
        let all = pods(3);
        let set = EndpointSet::new(all.clone());
        let kept = set.track(0);
        let _gone = set.track(2);
        let _kept_too = set.track(0);
        assert_eq!(set.in_flight(0), 2);

        // Drop pod 3, add pod 4, and reorder: pod 1 keeps its counter.
        let mut next = pods(4);
        next.remove(2);
        next.reverse();
        let rebuilt = set.rebuild(next);
        let pod1 = rebuilt.index_of(&all[0].addr).unwrap();
        let pod4 = rebuilt
            .index_of(&SocketAddr::from(([10, 0, 0, 4], 8000)))
            .unwrap();
        assert_eq!(rebuilt.in_flight(pod1), 2);
        assert_eq!(rebuilt.in_flight(pod4), 0);
        assert_eq!(rebuilt.total_in_flight(), 2);

        // A guard taken on the old set still decrements the shared counter.
        drop(kept);
        assert_eq!(rebuilt.in_flight(pod1), 1);
        assert_eq!(set.in_flight(0), 1);
    }

    #[test]
    fn endpoint_set_can_be_shared_across_worker_threads() {
        fn assert_shared<T: Send + Sync + 'static>() {}
        assert_shared::<EndpointSet>();
        assert_shared::<Arc<EndpointSet>>();
        assert_shared::<InFlight>();
    }

    #[test]
    fn in_flight_guard_counts_until_dropped() {
        fn assert_send_static<T: Send + 'static>(_: &T) {}
        let set = EndpointSet::new(pods(2));
        let guard = set.track(1);
        assert_send_static(&guard);
        assert_eq!(set.in_flight(1), 1);
        let handle = std::thread::spawn(move || drop(guard));
        handle.join().unwrap();
        assert_eq!(set.in_flight(1), 0);
    }

    #[test]
    fn least_loaded_avoids_the_busy_pod() {
        let set = EndpointSet::new(pods(2));
        let _busy: Vec<_> = (0..10).map(|_| set.track(0)).collect();
        for _ in 0..20 {
            assert_eq!(
                set.select(Strategy::LeastLoaded, None, &RoutingOptions::default(), &[]),
                Some(1)
            );
        }
    }

    #[test]
    fn least_loaded_rotates_among_tied_pods() {
        let set = EndpointSet::new(pods(3));
        let _busy = set.track(1);
        let mut hits = HashMap::new();
        for _ in 0..12 {
            let pick = set
                .select(Strategy::LeastLoaded, None, &RoutingOptions::default(), &[])
                .unwrap();
            *hits.entry(pick).or_insert(0) += 1;
        }
        assert_eq!(hits.get(&1), None, "{hits:?}");
        assert_eq!(hits.get(&0), Some(&6), "{hits:?}");
        assert_eq!(hits.get(&2), Some(&6), "{hits:?}");
    }

    #[test]
    fn keyless_hash_strategies_balance_like_least_loaded() {
        let set = EndpointSet::new(pods(2));
        let _busy: Vec<_> = (0..3).map(|_| set.track(1)).collect();
        for strategy in [Strategy::SessionAffinity, Strategy::Prefix] {
            assert_eq!(
                set.select(strategy, None, &RoutingOptions::default(), &[]),
                Some(0)
            );
        }
    }

    #[test]
    fn default_strategy_round_robins() {
        let set = EndpointSet::new(pods(3));
        let picks: Vec<_> = (0..6)
            .map(|_| {
                set.select(
                    Strategy::Default,
                    Some("ignored"),
                    &RoutingOptions::default(),
                    &[],
                )
                .unwrap()
            })
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn failover_takes_the_list_order_and_retries_down_it() {
        let set = EndpointSet::new(pods(3));
        let opts = RoutingOptions::default();
        for _ in 0..5 {
            assert_eq!(set.select(Strategy::Failover, None, &opts, &[]), Some(0));
        }
        assert_eq!(set.select(Strategy::Failover, None, &opts, &[0]), Some(1));
        assert_eq!(
            set.select(Strategy::Failover, None, &opts, &[0, 1]),
            Some(2)
        );
        assert_eq!(
            set.select(Strategy::Failover, None, &opts, &[1, 0, 2]),
            None
        );
    }

    #[test]
    fn weighted_shares_follow_weights_and_backups_wait() {
        let all = pods(3);
        let set = EndpointSet::new(vec![
            all[0].clone().with_weight(3),
            all[1].clone().with_weight(1),
            all[2].clone().with_weight(0),
        ]);
        let opts = RoutingOptions::default();
        let mut hits = [0usize; 3];
        for _ in 0..400 {
            hits[set.select(Strategy::Weighted, None, &opts, &[]).unwrap()] += 1;
        }
        assert_eq!(hits, [300, 100, 0]);
        // A retry avoids the endpoint tried; the backup serves only when no
        // weighted endpoint is left.
        for _ in 0..20 {
            assert_eq!(set.select(Strategy::Weighted, None, &opts, &[0]), Some(1));
        }
        assert_eq!(
            set.select(Strategy::Weighted, None, &opts, &[0, 1]),
            Some(2)
        );
        assert_eq!(
            set.select(Strategy::Weighted, None, &opts, &[0, 1, 2]),
            None
        );
        // Only backups: the first one in list order.
        let backups = EndpointSet::new(all.iter().map(|u| u.clone().with_weight(0)).collect());
        assert_eq!(
            backups.select(Strategy::Weighted, None, &opts, &[]),
            Some(0)
        );
        assert_eq!(
            backups.select(Strategy::Weighted, None, &opts, &[0]),
            Some(1)
        );
    }

    #[test]
    fn same_sequence_sees_order_and_weight_changes() {
        let all = pods(3);
        let set = EndpointSet::new(all.clone());
        assert!(set.same_sequence(&all));
        let mut reversed = all.clone();
        reversed.reverse();
        assert!(set.same_endpoints(&reversed));
        assert!(!set.same_sequence(&reversed));
        let mut reweighted = all.clone();
        reweighted[1].weight = 0;
        assert!(!set.same_endpoints(&reweighted));
        assert!(!set.same_sequence(&reweighted));
        assert!(!set.same_sequence(&all[..2]));
    }

    #[test]
    fn exclude_gives_another_pod_for_every_strategy() {
        let set = EndpointSet::new(pods(4));
        let opts = RoutingOptions::default();
        for strategy in Strategy::ALL {
            for s in 0..50 {
                let key = format!("k{s}");
                let first = set.select(strategy, Some(&key), &opts, &[]).unwrap();
                let second = set.select(strategy, Some(&key), &opts, &[first]).unwrap();
                assert_ne!(first, second, "{strategy}");
                let third = set
                    .select(strategy, Some(&key), &opts, &[first, second])
                    .unwrap();
                assert!(third != first && third != second, "{strategy}");
            }
            assert_eq!(set.select(strategy, Some("k"), &opts, &[0, 1, 2, 3]), None);
        }
    }

    #[test]
    fn hashed_retry_follows_the_ring_deterministically() {
        let set = EndpointSet::new(pods(4));
        let opts = RoutingOptions::default();
        let first = affinity(&set, "conv-7");
        let a = set.select(Strategy::SessionAffinity, Some("conv-7"), &opts, &[first]);
        let b = set.select(Strategy::SessionAffinity, Some("conv-7"), &opts, &[first]);
        assert_eq!(a, b);
    }

    #[test]
    fn bounded_load_diverts_a_hot_key_and_returns() {
        let set = EndpointSet::new(pods(4));
        let opts = RoutingOptions::with_bounded_load(1.25);
        let home = affinity(&set, "hot-prefix");
        let pick = |set: &EndpointSet| {
            set.select(Strategy::Prefix, Some("hot-prefix"), &opts, &[])
                .unwrap()
        };
        assert_eq!(pick(&set), home);

        // 10 in flight on the key's pod: bound = ceil(1.25 * 11 / 4) = 4.
        let hot: Vec<_> = (0..10).map(|_| set.track(home)).collect();
        let diverted = pick(&set);
        assert_ne!(diverted, home);
        // The diversion is the next pod along the ring, the same as a retry.
        assert_eq!(
            Some(diverted),
            set.select(
                Strategy::Prefix,
                Some("hot-prefix"),
                &RoutingOptions::default(),
                &[home]
            )
        );
        // Without bounded load the key stays put.
        assert_eq!(
            set.select(
                Strategy::Prefix,
                Some("hot-prefix"),
                &RoutingOptions::default(),
                &[]
            ),
            Some(home)
        );

        drop(hot);
        assert_eq!(pick(&set), home);

        // At the bound, not over it, the key stays home:
        // 1 in flight, bound = ceil(1.25 * 2 / 4) = 1.
        let one = set.track(home);
        assert_eq!(pick(&set), home);
        // 2 in flight, bound = ceil(1.25 * 3 / 4) = 1: over it, diverted.
        let two = set.track(home);
        assert_ne!(pick(&set), home);
        drop((one, two));
    }

    #[test]
    fn bounded_load_with_every_other_pod_excluded_still_answers() {
        let set = EndpointSet::new(pods(3));
        let opts = RoutingOptions::with_bounded_load(1.0);
        let home = affinity(&set, "k");
        let _hot: Vec<_> = (0..10).map(|_| set.track(home)).collect();
        let others: Vec<usize> = (0..3).filter(|&i| i != home).collect();
        assert_eq!(
            set.select(Strategy::Prefix, Some("k"), &opts, &others),
            Some(home)
        );
    }

    #[test]
    fn large_sets_work_beyond_the_inline_seen_set() {
        let list: Vec<Upstream> = (0..300u16)
            .map(|i| Upstream::from(SocketAddr::from(([10, 1, (i / 256) as u8, i as u8], 8000))))
            .collect();
        let set = EndpointSet::new(list.clone());
        assert_eq!(set.len(), 300);
        assert!(set.same_endpoints(&list));
        let opts = RoutingOptions::with_bounded_load(1.25);
        let home = affinity(&set, "k");
        let _hot: Vec<_> = (0..50).map(|_| set.track(home)).collect();
        let pick = set.select(Strategy::Prefix, Some("k"), &opts, &[]).unwrap();
        assert_ne!(pick, home);
        let all_but_one: Vec<usize> = (1..300).collect();
        assert_eq!(
            set.select(
                Strategy::Prefix,
                Some("k"),
                &RoutingOptions::default(),
                &all_but_one
            ),
            Some(0)
        );
    }

    mod properties {
        use super::*;
        use crate::routing::Strategy;
        use proptest::prelude::*;

        fn set_of(n: u8) -> EndpointSet {
            EndpointSet::new(pods(n))
        }

        proptest! {
            #[test]
            fn removal_moves_only_the_removed_pods_keys(
                n in 2u8..9,
                removed in 0usize..8,
                keys in prop::collection::vec(".{0,24}", 1..64),
            ) {
                let removed = removed % usize::from(n);
                let before = set_of(n);
                let gone = before.upstream(removed).addr;
                let after = before.rebuild(pods(n).into_iter().filter(|u| u.addr != gone).collect());
                for key in &keys {
                    let was = addr_of(&before, key);
                    if was != gone {
                        prop_assert_eq!(addr_of(&after, key), was);
                    }
                }
            }

            #[test]
            fn select_respects_exclude_and_finds_any_remaining_pod(
                n in 1u8..7,
                exclude in prop::collection::vec(0usize..7, 0..7),
                loads in prop::collection::vec(0usize..20, 7),
                key in prop::option::of(".{0,16}"),
                factor in prop::option::of(0.5f64..3.0),
                strategy in prop::sample::select(Strategy::ALL.to_vec()),
            ) {
                let set = set_of(n);
                let _guards: Vec<InFlight> = (0..set.len())
                    .flat_map(|i| (0..loads[i]).map(move |_| i))
                    .map(|i| set.track(i))
                    .collect();
                let opts = RoutingOptions {
                    bounded_load: factor,
                    ..RoutingOptions::default()
                };
                let pick = set.select(strategy, key.as_deref(), &opts, &exclude);
                let any_left = (0..set.len()).any(|i| !exclude.contains(&i));
                prop_assert_eq!(pick.is_some(), any_left);
                if let Some(i) = pick {
                    prop_assert!(i < set.len() && !exclude.contains(&i));
                }
                if strategy == Strategy::LeastLoaded {
                    if let Some(i) = pick {
                        let min = (0..set.len())
                            .filter(|j| !exclude.contains(j))
                            .map(|j| set.in_flight(j))
                            .min();
                        prop_assert_eq!(Some(set.in_flight(i)), min);
                    }
                }
            }
        }
    }
}
