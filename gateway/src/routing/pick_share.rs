//! Each endpoint's share of its set's recent cache-aware picks: the load
//! measure of the cache-aware bound that a momentary pile-up of requests
//! in flight does not move, and that gateway replicas sharing their picks
//! agree on.
//!
//! A count decays by `1 − 1/window` per pick made anywhere in the set, so
//! the counts of all endpoints sum to at most `window` and an endpoint's
//! share is its count over that sum. Each count is one atomic word (an
//! `f32` count and the set's pick stamp at its last update): recording and
//! reading never lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// Picks per endpoint the window covers: with 4 endpoints, the last ~128.
pub const PICKS_PER_ENDPOINT: u32 = 32;

/// The smallest window, in picks, whatever the number of endpoints.
const MIN_WINDOW: u32 = 64;

/// The window of a set of `endpoints`, in picks.
pub fn window(endpoints: usize) -> u32 {
    u32::try_from(endpoints)
        .unwrap_or(u32::MAX)
        .saturating_mul(PICKS_PER_ENDPOINT)
        .max(MIN_WINDOW)
}

/// One endpoint's decayed count of picks.
#[derive(Debug, Default)]
pub struct PickCount(AtomicU64);

fn pack(count: f32, stamp: u32) -> u64 {
    (u64::from(count.to_bits()) << 32) | u64::from(stamp)
}

fn unpack(word: u64) -> (f32, u32) {
    (f32::from_bits((word >> 32) as u32), word as u32)
}

/// `count` after `elapsed` picks of a `window`.
fn decayed(count: f32, elapsed: u32, window: u32) -> f32 {
    if count == 0.0 || elapsed == 0 {
        return count;
    }
    // Stamps wrap: an update older than half the stamp space is long gone.
    if elapsed > u32::MAX / 2 {
        return 0.0;
    }
    let keep = 1.0 - 1.0 / f64::from(window.max(1));
    // `elapsed` fits an i32 (checked above); powi squares, cheaper than powf.
    (f64::from(count) * keep.powi(elapsed as i32)) as f32
}

impl PickCount {
    /// Adds `picks` picks made at set stamp `stamp` (the stamp after them).
    pub fn add(&self, picks: u32, stamp: u32, window: u32) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
                let (count, at) = unpack(word);
                let elapsed = stamp.wrapping_sub(at);
                // A concurrent pick stamped later already decayed this count.
                let base = if elapsed > u32::MAX / 2 {
                    count
                } else {
                    decayed(count, elapsed, window)
                };
                let stamp = if elapsed > u32::MAX / 2 { at } else { stamp };
                Some(pack(base + picks as f32, stamp))
            });
    }

    /// The count as of set stamp `now`.
    pub fn at(&self, now: u32, window: u32) -> f32 {
        let (count, at) = unpack(self.0.load(Ordering::Relaxed));
        decayed(count, now.wrapping_sub(at), window)
    }
}

/// The set-wide pick stamp: how many picks the set (and its replicas,
/// when they share them) has made, modulo 2³².
#[derive(Debug, Default)]
pub struct PickClock(AtomicU64);

impl PickClock {
    /// Advances the clock by `picks`; returns the stamp after them.
    pub fn advance(&self, picks: u32) -> u32 {
        (self.0.fetch_add(u64::from(picks), Ordering::Relaxed) + u64::from(picks)) as u32
    }

    /// The current stamp.
    pub fn now(&self) -> u32 {
        self.0.load(Ordering::Relaxed) as u32
    }
}

/// Each count's share of `counts`' sum as of `now`. The sum counts as at
/// least half a window, so the first few picks of a set do not make one
/// endpoint look like it takes everything.
pub fn shares<'a>(counts: impl Iterator<Item = &'a PickCount>, now: u32, window: u32) -> Vec<f64> {
    let values: Vec<f64> = counts.map(|c| f64::from(c.at(now, window))).collect();
    let sum: f64 = values.iter().sum();
    let denominator = sum.max(f64::from(window) / 2.0);
    values.into_iter().map(|v| v / denominator).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window, clock and counts of a fresh set of `n` endpoints.
    fn fresh(n: usize) -> (u32, PickClock, Vec<PickCount>) {
        let counts = (0..n).map(|_| PickCount::default()).collect();
        (window(n), PickClock::default(), counts)
    }

    #[test]
    fn counts_decay_by_the_picks_made_elsewhere() {
        let (w, clock, counts) = fresh(4);
        assert_eq!(w, 128);
        // Pod 0 takes every other pick, the rest share the others.
        for i in 0..4000u32 {
            let pod = if i % 2 == 0 {
                0
            } else {
                1 + (i as usize / 2) % 3
            };
            counts[pod].add(1, clock.advance(1), w);
        }
        let s = shares(counts.iter(), clock.now(), w);
        assert!((s[0] - 0.5).abs() < 0.02, "{s:?}");
        for share in &s[1..] {
            assert!((share - 1.0 / 6.0).abs() < 0.03, "{s:?}");
        }
        // Then pod 0 stops: within a couple of windows its share is gone.
        for i in 0..(2 * w) {
            counts[1 + i as usize % 3].add(1, clock.advance(1), w);
        }
        let s = shares(counts.iter(), clock.now(), w);
        assert!(s[0] < 0.1, "{s:?}");
    }

    #[test]
    fn a_batch_of_picks_counts_as_that_many() {
        let (w, clock, counts) = fresh(2);
        counts[0].add(30, clock.advance(30), w);
        for _ in 0..10 {
            counts[1].add(1, clock.advance(1), w);
        }
        let s = shares(counts.iter(), clock.now(), w);
        assert!(s[0] > 2.0 * s[1], "{s:?}");
    }

    #[test]
    fn the_first_picks_do_not_make_a_share_of_one() {
        let (w, clock, counts) = fresh(4);
        counts[2].add(1, clock.advance(1), w);
        let s = shares(counts.iter(), clock.now(), w);
        assert!(s[2] < 0.05, "{s:?}");
    }

    #[test]
    fn a_stale_stamp_does_not_rewind_a_count() {
        let w = window(4);
        let count = PickCount::default();
        count.add(1, 100, w);
        // A pick stamped before the last update (a race) adds, no decay.
        count.add(1, 99, w);
        assert!((count.at(100, w) - 2.0).abs() < 1e-3);
        assert!(count.at(100 + 10 * w, w) < 0.01);
    }
}
