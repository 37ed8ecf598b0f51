//! The metrics of sessions.

use crate::job::{Language, SessionCounts};
use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec, Opts};

use super::{SANDBOX_BUCKETS, histogram};

/// Live sessions per `language`.
pub const SESSIONS: &str = "hyperlightd_sessions";
/// Host memory the sessions' saved state holds, per `language`, in bytes.
pub const SESSION_MEMORY_BYTES: &str = "hyperlightd_session_memory_bytes";
/// Sessions created, by `language` and `origin` (`new`, `fork`).
pub const SESSIONS_CREATED_TOTAL: &str = "hyperlightd_sessions_created_total";
/// Sessions ended, by `language` and `reason`: `deleted`, or expired at its `idle` timeout or
/// its `lifetime`.
pub const SESSIONS_ENDED_TOTAL: &str = "hyperlightd_sessions_ended_total";
/// Sessions refused at a limit, by `reason` (`count`: --max-sessions, `memory`:
/// --session-memory-mib, `caller`: --max-sessions-per-caller).
pub const SESSIONS_REFUSED_TOTAL: &str = "hyperlightd_sessions_refused_total";
/// Execs in sessions, by `language` and `status` (ok, error, timeout).
pub const SESSION_EXECS_TOTAL: &str = "hyperlightd_session_execs_total";
/// Session execs whose effects were dropped, the session returning to its state from before
/// them, by `language` and `reason` (what the exec did: `timeout`, `out_of_memory`,
/// `guest_failure`, `resource_limit`, `host_panic`, `load_failed`).
pub const SESSION_ROLLBACKS_TOTAL: &str = "hyperlightd_session_rollbacks_total";
/// Session states that could not be saved after an exec (the session kept its state from
/// before the exec), by `language`.
pub const SESSION_SAVE_FAILURES_TOTAL: &str = "hyperlightd_session_save_failures_total";
/// Time to save a session's state after its exec (off the answer's path), by `language`.
pub const SESSION_SAVE_SECONDS: &str = "hyperlightd_session_save_seconds";
/// Time to load a session's state into a sandbox before its exec, by `language`.
pub const SESSION_LOAD_SECONDS: &str = "hyperlightd_session_load_seconds";
/// Session execs by where their state came from (`from`): `sandbox` (still in the sandbox
/// that ran the session's last exec: nothing loaded), `snapshot` (loaded), `warm` (a new
/// session's first), by `language`.
pub const SESSION_RESUMES_TOTAL: &str = "hyperlightd_session_resumes_total";

/// The metrics of sessions.
#[derive(Debug, Clone)]
pub struct SessionMetrics {
    live: IntGaugeVec,
    memory: IntGaugeVec,
    created: IntCounterVec,
    ended: IntCounterVec,
    refused: IntCounterVec,
    execs: IntCounterVec,
    rollbacks: IntCounterVec,
    save_failures: IntCounterVec,
    pub(super) save: HistogramVec,
    pub(super) load: HistogramVec,
    pub(super) resumes: IntCounterVec,
    /// Those of sessions kept on disk.
    pub durable: super::DurableMetrics,
}

impl SessionMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub(super) fn register(registry: &super::Catalog) -> Result<Self, prometheus::Error> {
        let gauge = |name: &str, help: &str| IntGaugeVec::new(Opts::new(name, help), &["language"]);
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels)
        };
        let metrics = SessionMetrics {
            live: gauge(SESSIONS, "Live sessions.")?,
            memory: gauge(
                SESSION_MEMORY_BYTES,
                "Host memory the sessions' saved state holds, in bytes.",
            )?,
            created: counter(
                SESSIONS_CREATED_TOTAL,
                "Sessions created, by origin (new, fork).",
                &["language", "origin"],
            )?,
            ended: counter(
                SESSIONS_ENDED_TOTAL,
                "Sessions ended, by reason (deleted, idle, lifetime).",
                &["language", "reason"],
            )?,
            refused: counter(
                SESSIONS_REFUSED_TOTAL,
                "Sessions refused at a limit, by reason (count, memory, caller).",
                &["reason"],
            )?,
            execs: counter(
                SESSION_EXECS_TOTAL,
                "Execs in sessions, by final status (ok, error, timeout).",
                &["language", "status"],
            )?,
            rollbacks: counter(
                SESSION_ROLLBACKS_TOTAL,
                "Session execs rolled back, by what the exec did (timeout, out_of_memory, guest_failure, resource_limit, host_panic) or request (POST .../rollback).",
                &["language", "reason"],
            )?,
            save_failures: counter(
                SESSION_SAVE_FAILURES_TOTAL,
                "Session states that could not be saved after an exec.",
                &["language"],
            )?,
            save: histogram(
                SESSION_SAVE_SECONDS,
                "Time to save a session's state after its exec, off the answer's path.",
                SANDBOX_BUCKETS,
            )?,
            load: histogram(
                SESSION_LOAD_SECONDS,
                "Time to load a session's state into a sandbox before its exec.",
                SANDBOX_BUCKETS,
            )?,
            resumes: counter(
                SESSION_RESUMES_TOTAL,
                "Session execs by where their state came from (sandbox, snapshot, warm).",
                &["language", "from"],
            )?,
            durable: super::DurableMetrics::register(registry)?,
        };
        registry.register(&metrics.resumes)?;
        registry.register(&metrics.live)?;
        registry.register(&metrics.memory)?;
        registry.register(&metrics.created)?;
        registry.register(&metrics.ended)?;
        registry.register(&metrics.refused)?;
        registry.register(&metrics.execs)?;
        registry.register(&metrics.rollbacks)?;
        registry.register(&metrics.save_failures)?;
        registry.register(&metrics.save)?;
        registry.register(&metrics.load)?;
        Ok(metrics)
    }

    /// Counts a session created, `new` or by a `fork`.
    pub fn created(&self, language: Language, origin: &str) {
        self.created
            .with_label_values(&[language.as_str(), origin])
            .inc();
    }

    /// Counts a session ended for `reason`.
    pub fn ended(&self, language: Language, reason: &str) {
        self.ended
            .with_label_values(&[language.as_str(), reason])
            .inc();
    }

    /// Counts a session refused at the limit `reason`.
    pub fn refused(&self, reason: &str) {
        self.refused.with_label_values(&[reason]).inc();
    }

    /// Counts an exec in a session that ended with `status`.
    pub fn exec(&self, language: Language, status: &str) {
        self.execs
            .with_label_values(&[language.as_str(), status])
            .inc();
    }

    /// Counts a session exec rolled back for `reason`.
    pub fn rolled_back(&self, language: Language, reason: &str) {
        self.rollbacks
            .with_label_values(&[language.as_str(), reason])
            .inc();
    }

    /// Counts a session state that could not be saved.
    pub fn save_failed(&self, language: Language) {
        self.save_failures
            .with_label_values(&[language.as_str()])
            .inc();
    }

    /// Sets the gauges from the sessions' counts now.
    pub(super) fn set(&self, counts: &std::collections::BTreeMap<Language, SessionCounts>) {
        for (language, counts) in counts {
            let label = [language.as_str()];
            self.live
                .with_label_values(&label)
                .set(i64::try_from(counts.live).unwrap_or(i64::MAX));
            self.memory
                .with_label_values(&label)
                .set(i64::try_from(counts.memory_bytes).unwrap_or(i64::MAX));
        }
    }
}
