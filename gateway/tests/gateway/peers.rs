//! Gateway replicas sharing cache-aware routing state: real gateways
//! peered on loopback in front of the same simulated pods.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use flexinfer_gateway::peers::codec::{encode, EndpointBlocks, ModelBlocks};
use flexinfer_gateway::peers::envelope::SignedRequest;
use flexinfer_gateway::peers::keyring::KeySet;
use flexinfer_gateway::peers::signature::{now_ms, Key};
use flexinfer_gateway::peers::RECORDS_PATH;
use flexinfer_gateway::routing::PromptBlocks;
use serde_json::json;
use support::peer::{raw_request, TestPeer};
use support::{endpoints, free_port, pod, post_json, served_by, Gateway, SimProcess};

const PODS: [&str; 4] = ["pod-a", "pod-b", "pod-c", "pod-d"];
/// The secret the replicas of these tests share.
pub(crate) const SECRET: &str = "replicas-share-this-secret";

/// A cache-aware model `m` on `sims`.
pub(crate) fn cache_aware(sims: &[&SimProcess]) -> String {
    format!(
        "models:\n- name: m\n  routing: cache-aware\n  endpoints: {}\n",
        endpoints(sims)
    )
}

/// Four pods serving `m`.
pub(crate) fn pods() -> Vec<SimProcess> {
    pods_with(&[])
}

/// [`pods`] with `extra` simulator flags.
pub(crate) fn pods_with(extra: &[&str]) -> Vec<SimProcess> {
    PODS.iter()
        .map(|p| {
            let mut args = vec!["--prefix-cache-blocks", "200"];
            args.extend_from_slice(extra);
            pod(p, &["m"], &args)
        })
        .collect()
}

/// A gateway in front of `sims` with a peer listener (its only peer is
/// unreachable): the gateway, its listener and pod-d's address.
pub(crate) fn listening_gateway(sims: &[SimProcess]) -> (Gateway, String, SocketAddr) {
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let listen = format!("127.0.0.1:{}", free_port());
    let gw = Gateway::start(
        &cache_aware(&refs),
        &[
            "--route-debug-header",
            "true",
            "--routing-peer-listen",
            &listen,
            "--routing-peers",
            "127.0.0.1:1",
            "--routing-peer-secret",
            SECRET,
        ],
    );
    let target = sims[3]
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    (gw, listen, target)
}

/// A tenant's system prompt of about 1,000 tokens, distinct from its
/// first byte.
fn system_prompt(tenant: usize) -> String {
    (0..700)
        .map(|w| format!("t{tenant}w{}", (w * 7919 + tenant * 104_729) % 10_007))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Turn `turn` of `tenant`'s conversation, asking for two tokens.
pub(crate) fn turn(tenant: usize, turn: usize) -> Vec<u8> {
    long_turn(tenant, turn, 2)
}

/// [`turn`] asking for `max_tokens` tokens.
pub(crate) fn long_turn(tenant: usize, turn: usize, max_tokens: u32) -> Vec<u8> {
    let messages = json!([
        {"role": "system", "content": system_prompt(tenant)},
        {"role": "user", "content": format!("question {turn} of tenant {tenant}")},
    ]);
    serde_json::to_vec(&json!({"model": "m", "messages": messages, "max_tokens": max_tokens}))
        .unwrap()
}

/// The prompt blocks the gateway computes for [`turn`]'s request.
pub(crate) fn blocks(tenant: usize, turn: usize) -> Vec<u64> {
    let text = format!(
        "{}\nquestion {turn} of tenant {tenant}\n",
        system_prompt(tenant)
    );
    PromptBlocks::of_text(text.as_bytes(), 16).hashes().to_vec()
}

/// Starts one gateway per peer port, each naming all the others.
pub(crate) fn peered(yaml: &str, ports: &[u16], extra: &[&str]) -> Vec<Gateway> {
    (0..ports.len())
        .map(|i| start_peer(yaml, ports, i, extra))
        .collect()
}

/// Starts the gateway listening on `ports[i]` and naming the others.
pub(crate) fn start_peer(yaml: &str, ports: &[u16], i: usize, extra: &[&str]) -> Gateway {
    let others: Vec<String> = ports
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, p)| format!("127.0.0.1:{p}"))
        .collect();
    let listen = format!("127.0.0.1:{}", ports[i]);
    let peers = others.join(",");
    let mut args = vec![
        "--route-debug-header",
        "true",
        "--routing-peer-listen",
        &listen,
        "--routing-peers",
        &peers,
        "--routing-peer-secret",
        SECRET,
        "--routing-peer-flush-interval",
        "10ms",
    ];
    args.extend_from_slice(extra);
    Gateway::start(yaml, &args)
}

/// One series of `gw`'s metrics.
pub(crate) async fn metric(gw: &Gateway, series: &str) -> f64 {
    support::metric_value(&gw.metrics().await, series)
}

/// Waits until `gw` merged a snapshot from `n` peers (each link is up).
pub(crate) async fn wait_linked(gw: &Gateway, n: usize) {
    let series = "flexinfer_proxy_routing_peer_snapshots_total{result=\"applied\"}";
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric(gw, series).await < n as f64 {
        assert!(Instant::now() < deadline, "peers never linked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends one request and returns the pod and the route decision.
pub(crate) async fn send(gw: &Gateway, body: &[u8]) -> (String, String) {
    let resp = post_json(&gw.url("/v1/chat/completions"), body, &[]).await;
    assert_eq!(resp.status(), 200);
    let route = resp
        .headers()
        .get("x-flexinfer-route")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let reason = route
        .rsplit("reason=")
        .next()
        .unwrap_or_default()
        .to_owned();
    (served_by(&resp), reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_share_keep_each_tenant_on_one_pod() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let ports = [free_port(), free_port(), free_port()];
    let gws = peered(&cache_aware(&refs), &ports, &[]);
    for gw in &gws {
        wait_linked(gw, 2).await;
    }
    // Eight tenants, four turns, every request to the next replica in
    // turn, as a Service spreads connections: each replica sees a tenant
    // the others placed.
    let mut home: HashMap<usize, String> = HashMap::new();
    let mut hits = 0;
    let mut next = 0;
    for t in 0..4 {
        for tenant in 0..8 {
            let gw = &gws[next % gws.len()];
            next += 1;
            let (pod, reason) = send(gw, &turn(tenant, t)).await;
            let first = home.entry(tenant).or_insert_with(|| pod.clone());
            assert_eq!(*first, pod, "tenant {tenant} moved at turn {t} ({reason})");
            hits += usize::from(reason == "prefix_hit");
            // Longer than a flush: the next replica has heard of it.
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    }
    assert_eq!(hits, 24);
    let mut per_pod: HashMap<&String, usize> = HashMap::new();
    for pod in home.values() {
        *per_pod.entry(pod).or_default() += 1;
    }
    assert!(per_pod.values().all(|&n| n == 2), "{per_pod:?}");
    // What it cost: each block at most once per request to each peer
    // (blocks still fresh in the index are not sent again), with a few
    // bytes per batch around them.
    let mut sent = 0.0;
    for gw in &gws {
        sent += metric(
            gw,
            "flexinfer_proxy_routing_peer_bytes_total{direction=\"sent\",kind=\"records\"}",
        )
        .await;
    }
    let prompts: usize = (0..8).map(|tenant| blocks(tenant, 0).len()).sum();
    let all: usize = (0..4)
        .flat_map(|t| (0..8).map(move |tenant| blocks(tenant, t).len()))
        .sum();
    let (low, high) = (2 * 8 * prompts, 2 * (8 * all + 64 * 32));
    assert!(
        (low..=high).contains(&(sent as usize)),
        "{sent} not in {low}..={high}"
    );
}

/// A TCP port that accepts connections and never answers.
fn black_hole() -> (std::net::TcpListener, SocketAddr) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// Time of `n` cache-aware requests sent one after another.
async fn timed(gw: &Gateway, tenant: usize, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for t in 0..n {
        let start = Instant::now();
        send(gw, &turn(tenant + t % 4, t)).await;
        out.push(start.elapsed());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_silent_peer_never_delays_a_pick() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let yaml = cache_aware(&refs);
    let (_hole, silent) = black_hole();
    let listen = format!("127.0.0.1:{}", free_port());
    let peers = format!("{silent},127.0.0.1:1");
    let shared = Gateway::start(
        &yaml,
        &[
            "--route-debug-header",
            "true",
            "--routing-peer-listen",
            &listen,
            "--routing-peers",
            &peers,
            "--routing-peer-secret",
            SECRET,
            "--routing-peer-timeout",
            "3s",
        ],
    );
    let alone = Gateway::start(&yaml, &["--route-debug-header", "true"]);
    // Warm both (connections to the pods), then time the same work.
    timed(&shared, 100, 4).await;
    timed(&alone, 200, 4).await;
    let with_peers = timed(&shared, 0, 40).await;
    let without = timed(&alone, 10, 40).await;
    let slowest = with_peers.iter().max().copied().unwrap_or_default();
    assert!(
        slowest < Duration::from_secs(1),
        "a pick waited: {slowest:?}"
    );
    let (a, b) = (support::median(&with_peers), support::median(&without));
    assert!(a < b * 2 + Duration::from_millis(20), "{a:?} against {b:?}");
    // The batches were attempted, failed and counted, off the request path.
    let metrics = shared.metrics().await;
    let failed = support::metric_value(
        &metrics,
        "flexinfer_proxy_routing_peer_batches_total{result=\"failed\"}",
    ) + support::metric_value(
        &metrics,
        "flexinfer_proxy_routing_peer_batches_total{result=\"skipped\"}",
    );
    assert!(failed > 0.0, "{metrics}");
}

/// A claim that `target` was sent `tenant`'s first prompt (and `picks`
/// requests).
pub(crate) fn claim(target: SocketAddr, tenant: usize, picks: u32) -> Vec<u8> {
    let mut hashes = blocks(tenant, 0);
    hashes.reverse();
    records(&[(target, picks, hashes)])
}

/// A records body for model `m`: per endpoint, its picks and blocks.
pub(crate) fn records(endpoints: &[(SocketAddr, u32, Vec<u64>)]) -> Vec<u8> {
    encode(&[ModelBlocks {
        model: "m".into(),
        endpoints: endpoints
            .iter()
            .map(|(addr, picks, hashes)| EndpointBlocks {
                addr: *addr,
                picks: *picks,
                hashes: hashes.clone(),
            })
            .collect(),
    }])
    .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_correctly_signed_peer_updates_change_routing() {
    let sims = pods();
    let (gw, listen, target) = listening_gateway(&sims);
    let mut peer = TestPeer::new(&listen, SECRET, "replica-b-1");
    let receiver = peer.hello().await;
    // A forged claim: pod-d holds tenants 0 and 1's prompts.
    let body = claim(target, 0, 0);
    let post = |key: &KeySet, body: &[u8], seq: u64, age_ms: u64| {
        let mut signed = SignedRequest::new(
            key,
            ("POST", RECORDS_PATH),
            ("intruder", &receiver),
            seq,
            body,
        );
        signed.envelope.time_ms = now_ms() - age_ms;
        let signed = SignedRequest::sign(key, ("POST", RECORDS_PATH), signed.envelope);
        raw_request("POST", RECORDS_PATH, &signed.headers(), body)
    };
    let status = |bytes: Vec<u8>| {
        let listen = peer.listen;
        async move { support::peer::exchange(listen, &bytes).await.status }
    };
    let right = KeySet::from_keys(vec![Key::new(SECRET.as_bytes())]);
    let wrong = KeySet::from_keys(vec![Key::new(b"not-the-shared-secret")]);
    let unsigned = raw_request(
        "POST",
        RECORDS_PATH,
        &[("content-length", body.len().to_string())],
        &body,
    );
    assert_eq!(status(unsigned).await, 401);
    assert_eq!(status(post(&wrong, &body, 1, 0)).await, 401);
    assert_eq!(status(post(&right, &body, 2, 120_000)).await, 401);
    // The body signed, but another one sent: its hash differs (400).
    let mut tampered = post(&right, &body, 3, 0);
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert_eq!(status(tampered).await, 400);
    let unauthorized = metric(
        &gw,
        "flexinfer_proxy_routing_peer_requests_total{result=\"unauthorized\"}",
    )
    .await;
    assert_eq!(unauthorized, 3.0);
    // Nothing was learned: tenant 0's first request is placed on load.
    let (_, reason) = send(&gw, &turn(0, 0)).await;
    assert_eq!(reason, "load");

    // The same claim, signed with the shared secret, is believed.
    let (request, reply) = peer.post_records(&claim(target, 1, 0)).await;
    assert_eq!(reply.status, 204, "{reply:?}");
    assert!(reply.signed_for(&peer.key, &request.signed));
    let (pod, reason) = send(&gw, &turn(1, 0)).await;
    assert_eq!((pod.as_str(), reason.as_str()), ("pod-d", "prefix_hit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_later_catches_up_from_its_peer() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let yaml = cache_aware(&refs);
    let ports = [free_port(), free_port()];
    let first = start_peer(&yaml, &ports, 0, &[]);
    let mut home: HashMap<usize, String> = HashMap::new();
    for tenant in 0..8 {
        let (pod, _) = send(&first, &turn(tenant, 0)).await;
        home.insert(tenant, pod);
    }
    // The second replica starts afterwards and pulls the first's index.
    let started = Instant::now();
    let second = start_peer(&yaml, &ports, 1, &[]);
    wait_linked(&second, 1).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    for tenant in 0..8 {
        let (pod, reason) = send(&second, &turn(tenant, 1)).await;
        assert_eq!(
            (&pod, reason.as_str()),
            (&home[&tenant], "prefix_hit"),
            "tenant {tenant}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_picks_count_in_the_load_bound() {
    // Slow pods: a 40-token answer takes about two seconds.
    let sims = pods_with(&["--tokens-per-second", "20"]);
    let (gw, listen, target) = listening_gateway(&sims);
    let mut peer = TestPeer::new(&listen, SECRET, "replica-b-1");
    peer.hello().await;
    // A peer sent tenant 1 to pod-d.
    assert_eq!(peer.post_records(&claim(target, 1, 0)).await.1.status, 204);
    // Five long requests of the tenant keep pod-d busy, over the floor.
    let url = gw.url("/v1/chat/completions");
    let busy: Vec<_> = (1..=5)
        .map(|t| {
            let url = url.clone();
            tokio::spawn(async move {
                let resp = post_json(&url, &long_turn(1, t, 40), &[]).await;
                served_by(&resp)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Its own picks alone leave pod-d within its share: the prefix stays.
    let (pod, reason) = send(&gw, &turn(1, 6)).await;
    assert_eq!((pod.as_str(), reason.as_str()), ("pod-d", "prefix_hit"));
    // The peer reports it sent most of the recent requests there too: pod-d
    // is over its share, and the tenant spills to another pod.
    let picks = records(&[(target, 200, Vec::new())]);
    assert_eq!(peer.post_records(&picks).await.1.status, 204);
    let (pod, reason) = send(&gw, &turn(1, 7)).await;
    assert_ne!(pod, "pod-d");
    assert_eq!(reason, "load");
    for task in busy {
        assert_eq!(task.await.unwrap(), "pod-d");
    }
}
