//! Routing cost per request: endpoint selection for each strategy, and key
//! derivation on a realistic chat body (a 1.5 KiB multi-line system prompt
//! and six turns), as the proxy's `upstream_peer` phase runs them.

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{criterion_group, criterion_main, Criterion};
use flexinfer_gateway::extract::RawJson;
use flexinfer_gateway::routing::{
    prefix_key, session_key, CacheAwareRequest, EndpointSet, PromptBlocks, RoutingInputs,
    RoutingOptions, Strategy, Upstream, CACHE_KEY_HEADER, DEFAULT_BLOCK_SIZE, SESSION_ID_HEADER,
};
use http::{HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

/// The fields the extraction step would borrow from the body.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt: Option<&'a RawValue>,
}

fn chat_body() -> String {
    let system = "You are a meticulous assistant for an engineering team.\n\
                  Follow the style guide:\n- be brief\n- cite sources\n"
        .repeat(12);
    let mut messages = vec![json!({"role": "system", "content": system})];
    for turn in 0..6 {
        messages.push(json!({"role": "user", "content": format!("Question {turn}: how do I configure the \"prefix\" routing strategy for model {turn}?")}));
        messages.push(json!({"role": "assistant", "content": "Set the annotation flexinfer.ai/routing to prefix, then send a stable system prompt.\nThat is all."}));
    }
    json!({"model": "llama-3-8b", "stream": true, "messages": messages}).to_string()
}

fn pods(n: u8) -> EndpointSet {
    EndpointSet::new(
        (1..=n)
            .map(|i| Upstream::from(SocketAddr::from(([10, 0, 0, i], 8000))))
            .collect(),
    )
}

fn bench_select(c: &mut Criterion) {
    let set = pods(8);
    let plain = RoutingOptions::default();
    let bounded = RoutingOptions::with_bounded_load(1.25);
    let _load: Vec<_> = (0..8)
        .flat_map(|i| (0..i % 3).map(move |_| i))
        .map(|i| set.track(i))
        .collect();
    let key = "msg:3f9a1c0b7e2d4a65";
    let mut group = c.benchmark_group("select/8-pods");
    group.bench_function("default", |b| {
        b.iter(|| set.select(Strategy::Default, None, &plain, &[]))
    });
    group.bench_function("least-loaded", |b| {
        b.iter(|| set.select(Strategy::LeastLoaded, None, &plain, &[]))
    });
    group.bench_function("session-affinity", |b| {
        b.iter(|| set.select(Strategy::SessionAffinity, Some(black_box(key)), &plain, &[]))
    });
    group.bench_function("prefix-bounded-load", |b| {
        b.iter(|| set.select(Strategy::Prefix, Some(black_box(key)), &bounded, &[]))
    });
    let home = set
        .select(Strategy::SessionAffinity, Some(key), &plain, &[])
        .unwrap_or(0);
    group.bench_function("session-affinity-retry", |b| {
        b.iter(|| {
            set.select(
                Strategy::SessionAffinity,
                Some(black_box(key)),
                &plain,
                &[home],
            )
        })
    });
    group.bench_function("track", |b| b.iter(|| drop(set.track(black_box(3)))));
    group.finish();

    c.bench_function("endpoint-set/new-8-pods", |b| b.iter(|| pods(black_box(8))));
}

fn bench_keys(c: &mut Criterion) {
    let text = chat_body();
    let Ok(parsed) = serde_json::from_str::<Body<'_>>(&text) else {
        return;
    };
    let body = RoutingInputs {
        messages: parsed.messages.map(|m| RawJson::new(m.get())),
        prompt: parsed.prompt.map(|p| RawJson::new(p.get())),
        ..RoutingInputs::default()
    };
    let none = HeaderMap::new();
    let mut with_session = HeaderMap::new();
    with_session.insert(
        SESSION_ID_HEADER.clone(),
        HeaderValue::from_static("c0ffee-42"),
    );
    let mut with_cache_key = HeaderMap::new();
    with_cache_key.insert(
        CACHE_KEY_HEADER.clone(),
        HeaderValue::from_static("tenant-a/kb-7"),
    );

    let mut group = c.benchmark_group(format!("keys/chat-{}B", text.len()));
    group.bench_function("session-header", |b| {
        b.iter(|| session_key(black_box(&with_session), black_box(&body)))
    });
    group.bench_function("session-messages", |b| {
        b.iter(|| session_key(black_box(&none), black_box(&body)))
    });
    group.bench_function("prefix-explicit-header", |b| {
        b.iter(|| prefix_key(black_box(&with_cache_key), black_box(&body)))
    });
    group.bench_function("prefix-canonical", |b| {
        b.iter(|| prefix_key(black_box(&none), black_box(&body)))
    });
    group.finish();
}

/// `n` endpoints on distinct addresses (any count, unlike [`pods`]).
fn many_pods(n: usize) -> EndpointSet {
    EndpointSet::new(
        (0..n)
            .map(|i| {
                let [_, _, hi, lo] = (i as u32).to_be_bytes();
                Upstream::from(SocketAddr::from(([10, 1, hi, lo], 8000)))
            })
            .collect(),
    )
}

/// Cache-aware selection as the proxy runs it per attempt: prefix lookup
/// over the index, scoring every endpoint, the in-flight guard, and
/// recording the prompt's blocks; with 64 tenants' prompts already spread
/// over the endpoints and some load on them.
fn bench_cache_aware(c: &mut Criterion) {
    let text = chat_body();
    let Ok(parsed) = serde_json::from_str::<Body<'_>>(&text) else {
        return;
    };
    let body = RoutingInputs {
        messages: parsed.messages.map(|m| RawJson::new(m.get())),
        ..RoutingInputs::default()
    };
    let opts = RoutingOptions::default();
    c.bench_function(
        &format!("cache-aware/prompt-blocks-chat-{}B", text.len()),
        |b| b.iter(|| PromptBlocks::of_request(black_box(&body), DEFAULT_BLOCK_SIZE)),
    );
    let blocks = PromptBlocks::of_request(&body, DEFAULT_BLOCK_SIZE);
    for n in [16, 256] {
        let set = many_pods(n);
        for tenant in 0..64u64 {
            let prompt: Vec<u64> = (0..blocks.len() as u64).map(|b| tenant << 32 | b).collect();
            set.prefix_index().record(
                set.upstream(tenant as usize % n).addr,
                &prompt,
                opts.cache_aware.capacity(None),
            );
        }
        let _load: Vec<_> = (0..n)
            .flat_map(|i| (0..i % 3).map(move |_| i))
            .map(|i| set.track(i))
            .collect();
        let request = CacheAwareRequest {
            blocks: blocks.hashes(),
            ..CacheAwareRequest::default()
        };
        c.bench_function(&format!("cache-aware/pick-{n}-endpoints"), |b| {
            b.iter(|| set.pick_cache_aware(black_box(&request), &opts, &[]))
        });
    }
}

criterion_group!(benches, bench_select, bench_keys, bench_cache_aware);
criterion_main!(benches);
