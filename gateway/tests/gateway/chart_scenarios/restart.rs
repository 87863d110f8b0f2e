//! A gateway restart under traffic loses nothing but in-flight requests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cluster::Cluster;
use super::lane::{fresh_client, Lane};

/// Outcome of one request of the traffic loop.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Ok,
    /// Answered with another status.
    Status(u16),
    /// Accepted, then failed without an answer.
    Broken(String),
}

/// Outcomes with the time each request was sent.
type TrafficLog = Arc<Mutex<Vec<(Instant, Outcome)>>>;

/// Sequential traffic through a "Service" that routes only while the
/// gateway is ready (`routable`), as endpoints do: every request sent gets
/// an outcome, with the time it was sent.
fn traffic(
    url: String,
    routable: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> (tokio::task::JoinHandle<()>, TrafficLog) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let out = log.clone();
    let task = tokio::spawn(async move {
        let client = fresh_client();
        while !stop.load(Ordering::SeqCst) {
            if !routable.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            let sent = Instant::now();
            let outcome = match client
                .post(&url)
                .json(&crate::support::chat("steady"))
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => match r.bytes().await {
                    Ok(_) => Outcome::Ok,
                    Err(e) => Outcome::Broken(e.to_string()),
                },
                Ok(r) => Outcome::Status(r.status().as_u16()),
                Err(e) => Outcome::Broken(e.to_string()),
            };
            out.lock().unwrap().push((sent, outcome));
        }
    });
    (task, log)
}

/// Chart values: a short drain, as a test can wait for.
pub fn values() -> Value {
    json!({"gateway": {"shutdownDrainDelay": "1s", "gracefulShutdownTimeout": "5s"}})
}

/// The gateway gets SIGTERM while a client sends requests and is started
/// again (a rollout of one replica): requests sent before or after the
/// restart are all answered, the model keeps its pod and process (no new
/// cold start), and the first request after the restart is fast.
pub async fn run(lane: &mut impl Cluster) {
    lane.sim_flags("steady", &["--startup-delay", "1s", "--ttft", "50ms"]);
    lane.apply(lane.model(
        "steady",
        json!({"backend": "llamacpp", "source": "file:///models/steady.gguf",
               "gpu": {"vendor": "cpu"}, "serverless": {"enabled": false}}),
    ))
    .await;
    assert_eq!(
        lane.chat("steady").await.status(),
        200,
        "logs in {}",
        lane.logs().display()
    );
    let before = lane.model_processes("steady");
    assert_eq!(before.len(), 1);

    let routable = Arc::new(AtomicBool::new(true));
    let stop = Arc::new(AtomicBool::new(false));
    let (task, log) = traffic(
        lane.gateway_url("/v1/chat/completions"),
        routable.clone(),
        stop.clone(),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Rollout: the old pod leaves the endpoints and gets SIGTERM.
    routable.store(false, Ordering::SeqCst);
    let terminated_at = Instant::now();
    assert!(
        lane.terminate_gateway(Duration::from_secs(15)).await,
        "the gateway did not exit after SIGTERM"
    );
    lane.start_gateway().await;
    let restarted_at = Instant::now();
    routable.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("traffic");

    let log = log.lock().unwrap().clone();
    let after: Vec<_> = log.iter().filter(|(t, _)| *t >= restarted_at).collect();
    let before_kill: Vec<_> = log.iter().filter(|(t, _)| *t < terminated_at).collect();
    assert!(
        before_kill.len() >= 3,
        "traffic before the restart: {log:?}"
    );
    assert!(after.len() >= 3, "traffic after the restart: {log:?}");
    // Only the one request in flight when SIGTERM came may fail.
    let failed: Vec<_> = log.iter().filter(|(_, o)| *o != Outcome::Ok).collect();
    assert!(
        failed.len() <= 1,
        "requests lost beyond the one in flight: {failed:?}; logs in {}",
        lane.logs().display()
    );
    assert!(
        after.iter().all(|(_, o)| *o == Outcome::Ok),
        "after the restart: {after:?}"
    );
    assert_eq!(
        lane.model_processes("steady"),
        before,
        "the model kept its pod and process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_restart_under_traffic_loses_only_in_flight_requests() {
    let Some(mut lane) = Lane::install("restart", values()).await else {
        return;
    };
    run(&mut lane).await;
}
