//! The keys of the peer channel while the shared secret changes.
//!
//! Replicas learn of a new secret at different moments (a mounted Secret
//! reaches each pod on its kubelet's own sync, a new pod starts with the
//! new one while old pods keep the old). For a grace period after a
//! change, a replica therefore signs every message with both the new key
//! and the one before, and accepts either: a replica still on the old
//! secret, and one already on the new, both find a MAC they can check,
//! so sharing never stops while the change spreads. After the grace
//! period only the new key signs and is accepted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::signature::{sha256, Key, MIN_SECRET_LEN};

/// At most this many keys sign a message and are tried on one.
pub const MAX_KEYS: usize = 2;

/// The keys in use at one moment: the current one first, then the one
/// before while its grace period lasts.
#[derive(Clone, Debug, Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

impl KeySet {
    /// The keys, current first; empty until a secret was loaded.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// A set of exactly `keys`, current first.
    pub fn from_keys(keys: Vec<Key>) -> Self {
        KeySet { keys }
    }

    /// Whether no secret was loaded yet.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

struct State {
    current: Option<(Key, [u8; 32])>,
    previous: Option<(Key, Instant)>,
}

/// The shared secret of a replica, changed in place.
pub struct Keyring {
    state: ArcSwap<State>,
    grace: Duration,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

/// What [`Keyring::set`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The first secret.
    Loaded,
    /// Another secret; the one before is accepted for the grace period.
    Rotated,
    /// The same secret as before.
    Unchanged,
}

impl Keyring {
    /// A keyring holding `secret` (none yet when `None`); the secret before
    /// a change is kept for `grace`.
    pub fn new(secret: Option<&[u8]>, grace: Duration) -> Self {
        let current = secret.map(|s| (Key::new(s), sha256(s)));
        Keyring {
            state: ArcSwap::from_pointee(State {
                current,
                previous: None,
            }),
            grace,
        }
    }

    /// Makes `secret` the current one. Refused (and nothing changed) when
    /// shorter than [`MIN_SECRET_LEN`].
    pub fn set(&self, secret: &[u8]) -> Result<Change, String> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(format!(
                "the shared secret must be at least {MIN_SECRET_LEN} bytes"
            ));
        }
        let digest = sha256(secret);
        let state = self.state.load();
        let change = match &state.current {
            None => Change::Loaded,
            Some((_, d)) if *d == digest => return Ok(Change::Unchanged),
            Some(_) => Change::Rotated,
        };
        let previous = match (&state.current, self.grace.is_zero()) {
            (Some((key, _)), false) => Some((key.clone(), Instant::now() + self.grace)),
            _ => None,
        };
        self.state.store(Arc::new(State {
            current: Some((Key::new(secret), digest)),
            previous,
        }));
        Ok(change)
    }

    /// The keys in use now.
    pub fn keys(&self) -> KeySet {
        let state = self.state.load();
        let mut keys = Vec::with_capacity(MAX_KEYS);
        keys.extend(state.current.as_ref().map(|(k, _)| k.clone()));
        if let Some((key, until)) = &state.previous {
            if Instant::now() < *until {
                keys.push(key.clone());
            }
        }
        KeySet { keys }
    }

    /// How long a replaced secret stays accepted.
    pub fn grace(&self) -> Duration {
        self.grace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &[u8] = b"the first shared secret";
    const B: &[u8] = b"the second shared secret";

    fn same(a: &Key, b: &Key) -> bool {
        a.mac(&[b"probe"]) == b.mac(&[b"probe"])
    }

    #[test]
    fn a_change_keeps_the_secret_before_for_the_grace_period_only() {
        let ring = Keyring::new(None, Duration::from_millis(200));
        assert!(ring.keys().is_empty());
        assert_eq!(ring.set(A), Ok(Change::Loaded));
        assert_eq!(ring.keys().keys().len(), 1);
        assert_eq!(ring.set(A), Ok(Change::Unchanged));
        assert_eq!(ring.set(B), Ok(Change::Rotated));
        let keys = ring.keys();
        assert_eq!(keys.keys().len(), 2);
        assert!(
            same(&keys.keys()[0], &Key::new(B)),
            "the new key signs first"
        );
        assert!(same(&keys.keys()[1], &Key::new(A)));
        std::thread::sleep(Duration::from_millis(250));
        let keys = ring.keys();
        assert_eq!(keys.keys().len(), 1);
        assert!(same(&keys.keys()[0], &Key::new(B)));
    }

    #[test]
    fn without_grace_a_change_cuts_over_at_once_and_short_secrets_are_refused() {
        let ring = Keyring::new(Some(A), Duration::ZERO);
        assert!(ring.set(b"short").is_err());
        assert!(same(&ring.keys().keys()[0], &Key::new(A)));
        assert_eq!(ring.set(B), Ok(Change::Rotated));
        assert_eq!(ring.keys().keys().len(), 1);
    }
}
