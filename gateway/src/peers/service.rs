//! The sender: resolves the peer names, batches the outbox every flush
//! interval, and keeps one link task per peer that posts its batches in
//! order and, when it first reaches the peer and after each recovery, asks
//! which instance the peer is (`hello`) and pulls its snapshot. Each link
//! has its own short queue: a peer that is slow or down loses its own
//! batches (counted), never anyone else's, and nothing here is on the
//! request path. Only answers signed for their request are acted upon: an
//! unsigned or forged answer (a `409` from a neighbour) counts as a failed
//! exchange, never as "this peer is myself".

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::connectors::http::Connector;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::envelope::SignedRequest;
use super::keyring::KeySet;
use super::link::{self, Answer};
use super::outbox::{Batch, Record};
use super::signature::{now_ms, sha256, Envelope};
use super::{
    codec, Node, PeerSettings, BUDGETS_PATH, HELLO_PATH, MAX_SNAPSHOT_BYTES, RECORDS_PATH,
    SNAPSHOT_PATH,
};

/// Batches queued per peer before new ones are skipped for it.
const LINK_QUEUE: usize = 16;
/// Most blocks in one batch (512 KiB of hashes).
const MAX_BATCH_BLOCKS: usize = 64 * 1024;
/// First pause after a failed exchange with a peer; doubles to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Longest pause between attempts at a failing peer.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Snapshot pulls whose blocks all fell on unknown endpoints (the routes
/// are not loaded yet) are tried again this many times, a second apart.
const SNAPSHOT_RETRIES: usize = 10;

/// The background half of sharing.
pub struct Sender {
    node: Arc<Node>,
    settings: PeerSettings,
    outbox: std::sync::Mutex<Option<mpsc::Receiver<Record>>>,
}

impl Sender {
    /// The sender draining `outbox`.
    pub fn new(node: Arc<Node>, settings: PeerSettings, outbox: mpsc::Receiver<Record>) -> Self {
        Sender {
            node,
            settings,
            outbox: std::sync::Mutex::new(Some(outbox)),
        }
    }
}

/// A batch body and its SHA-256, computed once for every peer, and the
/// path it is posted to.
#[derive(Clone)]
struct Body {
    path: &'static str,
    bytes: Bytes,
    sha256: [u8; 32],
}

impl Body {
    fn new(path: &'static str, bytes: Vec<u8>) -> Self {
        Body {
            path,
            sha256: sha256(&bytes),
            bytes: Bytes::from(bytes),
        }
    }

    fn empty() -> Self {
        Body::new("", Vec::new())
    }
}

/// One peer's link task and queue; the task stops when this is dropped.
struct Link {
    tx: mpsc::Sender<Body>,
    task: JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[async_trait]
impl BackgroundService for Sender {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(mut outbox) = self.outbox.lock().ok().and_then(|mut o| o.take()) else {
            return;
        };
        let connector = Arc::new(Connector::new(None));
        let mut links: HashMap<SocketAddr, Link> = HashMap::new();
        let (selves_tx, mut selves_rx) = mpsc::unbounded_channel::<SocketAddr>();
        let mut selves: HashSet<SocketAddr> = HashSet::new();
        let mut refresh = tokio::time::interval(self.settings.refresh);
        let mut flush = tokio::time::interval(self.settings.flush_interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Batch::default();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                Some(addr) = selves_rx.recv() => {
                    selves.insert(addr);
                    links.remove(&addr);
                    self.node.metrics.peers.set(links.len() as i64);
                }
                _ = refresh.tick() => {
                    let addrs = resolve(&self.settings.peers).await;
                    links.retain(|addr, _| addrs.contains(addr));
                    for addr in addrs.into_iter().filter(|a| !selves.contains(a)) {
                        links.entry(addr).or_insert_with(|| {
                            let (tx, rx) = mpsc::channel(LINK_QUEUE);
                            let peer = Peer {
                                node: Arc::clone(&self.node),
                                connector: Arc::clone(&connector),
                                addr,
                                timeout: self.settings.timeout,
                                receiver: String::new(),
                                told_old: false,
                            };
                            let task = tokio::spawn(run_link(peer, rx, selves_tx.clone()));
                            Link { tx, task }
                        });
                    }
                    self.node.metrics.peers.set(links.len() as i64);
                }
                _ = flush.tick() => {
                    if let Some(budgets) = &self.node.budgets {
                        // A new exchange window: what this replica spent
                        // from tenants' budgets goes to every peer.
                        if let Some(spent) = budgets.exchange() {
                            let body = Body::new(BUDGETS_PATH, spent);
                            for link in links.values() {
                                if link.tx.try_send(body.clone()).is_err() {
                                    self.node.metrics.batches.with_label_values(&["skipped"]).inc();
                                }
                            }
                        }
                    }
                    while batch.blocks() < MAX_BATCH_BLOCKS {
                        match outbox.try_recv() {
                            Ok(record) => batch.push(record),
                            Err(_) => break,
                        }
                    }
                    if batch.is_empty() {
                        continue;
                    }
                    let (body, _) = codec::encode(&batch.take());
                    let body = Body::new(RECORDS_PATH, body);
                    let batches = &self.node.metrics.batches;
                    for link in links.values() {
                        if link.tx.try_send(body.clone()).is_err() {
                            batches.with_label_values(&["skipped"]).inc();
                        }
                    }
                }
            }
        }
    }
}

/// Every address the peer names resolve to; a name that does not resolve
/// now names no peer until it does.
async fn resolve(names: &[String]) -> HashSet<SocketAddr> {
    let mut out = HashSet::new();
    for name in names {
        if let Ok(addr) = name.parse::<SocketAddr>() {
            out.insert(addr);
            continue;
        }
        let lookup = tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host(name));
        match lookup.await {
            Ok(Ok(addrs)) => out.extend(addrs),
            Ok(Err(e)) => tracing::debug!(peer = %name, error = %e, "peer name does not resolve"),
            Err(_) => tracing::debug!(peer = %name, "peer name lookup timed out"),
        }
    }
    out
}

/// What an exchange with a peer came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// The peer is this replica (said by an answer signed for the request).
    Itself,
    /// The peer is another instance than the one addressed (it restarted):
    /// say hello again, at once.
    Relink,
    Failed,
}

/// One peer as its link sees it; it leaves the directory of linked peers
/// ([`super::origins::Directory`]) with its link.
struct Peer {
    node: Arc<Node>,
    connector: Arc<Connector>,
    addr: SocketAddr,
    timeout: Duration,
    /// The peer instance, as its last `hello` named it.
    receiver: String,
    /// Whether an answer like an older release's was logged already.
    told_old: bool,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.node.directory.unlinked(self.addr);
    }
}

/// One peer: says hello and pulls its snapshot, then posts the batches
/// queued for it in order. After a failure the peer is left alone for a
/// backoff (its batches meanwhile are skipped), and hello and snapshot are
/// done again once it answers, so that what either side missed is made up.
async fn run_link(
    mut peer: Peer,
    mut rx: mpsc::Receiver<Body>,
    selves: mpsc::UnboundedSender<SocketAddr>,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut resume_at: Option<Instant> = None;
    let mut need_link = true;
    loop {
        if need_link && resume_at.is_none_or(|at| Instant::now() >= at) {
            match peer.link().await {
                Outcome::Ok => {
                    need_link = false;
                    backoff = FIRST_BACKOFF;
                    resume_at = None;
                }
                Outcome::Itself => {
                    let _ = selves.send(peer.addr);
                    return;
                }
                Outcome::Relink | Outcome::Failed => {
                    resume_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        // Wait for a batch; while the link is still owed, come back for it
        // when the backoff ends even without one.
        let next = match resume_at.filter(|_| need_link) {
            Some(at) => match tokio::time::timeout_at(at.into(), rx.recv()).await {
                Ok(next) => next,
                Err(_) => continue,
            },
            None => rx.recv().await,
        };
        let Some(body) = next else {
            return;
        };
        let batches = &peer.node.metrics.batches;
        if need_link || resume_at.is_some_and(|at| Instant::now() < at) {
            batches.with_label_values(&["skipped"]).inc();
            continue;
        }
        match peer.post(body).await {
            Outcome::Ok => {
                backoff = FIRST_BACKOFF;
                resume_at = None;
            }
            Outcome::Itself => {
                let _ = selves.send(peer.addr);
                return;
            }
            Outcome::Relink => {
                peer.node.directory.unlinked(peer.addr);
                need_link = true;
            }
            Outcome::Failed => {
                peer.node.directory.unlinked(peer.addr);
                need_link = true;
                resume_at = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

impl Peer {
    /// A request to the peer: the next sequence number of this instance,
    /// addressed to `receiver`, signed.
    fn sign(
        &self,
        keys: &KeySet,
        (method, path): (&str, &str),
        receiver: &str,
        body: &Body,
    ) -> SignedRequest {
        let node = &self.node;
        let envelope = Envelope {
            sender: node.id.clone(),
            receiver: receiver.to_owned(),
            time_ms: now_ms(),
            seq: node.next_seq(),
            length: body.bytes.len() as u64,
            body_sha256: body.sha256,
        };
        SignedRequest::sign(keys, (method, path), envelope)
    }

    /// One exchange; `None` (logged, counted) when it failed or its answer
    /// is not signed for it.
    async fn exchange(
        &mut self,
        (method, path): (&str, &str),
        body: Body,
        timeout: Duration,
        max_answer: usize,
    ) -> Option<(u16, String, Bytes)> {
        let keys = self.node.keys.keys();
        if keys.is_empty() {
            tracing::debug!(path, "no shared secret loaded yet: nothing sent to peers");
            return None;
        }
        let signed = self.sign(&keys, (method, path), &self.receiver, &body);
        let request = link::Request {
            method,
            path,
            signed: &signed,
            body: body.bytes,
        };
        let node = &self.node;
        let addr = self.addr;
        match link::exchange(&self.connector, addr, &keys, request, timeout, max_answer).await {
            Ok(Answer::Authentic {
                status,
                responder,
                body,
            }) => Some((status, responder, body)),
            Ok(Answer::Unauthentic { status }) => {
                node.metrics
                    .rejected
                    .with_label_values(&["unsigned_answer"])
                    .inc();
                if path == HELLO_PATH && status == 404 {
                    // The previous release's listener knows no v2 path.
                    if !std::mem::replace(&mut self.told_old, true) {
                        tracing::info!(
                            %addr,
                            "peer does not speak peer protocol v2 (an older release?): \
                             sharing with it resumes once it is upgraded"
                        );
                    }
                } else {
                    tracing::warn!(%addr, status, path, "ignored a peer answer not signed for its request");
                }
                None
            }
            Err(e) => {
                tracing::debug!(%addr, error = %e, path, "exchange with peer failed");
                None
            }
        }
    }

    /// Hello, then the snapshot.
    async fn link(&mut self) -> Outcome {
        match self.hello().await {
            Outcome::Ok => self.pull_snapshot().await,
            other => {
                if other == Outcome::Failed {
                    self.node
                        .metrics
                        .snapshots
                        .with_label_values(&["failed"])
                        .inc();
                }
                other
            }
        }
    }

    /// Learns which instance the peer is now.
    async fn hello(&mut self) -> Outcome {
        let empty = Body::empty();
        self.receiver.clear();
        self.node.directory.unlinked(self.addr);
        match self
            .exchange(("GET", HELLO_PATH), empty, self.timeout, 4096)
            .await
        {
            Some((_, responder, _)) if responder == self.node.id => Outcome::Itself,
            Some((200, responder, _)) => {
                self.node.directory.linked(self.addr, &responder);
                self.receiver = responder;
                Outcome::Ok
            }
            Some((status, _, _)) => {
                tracing::debug!(addr = %self.addr, status, "peer refused hello");
                Outcome::Failed
            }
            None => Outcome::Failed,
        }
    }

    /// Posts one batch.
    async fn post(&mut self, body: Body) -> Outcome {
        let len = body.bytes.len() as u64;
        let path = body.path;
        let kind = if path == BUDGETS_PATH {
            "budgets"
        } else {
            "records"
        };
        let answer = self
            .exchange(("POST", path), body, self.timeout, 4096)
            .await;
        let metrics = &self.node.metrics;
        let outcome = match answer {
            Some((_, responder, _)) if responder == self.node.id => Outcome::Itself,
            Some((204, _, _)) => {
                metrics.bytes.with_label_values(&["sent", kind]).inc_by(len);
                metrics.batches.with_label_values(&["sent"]).inc();
                return Outcome::Ok;
            }
            Some((421, _, _)) => Outcome::Relink,
            Some((status, _, body)) => {
                tracing::debug!(
                    addr = %self.addr,
                    status,
                    answer = %String::from_utf8_lossy(&body),
                    "peer refused a batch"
                );
                Outcome::Failed
            }
            None => Outcome::Failed,
        };
        metrics.batches.with_label_values(&["failed"]).inc();
        outcome
    }

    /// Pulls the peer's snapshot and merges it; a snapshot whose blocks all
    /// fall on endpoints not known here yet is pulled again a second later,
    /// a few times.
    async fn pull_snapshot(&mut self) -> Outcome {
        let snapshots = self.node.metrics.snapshots.clone();
        for attempt in 0..=SNAPSHOT_RETRIES {
            let empty = Body::empty();
            // A snapshot may be large: allow it more time than a batch.
            let answer = self
                .exchange(
                    ("GET", SNAPSHOT_PATH),
                    empty,
                    self.timeout * 10,
                    MAX_SNAPSHOT_BYTES,
                )
                .await;
            let body = match answer {
                Some((_, responder, _)) if responder == self.node.id => return Outcome::Itself,
                Some((200, _, body)) => body,
                Some((status, _, _)) => {
                    tracing::debug!(addr = %self.addr, status, "peer refused its snapshot");
                    snapshots.with_label_values(&["failed"]).inc();
                    return if status == 421 {
                        Outcome::Relink
                    } else {
                        Outcome::Failed
                    };
                }
                None => {
                    snapshots.with_label_values(&["failed"]).inc();
                    return Outcome::Failed;
                }
            };
            let models = match codec::decode(&body) {
                Ok(models) => models,
                Err(e) => {
                    tracing::warn!(addr = %self.addr, error = %e, "peer snapshot failed its format check");
                    snapshots.with_label_values(&["failed"]).inc();
                    return Outcome::Failed;
                }
            };
            let node = &self.node;
            node.metrics
                .bytes
                .with_label_values(&["received", "snapshot"])
                .inc_by(body.len() as u64);
            let merged = node.merge(&models);
            if merged.applied > 0 || merged.unknown == 0 || attempt == SNAPSHOT_RETRIES {
                snapshots.with_label_values(&["applied"]).inc();
                tracing::info!(addr = %self.addr, blocks = merged.applied, "merged a peer's prefix index");
                return Outcome::Ok;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Outcome::Ok
    }
}
