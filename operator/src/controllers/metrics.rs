//! Controller metrics: reconciles, failures by reason, durations.

use std::time::Instant;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// Metrics of every controller, labelled by `controller`.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// `flexinfer_operator_reconciles_total{controller}`.
    pub reconciles: IntCounterVec,
    /// `flexinfer_operator_reconcile_failures_total{controller,reason}`.
    pub failures: IntCounterVec,
    /// `flexinfer_operator_reconcile_duration_seconds{controller}`.
    pub duration: HistogramVec,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Metrics> {
        let reconciles = IntCounterVec::new(
            Opts::new("flexinfer_operator_reconciles_total", "Reconciles run"),
            &["controller"],
        )?;
        let failures = IntCounterVec::new(
            Opts::new(
                "flexinfer_operator_reconcile_failures_total",
                "Reconciles that failed, by reason",
            ),
            &["controller", "reason"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "flexinfer_operator_reconcile_duration_seconds",
                "Duration of reconciles",
            )
            .buckets(vec![0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["controller"],
        )?;
        for c in [
            Box::new(reconciles.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(failures.clone()),
            Box::new(duration.clone()),
        ] {
            match registry.register(c) {
                Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Metrics {
            reconciles,
            failures,
            duration,
        })
    }

    /// Records one reconcile of `controller` that started at `start`.
    pub fn observe<T, E: std::fmt::Display>(
        &self,
        controller: &str,
        start: Instant,
        result: &Result<T, E>,
        reason: impl FnOnce(&E) -> String,
    ) {
        self.reconciles.with_label_values(&[controller]).inc();
        self.duration
            .with_label_values(&[controller])
            .observe(start.elapsed().as_secs_f64());
        if let Err(e) = result {
            self.failures
                .with_label_values(&[controller, &reason(e)])
                .inc();
        }
    }
}
