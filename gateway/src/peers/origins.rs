//! Stored responses across replicas: where each Responses API response was
//! created (its model, the endpoint that holds it, the tenant that owns
//! it) is known to the replica that saw it created. A replica asked about
//! an id it does not know asks its linked peers (`POST /peer/v2/origin`,
//! signed like every peer request, the id as the body), takes the first
//! answer that knows it and remembers it. Asking at read time, not
//! spreading records ahead of it, means a follow-up sent the moment the
//! create answer arrived finds its response on any replica: the creating
//! replica remembers the id before the client has read it.
//!
//! The answer says who owns the response; the asking replica applies the
//! same tenant check as for a response created through it, so another
//! tenant gets the unknown-id answer from every replica. Lookups run only
//! for ids unknown here, at most [`MAX_LOOKUPS`] at once (a flood of
//! made-up ids costs the peers nothing beyond that), each bounded by the
//! peer timeout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use pingora_core::connectors::http::Connector;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use super::envelope::SignedRequest;
use super::link::{self, Answer};
use super::Node;

/// Path of origin lookups on the peer listener.
pub const ORIGIN_PATH: &str = "/peer/v2/origin";

/// Longest response id asked about, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Lookups in flight at once; beyond, an unknown id is answered as unknown
/// without asking.
pub const MAX_LOOKUPS: usize = 64;

/// Where a stored response was created, as replicas tell each other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedOrigin {
    /// The model (route name) that served the create request.
    pub model: String,
    /// The endpoint that holds the response.
    pub addr: SocketAddr,
    /// The tenant that created it; `None` for an admin key or a gateway
    /// without keys.
    pub owner: Option<String>,
}

/// What a replica itself knows about stored responses.
pub trait OriginBook: Send + Sync {
    /// Where `id` was created, if it was created through this replica (or
    /// learnt from a peer).
    fn local_origin(&self, id: &str) -> Option<SharedOrigin>;
}

/// The peers linked now (their `hello` answered), by address, with the
/// instance each one is.
#[derive(Default)]
pub struct Directory {
    linked: Mutex<HashMap<SocketAddr, String>>,
}

impl Directory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, String>> {
        self.linked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `addr` is the instance `receiver` now.
    pub fn linked(&self, addr: SocketAddr, receiver: &str) {
        self.lock().insert(addr, receiver.to_owned());
    }

    /// `addr` is not linked (failed, restarted, gone).
    pub fn unlinked(&self, addr: SocketAddr) {
        self.lock().remove(&addr);
    }

    /// Every linked peer.
    pub fn peers(&self) -> Vec<(SocketAddr, String)> {
        self.lock().iter().map(|(a, r)| (*a, r.clone())).collect()
    }
}

/// Asks the linked peers where a response was created.
pub struct OriginLookup {
    node: Arc<Node>,
    connector: Connector,
    timeout: Duration,
    permits: Semaphore,
}

impl OriginLookup {
    /// Lookups from `node`, each exchange bounded by `timeout`.
    pub fn new(node: Arc<Node>, timeout: Duration) -> Self {
        Self {
            node,
            connector: Connector::new(None),
            timeout,
            permits: Semaphore::new(MAX_LOOKUPS),
        }
    }

    /// Where a peer says `id` was created; `None` when no linked peer
    /// knows it (or none answered in time, or too many lookups run).
    pub async fn find(&self, id: &str) -> Option<SharedOrigin> {
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return None;
        }
        let count = |result: &str| {
            self.node
                .metrics
                .origin_lookups
                .with_label_values(&[result])
                .inc();
        };
        let peers = self.node.directory.peers();
        if peers.is_empty() {
            return None;
        }
        let Ok(_permit) = self.permits.try_acquire() else {
            count("busy");
            return None;
        };
        let keys = self.node.keys.keys();
        if keys.is_empty() {
            return None;
        }
        let body = Bytes::copy_from_slice(id.as_bytes());
        let mut asked: FuturesUnordered<_> = peers
            .into_iter()
            .map(|(addr, receiver)| {
                let signed = SignedRequest::new(
                    &keys,
                    ("POST", ORIGIN_PATH),
                    (&self.node.id, &receiver),
                    self.node.next_seq(),
                    &body,
                );
                let (keys, body) = (&keys, body.clone());
                async move {
                    let request = link::Request {
                        method: "POST",
                        path: ORIGIN_PATH,
                        signed: &signed,
                        body,
                    };
                    let answer =
                        link::exchange(&self.connector, addr, keys, request, self.timeout, 4096)
                            .await;
                    match answer {
                        Ok(Answer::Authentic {
                            status: 200, body, ..
                        }) => serde_json::from_slice::<SharedOrigin>(&body).ok(),
                        _ => None,
                    }
                }
            })
            .collect();
        while let Some(answer) = asked.next().await {
            if let Some(origin) = answer {
                count("found");
                return Some(origin);
            }
        }
        count("unknown");
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_follows_links() {
        let d = Directory::default();
        let a: SocketAddr = "10.0.0.1:8091".parse().unwrap();
        d.linked(a, "gw-1");
        d.linked(a, "gw-2");
        assert_eq!(d.peers(), vec![(a, "gw-2".to_owned())]);
        d.unlinked(a);
        assert!(d.peers().is_empty());
    }

    #[test]
    fn origins_travel_as_json() {
        let o = SharedOrigin {
            model: "m".into(),
            addr: "10.0.0.2:8000".parse().unwrap(),
            owner: Some("a".into()),
        };
        let text = serde_json::to_vec(&o).unwrap();
        assert_eq!(serde_json::from_slice::<SharedOrigin>(&text).unwrap(), o);
    }
}
