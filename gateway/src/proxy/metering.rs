//! One request's account with its tenant: the budget charge taken at
//! admission, corrected with the usage its answer reports, and the token
//! counters. It travels with the plan, so a subrequest settles it too.

use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use http::header;
use memchr::memmem::Finder;
use pingora_http::ResponseHeader;

use crate::extract::JsonView;
use crate::metrics::Metrics;
use crate::tenants::{Tenant, TokenCharge, Usage, UsageMeter, UsageStripper};

/// The media type of a server-sent event stream.
const EVENT_STREAM: &[u8] = b"text/event-stream";

/// The field that starts each streamed event, searched in every chunk.
static DATA_FIELD: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"data:"));

/// A request's tenant accounting.
pub(super) struct Metering {
    tenant: Arc<Tenant>,
    pub(super) charge: Option<TokenCharge>,
    meter: Option<UsageMeter>,
    /// Set when the gateway asked the engine for a stream's usage.
    stripper: Option<UsageStripper>,
    succeeded: bool,
    /// The prompt tokens admission estimated.
    prompt_estimate: u64,
    /// Events of an event-stream answer passed on so far (`None` for
    /// other answers): what a stream cut before its usage is charged.
    events: Option<u64>,
    /// The answer's last byte passed.
    ended: bool,
}

/// The estimated prompt tokens of a request: everything an engine puts in
/// its prompt (`messages`, `prompt` or `input`, `system`, `instructions`,
/// `tools`; see [`crate::tokens`]).
pub(super) fn prompt_tokens(v: &JsonView<'_>) -> u64 {
    let parts: Vec<&str> = [
        v.messages,
        v.prompt,
        v.input,
        v.system,
        v.instructions,
        v.tools,
    ]
    .into_iter()
    .flatten()
    .map(|raw| raw.get())
    .collect();
    crate::tokens::estimate_prompt_tokens(&parts)
}

impl Metering {
    pub(super) fn new(tenant: Arc<Tenant>, charge: Option<TokenCharge>, prompt: u64) -> Self {
        Self {
            tenant,
            charge,
            meter: None,
            stripper: None,
            succeeded: false,
            prompt_estimate: prompt,
            events: None,
            ended: false,
        }
    }

    /// The engine's response head: a successful JSON or event-stream answer
    /// is watched for its usage.
    pub(super) fn begin(&mut self, resp: &mut ResponseHeader) {
        self.succeeded = resp.status.is_success();
        let content_type = resp
            .headers
            .get(header::CONTENT_TYPE)
            .map_or(&b""[..], |v| v.as_bytes());
        let events = content_type
            .get(..EVENT_STREAM.len())
            .is_some_and(|t| t.eq_ignore_ascii_case(EVENT_STREAM));
        let json = std::str::from_utf8(content_type).is_ok_and(crate::extract::is_json_media_type);
        if !events {
            // Not the stream it asked usage for (e.g. an error): nothing to take out.
            self.stripper = None;
        } else if self.stripper.is_some() && resp.headers.contains_key(header::CONTENT_LENGTH) {
            // The stream gets shorter: frame it by chunks instead.
            resp.remove_header(&header::CONTENT_LENGTH);
            let _ = resp.insert_header(header::TRANSFER_ENCODING, "chunked");
        }
        let watch = self.succeeded && (events || json) && self.stripper.is_none();
        self.meter = watch.then(|| UsageMeter::new(events));
        // A resumed stream goes on counting the events its first answer passed.
        self.events = (self.succeeded && events).then_some(self.events.unwrap_or(0));
    }

    /// Whether the request is charged against a token budget.
    pub(super) fn charges_tokens(&self) -> bool {
        self.charge.as_ref().is_some_and(|c| c.charges_tokens())
    }

    /// The gateway asked the engine for the usage of this stream: take it
    /// out of the answer.
    pub(super) fn strip_usage(&mut self) {
        self.stripper = Some(UsageStripper::default());
    }

    /// A chunk of the answer's body, possibly with what the gateway's own
    /// usage request added taken out.
    pub(super) fn feed(&mut self, body: &mut Option<Bytes>, end: bool) {
        self.ended |= end;
        if let (Some(events), Some(chunk)) = (&mut self.events, body.as_deref()) {
            // Every event an engine streams carries a token at most a few
            // times over; counted before any usage is taken out.
            *events += DATA_FIELD.find_iter(chunk).count() as u64;
        }
        if let Some(stripper) = &mut self.stripper {
            let chunk = body.as_deref().unwrap_or_default();
            if let Some(filtered) = stripper.filter(chunk, end) {
                *body = Some(Bytes::from(filtered));
            }
        } else if let (Some(meter), Some(chunk)) = (&mut self.meter, body.as_ref()) {
            meter.feed(chunk);
        }
    }

    /// The answer ended: settle the charge, count the tokens.
    pub(super) fn finish(&mut self, metrics: &Metrics, model: &str) {
        let reported = match &self.stripper {
            Some(stripper) => stripper.usage(),
            None => self.meter.as_mut().and_then(UsageMeter::finish),
        };
        let usage = match self.events {
            // A stream cut before its end: what its first events reported
            // is not what it used. It is charged the prompt and an event
            // per token passed, or what was reported if that is more.
            Some(passed) if !self.ended => {
                let reported = reported.unwrap_or_default();
                Some(Usage {
                    prompt_tokens: reported.prompt_tokens.max(self.prompt_estimate),
                    completion_tokens: reported.completion_tokens.max(passed),
                    cached_tokens: reported.cached_tokens,
                })
            }
            _ => reported,
        };
        if let Some(charge) = &mut self.charge {
            charge.settle(self.succeeded, usage.as_ref());
        }
        let Some(usage) = usage else { return };
        self.tenant
            .used(usage.prompt_tokens + usage.completion_tokens);
        let tenant = &*self.tenant.name;
        let count = |kind: &str, n: u64| {
            if n > 0 {
                metrics
                    .tokens
                    .with_label_values(&[model, tenant, kind])
                    .inc_by(n);
            }
        };
        count("prompt", usage.prompt_tokens);
        count("completion", usage.completion_tokens);
        count("cached", usage.cached_tokens.unwrap_or(0));
    }
}

impl Drop for Metering {
    /// A request that ends without its answer being finished here (refused
    /// by the queue or a later check, or never answered) gets its tokens
    /// back; `finish` settled the others already.
    fn drop(&mut self) {
        if let Some(charge) = &mut self.charge {
            charge.settle(self.succeeded, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenants::{Estimate, Tenants};

    #[test]
    fn the_answers_type_decides_what_is_watched_in_any_case() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "tenants:\n  - name: t\n    keys: [k]\n").unwrap();
        let tenants = Tenants::load(Some(file.path()), Vec::<String>::new()).unwrap();
        let tenant = tenants.identify(b"k").unwrap();
        for (content_type, events, watched) in [
            ("Text/Event-Stream; charset=utf-8", true, true),
            ("text/event-stream", true, true),
            ("application/JSON", false, true),
            ("application/problem+json", false, true),
            ("text/html", false, false),
            ("application/x-ndjson", false, false),
            ("text/event", false, false),
            ("", false, false),
        ] {
            let mut metering = Metering::new(tenant.clone(), None, 0);
            let mut resp = ResponseHeader::build(200, None).unwrap();
            if !content_type.is_empty() {
                resp.insert_header("content-type", content_type).unwrap();
            }
            metering.begin(&mut resp);
            assert_eq!(metering.meter.is_some(), watched, "{content_type:?}");
            assert_eq!(metering.events.is_some(), events, "{content_type:?}");
        }
    }

    #[test]
    fn a_request_refused_after_its_charge_gets_the_tokens_back() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            "tenants:\n  - name: t\n    keys: [k]\n    limits: {tokensPerMinute: 60, tokenBurst: 100}\n",
        )
        .unwrap();
        let tenants = Tenants::load(Some(file.path()), Vec::<String>::new()).unwrap();
        let tenant = tenants.identify(b"k").unwrap();
        let estimate = Estimate {
            prompt: 10,
            output: 80,
        };
        let charge = tenant.admit("m", estimate).unwrap();
        // Refused (say, queue full) before any answer: dropped unfinished.
        drop(Metering::new(tenant.clone(), Some(charge), 10));
        assert!(
            tenant.admit("m", estimate).is_ok(),
            "the 90 tokens came back"
        );
    }
}
