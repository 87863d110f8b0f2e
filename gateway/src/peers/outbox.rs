//! The request path's side of sharing: a bounded queue of the blocks each
//! pick taught the local index, drained into batches by the sender.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use prometheus::IntCounter;
use tokio::sync::mpsc;

use super::codec::{EndpointBlocks, ModelBlocks};
use super::PeerMetrics;

/// One pick's news: `model`'s endpoint `addr` was sent one more request
/// and now holds `hashes`.
#[derive(Debug)]
pub struct Record {
    /// Canonical model name.
    pub model: Arc<str>,
    /// The endpoint.
    pub addr: SocketAddr,
    /// Blocks the pick taught the index, in the order it touched them.
    pub hashes: Vec<u64>,
}

/// Where the request path drops its records; never waits.
pub struct Outbox {
    tx: mpsc::Sender<Record>,
    published: IntCounter,
    dropped: IntCounter,
}

impl Outbox {
    /// An outbox holding up to `capacity` records, and the receiving end.
    pub fn new(capacity: usize, metrics: &PeerMetrics) -> (Self, mpsc::Receiver<Record>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let outbox = Outbox {
            tx,
            published: metrics.blocks.with_label_values(&["published"]),
            dropped: metrics.blocks.with_label_values(&["dropped"]),
        };
        (outbox, rx)
    }

    /// Queues a pick's record; when the queue is full (the sender is
    /// behind) the record is dropped and counted: peers miss it, requests
    /// never wait.
    pub fn publish(&self, model: &Arc<str>, addr: SocketAddr, hashes: Vec<u64>) {
        let blocks = hashes.len() as u64;
        let record = Record {
            model: Arc::clone(model),
            addr,
            hashes,
        };
        match self.tx.try_send(record) {
            Ok(()) => self.published.inc_by(blocks),
            Err(_) => self.dropped.inc_by(blocks),
        }
    }
}

/// Gathers records into one batch: per model and endpoint, the blocks in
/// the order they were touched.
#[derive(Default)]
pub struct Batch {
    models: Vec<ModelBlocks>,
    positions: HashMap<(Arc<str>, SocketAddr), (usize, usize)>,
    blocks: usize,
    records: usize,
}

impl Batch {
    /// Adds a record.
    pub fn push(&mut self, record: Record) {
        self.blocks += record.hashes.len();
        self.records += 1;
        let key = (Arc::clone(&record.model), record.addr);
        if let Some(&(m, e)) = self.positions.get(&key) {
            let endpoint = &mut self.models[m].endpoints[e];
            endpoint.picks = endpoint.picks.saturating_add(1);
            endpoint.hashes.extend(record.hashes);
            return;
        }
        let m = match self.models.iter().position(|m| *m.model == *record.model) {
            Some(m) => m,
            None => {
                self.models.push(ModelBlocks {
                    model: record.model.to_string(),
                    endpoints: Vec::new(),
                });
                self.models.len() - 1
            }
        };
        let endpoints = &mut self.models[m].endpoints;
        endpoints.push(EndpointBlocks {
            addr: record.addr,
            picks: 1,
            hashes: record.hashes,
        });
        self.positions.insert(key, (m, endpoints.len() - 1));
    }

    /// Blocks gathered so far.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Whether no record was gathered since the last [`Batch::take`].
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The gathered records, emptying the batch.
    pub fn take(&mut self) -> Vec<ModelBlocks> {
        self.positions.clear();
        self.blocks = 0;
        self.records = 0;
        std::mem::take(&mut self.models)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_instead_of_waiting() {
        let metrics = PeerMetrics::new(&prometheus::Registry::new());
        let (outbox, mut rx) = Outbox::new(2, &metrics);
        let model: Arc<str> = Arc::from("m");
        let addr: SocketAddr = "10.0.0.1:8000".parse().unwrap();
        for i in 0..5 {
            outbox.publish(&model, addr, vec![i, i + 100]);
        }
        let blocks = &metrics.blocks;
        assert_eq!(blocks.with_label_values(&["published"]).get(), 4);
        assert_eq!(blocks.with_label_values(&["dropped"]).get(), 6);
        let mut batch = Batch::default();
        while let Ok(record) = rx.try_recv() {
            batch.push(record);
        }
        assert_eq!(batch.blocks(), 4);
        let models = batch.take();
        assert_eq!(models.len(), 1);
        assert_eq!(models[0].endpoints[0].hashes, [0, 100, 1, 101]);
        assert_eq!(batch.blocks(), 0);
        assert!(batch.is_empty());
        // A pick that taught the index nothing is still news: one request.
        outbox.publish(&model, addr, vec![]);
        batch.push(rx.try_recv().unwrap());
        assert!(!batch.is_empty());
        assert_eq!(batch.take()[0].endpoints[0].picks, 1);
    }

    #[test]
    fn batches_group_by_model_and_endpoint_in_touch_order() {
        let mut batch = Batch::default();
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        let e1: SocketAddr = "10.0.0.1:8000".parse().unwrap();
        let e2: SocketAddr = "10.0.0.2:8000".parse().unwrap();
        for (model, addr, hashes) in [
            (&a, e1, vec![1, 2]),
            (&b, e1, vec![9]),
            (&a, e2, vec![3]),
            (&a, e1, vec![4]),
        ] {
            batch.push(Record {
                model: Arc::clone(model),
                addr,
                hashes,
            });
        }
        let models = batch.take();
        assert_eq!(models.len(), 2);
        assert_eq!(models[0].model, "a");
        assert_eq!(models[0].endpoints[0].hashes, [1, 2, 4]);
        assert_eq!(models[0].endpoints[1].hashes, [3]);
        assert_eq!(models[1].endpoints[0].hashes, [9]);
        // Each record is one request routed there.
        let picks: Vec<u32> = models
            .iter()
            .flat_map(|m| m.endpoints.iter().map(|e| e.picks))
            .collect();
        assert_eq!(picks, [2, 1, 1]);
    }
}
