//! Caps on open client connections, in all and per client address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Counts open connections and refuses those over the caps.
#[derive(Debug, Default)]
pub struct ConnectionLimits {
    max_total: usize,
    max_per_client: usize,
    open: AtomicUsize,
    per_client: Mutex<HashMap<IpAddr, usize>>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_connections` are open.
    Total,
    /// This address holds `max_connections_per_client`.
    Client,
}

impl Refusal {
    /// The metric label and the words of the answer.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Total => "total_limit",
            Refusal::Client => "client_limit",
        }
    }
}

/// An open connection, counted until dropped.
#[derive(Debug)]
pub struct Permit {
    limits: Arc<ConnectionLimits>,
    client: Option<IpAddr>,
}

impl ConnectionLimits {
    /// Caps of `max_total` and `max_per_client` connections (0: no cap).
    pub fn new(max_total: usize, max_per_client: usize) -> Self {
        Self {
            max_total,
            max_per_client,
            ..Self::default()
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Counts a new connection from `client`, or says why it may not open.
    pub fn admit(self: &Arc<Self>, client: Option<IpAddr>) -> Result<Permit, Refusal> {
        let open = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        if self.max_total > 0 && open > self.max_total {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Total);
        }
        let counted = match client.filter(|_| self.max_per_client > 0) {
            Some(ip) => {
                let mut map = self.lock();
                let count = map.entry(ip).or_insert(0);
                if *count >= self.max_per_client {
                    drop(map);
                    self.open.fetch_sub(1, Ordering::AcqRel);
                    return Err(Refusal::Client);
                }
                *count += 1;
                Some(ip)
            }
            None => None,
        };
        Ok(Permit {
            limits: self.clone(),
            client: counted,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(ip) = self.client {
            let mut map = self.limits.lock();
            if let Some(count) = map.get_mut(&ip) {
                *count -= 1;
                if *count == 0 {
                    map.remove(&ip);
                }
            }
        }
        self.limits.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_open_connections_and_free_them_on_drop() {
        let limits = Arc::new(ConnectionLimits::new(3, 2));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = limits.admit(Some(a)).unwrap();
        let _a2 = limits.admit(Some(a)).unwrap();
        assert_eq!(limits.admit(Some(a)).unwrap_err(), Refusal::Client);
        let _b1 = limits.admit(Some(b)).unwrap();
        assert_eq!(limits.admit(Some(b)).unwrap_err(), Refusal::Total);
        assert_eq!(limits.open(), 3);
        drop(a1);
        assert_eq!(limits.open(), 2);
        let _a3 = limits.admit(Some(a)).expect("a freed slot is reusable");
        assert_eq!(limits.lock().get(&a), Some(&2));
    }

    #[test]
    fn zero_means_no_cap() {
        let limits = Arc::new(ConnectionLimits::new(0, 0));
        let permits: Vec<_> = (0..100)
            .map(|_| limits.admit(Some("10.0.0.1".parse().unwrap())).unwrap())
            .collect();
        assert_eq!(limits.open(), 100);
        assert!(
            limits.lock().is_empty(),
            "no per-client bookkeeping without a cap"
        );
        drop(permits);
        assert_eq!(limits.open(), 0);
    }
}
