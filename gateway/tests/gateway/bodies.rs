//! Buffered request bodies: large JSON bodies route and are rewritten
//! intact, bodies over the limit get a quick 413, and a client that waits
//! for `100 Continue` is told to go on.

use crate::support;

/// Bodies of several MiB are prompts of millions of tokens (4 bytes each):
/// the simulated engines get a context window that holds them, as these
/// tests are about moving bodies, not about context limits.
const HUGE_CONTEXT: [&str; 2] = ["--max-model-len", "100000000"];

use std::time::{Duration, Instant};

use support::{endpoints, last_recorded, pod, post_json, sha256_hex, Gateway};

/// A chat body of exactly `len` bytes naming `model`, its content one long
/// word (the simulator counts words as prompt tokens).
fn sized_chat(model: &str, len: usize) -> String {
    let head =
        format!(r#"{{"model":"{model}","max_tokens":1,"messages":[{{"role":"user","content":""#);
    let tail = r#""}]}"#;
    let filler = len - head.len() - tail.len();
    let word: String = "0123456789abcdefghijklmnopqrstuvwxyz"
        .chars()
        .cycle()
        .take(filler)
        .collect();
    let body = format!("{head}{word}{tail}");
    assert_eq!(body.len(), len);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_and_ten_mib_json_bodies_route_and_rewrite() {
    let big = pod("pod-big", &["big-backend"], &HUGE_CONTEXT);
    let small = pod("pod-small", &["small"], &HUGE_CONTEXT);
    let yaml = format!(
        "models:\n- name: big\n  backendModel: big-backend\n  endpoints: {}\n\
         - name: small\n  endpoints: {}\n",
        endpoints(&[&big]),
        endpoints(&[&small])
    );
    let gw = Gateway::start(&yaml, &[]);

    for len in [1024 * 1024, 10 * 1024 * 1024] {
        let body = sized_chat("big", len);
        let expected = body.replacen("\"big\"", "\"big-backend\"", 1);
        let started = Instant::now();
        let resp = post_json(&gw.url("/v1/chat/completions"), body.as_bytes(), &[]).await;
        assert_eq!(resp.status(), 200, "{len} bytes: {:?}", resp.text().await);
        assert_eq!(support::served_by(&resp), "pod-big");
        println!("{len} bytes through the gateway in {:?}", started.elapsed());
        let seen = last_recorded(&big).await;
        assert_eq!(seen["model"], "big-backend");
        assert_eq!(seen["body_len"], expected.len());
        assert_eq!(seen["body_sha256"], sha256_hex(expected.as_bytes()));
    }
    assert!(support::recorded(&small).await.is_empty());
}

/// Bodies up to Pingora's 64 KiB retry buffer take the proxy's own path,
/// larger ones a subrequest: on both sides of the threshold, announced or
/// chunked, the backend gets the rewritten body whole, also when the first
/// endpoint tried refuses the connection and the request is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_around_the_retry_buffer_size_are_rewritten_and_retried() {
    let live = pod("pod-live", &["m-backend"], &HUGE_CONTEXT);
    let dead = support::dead_endpoint(1);
    let yaml = format!(
        "models:\n- name: m\n  backendModel: m-backend\n  endpoints: [\"{dead}\", \"{}\"]\n",
        live.base_url()
    );
    let gw = Gateway::start(&yaml, &[]);
    let url = gw.url("/v1/chat/completions");
    let threshold = 64 * 1024;
    for len in [200, threshold - 1, threshold, threshold + 1, 300 * 1024] {
        let body = sized_chat("m", len);
        let expected = body.replacen("\"m\"", "\"m-backend\"", 1);
        // Round-robin over [dead, live]: two requests, one of them retried.
        for chunked in [false, true] {
            for attempt in 0..2 {
                let request = support::client()
                    .post(&url)
                    .header("content-type", "application/json");
                let request = if chunked {
                    let stream =
                        futures::stream::iter([Ok::<_, std::io::Error>(body.clone().into_bytes())]);
                    request.body(reqwest::Body::wrap_stream(stream))
                } else {
                    request.body(body.clone())
                };
                let resp = request.send().await.unwrap();
                let what = format!("{len} bytes, chunked {chunked}, attempt {attempt}");
                assert_eq!(resp.status(), 200, "{what}: {:?}", resp.text().await);
                let seen = last_recorded(&live).await;
                assert_eq!(seen["model"], "m-backend", "{what}");
                assert_eq!(seen["body_len"], expected.len(), "{what}");
                assert_eq!(
                    seen["body_sha256"],
                    sha256_hex(expected.as_bytes()),
                    "{what}"
                );
            }
        }
    }
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains(
            "flexinfer_proxy_upstream_retries_total{model=\"m\",reason=\"conn_refused\"}"
        ),
        "the dead endpoint was tried: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_body_over_the_limit_is_refused_at_once() {
    let sim = pod("pod-a", &["m"], &HUGE_CONTEXT);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    // The default limit, 16 MiB.
    let gw = Gateway::start(&yaml, &[]);

    // 17 MiB announced; only the first bytes are sent. The answer must not
    // wait for the rest.
    let declared = 17 * 1024 * 1024;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {declared}\r\n\r\n{{\"model\":\"m\",\"messages\":["
    );
    let started = Instant::now();
    let answer =
        support::raw_exchange(gw.addr, head.as_bytes(), "}}", Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        took < Duration::from_secs(1),
        "413 took {took:?} for a declared length"
    );
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("content-type: application/json"), "{answer}");
    assert!(lower.contains("connection: close"), "{answer}");
    let json = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let body: serde_json::Value = serde_json::from_str(json.trim()).expect("JSON error body");
    support::assert_openai_error(&body, "request_too_large");
    assert!(support::recorded(&sim).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_body_over_the_limit_is_413_and_the_limit_itself_passes() {
    let sim = pod("pod-a", &["m"], &HUGE_CONTEXT);
    let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
    let limit = 64 * 1024;
    let gw = Gateway::start(&yaml, &["--max-body-bytes", &limit.to_string()]);

    // Exactly at the limit: accepted, chunked or not.
    let body = sized_chat("m", limit);
    let resp = post_json(&gw.url("/v1/chat/completions"), body.as_bytes(), &[]).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(last_recorded(&sim).await["body_len"], limit);
    let stream = futures::stream::iter(
        body.as_bytes()
            .chunks(10_000)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let resp = support::client()
        .post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = last_recorded(&sim).await;
    assert_eq!(seen["body_len"], limit);
    assert_eq!(seen["headers"]["content-length"], limit.to_string());
    assert!(seen["headers"].get("transfer-encoding").is_none(), "{seen}");

    // One byte more, without a declared length: 413 once the limit is passed.
    let over = sized_chat("m", limit + 1);
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{over}\r\n",
        over.len()
    );
    let answer =
        support::raw_exchange(gw.addr, request.as_bytes(), "}}", Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("\"code\":\"request_too_large\""),
        "{answer}"
    );
    assert_eq!(support::recorded(&sim).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let sim = pod("pod-a", &["m-backend"], &HUGE_CONTEXT);
    let yaml = format!(
        "models:\n- name: m\n  backendModel: m-backend\n  endpoints: {}\n",
        endpoints(&[&sim])
    );
    let gw = Gateway::start(&yaml, &[]);
    let body = sized_chat("m", 2 * 1024 * 1024);

    // curl sends `Expect: 100-continue` with large bodies and waits (1 s by
    // default) for the interim answer before uploading.
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, head.as_bytes())
        .await
        .unwrap();
    let interim = support::read_until(&mut s, "\r\n\r\n", Duration::from_millis(900)).await;
    assert!(
        interim.starts_with("HTTP/1.1 100"),
        "no 100 Continue before the body: {interim:?}"
    );
    tokio::io::AsyncWriteExt::write_all(&mut s, body.as_bytes())
        .await
        .unwrap();
    let rest = support::read_until(&mut s, "\u{0}", Duration::from_secs(20)).await;
    let answer = format!("{interim}{rest}");
    assert_eq!(
        answer.matches("100 Continue").count(),
        1,
        "one interim answer only: {answer}"
    );
    assert!(
        rest.starts_with("HTTP/1.1 200"),
        "{}",
        &rest[..rest.len().min(300)]
    );
    let seen = last_recorded(&sim).await;
    assert_eq!(seen["model"], "m-backend");
    assert!(
        seen["headers"].get("expect").is_none(),
        "the gateway already has the body; the backend must not be asked: {seen}"
    );
}

/// A chat body with `max_tokens` and `words` words of content.
fn chat_with(max_tokens: u64, words: usize) -> String {
    let content = vec!["word"; words].join(" ");
    format!(
        r#"{{"model":"llama", "max_tokens": {max_tokens},"messages":[{{"role":"user","content":"{content}"}}]}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_limit_beyond_the_window_is_clamped_and_nothing_else_changes() {
    let sim = pod("p", &["llama"], &["--max-model-len", "8192"]);
    let yaml = format!(
        "models:\n- name: llama\n  maxModelLen: 8192\n  endpoints: {}\n",
        endpoints(&[&sim])
    );
    let gw = Gateway::start(&yaml, &[]);
    let url = gw.url("/v1/chat/completions");

    let resp = post_json(&url, chat_with(100_000, 3).as_bytes(), &[]).await;
    assert_eq!(resp.status(), 200, "the engine would have refused 100000");
    assert_eq!(
        resp.headers()["x-flexinfer-maxtokens-clamped"],
        "100000->7680"
    );
    let sent = last_recorded(&sim).await;
    assert_eq!(
        sent["body_sha256"],
        sha256_hex(chat_with(7680, 3).as_bytes())
    );

    // Within the window: byte-identical, no header.
    let fits = chat_with(7680, 3);
    let resp = post_json(&url, fits.as_bytes(), &[]).await;
    assert_eq!(resp.status(), 200);
    assert!(resp
        .headers()
        .get("x-flexinfer-maxtokens-clamped")
        .is_none());
    assert_eq!(
        last_recorded(&sim).await["body_sha256"],
        sha256_hex(fits.as_bytes())
    );
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains(
            "flexinfer_proxy_max_tokens_clamped_total{model=\"llama\",reason=\"context_window_headroom\"} 1"
        ),
        "{metrics}"
    );

    // Switched off, the engine answers for itself.
    let off = Gateway::start(&yaml, &["--max-tokens-clamp-enabled", "false"]);
    let resp = post_json(
        &off.url("/v1/chat/completions"),
        chat_with(100_000, 3).as_bytes(),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_that_cannot_fit_a_context_bounded_model_is_refused_before_the_engine() {
    let sim = pod("p", &["llama"], &["--max-model-len", "4096"]);
    let yaml = format!(
        "models:\n- name: llama\n  maxModelLen: 4096\n  admission: context-bounded\n  endpoints: {}\n",
        endpoints(&[&sim])
    );
    let gw = Gateway::start(&yaml, &["--admission-enabled", "true"]);
    let url = gw.url("/v1/chat/completions");
    assert_eq!(
        post_json(&url, chat_with(100, 50).as_bytes(), &[])
            .await
            .status(),
        200
    );
    // About 2,400 words × 5 bytes ≈ 3,430 estimated tokens + 1,000 > 3,891.
    let resp = post_json(&url, chat_with(1000, 2400).as_bytes(), &[]).await;
    assert_eq!(resp.status(), 413);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_window_exceeded", "{body}");
    let admission = &body["admission"];
    assert_eq!(admission["model"], "llama");
    assert_eq!(admission["context_window"], 4096);
    assert_eq!(admission["tokens_budget"], 3891);
    let over = admission["tokens_over"].as_u64().unwrap();
    assert_eq!(
        admission["tokens_submitted"].as_u64().unwrap() - over,
        3891,
        "{admission}"
    );
    assert_eq!(
        admission["suggest_truncate_to"].as_u64().unwrap(),
        3891 - 1000
    );
    let seen = support::recorded(&sim).await;
    assert_eq!(
        seen.len(),
        1,
        "the refused request never reached the engine"
    );
}

/// A header's value, parsed.
fn header_u64(resp: &reqwest::Response, name: &str) -> Option<u64> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streamed_completions_carry_their_usage_in_headers() {
    let sim = pod("p", &["llama"], &[]);
    let yaml = format!(
        "models:\n- name: llama\n  endpoints: {}\n",
        endpoints(&[&sim])
    );
    let gw = Gateway::start(&yaml, &["--usage-headers", "true"]);
    let url = gw.url("/v1/chat/completions");
    // The same prompt twice: the engine's prefix cache reports cached tokens.
    for round in 0..2 {
        let resp = post_json(&url, chat_with(8, 40).as_bytes(), &[]).await;
        assert_eq!(resp.status(), 200);
        assert!(header_u64(&resp, "x-flexinfer-upstream-ms").is_some());
        let prompt = header_u64(&resp, "x-flexinfer-prompt-tokens");
        let cached = header_u64(&resp, "x-flexinfer-cached-tokens");
        let reason = resp.headers()["x-flexinfer-finish-reason"]
            .to_str()
            .unwrap()
            .to_owned();
        let length = header_u64(&resp, "content-length").unwrap();
        let body = resp.bytes().await.unwrap();
        assert_eq!(body.len() as u64, length);
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let usage = &answer["usage"];
        assert_eq!(prompt, usage["prompt_tokens"].as_u64(), "{answer}");
        assert_eq!(reason, answer["choices"][0]["finish_reason"], "{answer}");
        assert_eq!(
            cached,
            usage["prompt_tokens_details"]["cached_tokens"].as_u64(),
            "only when reported: {answer}"
        );
        if round == 1 {
            assert!(cached.is_some_and(|n| n > 0), "{answer}");
        }
    }

    // A stream's head leaves before its usage exists: timing only.
    let stream = chat_with(8, 3).replace("\"max_tokens\"", "\"stream\":true, \"max_tokens\"");
    let resp = post_json(&url, stream.as_bytes(), &[]).await;
    assert_eq!(resp.status(), 200);
    assert!(header_u64(&resp, "x-flexinfer-upstream-ms").is_some());
    assert!(resp.headers().get("x-flexinfer-prompt-tokens").is_none());
    assert!(resp.text().await.unwrap().contains("[DONE]"));

    // Off (the default): the answer is not held, timing only.
    let off = Gateway::start(&yaml, &[]);
    let resp = post_json(
        &off.url("/v1/chat/completions"),
        chat_with(8, 3).as_bytes(),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(header_u64(&resp, "x-flexinfer-upstream-ms").is_some());
    assert!(resp.headers().get("x-flexinfer-prompt-tokens").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_held_for_its_usage_that_breaks_off_becomes_an_error() {
    use std::io::{Read, Write};
    // An engine that promises 100 bytes, sends 20 and closes.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&request).contains("\"messages\"") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => request.extend_from_slice(&buf[..k]),
                }
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"choices\":[{\"index\"",
            );
        }
    });
    let yaml = format!("models:\n- name: llama\n  endpoints: [\"http://{addr}\"]\n");
    let gw = Gateway::start(&yaml, &["--usage-headers", "true"]);
    let resp = post_json(
        &gw.url("/v1/chat/completions"),
        chat_with(8, 3).as_bytes(),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 502, "not a 200 whose body is cut");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(body["error"]["message"].is_string(), "{body}");
}
