//! Bodies beyond Pingora's 64 KiB retry buffer: the buffered (possibly
//! rewritten) body is forwarded by a subrequest that runs the proxy phases
//! with the body preset, and its answer is piped back to the client.
//!
//! The subrequest's side is [`Gateway::adopt_subrequest`]: it takes over the
//! plan of its parent and skips everything decided already.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use http::header;
use pingora_core::protocols::http::HttpTask;
use pingora_error::Result;
use pingora_proxy::subrequest::pipe::{
    pipe_subrequest, InputBody, InputBodyType, PipeSubrequestError, PipeSubrequestState,
};
use pingora_proxy::subrequest::{BodyMode, Ctx as SubrequestCtx};
use pingora_proxy::Session;

use super::body_edits::PlannedBody;
use super::context::RequestCtx;
use super::failover::{FailoverGate, Relayed, SUBREQUEST_DRAIN_TIMEOUT};
use super::plan::ForwardPlan;
use super::respond::reject;
use super::upstream::classify_upstream_error;
use super::usage_headers::UsageHold;
use super::Gateway;
use crate::errors::ApiError;

/// Global mode: the most subrequests one request may spawn.
const MAX_FAILOVER_ROUNDS: usize = 64;

/// One subrequest's answer, as far as it was relayed or held back.
struct Piped {
    result: std::result::Result<PipeSubrequestState, PipeSubrequestError>,
    relay: Relayed,
    /// Tasks of the answer still to write to the client.
    tasks: Vec<HttpTask>,
}

impl Gateway {
    /// Forwards a request whose body was read for routing and is larger
    /// than Pingora's retry buffer.
    ///
    /// In global mode, a 5xx answer that the subrequest could not retry
    /// itself (the body is beyond the retry buffer) is held back while a
    /// cluster is left untried, and a new subrequest asks the next.
    pub(super) async fn forward_buffered(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        mut plan: Box<ForwardPlan>,
    ) -> Result<bool> {
        let start = ctx.start.unwrap_or_else(Instant::now);
        if self.settings.cluster_failover {
            plan.tried_mask = Some(Arc::new(AtomicU64::new(0)));
        }
        let mut round = 0;
        loop {
            round += 1;
            let next = self.settings.cluster_failover.then(|| plan.again());
            let mut gate = next.as_ref().map(|p| self.failover_gate(p));
            let mut hold = plan.hold_for_usage.then(UsageHold::default);
            let Some(mut piped) = self.pipe(session, plan, &mut gate, &mut hold, start).await
            else {
                return reject(session, ctx, ApiError::internal("subrequests unavailable")).await;
            };
            if let (Some(next), Some(gate)) = (next, &mut gate) {
                if gate.held.is_some() && round < MAX_FAILOVER_ROUNDS {
                    // Nothing reached the client: ask the next cluster.
                    self.metrics
                        .retries
                        .with_label_values(&[&next.resolved.route.name, "server_error"])
                        .inc();
                    plan = Box::new(next);
                    continue;
                }
                // No round left: the client gets the answer held back.
                for task in gate.held_tasks.drain(..) {
                    piped.relay.observe(&task, start);
                    piped.tasks.push(task);
                }
            }
            return self.finish_piped(session, ctx, piped).await;
        }
    }

    /// The gate of one global-mode round.
    fn failover_gate(&self, plan: &ForwardPlan) -> FailoverGate {
        FailoverGate {
            tried: plan.tried_mask.clone().unwrap_or_default(),
            limit: self
                .settings
                .max_attempts
                .min(plan.resolved.route.endpoints.len())
                .min(64),
            held: None,
            held_tasks: Vec::new(),
        }
    }

    /// Runs one subrequest with `plan`, relaying its answer through `gate`
    /// and `hold`; `None` when the session cannot spawn subrequests.
    async fn pipe(
        &self,
        session: &mut Session,
        plan: Box<ForwardPlan>,
        gate: &mut Option<FailoverGate>,
        hold: &mut Option<UsageHold>,
        start: Instant,
    ) -> Option<Piped> {
        let spawner = session.subrequest_spawner.as_ref()?;
        let body = plan.body.clone().unwrap_or_default();
        let sub_ctx = SubrequestCtx::builder()
            .user_ctx(plan)
            .body_mode(BodyMode::ExpectBody)
            .build();
        let (prepared, handle) = spawner.create_subrequest(session.as_downstream(), sub_ctx);
        let mut relay = Relayed::default();
        let input = if body.is_empty() {
            InputBody::NoBody
        } else {
            InputBody::Bytes(body.parts())
        };
        let mut result = pipe_subrequest(
            session,
            prepared,
            handle,
            |task| {
                let Some(task) = FailoverGate::pass(gate, task, &relay, start) else {
                    return Ok(None);
                };
                let Some(task) = UsageHold::pass(hold, task) else {
                    return Ok(None);
                };
                relay.observe(&task, start);
                Ok(Some(task))
            },
            InputBodyType::Preset(input),
        )
        .await;
        // A subrequest that fails answers for itself (`fail_to_proxy`) and
        // also reports the failure on a separate channel, which can overtake
        // that answer. Relay whatever it wrote before deciding what the
        // client gets, so that it gets that answer, whole.
        let mut tasks = Vec::new();
        if let Err(e) = &mut result {
            if let Some(rx) = e.state.pipe_rx.as_mut().filter(|_| e.from_subreq) {
                while !relay.complete
                    && !gate.as_ref().is_some_and(FailoverGate::held_complete)
                    && !hold.as_ref().is_some_and(UsageHold::complete)
                {
                    match tokio::time::timeout(SUBREQUEST_DRAIN_TIMEOUT, rx.recv()).await {
                        Ok(Some(task)) => {
                            let passed = FailoverGate::pass(gate, task, &relay, start)
                                .and_then(|task| UsageHold::pass(hold, task));
                            if let Some(task) = passed {
                                relay.observe(&task, start);
                                tasks.push(task);
                            }
                        }
                        _ => break,
                    }
                }
            }
        }
        // An answer held for its usage headers goes out whole, or not at
        // all when it broke off.
        if let Some(held) = hold.take().and_then(UsageHold::release) {
            for task in &held {
                relay.observe(task, start);
            }
            tasks.splice(0..0, held);
        }
        Some(Piped {
            result,
            relay,
            tasks,
        })
    }

    /// Writes what is left of the answer and records it; answers for the
    /// subrequest when it failed before any byte reached the client.
    async fn finish_piped(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        piped: Piped,
    ) -> Result<bool> {
        let Piped {
            result,
            relay,
            tasks,
        } = piped;
        let written = if tasks.is_empty() {
            Ok(false)
        } else {
            session.write_response_tasks(tasks).await
        };
        ctx.response_bytes += relay.bytes;
        if let Some(t) = relay.ttfb {
            self.metrics
                .ttfb
                .with_label_values(&[ctx.model_label()])
                .observe(t.as_secs_f64());
            ctx.ttfb_seen = true;
        }
        if relay.status != 0 {
            ctx.status = relay.status;
        }
        written?;
        match result {
            Ok(_) => Ok(true),
            // The subrequest answered in full (an error of its own, such as
            // 502 or 503): the client connection stays usable.
            Err(e) if e.from_subreq && relay.complete => Ok(true),
            Err(e) if relay.status == 0 => {
                let err = classify_upstream_error(&e.error);
                reject(session, ctx, err).await
            }
            // Failed mid-response: the client must see the response cut.
            Err(e) => Err(e.error),
        }
    }

    /// A subrequest spawned by [`Gateway::forward_buffered`] takes over its
    /// parent's plan and goes straight to the upstream phases.
    pub(super) async fn adopt_subrequest(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<bool> {
        ctx.is_subrequest = true;
        let plan = session
            .subrequest_ctx
            .as_mut()
            .and_then(|sub| sub.user_ctx_mut())
            .map(|u| std::mem::replace(u, Box::new(())))
            .and_then(|u| u.downcast::<ForwardPlan>().ok());
        let Some(plan) = plan else {
            return reject(
                session,
                ctx,
                ApiError::internal("subrequest without a plan"),
            )
            .await;
        };
        // The subrequest's header is a copy of the client's; frame the
        // preset (possibly rewritten) body by its real length.
        let len = plan.body.as_ref().map_or(0, PlannedBody::len);
        let header = session.req_header_mut();
        header.remove_header(&header::TRANSFER_ENCODING);
        // The client's `Expect: 100-continue` was answered when the body
        // was read; the upstream gets the body at once.
        header.remove_header(&header::EXPECT);
        header.insert_header(header::CONTENT_LENGTH, len.to_string())?;
        ctx.request_id = Some(plan.request_id.clone());
        ctx.model = Some(plan.resolved.route.name.clone());
        // Whose request it is: the owner of a response it creates.
        ctx.tenant = plan.tenant.clone();
        if let Some(mask) = &plan.tried_mask {
            let bits = mask.load(Ordering::Relaxed);
            ctx.tried
                .extend((0..64).filter(|i| bits & (1u64 << i) != 0));
        }
        ctx.plan = Some(plan);
        Ok(false)
    }
}
