//! Gateway-measured timing of event streams: time to the first chunk of
//! the answer and the gaps between chunks, as the engine's tokens arrive.

use std::time::Instant;

use http::header;
use pingora_http::ResponseHeader;
use prometheus::Histogram;

use crate::metrics::Metrics;

/// The timing of one streamed answer.
pub(super) struct StreamTiming {
    ttft: Histogram,
    itl: Histogram,
    start: Instant,
    last: Option<Instant>,
}

impl StreamTiming {
    /// Timing for a successful `text/event-stream` answer of `model`;
    /// `None` for other answers.
    pub(super) fn of(
        resp: &ResponseHeader,
        metrics: &Metrics,
        model: &str,
        start: Option<Instant>,
    ) -> Option<Self> {
        let events = resp
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        (events && resp.status.is_success()).then(|| Self {
            ttft: metrics.stream_ttft.with_label_values(&[model]),
            itl: metrics.stream_itl.with_label_values(&[model]),
            start: start.unwrap_or_else(Instant::now),
            last: None,
        })
    }

    /// A chunk of the answer arrived.
    pub(super) fn chunk(&mut self) {
        let now = Instant::now();
        match self.last {
            None => self.ttft.observe((now - self.start).as_secs_f64()),
            Some(last) => self.itl.observe((now - last).as_secs_f64()),
        }
        self.last = Some(now);
    }
}
