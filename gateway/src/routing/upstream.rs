//! One pod that can serve a model, as routing knows it.

use std::net::SocketAddr;

#[cfg(doc)]
use super::Strategy;

/// One upstream pod that can serve a model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Upstream {
    /// Where to connect. Also the pod's identity on the hash ring, so a pod
    /// keeps its keys for as long as its address stays in the set.
    pub addr: SocketAddr,
    /// Display id for logs and metrics (e.g. `10.0.0.5:8000`, a pod name or
    /// a URL); never used for routing decisions.
    pub name: String,
    /// Share of requests under [`Strategy::Weighted`] (0: backup only);
    /// 1 unless set, and ignored by every other strategy.
    pub weight: u32,
}

impl Upstream {
    /// An upstream with an explicit display name.
    pub fn new(addr: SocketAddr, name: impl Into<String>) -> Self {
        Upstream {
            addr,
            name: name.into(),
            weight: 1,
        }
    }

    /// The same upstream with another [`Upstream::weight`].
    pub fn with_weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }
}

impl From<SocketAddr> for Upstream {
    /// An upstream named after its address, for the common case where the
    /// address is the only identity there is.
    fn from(addr: SocketAddr) -> Self {
        Upstream {
            addr,
            name: addr.to_string(),
            weight: 1,
        }
    }
}
