//! Cost of tenants and flow control per request: identifying the key,
//! charging a token budget and correcting it, estimating a prompt, and the
//! priority/fair queue holding 10,000 waiters.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use flexinfer_gateway::flow::{Class, FairQueue, Waiter};
use flexinfer_gateway::tenants::{Estimate, Tenants, Usage};
use flexinfer_gateway::tokens::estimate_prompt_tokens;

const KEYS: &str = "tenants:
  - name: team-a
    keys: [key-a]
    models: [llama, \"qwen-*\"]
    limits: {requestsPerSecond: 1000000000, tokensPerMinute: 100000000000}
    modelLimits:
      llama: {tokensPerMinute: 100000000000}
";

fn tenants() -> (tempfile::NamedTempFile, Tenants) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), KEYS).expect("write keys");
    let tenants = Tenants::load(Some(file.path()), ["plain"]).expect("keys");
    (file, tenants)
}

fn per_request(c: &mut Criterion) {
    let (_file, tenants) = tenants();
    let usage = Usage {
        prompt_tokens: 120,
        completion_tokens: 40,
        cached_tokens: None,
    };
    let messages = r#"[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarise the meeting notes below in three bullet points, then list the owners of each action item."}]"#;
    c.bench_function("tenant: identify the key", |b| {
        b.iter(|| black_box(tenants.identify(black_box(b"key-a"))))
    });
    let tenant = tenants.identify(b"key-a").expect("tenant");
    c.bench_function("tenant: allow, charge and correct two budgets", |b| {
        b.iter(|| {
            assert!(tenant.allows("llama"));
            let mut charge = tenant
                .admit(
                    "llama",
                    Estimate {
                        prompt: 150,
                        output: 64,
                    },
                )
                .expect("within budget");
            charge.settle(true, Some(&usage));
        })
    });
    c.bench_function("tenant: estimate a chat prompt", |b| {
        b.iter(|| black_box(estimate_prompt_tokens(&[black_box(messages)])))
    });
}

fn queue(c: &mut Criterion) {
    let waiters: Vec<Waiter> = (0..100)
        .map(|i| Waiter {
            class: if i % 10 == 0 {
                Class::High
            } else {
                Class::Normal
            },
            tenant: Arc::from(format!("tenant-{i}")),
        })
        .collect();
    let full = || {
        let mut q = FairQueue::default();
        for ticket in 0..10_000u64 {
            q.push(&waiters[(ticket % 100) as usize], ticket, ticket);
        }
        q
    };
    c.bench_function("queue: push and pop one with 10,000 waiting", |b| {
        let mut q = full();
        let mut ticket = 10_000u64;
        b.iter(|| {
            q.push(&waiters[(ticket % 100) as usize], ticket, ticket);
            ticket += 1;
            black_box(q.pop())
        })
    });
    c.bench_function("queue: cancel one of 10,000 waiting", |b| {
        b.iter_batched(
            full,
            |mut q| black_box(q.remove(7_777)),
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, per_request, queue);
criterion_main!(benches);
