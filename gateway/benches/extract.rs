//! Request inspection cost: parsing the JSON view and rewriting `model`, on a
//! typical 1 KiB chat body and on a 1 MiB long-context body (model first, as
//! SDKs send it, and model last, the scanner's worst case).

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use flexinfer_gateway::extract::parse_json;
use flexinfer_gateway::rewrite::rewrite_model;
use serde_json::json;

/// A chat body of about `size` bytes.
fn chat_body(size: usize, model_last: bool) -> Bytes {
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut len = 0;
    let mut i = 0;
    while len + 200 < size {
        let chunk = "The quick brown fox jumps over the lazy dog, \"quoted\" text. ";
        let content = chunk.repeat(((size - len) / chunk.len()).clamp(1, 64));
        len += content.len() + 40;
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": content}));
        i += 1;
    }
    let messages = serde_json::to_string(&messages).unwrap_or_default();
    let body = if model_last {
        format!(r#"{{"stream":true,"temperature":0.7,"messages":{messages},"model":"llama-3-8b"}}"#)
    } else {
        format!(r#"{{"model":"llama-3-8b","stream":true,"temperature":0.7,"messages":{messages}}}"#)
    };
    Bytes::from(body)
}

fn bench(c: &mut Criterion) {
    let cases = [
        ("1KiB", chat_body(1 << 10, false)),
        ("1MiB", chat_body(1 << 20, false)),
        ("1MiB-model-last", chat_body(1 << 20, true)),
    ];

    let mut group = c.benchmark_group("parse_json");
    for (name, body) in &cases {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), body, |b, body| {
            b.iter(|| parse_json(black_box(body)).map(|v| v.model.is_some()))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("rewrite_model");
    for (name, body) in &cases {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), body, |b, body| {
            b.iter(|| {
                rewrite_model(
                    black_box(body),
                    black_box("meta-llama/Meta-Llama-3-8B-Instruct"),
                )
            })
        });
    }
    group.finish();

    // The floor a rewrite cannot beat: copying the body once.
    let mut group = c.benchmark_group("memcpy");
    for (name, body) in &cases {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), body, |b, body| {
            b.iter(|| black_box(body).to_vec())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
