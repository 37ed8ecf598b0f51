//! The metrics of runtime package installs: installs by outcome, requests to the indexes and
//! the bytes they brought, wheels taken from the cache. Package names are not labels (they are
//! in the audit log).

use prometheus::{IntCounter, IntCounterVec, Opts};

/// Installs (an API request or a program's `%pip install` lines), by `outcome`: `installed`,
/// `present` (everything asked for was there), `install_failed` (in the sandbox), `not_kept`
/// (installed, but the exec's effects were dropped: a timeout, for one), or the reason it was
/// refused (`denied`, `not_found`, `no_wheel`, `conflict`, `too_large`,
/// `too_many`, `hash_mismatch`, `bad_wheel`, `index_unavailable`, `invalid`, `unsupported`,
/// `off`).
pub const PACKAGE_INSTALLS_TOTAL: &str = "hyperlightd_package_installs_total";
/// Requests made to the package indexes (pages and wheels, each redirect one).
pub const PACKAGE_INDEX_REQUESTS_TOTAL: &str = "hyperlightd_package_index_requests_total";
/// Bytes the package indexes answered with.
pub const PACKAGE_FETCHED_BYTES_TOTAL: &str = "hyperlightd_package_fetched_bytes_total";
/// Wheels installed from the host's cache, with no request to an index.
pub const PACKAGE_CACHE_HITS_TOTAL: &str = "hyperlightd_package_cache_hits_total";

/// The metrics of installs.
#[derive(Debug, Clone)]
pub struct PackageMetrics {
    pub installs: IntCounterVec,
    pub index_requests: IntCounter,
    pub fetched_bytes: IntCounter,
    pub cache_hits: IntCounter,
}

impl PackageMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub(super) fn register(registry: &super::Catalog) -> Result<Self, prometheus::Error> {
        let metrics = PackageMetrics {
            installs: IntCounterVec::new(
                Opts::new(
                    PACKAGE_INSTALLS_TOTAL,
                    "Package installs, by outcome (installed, present, install_failed, not_kept, or why one was refused).",
                ),
                &["outcome"],
            )?,
            index_requests: IntCounter::new(
                PACKAGE_INDEX_REQUESTS_TOTAL,
                "Requests made to the package indexes, each redirect one.",
            )?,
            fetched_bytes: IntCounter::new(
                PACKAGE_FETCHED_BYTES_TOTAL,
                "Bytes the package indexes answered with.",
            )?,
            cache_hits: IntCounter::new(
                PACKAGE_CACHE_HITS_TOTAL,
                "Wheels installed from the host's cache.",
            )?,
        };
        registry.register(&metrics.installs)?;
        registry.register(&metrics.index_requests)?;
        registry.register(&metrics.fetched_bytes)?;
        registry.register(&metrics.cache_hits)?;
        Ok(metrics)
    }
}
