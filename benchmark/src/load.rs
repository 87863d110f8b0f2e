//! Driving one concurrency level: `concurrency` workers, each with its own
//! keep-alive connection, send prepared requests back to back until the
//! request count is reached or the duration is over (requests in flight then
//! finish and count).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Client, Connection};
use crate::measure::{self, Sample};
use crate::workload::PreparedRequest;

/// When a level ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After this many requests.
    Requests(u64),
    /// When no new request may start after this long.
    Duration(Duration),
}

/// How one level runs.
#[derive(Debug, Clone, Copy)]
pub struct LevelSpec {
    /// Requests in flight at once.
    pub concurrency: usize,
    /// When to stop.
    pub stop: Stop,
    /// Per-request limit.
    pub timeout: Duration,
    /// Stream responses.
    pub stream: bool,
}

/// Everything measured in one level.
#[derive(Debug, Clone, Default)]
pub struct LevelResult {
    /// Requests in flight at once.
    pub concurrency: usize,
    /// One per request.
    pub samples: Vec<Sample>,
    /// Inter-token gaps of all requests, in microseconds.
    pub gaps: Vec<u32>,
    /// From the first request to the last response.
    pub elapsed: Duration,
}

/// Pause after a failed connect, so a dead endpoint is not hammered.
const CONNECT_BACKOFF: Duration = Duration::from_millis(50);

/// Runs one level.
pub async fn run_level(
    client: Arc<Client>,
    path: Arc<str>,
    requests: Arc<Vec<PreparedRequest>>,
    spec: LevelSpec,
) -> LevelResult {
    let started = Instant::now();
    let deadline = match spec.stop {
        Stop::Duration(d) => Some(started + d),
        Stop::Requests(_) => None,
    };
    let limit = match spec.stop {
        Stop::Requests(n) => n,
        Stop::Duration(_) => u64::MAX,
    };
    let tickets = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..spec.concurrency.max(1))
        .map(|_| {
            let client = Arc::clone(&client);
            let path = Arc::clone(&path);
            let requests = Arc::clone(&requests);
            let tickets = Arc::clone(&tickets);
            tokio::spawn(async move {
                worker(
                    &client, &path, &requests, &tickets, limit, deadline, started, spec,
                )
                .await
            })
        })
        .collect();
    let mut result = LevelResult {
        concurrency: spec.concurrency,
        ..LevelResult::default()
    };
    for worker in workers {
        if let Ok((samples, gaps)) = worker.await {
            result.samples.extend(samples);
            result.gaps.extend(gaps);
        }
    }
    result.elapsed = started.elapsed();
    result.samples.sort_by_key(|s| s.started);
    result
}

#[allow(clippy::too_many_arguments)]
async fn worker(
    client: &Client,
    path: &str,
    requests: &[PreparedRequest],
    tickets: &AtomicU64,
    limit: u64,
    deadline: Option<Instant>,
    started: Instant,
    spec: LevelSpec,
) -> (Vec<Sample>, Vec<u32>) {
    let mut samples = Vec::new();
    let mut gaps = Vec::new();
    let mut connection: Option<Connection> = None;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let ticket = tickets.fetch_add(1, Ordering::Relaxed);
        if ticket >= limit || requests.is_empty() {
            break;
        }
        let prepared = &requests[(ticket % requests.len() as u64) as usize];
        let sent_at = started.elapsed();
        if connection.as_ref().is_none_or(Connection::is_closed) {
            match client.connect().await {
                Ok(c) => connection = Some(c),
                Err(_) => {
                    samples.push(Sample {
                        started: sent_at,
                        latency: started.elapsed() - sent_at,
                        outcome: Err("connect".to_owned()),
                    });
                    connection = None;
                    tokio::time::sleep(CONNECT_BACKOFF).await;
                    continue;
                }
            }
        }
        let Some(conn) = connection.as_mut() else {
            continue;
        };
        let request = client.post(path, prepared.body.clone());
        let gaps_before = gaps.len();
        let (latency, outcome) = match tokio::time::timeout(
            spec.timeout,
            measure::measure(conn, request, spec.stream, &mut gaps),
        )
        .await
        {
            Ok(measured) => measured,
            Err(_) => (spec.timeout, Err("timeout".to_owned())),
        };
        if outcome.is_err() {
            // Gaps of a failed request would skew the distribution.
            gaps.truncate(gaps_before);
            if !matches!(&outcome, Err(e) if e.starts_with("http_")) {
                connection = None;
            }
        }
        samples.push(Sample {
            started: sent_at,
            latency,
            outcome,
        });
    }
    (samples, gaps)
}
