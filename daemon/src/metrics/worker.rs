//! Where a pool's workers spend their time, by phase of an execution: the guest call, the
//! restore after it, the priming call after that, and a session's load before its exec and
//! save after it. Each phase counts the worker's busy seconds and the page faults its thread
//! took (first touches of memory, those KVM takes on the guest's behalf included): the busy time
//! a sandbox costs per execution is the sum over the phases divided by the executions, which is
//! what an operator sizes a pool from.

use std::time::{Duration, Instant};

use prometheus::{CounterVec, IntCounterVec, Opts};

use crate::job::Language;
use crate::sys::memory::thread_minor_faults;

/// Seconds the workers were busy, by `language` and `phase`.
pub const WORKER_BUSY_SECONDS_TOTAL: &str = "hyperlightd_worker_busy_seconds_total";
/// Page faults of the workers' threads (minor: no disk read), by `language` and `phase`.
pub const WORKER_PAGE_FAULTS_TOTAL: &str = "hyperlightd_worker_page_faults_total";

/// A phase of a worker's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Inside the guest, running a program.
    Call,
    /// Restoring the sandbox to its warm snapshot after a call.
    Restore,
    /// The priming call after a restore.
    Prime,
    /// Loading a session's state before its exec.
    SessionLoad,
    /// Saving a session's state after its exec.
    SessionSave,
}

impl Phase {
    /// Every phase, in the order of an execution.
    pub const ALL: [Phase; 5] = [
        Phase::SessionLoad,
        Phase::Call,
        Phase::SessionSave,
        Phase::Restore,
        Phase::Prime,
    ];

    /// The `phase` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Call => "call",
            Phase::Restore => "restore",
            Phase::Prime => "prime",
            Phase::SessionLoad => "session_load",
            Phase::SessionSave => "session_save",
        }
    }
}

/// The start of a phase on the worker's thread: its clock and its thread's page faults then.
#[derive(Debug, Clone, Copy)]
pub struct PhaseStart {
    at: Instant,
    faults: u64,
}

impl PhaseStart {
    /// Now, on the calling thread (the worker's: faults are counted per thread).
    pub fn now() -> Self {
        PhaseStart {
            at: Instant::now(),
            faults: thread_minor_faults(),
        }
    }

    /// The time since the start.
    pub fn elapsed(&self) -> Duration {
        self.at.elapsed()
    }
}

/// The workers' busy time and page faults, for every language.
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    busy: CounterVec,
    faults: IntCounterVec,
}

impl WorkerMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub(super) fn register(registry: &super::Catalog) -> Result<Self, prometheus::Error> {
        let labels = ["language", "phase"];
        let busy = CounterVec::new(
            Opts::new(
                WORKER_BUSY_SECONDS_TOTAL,
                "Seconds the pools' workers were busy, by language and phase of an execution \
                 (call, restore, prime, session_load, session_save).",
            ),
            &labels,
        )?;
        let faults = IntCounterVec::new(
            Opts::new(
                WORKER_PAGE_FAULTS_TOTAL,
                "Minor page faults of the pools' worker threads (first touches of memory, the \
                 guest's through KVM included), by language and phase.",
            ),
            &labels,
        )?;
        registry.register(&busy)?;
        registry.register(&faults)?;
        Ok(WorkerMetrics { busy, faults })
    }

    /// These metrics for `language`'s pool.
    pub(super) fn of(&self, language: Language) -> LanguageWorkers {
        LanguageWorkers {
            language,
            metrics: self.clone(),
        }
    }
}

/// The workers' metrics bound to one language.
#[derive(Debug, Clone)]
pub struct LanguageWorkers {
    language: Language,
    metrics: WorkerMetrics,
}

impl LanguageWorkers {
    /// Records `phase`, begun at `start` on this thread and ended now; returns its duration.
    pub fn ended(&self, phase: Phase, start: PhaseStart) -> Duration {
        let took = start.elapsed();
        let faults = thread_minor_faults().saturating_sub(start.faults);
        let labels = [self.language.as_str(), phase.as_str()];
        self.metrics
            .busy
            .with_label_values(&labels)
            .inc_by(took.as_secs_f64());
        self.metrics
            .faults
            .with_label_values(&labels)
            .inc_by(faults);
        took
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_counts_its_time_and_the_faults_of_the_memory_it_touched() {
        let registry = crate::metrics::Catalog::default();
        let workers = WorkerMetrics::register(&registry)
            .unwrap()
            .of(Language::Python);
        // 64 MiB, past glibc's largest threshold for a fresh mapping (32 MiB), in 4 KiB pages:
        // 16384 first touches, each a fault (a smaller block may come from memory the
        // allocator already holds, touched).
        crate::sys::memory::disable_transparent_huge_pages().unwrap();
        let start = PhaseStart::now();
        let pages = vec![1u8; 64 << 20];
        std::hint::black_box(&pages);
        let took = workers.ended(Phase::Prime, start);
        let mut out = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let faults = text
            .lines()
            .find(|l| l.starts_with(WORKER_PAGE_FAULTS_TOTAL) && l.contains("prime"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap();
        assert!(faults >= 8192, "{text}");
        assert!(took > Duration::ZERO);
        assert!(
            text.contains(
                r#"hyperlightd_worker_busy_seconds_total{language="python",phase="prime"}"#
            ),
            "{text}"
        );
    }
}
