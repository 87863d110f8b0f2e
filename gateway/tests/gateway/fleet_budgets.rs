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

/// Sends `key`'s chat to `url` and returns when it finished.
async fn timed_chat(url: String, key: &'static str, prompt: String, max_tokens: u64) -> Instant {
    let resp = support::client()
        .post(url)
        .bearer_auth(key)
        .json(&json!({
            "model": "m",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
        }))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    resp.bytes().await.expect("body");
    Instant::now()
}

/// The order in which three `heavy` and three `light` requests, queued
/// in that order behind a busy slot on `gw`, were served.
async fn queue_order(gw: &Gateway) -> String {
    let url = gw.url("/v1/chat/completions");
    let filler = tokio::spawn(timed_chat(url.clone(), "kf", "fill the slot".into(), 40));
    // The filler holds the model's one slot; the others queue in order.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut waiting = Vec::new();
    for (i, (tenant, key)) in [
        ("h", "kh"),
        ("h", "kh"),
        ("h", "kh"),
        ("l", "kl"),
        ("l", "kl"),
        ("l", "kl"),
    ]
    .into_iter()
    .enumerate()
    {
        let served = tokio::spawn(timed_chat(url.clone(), key, format!("request {i}"), 3));
        waiting.push(async move { (served.await.expect("request task"), tenant) });
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    filler.await.expect("filler");
    let mut done = futures::future::join_all(waiting).await;
    done.sort_by_key(|(at, _)| *at);
    done.into_iter().map(|(_, t)| t).collect()
}

/// The queue's turns go by tenants' usage across the fleet: a tenant that
/// used much on one replica waits, on another, behind one that used little;
/// replicas that do not share state give it its turns as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_that_used_the_fleet_waits_behind_one_that_did_not_on_any_replica() {
    let sim = pod("p", &["m"], &["--tokens-per-second", "40"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = dir.path().join("keys.yaml");
    std::fs::write(
        &keys,
        "tenants:\n  - name: heavy\n    keys: [kh]\n  - name: light\n    keys: [kl]\n  \
         - name: filler\n    keys: [kf]\n",
    )
    .expect("key file");
    let keys = keys.display().to_string();
    let yaml = format!(
        "models:\n- name: m\n  endpoints: {}\n  maxConcurrency: 1\n",
        endpoints(&[&sim])
    );
    let args = ["--api-key-file", &keys, "--admin-auth-token", ADMIN_KEY];
    let long = "word ".repeat(4000);
    for peered in [true, false] {
        let fleet: Vec<Gateway> = if peered {
            crate::peers::peered(&yaml, &[free_port(), free_port()], &args)
        } else {
            (0..2).map(|_| Gateway::start(&yaml, &args)).collect()
        };
        if peered {
            for gw in &fleet {
                wait_linked(gw, 1).await;
            }
        }
        // Heavy uses about 20,000 tokens of the fleet, on the first replica.
        for _ in 0..4 {
            timed_chat(fleet[0].url("/v1/chat/completions"), "kh", long.clone(), 2).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let order = queue_order(&fleet[1]).await;
        eprintln!("peered {peered}: served {order}");
        if peered {
            assert_eq!(order, "lllhhh", "light goes first on the other replica");
        } else {
            assert_eq!(order, "hlhlhl", "apart, the replica gives turns as before");
        }
    }
}
