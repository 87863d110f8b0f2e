//! HTTP/1.1 load generation over keep-alive connections.
//!
//! - [`engine`]: open-loop (fixed rate) and closed-loop (fixed concurrency)
//!   load, one sample per request; what `flexinfer-conformance load` runs.
//! - [`summary`]: throughput, latency/TTFT percentiles, errors by kind and a
//!   per-second timeline.
//! - [`output`]: the JSON and Markdown reports and the progress line.
//! - [`plot`]: the optional PNG latency chart.
//!
//! [`run`] below is the small closed-loop generator `flexinfer-sim selftest`
//! uses in-process.

pub mod engine;
pub mod output;
pub mod plot;
pub mod summary;

use std::sync::Arc;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// What to send, how hard, and for how long.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Server address.
    pub addr: SocketAddr,
    /// Request method.
    pub method: Method,
    /// Request path (and query).
    pub path: String,
    /// `Content-Type` of the body, if any.
    pub content_type: Option<HeaderValue>,
    /// Request body, sent unchanged every time.
    pub body: Bytes,
    /// Concurrent keep-alive connections, each with one request in flight.
    pub connections: usize,
    /// Load before measuring starts (not counted).
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Responses completed inside the measured window (any status).
    pub requests: u64,
    /// Responses with a status other than 2xx.
    pub non_success: u64,
    /// Connection or protocol errors (each followed by a reconnect).
    pub errors: u64,
    /// Length of the measured window.
    pub elapsed: Duration,
    /// Latency of every measured response, sorted ascending.
    pub latencies: Vec<Duration>,
}

impl LoadReport {
    /// Completed responses per second.
    pub fn requests_per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    /// The latency at quantile `q` (0..=1), or zero when nothing was measured.
    pub fn percentile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q.clamp(0.0, 1.0) * (self.latencies.len() - 1) as f64).round() as usize;
        self.latencies[rank.min(self.latencies.len() - 1)]
    }
}

/// Runs `plan`, printing a progress line to stderr once a second.
pub async fn run_with_progress(plan: engine::LoadPlan) -> io::Result<engine::RunOutput> {
    let progress = Arc::new(engine::Progress::default());
    let printer = {
        let progress = progress.clone();
        tokio::spawn(async move {
            use std::sync::atomic::Ordering::Relaxed;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            let (mut second, mut last_done, mut last_sum) = (0u64, 0u64, 0u64);
            loop {
                tick.tick().await;
                if engine::stopped(&progress) {
                    return;
                }
                second += 1;
                let done = progress.done.load(Relaxed);
                let sum = progress.latency_sum_us.load(Relaxed);
                let n = done - last_done;
                let mean_ms = if n == 0 {
                    0.0
                } else {
                    (sum - last_sum) as f64 / n as f64 / 1000.0
                };
                eprintln!(
                    "{}",
                    output::progress_line(second, done, n, progress.failed.load(Relaxed), mean_ms)
                );
                (last_done, last_sum) = (done, sum);
            }
        })
    };
    let result = engine::run(plan, progress).await;
    printer.abort();
    result
}

#[derive(Default)]
struct ConnectionTally {
    requests: u64,
    non_success: u64,
    errors: u64,
    latencies: Vec<Duration>,
}

/// Runs the load and returns what the measured window saw.
pub async fn run(spec: LoadSpec) -> io::Result<LoadReport> {
    if spec.connections == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "connections must be at least 1",
        ));
    }
    let start = Instant::now();
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    let tasks: Vec<_> = (0..spec.connections)
        .map(|_| tokio::spawn(drive(spec.clone(), measure_from, end)))
        .collect();
    let mut report = LoadReport {
        requests: 0,
        non_success: 0,
        errors: 0,
        elapsed: spec.duration,
        latencies: Vec::new(),
    };
    for task in tasks {
        let tally = task.await.map_err(io::Error::other)??;
        report.requests += tally.requests;
        report.non_success += tally.non_success;
        report.errors += tally.errors;
        report.latencies.extend(tally.latencies);
    }
    report.latencies.sort_unstable();
    Ok(report)
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> io::Result<Sender> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One connection's loop; reconnects after errors, fails only if it cannot connect at all.
async fn drive(spec: LoadSpec, measure_from: Instant, end: Instant) -> io::Result<ConnectionTally> {
    let host = HeaderValue::from_str(&spec.addr.to_string()).map_err(io::Error::other)?;
    let mut tally = ConnectionTally::default();
    let mut sender = connect(spec.addr).await?;
    loop {
        let sent_at = Instant::now();
        if sent_at >= end {
            return Ok(tally);
        }
        let mut request = Request::builder()
            .method(spec.method.clone())
            .uri(spec.path.as_str())
            .header(HOST, host.clone());
        if let Some(content_type) = &spec.content_type {
            request = request.header(CONTENT_TYPE, content_type.clone());
        }
        let request = request
            .body(Full::new(spec.body.clone()))
            .map_err(io::Error::other)?;
        let outcome = async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status();
            response.into_body().collect().await?;
            Ok::<_, hyper::Error>(status)
        }
        .await;
        let done_at = Instant::now();
        let counted = sent_at >= measure_from && done_at <= end;
        match outcome {
            Ok(status) if counted => {
                tally.requests += 1;
                if !status.is_success() {
                    tally.non_success += 1;
                }
                tally.latencies.push(done_at - sent_at);
            }
            Ok(_) => {}
            Err(_) => {
                if counted {
                    tally.errors += 1;
                }
                sender = connect(spec.addr).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let report = LoadReport {
            requests: 100,
            non_success: 0,
            errors: 0,
            elapsed: Duration::from_secs(2),
            latencies: (1..=100).map(Duration::from_millis).collect(),
        };
        assert_eq!(report.requests_per_second(), 50.0);
        assert_eq!(report.percentile(0.0), Duration::from_millis(1));
        assert_eq!(report.percentile(0.5), Duration::from_millis(51));
        assert_eq!(report.percentile(1.0), Duration::from_millis(100));
    }
}
