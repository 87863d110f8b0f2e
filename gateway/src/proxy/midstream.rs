//! The request path's side of mid-stream failover ([`crate::resume`]): a
//! stream whose engine fails after its head went out is tried again on
//! another endpoint with a body that continues the answer, or ended with
//! an event that says why it cannot be.

use bytes::Bytes;
use http::header;
use pingora_error::{Error, ErrorSource, ErrorType};
use pingora_http::ResponseHeader;
use pingora_proxy::Session;

use super::body_edits::PlannedBody;
use super::context::RequestCtx;
use super::Gateway;
use crate::errors::ApiError;
use crate::resume::Next;

impl Gateway {
    /// The head of an attempt's answer: whether it is an event stream the
    /// splice reads. An error answer to a resumed stream becomes an error
    /// event, like a held stream's.
    pub(super) fn begin_resumable(&self, resp: &ResponseHeader, ctx: &mut RequestCtx) {
        let Some(resume) = ctx.plan.as_mut().and_then(|p| p.resume.as_mut()) else {
            return;
        };
        let events = resp
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        resume.begin(resp.status.is_success() && events);
        if resume.resumes() > 0 && resp.status.as_u16() >= 400 {
            ctx.held_error = Some(Box::new((resp.status.as_u16(), Vec::new())));
        }
    }

    /// One chunk of a resumable stream's answer; an engine's error event
    /// mid-stream fails the attempt, to be resumed.
    pub(super) fn splice_chunk(
        &self,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> pingora_error::Result<()> {
        let Some(resume) = ctx.plan.as_mut().and_then(|p| p.resume.as_mut()) else {
            return Ok(());
        };
        if !resume.live() || ctx.held_error.is_some() {
            return Ok(());
        }
        resume.filter(body, end_of_stream).map_err(|_| {
            Error::explain(
                ErrorType::Custom("engine error event"),
                "the model server reported an error mid-stream",
            )
            .into_up()
        })
    }

    /// A resumable stream's engine failed once the client had its head:
    /// the next attempt continues the answer elsewhere (`e` is marked to be
    /// retried), or the stream's end is set for `fail_to_proxy` to send.
    /// `false` when this is not such a failure.
    pub(super) fn resume_failed_stream(
        &self,
        session: &Session,
        ctx: &mut RequestCtx,
        e: &mut Error,
    ) -> bool {
        let written = session.as_downstream().response_written().is_some();
        let Some(plan) = ctx.plan.as_mut() else {
            return false;
        };
        let Some(resume) = plan.resume.as_mut() else {
            return false;
        };
        let started = resume.live() || resume.resumes() > 0;
        if !written || !started || e.esource() == &ErrorSource::Downstream || ctx.is_subrequest {
            return false;
        }
        let sent = plan.body.as_ref().map(PlannedBody::contiguous);
        let next = match sent {
            Some(sent) => resume.next(|| sent),
            // Forwarded beyond the retry buffer: not sent again from here.
            None => Next::Fail("the request was too large to send again"),
        };
        let model = plan.resolved.route.name.clone();
        self.record_outcome(ctx, true);
        self.report_failure(ctx);
        let outcome = match next {
            Next::Continue(body) if self.attempts_left(ctx) => {
                if let Some(plan) = ctx.plan.as_mut() {
                    plan.body = Some(PlannedBody::from(body));
                }
                ctx.lease = None;
                self.count_retry(ctx, "mid_stream");
                tracing::warn!(model = %model, error = %e, "resuming a stream on another endpoint");
                e.set_retry(true);
                "resumed"
            }
            Next::Continue(_) => {
                self.end_stream(session, ctx, "no attempt is left to resume it");
                "failed"
            }
            Next::Close(end) => {
                ctx.stream_end = Some(end);
                "closed"
            }
            Next::Fail(why) => {
                self.end_stream(session, ctx, why);
                "failed"
            }
        };
        if outcome != "resumed" {
            e.set_retry(false);
        }
        self.metrics
            .stream_resumes
            .with_label_values(&[&model, outcome])
            .inc();
        true
    }

    /// Ends a stream that cannot be resumed: what was held for the client,
    /// then an `error` event saying why.
    fn end_stream(&self, session: &Session, ctx: &mut RequestCtx, why: &str) {
        let carry = ctx
            .plan
            .as_mut()
            .and_then(|p| p.resume.as_mut())
            .map(|r| r.take_carry())
            .unwrap_or_default();
        let mut err = ApiError::bad_gateway();
        err.message =
            format!("the model server failed mid-stream and the answer cannot be resumed: {why}");
        tracing::warn!(error = %err.message, "stream cut");
        let event = crate::held::error_event(
            &err,
            session.req_header().uri.path(),
            ctx.request_id.as_deref(),
        );
        let mut end = carry;
        end.extend_from_slice(&event);
        ctx.stream_end = Some(Bytes::from(end));
    }
}
