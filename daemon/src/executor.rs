//! The boundary between the transport and the core: the [`Executor`] trait that runs jobs
//! (see [`crate::job`] for what a job is and what it produces).
//!
//! The HTTP layer turns a request into a [`Job`] and an [`Outcome`] back into a response; the
//! executor knows nothing of HTTP. That keeps the HTTP layer testable against a stub executor,
//! and lets the Hyperlight executor change (pools, languages) without touching the transport.

use std::future::Future;
use std::sync::Arc;

use crate::job::{ExecError, ExecutorHealth, Job, Outcome};
use crate::session::Sessions;

/// Runs jobs. Implemented by the Hyperlight executor, and by stubs in tests.
pub trait Executor: Send + Sync + 'static {
    /// Runs `job` (in its session, if it names one) and returns its outcome, or says why it
    /// did not run it.
    fn exec(&self, job: Job) -> impl Future<Output = Result<Outcome, ExecError>> + Send;

    /// Current state, for health and metrics.
    fn health(&self) -> ExecutorHealth;

    /// The sessions: create, fork, read, list and delete them (their execs go through
    /// [`exec`](Self::exec)).
    fn sessions(&self) -> &Arc<Sessions>;
}
