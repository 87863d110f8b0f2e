//! Server-sent events through the gateway: never buffered, paced as the
//! backend paces them, not cut by a hot reload, and visibly broken when the
//! backend breaks.

use crate::support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use support::{endpoints, median, pod, read_events, served_by, Event, Gateway};

fn stream_body(model: &str, max_tokens: u32) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "model": model,
        "messages": [{"role": "user", "content": "stream please"}],
        "max_tokens": max_tokens,
        "stream": true,
    }))
    .unwrap()
}

/// Streams one completion from `base` and returns its events.
async fn stream(client: &reqwest::Client, base: &str, body: &[u8]) -> Vec<Event> {
    let start = Instant::now();
    let resp = client
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .expect("stream request");
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    read_events(resp, start).await
}

fn contents(events: &[Event]) -> Vec<(Duration, String)> {
    events
        .iter()
        .filter_map(|e| e.content().map(|c| (e.at, c)))
        .collect()
}

/// The first content chunk leaves the gateway as soon as the backend sends
/// it. The backend needs 200 ms for the first token and 100 ms for each of
/// the five others, so a gateway that held the stream back (buffered it, or
/// waited for a second chunk) would deliver the first one at least 100 ms
/// late; the margin below is half of that, wide enough for a loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_chunk_is_as_early_as_direct() {
    let sim = pod(
        "pod-a",
        &["m"],
        &["--ttft", "200ms", "--tokens-per-second", "10"],
    );
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(&yaml, &[]);
    let gateway_base = format!("http://{}", gw.addr);
    let body = stream_body("m", 6);
    // One client per side, each warmed up so both measure a reused
    // connection (the gateway's upstream connection is pooled too).
    let direct_client = support::client();
    let gateway_client = support::client();
    stream(&direct_client, &sim.base_url(), &body).await;
    stream(&gateway_client, &gateway_base, &body).await;

    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let events = stream(&direct_client, &sim.base_url(), &body).await;
        direct.push(contents(&events)[0].0);
        let events = stream(&gateway_client, &gateway_base, &body).await;
        let tokens = contents(&events);
        assert_eq!(tokens.len(), 6, "the stream lost chunks");
        through.push(tokens[0].0);
    }
    let (d, g) = (median(&direct), median(&through));
    println!(
        "first content chunk, median of 5: direct {:.2} ms, through the gateway {:.2} ms \
         (direct {direct:?}, gateway {through:?})",
        d.as_secs_f64() * 1e3,
        g.as_secs_f64() * 1e3
    );
    assert!(d >= Duration::from_millis(200), "TTFT not simulated: {d:?}");
    assert!(
        g < d + Duration::from_millis(50),
        "the gateway held the first chunk back: direct {d:?}, gateway {g:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_keep_the_backend_spacing() {
    let sim = pod("pod-a", &["m"], &["--tokens-per-second", "20"]);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(&yaml, &[]);

    let events = stream(
        &support::client(),
        &format!("http://{}", gw.addr),
        &stream_body("m", 12),
    )
    .await;
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    let tokens = contents(&events);
    assert_eq!(tokens.len(), 12);
    let gaps: Vec<Duration> = tokens.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let span = tokens[11].0 - tokens[0].0;
    let gap = median(&gaps);
    println!("20 tokens/s through the gateway: median gap {gap:?}, span {span:?}, gaps {gaps:?}");
    // 50 ms apart, not delivered in one burst at the end (the range leaves
    // room for a loaded machine; a buffering proxy gives a gap near zero).
    assert!(
        (Duration::from_millis(30)..=Duration::from_millis(90)).contains(&gap),
        "median gap {gap:?}: {gaps:?}"
    );
    assert!(span >= Duration::from_millis(450), "11 gaps in {span:?}");
    let bunched = gaps
        .iter()
        .filter(|g| **g < Duration::from_millis(10))
        .count();
    assert!(bunched <= 2, "{bunched} tokens arrived together: {gaps:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_keeps_an_in_flight_stream() {
    let a = pod("pod-a", &["m"], &["--tokens-per-second", "20"]);
    let b = pod("pod-b", &["m", "n"], &[]);
    let gw = Gateway::start(
        &format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&a])),
        &[],
    );

    // 20 tokens at 20/s: about a second on pod A.
    let start = Instant::now();
    let resp = support::client()
        .post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(stream_body("m", 20))
        .send()
        .await
        .unwrap();
    assert_eq!(served_by(&resp), "pod-a");
    let reader = tokio::spawn(read_events(resp, start));

    // While it streams, the file moves `m` to pod B and adds `n`.
    gw.reload(&format!(
        "models:\n- name: m\n  endpoints: {e}\n- name: n\n  endpoints: {e}\n",
        e = endpoints(&[&b])
    ))
    .await;
    let reloaded = start.elapsed();

    let events = reader.await.expect("reader task");
    let tokens = contents(&events);
    assert_eq!(tokens.len(), 20, "stream cut short: {events:?}");
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    assert!(
        tokens.last().unwrap().0 > reloaded,
        "the reload ({reloaded:?}) did not happen mid-stream"
    );

    // New requests follow the new file.
    for model in ["m", "n"] {
        let resp =
            support::post_json(&gw.url("/v1/chat/completions"), &stream_body(model, 1), &[]).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(served_by(&resp), "pod-b");
        let _ = resp.bytes().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_crash_mid_stream_reaches_the_client_as_an_error() {
    // Paced, so the header and the first tokens are on the wire before the
    // backend drops the connection.
    let sim = pod(
        "pod-a",
        &["m"],
        &["--fail-after-tokens", "3", "--tokens-per-second", "50"],
    );
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let gw = Gateway::start(&yaml, &[]);

    let resp =
        support::post_json(&gw.url("/v1/chat/completions"), &stream_body("m", 10), &[]).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut failed = false;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .expect("stream neither ended nor failed")
    {
        match chunk {
            Ok(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(
        failed,
        "the stream ended cleanly although the backend crashed: {text}"
    );
    assert!(!text.contains("[DONE]"));
    assert_eq!(text.matches("\"content\":\"").count() - 1, 3, "{text}");

    // The gateway itself carries on.
    let resp = support::post_json(&gw.url("/v1/chat/completions"), &stream_body("m", 2), &[]).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.contains("[DONE]"));
}
