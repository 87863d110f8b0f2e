//! Auth and rate-limit checks, for gateways that have them on: 401 without a
//! key or with a wrong one, and 429 with `Retry-After` past a model's limit.

use anyhow::{anyhow, ensure, Result};
use futures::future::BoxFuture;

use super::checks::{chat_body, expect_chat_completion, expect_error, model, Check, Verdict};
use super::http::{Call, Response};
use super::roles::Role;
use super::Context;

/// A key no deployment accepts.
pub const WRONG_KEY: &str = "flexinfer-conformance-wrong-key";
/// Requests the rate-limit check sends before it gives up on a 429.
const MAX_REQUESTS: usize = 60;

/// The checks of this group.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            id: "auth.missing_key",
            description: "with auth on, a request without a key is answered 401 invalid_api_key with WWW-Authenticate",
            run: missing_key,
        },
        Check {
            id: "auth.wrong_key",
            description: "with auth on, a request with a wrong key is answered 401 invalid_api_key",
            run: wrong_key,
        },
        Check {
            id: "limits.rate_limit",
            description: "past a model's rate limit, requests are answered 429 rate_limit_exceeded with Retry-After",
            run: rate_limit,
        },
    ]
}

fn no_auth() -> Verdict {
    Verdict::Skip(
        "no --api-key given: the run does not know auth to be on (pass the key the gateway accepts)"
            .into(),
    )
}

fn expect_unauthorized(resp: &Response, what: &str) -> Result<()> {
    expect_error(resp, 401, "invalid_api_key").map_err(|e| anyhow!("{what}: {e:#}"))?;
    ensure!(
        resp.header("www-authenticate")
            .to_ascii_lowercase()
            .starts_with("bearer"),
        "{what}: 401 without `WWW-Authenticate: Bearer` (got {:?})",
        resp.header("www-authenticate")
    );
    Ok(())
}

fn missing_key(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        if ctx.api_key.is_none() {
            return Ok(no_auth());
        }
        let model = model(ctx)?;
        let resp = Call::post_json("/v1/chat/completions", &chat_body(Some(model)))
            .send(&ctx.gateway, None)
            .await?;
        expect_unauthorized(&resp, "no Authorization header")?;
        Ok(Verdict::Pass)
    })
}

fn wrong_key(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        if ctx.api_key.is_none() {
            return Ok(no_auth());
        }
        let model = model(ctx)?;
        let resp = Call::post_json("/v1/chat/completions", &chat_body(Some(model)))
            .send(&ctx.gateway, Some(WRONG_KEY))
            .await?;
        expect_unauthorized(&resp, "Authorization: Bearer <wrong key>")?;
        Ok(Verdict::Pass)
    })
}

fn rate_limit(ctx: &Context) -> BoxFuture<'_, Result<Verdict>> {
    Box::pin(async move {
        let Some(model) = ctx.role_model(Role::Limited) else {
            return Ok(Verdict::Skip(format!(
                "no model for role limited: serve a model named {} with a rateLimit burst of at \
                 most {}, or pass --role limited=MODEL",
                Role::Limited.well_known(),
                MAX_REQUESTS - 1
            )));
        };
        for i in 0..MAX_REQUESTS {
            let resp = Call::post_json("/v1/chat/completions", &chat_body(Some(model)))
                .send(&ctx.gateway, ctx.api_key.as_deref())
                .await?;
            if resp.status == 200 {
                expect_chat_completion(&resp)?;
                continue;
            }
            expect_error(&resp, 429, "rate_limit_exceeded")
                .map_err(|e| anyhow!("request {i} of a burst: {e:#}"))?;
            let retry_after = resp.header("retry-after");
            ensure!(
                retry_after.trim().parse::<u64>().is_ok_and(|s| s >= 1),
                "429 without a Retry-After of whole seconds (got {retry_after:?})"
            );
            ensure!(
                i > 0,
                "the first request was already refused: {}",
                resp.describe()
            );
            return Ok(Verdict::Pass);
        }
        Err(anyhow!(
            "{MAX_REQUESTS} back-to-back requests for {model:?} were all served: no rate limit applied"
        ))
    })
}
