//! What the gateway replicas themselves spend: CPU time of each process
//! (from `/proc/PID/stat`, Linux) and the bytes replicas send each other to
//! share routing state (their `flexinfer_proxy_routing_peer_bytes_total`).

use std::time::Duration;

use anyhow::Result;

use super::metrics::{parse, Pod};

/// The series of bytes replicas exchange.
const PEER_BYTES: &str = "flexinfer_proxy_routing_peer_bytes_total";
/// The series of snapshots a replica merged.
const SNAPSHOTS: &str = "flexinfer_proxy_routing_peer_snapshots_total";

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// One gateway replica to read.
#[derive(Debug, Clone)]
pub struct Router {
    metrics: Pod,
    pid: Option<u32>,
}

/// One reading of a replica.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reading {
    /// CPU seconds used so far (user + system).
    pub cpu_s: Option<f64>,
    /// Bytes sent to peers so far.
    pub peer_bytes_sent: Option<f64>,
}

impl Router {
    /// The replica answering at `url`, running as process `pid`.
    pub fn new(url: &str, pid: Option<u32>) -> Result<Router> {
        Ok(Router {
            metrics: Pod::new(url)?,
            pid,
        })
    }

    /// Reads every replica.
    pub async fn read_all(routers: &[Router]) -> Vec<Reading> {
        let mut out = Vec::with_capacity(routers.len());
        for router in routers {
            out.push(router.read().await);
        }
        out
    }

    /// Waits until every replica merged a snapshot from each of its
    /// `peers` (all links are up), or `limit` passes.
    pub async fn wait_linked(routers: &[Router], peers: usize, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let mut linked = true;
            for router in routers {
                let applied = match router.metrics.scrape_text(Duration::from_secs(2)).await {
                    Ok(text) => parse(&text)
                        .into_iter()
                        .filter(|s| s.name == SNAPSHOTS)
                        .filter(|s| {
                            s.labels
                                .iter()
                                .any(|(k, v)| k == "result" && v == "applied")
                        })
                        .map(|s| s.value)
                        .sum::<f64>(),
                    Err(_) => 0.0,
                };
                linked &= applied >= peers as f64;
            }
            if linked {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn read(&self) -> Reading {
        let cpu_s = self.pid.and_then(cpu_seconds);
        let peer_bytes_sent = self.peer_bytes().await;
        Reading {
            cpu_s,
            peer_bytes_sent,
        }
    }

    async fn peer_bytes(&self) -> Option<f64> {
        let text = self
            .metrics
            .scrape_text(Duration::from_secs(5))
            .await
            .ok()?;
        let sent: Vec<f64> = parse(&text)
            .into_iter()
            .filter(|s| s.name == PEER_BYTES)
            .filter(|s| {
                s.labels
                    .iter()
                    .any(|(k, v)| k == "direction" && v == "sent")
            })
            .map(|s| s.value)
            .collect();
        // A replica without sharing has no such series: it sent nothing.
        Some(sent.iter().sum())
    }
}

/// User + system CPU seconds of process `pid` (fields 14 and 15 of
/// `/proc/PID/stat`, after the parenthesised command name).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

fn parse_stat(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// What all replicas spent over a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spent {
    /// CPU seconds, when every replica could be read.
    pub cpu_s: Option<f64>,
    /// Bytes sent between replicas.
    pub peer_bytes: Option<f64>,
}

impl Spent {
    /// The change between two readings of the same replicas.
    pub fn between(before: &[Reading], after: &[Reading]) -> Spent {
        if before.is_empty() || before.len() != after.len() {
            return Spent::default();
        }
        let delta = |f: fn(&Reading) -> Option<f64>| {
            before
                .iter()
                .zip(after)
                .map(|(b, a)| Some((f(a)? - f(b)?).max(0.0)))
                .sum::<Option<f64>>()
        };
        Spent {
            cpu_s: delta(|r| r.cpu_s),
            peer_bytes: delta(|r| r.peer_bytes_sent),
        }
    }

    /// CPU microseconds per request.
    pub fn cpu_us_per(&self, requests: u64) -> Option<f64> {
        (requests > 0).then(|| self.cpu_s.map(|s| s * 1e6 / requests as f64))?
    }

    /// Bytes between replicas per request.
    pub fn peer_bytes_per(&self, requests: u64) -> Option<f64> {
        (requests > 0).then(|| self.peer_bytes.map(|b| b / requests as f64))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_user_and_system_time() {
        let line =
            "4242 (flexinfer gw) S 1 4242 4242 0 -1 4194304 1000 0 0 0 250 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_stat(line), Some(3.0));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn spending_adds_over_replicas_and_needs_every_reading() {
        let r = |cpu, bytes| Reading {
            cpu_s: cpu,
            peer_bytes_sent: bytes,
        };
        let spent = Spent::between(
            &[r(Some(1.0), Some(0.0)), r(Some(2.0), Some(100.0))],
            &[r(Some(1.5), Some(400.0)), r(Some(2.5), Some(300.0))],
        );
        assert_eq!(spent.cpu_us_per(1000), Some(1000.0));
        assert_eq!(spent.peer_bytes_per(100), Some(6.0));
        assert_eq!(spent.cpu_us_per(0), None);
        let partial = Spent::between(&[r(None, None)], &[r(Some(1.0), None)]);
        assert_eq!(partial.cpu_us_per(10), None);
        assert_eq!(Spent::between(&[], &[]).peer_bytes_per(1), None);
    }
}
