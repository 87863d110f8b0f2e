//! The replicas' peer channel against a hostile network neighbour: real
//! gateways on loopback, a test replica holding the secret
//! ([`support::peer::TestPeer`]) whose requests are captured and replayed
//! byte for byte from other connections, a man in the middle forging
//! answers, slow and oversized clients, and a peer of the previous
//! release.

use crate::peers::{
    blocks, cache_aware, claim, listening_gateway, long_turn, metric, pods, pods_with, records,
    send, turn, wait_linked, SECRET,
};
use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flexinfer_gateway::peers::codec::decode;
use flexinfer_gateway::peers::signature::{now_ms, Key};
use flexinfer_gateway::peers::{MAX_RECORDS_BYTES, RECORDS_PATH, SNAPSHOT_PATH};
use support::peer::{exchange, raw_request, read_reply, TestPeer};
use support::{free_port, post_json, served_by, Gateway, SimProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The address of a simulated pod.
fn addr_of(sim: &SimProcess) -> SocketAddr {
    sim.base_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap()
}

/// A gateway with no models whose peer listener is `listen` (its only peer
/// unreachable), started with `extra` flags; waits for the listener.
async fn bare_gateway(listen: &str, extra: &[&str]) -> Gateway {
    let mut args = vec![
        "--routing-peer-listen",
        listen,
        "--routing-peers",
        "127.0.0.1:1",
        "--routing-peer-secret",
        SECRET,
    ];
    args.extend_from_slice(extra);
    let gw = Gateway::start("models: []\n", &args);
    wait_accepting(listen).await;
    gw
}

/// Waits until something accepts connections on `listen`.
async fn wait_accepting(listen: &str) {
    let port: u16 = listen.rsplit(':').next().unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !support::accepts(port).await {
        assert!(Instant::now() < deadline, "nothing listens on {listen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_batch_is_refused_and_its_picks_count_once() {
    // Slow pods: a 100-token answer takes about five seconds.
    let sims = pods_with(&["--tokens-per-second", "20"]);
    let (gw, listen, target) = listening_gateway(&sims);
    let mut peer = TestPeer::new(&listen, SECRET, "replica-b-1");
    peer.hello().await;
    // A peer sent tenant 1 to pod-d, and 40 requests to each other pod.
    assert_eq!(peer.post_records(&claim(target, 1, 0)).await.1.status, 204);
    let others: Vec<(SocketAddr, u32, Vec<u64>)> = sims[..3]
        .iter()
        .map(|s| (addr_of(s), 40, Vec::new()))
        .collect();
    assert_eq!(peer.post_records(&records(&others)).await.1.status, 204);
    // Five long requests of the tenant keep pod-d busier than the floor,
    // so that its share of the recent picks decides.
    let url = gw.url("/v1/chat/completions");
    let busy: Vec<_> = (1..=5)
        .map(|t| {
            let url = url.clone();
            tokio::spawn(async move {
                let resp = post_json(&url, &long_turn(1, t, 100), &[]).await;
                served_by(&resp)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The captured batch: ten more requests sent to pod-d. Once, it
    // leaves pod-d within its share.
    let ten_picks = records(&[(target, 10, Vec::new())]);
    let (captured, reply) = peer.post_records(&ten_picks).await;
    assert_eq!(reply.status, 204, "{reply:?}");
    let (pod, reason) = send(&gw, &turn(1, 6)).await;
    assert_eq!((pod.as_str(), reason.as_str()), ("pod-d", "prefix_hit"));
    // Replayed 40 times from other connections, inside the signature's
    // time window: refused every time, with a signed 409 the sender could
    // trust, and nothing added.
    for i in 0..40 {
        let reply = peer.send(&captured).await;
        assert_eq!(reply.status, 409, "replay {i}: {reply:?}");
        assert_eq!(reply.error_code(), "peer_message_replayed");
        assert!(reply.signed_for(&peer.key, &captured.signed));
    }
    let (pod, reason) = send(&gw, &turn(1, 7)).await;
    assert_eq!(
        (pod.as_str(), reason.as_str()),
        ("pod-d", "prefix_hit"),
        "the replayed picks counted"
    );
    let replayed = "flexinfer_proxy_routing_peer_rejected_total{reason=\"replayed\"}";
    assert_eq!(metric(&gw, replayed).await, 40.0);
    // The same picks in 40 new requests of the peer do count: they move
    // the tenant off pod-d, as the replays would have.
    for _ in 0..40 {
        assert_eq!(peer.post_records(&ten_picks).await.1.status, 204);
    }
    let (pod, reason) = send(&gw, &turn(1, 8)).await;
    assert_ne!(pod, "pod-d", "{reason}");
    for task in busy {
        assert_eq!(task.await.unwrap(), "pod-d");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_snapshot_request_is_refused_and_the_answer_is_bound_to_its_request() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let yaml = cache_aware(&refs);
    let listen = format!("127.0.0.1:{}", free_port());
    let args = [
        "--routing-peer-listen",
        listen.as_str(),
        "--routing-peers",
        "127.0.0.1:1",
        "--routing-peer-secret",
        SECRET,
    ];
    let gw = Gateway::start(&yaml, &args);
    wait_accepting(&listen).await;
    for tenant in 0..2 {
        post_json(&gw.url("/v1/chat/completions"), &turn(tenant, 0), &[]).await;
    }
    let mut peer = TestPeer::new(&listen, SECRET, "replica-b-1");
    let first_instance = peer.hello().await;
    let (captured, reply) = peer.snapshot().await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.signed_for(&peer.key, &captured.signed));
    let held: usize = decode(&reply.body)
        .unwrap()
        .iter()
        .flat_map(|m| m.endpoints.iter().map(|e| e.hashes.len()))
        .sum();
    assert_eq!(held, blocks(0, 0).len() + blocks(1, 0).len());
    // The answer is bound to the request it answers: it does not pass for
    // another request of the same peer.
    let other = peer.request("GET", SNAPSHOT_PATH, b"");
    assert!(!reply.signed_for(&peer.key, &other.signed));
    // The captured request, sent again by another client: refused, and no
    // index in the answer.
    let replay = exchange(peer.listen, &captured.bytes).await;
    assert_eq!(replay.status, 409, "{replay:?}");
    assert_eq!(replay.error_code(), "peer_message_replayed");
    assert!(decode(&replay.body).is_err());
    // The same request unsigned, or signed with another secret: 401.
    let unsigned = raw_request("GET", SNAPSHOT_PATH, &[], b"");
    let refused = exchange(peer.listen, &unsigned).await;
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (401, "peer_signature_missing")
    );
    let mut intruder = TestPeer::new(&listen, "not-the-shared-secret", "replica-x");
    intruder.receiver = first_instance.clone();
    let (_, refused) = intruder.snapshot().await;
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (401, "peer_signature_invalid")
    );
    // The replica restarts at the same address: it is another instance,
    // and the captured request, still inside its time window, is refused
    // although the new instance remembers no sequence number.
    drop(gw);
    let gw = Gateway::start(&yaml, &args);
    wait_accepting(&listen).await;
    let replay = exchange(peer.listen, &captured.bytes).await;
    assert_eq!(
        (replay.status, replay.error_code().as_str()),
        (421, "peer_wrong_receiver")
    );
    assert_ne!(peer.hello().await, first_instance);
    let rejected = |reason: &str| {
        format!("flexinfer_proxy_routing_peer_rejected_total{{reason=\"{reason}\"}}")
    };
    assert_eq!(metric(&gw, &rejected("wrong_receiver")).await, 1.0);
}

/// A man in the middle in front of `target`: it answers the first
/// connection itself with a forged `409` (with made-up signature headers)
/// and relays every later one. Returns its address and the connections it
/// saw.
async fn forging_relay(target: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            if count.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = support::read_until(&mut client, "\r\n\r\n", Duration::from_secs(5)).await;
                let body = br#"{"error":{"message":"this is the sender","type":"invalid_request_error","code":"peer_is_self"}}"#;
                let forged = format!(
                    "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nx-flexinfer-peer-id: forged\r\n\
                     x-flexinfer-peer-body-sha256: {}\r\nx-flexinfer-peer-signature: {}\r\n\
                     Connection: close\r\n\r\n",
                    body.len(),
                    "00".repeat(32),
                    "11".repeat(32),
                );
                let _ = client.write_all(forged.as_bytes()).await;
                let _ = client.write_all(body).await;
                let _ = client.shutdown().await;
                continue;
            }
            tokio::spawn(async move {
                if let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_409_is_ignored_and_the_replica_keeps_sending_to_that_peer() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let yaml = cache_aware(&refs);
    // Replica B; replica A reaches it only through the forging relay.
    let b_listen = format!("127.0.0.1:{}", free_port());
    let b = Gateway::start(
        &yaml,
        &[
            "--route-debug-header",
            "true",
            "--routing-peer-listen",
            &b_listen,
            "--routing-peers",
            "127.0.0.1:1",
            "--routing-peer-secret",
            SECRET,
        ],
    );
    wait_accepting(&b_listen).await;
    let (relay, seen) = forging_relay(b_listen.parse().unwrap()).await;
    let a_listen = format!("127.0.0.1:{}", free_port());
    let relay = relay.to_string();
    let a = Gateway::start(
        &yaml,
        &[
            "--route-debug-header",
            "true",
            "--routing-peer-listen",
            &a_listen,
            "--routing-peers",
            &relay,
            "--routing-peer-secret",
            SECRET,
            "--routing-peer-flush-interval",
            "10ms",
        ],
    );
    // The forged answer did not end the link: A tried again and linked.
    wait_linked(&a, 1).await;
    assert!(seen.load(Ordering::SeqCst) >= 2);
    let unsigned = "flexinfer_proxy_routing_peer_rejected_total{reason=\"unsigned_answer\"}";
    assert!(metric(&a, unsigned).await >= 1.0);
    assert_eq!(metric(&a, "flexinfer_proxy_routing_peers ").await, 1.0);
    // And A keeps sending: B learns where A placed a tenant.
    let (home, _) = send(&a, &turn(0, 0)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let applied = "flexinfer_proxy_routing_peer_blocks_total{result=\"applied\"}";
    while metric(&b, applied).await < blocks(0, 0).len() as f64 {
        assert!(Instant::now() < deadline, "B never heard from A");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (pod, reason) = send(&b, &turn(0, 1)).await;
    assert_eq!((pod, reason.as_str()), (home, "prefix_hit"));
}

/// Sends a request header a byte every 100 ms, never finishing it, to
/// `addr`: the status answered and when, or `None` after 4 s.
async fn slow_header(addr: SocketAddr) -> Option<(u16, Duration)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let mut answer = Vec::new();
    while started.elapsed() < Duration::from_secs(4) {
        if s.write_all(b"a").await.is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                answer.extend_from_slice(&buf[..n]);
                break;
            }
            Err(_) => {}
        }
    }
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&answer);
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, took))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_on_the_peer_and_metrics_ports_are_cut_with_408_like_on_the_proxy_port() {
    let listen = format!("127.0.0.1:{}", free_port());
    let gw = bare_gateway(&listen, &["--client-header-timeout", "1s"]).await;
    let peers: SocketAddr = listen.parse().unwrap();
    for (port, addr) in [("proxy", gw.addr), ("metrics", gw.admin), ("peers", peers)] {
        let answer = slow_header(addr).await;
        let Some((status, took)) = answer else {
            panic!("{port}: no answer within 4 s");
        };
        assert_eq!(status, 408, "{port}");
        assert!(
            took >= Duration::from_millis(900),
            "{port}: cut after {took:?}"
        );
    }
    let aborts = "flexinfer_proxy_request_header_aborts_total{reason=\"timeout\"}";
    assert_eq!(support::metric_value(&gw.metrics().await, aborts), 3.0);
    // A signed batch whose body stops halfway: cut at the same deadline,
    // with a signed 408, and the connection closed.
    let mut peer = TestPeer::new(&listen, SECRET, "replica-b-1");
    peer.hello().await;
    let body = vec![0u8; 1000];
    let request = peer.request("POST", RECORDS_PATH, &body);
    let mut s = tokio::net::TcpStream::connect(peers).await.unwrap();
    let started = Instant::now();
    s.write_all(&request.bytes[..request.bytes.len() - 500])
        .await
        .unwrap();
    let reply = read_reply(&mut s).await;
    let took = started.elapsed();
    assert_eq!(reply.status, 408, "{reply:?}");
    assert_eq!(reply.error_code(), "request_timeout");
    assert!(reply.signed_for(&peer.key, &request.signed));
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(4)).contains(&took),
        "cut after {took:?}"
    );
    assert_eq!(
        reply.header("connection").map(str::to_ascii_lowercase),
        Some("close".into())
    );
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Posts `MAX_RECORDS_BYTES` of body after `head` on a fresh connection,
/// in full, then reads the status (`None` when the connection was reset).
async fn big_post(addr: SocketAddr, head: String) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(head.as_bytes()).await.ok()?;
    let chunk = vec![b'x'; 64 * 1024];
    let mut left = MAX_RECORDS_BYTES;
    while left > 0 {
        let n = left.min(chunk.len());
        if s.write_all(&chunk[..n]).await.is_err() {
            break;
        }
        left -= n;
    }
    let text = support::read_until(&mut s, "\r\n\r\n", Duration::from_secs(20)).await;
    text.split(' ').nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_unsigned_8_mib_posts_leave_memory_bounded() {
    let listen = format!("127.0.0.1:{}", free_port());
    let gw = bare_gateway(&listen, &[]).await;
    let addr: SocketAddr = listen.parse().unwrap();
    let pid = gw.pid();
    // A few small requests first, so that the listener's own buffers exist.
    for _ in 0..3 {
        let reply = exchange(addr, &raw_request("GET", SNAPSHOT_PATH, &[], b"")).await;
        assert!((400..500).contains(&reply.status), "{reply:?}");
    }
    let before = rss_kib(pid);
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(rss_kib(pid), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let length = MAX_RECORDS_BYTES;
    let forged = format!(
        "x-flexinfer-peer-id: intruder\r\nx-flexinfer-peer-to: gateway\r\n\
         x-flexinfer-peer-time: {}\r\nx-flexinfer-peer-seq: 1\r\n\
         x-flexinfer-peer-body-sha256: {}\r\nx-flexinfer-peer-signature: {}\r\n",
        now_ms(),
        "00".repeat(32),
        "11".repeat(32),
    );
    // Twenty at once on the previous release's path, unsigned, then twenty
    // on this release's path with a forged signature.
    let rounds = [
        ("/peer/v1/records", String::new(), 426),
        (RECORDS_PATH, forged, 401),
    ];
    let mut answers = Vec::new();
    for (path, headers, expected) in rounds {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: peer\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {length}\r\n{headers}\r\n"
        );
        let posts: Vec<_> = (0..20)
            .map(|_| tokio::spawn(big_post(addr, head.clone())))
            .collect();
        let mut statuses = Vec::new();
        for post in posts {
            statuses.extend(post.await.unwrap());
        }
        answers.push((path, expected, statuses));
    }
    done.store(true, Ordering::SeqCst);
    sampler.await.unwrap();
    let after = rss_kib(pid);
    let peak = peak.load(Ordering::SeqCst).max(after);
    eprintln!(
        "gateway RSS: {before} KiB before, {peak} KiB at the peak, {after} KiB after \
         40 unsigned posts of {length} bytes, 20 at a time"
    );
    // Buffering the bodies would take 160 MiB a round; a bounded refusal,
    // a few socket buffers.
    let growth_mib = peak.saturating_sub(before) / 1024;
    assert!(growth_mib < 48, "RSS grew by {growth_mib} MiB");
    // Each post was refused on its header (those whose connection the
    // gateway closed before they finished writing read no answer).
    for (path, expected, statuses) in answers {
        eprintln!("{path}: {} of 20 posts read their answer", statuses.len());
        assert!(!statuses.is_empty(), "{path}: no answer");
        assert!(
            statuses.iter().all(|s| *s == expected),
            "{path}: {statuses:?}"
        );
    }
    let rejected = |reason: &str| {
        format!("flexinfer_proxy_routing_peer_rejected_total{{reason=\"{reason}\"}}")
    };
    let metrics = gw.metrics().await;
    assert_eq!(
        support::metric_value(&metrics, &rejected("old_protocol")),
        20.0
    );
    assert_eq!(
        support::metric_value(&metrics, &rejected("bad_signature")),
        20.0
    );
}

/// A peer of the previous release: its listener knows only `/peer/v1/`
/// and answers anything else 404, unsigned. Returns its address and the
/// requests it saw.
async fn previous_release_peer() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let head =
                    support::read_until(&mut client, "\r\n\r\n", Duration::from_secs(5)).await;
                if head.starts_with("GET /peer/v2/") || head.starts_with("POST /peer/v2/") {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                let _ = client
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n\
                          Content-Length: 9\r\nConnection: close\r\n\r\nnot found",
                    )
                    .await;
                let _ = client.shutdown().await;
            });
        }
    });
    (addr, seen)
}

/// The previous release's signature headers for `method path` with `body`
/// from `id` (HMAC-SHA256 over method, path, id, time and body).
fn previous_release_headers(
    key: &Key,
    (method, path): (&str, &str),
    id: &str,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let time = now_ms().to_string();
    let mac = key.mac(&[
        b"flexinfer-peer-v1\n",
        method.as_bytes(),
        b"\n",
        path.as_bytes(),
        b"\n",
        id.as_bytes(),
        b"\n",
        time.as_bytes(),
        b"\n",
        body,
    ]);
    vec![
        ("x-flexinfer-peer-id", id.to_owned()),
        ("x-flexinfer-peer-time", time),
        ("x-flexinfer-peer-signature", hex::encode(mac)),
        ("content-length", body.len().to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_the_previous_release_costs_cache_misses_never_errors() {
    let sims = pods();
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let (old, seen) = previous_release_peer().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let old = old.to_string();
    let gw = Gateway::start(
        &cache_aware(&refs),
        &[
            "--route-debug-header",
            "true",
            "--routing-peer-listen",
            &listen,
            "--routing-peers",
            &old,
            "--routing-peer-secret",
            SECRET,
            "--routing-peer-flush-interval",
            "10ms",
        ],
    );
    wait_accepting(&listen).await;
    // Every request is served (send asserts 200) while the old peer
    // refuses everything this replica sends it.
    for t in 0..12 {
        send(&gw, &turn(t % 4, t)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(seen.load(Ordering::SeqCst) >= 1);
    let unsigned = "flexinfer_proxy_routing_peer_rejected_total{reason=\"unsigned_answer\"}";
    assert!(metric(&gw, unsigned).await >= 1.0);
    // The old peer's batch, in its own format and signature: refused with
    // an error it counts as a failure (never as "this is myself"), and
    // nothing is learned from it.
    let target = addr_of(&sims[3]);
    let body = claim(target, 9, 0);
    let path = "/peer/v1/records";
    let headers = previous_release_headers(
        &Key::new(SECRET.as_bytes()),
        ("POST", path),
        "replica-old-1",
        &body,
    );
    let reply = exchange(
        listen.parse().unwrap(),
        &raw_request("POST", path, &headers, &body),
    )
    .await;
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (426, "peer_protocol_outdated")
    );
    let (_, reason) = send(&gw, &turn(9, 0)).await;
    assert_eq!(reason, "load");
}
