//! Cold-start checks against scale-to-zero models that are idle when the run
//! starts: a burst of requests is served by one activation, a full
//! activation queue refuses at once with `Retry-After`, and a model that
//! loads for longer than the wait bound is answered `activation_timeout`.
//! Activation counts come from the gateway's `GET /admin/models`.

use std::time::Duration;

use anyhow::{anyhow, ensure, Result};
use futures::future::{join_all, BoxFuture};

use super::checks::{chat_body, expect_chat_completion, expect_error, send, Check, Verdict};
use super::http::{Call, Response};
use super::roles::Role;
use super::Context;

/// Concurrent requests of the burst check (fewer when the queue is smaller).
const BURST: usize = 8;
/// Requests beyond the queue's size in the queue-full check.
const OVERFLOW: usize = 4;
/// Largest queue the queue-full check will fill.
const MAX_FILL: usize = 256;
/// How long a request may wait for a cold start.
const COLD_TIMEOUT: Duration = Duration::from_secs(300);

/// The checks of this group.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            id: "coldstart.burst",
            description: "concurrent requests to an idle model all wait and are served, by one activation",
            run: burst,
        },
        Check {
            id: "coldstart.queue_full",
            description: "past --max-queue-size waiting requests, more are answered 503 queue_full with Retry-After at once",
            run: queue_full,
        },
        Check {
            id: "coldstart.timeout",
            description: "a model not ready within the wait bound is answered 503 activation_timeout",
            run: timeout,
        },
    ]
}

/// The model doing `role`, if it is idle; otherwise why the check is skipped.
fn idle_model(ctx: &Context, role: Role) -> std::result::Result<&str, Verdict> {
    let Some(model) = ctx.role_model(role) else {
        return Err(Verdict::Skip(format!(
            "no model for role {role}: serve a scale-to-zero model named {} or pass --role {role}=MODEL",
            role.well_known()
        )));
    };
    match ctx.listed_phase(model) {
        Some("Idle") => Ok(model),
        Some(phase) => Err(Verdict::Skip(format!(
            "model {model:?} is {phase}, not Idle: a cold start needs a model that has scaled to zero"
        ))),
        None => Err(Verdict::Skip(format!(
            "GET /v1/models shows no status.phase for {model:?}: cannot tell whether it is idle"
        ))),
    }
}

/// `starts` of `model` in `GET /admin/models`, when the gateway shows it.
async fn starts(ctx: &Context, model: &str) -> Option<u64> {
    let resp = send(ctx, Call::get("/admin/models")).await.ok()?;
    let report = resp.json()?;
    report["models"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == model)?
        .get("starts")?
        .as_u64()
}

async fn concurrent_chats(ctx: &Context, model: &str, n: usize) -> Vec<Result<Response>> {
    join_all((0..n).map(|_| {
        let call =
            Call::post_json("/v1/chat/completions", &chat_body(Some(model))).timeout(COLD_TIMEOUT);
        send(ctx, call)
    }))
    .await
}

fn burst(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = match idle_model(ctx, Role::Cold) {
            Ok(m) => m,
            Err(skip) => return Ok(skip),
        };
        let n = BURST.min(ctx.max_queue_size);
        let before = starts(ctx, model).await;
        let answers = concurrent_chats(ctx, model, n).await;
        let mut problems = Vec::new();
        for (i, answer) in answers.iter().enumerate() {
            match answer {
                Ok(resp) => {
                    if let Err(e) = expect_chat_completion(resp) {
                        problems.push(format!("request {i}: {e:#}"));
                    }
                }
                Err(e) => problems.push(format!("request {i} lost: {e:#}")),
            }
        }
        ensure!(
            problems.is_empty(),
            "{} of {n} requests not served: {}",
            problems.len(),
            problems.join("; ")
        );
        let after = starts(ctx, model).await;
        match (before, after) {
            (Some(b), Some(a)) => ensure!(
                a == b + 1,
                "GET /admin/models counted {} activations of {model:?} for {n} concurrent requests, \
                 not 1 (starts {b} → {a})",
                a.saturating_sub(b)
            ),
            _ => {
                return Ok(Verdict::Skip(format!(
                    "all {n} requests were served, but GET /admin/models shows no `starts` for \
                     {model:?}: the number of activations is unknown"
                )))
            }
        }
        Ok(Verdict::Pass)
    })
}

/// `Retry-After` in whole seconds, when it is one.
fn retry_after(resp: &Response) -> Option<u64> {
    resp.header("retry-after").trim().parse().ok()
}

fn queue_full(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = match idle_model(ctx, Role::Queue) {
            Ok(m) => m,
            Err(skip) => return Ok(skip),
        };
        let queue = ctx.max_queue_size;
        if queue > MAX_FILL {
            return Ok(Verdict::Skip(format!(
                "--max-queue-size {queue} is more than {MAX_FILL} requests to fill; run the \
                 gateway with a smaller PROXY_MAX_QUEUE_SIZE and pass --max-queue-size"
            )));
        }
        let n = queue + OVERFLOW;
        let answers = concurrent_chats(ctx, model, n).await;
        let (mut served, mut refused) = (0, 0);
        let mut problems = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            let resp = match answer {
                Ok(resp) => resp,
                Err(e) => {
                    problems.push(format!("request {i} lost: {e:#}"));
                    continue;
                }
            };
            if resp.status == 200 {
                match expect_chat_completion(&resp) {
                    Ok(_) => served += 1,
                    Err(e) => problems.push(format!("request {i}: {e:#}")),
                }
                continue;
            }
            match expect_error(&resp, 503, "queue_full") {
                Ok(()) if retry_after(&resp).is_some_and(|s| s >= 1) => refused += 1,
                Ok(()) => problems.push(format!(
                    "request {i}: queue_full without a Retry-After of whole seconds (got {:?})",
                    resp.header("retry-after")
                )),
                Err(e) => problems.push(format!("request {i}: {e:#}")),
            }
        }
        ensure!(problems.is_empty(), "{}", problems.join("; "));
        ensure!(
            served == queue && refused == OVERFLOW,
            "{n} concurrent requests with a queue of {queue}: {served} served and {refused} \
             refused, expected {queue} and {OVERFLOW}"
        );
        Ok(Verdict::Pass)
    })
}

fn timeout(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let model = match idle_model(ctx, Role::Slow) {
            Ok(m) => m,
            Err(skip) => return Ok(skip),
        };
        let started = std::time::Instant::now();
        let call =
            Call::post_json("/v1/chat/completions", &chat_body(Some(model))).timeout(COLD_TIMEOUT);
        let resp = send(ctx, call).await?;
        expect_error(&resp, 503, "activation_timeout")
            .map_err(|e| anyhow!("after {:.1} s: {e:#}", started.elapsed().as_secs_f64()))?;
        Ok(Verdict::Pass)
    })
}
