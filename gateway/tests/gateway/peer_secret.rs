//! The replicas' shared secret changing under two running gateways, as a
//! rotated Kubernetes Secret reaches each pod at its own moment: with the
//! grace period, sharing never stops; without it, the replicas refuse each
//! other (counted) until both hold the new secret, then sharing resumes.
//! Requests are served throughout: only cache hits are lost.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::peers::{cache_aware, metric, pods, send, start_peer, turn, wait_linked};
use crate::support::{free_port, Gateway, SimProcess};

const BEFORE: &str = "the-shared-secret-before-rotation";
const AFTER: &str = "the-shared-secret-after-rotation";
const BAD_SIGNATURE: &str = "flexinfer_proxy_routing_peer_rejected_total{reason=\"bad_signature\"}";
const ROTATED: &str = "flexinfer_proxy_routing_peer_secret_changes_total{result=\"rotated\"}";

/// Two replicas, each reading the shared secret from its own file (each
/// pod's mounted copy), with `grace`.
fn replicas(sims: &[SimProcess], files: &[&Path; 2], grace: &str) -> Vec<Gateway> {
    let refs: Vec<&SimProcess> = sims.iter().collect();
    let yaml = cache_aware(&refs);
    let ports = [free_port(), free_port()];
    (0..2)
        .map(|i| {
            let file = files[i].to_str().unwrap();
            start_peer(
                &yaml,
                &ports,
                i,
                &[
                    "--routing-peer-secret-file",
                    file,
                    "--routing-peer-secret-grace",
                    grace,
                ],
            )
        })
        .collect()
}

/// Waits until `gw` took up a changed secret.
async fn wait_rotated(gw: &Gateway, times: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(gw, ROTATED).await < times {
        assert!(
            Instant::now() < deadline,
            "the secret change was not taken up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const APPLIED: &str = "flexinfer_proxy_routing_peer_blocks_total{result=\"applied\"}";

/// Whether what `from` learns reaches `to`: `from` serves turns of
/// `tenant` (a new one every 200 ms: a batch sent while a link backs off
/// is dropped, as any lost record is) until `to` merges their blocks,
/// within `limit`. (Where each replica places a new prompt is no sign:
/// both place it alike.)
async fn shared(from: &Gateway, to: &Gateway, tenant: usize, limit: Duration) -> bool {
    let before = metric(to, APPLIED).await;
    let deadline = Instant::now() + limit;
    let mut round = 0;
    loop {
        send(from, &turn(tenant, round)).await;
        round += 1;
        let sent = Instant::now();
        while sent.elapsed() < Duration::from_millis(200) {
            if metric(to, APPLIED).await > before {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_one_replica_at_a_time_never_stops_sharing_within_the_grace_period() {
    let sims = pods();
    let dir = tempfile::tempdir().unwrap();
    let files = [dir.path().join("a"), dir.path().join("b")];
    for f in &files {
        std::fs::write(f, BEFORE).unwrap();
    }
    let gws = replicas(&sims, &[&files[0], &files[1]], "60s");
    let (a, b) = (&gws[0], &gws[1]);
    wait_linked(a, 1).await;
    wait_linked(b, 1).await;
    assert!(shared(a, b, 0, Duration::from_secs(5)).await);

    // Replica a's copy changes first; b keeps the old secret a while.
    std::fs::write(&files[0], AFTER).unwrap();
    wait_rotated(a, 1.0).await;
    // Both directions keep working: a signs with both secrets, and
    // accepts b's old-secret messages.
    assert!(
        shared(a, b, 1, Duration::from_secs(10)).await,
        "a -> b during the change"
    );
    assert!(
        shared(b, a, 2, Duration::from_secs(10)).await,
        "b -> a during the change"
    );

    std::fs::write(&files[1], AFTER).unwrap();
    wait_rotated(b, 1.0).await;
    assert!(
        shared(a, b, 3, Duration::from_secs(10)).await,
        "a -> b after the change"
    );
    assert!(
        shared(b, a, 4, Duration::from_secs(10)).await,
        "b -> a after the change"
    );
    // Not one message was refused.
    assert_eq!(metric(a, BAD_SIGNATURE).await, 0.0);
    assert_eq!(metric(b, BAD_SIGNATURE).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_grace_period_replicas_refuse_each_other_until_both_hold_the_new_secret() {
    let sims = pods();
    let dir = tempfile::tempdir().unwrap();
    let files = [dir.path().join("a"), dir.path().join("b")];
    for f in &files {
        std::fs::write(f, BEFORE).unwrap();
    }
    let gws = replicas(&sims, &[&files[0], &files[1]], "0s");
    let (a, b) = (&gws[0], &gws[1]);
    wait_linked(a, 1).await;
    wait_linked(b, 1).await;
    assert!(shared(a, b, 0, Duration::from_secs(5)).await);

    std::fs::write(&files[0], AFTER).unwrap();
    wait_rotated(a, 1.0).await;
    // The window: a's batches are refused by b, and requests are still
    // served (`send` asserts 200), placed without a's knowledge.
    assert!(!shared(a, b, 1, Duration::from_secs(2)).await);
    let refused = metric(b, BAD_SIGNATURE).await;
    assert!(refused >= 1.0, "b counted {refused} refused messages");

    std::fs::write(&files[1], AFTER).unwrap();
    wait_rotated(b, 1.0).await;
    // Sharing resumes once both hold the new secret: within a file
    // re-read (1 s) and a link's longest backoff (5 s); the limit leaves
    // room for a loaded machine.
    let resumed = Instant::now();
    assert!(
        shared(a, b, 2, Duration::from_secs(15)).await,
        "a -> b after the change"
    );
    assert!(
        shared(b, a, 3, Duration::from_secs(15)).await,
        "b -> a after the change"
    );
    eprintln!(
        "sharing resumed {:?} after the second replica's change",
        resumed.elapsed()
    );
    // And the refusals stopped.
    let (a_refused, b_refused) = (
        metric(a, BAD_SIGNATURE).await,
        metric(b, BAD_SIGNATURE).await,
    );
    assert!(shared(a, b, 4, Duration::from_secs(10)).await);
    assert_eq!(metric(a, BAD_SIGNATURE).await, a_refused);
    assert_eq!(metric(b, BAD_SIGNATURE).await, b_refused);
}
