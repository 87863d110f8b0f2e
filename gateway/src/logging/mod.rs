//! The gateway's log output: one line per request (the access log, at
//! INFO) and whatever else happens, pretty or JSON, on stderr.
//!
//! Lines are gathered in a buffer that a writer thread writes out every
//! 50 ms ([`batch`]), so the request path never waits for the terminal or
//! log collector and wakes no thread per line; if too much is waiting,
//! lines are dropped (and counted in the log) rather than requests delayed.
//! Colour codes are written only to a terminal. Pingora's ERROR line for
//! every client that gives up in the middle of a request header is left
//! out: such clients are counted in
//! `flexinfer_proxy_request_header_aborts_total` instead, and a flood of
//! them cannot fill the logs.

use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::cli::LogFormat;

pub mod batch;

pub use batch::BatchGuard;

/// Sets up logging; keep the guard until exit, so that the last lines are
/// written.
pub fn init(format: LogFormat, level: &str) -> BatchGuard {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = batch::batch_writer(std::io::stderr());
    let ansi = std::io::stderr().is_terminal();
    let output = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi);
    let output = match format {
        LogFormat::Json => output.json().boxed(),
        LogFormat::Pretty => output.boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(output.with_filter(QuietClientAborts).with_filter(filter))
        .try_init();
    guard
}

/// Milliseconds of `elapsed` as a log field: to a tenth of a millisecond
/// (`2340.7`), which is what a reader of the log can use; more digits are
/// noise of the clock and of binary floating point.
pub fn millis(elapsed: std::time::Duration) -> f64 {
    (elapsed.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Drops Pingora's error line about a client that closed or stalled while
/// sending its request header.
struct QuietClientAborts;

impl<S> Filter<S> for QuietClientAborts {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        if *event.metadata().level() != Level::ERROR {
            return true;
        }
        // Pingora logs through the `log` crate: its target arrives as the
        // `log.target` field.
        let mut message = Message::default();
        event.record(&mut message);
        let target = message
            .target
            .as_deref()
            .unwrap_or(event.metadata().target());
        !(target.starts_with("pingora") && is_header_abort(&message.text))
    }
}

/// Whether a Pingora error line reports a client lost while its request
/// header was being read: by the proxy (`Fail to proxy: Downstream ...`)
/// or by the admin and peer listeners (`HTTP server fails to read from
/// downstream: ...`).
fn is_header_abort(message: &str) -> bool {
    (message.contains("Downstream") || message.contains("from downstream"))
        && message.contains("while reading request headers")
}

/// The message and `log` target of an event.
#[derive(Default)]
struct Message {
    text: String,
    target: Option<String>,
}

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.text.push_str(value),
            "log.target" => self.target = Some(value.to_string()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.text = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_milliseconds_have_one_decimal() {
        use std::time::Duration;
        assert_eq!(
            millis(Duration::from_nanos(2_340_736_838)).to_string(),
            "2340.7"
        );
        assert_eq!(millis(Duration::from_micros(300)).to_string(), "0.3");
        assert_eq!(millis(Duration::from_millis(5)).to_string(), "5");
        assert_eq!(millis(Duration::ZERO).to_string(), "0");
        assert_eq!(millis(Duration::from_nanos(99_960)).to_string(), "0.1");
    }

    #[test]
    fn only_header_aborts_are_quiet() {
        assert!(is_header_abort(
            "Fail to proxy: Downstream ConnectionClosed context: while reading request headers, bytes already read: 12, downstream session type: HTTP/1.1"
        ));
        assert!(is_header_abort(
            "HTTP server fails to read from downstream:  ReadError context: while reading request headers cause: Request header not received within 1s"
        ));
        assert!(!is_header_abort(
            "Fail to proxy: Upstream ConnectRefused context: Fail to connect to addr: 127.0.0.1:1"
        ));
    }
}
