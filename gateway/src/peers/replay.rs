//! Replay protection on the receiving side: for each sender instance, the
//! highest sequence number accepted and which of the [`WINDOW`] numbers
//! below it were seen (the anti-replay window of IPsec, RFC 4303 §3.4.3),
//! so that every signed request is accepted at most once, also when a
//! sender's requests overtake each other.
//!
//! Only requests whose signature verified reach this table, so only
//! holders of the secret can add senders. A sender instance is forgotten
//! once every request it ever had accepted has left the time window
//! ([`MAX_SKEW`]): a replay of any of them is then refused as stale, so
//! forgetting it opens nothing. The table is bounded; when it is full of
//! instances that cannot be forgotten yet, new ones wait.

use std::collections::HashMap;

use super::signature::MAX_SKEW;

/// Sequence numbers below the highest accepted that may still arrive.
pub const WINDOW: u64 = 64;

/// Sender instances remembered at most.
pub const MAX_SENDERS: usize = 4096;

/// Why a sequence number was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Seen already, or older than the window.
    Replayed,
    /// The table is full of instances still in the time window.
    Full,
}

#[derive(Debug)]
struct Window {
    highest: u64,
    /// Bit `i`: `highest - i` was accepted.
    seen: u64,
    /// Latest timestamp accepted from the instance.
    newest_ms: u64,
}

/// The sequence numbers accepted per sender instance.
#[derive(Debug)]
pub struct ReplayGuard {
    senders: HashMap<String, Window>,
    capacity: usize,
}

impl Default for ReplayGuard {
    fn default() -> Self {
        Self::with_capacity(MAX_SENDERS)
    }
}

impl ReplayGuard {
    /// A guard remembering up to `capacity` sender instances.
    pub fn with_capacity(capacity: usize) -> Self {
        ReplayGuard {
            senders: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// Sender instances remembered now.
    pub fn len(&self) -> usize {
        self.senders.len()
    }

    /// Whether no sender instance is remembered.
    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    /// Accepts `sender`'s request number `seq`, timestamped `time_ms`, at
    /// `now_ms`, unless it was accepted before. Accepting is final: a
    /// request whose body then fails is not accepted again.
    pub fn admit(
        &mut self,
        sender: &str,
        seq: u64,
        time_ms: u64,
        now_ms: u64,
    ) -> Result<(), Rejected> {
        if let Some(window) = self.senders.get_mut(sender) {
            return window.admit(seq, time_ms);
        }
        if self.senders.len() >= self.capacity {
            self.forget_expired(now_ms);
            if self.senders.len() >= self.capacity {
                return Err(Rejected::Full);
            }
        }
        self.senders.insert(
            sender.to_owned(),
            Window {
                highest: seq,
                seen: 1,
                newest_ms: time_ms,
            },
        );
        Ok(())
    }

    /// Forgets the instances none of whose accepted requests would pass
    /// the time window at `now_ms` any more.
    pub fn forget_expired(&mut self, now_ms: u64) {
        let horizon = now_ms.saturating_sub(MAX_SKEW.as_millis() as u64);
        self.senders.retain(|_, w| w.newest_ms >= horizon);
    }
}

impl Window {
    fn admit(&mut self, seq: u64, time_ms: u64) -> Result<(), Rejected> {
        if seq > self.highest {
            let shift = seq - self.highest;
            self.seen = if shift >= WINDOW {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.highest = seq;
        } else {
            let offset = self.highest - seq;
            if offset >= WINDOW || self.seen & (1 << offset) != 0 {
                return Err(Rejected::Replayed);
            }
            self.seen |= 1 << offset;
        }
        self.newest_ms = self.newest_ms.max(time_ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000_000;

    #[test]
    fn each_number_is_accepted_once_in_any_order_within_the_window() {
        let mut guard = ReplayGuard::default();
        assert_eq!(guard.admit("a", 5, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("a", 5, NOW, NOW), Err(Rejected::Replayed));
        // Overtaken requests still count once.
        assert_eq!(guard.admit("a", 3, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("a", 3, NOW, NOW), Err(Rejected::Replayed));
        assert_eq!(guard.admit("a", 9, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("a", 4, NOW, NOW), Ok(()));
        for seq in [3, 4, 5, 9] {
            assert_eq!(guard.admit("a", seq, NOW, NOW), Err(Rejected::Replayed));
        }
        // Older than the window: refused even if never seen.
        assert_eq!(guard.admit("a", 9 + WINDOW, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("a", 9, NOW, NOW), Err(Rejected::Replayed));
        // The oldest number still inside it, never seen: accepted once.
        assert_eq!(guard.admit("a", 10, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("a", 10, NOW, NOW), Err(Rejected::Replayed));
        // A jump past the window forgets the bitmap, not the floor.
        assert_eq!(guard.admit("a", 1_000, NOW, NOW), Ok(()));
        assert_eq!(
            guard.admit("a", 9 + WINDOW, NOW, NOW),
            Err(Rejected::Replayed)
        );
        assert_eq!(guard.admit("a", 999, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("a", u64::MAX, NOW, NOW), Ok(()));
        assert_eq!(
            guard.admit("a", u64::MAX, NOW, NOW),
            Err(Rejected::Replayed)
        );
    }

    #[test]
    fn instances_are_apart() {
        // A restarted sender is a new instance: its numbers start again.
        let mut guard = ReplayGuard::default();
        assert_eq!(guard.admit("a-1", 1, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("a-2", 1, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("a-1", 1, NOW, NOW), Err(Rejected::Replayed));
        assert_eq!(guard.len(), 2);
    }

    #[test]
    fn only_instances_past_the_window_are_forgotten() {
        let skew = MAX_SKEW.as_millis() as u64;
        let mut guard = ReplayGuard::with_capacity(2);
        assert_eq!(guard.admit("a", 1, NOW, NOW), Ok(()));
        assert_eq!(guard.admit("b", 1, NOW + 10, NOW), Ok(()));
        // Full of instances whose requests are still in the window.
        assert_eq!(guard.admit("c", 1, NOW, NOW + skew), Err(Rejected::Full));
        // `a`'s requests are all stale now; `b`'s latest is not.
        assert_eq!(guard.admit("c", 1, NOW + skew, NOW + skew + 5), Ok(()));
        assert_eq!(guard.len(), 2);
        assert_eq!(guard.admit("b", 1, NOW, NOW), Err(Rejected::Replayed));
        guard.forget_expired(NOW + 2 * skew);
        assert_eq!(guard.len(), 1);
        guard.forget_expired(NOW + 2 * skew + 1);
        assert!(guard.is_empty());
    }
}
