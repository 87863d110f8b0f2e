//! Gateway replicas that agree on where each prompt prefix lives.
//!
//! Every replica of a deployment keeps its own cache-aware prefix index
//! ([`crate::routing::prefix_index`]). With sharing on, each block an index
//! learns on the request path ("endpoint E of model M was sent blocks
//! h0..hk") is also queued for the peers ([`Outbox`], a bounded channel:
//! never a wait, a full queue drops and counts). A background task
//! ([`service`]) batches the queue every flush interval, signs each batch
//! ([`signature`]) and posts it to every peer over a queue of its own, so a
//! slow or dead peer only loses its own batches. The receiving replica
//! ([`receiver`], on its own listener) checks the signature and touches the
//! same blocks in its index, without publishing them again. A replica that
//! starts, or sees a peer again after failures, asks the peer which
//! instance it is (`hello`) and pulls its whole index (a signed snapshot,
//! the same [`codec`]).
//!
//! The blocks are idempotent and commute up to LRU order, so replicas
//! converge on the same picture without coordination; a lost record costs
//! at most a cache miss. Pick counts add up, so every request is accepted
//! at most once: each carries its sender instance's sequence number and is
//! addressed to one receiver instance, both signed ([`envelope`],
//! [`replay`]), and answers are signed for the request they answer
//! ([`answer`]). In-flight counts stay per replica: the engines' own
//! queue, which every replica scrapes, is the load they share.

pub mod answer;
pub mod codec;
pub mod envelope;
pub mod keyring;
mod link;
mod metrics;
pub mod origins;
pub mod outbox;
pub mod receiver;
pub mod refusal;
pub mod replay;
pub mod secret;
pub mod service;
pub mod signature;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use metrics::PeerMetrics;
pub use outbox::Outbox;

use crate::connections::ConnectionSettings;
use crate::registry::{ModelRegistry, Resolved};
use codec::{EndpointBlocks, ModelBlocks};
use keyring::Keyring;
use replay::{Rejected, ReplayGuard};
use secret::{KubeSecret, SecretSource, SecretWatch};

/// Path where a replica names its instance.
pub const HELLO_PATH: &str = "/peer/v2/hello";
/// Path of record batches on the peer listener.
pub const RECORDS_PATH: &str = "/peer/v2/records";
/// Path of the snapshot on the peer listener.
pub const SNAPSHOT_PATH: &str = "/peer/v2/snapshot";
/// Path of what a replica spent from tenants' budgets in one window.
pub const BUDGETS_PATH: &str = "/peer/v2/budgets";
/// Largest budgets body accepted, in bytes.
pub const MAX_BUDGETS_BYTES: usize = 4 * 1024 * 1024;

/// Tenants' budgets, shared by the replicas ([`crate::tenants::fleet`]).
pub trait SharedBudgets: Send + Sync {
    /// A new exchange window begins: what this replica spent in the last
    /// one, encoded, for every peer; `None` when there are no budgets.
    fn exchange(&self) -> Option<Vec<u8>>;
    /// Takes what the peer replica `sender` spent (a body
    /// [`Self::exchange`] encoded).
    fn apply(&self, sender: &str, body: &[u8]) -> Result<(), String>;
}

/// Largest record batch accepted, in bytes.
pub const MAX_RECORDS_BYTES: usize = 8 * 1024 * 1024;
/// Largest snapshot accepted, in bytes (a million blocks).
pub const MAX_SNAPSHOT_BYTES: usize = 64 * 1024 * 1024;

/// How sharing is set up.
#[derive(Clone, Debug)]
pub struct PeerSettings {
    /// `host:port` of the peers' listeners; a name resolving to several
    /// addresses (a headless Service) names several peers.
    pub peers: Vec<String>,
    /// Address of this replica's peer listener.
    pub listen: String,
    /// Where the shared secret comes from.
    pub secret: SecretSource,
    /// How long the previous secret stays accepted after a change.
    pub secret_grace: Duration,
    /// This replica's id (its pod name, else the host name, with a random
    /// suffix so a restarted replica is a new sender).
    pub id: String,
    /// Time between two batches.
    pub flush_interval: Duration,
    /// Longest exchange with a peer.
    pub timeout: Duration,
    /// Time between two resolutions of the peer names.
    pub refresh: Duration,
    /// Records queued on the request path before new ones are dropped.
    pub queue: usize,
    /// The limits of the listener's connections (those of the proxy port);
    /// a request body must also arrive within the header timeout.
    pub connections: ConnectionSettings,
}

/// What the outbox, the sender and the receiver of one replica share.
pub struct Node {
    /// This replica instance's id.
    pub id: String,
    /// The shared secret (and the one before, while a change spreads).
    pub keys: Arc<Keyring>,
    /// The routes whose indexes are shared.
    pub registry: Arc<dyn ModelRegistry>,
    /// The series.
    pub metrics: PeerMetrics,
    /// The last sequence number this instance sent.
    seq: AtomicU64,
    /// The sequence numbers received, per sender instance.
    replay: Mutex<ReplayGuard>,
    /// The peers linked now ([`origins`]).
    pub directory: origins::Directory,
    /// Where this replica's stored responses were created, for peers that
    /// ask ([`origins`]).
    pub book: Option<Arc<dyn origins::OriginBook>>,
    /// Tenants' budgets, when the replicas share them.
    pub budgets: Option<Arc<dyn SharedBudgets>>,
}

/// What merging some records did, in blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Touched in an index.
    pub applied: usize,
    /// For a model or endpoint this replica does not know (yet).
    pub unknown: usize,
}

impl Node {
    /// The node of the replica instance `id`.
    pub fn new(
        id: String,
        keys: Arc<Keyring>,
        registry: Arc<dyn ModelRegistry>,
        metrics: PeerMetrics,
    ) -> Self {
        Node {
            id,
            keys,
            registry,
            metrics,
            seq: AtomicU64::new(0),
            replay: Mutex::new(ReplayGuard::default()),
            directory: origins::Directory::default(),
            book: None,
            budgets: None,
        }
    }

    /// Shares `budgets` with the peers.
    pub fn with_budgets(mut self, budgets: Option<Arc<dyn SharedBudgets>>) -> Self {
        self.budgets = budgets;
        self
    }

    /// Answers peers' origin lookups from `book`.
    pub fn with_book(mut self, book: Arc<dyn origins::OriginBook>) -> Self {
        self.book = Some(book);
        self
    }

    /// The sequence number of this instance's next request (from 1).
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Accepts `sender`'s request number `seq` unless it was accepted
    /// before ([`ReplayGuard::admit`]).
    pub fn admit(&self, sender: &str, seq: u64, time_ms: u64, now_ms: u64) -> Result<(), Rejected> {
        self.replay
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(sender, seq, time_ms, now_ms)
    }

    /// The route of the canonical name `model`.
    fn route(&self, model: &str) -> Option<Resolved> {
        self.registry
            .resolve(model)
            .filter(|r| *r.route.name == *model)
    }

    /// Touches the received blocks in the prefix indexes of their models.
    /// Records for endpoints outside the model's current set are dropped:
    /// the index holds only live endpoints.
    pub fn merge(&self, models: &[ModelBlocks]) -> Merged {
        let mut merged = Merged::default();
        for model in models {
            let Some(resolved) = self.route(&model.model) else {
                merged.unknown += model
                    .endpoints
                    .iter()
                    .map(|e| e.hashes.len())
                    .sum::<usize>();
                continue;
            };
            let route = &resolved.route;
            let set = &route.endpoints;
            for endpoint in &model.endpoints {
                let Some(idx) = set.index_of(&endpoint.addr) else {
                    merged.unknown += endpoint.hashes.len();
                    continue;
                };
                set.record_picks(idx, endpoint.picks);
                let capacity = set.index_capacity(idx, &route.options);
                set.prefix_index()
                    .touch(endpoint.addr, &endpoint.hashes, capacity);
                merged.applied += endpoint.hashes.len();
            }
        }
        let blocks = &self.metrics.blocks;
        blocks
            .with_label_values(&["applied"])
            .inc_by(merged.applied as u64);
        blocks
            .with_label_values(&["unknown"])
            .inc_by(merged.unknown as u64);
        merged
    }

    /// Every model's prefix index, least recently used blocks first.
    pub fn snapshot(&self) -> Vec<ModelBlocks> {
        let mut out = Vec::new();
        for listed in self.registry.list() {
            if listed.id != listed.root || listed.parent.is_some() {
                continue;
            }
            let Some(resolved) = self.route(&listed.id) else {
                continue;
            };
            let endpoints: Vec<EndpointBlocks> = resolved
                .route
                .endpoints
                .prefix_index()
                .held()
                .into_iter()
                .filter(|(_, hashes)| !hashes.is_empty())
                .map(|(addr, hashes)| EndpointBlocks {
                    addr,
                    picks: 0,
                    hashes,
                })
                .collect();
            if !endpoints.is_empty() {
                out.push(ModelBlocks {
                    model: listed.id,
                    endpoints,
                });
            }
        }
        out
    }
}

/// A replica instance id: `base` (pod or host name) and a random 64-bit
/// suffix, new at every start, so that a restarted replica is a new sender
/// (its sequence numbers start again) and a new receiver (requests
/// addressed to its previous instance are refused).
pub fn replica_id(base: Option<&str>) -> String {
    let base = base
        .map(str::to_owned)
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "gateway".into());
    let base: String = base
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        .take(63)
        .collect();
    format!("{base}-{:016x}", rand::random::<u64>())
}

/// What the request path holds of sharing.
pub struct PeerHandles {
    /// Where picks are queued for the peers.
    pub outbox: Arc<Outbox>,
    /// Asks the peers where a stored response was created.
    pub origins: Arc<origins::OriginLookup>,
}

/// The request path's handles and the services (peer listener, sender) of
/// sharing as `settings` describe it; peers' origin lookups are answered
/// from `book`, and tenants' `budgets` (when keys have limits) are shared.
pub fn start(
    settings: PeerSettings,
    registry: Arc<dyn ModelRegistry>,
    book: Arc<dyn origins::OriginBook>,
    budgets: Option<Arc<dyn SharedBudgets>>,
    metrics: &crate::metrics::Metrics,
) -> (
    PeerHandles,
    Vec<Box<dyn pingora_core::services::ServiceWithDependents>>,
) {
    use pingora_core::services::background::background_service;
    use pingora_core::services::listening::Service;

    let gateway_metrics = metrics.clone();
    let metrics = PeerMetrics::new(metrics.registry());
    // Checked by `from_cli`: a fixed or file secret was readable then.
    let initial = settings.secret.initial().ok().flatten();
    let keys = Arc::new(Keyring::new(initial.as_deref(), settings.secret_grace));
    let secret_watch = SecretWatch::new(
        settings.secret.clone(),
        Arc::clone(&keys),
        metrics.secret_changes.clone(),
    );
    let node = Arc::new(
        Node::new(settings.id.clone(), keys, registry, metrics.clone())
            .with_book(book)
            .with_budgets(budgets),
    );
    let lookup = Arc::new(origins::OriginLookup::new(
        Arc::clone(&node),
        settings.timeout,
    ));
    let (outbox, rx) = Outbox::new(settings.queue, &metrics);
    let app = receiver::PeerApp::new(Arc::clone(&node), settings.connections.header_timeout);
    let mut listener = Service::new(
        "flexinfer-routing-peers".to_string(),
        crate::connections::guarded_http(app, settings.connections, gateway_metrics),
    );
    listener.add_tcp(&settings.listen);
    tracing::info!(
        id = %settings.id,
        listen = %settings.listen,
        peers = ?settings.peers,
        "sharing routing state with peer replicas"
    );
    let sender = service::Sender::new(node, settings, rx);
    let services: Vec<Box<dyn pingora_core::services::ServiceWithDependents>> = vec![
        Box::new(listener),
        Box::new(background_service("routing peers", sender)),
        Box::new(background_service("routing peer secret", secret_watch)),
    ];
    let handles = PeerHandles {
        outbox: Arc::new(outbox),
        origins: lookup,
    };
    (handles, services)
}

/// Sharing as the command line sets it: `None` when no peer is named.
pub fn from_cli(cli: &crate::cli::Cli) -> anyhow::Result<Option<PeerSettings>> {
    let peers: Vec<String> = cli
        .routing_peers
        .iter()
        .flat_map(|p| p.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    if peers.is_empty() {
        return Ok(None);
    }
    let secret = secret_source(cli)?;
    if let Some(initial) = secret.initial()? {
        if initial.len() < signature::MIN_SECRET_LEN {
            anyhow::bail!(
                "PROXY_ROUTING_PEERS needs a shared secret of at least {} bytes \
                 (PROXY_ROUTING_PEER_SECRET, PROXY_ROUTING_PEER_SECRET_FILE or \
                 PROXY_ROUTING_PEER_SECRET_NAME)",
                signature::MIN_SECRET_LEN
            );
        }
    }
    if cli.routing_peer_flush_interval.is_zero() || cli.routing_peer_timeout.is_zero() {
        anyhow::bail!(
            "PROXY_ROUTING_PEER_FLUSH_INTERVAL and PROXY_ROUTING_PEER_TIMEOUT must be > 0"
        );
    }
    Ok(Some(PeerSettings {
        peers,
        listen: cli.routing_peer_listen.clone(),
        secret,
        secret_grace: cli.routing_peer_secret_grace,
        id: replica_id(cli.pod_name.as_deref()),
        flush_interval: cli.routing_peer_flush_interval,
        timeout: cli.routing_peer_timeout,
        refresh: cli.routing_peer_refresh.max(Duration::from_millis(100)),
        queue: 4096,
        connections: cli.connection_settings(),
    }))
}

/// Where the command line says the shared secret is: a file first, then
/// the value, then a Kubernetes Secret.
fn secret_source(cli: &crate::cli::Cli) -> anyhow::Result<SecretSource> {
    Ok(
        match (
            &cli.routing_peer_secret_file,
            &cli.routing_peer_secret,
            &cli.routing_peer_secret_name,
        ) {
            (Some(path), _, _) => SecretSource::File(path.clone()),
            (None, Some(secret), _) => SecretSource::Fixed(secret.trim().as_bytes().to_vec()),
            (None, None, Some(name)) => SecretSource::Kubernetes(KubeSecret {
                namespace: cli.pod_namespace.clone(),
                name: name.clone(),
                key: cli.routing_peer_secret_key.clone(),
                generate: cli.routing_peer_secret_generate,
                kubeconfig: cli.kubeconfig.clone(),
            }),
            (None, None, None) => SecretSource::Fixed(Vec::new()),
        },
    )
}
