//! Killing a gateway replica mid-run (`--kill-replica-at`, SIGKILL) and
//! starting it again (`--restart-after`): what it cost (failed requests,
//! those in flight on it when it died) and how soon the restarted replica
//! routes as well as the others (the answers' cached-token share, per
//! second, of the requests it served against the others' in the same
//! second).

use std::time::{Duration, Instant};

use serde::Serialize;

use super::driver::{DriveResult, Endpoints};
use super::local::Stack;

/// Width of one window of the hit-rate timeline.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Windows reported after the restart.
pub const WINDOWS: usize = 15;
/// The restarted replica has caught up when its window's hit rate is
/// within this much of the others'.
pub const CAUGHT_UP_WITHIN: f64 = 0.05;

/// When to kill and restart a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultSpec {
    /// Time from the start of the run to the kill.
    pub kill_at: Duration,
    /// Time from the kill to the restart (none: it stays dead).
    pub restart_after: Option<Duration>,
}

/// What the controller did, on the run's clock.
#[derive(Debug, Clone, Default)]
pub struct FaultLog {
    /// Replica killed.
    pub replica: usize,
    /// When it was killed.
    pub killed_at: Option<Duration>,
    /// Requests the client had sent it and not seen answered at the kill.
    pub in_flight_at_kill: u64,
    /// When the restarted replica answered again.
    pub ready_at: Option<Duration>,
    /// Why the kill or the restart failed.
    pub error: Option<String>,
}

/// Kills the last gateway replica of `stack` at `spec.kill_at` after
/// `started`, restarts it after `spec.restart_after` and, once it answers,
/// puts it back into the client's `endpoints`.
pub async fn run(
    stack: &mut Stack,
    endpoints: &Endpoints,
    spec: FaultSpec,
    started: Instant,
) -> FaultLog {
    let replica = stack.gateways.len().saturating_sub(1);
    let mut log = FaultLog {
        replica,
        ..FaultLog::default()
    };
    tokio::time::sleep_until((started + spec.kill_at).into()).await;
    log.in_flight_at_kill = endpoints.in_flight(replica);
    if let Err(e) = stack.kill_gateway(replica).await {
        log.error = Some(format!("kill: {e:#}"));
        return log;
    }
    log.killed_at = Some(started.elapsed());
    tracing::info!(replica, "gateway replica killed");
    let Some(after) = spec.restart_after else {
        return log;
    };
    tokio::time::sleep(after).await;
    match stack.restart_gateway(replica).await {
        Ok(()) => {
            log.ready_at = Some(started.elapsed());
            endpoints.restore(replica);
            tracing::info!(replica, "gateway replica restarted");
        }
        Err(e) => log.error = Some(format!("restart: {e:#}")),
    }
    log
}

/// One second of the timeline after the restart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    /// Start of the window, seconds after the restarted replica was ready.
    pub after_restart_s: f64,
    /// Successful requests the restarted replica served.
    pub restarted_requests: u64,
    /// Their cached prompt tokens ÷ prompt tokens.
    pub restarted_hit_rate: Option<f64>,
    /// The same over the other replicas.
    pub others_hit_rate: Option<f64>,
}

/// The kill and restart, in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultReport {
    /// Replica killed.
    pub replica: usize,
    /// Seconds from the start to the kill.
    pub killed_at_s: Option<f64>,
    /// Requests in flight on it when it died.
    pub in_flight_at_kill: u64,
    /// Failed requests of the whole run.
    pub failed_requests: u64,
    /// Requests whose connection to a replica failed and that another
    /// replica served.
    pub failovers: u64,
    /// Seconds from the start until the restarted replica answered.
    pub restarted_at_s: Option<f64>,
    /// Why the kill or the restart failed.
    pub error: Option<String>,
    /// Per second after the restart.
    pub windows: Vec<Window>,
    /// Hit rate of the restarted replica over its first 10 s.
    pub restarted_first_10s_hit_rate: Option<f64>,
    /// Hit rate of the others over the same 10 s.
    pub others_first_10s_hit_rate: Option<f64>,
    /// Start of the first window within [`CAUGHT_UP_WITHIN`] of the others.
    pub caught_up_after_s: Option<f64>,
}

impl FaultReport {
    /// Summarises the controller's log and the run.
    pub fn new(log: &FaultLog, result: &DriveResult, failovers: u64) -> FaultReport {
        let failed = result.samples.iter().filter(|s| s.outcome.is_err()).count() as u64;
        let mut windows = Vec::new();
        let (mut first, mut others) = ((0, 0), (0, 0));
        if let Some(ready) = log.ready_at {
            let mut sums = vec![[(0u64, 0u64); 2]; WINDOWS];
            let mut counts = vec![0u64; WINDOWS];
            for (sample, replica) in result.samples.iter().zip(&result.replicas) {
                let (Ok(ok), Some(replica)) = (&sample.outcome, replica) else {
                    continue;
                };
                let (Some(prompt), Some(cached)) = (ok.prompt_tokens, ok.cached_tokens) else {
                    continue;
                };
                let Some(since) = sample.started.checked_sub(ready) else {
                    continue;
                };
                let restarted = *replica == log.replica;
                if since < Duration::from_secs(10) {
                    let total = if restarted { &mut first } else { &mut others };
                    total.0 += cached;
                    total.1 += prompt;
                }
                let w = (since.as_secs_f64() / WINDOW.as_secs_f64()) as usize;
                if let Some(sum) = sums.get_mut(w) {
                    let side = &mut sum[usize::from(!restarted)];
                    side.0 += cached;
                    side.1 += prompt;
                    if restarted {
                        counts[w] += 1;
                    }
                }
            }
            windows = sums
                .iter()
                .zip(&counts)
                .enumerate()
                .map(|(i, (sum, &n))| Window {
                    after_restart_s: i as f64 * WINDOW.as_secs_f64(),
                    restarted_requests: n,
                    restarted_hit_rate: rate(sum[0]),
                    others_hit_rate: rate(sum[1]),
                })
                .collect();
            while windows
                .last()
                .is_some_and(|w| w.restarted_hit_rate.is_none() && w.others_hit_rate.is_none())
            {
                windows.pop();
            }
        }
        let caught_up_after_s = windows
            .iter()
            .find(|w| match (w.restarted_hit_rate, w.others_hit_rate) {
                (Some(r), Some(o)) => r + CAUGHT_UP_WITHIN >= o,
                _ => false,
            })
            .map(|w| w.after_restart_s);
        FaultReport {
            replica: log.replica,
            killed_at_s: log.killed_at.map(|d| d.as_secs_f64()),
            in_flight_at_kill: log.in_flight_at_kill,
            failed_requests: failed,
            failovers,
            restarted_at_s: log.ready_at.map(|d| d.as_secs_f64()),
            error: log.error.clone(),
            windows,
            restarted_first_10s_hit_rate: rate(first),
            others_first_10s_hit_rate: rate(others),
            caught_up_after_s,
        }
    }

    /// The text lines printed under the table.
    pub fn lines(&self) -> String {
        let pct = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.1}%", v * 100.0));
        let secs = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}s"));
        let mut out = format!(
            "replica {} killed at {}: {} in flight on it, {} failed requests in the run, {} sent elsewhere after a connection failure; restarted and ready at {}{}\n",
            self.replica,
            secs(self.killed_at_s),
            self.in_flight_at_kill,
            self.failed_requests,
            self.failovers,
            secs(self.restarted_at_s),
            self.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default(),
        );
        out.push_str(&format!(
            "first 10 s after the restart: restarted {} vs others {}; within {:.0} points from {}\n",
            pct(self.restarted_first_10s_hit_rate),
            pct(self.others_first_10s_hit_rate),
            CAUGHT_UP_WITHIN * 100.0,
            secs(self.caught_up_after_s),
        ));
        for w in &self.windows {
            out.push_str(&format!(
                "  +{:>4.1}s  restarted {:>6} ({:>3} reqs)  others {:>6}\n",
                w.after_restart_s,
                pct(w.restarted_hit_rate),
                w.restarted_requests,
                pct(w.others_hit_rate),
            ));
        }
        out
    }
}

fn rate((cached, prompt): (u64, u64)) -> Option<f64> {
    (prompt > 0).then(|| cached as f64 / prompt as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{Sample, Success};

    fn served(at_ms: u64, cached: u64) -> Sample {
        Sample {
            started: Duration::from_millis(at_ms),
            latency: Duration::from_millis(10),
            outcome: Ok(Success {
                ttft: None,
                output_tokens: 1,
                prompt_tokens: Some(100),
                cached_tokens: Some(cached),
                from_usage: true,
                tokens_per_second: None,
            }),
        }
    }

    #[test]
    fn the_timeline_compares_the_restarted_replica_with_the_others() {
        let result = DriveResult {
            samples: vec![
                served(500, 0),
                Sample {
                    started: Duration::from_millis(900),
                    latency: Duration::ZERO,
                    outcome: Err("connect".into()),
                },
                served(2_100, 20),
                served(2_200, 90),
                served(3_100, 85),
                served(3_200, 90),
            ],
            replicas: vec![Some(1), None, Some(1), Some(0), Some(1), Some(0)],
            ..DriveResult::default()
        };
        let log = FaultLog {
            replica: 1,
            killed_at: Some(Duration::from_millis(800)),
            in_flight_at_kill: 2,
            ready_at: Some(Duration::from_secs(2)),
            error: None,
        };
        let report = FaultReport::new(&log, &result, 3);
        assert_eq!(report.failed_requests, 1);
        assert_eq!(report.failovers, 3);
        assert_eq!(report.windows.len(), 2, "{:?}", report.windows);
        assert_eq!(report.windows[0].restarted_hit_rate, Some(0.2));
        assert_eq!(report.windows[0].others_hit_rate, Some(0.9));
        assert_eq!(report.windows[1].restarted_requests, 1);
        assert_eq!(report.caught_up_after_s, Some(1.0));
        assert_eq!(report.restarted_first_10s_hit_rate, Some(105.0 / 200.0));
        assert!(report.lines().contains("2 in flight"), "{}", report.lines());
    }

    #[test]
    fn no_restart_no_timeline() {
        let log = FaultLog::default();
        let report = FaultReport::new(&log, &DriveResult::default(), 0);
        assert!(report.windows.is_empty());
        assert_eq!(report.caught_up_after_s, None);
    }
}
