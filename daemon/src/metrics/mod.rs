//! Prometheus metrics: every name is a constant here, every label is of low cardinality
//! (language, status, reason), never the code or a caller's identity.

use std::time::Duration;

use std::collections::BTreeMap;

use crate::job::tools::ToolSummary;
use crate::job::{Language, PoolCounts, SessionCounts, Status};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    TextEncoder,
};

mod catalog;
mod durable;
mod egress;
mod packages;
mod session;
mod tools;
mod worker;

use self::catalog::Catalog;
pub use self::catalog::MetricDoc;
pub use self::durable::*;
pub use self::egress::*;
pub use self::packages::*;
pub use self::session::*;
pub use self::tools::*;
pub use self::worker::{LanguageWorkers, Phase, PhaseStart, WorkerMetrics};
pub use self::worker::{WORKER_BUSY_SECONDS_TOTAL, WORKER_PAGE_FAULTS_TOTAL};

/// Executions by `language` and `status` (ok, error, timeout).
pub const EXECUTIONS_TOTAL: &str = "hyperlightd_executions_total";
/// Time from a request's arrival to the end of its execution, by `language`.
pub const EXECUTION_DURATION_SECONDS: &str = "hyperlightd_execution_duration_seconds";
/// Requests answered with a 4xx/5xx, by `reason` (the error kind).
pub const REQUESTS_REJECTED_TOTAL: &str = "hyperlightd_requests_rejected_total";
/// Executions running or waiting for a sandbox.
pub const EXECUTIONS_IN_FLIGHT: &str = "hyperlightd_executions_in_flight";
/// Client connections open now.
pub const CONNECTIONS_OPEN: &str = "hyperlightd_connections_open";
/// Client connections the daemon closed or refused, by `reason`: `idle_timeout` (no request
/// for `--idle-timeout-ms`), `replaced` (at `--max-connections`, the one that had waited
/// longest made room for a new one), `refused` (at the cap with every connection running a
/// request).
pub const CONNECTIONS_DROPPED_TOTAL: &str = "hyperlightd_connections_dropped_total";
/// Sandboxes per `language`, busy or idle.
pub const POOL_SANDBOXES: &str = "hyperlightd_pool_sandboxes";
/// Idle sandboxes per `language`, ready to take a request.
pub const POOL_IDLE_SANDBOXES: &str = "hyperlightd_pool_idle_sandboxes";
/// Time a request waited for a sandbox, by `language`.
pub const QUEUE_WAIT_SECONDS: &str = "hyperlightd_queue_wait_seconds";
/// Time spent inside the guest per execution (the call into the micro-VM), by `language`: the
/// execution duration less this is the daemon's own cost.
pub const GUEST_CALL_SECONDS: &str = "hyperlightd_guest_call_seconds";
/// Time to make a language's template ready, by `language` and `source`: `built` from scratch
/// (runtime loaded, runner registered, primed, snapshot taken), or `loaded` from a snapshot
/// saved on disk. Once per pool.
pub const SANDBOX_TEMPLATE_SECONDS: &str = "hyperlightd_sandbox_template_seconds";
/// Time to build a warm sandbox from its language's template, by `language`.
pub const SANDBOX_CREATE_SECONDS: &str = "hyperlightd_sandbox_create_seconds";
/// Time to restore a sandbox to its warm snapshot after a request, by `language`.
pub const SANDBOX_RESTORE_SECONDS: &str = "hyperlightd_sandbox_restore_seconds";
/// Time a sandbox spent priming after its restore (Python), by `language`.
pub const SANDBOX_PRIME_SECONDS: &str = "hyperlightd_sandbox_prime_seconds";
/// Sandboxes dropped and replaced from the template, by `language` and `reason`: what left them
/// unusable (see `sandbox::pool::Recycle`).
pub const SANDBOXES_RECYCLED_TOTAL: &str = "hyperlightd_sandboxes_recycled_total";
/// Sandboxes that a call poisoned and a restore to their warm snapshot put back in service, by
/// `language` and `reason` (what poisoned them).
pub const SANDBOXES_RESTORED_AFTER_POISON_TOTAL: &str =
    "hyperlightd_sandboxes_restored_after_poison_total";
/// Worker threads that panicked outside a guarded guest call and were started again, by
/// `language`. Each is a bug in the daemon; the log has the panic's message.
pub const WORKER_RESTARTS_TOTAL: &str = "hyperlightd_worker_restarts_total";

/// Audit log lines, by `outcome`: `written`, or `failed` (a full disk, an unwritable file;
/// the line is lost).
pub const AUDIT_LINES_TOTAL: &str = "hyperlightd_audit_lines_total";

/// Buckets from 1 ms to 60 s: warm executions take milliseconds, time limits reach a minute.
pub(crate) const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets from 100 µs to 10 s: restores take about a millisecond, builds tens to hundreds.
pub(crate) const SANDBOX_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0,
];

/// The daemon's metrics, in a registry of their own.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Catalog,
    executions: IntCounterVec,
    duration: HistogramVec,
    rejected: IntCounterVec,
    in_flight: IntGauge,
    connections_open: IntGauge,
    connections_dropped: IntCounterVec,
    pool_sandboxes: IntGaugeVec,
    pool_idle: IntGaugeVec,
    queue_wait: HistogramVec,
    guest_call: HistogramVec,
    template: HistogramVec,
    create: HistogramVec,
    restore: HistogramVec,
    prime: HistogramVec,
    recycled: IntCounterVec,
    restored_after_poison: IntCounterVec,
    worker_restarts: IntCounterVec,
    sessions: SessionMetrics,
    tools: ToolMetrics,
    egress: EgressMetrics,
    packages: PackageMetrics,
    workers: WorkerMetrics,
    audit: IntCounterVec,
}

/// A histogram by `language`.
fn histogram(name: &str, help: &str, buckets: &[f64]) -> Result<HistogramVec, prometheus::Error> {
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        &["language"],
    )
}

/// The metrics one pool records, bound to its language.
#[derive(Debug, Clone)]
pub struct PoolMetrics {
    language: Language,
    /// Time requests waited for a sandbox.
    pub queue_wait: Histogram,
    /// Time inside the guest per execution.
    pub guest_call: Histogram,
    template: HistogramVec,
    /// Time to build a warm sandbox from the template.
    pub create: Histogram,
    /// Time to restore a sandbox after a request.
    pub restore: Histogram,
    /// Time to prime a sandbox after its restore.
    pub prime: Histogram,
    /// Time to save a session's state after its exec.
    pub session_save: Histogram,
    /// Time to load a session's state before its exec.
    pub session_load: Histogram,
    session_resumes: IntCounterVec,
    recycled: IntCounterVec,
    restored_after_poison: IntCounterVec,
    worker_restarts: IntCounterVec,
    /// The workers' busy time and page faults, by phase.
    pub workers: LanguageWorkers,
}

impl PoolMetrics {
    /// Records how the pool's template was made ready.
    pub fn template(&self, source: &str, took: Duration) {
        self.template
            .with_label_values(&[self.language.as_str(), source])
            .observe(took.as_secs_f64());
    }

    /// Counts a session exec whose state came `from` the sandbox, a snapshot, or warm.
    pub fn session_resumed(&self, from: &str) {
        self.session_resumes
            .with_label_values(&[self.language.as_str(), from])
            .inc();
    }

    /// Counts a sandbox dropped and rebuilt for `reason`.
    pub fn recycled(&self, reason: &str) {
        self.recycled
            .with_label_values(&[self.language.as_str(), reason])
            .inc();
    }

    /// Counts a sandbox poisoned for `reason` and put back in service by a restore.
    pub fn restored_after_poison(&self, reason: &str) {
        self.restored_after_poison
            .with_label_values(&[self.language.as_str(), reason])
            .inc();
    }

    /// Counts a worker thread started again after a panic.
    pub fn worker_restarted(&self) {
        self.worker_restarts
            .with_label_values(&[self.language.as_str()])
            .inc();
    }
}

impl Metrics {
    /// What every metric is: name, type, help and labels, by name (the metric reference).
    pub fn reference(&self) -> Vec<MetricDoc> {
        self.registry.docs()
    }

    /// Creates and registers every metric.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Catalog::default();
        let executions = IntCounterVec::new(
            Opts::new(
                EXECUTIONS_TOTAL,
                "Executions by language and final status (ok, error, timeout).",
            ),
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
                "Requests answered with an HTTP error, by reason (the error kind).",
            ),
            &["reason"],
        )?;
        let in_flight = IntGauge::new(
            EXECUTIONS_IN_FLIGHT,
            "Executions running or waiting for a sandbox.",
        )?;
        let connections_open = IntGauge::new(CONNECTIONS_OPEN, "Client connections open now.")?;
        let connections_dropped = IntCounterVec::new(
            Opts::new(
                CONNECTIONS_DROPPED_TOTAL,
                "Client connections the daemon closed or refused, by reason (idle_timeout, replaced, refused).",
            ),
            &["reason"],
        )?;
        let pool_sandboxes = IntGaugeVec::new(
            Opts::new(POOL_SANDBOXES, "Sandboxes per language, busy or idle."),
            &["language"],
        )?;
        let pool_idle = IntGaugeVec::new(
            Opts::new(POOL_IDLE_SANDBOXES, "Idle sandboxes per language."),
            &["language"],
        )?;
        let queue_wait = histogram(
            QUEUE_WAIT_SECONDS,
            "Time a request waited for a sandbox.",
            DURATION_BUCKETS,
        )?;
        let guest_call = histogram(
            GUEST_CALL_SECONDS,
            "Time spent inside the guest per execution.",
            DURATION_BUCKETS,
        )?;
        let template = HistogramVec::new(
            HistogramOpts::new(
                SANDBOX_TEMPLATE_SECONDS,
                "Time to make a language's template ready, by source (built from scratch, loaded from --snapshot-dir).",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["language", "source"],
        )?;
        let create = histogram(
            SANDBOX_CREATE_SECONDS,
            "Time to build a warm sandbox from its language's template.",
            SANDBOX_BUCKETS,
        )?;
        let restore = histogram(
            SANDBOX_RESTORE_SECONDS,
            "Time to restore a sandbox to its warm snapshot after a request.",
            SANDBOX_BUCKETS,
        )?;
        let prime = histogram(
            SANDBOX_PRIME_SECONDS,
            "Time a sandbox spent priming after its restore, off the next request's path.",
            SANDBOX_BUCKETS,
        )?;
        let recycled = IntCounterVec::new(
            Opts::new(
                SANDBOXES_RECYCLED_TOTAL,
                "Sandboxes dropped and replaced by a new one from the template, by reason (restore_failed, host_panic).",
            ),
            &["language", "reason"],
        )?;
        let restored_after_poison = IntCounterVec::new(
            Opts::new(
                SANDBOXES_RESTORED_AFTER_POISON_TOTAL,
                "Sandboxes poisoned by a call and put back in service by a restore, by reason (timeout, out_of_memory, guest_failure, resource_limit).",
            ),
            &["language", "reason"],
        )?;
        let worker_restarts = IntCounterVec::new(
            Opts::new(
                WORKER_RESTARTS_TOTAL,
                "Worker threads started again after a panic outside a guest call.",
            ),
            &["language"],
        )?;
        registry.register(&queue_wait)?;
        registry.register(&guest_call)?;
        registry.register(&template)?;
        registry.register(&create)?;
        registry.register(&restore)?;
        registry.register(&prime)?;
        registry.register(&recycled)?;
        registry.register(&restored_after_poison)?;
        registry.register(&worker_restarts)?;
        registry.register(&executions)?;
        registry.register(&duration)?;
        registry.register(&rejected)?;
        registry.register(&in_flight)?;
        registry.register(&connections_open)?;
        registry.register(&connections_dropped)?;
        registry.register(&pool_sandboxes)?;
        registry.register(&pool_idle)?;
        let sessions = SessionMetrics::register(&registry)?;
        let tools = ToolMetrics::register(&registry)?;
        let egress = EgressMetrics::register(&registry)?;
        let packages = PackageMetrics::register(&registry)?;
        let workers = WorkerMetrics::register(&registry)?;
        let audit = IntCounterVec::new(
            Opts::new(
                AUDIT_LINES_TOTAL,
                "Audit log lines, by outcome (written, failed: lost).",
            ),
            &["outcome"],
        )?;
        registry.register(&audit)?;
        Ok(Metrics {
            registry,
            executions,
            duration,
            rejected,
            in_flight,
            connections_open,
            connections_dropped,
            pool_sandboxes,
            pool_idle,
            queue_wait,
            guest_call,
            template,
            create,
            restore,
            prime,
            recycled,
            restored_after_poison,
            worker_restarts,
            sessions,
            tools,
            egress,
            packages,
            workers,
            audit,
        })
    }

    /// Audit log lines, by `outcome`.
    pub fn audit(&self) -> IntCounterVec {
        self.audit.clone()
    }

    /// The metrics of outbound HTTP.
    pub fn egress(&self) -> EgressMetrics {
        self.egress.clone()
    }

    /// The metrics of package installs.
    pub fn packages(&self) -> PackageMetrics {
        self.packages.clone()
    }

    /// The metrics of sessions.
    pub fn sessions(&self) -> SessionMetrics {
        self.sessions.clone()
    }

    /// The metrics of `language`'s pool.
    pub fn pool(&self, language: Language) -> PoolMetrics {
        let label = [language.as_str()];
        PoolMetrics {
            language,
            queue_wait: self.queue_wait.with_label_values(&label),
            guest_call: self.guest_call.with_label_values(&label),
            template: self.template.clone(),
            create: self.create.with_label_values(&label),
            restore: self.restore.with_label_values(&label),
            prime: self.prime.with_label_values(&label),
            session_save: self.sessions.save.with_label_values(&label),
            session_load: self.sessions.load.with_label_values(&label),
            session_resumes: self.sessions.resumes.clone(),
            recycled: self.recycled.clone(),
            restored_after_poison: self.restored_after_poison.clone(),
            worker_restarts: self.worker_restarts.clone(),
            workers: self.workers.of(language),
        }
    }

    /// Records a finished execution.
    pub fn record_execution(&self, language: Language, status: Status, elapsed: Duration) {
        self.executions
            .with_label_values(&[language.as_str(), status.as_str()])
            .inc();
        self.duration
            .with_label_values(&[language.as_str()])
            .observe(elapsed.as_secs_f64());
    }

    /// Records what an execution's tool calls came to.
    pub fn record_tool_calls(&self, language: Language, summary: &ToolSummary) {
        self.tools.record(language, summary);
    }

    /// Records a request answered with an HTTP error.
    pub fn record_rejection(&self, reason: &str) {
        self.rejected.with_label_values(&[reason]).inc();
    }

    /// Sets the number of open client connections.
    pub fn set_connections_open(&self, open: usize) {
        self.connections_open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Counts a client connection closed or refused for `reason`.
    pub fn connection_dropped(&self, reason: &str) {
        self.connections_dropped.with_label_values(&[reason]).inc();
    }

    /// Counts an execution in flight until the guard drops.
    pub fn in_flight(&self) -> InFlightGuard {
        self.in_flight.inc();
        InFlightGuard(self.in_flight.clone())
    }

    /// Renders every metric in the Prometheus text format, with the pool and session gauges
    /// set from `sandboxes` and `sessions`, read at this moment.
    pub fn render(
        &self,
        sandboxes: &BTreeMap<Language, PoolCounts>,
        sessions: &BTreeMap<Language, SessionCounts>,
    ) -> Result<String, prometheus::Error> {
        for (language, counts) in sandboxes {
            let label = [language.as_str()];
            self.pool_sandboxes
                .with_label_values(&label)
                .set(counts.total as i64);
            self.pool_idle
                .with_label_values(&label)
                .set(counts.ready as i64);
        }
        self.sessions.set(sessions);
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

    #[test]
    fn render_includes_recorded_executions_and_pool_gauges() {
        let metrics = Metrics::new().unwrap();
        metrics.record_execution(Language::Javascript, Status::Ok, Duration::from_millis(3));
        metrics.record_rejection("invalid_request");
        let sandboxes = BTreeMap::from([(
            Language::Javascript,
            PoolCounts {
                ready: 1,
                total: 2,
                target: 2,
            },
        )]);
        let text = metrics.render(&sandboxes, &BTreeMap::new()).unwrap();
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
