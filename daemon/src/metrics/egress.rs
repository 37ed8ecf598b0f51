//! The metrics of outbound HTTP (egress): requests by outcome, bytes each way, and how long
//! each took. Destinations are not labels (they are in the audit log).

use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts};

use super::DURATION_BUCKETS;

/// Outbound requests (each redirect followed is one), by `outcome`: `ok` (a response came,
/// whatever its status), `refused` (not allowed: no rule, a refused address), `invalid` (a
/// malformed request), `limit` (an execution's limit reached), `timeout`, `failed` (the
/// network, TLS or the server).
pub const EGRESS_REQUESTS_TOTAL: &str = "hyperlightd_egress_requests_total";
/// Bytes of outbound requests' bodies, by `direction`: `sent`, `received`.
pub const EGRESS_BYTES_TOTAL: &str = "hyperlightd_egress_bytes_total";
/// Time from an outbound request's start to its response's end, for requests that got one.
pub const EGRESS_REQUEST_SECONDS: &str = "hyperlightd_egress_request_seconds";

/// The metrics of outbound requests.
#[derive(Debug, Clone)]
pub struct EgressMetrics {
    requests: IntCounterVec,
    bytes: IntCounterVec,
    seconds: Histogram,
}

impl EgressMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub(super) fn register(registry: &super::Catalog) -> Result<Self, prometheus::Error> {
        let metrics = EgressMetrics {
            requests: IntCounterVec::new(
                Opts::new(
                    EGRESS_REQUESTS_TOTAL,
                    "Outbound HTTP requests, each redirect followed one, by outcome (ok: a response came, whatever its status; refused, invalid, limit, timeout, failed).",
                ),
                &["outcome"],
            )?,
            bytes: IntCounterVec::new(
                Opts::new(
                    EGRESS_BYTES_TOTAL,
                    "Bytes of outbound requests' bodies, by direction (sent, received).",
                ),
                &["direction"],
            )?,
            seconds: Histogram::with_opts(
                HistogramOpts::new(EGRESS_REQUEST_SECONDS, "Time outbound requests took.")
                    .buckets(DURATION_BUCKETS.to_vec()),
            )?,
        };
        registry.register(&metrics.requests)?;
        registry.register(&metrics.bytes)?;
        registry.register(&metrics.seconds)?;
        Ok(metrics)
    }

    /// Records one request: its outcome, its bytes, and its time when a response came.
    pub fn record(&self, outcome: &str, sent: usize, received: usize, seconds: Option<f64>) {
        self.requests.with_label_values(&[outcome]).inc();
        self.bytes.with_label_values(&["sent"]).inc_by(sent as u64);
        self.bytes
            .with_label_values(&["received"])
            .inc_by(received as u64);
        if let Some(seconds) = seconds {
            self.seconds.observe(seconds);
        }
    }
}
