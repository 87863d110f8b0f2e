//! Playing the conversations: `concurrency` workers each take the next
//! conversation and send its turns one after the other (each turn carries
//! the answers received so far), either to one URL (a gateway that routes)
//! or, for the oracle, straight to the pod that has most of the prompt in
//! its prefix cache.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::client::{Client, Connection};
use crate::load::Stop;
use crate::measure::{self, Sample};
use crate::target::Api;

use super::workload::{Conversation, Generator};

/// Path of the simulator's prefix-cache lookup (answers without changing the cache).
pub const PREFIX_MATCH_PATH: &str = "/sim/prefix-match";

/// Pause after a failed connect, so a dead endpoint is not hammered.
const CONNECT_BACKOFF: Duration = Duration::from_millis(50);

/// Where requests go.
#[derive(Debug, Clone)]
pub enum Route {
    /// To the gateway under test: one base URL, or several replicas, each
    /// request to the next one in turn (as a Service in front of them
    /// would spread connections).
    Gateway(Vec<Client>),
    /// To the pod with the longest cached prefix, asked per request.
    Oracle(Vec<Client>),
}

/// What the client knows of the gateway replicas, as a Service's endpoints:
/// a replica leaves after a connection to it fails, and comes back when
/// whoever restarted it says it is ready.
#[derive(Debug, Default)]
pub struct Endpoints {
    live: Vec<AtomicBool>,
    in_flight: Vec<AtomicU64>,
    failovers: AtomicU64,
}

impl Endpoints {
    /// `n` replicas, all live.
    pub fn new(n: usize) -> Endpoints {
        Endpoints {
            live: (0..n).map(|_| AtomicBool::new(true)).collect(),
            in_flight: (0..n).map(|_| AtomicU64::new(0)).collect(),
            failovers: AtomicU64::new(0),
        }
    }

    /// Puts replica `i` back (it is ready again).
    pub fn restore(&self, i: usize) {
        if let Some(live) = self.live.get(i) {
            live.store(true, Ordering::Relaxed);
        }
    }

    /// Requests sent to replica `i` and not answered yet.
    pub fn in_flight(&self, i: usize) -> u64 {
        self.in_flight
            .get(i)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// Requests whose connection failed and that went to another replica.
    pub fn failovers(&self) -> u64 {
        self.failovers.load(Ordering::Relaxed)
    }

    /// The next live replica at or after `turn` (all of them when none is live).
    fn pick(&self, turn: usize, n: usize) -> usize {
        (0..n)
            .map(|k| (turn + k) % n)
            .find(|&i| self.live.get(i).is_none_or(|l| l.load(Ordering::Relaxed)))
            .unwrap_or(turn % n.max(1))
    }

    fn remove(&self, i: usize) {
        if let Some(live) = self.live.get(i) {
            live.store(false, Ordering::Relaxed);
        }
    }
}

/// How a run is driven.
#[derive(Debug, Clone)]
pub struct DriveSpec {
    /// Conversations played at once.
    pub concurrency: usize,
    /// When to stop (counted in requests, not conversations).
    pub stop: Stop,
    /// Per-request limit.
    pub timeout: Duration,
    /// `model` sent.
    pub model: String,
    /// `max_tokens` sent.
    pub max_tokens: u32,
    /// Times a request whose connection failed before any answer is sent
    /// again (to the next replica; the oracle's pods too).
    pub client_retries: u32,
    /// The gateway replicas' liveness, shared with a fault controller.
    pub endpoints: Arc<Endpoints>,
}

/// Everything measured in a run.
#[derive(Debug, Clone, Default)]
pub struct DriveResult {
    /// One per request, in the order sent.
    pub samples: Vec<Sample>,
    /// From the first request to the last answer.
    pub elapsed: Duration,
    /// Oracle lookups that failed (the pod then counted as having nothing cached).
    pub oracle_errors: u64,
    /// Requests the oracle sent to each pod (empty for a gateway).
    pub oracle_sent: Vec<u64>,
    /// Per sample, the gateway replica that got it (`None`: the oracle, or
    /// no connection at all).
    pub replicas: Vec<Option<usize>>,
    /// Requests sent again after their connection failed before any answer.
    pub retried: u64,
}

/// The answer of `POST /sim/prefix-match`.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct PrefixMatch {
    /// Tokens of the rendered prompt.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Of those, tokens the pod has cached.
    pub cached_tokens: u64,
}

/// The oracle's pick: most cached tokens; among those, fewest requests in
/// flight from this client; among those, the first at or after `turn`
/// (round-robin).
pub fn choose(cached: &[u64], in_flight: &[u64], turn: usize) -> usize {
    let n = cached.len();
    if n == 0 {
        return 0;
    }
    (0..n)
        .min_by_key(|&i| {
            (
                std::cmp::Reverse(cached[i]),
                in_flight.get(i).copied().unwrap_or(0),
                (i + n - turn % n) % n,
            )
        })
        .unwrap_or(0)
}

struct Shared {
    generator: Mutex<Generator>,
    tickets: AtomicU64,
    limit: u64,
    deadline: Option<Instant>,
    started: Instant,
    in_flight: Vec<AtomicU64>,
    sent: Vec<AtomicU64>,
    rotation: AtomicUsize,
    oracle_errors: AtomicU64,
    retried: AtomicU64,
}

impl Shared {
    /// A ticket for one more request, unless the run is over.
    fn ticket(&self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        self.tickets.fetch_add(1, Ordering::Relaxed) < self.limit
    }
}

/// Plays conversations from `generator` until `spec.stop`.
pub async fn drive(route: Route, generator: Generator, spec: DriveSpec) -> DriveResult {
    let started = Instant::now();
    let pods = match &route {
        Route::Gateway(_) => 0,
        Route::Oracle(pods) => pods.len(),
    };
    let shared = Arc::new(Shared {
        generator: Mutex::new(generator),
        tickets: AtomicU64::new(0),
        limit: match spec.stop {
            Stop::Requests(n) => n,
            Stop::Duration(_) => u64::MAX,
        },
        deadline: match spec.stop {
            Stop::Duration(d) => Some(started + d),
            Stop::Requests(_) => None,
        },
        started,
        in_flight: (0..pods).map(|_| AtomicU64::new(0)).collect(),
        sent: (0..pods).map(|_| AtomicU64::new(0)).collect(),
        rotation: AtomicUsize::new(0),
        oracle_errors: AtomicU64::new(0),
        retried: AtomicU64::new(0),
    });
    let route = Arc::new(route);
    let spec = Arc::new(spec);
    let workers: Vec<_> = (0..spec.concurrency.max(1))
        .map(|_| {
            let (route, spec, shared) = (route.clone(), spec.clone(), shared.clone());
            tokio::spawn(async move { worker(&route, &spec, &shared).await })
        })
        .collect();
    let mut result = DriveResult::default();
    let mut served = Vec::new();
    for worker in workers {
        if let Ok(samples) = worker.await {
            served.extend(samples);
        }
    }
    result.elapsed = started.elapsed();
    served.sort_by_key(|(s, _): &(Sample, Option<usize>)| s.started);
    (result.samples, result.replicas) = served.into_iter().unzip();
    result.oracle_errors = shared.oracle_errors.load(Ordering::Relaxed);
    result.retried = shared.retried.load(Ordering::Relaxed);
    result.oracle_sent = shared
        .sent
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .collect();
    result
}

/// One worker: its own keep-alive connection per destination.
async fn worker(route: &Route, spec: &DriveSpec, shared: &Shared) -> Vec<(Sample, Option<usize>)> {
    let destinations = match route {
        Route::Gateway(replicas) => replicas.len(),
        Route::Oracle(pods) => pods.len(),
    };
    let mut connections: Vec<Option<Connection>> = (0..destinations).map(|_| None).collect();
    let mut samples = Vec::new();
    'conversations: loop {
        let conversation = match shared.generator.lock() {
            Ok(mut g) => g.next_conversation(),
            Err(_) => break,
        };
        let mut answers: Vec<String> = Vec::with_capacity(conversation.turns());
        for turn in 0..conversation.turns() {
            if !shared.ticket() {
                break 'conversations;
            }
            let sent_at = shared.started.elapsed();
            let mut retries_left = spec.client_retries;
            let outcome = loop {
                let outcome = turn_once(
                    route,
                    spec,
                    shared,
                    &mut connections,
                    &conversation,
                    turn,
                    &answers,
                )
                .await;
                match &outcome {
                    Ok((_, Err(class), _, _)) if retries_left > 0 && unanswered(class) => {
                        retries_left -= 1;
                        shared.retried.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => break outcome,
                }
            };
            let (latency, outcome, answer, replica) = match outcome {
                Ok(done) => done,
                Err(class) => {
                    let sample = Sample {
                        started: sent_at,
                        latency: shared.started.elapsed() - sent_at,
                        outcome: Err(class),
                    };
                    samples.push((sample, None));
                    tokio::time::sleep(CONNECT_BACKOFF).await;
                    continue 'conversations;
                }
            };
            let failed = outcome.is_err();
            // A request sent again took, for its client, the time since the
            // first try.
            let latency = match retries_left < spec.client_retries {
                true => shared.started.elapsed() - sent_at,
                false => latency,
            };
            let sample = Sample {
                started: sent_at,
                latency,
                outcome,
            };
            samples.push((sample, replica));
            if failed {
                // The history would lack this answer: start another conversation.
                continue 'conversations;
            }
            answers.push(answer);
        }
    }
    samples
}

type Measured = (
    Duration,
    Result<measure::Success, String>,
    String,
    Option<usize>,
);

/// Sends one turn; `Err` is a request that could not even be sent (connect).
/// To gateway replicas: a replica whose connection fails is taken out of
/// the rotation and the request goes to the next live one (nothing was
/// sent), as a client behind a Service would reconnect.
async fn turn_once(
    route: &Route,
    spec: &DriveSpec,
    shared: &Shared,
    connections: &mut [Option<Connection>],
    conversation: &Conversation,
    turn: usize,
    answers: &[String],
) -> Result<Measured, String> {
    let body = conversation.body(&spec.model, turn, answers, spec.max_tokens);
    let (client, index) = match route {
        Route::Gateway(replicas) => {
            let n = replicas.len();
            if n == 0 {
                return Err("connect".to_owned());
            }
            let turn = shared.rotation.fetch_add(1, Ordering::Relaxed);
            let mut index = spec.endpoints.pick(turn, n);
            for _ in 0..n {
                if connection(&replicas[index], &mut connections[index])
                    .await
                    .is_ok()
                {
                    break;
                }
                spec.endpoints.remove(index);
                spec.endpoints.failovers.fetch_add(1, Ordering::Relaxed);
                index = spec.endpoints.pick(index + 1, n);
            }
            (&replicas[index], index)
        }
        Route::Oracle(pods) => {
            let mut cached = Vec::with_capacity(pods.len());
            for (i, pod) in pods.iter().enumerate() {
                let found = match connection(pod, &mut connections[i]).await {
                    Ok(conn) => lookup(pod, conn, body.clone(), spec.timeout).await,
                    Err(e) => Err(e),
                };
                if found.is_err() {
                    connections[i] = None;
                    shared.oracle_errors.fetch_add(1, Ordering::Relaxed);
                }
                cached.push(found.map_or(0, |m| m.cached_tokens));
            }
            let in_flight: Vec<u64> = shared
                .in_flight
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect();
            let turn = shared.rotation.fetch_add(1, Ordering::Relaxed);
            let pick = choose(&cached, &in_flight, turn);
            (&pods[pick], pick)
        }
    };
    let path = client.target().path(Api::Chat);
    let conn = connection(client, &mut connections[index])
        .await
        .map_err(|_| "connect".to_owned())?;
    let oracle = matches!(route, Route::Oracle(_));
    let counter = match oracle {
        true => {
            shared.sent[index].fetch_add(1, Ordering::Relaxed);
            shared.in_flight.get(index)
        }
        false => spec.endpoints.in_flight.get(index),
    };
    if let Some(n) = counter {
        n.fetch_add(1, Ordering::Relaxed);
    }
    let mut gaps = Vec::new();
    let mut answer = String::new();
    let measured = tokio::time::timeout(
        spec.timeout,
        measure::measure_with_text(conn, client.post(&path, body), true, &mut gaps, &mut answer),
    )
    .await;
    if let Some(n) = counter {
        n.fetch_sub(1, Ordering::Relaxed);
    }
    let (latency, outcome) = measured.unwrap_or((spec.timeout, Err("timeout".to_owned())));
    if matches!(&outcome, Err(e) if !e.starts_with("http_")) {
        connections[index] = None;
    }
    Ok((latency, outcome, answer, (!oracle).then_some(index)))
}

/// Whether a failure came before any answer: the connection was closed or
/// failed while the request was being sent (what a client may send again).
fn unanswered(class: &str) -> bool {
    matches!(class, "send" | "connection_closed")
}

/// The open connection in `slot`, opening one when there is none.
async fn connection<'a>(
    client: &Client,
    slot: &'a mut Option<Connection>,
) -> Result<&'a mut Connection, String> {
    if slot.as_ref().is_none_or(Connection::is_closed) {
        *slot = Some(client.connect().await.map_err(|e| format!("{e:#}"))?);
    }
    slot.as_mut().ok_or_else(|| "connect".to_owned())
}

/// Asks a pod how much of the prompt it has cached.
async fn lookup(
    pod: &Client,
    conn: &mut Connection,
    body: bytes::Bytes,
    timeout: Duration,
) -> Result<PrefixMatch, String> {
    let path = pod.target().root_path(PREFIX_MATCH_PATH);
    let (status, answer) = tokio::time::timeout(timeout, conn.fetch(pod.post(&path, body)))
        .await
        .map_err(|_| "timeout".to_owned())?
        .map_err(|e| format!("{e:#}"))?;
    if !status.is_success() {
        return Err(format!("http_{}", status.as_u16()));
    }
    serde_json::from_slice(&answer).map_err(|e| format!("bad answer: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oracle_prefers_cache_then_idleness_then_rotation() {
        // Most cached wins whatever the load.
        assert_eq!(choose(&[0, 640, 320], &[0, 9, 0], 0), 1);
        // A tie on cache goes to the pod with fewer requests in flight.
        assert_eq!(choose(&[640, 0, 640], &[3, 0, 1], 0), 2);
        // A full tie rotates.
        let picks: Vec<usize> = (0..6).map(|t| choose(&[0; 3], &[0; 3], t)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        assert_eq!(choose(&[5, 5, 0], &[0, 0, 0], 2), 0);
        assert_eq!(choose(&[], &[], 4), 0);
    }

    #[test]
    fn dead_replicas_leave_the_rotation_until_restored() {
        let endpoints = Endpoints::new(3);
        let picks: Vec<usize> = (0..3).map(|t| endpoints.pick(t, 3)).collect();
        assert_eq!(picks, [0, 1, 2]);
        endpoints.remove(1);
        let picks: Vec<usize> = (0..3).map(|t| endpoints.pick(t, 3)).collect();
        assert_eq!(picks, [0, 2, 2]);
        endpoints.remove(0);
        endpoints.remove(2);
        assert_eq!(endpoints.pick(4, 3), 1, "none live: plain rotation");
        endpoints.restore(1);
        assert_eq!(endpoints.pick(0, 3), 1);
        assert_eq!(endpoints.in_flight(7), 0);
    }

    #[test]
    fn prefix_match_answers_parse() {
        let m: PrefixMatch =
            serde_json::from_str(r#"{"prompt_tokens":1050,"cached_tokens":992,"block_size":16}"#)
                .unwrap();
        assert_eq!((m.prompt_tokens, m.cached_tokens), (1050, 992));
        assert!(serde_json::from_str::<PrefixMatch>(r#"{"echo":true}"#).is_err());
    }
}
