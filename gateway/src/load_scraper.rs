//! Reads the load of `cache-aware` models' engines (and of engines whose
//! prefix-cache hit rate a client asked for): every interval each
//! endpoint's `GET /metrics` is parsed for requests running and waiting,
//! KV-cache use and loaded LoRA adapters (vLLM, SGLang and llama.cpp server
//! names), and kept with the endpoint for the scorer. A scrape that fails,
//! times out or finds no known metric clears the endpoint's reading: it is
//! then scored on the gateway's own counts, never dropped.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use pingora_core::connectors::http::Connector;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use crate::http_get::get;
use crate::metrics::Metrics;
use crate::registry::{ModelRoute, RouteStore};
use crate::routing::backend_load::parse_metrics;
use crate::routing::Strategy;

/// Largest `/metrics` answer read (vLLM's is a few hundred KiB at most).
const MAX_METRICS_BYTES: usize = 4 * 1024 * 1024;

/// Scrapes the engines of cache-aware models.
pub struct LoadScraper {
    /// The routes whose endpoints are scraped.
    pub store: Arc<RouteStore>,
    /// Time between two rounds.
    pub interval: Duration,
    /// Longest a scrape may take.
    pub timeout: Duration,
    /// Where scrape results are counted.
    pub metrics: Metrics,
}

impl LoadScraper {
    /// How long a reading is trusted: three rounds, so one slow or lost
    /// scrape does not throw the picture away.
    fn ttl(&self) -> Duration {
        (self.interval * 3).max(self.timeout * 2)
    }

    /// Scrapes every endpoint of every cache-aware route once.
    pub async fn round(&self, connector: &Connector) {
        let table = self.store.snapshot();
        let scrapes = table.routes().iter().flat_map(|route| {
            // Cache-aware routes' engines, and those whose prefix-cache
            // hit rate a client asked for.
            let all = route.strategy == Strategy::CacheAware;
            (0..route.endpoints.len())
                .filter(move |&idx| all || route.endpoints.backend_load(idx).hit_rate_wanted())
                .map(move |idx| self.scrape(connector, route, idx))
        });
        join_all(scrapes).await;
    }

    async fn scrape(&self, connector: &Connector, route: &Arc<ModelRoute>, idx: usize) {
        let upstream = route.endpoints.upstream(idx);
        let host = upstream.addr.to_string();
        let answer = tokio::time::timeout(
            self.timeout,
            get(
                connector,
                upstream.addr,
                &host,
                "/metrics",
                None,
                self.timeout,
                MAX_METRICS_BYTES,
            ),
        )
        .await;
        let load = route.endpoints.backend_load(idx);
        let result = match answer {
            Ok(Ok((200, body))) => match std::str::from_utf8(&body).ok().and_then(parse_metrics) {
                Some(reading) => {
                    load.store(&reading, self.ttl());
                    "ok"
                }
                None => {
                    load.clear();
                    "unrecognised"
                }
            },
            _ => {
                load.clear();
                "error"
            }
        };
        self.metrics
            .load_scrapes
            .with_label_values(&[&route.name, result])
            .inc();
    }
}

#[async_trait]
impl BackgroundService for LoadScraper {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let connector = Connector::new(None);
        let mut tick = tokio::time::interval(self.interval.max(Duration::from_millis(50)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => self.round(&connector).await,
            }
        }
    }
}
