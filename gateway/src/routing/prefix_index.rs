//! Which endpoint recently received which prompt blocks: the gateway's
//! approximate picture of its endpoints' prefix caches.
//!
//! Every request routed by cache-aware routing records its prompt's
//! [`PromptBlocks`](super::PromptBlocks) against the endpoint it went to.
//! A later request's blocks are looked up in order: an endpoint that holds
//! blocks `0..k` is likely to find the first `k` blocks of the prompt in its
//! cache. Each endpoint's blocks are kept least-recently-used first and
//! bounded (as the engine's own cache is), and an endpoint that leaves the
//! model is forgotten.
//!
//! Memory: about 64 bytes per (block, endpoint) pair held, so the default
//! of [`DEFAULT_BLOCKS_PER_ENDPOINT`] blocks costs about 1 MiB per endpoint
//! at most.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;

/// Default bound on the blocks remembered per endpoint: 262,144 tokens at
/// the default block size, the order of a vLLM instance's KV cache on one
/// large GPU.
pub const DEFAULT_BLOCKS_PER_ENDPOINT: usize = 16 * 1024;

/// The index of one model's endpoints. Cheap to create: nothing is
/// allocated before the first record.
#[derive(Debug, Default)]
pub struct PrefixIndex {
    inner: Mutex<Inner>,
}

/// How many leading blocks of a prompt one endpoint holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match {
    /// The endpoint.
    pub addr: SocketAddr,
    /// Leading blocks of the prompt it received recently.
    pub blocks: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// Block hash → the endpoints holding it, with the stamp of their
    /// latest touch.
    holders: HashMap<u64, Vec<Holder>>,
    slots: Vec<Option<Slot>>,
    slot_of: HashMap<SocketAddr, u32>,
}

#[derive(Clone, Copy, Debug)]
struct Holder {
    slot: u32,
    stamp: u64,
}

/// One endpoint's blocks in touch order (an LRU).
#[derive(Debug)]
struct Slot {
    addr: SocketAddr,
    /// `(hash, stamp)` per touch, oldest first. A record whose stamp is
    /// no longer the block's latest is stale and skipped on eviction.
    order: VecDeque<(u64, u64)>,
    clock: u64,
    /// Distinct blocks held (the live records of `order`).
    held: usize,
}

impl PrefixIndex {
    /// The endpoints that hold a prefix of `blocks`, each with the number
    /// of leading blocks it holds; endpoints holding none are left out.
    pub fn longest_prefixes(&self, blocks: &[u64]) -> Vec<Match> {
        let Some(first) = blocks.first() else {
            return Vec::new();
        };
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(holders) = inner.holders.get(first) else {
            return Vec::new();
        };
        let mut matches: Vec<(u32, usize)> = holders.iter().map(|h| (h.slot, 1)).collect();
        // Endpoints at `depth` matched every block so far; the others
        // stopped at their count.
        for (depth, hash) in (1..).zip(&blocks[1..]) {
            let Some(holders) = inner.holders.get(hash) else {
                break;
            };
            let mut any = false;
            for (slot, count) in matches.iter_mut() {
                if *count == depth && holders.iter().any(|h| h.slot == *slot) {
                    *count += 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        matches
            .into_iter()
            .filter_map(|(slot, blocks)| {
                let addr = inner.slots.get(slot as usize)?.as_ref()?.addr;
                Some(Match { addr, blocks })
            })
            .collect()
    }

    /// Records that `addr` received a prompt of `blocks`, keeping at most
    /// `capacity` blocks for it (the least recently used go first, and of
    /// one prompt the last blocks before the first).
    pub fn record(&self, addr: SocketAddr, blocks: &[u64], capacity: usize) {
        if blocks.is_empty() || capacity == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.touch(addr, blocks.iter().rev().copied(), capacity, None);
    }

    /// [`PrefixIndex::record`], appending to `touched` the blocks whose
    /// record changed, in the order they were touched: what another index
    /// must [`touch`](PrefixIndex::touch) to learn the same. Blocks still
    /// fresh in this index are left out, so a prompt resent to the pod that
    /// holds it yields only its new tail.
    pub fn record_touched(
        &self,
        addr: SocketAddr,
        blocks: &[u64],
        capacity: usize,
        touched: &mut Vec<u64>,
    ) {
        if blocks.is_empty() || capacity == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.touch(addr, blocks.iter().rev().copied(), capacity, Some(touched));
    }

    /// Touches `hashes` for `addr` in the order given (the order
    /// [`PrefixIndex::record_touched`] reports, or a
    /// [`PrefixIndex::held`] list), with the same LRU bound.
    pub fn touch(&self, addr: SocketAddr, hashes: &[u64], capacity: usize) {
        if hashes.is_empty() || capacity == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.touch(addr, hashes.iter().copied(), capacity, None);
    }

    /// Every endpoint with the blocks it holds, least recently used first:
    /// touched in this order, another index learns the same picture.
    pub fn held(&self) -> Vec<(SocketAddr, Vec<u64>)> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, state)| {
                let state = state.as_ref()?;
                let live = state
                    .order
                    .iter()
                    .filter(|(hash, stamp)| {
                        inner.holders.get(hash).is_some_and(|list| {
                            list.iter()
                                .any(|h| h.slot == slot as u32 && h.stamp == *stamp)
                        })
                    })
                    .map(|&(hash, _)| hash)
                    .collect();
                Some((state.addr, live))
            })
            .collect()
    }

    /// Forgets every endpoint not in `keep`: they left the model, and a
    /// pod that comes back under the same address starts cold.
    pub fn retain(&self, keep: impl Fn(&SocketAddr) -> bool) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<SocketAddr> = inner
            .slot_of
            .keys()
            .filter(|addr| !keep(addr))
            .copied()
            .collect();
        for addr in gone {
            inner.forget(addr);
        }
    }

    /// Blocks each of `addrs` holds (0 for an endpoint never recorded).
    pub fn held_counts(&self, addrs: impl Iterator<Item = SocketAddr>) -> Vec<usize> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        addrs
            .map(|addr| {
                inner
                    .slot_of
                    .get(&addr)
                    .and_then(|&slot| inner.slots.get(slot as usize)?.as_ref())
                    .map_or(0, |state| state.held)
            })
            .collect()
    }

    /// Blocks held over all endpoints (for tests and the admin view).
    pub fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.holders.values().map(Vec::len).sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn slot_for(&mut self, addr: SocketAddr) -> u32 {
        if let Some(&slot) = self.slot_of.get(&addr) {
            return slot;
        }
        let fresh = Slot {
            addr,
            order: VecDeque::new(),
            clock: 0,
            held: 0,
        };
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(free) => {
                self.slots[free] = Some(fresh);
                free
            }
            None => {
                self.slots.push(Some(fresh));
                self.slots.len() - 1
            }
        } as u32;
        self.slot_of.insert(addr, slot);
        slot
    }

    /// Touches `hashes` in order for `addr`; `touched` collects those whose
    /// record changed.
    fn touch(
        &mut self,
        addr: SocketAddr,
        hashes: impl Iterator<Item = u64>,
        capacity: usize,
        mut touched: Option<&mut Vec<u64>>,
    ) {
        let slot = self.slot_for(addr);
        let Some(state) = self.slots[slot as usize].as_mut() else {
            return;
        };
        // A block touched within the newest half of the window is not
        // recorded again: it is safe from eviction for a while, and skipping
        // it keeps stale records (hence lost capacity) under half.
        let fresh_window = (capacity / 2).max(1) as u64;
        // A prompt is touched last block first (see `record`), so that its
        // head is the most recently used and evicted last: as vLLM frees a
        // request's blocks, so a shared system prompt outlives the
        // conversations behind it.
        for hash in hashes {
            state.clock += 1;
            let stamp = state.clock;
            let holders = self.holders.entry(hash).or_default();
            match holders.iter_mut().find(|h| h.slot == slot) {
                Some(h) if stamp - h.stamp <= fresh_window => continue,
                Some(h) => h.stamp = stamp,
                None => {
                    holders.push(Holder { slot, stamp });
                    state.held += 1;
                }
            }
            if let Some(out) = touched.as_deref_mut() {
                out.push(hash);
            }
            state.order.push_back((hash, stamp));
            while state.order.len() > capacity {
                let Some((old, old_stamp)) = state.order.pop_front() else {
                    break;
                };
                if remove_holder(&mut self.holders, old, slot, Some(old_stamp)) {
                    state.held -= 1;
                }
            }
        }
    }

    fn forget(&mut self, addr: SocketAddr) {
        let Some(slot) = self.slot_of.remove(&addr) else {
            return;
        };
        if let Some(state) = self.slots[slot as usize].take() {
            for (hash, _) in state.order {
                let _ = remove_holder(&mut self.holders, hash, slot, None);
            }
        }
    }
}

/// Removes `slot` from the holders of `hash` (only if its latest stamp is
/// `stamp`, when given), and the hash when no holder is left; returns
/// whether it was removed.
fn remove_holder(
    holders: &mut HashMap<u64, Vec<Holder>>,
    hash: u64,
    slot: u32,
    stamp: Option<u64>,
) -> bool {
    let Some(list) = holders.get_mut(&hash) else {
        return false;
    };
    let pos = list
        .iter()
        .position(|h| h.slot == slot && stamp.is_none_or(|s| s == h.stamp));
    if let Some(pos) = pos {
        list.swap_remove(pos);
    }
    if list.is_empty() {
        holders.remove(&hash);
    }
    pos.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 8000))
    }

    fn found(index: &PrefixIndex, blocks: &[u64]) -> Vec<(u8, usize)> {
        let mut out: Vec<(u8, usize)> = index
            .longest_prefixes(blocks)
            .into_iter()
            .map(|m| match m.addr.ip() {
                std::net::IpAddr::V4(ip) => (ip.octets()[3], m.blocks),
                std::net::IpAddr::V6(_) => unreachable!(),
            })
            .collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn longest_prefix_per_endpoint() {
        let index = PrefixIndex::default();
        index.record(addr(1), &[1, 2, 3, 4], 100);
        index.record(addr(2), &[1, 2, 9], 100);
        assert_eq!(found(&index, &[1, 2, 3, 4, 5]), [(1, 4), (2, 2)]);
        assert_eq!(found(&index, &[1, 2, 9, 10]), [(1, 2), (2, 3)]);
        assert!(found(&index, &[7, 1, 2]).is_empty());
        assert!(found(&index, &[]).is_empty());
    }

    #[test]
    fn least_recently_used_blocks_go_first() {
        let index = PrefixIndex::default();
        index.record(addr(1), &[1, 2], 4);
        index.record(addr(1), &[3, 4], 4);
        // Capacity 4, window 2: touching [1, 2] again keeps them.
        index.record(addr(1), &[1, 2], 4);
        index.record(addr(1), &[5, 6], 4);
        assert_eq!(found(&index, &[1, 2]), [(1, 2)]);
        assert!(found(&index, &[3]).is_empty());
        assert_eq!(found(&index, &[5, 6]), [(1, 2)]);
        assert!(index.len() <= 4);
        // Of one prompt, the tail goes before the head.
        let index = PrefixIndex::default();
        index.record(addr(1), &[7, 8, 9], 3);
        assert_eq!(found(&index, &[7, 8, 9]), [(1, 3)]);
        index.record(addr(1), &[10], 3);
        assert_eq!(found(&index, &[7, 8, 9]), [(1, 2)]);
    }

    #[test]
    fn capacity_bounds_memory_under_churn() {
        let index = PrefixIndex::default();
        for round in 0..1000u64 {
            let blocks: Vec<u64> = (0..8).map(|b| round * 100 + b).collect();
            index.record(addr(1), &blocks, 64);
            index.record(addr(2), &blocks[..4], 64);
        }
        assert!(index.len() <= 128, "{}", index.len());
        let inner = index.inner.lock().unwrap();
        assert!(inner.slots.iter().flatten().all(|s| s.order.len() <= 64));
    }

    #[test]
    fn another_index_replaying_the_touched_blocks_agrees() {
        let local = PrefixIndex::default();
        let peer = PrefixIndex::default();
        let mut touched = Vec::new();
        local.record_touched(addr(1), &[1, 2, 3, 4], 100, &mut touched);
        assert_eq!(touched, [4, 3, 2, 1]);
        peer.touch(addr(1), &touched, 100);
        // A prompt resent to the pod holding it teaches only its new tail.
        touched.clear();
        local.record_touched(addr(1), &[1, 2, 3, 4, 5], 100, &mut touched);
        assert_eq!(touched, [5]);
        peer.touch(addr(1), &touched, 100);
        touched.clear();
        local.record_touched(addr(2), &[1, 2, 9], 100, &mut touched);
        peer.touch(addr(2), &touched, 100);
        for probe in [&[1, 2, 3, 4, 5, 6][..], &[1, 2, 9], &[7]] {
            assert_eq!(found(&local, probe), found(&peer, probe), "{probe:?}");
        }
    }

    #[test]
    fn a_held_snapshot_rebuilds_the_same_lru() {
        let local = PrefixIndex::default();
        for round in 0..50u64 {
            let blocks: Vec<u64> = (0..6).map(|b| round % 7 * 100 + b).collect();
            local.record(addr(1), &blocks, 24);
            local.record(addr((round % 3) as u8 + 2), &blocks[..3], 24);
        }
        let copy = PrefixIndex::default();
        for (endpoint, hashes) in local.held() {
            assert!(hashes.len() <= 24);
            copy.touch(endpoint, &hashes, 24);
        }
        assert_eq!(copy.len(), local.len());
        let addrs = || (1..=4).map(addr);
        assert_eq!(copy.held_counts(addrs()), local.held_counts(addrs()));
        assert_eq!(
            local.held_counts(addrs()).iter().sum::<usize>(),
            local.len()
        );
        for tenant in 0..7u64 {
            let probe: Vec<u64> = (0..6).map(|b| tenant * 100 + b).collect();
            assert_eq!(found(&local, &probe), found(&copy, &probe), "{tenant}");
        }
        // Evictions follow the same order afterwards.
        local.record(addr(1), &[900, 901, 902, 903], 24);
        copy.record(addr(1), &[900, 901, 902, 903], 24);
        for tenant in 0..7u64 {
            let probe: Vec<u64> = (0..6).map(|b| tenant * 100 + b).collect();
            assert_eq!(found(&local, &probe), found(&copy, &probe), "{tenant}");
        }
    }

    #[test]
    fn forgotten_endpoints_leave_nothing_behind() {
        let index = PrefixIndex::default();
        index.record(addr(1), &[1, 2, 3], 100);
        index.record(addr(2), &[1, 2, 3], 100);
        index.retain(|a| *a == addr(2));
        assert_eq!(found(&index, &[1, 2, 3]), [(2, 3)]);
        index.retain(|_| false);
        assert!(index.is_empty());
        // A new endpoint reuses the freed slot and starts cold.
        index.record(addr(3), &[1], 100);
        assert_eq!(found(&index, &[1, 2]), [(3, 1)]);
    }
}
