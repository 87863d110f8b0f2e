//! Routing checks: which pod served each request, read from the backend's
//! `X-Served-By` header (every `flexinfer-sim` sends it). They need models
//! with two or more pods and a routing strategy (see [`Role`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Result};
use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::checks::{expect_status, send, Check, Verdict};
use super::http::{Call, Response};
use super::roles::Role;
use super::Context;

/// The header naming the pod that answered.
pub const SERVED_BY: &str = "x-served-by";
/// Requests per session or prefix in the stickiness checks.
const REPEATS: usize = 5;
/// Distinct sessions in the spread check.
const SPREAD_KEYS: usize = 24;
/// Short requests sent while one pod is busy in the least-loaded check.
const SHORT_REQUESTS: usize = 6;
/// Tokens of the request that keeps a pod busy (at the stream pace of the
/// local pods, 20 tokens/s, several seconds).
const BUSY_TOKENS: usize = 200;

/// The checks of this group.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            id: "routing.session.sticky",
            description: "session-affinity: every request of a session (X-Session-ID) is served by the same pod",
            run: session_sticky,
        },
        Check {
            id: "routing.prefix.sticky",
            description: "prefix: requests sharing a system prompt are served by the same pod",
            run: prefix_sticky,
        },
        Check {
            id: "routing.least_loaded",
            description: "least-loaded: while one pod holds a long request, new requests go to the other pods",
            run: least_loaded,
        },
        Check {
            id: "routing.spread",
            description: "session-affinity: distinct sessions are spread over more than one pod",
            run: spread,
        },
    ]
}

/// A run-specific tag, so keys differ between runs against one deployment.
fn nonce() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{:x}-{}", nanos, std::process::id())
}

fn no_model(role: Role) -> Verdict {
    Verdict::Skip(format!(
        "no model for role {role}: serve one named {} with two or more pods, or pass --role {role}=MODEL",
        role.well_known()
    ))
}

fn short_chat(model: &str, messages: Value) -> Value {
    json!({"model": model, "messages": messages, "max_tokens": 1})
}

/// The pod that served `resp`, which must be a 200.
fn pod_of(resp: &Response) -> Result<Option<String>> {
    expect_status(resp, 200)?;
    let pod = resp.header(SERVED_BY);
    Ok((!pod.is_empty()).then(|| pod.to_owned()))
}

fn no_pod_header() -> Verdict {
    Verdict::Skip(format!(
        "the backend does not name its pod ({SERVED_BY} header); run flexinfer-sim pods as \
         conformance/README.md describes"
    ))
}

/// Sends `calls` in order; the pod of each, or `None` when a response did
/// not name one.
async fn pods_of(ctx: &Context, calls: Vec<Call>) -> Result<Option<Vec<String>>> {
    let mut pods = Vec::with_capacity(calls.len());
    for call in calls {
        let resp = send(ctx, call).await?;
        match pod_of(&resp)? {
            Some(pod) => pods.push(pod),
            None => return Ok(None),
        }
    }
    Ok(Some(pods))
}

/// Each group of requests must have been served by one pod.
fn expect_sticky(groups: &BTreeMap<String, Vec<String>>, what: &str) -> Result<()> {
    let split: Vec<String> = groups
        .iter()
        .filter(|(_, pods)| pods.iter().collect::<BTreeSet<_>>().len() > 1)
        .map(|(key, pods)| format!("{what} {key} went to {pods:?}"))
        .collect();
    ensure!(split.is_empty(), "{}", split.join("; "));
    Ok(())
}

fn session_sticky(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let Some(model) = ctx.role_model(Role::Session) else {
            return Ok(no_model(Role::Session));
        };
        let tag = nonce();
        let mut groups = BTreeMap::new();
        // Sessions one after the other, each with changing messages: a
        // rotating strategy moves a session, only the session key keeps it.
        for s in 0..3 {
            let session = format!("conformance-{tag}-s{s}");
            let calls = (0..REPEATS)
                .map(|i| {
                    let messages =
                        json!([{"role": "user", "content": format!("turn {i} of {session}")}]);
                    Call::post_json("/v1/chat/completions", &short_chat(model, messages))
                        .header("x-session-id", &session)
                })
                .collect();
            let Some(pods) = pods_of(ctx, calls).await? else {
                return Ok(no_pod_header());
            };
            groups.insert(session, pods);
        }
        expect_sticky(&groups, "session")?;
        Ok(Verdict::Pass)
    })
}

fn prefix_sticky(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let Some(model) = ctx.role_model(Role::Prefix) else {
            return Ok(no_model(Role::Prefix));
        };
        let tag = nonce();
        let mut groups = BTreeMap::new();
        for p in 0..3 {
            let system = format!(
                "You are conformance assistant {p} of run {tag}. Answer in one word. This long \
                 system prompt is the shared prefix the gateway keys on."
            );
            let calls = (0..REPEATS)
                .map(|i| {
                    let messages = json!([
                        {"role": "system", "content": system},
                        {"role": "user", "content": format!("question {i}")},
                    ]);
                    Call::post_json("/v1/chat/completions", &short_chat(model, messages))
                })
                .collect();
            let Some(pods) = pods_of(ctx, calls).await? else {
                return Ok(no_pod_header());
            };
            groups.insert(format!("system prompt {p}"), pods);
        }
        expect_sticky(&groups, "prefix")?;
        Ok(Verdict::Pass)
    })
}

fn least_loaded(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let Some(model) = ctx.role_model(Role::LeastLoaded) else {
            return Ok(no_model(Role::LeastLoaded));
        };
        let busy_body = json!({
            "model": model,
            "messages": [{"role": "user", "content": "a long answer, please"}],
            "max_tokens": BUSY_TOKENS,
            "stream": true,
        });
        // The long request stays open (its body unread) while the short ones run.
        let busy = Call::post_json("/v1/chat/completions", &busy_body)
            .timeout(Duration::from_secs(30))
            .open(&ctx.gateway, ctx.api_key.as_deref())
            .await?;
        if busy.status != 200 {
            let resp = busy.collect().await?;
            bail!("the long request got {}", resp.describe());
        }
        let busy_pod = busy.header(SERVED_BY).to_owned();
        if busy_pod.is_empty() {
            return Ok(no_pod_header());
        }
        let calls = (0..SHORT_REQUESTS)
            .map(|i| {
                let messages = json!([{"role": "user", "content": format!("short {i}")}]);
                Call::post_json("/v1/chat/completions", &short_chat(model, messages))
            })
            .collect();
        let pods = pods_of(ctx, calls).await?;
        drop(busy);
        let Some(pods) = pods else {
            return Ok(no_pod_header());
        };
        let on_busy = pods.iter().filter(|p| **p == busy_pod).count();
        if on_busy == pods.len() {
            bail!(
                "every short request went to {busy_pod}, the pod holding the long request (or the \
                 model has a single pod): {pods:?}"
            );
        }
        ensure!(
            on_busy == 0,
            "{on_busy} of {} short requests went to {busy_pod}, which held a long request, while \
             other pods were idle: {pods:?}",
            pods.len()
        );
        Ok(Verdict::Pass)
    })
}

fn spread(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let Some(model) = ctx.role_model(Role::Session) else {
            return Ok(no_model(Role::Session));
        };
        let tag = nonce();
        let calls = (0..SPREAD_KEYS)
            .map(|i| {
                let messages = json!([{"role": "user", "content": "hello"}]);
                Call::post_json("/v1/chat/completions", &short_chat(model, messages))
                    .header("x-session-id", &format!("conformance-{tag}-spread-{i}"))
            })
            .collect();
        let Some(pods) = pods_of(ctx, calls).await? else {
            return Ok(no_pod_header());
        };
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for pod in &pods {
            *counts.entry(pod.as_str()).or_default() += 1;
        }
        if counts.len() < 2 {
            return Err(anyhow!(
                "{SPREAD_KEYS} sessions all went to one pod: {counts:?} (the model needs two or \
                 more ready pods)"
            ));
        }
        Ok(Verdict::Pass)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stickiness_names_the_split_groups() {
        let mut groups = BTreeMap::new();
        groups.insert("a".to_owned(), vec!["p1".to_owned(), "p1".to_owned()]);
        assert!(expect_sticky(&groups, "session").is_ok());
        groups.insert("b".to_owned(), vec!["p1".to_owned(), "p2".to_owned()]);
        let e = expect_sticky(&groups, "session").unwrap_err().to_string();
        assert_eq!(e, "session b went to [\"p1\", \"p2\"]");
    }
}
