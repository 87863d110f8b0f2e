//! Prometheus metrics of the extender.
//!
//! - `flexinfer_scheduler_requests_total{verb,result}`: filter and
//!   prioritize calls (`result` = `ok` or `error`).
//! - `flexinfer_scheduler_filter_decisions_total{result}`: per-node filter
//!   decisions (`passed` or `rejected`).
//! - `flexinfer_scheduler_rejections_total{reason}`: rejected nodes by
//!   reason (`no_vendor_label`, `insufficient_vram`, `unsupported_arch`,
//!   `unknown_node`).
//! - `flexinfer_scheduler_request_duration_seconds{verb}`: time to answer a
//!   call, request parsing and response encoding included.
//! - `flexinfer_scheduler_tenant_usage_ratio{namespace,tenant}` and
//!   `flexinfer_scheduler_tenant_score_adjustment{namespace,tenant}`: the
//!   last fair-share figures per tenant (only with fair share enabled).

use std::time::Duration;

use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// The extender's metrics, registered in their own registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    decisions: IntCounterVec,
    rejections: IntCounterVec,
    node_reads: IntCounterVec,
    duration: HistogramVec,
    tenant_usage: GaugeVec,
    tenant_adjustment: GaugeVec,
}

/// An extender call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `/filter`.
    Filter,
    /// `/prioritize` (or `/score`).
    Prioritize,
}

impl Verb {
    /// The `verb` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Filter => "filter",
            Verb::Prioritize => "prioritize",
        }
    }
}

impl Metrics {
    /// Creates and registers the metrics.
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "flexinfer_scheduler_requests_total",
                "Extender calls by verb and result.",
            ),
            &["verb", "result"],
        )
        .expect("valid metric");
        let decisions = IntCounterVec::new(
            Opts::new(
                "flexinfer_scheduler_filter_decisions_total",
                "Per-node filter decisions.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let rejections = IntCounterVec::new(
            Opts::new(
                "flexinfer_scheduler_rejections_total",
                "Nodes rejected by the filter, by reason.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let node_reads = IntCounterVec::new(
            Opts::new(
                "flexinfer_scheduler_node_metadata_total",
                "Nodes in requests whose metadata was read from the request, or known \
                 from an earlier one (same name, uid and resourceVersion).",
            ),
            &["source"],
        )
        .expect("valid metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "flexinfer_scheduler_request_duration_seconds",
                "Time to answer an extender call.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            ]),
            &["verb"],
        )
        .expect("valid metric");
        let tenant_usage = GaugeVec::new(
            Opts::new(
                "flexinfer_scheduler_tenant_usage_ratio",
                "GPUs used by a tenant over its budget, at its last scheduled pod.",
            ),
            &["namespace", "tenant"],
        )
        .expect("valid metric");
        let tenant_adjustment = GaugeVec::new(
            Opts::new(
                "flexinfer_scheduler_tenant_score_adjustment",
                "Weighted fair-share score term of a tenant's last scheduled pod.",
            ),
            &["namespace", "tenant"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(decisions.clone()),
            Box::new(rejections.clone()),
            Box::new(node_reads.clone()),
            Box::new(duration.clone()),
            Box::new(tenant_usage.clone()),
            Box::new(tenant_adjustment.clone()),
        ] {
            registry.register(collector).expect("unique metric");
        }
        Metrics {
            registry,
            requests,
            decisions,
            rejections,
            node_reads,
            duration,
            tenant_usage,
            tenant_adjustment,
        }
    }

    /// Records one call.
    pub fn observe_request(&self, verb: Verb, ok: bool, elapsed: Duration) {
        let result = if ok { "ok" } else { "error" };
        self.requests
            .with_label_values(&[verb.as_str(), result])
            .inc();
        self.duration
            .with_label_values(&[verb.as_str()])
            .observe(elapsed.as_secs_f64());
    }

    /// Records the per-node outcome of one filter call.
    pub fn observe_filter(&self, passed: usize, rejections: &[&'static str]) {
        self.decisions
            .with_label_values(&["passed"])
            .inc_by(passed as u64);
        self.decisions
            .with_label_values(&["rejected"])
            .inc_by(rejections.len() as u64);
        for reason in rejections {
            self.rejections.with_label_values(&[reason]).inc();
        }
    }

    /// Records how many nodes of one request were read and how many known.
    pub fn observe_node_reads(&self, read: usize, known: usize) {
        self.node_reads
            .with_label_values(&["request"])
            .inc_by(read as u64);
        self.node_reads
            .with_label_values(&["known"])
            .inc_by(known as u64);
    }

    /// Records a tenant's fair-share figures.
    pub fn observe_tenant(&self, namespace: &str, tenant: &str, usage_ratio: f64, adjustment: f64) {
        self.tenant_usage
            .with_label_values(&[namespace, tenant])
            .set(usage_ratio);
        self.tenant_adjustment
            .with_label_values(&[namespace, tenant])
            .set(adjustment);
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        flexinfer_service::render_text(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_by_reason() {
        let metrics = Metrics::new();
        metrics.observe_request(Verb::Filter, true, Duration::from_micros(300));
        metrics.observe_filter(
            2,
            &["no_vendor_label", "insufficient_vram", "no_vendor_label"],
        );
        let text = metrics.render();
        assert!(text.contains(r#"flexinfer_scheduler_requests_total{result="ok",verb="filter"} 1"#));
        assert!(
            text.contains(r#"flexinfer_scheduler_rejections_total{reason="no_vendor_label"} 2"#)
        );
        assert!(text.contains(r#"flexinfer_scheduler_filter_decisions_total{result="passed"} 2"#));
        assert!(text.contains(r#"flexinfer_scheduler_filter_decisions_total{result="rejected"} 3"#));
        assert!(text.contains("flexinfer_scheduler_request_duration_seconds_bucket"));
    }
}
