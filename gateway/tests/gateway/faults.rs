//! The fault lane: the gateway as a failing cluster and hostile clients
//! meet it. Dead, black-holed and killed endpoints; backends that close a
//! connection before answering; slow, oversized and malformed requests;
//! private backend routes; a gateway killed with its model processes.
//! `scripts/test.sh` runs this file as a lane of its own.

use crate::support;

mod fault_lane {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::support::{
        self, answered_then_closed, dead_endpoint, endpoints, free_port, local_sim_model,
        metric_value, pod, post_json, process_gone, raw_exchange, read_until, recorded, Gateway,
    };

    fn chat_body(model: &str) -> Vec<u8> {
        serde_json::to_vec(&support::chat(model)).unwrap()
    }

    fn retries(metrics: &str, model: &str, reason: &str) -> f64 {
        metric_value(
            metrics,
            &format!(
                "flexinfer_proxy_upstream_retries_total{{model=\"{model}\",reason=\"{reason}\"}}"
            ),
        )
    }

    fn status_of(answer: &str) -> u16 {
        answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {answer:?}"))
    }

    async fn chat_ok(gw: &Gateway, model: &str) {
        let resp = post_json(&gw.url("/v1/chat/completions"), &chat_body(model), &[]).await;
        assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    }

    // 1. A dead endpoint is ejected and not tried again.

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_endpoint_is_ejected_after_three_failures_and_not_tried_again() {
        let live = pod("live", &["m"], &[]);
        let yaml = format!(
            "models:\n- name: m\n  endpoints: [\"{}\", \"{}\"]\n",
            dead_endpoint(1),
            live.base_url()
        );
        let gw = Gateway::start(&yaml, &["--outlier-base-ejection", "60s"]);
        for _ in 0..20 {
            chat_ok(&gw, "m").await;
        }
        let metrics = gw.metrics().await;
        assert_eq!(
            retries(&metrics, "m", "conn_refused"),
            3.0,
            "only the failures that eject it touch the dead endpoint:\n{metrics}"
        );
        let series = "{endpoint=\"127.0.0.1:1\",model=\"m\"}";
        assert_eq!(
            metric_value(
                &metrics,
                &format!("flexinfer_proxy_endpoint_ejections_total{series}")
            ),
            1.0
        );
        assert_eq!(
            metric_value(
                &metrics,
                &format!("flexinfer_proxy_endpoint_ejected{series}")
            ),
            1.0
        );
    }

    /// A listener that completes no handshake: its accept queue (length 1)
    /// is filled and never drained, so further connects hang until the
    /// connector gives up, as with a pod whose node vanished.
    struct BlackHole {
        addr: SocketAddr,
        _listener: socket2::Socket,
        _queued: Vec<TcpStream>,
    }

    fn black_hole() -> BlackHole {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        socket.listen(0).unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        let mut queued = Vec::new();
        // Fill the queue until a connect no longer completes at once.
        for _ in 0..8 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(s) => queued.push(s),
                Err(_) => break,
            }
        }
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err(),
            "the black hole still accepts connections"
        );
        BlackHole {
            addr,
            _listener: socket,
            _queued: queued,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_black_holed_endpoint_costs_only_the_connect_timeouts_that_eject_it() {
        let hole = black_hole();
        let live = pod("live", &["m"], &[]);
        let yaml = format!(
            "models:\n- name: m\n  endpoints: [\"http://{}\", \"{}\"]\n",
            hole.addr,
            live.base_url()
        );
        let gw = Gateway::start(
            &yaml,
            &[
                "--upstream-connect-timeout",
                "300ms",
                "--outlier-base-ejection",
                "60s",
            ],
        );
        for _ in 0..12 {
            chat_ok(&gw, "m").await;
        }
        let metrics = gw.metrics().await;
        assert_eq!(
            retries(&metrics, "m", "timeout"),
            3.0,
            "no request waited for the black hole after its ejection:\n{metrics}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pod_killed_under_load_is_ejected_within_a_few_failures() {
        let a = pod("a", &["m"], &[]);
        let b = pod("b", &["m"], &[]);
        let yaml = format!(
            "models:\n- name: m\n  endpoints: {}\n",
            endpoints(&[&a, &b])
        );
        let gw = Arc::new(Gateway::start(&yaml, &["--outlier-base-ejection", "60s"]));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let failed = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let (gw, stop, failed) = (gw.clone(), stop.clone(), failed.clone());
                tokio::spawn(async move {
                    let mut sent = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let resp =
                            post_json(&gw.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
                        if resp.status() != 200 {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        sent += 1;
                    }
                    sent
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let killed = Instant::now();
        std::process::Command::new("kill")
            .args(["-9", &b.pid().to_string()])
            .status()
            .unwrap();
        let ejected_after = loop {
            let metrics = gw.metrics().await;
            if metric_value(&metrics, "flexinfer_proxy_endpoint_ejected{") >= 1.0 {
                break killed.elapsed();
            }
            assert!(killed.elapsed() < Duration::from_secs(10), "never ejected");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        let mut sent = 0;
        for w in workers {
            sent += w.await.unwrap();
        }
        let metrics = gw.metrics().await;
        let touched =
            retries(&metrics, "m", "conn_refused") + retries(&metrics, "m", "conn_closed");
        eprintln!(
            "pod killed under load: {sent} requests, ejected {:.1} ms after the kill, \
             {touched} attempts on the dead pod, {} requests failed",
            ejected_after.as_secs_f64() * 1e3,
            failed.load(Ordering::Relaxed)
        );
        // Three failures eject it; requests already on their way to it
        // (at most one per worker) may fail too.
        assert!(touched <= 3.0 + 8.0, "{touched} attempts on the dead pod");
        assert!(failed.load(Ordering::Relaxed) <= 8);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn active_health_checks_take_a_dead_endpoint_out_before_any_request() {
        let a = pod("a", &["m"], &[]);
        let b = pod("b", &["m"], &[]);
        let yaml = format!(
            "models:\n- name: m\n  health: /health\n  endpoints: {}\n",
            endpoints(&[&a, &b])
        );
        let gw = Gateway::start(&yaml, &["--health-check-interval", "100ms"]);
        std::process::Command::new("kill")
            .args(["-9", &b.pid().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let metrics = gw.metrics().await;
            if metric_value(&metrics, "flexinfer_proxy_endpoint_ejected{") >= 1.0 {
                break;
            }
            assert!(Instant::now() < deadline, "the health check never failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for _ in 0..10 {
            chat_ok(&gw, "m").await;
        }
        let metrics = gw.metrics().await;
        assert_eq!(
            metric_value(&metrics, "flexinfer_proxy_upstream_retries_total{"),
            0.0,
            "a request went to the endpoint its health check took out:\n{metrics}"
        );
    }

    // 2. Retries that match what a backend restart looks like.

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_single_refusing_endpoint_is_tried_as_often_as_attempts_allow() {
        let yaml = format!(
            "models:\n- name: m\n  endpoints: [\"{}\"]\n",
            dead_endpoint(1)
        );
        let gw = Gateway::start(&yaml, &["--upstream-max-attempts", "3"]);
        let resp = post_json(&gw.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
        assert_eq!(resp.status(), 502);
        let metrics = gw.metrics().await;
        assert_eq!(retries(&metrics, "m", "conn_refused"), 2.0, "{metrics}");
    }

    /// A backend that reads the first request and closes the connection
    /// without a byte of answer (a pod restarting under it, or a keep-alive
    /// connection it closed), then answers the next one. Returns its
    /// address and the number of connections it saw.
    fn closes_first_connection() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !String::from_utf8_lossy(&request).contains("\"messages\"") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => request.extend_from_slice(&buf[..k]),
                    }
                }
                if n == 0 {
                    drop(stream);
                    continue;
                }
                let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"again"},"finish_reason":"stop"}]}"#;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (addr, seen)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_post_whose_connection_closes_before_any_answer_is_sent_again() {
        let (addr, seen) = closes_first_connection();
        let yaml = format!("models:\n- name: m\n  endpoints: [\"http://{addr}\"]\n");
        let gw = Gateway::start(&yaml, &[]);
        let resp = post_json(&gw.url("/v1/chat/completions"), &chat_body("m"), &[]).await;
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "again");
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        let metrics = gw.metrics().await;
        assert_eq!(retries(&metrics, "m", "conn_closed"), 1.0, "{metrics}");
    }

    // 3. Slow and oversized headers, connection caps, quiet logs.

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_header_sent_a_byte_at_a_time_is_cut_at_the_deadline() {
        let gw = Gateway::start_logged(
            "models: []\n",
            &["--client-header-timeout", "1s"],
            &[("RUST_LOG", "info")],
        );
        let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let started = Instant::now();
        let mut answer = String::new();
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if s.write_all(&[*byte]).await.is_err() {
                break;
            }
            let mut buf = [0u8; 1024];
            match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => answer.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(_) => {}
            }
            if !answer.is_empty() {
                answer.push_str(&read_until(&mut s, "\u{0}", Duration::from_secs(2)).await);
                break;
            }
        }
        let took = started.elapsed();
        assert_eq!(status_of(&answer), 408, "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"));
        assert!(took < Duration::from_secs(4), "cut after {took:?}");
        let metrics = gw.metrics().await;
        assert_eq!(
            metric_value(
                &metrics,
                "flexinfer_proxy_request_header_aborts_total{reason=\"timeout\"}"
            ),
            1.0
        );
        // Clients that give up in the middle of a header cost no log line.
        for _ in 0..20 {
            let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost:")
                .await
                .unwrap();
            drop(s);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let metrics = gw.metrics().await;
        assert_eq!(
            metric_value(
                &metrics,
                "flexinfer_proxy_request_header_aborts_total{reason=\"closed\"}"
            ),
            20.0
        );
        let log = gw.log();
        assert!(
            !log.contains("ERROR"),
            "aborted headers logged errors:\n{log}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_oversized_header_gets_431_and_the_connection_closes() {
        let gw = Gateway::start("models: []\n", &["--max-header-bytes", "4096"]);
        let big = "a".repeat(10_000);
        let request = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
        let (status, body) = answered_then_closed(gw.addr, request.as_bytes()).await;
        assert_eq!(status, 431, "{body}");
        assert!(body.contains("request_header_too_large"), "{body}");
        // A header within the limit is served.
        let fine = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Fine: {}\r\nConnection: close\r\n\r\n",
            "a".repeat(3000)
        );
        let answer = raw_exchange(gw.addr, fine.as_bytes(), "ok", Duration::from_secs(5)).await;
        assert_eq!(status_of(&answer), 200, "{answer}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_over_the_per_client_cap_are_refused() {
        let gw = Gateway::start("models: []\n", &["--max-connections-per-client", "2"]);
        let held: Vec<_> = (0..2)
            .map(|_| TcpStream::connect(gw.addr).unwrap())
            .collect();
        // The server sees the two connections before the third arrives.
        std::thread::sleep(Duration::from_millis(200));
        let (status, body) =
            answered_then_closed(gw.addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("too_many_connections"), "{body}");
        drop(held);
        std::thread::sleep(Duration::from_millis(200));
        let answer = raw_exchange(
            gw.addr,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "ok",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(
            status_of(&answer),
            200,
            "a freed slot is reusable: {answer}"
        );
        let metrics = gw.metrics().await;
        assert_eq!(
            metric_value(
                &metrics,
                "flexinfer_proxy_connections_refused_total{reason=\"client_limit\"}"
            ),
            1.0
        );
    }

    // 4. Framing errors.

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bad_chunk_size_is_400_and_closes_the_connection_on_every_path() {
        let sim = pod("p", &["m"], &[]);
        let yaml = format!(
            "models:\n- name: m\n  endpoints: {}\n  servePaths: [/]\n",
            endpoints(&[&sim])
        );
        let gw = Gateway::start(&yaml, &[]);
        // Buffered: a JSON body the gateway reads to route on.
        let buffered = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n";
        let (status, body) = answered_then_closed(gw.addr, buffered).await;
        assert_eq!(status, 400, "{body}");
        // The model from a header, a body no engine reads as JSON: read
        // all the same (every POST body is).
        let streamed = b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nX-Model-ID: m\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nRIFF\r\nzz\r\nxx\r\n0\r\n\r\n";
        let (status, body) = answered_then_closed(gw.addr, streamed).await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("malformed request body"), "{body}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_transfer_coding_other_than_chunked_is_refused() {
        let sim = pod("p", &["m"], &[]);
        let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
        let gw = Gateway::start(&yaml, &[]);
        let request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nxxxxx\r\n0\r\n\r\n";
        let (status, body) = answered_then_closed(gw.addr, request).await;
        assert_eq!(status, 501, "{body}");
        assert!(recorded(&sim).await.is_empty(), "the backend saw it");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_requests_are_answered_in_order() {
        let gw = Gateway::start("models: []\n", &[]);
        let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let one = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let last = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        s.write_all(format!("{one}{one}{last}").as_bytes())
            .await
            .unwrap();
        let answer = read_until(&mut s, "\u{0}", Duration::from_secs(5)).await;
        assert_eq!(
            answer.matches("HTTP/1.1 200").count(),
            3,
            "every pipelined request is answered: {answer}"
        );
        // In order: the last answer is the one that says the connection ends.
        let closing = answer.to_ascii_lowercase().rfind("connection: close");
        let third = answer.rfind("HTTP/1.1 200");
        assert!(closing > third, "{answer}");
    }

    // 5. The body limit applies to streamed bodies.

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streamed_body_over_the_limit_is_refused() {
        let sim = pod("p", &["m"], &[]);
        let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
        let gw = Gateway::start(&yaml, &["--max-body-bytes", "1024"]);
        let body = vec![b'a'; 4096];
        // Announced: refused before a byte is read.
        let mut announced = format!(
            "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nX-Model-ID: m\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        announced.extend_from_slice(&body);
        let (status, text) = answered_then_closed(gw.addr, &announced).await;
        assert_eq!(status, 413, "{text}");
        // Chunked: refused once the limit is passed.
        let mut chunked = b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nX-Model-ID: m\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..4 {
            chunked.extend_from_slice(b"400\r\n");
            chunked.extend_from_slice(&[b'b'; 1024]);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let (status, text) = answered_then_closed(gw.addr, &chunked).await;
        assert_eq!(status, 413, "{text}");
        assert!(
            recorded(&sim).await.is_empty(),
            "the backend got a whole body over the limit"
        );
    }

    // 6. Backends' private routes.

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn private_backend_routes_are_refused() {
        let sim = pod("p", &["m", "tuned"], &[]);
        let yaml = format!(
            "models:\n- name: m\n  endpoints: {e}\n- name: tuned\n  endpoints: {e}\n  servePaths: [/v1/chat/completions, /v1/load_lora_adapter]\n",
            e = endpoints(&[&sim])
        );
        let gw = Gateway::start(&yaml, &["--admin-auth-token", "admin-key"]);
        let exchange = |request: String| {
            let addr = gw.addr;
            async move {
                let answer =
                    raw_exchange(addr, request.as_bytes(), "\u{0}", Duration::from_secs(5)).await;
                status_of(&answer)
            }
        };
        let get =
            |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let post = |path: &str, extra: &str| {
            let body = r#"{"model":"tuned","lora_name":"sql","lora_path":"/x"}"#;
            format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
                body.len()
            )
        };
        // Not the inference API: not forwarded, however the model is named.
        assert_eq!(exchange(get("/model/m/sim/requests")).await, 404);
        assert_eq!(
            exchange(post("/v1/load_lora_adapter", "X-Model-ID: m\r\n")).await,
            404
        );
        assert_eq!(
            exchange(post("/model/m/v1/load_lora_adapter", "")).await,
            404
        );
        // Dot segments never reach a backend.
        assert_eq!(
            exchange(get("/model/m/v1/models/../../sim/requests")).await,
            400
        );
        assert_eq!(
            exchange(get("/model/m/v1/models/%2e%2e/%2e%2e/sim/requests")).await,
            400
        );
        assert!(
            recorded(&sim).await.is_empty(),
            "a private route was reached"
        );
        // A model that serves adapter loading: only with an admin key.
        assert_eq!(
            exchange(post("/model/tuned/v1/load_lora_adapter", "")).await,
            403
        );
        let admin = "Authorization: Bearer admin-key\r\n";
        assert_eq!(
            exchange(post("/model/tuned/v1/load_lora_adapter", admin)).await,
            200
        );
        let seen = recorded(&sim).await;
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0]["path"], "/v1/load_lora_adapter");
        assert!(
            seen[0]["headers"].get("authorization").is_none(),
            "the admin key went upstream"
        );
    }

    // 7. Small ones.

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lower_case_bearer_empty_env_values_and_two_model_fields() {
        let sim = pod("p", &["m"], &[]);
        let yaml = format!("models:\n- name: m\n  endpoints: {}\n", endpoints(&[&sim]));
        // As Helm renders values left unset.
        let gw = Gateway::start_logged(
            &yaml,
            &["--auth-enabled", "true", "--auth-token", "k1"],
            &[("PROXY_MAX_QUEUE_SIZE", ""), ("PROXY_RATE_LIMIT_BURST", "")],
        );
        let resp = post_json(
            &gw.url("/v1/chat/completions"),
            &chat_body("m"),
            &[("authorization", "bearer k1")],
        )
        .await;
        assert_eq!(resp.status(), 200);
        let boundary = "XyZ";
        let form = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nother\r\n--{boundary}--\r\n"
        );
        let resp = support::client()
            .post(gw.url("/v1/audio/transcriptions"))
            .header("authorization", "Bearer k1")
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(form)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["param"], "model");
    }

    // 9. Model processes do not outlive a killed gateway.

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_gateway_leaves_no_model_process_and_a_restart_serves() {
        let port = free_port();
        let yaml = format!("models:\n{}", local_sim_model("local", port, "0s", ""));
        let mut gw = Gateway::start(&yaml, &[]);
        chat_ok(&gw, "local").await;
        let report = gw.admin_models().await;
        let pid = support::admin_model(&report, "local")["pid"]
            .as_u64()
            .expect("the model runs");
        gw.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !process_gone(pid) {
            assert!(
                Instant::now() < deadline,
                "model process {pid} outlived the killed gateway"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let again = Gateway::start_local(&yaml, &[]);
        chat_ok(&again, "local").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarted_gateway_replaces_a_server_its_predecessor_left_running() {
        let port = free_port();
        // What an older gateway, killed, may have left: a server of the
        // model, marked as the local actuator marks its children.
        let binary = support::SimProcess::binary().unwrap();
        let mut stray = std::process::Command::new(binary)
            .args(["--port", &port.to_string(), "--model", "local"])
            .env("FLEXINFER_MANAGED_MODEL", "local")
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !support::accepts(port).await {
            assert!(Instant::now() < deadline, "the stray never listened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let yaml = format!("models:\n{}", local_sim_model("local", port, "0s", ""));
        let gw = Gateway::start_local(&yaml, &[]);
        chat_ok(&gw, "local").await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while stray.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the stray server still runs");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
