//! A token bucket that can be charged up front and corrected later: the
//! one type behind a tenant's requests/s and tokens/min limits.
//!
//! Behind several gateway replicas a bucket is the fleet's
//! ([`super::fleet`]): what this replica takes or gives back is sent to
//! its peers, what they took is taken here too, and within one exchange
//! window this replica takes at most its share of what was left when the
//! window began, so that replicas charging at once cannot overspend what
//! none of them has heard of yet.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fleet::FleetView;

/// A bucket holding up to `capacity` tokens, refilled at `rate` per second.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    capacity: f64,
    fleet: Arc<FleetView>,
    state: Mutex<Level>,
}

#[derive(Debug)]
struct Level {
    tokens: f64,
    at: Instant,
    /// Taken here (less what was given back) and not yet told the peers.
    unsent: f64,
    /// Taken here since the exchange window began.
    window: f64,
    /// The level when it began.
    window_start: f64,
    /// This replica's own share of the bucket (1/N of it, refilled at 1/N
    /// of the rate), the limit while it is cut off from its peers.
    share: f64,
}

/// Why a charge was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// Enough tokens come back after this long.
    Wait(Duration),
    /// More than the bucket ever holds.
    TooLarge,
    /// This replica took its share of the window: the next window, after
    /// this long, has room again.
    NextWindow(Duration),
}

impl Bucket {
    /// A full bucket of `capacity` tokens refilled at `rate` per second,
    /// on one replica.
    pub fn new(rate: f64, capacity: f64) -> Self {
        Self::shared(rate, capacity, Arc::default())
    }

    /// A full bucket of the fleet `fleet` describes.
    pub fn shared(rate: f64, capacity: f64, fleet: Arc<FleetView>) -> Self {
        Self {
            rate,
            capacity,
            fleet,
            state: Mutex::new(Level {
                tokens: capacity,
                at: Instant::now(),
                unsent: 0.0,
                window: 0.0,
                window_start: capacity,
                share: capacity,
            }),
        }
    }

    /// Tokens the bucket holds when full.
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    fn with_level<T>(&self, f: impl FnOnce(&mut Level, usize) -> T) -> T {
        let mut level = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(level.at).as_secs_f64();
        let n = self.fleet.known();
        level.tokens = (level.tokens + elapsed * self.rate).min(self.capacity);
        let share_cap = self.capacity / n as f64;
        level.share = (level.share + elapsed * self.rate / n as f64).min(share_cap);
        level.at = now;
        f(&mut level, n)
    }

    /// Takes `cost` tokens when the bucket holds them (and, behind several
    /// replicas, when this replica's share allows it).
    pub fn take(&self, cost: f64) -> Result<(), Refusal> {
        self.take_reporting(cost).map(drop)
    }

    /// [`Bucket::take`], answering what [`Bucket::remaining`] would after
    /// it, read under the same lock and clock reading.
    pub fn take_reporting(&self, cost: f64) -> Result<(f64, Duration), Refusal> {
        if cost > self.capacity {
            return Err(Refusal::TooLarge);
        }
        self.with_level(|level, n| {
            if level.tokens < cost {
                let missing = cost - level.tokens;
                return Err(Refusal::Wait(Duration::from_secs_f64(missing / self.rate)));
            }
            if n > 1 {
                if self.fleet.cut_off() && level.share < cost {
                    let missing = cost - level.share;
                    let rate = self.rate / n as f64;
                    return Err(Refusal::Wait(Duration::from_secs_f64(missing / rate)));
                }
                let room = level.window_start / n as f64;
                if level.window > 0.0 && level.window + cost > room {
                    return Err(Refusal::NextWindow(self.fleet.window()));
                }
            }
            level.tokens -= cost;
            level.share -= cost;
            level.window += cost;
            level.unsent += cost;
            Ok(self.report(level))
        })
    }

    /// Gives back `tokens` (negative: takes more, possibly below zero, as
    /// when a request used more than it was charged). A debt is carried
    /// whole: nothing is taken again until the refill has repaid it.
    pub fn adjust(&self, tokens: f64) {
        self.with_level(|level, n| {
            level.tokens = (level.tokens + tokens).min(self.capacity);
            level.share = (level.share + tokens).min(self.capacity / n as f64);
            level.unsent -= tokens;
        });
    }

    /// Takes what a peer replica took (`tokens`, negative when it gave
    /// back); not sent on again.
    pub fn spent_elsewhere(&self, tokens: f64) {
        self.with_level(|level, _| {
            level.tokens = (level.tokens - tokens).min(self.capacity);
        });
    }

    /// What was taken here since the last call, to tell the peers; a new
    /// exchange window begins.
    pub fn next_window(&self) -> f64 {
        self.with_level(|level, _| {
            level.window = 0.0;
            level.window_start = level.tokens.max(0.0);
            std::mem::take(&mut level.unsent)
        })
    }

    /// Tokens there now (never below zero) and how long until the bucket
    /// is full again.
    pub fn remaining(&self) -> (f64, Duration) {
        self.with_level(|level, _| self.report(level))
    }

    fn report(&self, level: &Level) -> (f64, Duration) {
        let empty = (self.capacity - level.tokens).max(0.0);
        (
            level.tokens.max(0.0),
            Duration::from_secs_f64(empty / self.rate),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_refuse_and_say_how_long_to_wait() {
        let b = Bucket::new(10.0, 100.0);
        assert_eq!(b.take(60.0), Ok(()));
        match b.take(60.0) {
            Err(Refusal::Wait(d)) => {
                assert!(d > Duration::from_millis(1900) && d <= Duration::from_secs(2))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(b.take(101.0), Err(Refusal::TooLarge));
    }

    #[test]
    fn a_charge_reports_the_level_it_leaves() {
        // A slow refill: the level cannot move between the two readings.
        let b = Bucket::new(0.001, 100.0);
        let (left, full_in) = b.take_reporting(30.0).unwrap();
        assert!((69.99..=70.0).contains(&left), "{left}");
        assert!(full_in > Duration::from_secs(29_000), "{full_in:?}");
        let (again, _) = b.remaining();
        assert!((again - left).abs() < 0.01, "{again} vs {left}");
        assert_eq!(b.take_reporting(101.0), Err(Refusal::TooLarge));
    }

    #[test]
    fn corrections_refund_and_overdraw() {
        let b = Bucket::new(1.0, 100.0);
        b.take(100.0).unwrap();
        b.adjust(30.0);
        assert!(b.take(30.0).is_ok());
        b.adjust(-50.0);
        let (left, full_in) = b.remaining();
        assert_eq!(left, 0.0, "an overdrawn bucket shows nothing left");
        assert!(full_in > Duration::from_secs(149), "{full_in:?}");
        // A debt larger than the bucket is carried whole, not forgiven.
        b.adjust(-500.0);
        assert!(b.remaining().1 > Duration::from_secs(649));
        assert!(matches!(b.take(1.0), Err(Refusal::Wait(d)) if d > Duration::from_secs(549)));
        b.adjust(1e9);
        assert_eq!(b.remaining().0, 100.0, "never above capacity");
    }

    #[test]
    fn a_fleet_bucket_takes_its_window_share_and_what_peers_spent() {
        let fleet = Arc::new(FleetView::default());
        fleet.linked(2); // three replicas
        let b = Bucket::shared(0.001, 900.0, fleet.clone());
        // One request per window always passes; beyond it, a third of
        // what was left when the window began.
        assert_eq!(b.take(200.0), Ok(()));
        assert_eq!(b.take(100.0), Ok(()));
        assert!(matches!(b.take(1.0), Err(Refusal::NextWindow(_))));
        assert_eq!(b.next_window(), 300.0, "taken here, for the peers");
        // The peers spent 500 meanwhile.
        b.spent_elsewhere(500.0);
        assert_eq!(b.next_window(), 0.0);
        assert_eq!(b.take(100.0), Ok(()));
        assert!(matches!(b.take(100.0), Err(Refusal::Wait(_))));
        // Refunds are told to the peers too.
        b.adjust(40.0);
        assert_eq!(b.next_window(), 60.0);
    }

    #[test]
    fn a_replica_cut_off_from_its_peers_keeps_to_its_share() {
        let fleet = Arc::new(FleetView::default());
        fleet.linked(2);
        let b = Bucket::shared(0.001, 900.0, fleet.clone());
        fleet.linked(0); // its peers are gone: a third is its own
        assert!(fleet.cut_off());
        let mut taken = 0.0;
        for _ in 0..20 {
            b.next_window();
            if b.take(50.0).is_ok() {
                taken += 50.0;
            }
        }
        assert_eq!(taken, 300.0, "a third of the bucket");
    }
}
