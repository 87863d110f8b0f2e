//! The Service DNS fallback: a model that is Ready but whose Service has no
//! EndpointSlice the gateway can see is sent to its `status.endpoint` URL,
//! else to `<model>.<namespace>.svc` on the backend's port, as the original
//! proxy did. Names are resolved in the background and cached, so route
//! rebuilds (and requests) never wait on DNS; a changed answer triggers a
//! rebuild.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long an answer (or a failure) is used before it is looked up again.
pub const DNS_TTL: Duration = Duration::from_secs(30);

/// Longest a lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Cached {
    addrs: Vec<SocketAddr>,
    at: Option<Instant>,
    pending: bool,
}

/// Background DNS answers for `host:port` names.
pub struct DnsCache {
    entries: Mutex<HashMap<String, Cached>>,
    changed: Arc<Notify>,
}

impl DnsCache {
    /// A cache notifying `changed` when an answer changes.
    pub fn new(changed: Arc<Notify>) -> Arc<Self> {
        Arc::new(Self {
            entries: Mutex::new(HashMap::new()),
            changed,
        })
    }

    /// The addresses last resolved for `host:port` (none yet: empty), and a
    /// lookup started in the background when there is no fresh answer.
    /// Must be called within a Tokio runtime.
    pub fn lookup(self: &Arc<Self>, host: &str, port: u16) -> Vec<SocketAddr> {
        let key = format!("{host}:{port}");
        let mut map = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(key.clone()).or_default();
        let stale = entry.at.is_none_or(|t| t.elapsed() >= DNS_TTL);
        if stale && !entry.pending {
            entry.pending = true;
            tokio::spawn(self.clone().refresh(key));
        }
        entry.addrs.clone()
    }

    async fn refresh(self: Arc<Self>, key: String) {
        let mut addrs: Vec<SocketAddr> =
            match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host(key.as_str())).await
            {
                Ok(Ok(found)) => found.collect(),
                _ => Vec::new(),
            };
        addrs.sort();
        addrs.dedup();
        let changed = {
            let mut map = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = map.entry(key).or_default();
            entry.pending = false;
            entry.at = Some(Instant::now());
            let changed = entry.addrs != addrs;
            entry.addrs = addrs;
            changed
        };
        if changed {
            self.changed.notify_one();
        }
    }
}

/// Host and port of an endpoint URL such as `http://m.ns.svc:8000/v1`.
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let uri: http::Uri = url.trim().parse().ok()?;
    let host = uri
        .host()?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls_give_host_and_port() {
        assert_eq!(
            host_port("http://m.ml.svc:8000/v1"),
            Some(("m.ml.svc".to_string(), 8000))
        );
        assert_eq!(
            host_port("http://10.0.0.1"),
            Some(("10.0.0.1".to_string(), 80))
        );
        assert_eq!(host_port("not a url"), None);
    }

    #[tokio::test]
    async fn answers_arrive_in_the_background_and_notify() {
        let changed = Arc::new(Notify::new());
        let dns = DnsCache::new(changed.clone());
        assert!(
            dns.lookup("127.0.0.1", 8000).is_empty(),
            "nothing cached yet"
        );
        tokio::time::timeout(Duration::from_secs(10), changed.notified())
            .await
            .unwrap();
        assert_eq!(
            dns.lookup("127.0.0.1", 8000),
            vec!["127.0.0.1:8000".parse::<SocketAddr>().unwrap()]
        );
    }
}
