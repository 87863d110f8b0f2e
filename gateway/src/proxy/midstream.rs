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

/// The error an engine's error event mid-stream fails its attempt with.
const ENGINE_ERROR_EVENT: ErrorType = ErrorType::Custom("engine error event");

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
        if ctx.held_error.is_some() {
            // The next engine answered an error: what the client was still
            // owed of the text goes before its error event.
            let carry = resume.take_carry();
            if end_of_stream && !carry.is_empty() {
                let mut out = carry;
                out.extend_from_slice(body.as_deref().unwrap_or_default());
                *body = Some(Bytes::from(out));
            }
            return Ok(());
        }
        if !resume.live() {
            return Ok(());
        }
        resume.filter(body, end_of_stream).map_err(|_| {
            Error::explain(
                ENGINE_ERROR_EVENT,
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
        if e.esource() == &ErrorSource::Downstream || ctx.is_subrequest || !started {
            return false;
        }
        if !written {
            if resume.resumes() > 0 || e.etype() != &ENGINE_ERROR_EVENT {
                return false;
            }
            // The engine's error came in its first read, before the client
            // had anything: the request is sent again as it was.
            resume.restart();
            self.record_outcome(ctx, true);
            if self.attempts_left(ctx) {
                ctx.lease = None;
                self.count_retry(ctx, "mid_stream");
                e.set_retry(true);
            }
            return true;
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
                self.end_stream(session, ctx, "no attempt is left to resume it".into());
                "failed"
            }
            Next::Close(end) => {
                ctx.stream_end = Some(end);
                "closed"
            }
            Next::Fail(why) => {
                self.end_stream(session, ctx, why.into());
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

    /// A resumed stream whose next attempt failed too (no endpoint took
    /// the continuation, or none was left): its end, unless one is set.
    pub(super) fn end_unresumed(&self, session: &Session, e: &Error, ctx: &mut RequestCtx) {
        let resumed = ctx
            .plan
            .as_ref()
            .and_then(|p| p.resume.as_ref())
            .is_some_and(|r| r.resumes() > 0);
        let written = session.as_downstream().response_written().is_some();
        if ctx.stream_end.is_some()
            || !resumed
            || !written
            || e.esource() == &ErrorSource::Downstream
        {
            return;
        }
        let why = format!("the next endpoint failed too ({})", e.etype().as_str());
        self.end_stream(session, ctx, why);
        if let Some(plan) = &ctx.plan {
            self.metrics
                .stream_resumes
                .with_label_values(&[&plan.resolved.route.name, "failed"])
                .inc();
        }
    }

    /// Ends a stream that cannot be resumed: what was held for the client,
    /// then an `error` event saying why (with what the engine said, when
    /// it sent an error).
    fn end_stream(&self, session: &Session, ctx: &mut RequestCtx, mut why: String) {
        let resume = ctx.plan.as_mut().and_then(|p| p.resume.as_mut());
        let (carry, open, said) = match resume {
            Some(r) => (
                r.take_carry(),
                r.open_tail(),
                r.engine_error().map(str::to_owned),
            ),
            None => (Vec::new(), false, None),
        };
        if let Some(said) = said {
            why.push_str(&format!("; the model server said: {said}"));
        }
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
        if open {
            // What passed ended mid-event: a blank line closes it first.
            end.extend_from_slice(b"\n\n");
        }
        end.extend_from_slice(&event);
        ctx.stream_end = Some(Bytes::from(end));
    }
}
