//! What the daemon's host-side test binaries share: an executor that answers at once.

use std::collections::BTreeMap;
use std::time::Duration;

use hyperlightd::executor::Executor;
use hyperlightd::job::{
    ExecError, ExecutorHealth, Job, Language, Outcome, PoolCounts, SessionSettings, Status,
};

/// Answers every program at once: `ok`, the first 100 characters of the code as stdout, and the
/// code's length as the result. The program `overload` is refused as an overloaded pool would.
/// It keeps no sessions.
#[derive(Debug, Default)]
pub struct Stub;

impl Stub {
    pub fn new() -> Self {
        Stub
    }
}

impl Executor for Stub {
    type Session = std::convert::Infallible;

    async fn exec(&self, job: Job) -> Result<Outcome, ExecError> {
        if job.code == "overload" {
            return Err(ExecError::Overloaded {
                language: job.language,
                queued: 1,
            });
        }
        Ok(Outcome {
            status: Status::Ok,
            stdout: job.code.chars().take(100).collect(),
            stderr: String::new(),
            truncated: false,
            result: serde_json::json!(job.code.len()),
            display: Vec::new(),
            error: None,
            session: None,
            files: Default::default(),
            started: std::time::Instant::now(),
            ran: Duration::from_millis(3),
        })
    }

    fn health(&self) -> ExecutorHealth {
        ExecutorHealth {
            hypervisor: "stub".into(),
            sandboxes: BTreeMap::from([(
                Language::Javascript,
                PoolCounts {
                    ready: 1,
                    total: 1,
                    target: 1,
                },
            )]),
            warmed: true,
            stuck_workers: 0,
            runtimes: BTreeMap::new(),
            memory_mib: BTreeMap::new(),
            sessions: BTreeMap::new(),
            durable: None,
            session_limits: SessionSettings {
                max_sessions: 8,
                max_per_caller: 8,
                exempt_uid: None,
                default_idle: Duration::from_secs(60),
                max_idle: Duration::from_secs(60),
                max_lifetime: Duration::from_secs(60),
                memory_budget: 1 << 20,
                max_checkpoints: 4,
                max_checkpoint_bytes: u64::MAX,
                park_after: None,
            },
        }
    }
}

/// The real API in front of a [`Stub`], with small limits and `body_read_timeout` for a body to
/// arrive; and the metrics it reports to. For the binaries that drive the real server.
#[allow(dead_code)]
pub fn stub_api(
    body_read_timeout: Duration,
) -> (
    std::sync::Arc<hyperlightd::http::Api<Stub>>,
    hyperlightd::metrics::Metrics,
) {
    use hyperlightd::service::{Limits, Service};
    let limits = Limits {
        default_timeout: Duration::from_secs(5),
        max_timeout: Duration::from_secs(5),
        max_body_bytes: 1024 * 1024,
        max_code_bytes: 1024 * 1024,
        max_output_bytes: 1024,
        max_result_bytes: 1024,
        body_read_timeout,
        files: hyperlightd::job::FileLimits {
            max_entries: 16,
            max_bytes: 1024,
        },
        tools: hyperlightd::service::ToolGrants::default(),
    };
    let metrics = hyperlightd::metrics::Metrics::new().unwrap();
    let api = std::sync::Arc::new(hyperlightd::http::Api::of(Service::new(
        std::sync::Arc::new(Stub::new()),
        metrics.clone(),
        limits,
        BTreeMap::new(),
    )));
    (api, metrics)
}

/// The value of `series` in the daemon's metrics; it must be there.
#[allow(dead_code)]
pub fn metric(metrics: &hyperlightd::metrics::Metrics, series: &str) -> f64 {
    let health = Stub::new().health();
    let text = metrics.render(&health.sandboxes, &health.sessions).unwrap();
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(series)?;
            rest.starts_with(' ').then(|| rest.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {series} in the metrics:\n{text}"))
}
