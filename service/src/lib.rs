//! What every FlexInfer binary shares at start and stop: logging set-up,
//! the shutdown signal and the Prometheus text of a registry. (The gateway
//! has its own access log and Pingora's signal handling; it uses none of
//! this.)

#[cfg(feature = "chart")]
pub mod chart;

use std::io::IsTerminal;

use prometheus::{Encoder, Registry, TextEncoder};
use tracing_subscriber::EnvFilter;

/// How log lines are written to standard error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStyle {
    /// Human-readable, one event a line, with the event's module.
    Full,
    /// Human-readable and short, without the module (command-line tools
    /// whose results go to standard output).
    Compact,
    /// One JSON object a line.
    Json,
}

impl LogStyle {
    /// `json` names [`LogStyle::Json`]; anything else is [`LogStyle::Full`].
    pub fn named(name: &str) -> Self {
        if name.eq_ignore_ascii_case("json") {
            LogStyle::Json
        } else {
            LogStyle::Full
        }
    }
}

/// Logs to standard error, filtered by `RUST_LOG` or else by
/// `default_filter` (e.g. `info`). Colour codes only when standard error is
/// a terminal, so log files and collectors get plain text.
pub fn init_logging(style: LogStyle, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match style {
        LogStyle::Full => builder.init(),
        LogStyle::Compact => builder.with_target(false).compact().init(),
        LogStyle::Json => builder.json().init(),
    }
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT), whichever comes first. A signal
/// that cannot be listened for never fires.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

/// The metrics of `registry` in the Prometheus text format.
pub fn render_text(registry: &Registry) -> String {
    let mut out = Vec::new();
    // Encoding into a Vec cannot fail for metrics the registry accepted.
    let _ = TextEncoder::new().encode(&registry.gather(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_styles_are_named_as_the_flags_name_them() {
        assert_eq!(LogStyle::named("json"), LogStyle::Json);
        assert_eq!(LogStyle::named("JSON"), LogStyle::Json);
        assert_eq!(LogStyle::named("text"), LogStyle::Full);
    }

    #[test]
    fn a_registry_renders_as_prometheus_text() {
        let registry = Registry::new();
        let counter = prometheus::IntCounter::new("things_total", "Things.").unwrap();
        registry.register(Box::new(counter.clone())).unwrap();
        counter.inc_by(3);
        let text = render_text(&registry);
        assert!(text.contains("# TYPE things_total counter"), "{text}");
        assert!(text.contains("things_total 3"), "{text}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn sigterm_resolves_the_shutdown_signal() {
        let waiter = tokio::spawn(shutdown_signal());
        // Let the handler install before the signal is raised.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        // SAFETY: sends a signal this process now handles to itself.
        let sent = unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        assert_eq!(sent, 0);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("resolved on SIGTERM")
            .unwrap();
    }
}
