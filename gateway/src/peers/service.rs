//! The sender: resolves the peer names, batches the outbox every flush
//! interval, and keeps one link task per peer that posts its batches in
//! order and pulls the peer's snapshot when it first reaches it and after
//! each recovery. Each link has its own short queue: a peer that is slow
//! or down loses its own batches (counted), never anyone else's, and
//! nothing here is on the request path.

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

use super::outbox::{Batch, Record};
use super::signature::now_ms;
use super::{codec, link, Node, PeerSettings, MAX_SNAPSHOT_BYTES, RECORDS_PATH, SNAPSHOT_PATH};

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

/// One peer's link task and queue; the task stops when this is dropped.
struct Link {
    tx: mpsc::Sender<Bytes>,
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
                            let task = tokio::spawn(run_link(
                                Arc::clone(&self.node),
                                Arc::clone(&connector),
                                addr,
                                self.settings.timeout,
                                rx,
                                selves_tx.clone(),
                            ));
                            Link { tx, task }
                        });
                    }
                    self.node.metrics.peers.set(links.len() as i64);
                }
                _ = flush.tick() => {
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
                    let body = Bytes::from(body);
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
enum Outcome {
    Ok,
    /// The peer is this replica.
    Itself,
    Failed,
}

/// One peer: pulls its snapshot, then posts the batches queued for it in
/// order. After a failure the peer is left alone for a backoff (its
/// batches meanwhile are skipped), and its snapshot is pulled again once it
/// answers, so that what either side missed is made up.
async fn run_link(
    node: Arc<Node>,
    connector: Arc<Connector>,
    addr: SocketAddr,
    timeout: Duration,
    mut rx: mpsc::Receiver<Bytes>,
    selves: mpsc::UnboundedSender<SocketAddr>,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut resume_at: Option<Instant> = None;
    let mut need_snapshot = true;
    loop {
        if need_snapshot {
            match pull_snapshot(&node, &connector, addr, timeout).await {
                Outcome::Ok => {
                    need_snapshot = false;
                    backoff = FIRST_BACKOFF;
                    resume_at = None;
                }
                Outcome::Itself => {
                    let _ = selves.send(addr);
                    return;
                }
                Outcome::Failed => {
                    resume_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        // Wait for a batch; while a snapshot is still owed, come back for
        // it when the backoff ends even without one.
        let next = match resume_at.filter(|_| need_snapshot) {
            Some(at) => match tokio::time::timeout_at(at.into(), rx.recv()).await {
                Ok(next) => next,
                Err(_) => continue,
            },
            None => rx.recv().await,
        };
        let Some(body) = next else {
            return;
        };
        let batches = &node.metrics.batches;
        if resume_at.is_some_and(|at| Instant::now() < at) {
            batches.with_label_values(&["skipped"]).inc();
            continue;
        }
        if need_snapshot {
            // The backoff is over: the snapshot first, then this batch.
            match pull_snapshot(&node, &connector, addr, timeout).await {
                Outcome::Ok => need_snapshot = false,
                Outcome::Itself => {
                    let _ = selves.send(addr);
                    return;
                }
                Outcome::Failed => {
                    batches.with_label_values(&["skipped"]).inc();
                    resume_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let len = body.len() as u64;
        let signed = node.key.sign("POST", RECORDS_PATH, &node.id, &body);
        let result = link::exchange(
            &connector,
            addr,
            ("POST", RECORDS_PATH),
            &signed,
            body,
            timeout,
            4096,
        )
        .await;
        match result {
            Ok(answer) if answer.status == 204 => {
                batches.with_label_values(&["sent"]).inc();
                node.metrics
                    .bytes
                    .with_label_values(&["sent", "records"])
                    .inc_by(len);
                backoff = FIRST_BACKOFF;
                resume_at = None;
            }
            Ok(answer) if answer.status == 409 => {
                let _ = selves.send(addr);
                return;
            }
            other => {
                batches.with_label_values(&["failed"]).inc();
                match other {
                    Ok(answer) => {
                        tracing::debug!(%addr, status = answer.status, "peer refused a batch")
                    }
                    Err(e) => tracing::debug!(%addr, error = %e, "batch to peer failed"),
                }
                need_snapshot = true;
                resume_at = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Pulls `addr`'s snapshot and merges it; a snapshot whose blocks all fall
/// on endpoints not known here yet is pulled again a second later, a few
/// times.
async fn pull_snapshot(
    node: &Node,
    connector: &Connector,
    addr: SocketAddr,
    timeout: Duration,
) -> Outcome {
    let snapshots = &node.metrics.snapshots;
    for attempt in 0..=SNAPSHOT_RETRIES {
        let signed = node.key.sign("GET", SNAPSHOT_PATH, &node.id, b"");
        // A snapshot may be large: allow it more time than a batch.
        let answer = link::exchange(
            connector,
            addr,
            ("GET", SNAPSHOT_PATH),
            &signed,
            Bytes::new(),
            timeout * 10,
            MAX_SNAPSHOT_BYTES,
        )
        .await;
        let answer = match answer {
            Ok(answer) if answer.status == 200 => answer,
            Ok(answer) if answer.status == 409 => return Outcome::Itself,
            Ok(answer) => {
                tracing::debug!(%addr, status = answer.status, "peer refused its snapshot");
                snapshots.with_label_values(&["failed"]).inc();
                return Outcome::Failed;
            }
            Err(e) => {
                tracing::debug!(%addr, error = %e, "snapshot pull failed");
                snapshots.with_label_values(&["failed"]).inc();
                return Outcome::Failed;
            }
        };
        let headers = [
            answer.signed[0].as_deref(),
            answer.signed[1].as_deref(),
            answer.signed[2].as_deref(),
        ];
        let verified = node
            .key
            .verify("SNAPSHOT", SNAPSHOT_PATH, headers, &answer.body, now_ms());
        let models = match verified.map(|_| codec::decode(&answer.body)) {
            Ok(Ok(models)) => models,
            _ => {
                tracing::warn!(%addr, "peer snapshot failed its signature or format check");
                snapshots.with_label_values(&["failed"]).inc();
                return Outcome::Failed;
            }
        };
        node.metrics
            .bytes
            .with_label_values(&["received", "snapshot"])
            .inc_by(answer.body.len() as u64);
        let merged = node.merge(&models);
        if merged.applied > 0 || merged.unknown == 0 || attempt == SNAPSHOT_RETRIES {
            snapshots.with_label_values(&["applied"]).inc();
            tracing::info!(%addr, blocks = merged.applied, "merged a peer's prefix index");
            return Outcome::Ok;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Outcome::Ok
}
