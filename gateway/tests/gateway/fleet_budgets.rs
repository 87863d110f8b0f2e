//! Tenants' budgets across gateway replicas (`docs/tenants.md`, "Several
//! replicas"): replicas that share routing state share every budget, so a
//! tenant's tokens/min hold for the fleet instead of N times over; a
//! replica cut off from its peers keeps to its own share. Real gateway
//! processes peered over the signed channel, real simulator engines.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{endpoints, free_port, pod, Gateway};

const ADMIN_KEY: &str = "admin-key";
const BUDGET: f64 = 10_000.0;
const KEYS: &str = "tenants:\n  - name: a\n    keys: [ka]\n    limits: {tokensPerMinute: 10000}\n";

fn key_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("keys.yaml");
    std::fs::write(&path, KEYS).expect("key file");
    let path = path.display().to_string();
    (dir, path)
}

async fn series(gw: &Gateway, name: &str) -> f64 {
    let req = support::client()
        .get(gw.url("/metrics"))
        .bearer_auth(ADMIN_KEY);
    let text = req.send().await.expect("metrics").text().await.unwrap();
    support::metric_value(&text, name)
}

async fn wait_linked(gw: &Gateway, peers: usize) {
    let linked = "flexinfer_proxy_routing_peer_snapshots_total{result=\"applied\"}";
    let deadline = Instant::now() + Duration::from_secs(15);
    while series(gw, linked).await < peers as f64 {
        assert!(Instant::now() < deadline, "peers never linked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 50 clients, spread over `replicas` in turn, each sending chats of
/// about 300 tokens back to back for `secs`: the tokens the engines were
/// let to use (the usage of every answered request) and the refusals.
async fn fifty_clients(replicas: &[&Gateway], secs: u64) -> (f64, usize) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(secs);
    let clients = (0..50).map(|i| {
        let url = replicas[i % replicas.len()].url("/v1/chat/completions");
        let client = client.clone();
        async move {
            let (mut used, mut refused) = (0.0, 0);
            let body = json!({
                "model": "m",
                "messages": [{"role": "user", "content": "word ".repeat(200)}],
                "max_tokens": 60,
            });
            while Instant::now() < until {
                let resp = client
                    .post(&url)
                    .bearer_auth("ka")
                    .json(&body)
                    .send()
                    .await
                    .expect("answer");
                match resp.status().as_u16() {
                    200 => {
                        let v: Value = resp.json().await.expect("JSON");
                        used += v["usage"]["total_tokens"].as_f64().expect("usage");
                    }
                    429 => {
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => panic!("{other}: {}", resp.text().await.unwrap_or_default()),
                }
            }
            (used, refused)
        }
    });
    let results = futures::future::join_all(clients).await;
    (
        results.iter().map(|r| r.0).sum(),
        results.iter().map(|r| r.1).sum(),
    )
}

fn replicas(sim: &support::SimProcess, keys: &str, peered: bool) -> Vec<Gateway> {
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[sim]));
    let args = ["--api-key-file", keys, "--admin-auth-token", ADMIN_KEY];
    if peered {
        let ports = [free_port(), free_port(), free_port()];
        crate::peers::peered(&yaml, &ports, &args)
    } else {
        (0..3).map(|_| Gateway::start(&yaml, &args)).collect()
    }
}

/// Acceptance: three replicas, a 10,000-token budget, 50 concurrent
/// clients spread over the replicas: what the fleet admits stays within
/// the budget plus its refill and the stated bound; three replicas that do
/// not share admit about three budgets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_budget_holds_for_the_fleet_not_per_replica() {
    const SECS: u64 = 4;
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file();
    let refill = BUDGET / 60.0 * SECS as f64;

    let alone = replicas(&sim, &keys, false);
    let (apart, _) = fifty_clients(&alone.iter().collect::<Vec<_>>(), SECS).await;
    drop(alone);

    let fleet = replicas(&sim, &keys, true);
    for gw in &fleet {
        wait_linked(gw, 2).await;
    }
    let (shared, refused) = fifty_clients(&fleet.iter().collect::<Vec<_>>(), SECS).await;
    let sent = series(
        &fleet[0],
        "flexinfer_proxy_routing_peer_bytes_total{direction=\"sent\",kind=\"budgets\"}",
    )
    .await;
    eprintln!(
        "50 clients for {SECS} s, budget {BUDGET} + refill {refill:.0}: three replicas apart \
         admitted {apart:.0} tokens, sharing {shared:.0} ({refused} refusals; {sent} bytes of \
         budgets sent by one replica)"
    );
    assert!(apart > 2.0 * BUDGET, "replicas apart: {apart}");
    // The bound: one request per replica and window beyond the shares, and
    // what answers used beyond their estimates (the estimate is the whole
    // prompt plus max_tokens here, so nothing): a few requests.
    assert!(
        shared <= BUDGET + refill + 3.0 * 400.0,
        "the fleet admitted {shared} tokens"
    );
    assert!(
        shared >= 0.8 * BUDGET,
        "the fleet used its budget: {shared}"
    );
}

/// A replica whose peers are gone keeps to its own share of the budget
/// (a third, refilled at a third of the rate), never the whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_cut_off_from_its_peers_keeps_to_its_share() {
    const SECS: u64 = 3;
    let sim = pod("p", &["m"], &[]);
    let (_dir, keys) = key_file();
    let mut fleet = replicas(&sim, &keys, true);
    for gw in &fleet {
        wait_linked(gw, 2).await;
    }
    let survivor = fleet.remove(0);
    drop(fleet);
    // Its links fail within a few exchanges.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (used, refused) = fifty_clients(&[&survivor], SECS).await;
    let share = BUDGET / 3.0 + BUDGET / 60.0 / 3.0 * (SECS + 2) as f64;
    eprintln!(
        "cut off: admitted {used:.0} tokens in {SECS} s ({refused} refusals); its share {share:.0}"
    );
    assert!(used <= share + 400.0, "admitted {used}, share {share}");
    assert!(used >= 0.7 * BUDGET / 3.0, "admitted {used}");
}
