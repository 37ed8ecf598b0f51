//! The metrics of tool calls.

use prometheus::{HistogramVec, IntCounterVec, Opts};

use super::{DURATION_BUCKETS, histogram};
use crate::job::Language;
use crate::job::tools::ToolSummary;

/// Tool calls, by `language` and `outcome`: `ok`, `error` (the tool's error), `timeout` (no
/// answer in time), `too_large` (an answer over the limit), `refused` (stopped before it was
/// sent: an unknown tool, bad arguments, a limit), `unanswered` (the execution ended first).
pub const TOOL_CALLS_TOTAL: &str = "hyperlightd_tool_calls_total";
/// Time programs waited for tools' answers, per execution, by `language`.
pub const TOOL_WAIT_SECONDS: &str = "hyperlightd_tool_wait_seconds";

/// The metrics of tool calls.
#[derive(Debug, Clone)]
pub struct ToolMetrics {
    calls: IntCounterVec,
    wait: HistogramVec,
}

impl ToolMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub(super) fn register(registry: &super::Catalog) -> Result<Self, prometheus::Error> {
        let metrics = ToolMetrics {
            calls: IntCounterVec::new(
                Opts::new(
                    TOOL_CALLS_TOTAL,
                    "Tool calls, by outcome (ok, error: the tool's; refused: stopped in the daemon; timeout, too_large, unanswered).",
                ),
                &["language", "outcome"],
            )?,
            wait: histogram(
                TOOL_WAIT_SECONDS,
                "Time an execution's program waited for tools' answers.",
                DURATION_BUCKETS,
            )?,
        };
        registry.register(&metrics.calls)?;
        registry.register(&metrics.wait)?;
        Ok(metrics)
    }

    /// Records what an execution's tool calls came to.
    pub fn record(&self, language: Language, summary: &ToolSummary) {
        for (outcome, count) in &summary.outcomes {
            self.calls
                .with_label_values(&[language.as_str(), outcome])
                .inc_by(u64::from(*count));
        }
        self.wait
            .with_label_values(&[language.as_str()])
            .observe(summary.waited.as_secs_f64());
    }
}
