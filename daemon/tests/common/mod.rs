//! What the daemon's host-side test binaries share: an executor that answers at once.

use std::collections::BTreeMap;

use hyperlightd::executor::{ExecError, Executor, ExecutorHealth, Job, Outcome};
use hyperlightd_api::{ExecStatus, Language, SandboxCounts};

/// Answers every program at once: `ok`, the first 100 characters of the code as stdout, and the
/// code's length as the result. The program `overload` is refused as an overloaded pool would.
pub struct Stub;

impl Executor for Stub {
    async fn exec(&self, job: Job) -> Result<Outcome, ExecError> {
        if job.code == "overload" {
            return Err(ExecError::Overloaded {
                language: job.language,
                queued: 1,
            });
        }
        Ok(Outcome {
            status: ExecStatus::Ok,
            stdout: job.code.chars().take(100).collect(),
            stderr: String::new(),
            truncated: false,
            result: serde_json::json!(job.code.len()),
            error: None,
        })
    }

    fn health(&self) -> ExecutorHealth {
        ExecutorHealth {
            hypervisor: "stub".into(),
            sandboxes: BTreeMap::from([(
                Language::Javascript,
                SandboxCounts {
                    ready: 1,
                    total: 1,
                    target: 1,
                },
            )]),
            warmed: true,
            stuck_workers: 0,
            packages: BTreeMap::new(),
            memory_mib: BTreeMap::new(),
        }
    }
}
