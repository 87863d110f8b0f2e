//! A token bucket that can be charged up front and corrected later: the
//! one type behind a tenant's requests/s and tokens/min limits.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A bucket holding up to `capacity` tokens, refilled at `rate` per second.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    capacity: f64,
    state: Mutex<Level>,
}

#[derive(Debug)]
struct Level {
    tokens: f64,
    at: Instant,
}

/// Why a charge was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// Enough tokens come back after this long.
    Wait(Duration),
    /// More than the bucket ever holds.
    TooLarge,
}

impl Bucket {
    /// A full bucket of `capacity` tokens refilled at `rate` per second.
    pub fn new(rate: f64, capacity: f64) -> Self {
        Self {
            rate,
            capacity,
            state: Mutex::new(Level {
                tokens: capacity,
                at: Instant::now(),
            }),
        }
    }

    /// Tokens the bucket holds when full.
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    fn with_level<T>(&self, f: impl FnOnce(&mut f64) -> T) -> T {
        let mut level = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(level.at).as_secs_f64();
        level.tokens = (level.tokens + elapsed * self.rate).min(self.capacity);
        level.at = now;
        f(&mut level.tokens)
    }

    /// Takes `cost` tokens when the bucket holds them.
    pub fn take(&self, cost: f64) -> Result<(), Refusal> {
        if cost > self.capacity {
            return Err(Refusal::TooLarge);
        }
        self.with_level(|tokens| {
            if *tokens >= cost {
                *tokens -= cost;
                Ok(())
            } else {
                let missing = cost - *tokens;
                Err(Refusal::Wait(Duration::from_secs_f64(missing / self.rate)))
            }
        })
    }

    /// Gives back `tokens` (negative: takes more, possibly below zero, as
    /// when a request used more than it was charged). A debt is carried
    /// whole: nothing is taken again until the refill has repaid it.
    pub fn adjust(&self, tokens: f64) {
        self.with_level(|level| *level = (*level + tokens).min(self.capacity));
    }

    /// Tokens there now (never below zero) and how long until the bucket
    /// is full again.
    pub fn remaining(&self) -> (f64, Duration) {
        self.with_level(|tokens| {
            let empty = (self.capacity - *tokens).max(0.0);
            (tokens.max(0.0), Duration::from_secs_f64(empty / self.rate))
        })
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
}
