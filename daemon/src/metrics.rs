//! Prometheus metrics: every name is a constant here, every label is of low cardinality
//! (language, status, reason), never the code or a caller's identity.

use std::time::Duration;

use hyperlightd_api::{ExecStatus, Language};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::executor::ExecutorHealth;

/// Executions by `language` and `status` (ok, error, timeout).
pub const EXECUTIONS_TOTAL: &str = "hyperlightd_executions_total";
/// Time from a request's arrival to the end of its execution, by `language`.
pub const EXECUTION_DURATION_SECONDS: &str = "hyperlightd_execution_duration_seconds";
/// Requests answered with a 4xx/5xx, by `reason` (the error kind).
pub const REQUESTS_REJECTED_TOTAL: &str = "hyperlightd_requests_rejected_total";
/// Executions running or waiting for a sandbox.
pub const EXECUTIONS_IN_FLIGHT: &str = "hyperlightd_executions_in_flight";
/// Sandboxes per `language`, busy or idle.
pub const POOL_SANDBOXES: &str = "hyperlightd_pool_sandboxes";
/// Idle sandboxes per `language`, ready to take a request.
pub const POOL_IDLE_SANDBOXES: &str = "hyperlightd_pool_idle_sandboxes";

/// Buckets from 1 ms to 60 s: warm executions take milliseconds, time limits reach a minute.
const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The daemon's metrics, in a registry of their own.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    executions: IntCounterVec,
    duration: HistogramVec,
    rejected: IntCounterVec,
    in_flight: IntGauge,
    pool_sandboxes: IntGaugeVec,
    pool_idle: IntGaugeVec,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let executions = IntCounterVec::new(
            Opts::new(EXECUTIONS_TOTAL, "Executions by language and final status."),
            &["language", "status"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                EXECUTION_DURATION_SECONDS,
                "Time from a request's arrival to the end of its execution.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["language"],
        )?;
        let rejected = IntCounterVec::new(
            Opts::new(
                REQUESTS_REJECTED_TOTAL,
                "Requests answered with an HTTP error, by reason.",
            ),
            &["reason"],
        )?;
        let in_flight = IntGauge::new(
            EXECUTIONS_IN_FLIGHT,
            "Executions running or waiting for a sandbox.",
        )?;
        let pool_sandboxes = IntGaugeVec::new(
            Opts::new(POOL_SANDBOXES, "Sandboxes per language, busy or idle."),
            &["language"],
        )?;
        let pool_idle = IntGaugeVec::new(
            Opts::new(POOL_IDLE_SANDBOXES, "Idle sandboxes per language."),
            &["language"],
        )?;
        registry.register(Box::new(executions.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(rejected.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(pool_sandboxes.clone()))?;
        registry.register(Box::new(pool_idle.clone()))?;
        Ok(Metrics {
            registry,
            executions,
            duration,
            rejected,
            in_flight,
            pool_sandboxes,
            pool_idle,
        })
    }

    /// Records a finished execution.
    pub fn record_execution(&self, language: Language, status: ExecStatus, elapsed: Duration) {
        self.executions
            .with_label_values(&[language.as_str(), status.as_str()])
            .inc();
        self.duration
            .with_label_values(&[language.as_str()])
            .observe(elapsed.as_secs_f64());
    }

    /// Records a request answered with an HTTP error.
    pub fn record_rejection(&self, reason: &str) {
        self.rejected.with_label_values(&[reason]).inc();
    }

    /// Counts an execution in flight until the guard drops.
    pub fn in_flight(&self) -> InFlightGuard {
        self.in_flight.inc();
        InFlightGuard(self.in_flight.clone())
    }

    /// Renders every metric in the Prometheus text format, with the pool gauges read from
    /// `health` at this moment.
    pub fn render(&self, health: &ExecutorHealth) -> Result<String, prometheus::Error> {
        for (language, counts) in &health.sandboxes {
            let label = [language.as_str()];
            self.pool_sandboxes
                .with_label_values(&label)
                .set(counts.total as i64);
            self.pool_idle
                .with_label_values(&label)
                .set(counts.ready as i64);
        }
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

/// Decrements the in-flight gauge when dropped, however the request ends.
#[derive(Debug)]
pub struct InFlightGuard(IntGauge);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyperlightd_api::SandboxCounts;
    use std::collections::BTreeMap;

    #[test]
    fn render_includes_recorded_executions_and_pool_gauges() {
        let metrics = Metrics::new().unwrap();
        metrics.record_execution(
            Language::Javascript,
            ExecStatus::Ok,
            Duration::from_millis(3),
        );
        metrics.record_rejection("invalid_request");
        let health = ExecutorHealth {
            hypervisor: "kvm".into(),
            sandboxes: BTreeMap::from([(
                Language::Javascript,
                SandboxCounts { ready: 1, total: 2 },
            )]),
        };
        let text = metrics.render(&health).unwrap();
        assert!(
            text.contains(r#"hyperlightd_executions_total{language="javascript",status="ok"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"hyperlightd_execution_duration_seconds_bucket{language="javascript",le="0.005"} 1"#), "{text}");
        assert!(
            text.contains(r#"hyperlightd_requests_rejected_total{reason="invalid_request"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"hyperlightd_pool_sandboxes{language="javascript"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"hyperlightd_pool_idle_sandboxes{language="javascript"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn in_flight_guard_counts_down_on_drop() {
        let metrics = Metrics::new().unwrap();
        let guard = metrics.in_flight();
        assert_eq!(metrics.in_flight.get(), 1);
        drop(guard);
        assert_eq!(metrics.in_flight.get(), 0);
    }
}
