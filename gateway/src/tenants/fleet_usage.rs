//! Each tenant's recent usage across the gateway replicas: the tokens its
//! answered requests used (prompt and completion), on this replica and, over
//! the signed peer channel, on every other, decayed with a half-life so
//! that the last minute or two counts. The queue in front of busy models
//! gives its turns by it ([`crate::flow`]): a tenant that used less of the
//! fleet lately goes before one that used more, whichever replica each
//! used it on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Time after which usage counts half.
pub const HALF_LIFE: Duration = Duration::from_secs(60);

/// Tokens of usage that make one band: tenants within one band of each
/// other take turns; one a band or more ahead waits for those behind it.
pub const BAND_TOKENS: f64 = 4096.0;

/// Tenants tracked at most (the key file's tenants; the bound keeps a
/// flood of unknown names from a peer out).
const MAX_TENANTS: usize = 100_000;

/// Usage below this is forgotten.
const NEGLIGIBLE: f64 = 1.0;

/// Recent usage by tenant.
#[derive(Debug, Default)]
pub struct FleetUsage {
    tenants: Mutex<HashMap<Arc<str>, Recent>>,
}

#[derive(Debug, Clone, Copy)]
struct Recent {
    /// Decayed tokens as of `at`.
    tokens: f64,
    at: Instant,
    /// Used here and not yet told the peers.
    unsent: f64,
}

impl Recent {
    fn now(&mut self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens *= (-elapsed * std::f64::consts::LN_2 / HALF_LIFE.as_secs_f64()).exp();
        self.at = now;
        self.tokens
    }
}

impl FleetUsage {
    fn add(&self, tenant: &str, tokens: f64, here: bool) {
        if !(tokens.is_finite() && tokens > 0.0) {
            return;
        }
        let now = Instant::now();
        let mut map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        if !map.contains_key(tenant) && map.len() >= MAX_TENANTS {
            return;
        }
        let entry = map.entry(Arc::from(tenant)).or_insert(Recent {
            tokens: 0.0,
            at: now,
            unsent: 0.0,
        });
        entry.now(now);
        entry.tokens += tokens;
        if here {
            entry.unsent += tokens;
        }
    }

    /// `tenant`'s request used `tokens` on this replica.
    pub fn used_here(&self, tenant: &str, tokens: u64) {
        self.add(tenant, tokens as f64, true);
    }

    /// A peer replica reports `tokens` used by `tenant` there.
    pub fn used_elsewhere(&self, tenant: &str, tokens: f64) {
        self.add(tenant, tokens, false);
    }

    /// What each tenant used here since the last call (for the peers);
    /// tenants whose usage has decayed away are forgotten.
    pub fn take_unsent(&self) -> Vec<(Arc<str>, f64)> {
        let now = Instant::now();
        let mut map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        map.retain(|tenant, recent| {
            if recent.unsent > 0.0 {
                out.push((tenant.clone(), std::mem::take(&mut recent.unsent)));
            }
            recent.now(now) >= NEGLIGIBLE
        });
        out
    }

    /// `tenant`'s decayed usage, in tokens, across the fleet.
    pub fn recent(&self, tenant: &str) -> f64 {
        let mut map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        map.get_mut(tenant)
            .map_or(0.0, |recent| recent.now(Instant::now()))
    }

    /// `tenant`'s band of usage ([`BAND_TOKENS`]): the queue's turn order.
    pub fn band(&self, tenant: &str) -> u64 {
        (self.recent(tenant) / BAND_TOKENS) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_here_and_elsewhere_adds_up_and_only_here_is_sent() {
        let u = FleetUsage::default();
        u.used_here("a", 3000);
        u.used_elsewhere("a", 2000.0);
        u.used_elsewhere("b", 100.0);
        assert!((u.recent("a") - 5000.0).abs() < 1.0, "{}", u.recent("a"));
        assert_eq!(u.band("a"), 1);
        assert_eq!(u.band("b"), 0);
        assert_eq!(u.band("nobody"), 0);
        let sent = u.take_unsent();
        assert_eq!(sent.len(), 1);
        assert_eq!((&*sent[0].0, sent[0].1), ("a", 3000.0));
        assert!(u.take_unsent().is_empty(), "sent once");
    }

    #[test]
    fn usage_decays_with_its_half_life() {
        let mut r = Recent {
            tokens: 1000.0,
            at: Instant::now(),
            unsent: 0.0,
        };
        let later = r.at + HALF_LIFE;
        assert!((r.now(later) - 500.0).abs() < 0.01);
        assert!((r.now(later + HALF_LIFE * 2) - 125.0).abs() < 0.01);
    }

    #[test]
    fn nonsense_from_a_peer_is_ignored() {
        let u = FleetUsage::default();
        for bad in [f64::NAN, f64::INFINITY, -5.0, 0.0] {
            u.used_elsewhere("a", bad);
        }
        assert_eq!(u.recent("a"), 0.0);
    }
}
