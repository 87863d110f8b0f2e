//! The peer-sharing series, registered beside the gateway's own.

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

/// Counters of what replicas exchange.
#[derive(Clone)]
pub struct PeerMetrics {
    /// Prompt blocks by result: `published` (queued for the peers),
    /// `dropped` (the queue was full), `applied` (received and merged),
    /// `unknown` (received for a model or endpoint this replica lacks).
    pub blocks: IntCounterVec,
    /// Bytes of bodies sent and received, by direction and kind
    /// (`records`, `snapshot`).
    pub bytes: IntCounterVec,
    /// Batches by result: `sent`, `failed` (no answer in time, refused
    /// connection, error status), `skipped` (the peer is backing off or
    /// its queue is full).
    pub batches: IntCounterVec,
    /// Requests received from peers by result: `accepted`,
    /// `unauthorized`, `malformed`, `self`, `busy`, `not_found`.
    pub received: IntCounterVec,
    /// Peer messages refused, by reason: the receiver's
    /// ([`super::refusal::Refusal::reason`]) and, on the sender's side,
    /// `unsigned_answer` (an answer not signed for its request, ignored).
    pub rejected: IntCounterVec,
    /// Changes of the shared secret by result: `loaded`, `rotated`,
    /// `refused` (too short; the current one is kept).
    pub secret_changes: IntCounterVec,
    /// Snapshots by result: `served`, `applied`, `failed`.
    pub snapshots: IntCounterVec,
    /// Lookups of a stored response's origin asked of the peers, by
    /// result: `found`, `unknown` (no linked peer knows it), `busy` (too
    /// many lookups at once: not asked).
    pub origin_lookups: IntCounterVec,
    /// Peers currently known (resolved and not this replica).
    pub peers: IntGauge,
}

impl PeerMetrics {
    /// Registers the series in `registry` (a second registration in the
    /// same registry is ignored: the series still count, unexported).
    pub fn new(registry: &Registry) -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)
                .unwrap_or_else(|_| unreachable!("static metric definition"));
            let _ = registry.register(Box::new(c.clone()));
            c
        };
        let peers = IntGauge::new(
            "flexinfer_proxy_routing_peers",
            "Gateway replicas this one shares routing state with.",
        )
        .unwrap_or_else(|_| unreachable!("static metric definition"));
        let _ = registry.register(Box::new(peers.clone()));
        Self {
            blocks: counter(
                "flexinfer_proxy_routing_peer_blocks_total",
                "Prompt blocks shared between gateway replicas, by result: published, dropped (queue full), applied (received and merged), unknown (model or endpoint not known here).",
                &["result"],
            ),
            bytes: counter(
                "flexinfer_proxy_routing_peer_bytes_total",
                "Body bytes exchanged with gateway replicas, by direction (sent, received) and kind (records, snapshot, budgets).",
                &["direction", "kind"],
            ),
            batches: counter(
                "flexinfer_proxy_routing_peer_batches_total",
                "Record batches addressed to peers, by result: sent, failed, skipped (peer backing off or behind).",
                &["result"],
            ),
            received: counter(
                "flexinfer_proxy_routing_peer_requests_total",
                "Requests received from peers, by result: accepted, unauthorized, malformed, self, busy, not_found.",
                &["result"],
            ),
            rejected: counter(
                "flexinfer_proxy_routing_peer_rejected_total",
                "Peer messages refused, by reason: not_found, old_protocol, no_length, too_large, unsigned, stale, bad_signature, wrong_receiver, replayed, self, busy, no_secret, body_timeout, body_mismatch, unreadable, malformed (requests received); unsigned_answer (answers the sender ignored).",
                &["reason"],
            ),
            secret_changes: counter(
                "flexinfer_proxy_routing_peer_secret_changes_total",
                "Changes of the replicas' shared secret taken up, by result: loaded, rotated (the previous one accepted for the grace period), refused (too short; the current one kept).",
                &["result"],
            ),
            snapshots: counter(
                "flexinfer_proxy_routing_peer_snapshots_total",
                "Prefix-index snapshots, by result: served, applied, failed.",
                &["result"],
            ),
            origin_lookups: counter(
                "flexinfer_proxy_routing_peer_origin_lookups_total",
                "Lookups of where a stored response was created, asked of the peer replicas for an id unknown here, by result: found, unknown, busy (too many at once: not asked).",
                &["result"],
            ),
            peers,
        }
    }
}
