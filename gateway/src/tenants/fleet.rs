//! Tenants' budgets across gateway replicas. Every replica reads the same
//! key file, so a budget (tenant, model or all, requests or tokens) has the
//! same name everywhere. Each exchange window (the peers' flush interval)
//! a replica sends what it took from each bucket, less what it gave back,
//! over the signed peer channel; a replica takes what its peers spent from
//! its own buckets. Within one window a replica takes at most 1/N of what
//! was left when the window began (N: the replicas it knows of), besides
//! one request, so that replicas charging at once cannot together spend
//! more than there was; a replica cut off from peers it knew keeps to its
//! own 1/N share of the bucket ([`super::bucket`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How long a larger fleet is remembered after its replicas were last
/// all linked: within it, fewer linked replicas means being cut off; after
/// it, the fleet is taken to have shrunk.
pub const FLEET_MEMORY: Duration = Duration::from_secs(600);

/// Exchange windows without word from a peer (every replica sends one
/// message a window, empty or not) after which this replica counts itself
/// cut off from it.
pub const SILENT_WINDOWS: u32 = 3;

/// What a replica knows of its fleet.
#[derive(Debug)]
pub struct FleetView {
    /// When each peer replica was last heard from.
    heard: Mutex<HashMap<String, Instant>>,
    /// Replicas linked now, this one included.
    size: AtomicU32,
    /// Replicas the shares are counted in: the most linked recently.
    known: AtomicU32,
    /// When `known` replicas were last linked.
    known_at: Mutex<Instant>,
    /// The exchange window, in milliseconds.
    window_ms: AtomicU64,
}

impl Default for FleetView {
    fn default() -> Self {
        Self {
            heard: Mutex::new(HashMap::new()),
            size: AtomicU32::new(1),
            known: AtomicU32::new(1),
            known_at: Mutex::new(Instant::now()),
            window_ms: AtomicU64::new(25),
        }
    }
}

impl FleetView {
    /// The peer replica `peer` was heard from now.
    pub fn heard_from(&self, peer: &str) {
        let mut heard = self.heard.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = heard.get_mut(peer) {
            *at = Instant::now();
        } else if heard.len() < 1024 {
            heard.insert(peer.to_owned(), Instant::now());
        }
    }

    /// Counts the peers heard from within the last [`SILENT_WINDOWS`]
    /// windows as linked (a new window begins).
    pub fn refresh(&self) {
        let silent = self.window() * SILENT_WINDOWS;
        let peers = {
            let mut heard = self.heard.lock().unwrap_or_else(PoisonError::into_inner);
            heard.retain(|_, at| at.elapsed() < FLEET_MEMORY);
            heard.values().filter(|at| at.elapsed() < silent).count()
        };
        self.linked(peers);
    }

    /// `peers` other replicas are linked now.
    pub fn linked(&self, peers: usize) {
        let size = u32::try_from(peers).unwrap_or(u32::MAX - 1) + 1;
        self.size.store(size, Ordering::Relaxed);
        let mut at = self.known_at.lock().unwrap_or_else(PoisonError::into_inner);
        if size >= self.known.load(Ordering::Relaxed) || at.elapsed() > FLEET_MEMORY {
            self.known.store(size, Ordering::Relaxed);
            *at = Instant::now();
        }
    }

    /// The replicas budgets are shared by (at least 1).
    pub fn known(&self) -> usize {
        self.known.load(Ordering::Relaxed).max(1) as usize
    }

    /// Whether fewer replicas are linked than recently were.
    pub fn cut_off(&self) -> bool {
        self.size.load(Ordering::Relaxed) < self.known.load(Ordering::Relaxed)
    }

    /// The exchange window.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms.load(Ordering::Relaxed).max(1))
    }

    /// Sets the exchange window (the peers' flush interval).
    pub fn set_window(&self, window: Duration) {
        let ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
        self.window_ms.store(ms, Ordering::Relaxed);
    }
}

/// The `kind` of what a tenant used on a replica in one window (tokens of
/// answered requests), not a budget ([`super::fleet_usage`]).
pub const USED: &str = "used";

/// What one replica spent from one budget in one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    /// The tenant.
    pub tenant: String,
    /// The model of a per-model budget; `None` for the tenant's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `requests` or `tokens` (a budget), or [`USED`].
    pub kind: String,
    /// Taken, less given back (negative: more given back than taken).
    pub amount: f64,
}

impl crate::peers::SharedBudgets for super::Tenants {
    fn exchange(&self) -> Option<Vec<u8>> {
        if !self.shares_state() {
            return None;
        }
        self.fleet().refresh();
        // Sent every window, empty or not: the peers count a replica they
        // have not heard from in a few windows as cut off.
        serde_json::to_vec(&self.next_window()).ok()
    }

    fn apply(&self, sender: &str, body: &[u8]) -> Result<(), String> {
        let spent: Vec<Spent> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        self.fleet().heard_from(sender);
        self.spent_elsewhere(&spent);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_is_the_largest_one_linked_recently() {
        let f = FleetView::default();
        assert_eq!((f.known(), f.cut_off()), (1, false));
        f.linked(2);
        assert_eq!((f.known(), f.cut_off()), (3, false));
        f.linked(1);
        assert_eq!((f.known(), f.cut_off()), (3, true));
        f.linked(2);
        assert!(!f.cut_off());
    }

    #[test]
    fn peers_silent_for_a_few_windows_are_not_counted() {
        let f = FleetView::default();
        f.set_window(Duration::from_millis(5));
        f.heard_from("b");
        f.heard_from("c");
        f.refresh();
        assert_eq!((f.known(), f.cut_off()), (3, false));
        std::thread::sleep(Duration::from_millis(20));
        f.heard_from("b");
        f.refresh();
        assert_eq!((f.known(), f.cut_off()), (3, true));
    }
}
