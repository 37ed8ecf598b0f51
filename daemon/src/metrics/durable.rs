//! The metrics of sessions kept on disk (`--state-dir`).

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts};

use super::SANDBOX_BUCKETS;
use crate::job::{Language, WriteHealth};

/// Checkpoints written to the state directory, by `language`.
pub const CHECKPOINTS_WRITTEN_TOTAL: &str = "hyperlightd_session_checkpoints_written_total";
/// Checkpoints that could not be written (they stay in memory only), by `language`.
pub const CHECKPOINT_WRITE_FAILURES_TOTAL: &str =
    "hyperlightd_session_checkpoint_write_failures_total";
/// Time from an exec's answer until its checkpoint is on disk, by `language`.
pub const CHECKPOINT_DURABLE_SECONDS: &str = "hyperlightd_session_checkpoint_durable_seconds";
/// Bytes the checkpoints in the state directory hold.
pub const CHECKPOINT_DISK_BYTES: &str = "hyperlightd_session_checkpoint_disk_bytes";
/// Checkpoints refused when read back, by `reason` (`missing`, `unreadable`, `other_build`,
/// `other_guest`, `other_sizes`, `truncated`, `corrupt`, `unloadable`).
pub const CHECKPOINT_LOAD_FAILURES_TOTAL: &str =
    "hyperlightd_session_checkpoint_load_failures_total";
/// Time to bring a checkpoint back from disk (every byte checked, the state mapped), by
/// `language`.
pub const CHECKPOINT_RESTORE_SECONDS: &str = "hyperlightd_session_checkpoint_restore_seconds";
/// Sessions whose state is on disk only (parked).
pub const SESSIONS_PARKED: &str = "hyperlightd_sessions_parked";
/// Sessions read back from the state directory at startup, by `outcome` (`intact`,
/// `rolled_back`: back at an older checkpoint, `lost`: no checkpoint usable, `unreadable`: the
/// session's own record could not be read, and it was removed).
pub const SESSIONS_RECOVERED_TOTAL: &str = "hyperlightd_sessions_recovered_total";

/// The metrics of sessions kept on disk.
#[derive(Debug, Clone)]
pub struct DurableMetrics {
    written: IntCounterVec,
    write_failures: IntCounterVec,
    durable: HistogramVec,
    /// Bytes on disk.
    pub disk_bytes: IntGauge,
    load_failures: IntCounterVec,
    restore: HistogramVec,
    /// Parked sessions.
    pub parked: IntGauge,
    recovered: IntCounterVec,
    /// What health says of writing: kept beside the counters, which say how many, not why.
    health: Arc<Mutex<WriteHealth>>,
}

impl DurableMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub(super) fn register(registry: &super::Catalog) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str, label: &str| {
            IntCounterVec::new(Opts::new(name, help), &[label])
        };
        let histogram = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(SANDBOX_BUCKETS.to_vec()),
                &["language"],
            )
        };
        let metrics = DurableMetrics {
            written: counter(
                CHECKPOINTS_WRITTEN_TOTAL,
                "Checkpoints written to the state directory.",
                "language",
            )?,
            write_failures: counter(
                CHECKPOINT_WRITE_FAILURES_TOTAL,
                "Checkpoints that could not be written (kept in memory only).",
                "language",
            )?,
            durable: histogram(
                CHECKPOINT_DURABLE_SECONDS,
                "Time from an exec's answer until its checkpoint is on disk.",
            )?,
            disk_bytes: IntGauge::new(
                CHECKPOINT_DISK_BYTES,
                "Disk the checkpoints in the state directory take, each file once however many checkpoints share it.",
            )?,
            load_failures: counter(
                CHECKPOINT_LOAD_FAILURES_TOTAL,
                "Checkpoints refused when read back, by reason (missing, unreadable, other_build, other_guest, other_sizes, truncated, corrupt, unloadable).",
                "reason",
            )?,
            restore: histogram(
                CHECKPOINT_RESTORE_SECONDS,
                "Time to bring a checkpoint back from disk.",
            )?,
            parked: IntGauge::new(SESSIONS_PARKED, "Sessions whose state is on disk only.")?,
            health: Arc::default(),
            recovered: counter(
                SESSIONS_RECOVERED_TOTAL,
                "Sessions read back from the state directory at startup, by outcome (intact, rolled_back, lost, unreadable).",
                "outcome",
            )?,
        };
        registry.register(&metrics.written)?;
        registry.register(&metrics.write_failures)?;
        registry.register(&metrics.durable)?;
        registry.register(&metrics.disk_bytes)?;
        registry.register(&metrics.load_failures)?;
        registry.register(&metrics.restore)?;
        registry.register(&metrics.parked)?;
        registry.register(&metrics.recovered)?;
        Ok(metrics)
    }

    /// A checkpoint of `language` reached the disk `seconds` after its exec's answer.
    pub fn written(&self, language: Language, seconds: f64) {
        let label = [language.as_str()];
        self.written.with_label_values(&label).inc();
        self.durable.with_label_values(&label).observe(seconds);
        self.health().failing = false;
    }

    /// A checkpoint of `language` could not be written, for `why`.
    pub fn write_failed(&self, language: Language, why: &str) {
        self.write_failures
            .with_label_values(&[language.as_str()])
            .inc();
        self.unwritten(why);
    }

    /// A session's directory or journal line could not be written, for `why`.
    pub fn unwritten(&self, why: &str) {
        let mut health = self.health();
        health.failed += 1;
        health.last_error = Some(why.to_owned());
        health.failing = true;
    }

    /// What health says of writing.
    pub fn write_health(&self) -> WriteHealth {
        self.health().clone()
    }

    fn health(&self) -> std::sync::MutexGuard<'_, WriteHealth> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A checkpoint was refused for `reason`.
    pub fn load_failed(&self, reason: &str) {
        self.load_failures.with_label_values(&[reason]).inc();
    }

    /// A checkpoint of `language` came back from disk in `seconds`.
    pub fn restored(&self, language: Language, seconds: f64) {
        self.restore
            .with_label_values(&[language.as_str()])
            .observe(seconds);
    }

    /// A session was read back at startup with `outcome`.
    pub fn recovered(&self, outcome: &str) {
        self.recovered.with_label_values(&[outcome]).inc();
    }
}
