//! Holding a streaming request while it waits for its model: the head and
//! progress comments go out while the wait lasts ([`crate::held`]), and a
//! failure after the head becomes an `error` event.

use std::future::Future;
use std::time::{Duration, Instant};

use pingora_proxy::Session;

use super::context::RequestCtx;
use super::Gateway;
use crate::activation::ActivationQueues;
use crate::errors::ApiError;
use crate::held;

impl Gateway {
    /// Waits for `admission`. A streaming request (`streams`) that is
    /// still waiting after one progress interval is sent its response head,
    /// then a progress comment every interval until the wait ends.
    pub(super) async fn hold<T>(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        model: &str,
        streams: bool,
        admission: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        let (Some(every), true, Some(queues)) = (
            self.settings.held_progress_interval,
            streams,
            self.activation.as_deref(),
        ) else {
            return admission.await;
        };
        let mut admission = std::pin::pin!(admission);
        // Most requests are let in at once: no timer for them.
        if let std::task::Poll::Ready(done) = futures::poll!(&mut admission) {
            return done;
        }
        let started = Instant::now();
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                done = &mut admission => {
                    if ctx.held_head {
                        let outcome = if done.is_ok() { "served" } else { "failed" };
                        self.count_held(model, outcome);
                    }
                    return done;
                }
                _ = ticks.tick() => {
                    let sent = self
                        .send_progress(session, ctx, queues, model, started.elapsed())
                        .await;
                    if sent.is_err() {
                        // The client is gone: leaving drops the wait, and
                        // with it the request's place in the queue.
                        self.count_held(model, "client_gone");
                        return Err(ApiError::client_gone());
                    }
                }
            }
        }
    }

    async fn send_progress(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        queues: &ActivationQueues,
        model: &str,
        waited: Duration,
    ) -> pingora_error::Result<()> {
        if !ctx.held_head {
            let downstream = session.as_downstream();
            let chunked =
                !downstream.is_http2() && session.req_header().version >= http::Version::HTTP_11;
            if !chunked && !session.as_downstream().is_http2() {
                // An HTTP/1.0 answer without a length ends with the connection.
                session.set_keepalive(None);
            }
            let head = held::head(chunked, ctx.request_id.as_deref())?;
            session.write_response_header(Box::new(head), false).await?;
            ctx.held_head = true;
            ctx.status = 200;
        }
        let comment = held::progress_comment(&queues.progress(model), waited);
        session.write_response_body(Some(comment), false).await?;
        self.metrics.held_comments.with_label_values(&[model]).inc();
        Ok(())
    }

    fn count_held(&self, model: &str, outcome: &str) {
        self.metrics
            .held_streams
            .with_label_values(&[model, outcome])
            .inc();
    }
}

/// Ends a held stream with `err` as an `error` event of the request's API.
pub(super) async fn end_held(
    session: &mut Session,
    ctx: &mut RequestCtx,
    err: &ApiError,
) -> pingora_error::Result<()> {
    let event = held::error_event(
        err,
        session.req_header().uri.path(),
        ctx.request_id.as_deref(),
    );
    ctx.status = err.status;
    session.write_response_body(Some(event), true).await
}

/// Longest engine error body kept for its `error` event.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Turns an engine's error answer to a held stream into one `error` event:
/// its body is kept back and sent as the event with the end of the stream.
pub(super) fn error_answer_as_event(
    session: &Session,
    request_id: &Option<std::sync::Arc<str>>,
    held: &mut (u16, Vec<u8>),
    body: &mut Option<bytes::Bytes>,
    end_of_stream: bool,
) {
    let (status, kept) = held;
    if let Some(b) = body.take() {
        let room = ERROR_BODY_LIMIT.saturating_sub(kept.len());
        kept.extend_from_slice(&b[..b.len().min(room)]);
    }
    if end_of_stream {
        *body = Some(held::upstream_error_event(
            *status,
            kept,
            session.req_header().uri.path(),
            request_id.as_deref(),
        ));
    }
}
