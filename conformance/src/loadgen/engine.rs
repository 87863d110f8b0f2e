//! The load engine: one task per keep-alive HTTP/1.1 connection, each with
//! one request in flight. Closed loop: every connection sends its next
//! request as soon as the previous one is answered. Open loop: requests are
//! due at a fixed rate, each connection takes the next due time and sends
//! then, and latency is counted from the due time, so a slow server cannot
//! hide its queueing (no coordinated omission).
//!
//! The hot loop allocates only the request itself; samples go to a
//! per-connection vector, and a few shared counters feed the progress line.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How requests are paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Open loop: this many requests per second, whatever the answers.
    Rate(f64),
    /// Closed loop: this many requests in flight at all times.
    Concurrency(usize),
}

/// What to send, how hard and for how long.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Server address.
    pub addr: SocketAddr,
    /// `Host` header.
    pub host: HeaderValue,
    /// Request path.
    pub path: String,
    /// JSON body sent unchanged every time.
    pub body: Bytes,
    /// `Authorization` header, if any.
    pub authorization: Option<HeaderValue>,
    /// Whether responses are SSE streams (TTFT is measured, `[DONE]` expected).
    pub stream: bool,
    /// Pacing.
    pub pace: Pace,
    /// Connections for the open loop (the closed loop uses its concurrency).
    pub connections: usize,
    /// Measured time.
    pub duration: Duration,
    /// Longest time one request may take.
    pub timeout: Duration,
}

/// Why a request did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// The connection could not be opened.
    Connect,
    /// No complete answer within the timeout.
    Timeout,
    /// The connection failed mid-exchange.
    Io,
    /// A stream ended without `data: [DONE]`.
    StreamIncomplete,
    /// A non-2xx status.
    Status(u16),
}

impl ErrorKind {
    /// `connect`, `timeout`, `io`, `stream_incomplete` or `status_<code>`.
    pub fn label(self) -> String {
        match self {
            Self::Connect => "connect".into(),
            Self::Timeout => "timeout".into(),
            Self::Io => "io".into(),
            Self::StreamIncomplete => "stream_incomplete".into(),
            Self::Status(code) => format!("status_{code}"),
        }
    }
}

/// One request's outcome. Times are microseconds; `at` is when it was due
/// (open loop) or sent (closed loop), from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Due or send time.
    pub at_us: u32,
    /// Due/send time to the last byte.
    pub latency_us: u32,
    /// Due/send time to the first body bytes of a stream (`u32::MAX`: none).
    pub ttft_us: u32,
    /// `None` on success.
    pub error: Option<ErrorKind>,
}

/// Counters the progress line reads while the run goes on.
#[derive(Debug, Default)]
pub struct Progress {
    /// Requests finished (any outcome).
    pub done: AtomicU64,
    /// Requests that failed.
    pub failed: AtomicU64,
    /// Sum of latencies of finished requests, in microseconds.
    pub latency_sum_us: AtomicU64,
    /// Open loop: requests sent more than 1 ms after they were due.
    pub late: AtomicU64,
    stop: AtomicBool,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// Every request, in no particular order.
    pub samples: Vec<Sample>,
    /// Length of the run.
    pub elapsed: Duration,
    /// Open loop: requests sent more than 1 ms late (the generator or the
    /// connection pool could not keep up).
    pub late: u64,
}

/// Runs `plan`; `progress` is updated as requests finish.
pub async fn run(plan: LoadPlan, progress: Arc<Progress>) -> io::Result<RunOutput> {
    let connections = match plan.pace {
        Pace::Concurrency(c) => c,
        Pace::Rate(r) => {
            if !(r.is_finite() && r > 0.0) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the rate must be a positive number",
                ));
            }
            plan.connections
        }
    };
    if connections == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "at least one connection is needed",
        ));
    }
    // Connect first, so the clock does not count connection set-up.
    let mut senders = Vec::with_capacity(connections);
    for _ in 0..connections {
        senders.push(connect(plan.addr).await?);
    }
    let plan = Arc::new(plan);
    let tickets = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + plan.duration;
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|sender| {
            let worker = Worker {
                plan: plan.clone(),
                progress: progress.clone(),
                tickets: tickets.clone(),
                start,
                end,
            };
            tokio::spawn(worker.drive(sender))
        })
        .collect();
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.map_err(io::Error::other)?);
    }
    progress.stop.store(true, Ordering::Relaxed);
    Ok(RunOutput {
        samples,
        elapsed: start.elapsed(),
        late: progress.late.load(Ordering::Relaxed),
    })
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

struct Worker {
    plan: Arc<LoadPlan>,
    progress: Arc<Progress>,
    tickets: Arc<AtomicU64>,
    start: Instant,
    end: Instant,
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

impl Worker {
    /// The time the next request is due, or `None` when the run is over.
    async fn next_due(&self) -> Option<Instant> {
        let due = match self.plan.pace {
            Pace::Concurrency(_) => Instant::now(),
            Pace::Rate(rate) => {
                let n = self.tickets.fetch_add(1, Ordering::Relaxed);
                let due = self.start + Duration::from_secs_f64(n as f64 / rate);
                if due >= self.end {
                    return None;
                }
                if due > Instant::now() {
                    tokio::time::sleep_until(due).await;
                } else if due.elapsed() > Duration::from_millis(1) {
                    self.progress.late.fetch_add(1, Ordering::Relaxed);
                }
                due
            }
        };
        (due < self.end).then_some(due)
    }

    fn request(&self) -> Request<Full<Bytes>> {
        let plan = &self.plan;
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(plan.path.as_str())
            .header(HOST, plan.host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(auth) = &plan.authorization {
            builder = builder.header(AUTHORIZATION, auth.clone());
        }
        builder
            .body(Full::new(plan.body.clone()))
            .unwrap_or_else(|_| Request::new(Full::new(plan.body.clone())))
    }

    async fn drive(self, sender: Sender) -> Vec<Sample> {
        let mut sender = Some(sender);
        let mut samples = Vec::new();
        while let Some(due) = self.next_due().await {
            let mut sample = Sample {
                at_us: micros(due - self.start),
                latency_us: 0,
                ttft_us: u32::MAX,
                error: None,
            };
            // A connection the server closed after its last answer (a
            // keep-alive limit) is replaced before sending, not counted.
            let ready = match sender.as_mut() {
                Some(conn) => conn.ready().await.is_ok(),
                None => false,
            };
            if !ready {
                sender = None;
                let fresh = match connect(self.plan.addr).await {
                    Ok(mut s) => s.ready().await.map(|()| s).ok(),
                    Err(_) => None,
                };
                match fresh {
                    Some(s) => sender = Some(s),
                    None => {
                        sample.error = Some(ErrorKind::Connect);
                        sample.latency_us = micros(due.elapsed());
                        self.record(&mut samples, sample);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
            let Some(conn) = sender.as_mut() else {
                continue;
            };
            let outcome =
                tokio::time::timeout(self.plan.timeout, self.exchange(conn, due, &mut sample))
                    .await;
            sample.latency_us = micros(due.elapsed());
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(kind)) => {
                    if kind == ErrorKind::Io {
                        sender = None;
                    }
                    sample.error = Some(kind);
                }
                Err(_) => {
                    sender = None;
                    sample.error = Some(ErrorKind::Timeout);
                }
            }
            self.record(&mut samples, sample);
        }
        samples
    }

    fn record(&self, samples: &mut Vec<Sample>, sample: Sample) {
        let p = &self.progress;
        p.done.fetch_add(1, Ordering::Relaxed);
        p.latency_sum_us
            .fetch_add(u64::from(sample.latency_us), Ordering::Relaxed);
        if sample.error.is_some() {
            p.failed.fetch_add(1, Ordering::Relaxed);
        }
        samples.push(sample);
    }

    async fn exchange(
        &self,
        sender: &mut Sender,
        due: Instant,
        sample: &mut Sample,
    ) -> Result<(), ErrorKind> {
        let response = sender
            .send_request(self.request())
            .await
            .map_err(|_| ErrorKind::Io)?;
        let status = response.status();
        let mut body = response.into_body();
        // The last bytes seen, to find the closing `data: [DONE]`.
        let mut tail: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| ErrorKind::Io)?;
            if let Some(data) = frame.data_ref() {
                if self.plan.stream && !data.is_empty() {
                    if sample.ttft_us == u32::MAX {
                        sample.ttft_us = micros(due.elapsed());
                    }
                    tail.extend_from_slice(&data[data.len().saturating_sub(32)..]);
                    let keep = tail.len().saturating_sub(32);
                    tail.drain(..keep);
                }
            }
        }
        if !status.is_success() {
            return Err(ErrorKind::Status(status.as_u16()));
        }
        if self.plan.stream {
            let text = String::from_utf8_lossy(&tail);
            if !text.trim_end().ends_with("data: [DONE]") {
                return Err(ErrorKind::StreamIncomplete);
            }
        }
        Ok(())
    }
}

/// Whether the run is over (the progress printer stops then).
pub fn stopped(progress: &Progress) -> bool {
    progress.stop.load(Ordering::Relaxed)
}
