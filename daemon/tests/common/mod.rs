//! What the daemon's host-side test binaries share: an executor that answers at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hyperlightd::audit::AuditLog;
use hyperlightd::executor::Executor;
use hyperlightd::job::{ExecError, ExecutorHealth, Job, Outcome};
use hyperlightd::job::{Language, PoolCounts, Status};
use hyperlightd::metrics::Metrics;
use hyperlightd::session::{SessionSettings, Sessions};

/// Answers every program at once: `ok`, the first 100 characters of the code as stdout, and the
/// code's length as the result. The program `overload` is refused as an overloaded pool would.
/// Sessions are real (a table with a few slots); their execs are answered like the rest.
pub struct Stub {
    sessions: Arc<Sessions>,
}

impl Stub {
    /// A stub with an empty session table.
    pub fn new() -> Self {
        let settings = SessionSettings {
            max_sessions: 8,
            max_per_caller: 8,
            exempt_uid: None,
            default_idle: Duration::from_secs(60),
            max_idle: Duration::from_secs(60),
            max_lifetime: Duration::from_secs(60),
            memory_budget: 1 << 20,
        };
        let metrics = Metrics::new().expect("metrics").sessions();
        Stub {
            sessions: Arc::new(Sessions::new(
                settings,
                &[Language::Javascript],
                metrics,
                Arc::new(AuditLog::off()),
            )),
        }
    }
}

impl Executor for Stub {
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
            error: None,
            session: None,
            files: Default::default(),
            started: std::time::Instant::now(),
            ran: Duration::from_millis(3),
        })
    }

    fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
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
            packages: BTreeMap::new(),
            memory_mib: BTreeMap::new(),
            sessions: self.sessions.counts(),
        }
    }
}
