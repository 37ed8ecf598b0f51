//! The boundary between the front ends and the core: the [`Executor`] trait, which runs jobs and
//! keeps sessions, in the core's own types (see [`crate::job`]).
//!
//! Above it, the service layer decides what a request may do, and the transports (HTTP, and
//! whatever comes next) parse and answer; below it, [`hyperlight`] composes the sandbox pools
//! and the session table. Nothing here knows of HTTP or of the API's wire types, which keeps the
//! layers above testable against a stub executor, and lets the core change (pools, languages)
//! without touching them.

pub mod hyperlight;
#[cfg(test)]
pub mod testing;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::job::{
    CheckpointInfo, Env, ExecError, ExecutorHealth, Files, Job, Labels, Language, Outcome,
    Principal, Runtime, SessionInfo,
};

pub use self::hyperlight::{ExecutorStartError, HyperlightExecutor};
use crate::session::Sessions;

/// Runs jobs, in a fresh interpreter or in a session's. Implemented by the Hyperlight executor,
/// and by stubs in tests. Sessions belong to the uid that created them: to any other `owner`
/// they do not exist.
///
/// What is done to sessions between execs is the session table's business: an executor that
/// keeps sessions hands out its table ([`session_table`](Self::session_table)), and the
/// default bodies of those methods are the table's. Without one, they are those of an executor
/// that keeps no sessions (every id is unknown, none can be created): stubs that test
/// something else implement only [`exec`](Self::exec) and [`health`](Self::health).
pub trait Executor: Send + Sync + 'static {
    /// A live session as [`find_session`](Self::find_session) found it, handed back to run an
    /// exec in it: the session is looked up once.
    type Session: Send + 'static;

    /// Runs `job` in a fresh interpreter and returns its outcome, or says why it did not run
    /// it.
    fn exec(&self, job: Job) -> impl Future<Output = Result<Outcome, ExecError>> + Send;

    /// Current state, for health and metrics.
    fn health(&self) -> ExecutorHealth;

    /// What runs `language`'s programs (as health names it), if it is served.
    fn runtime(&self, language: Language) -> Option<Runtime> {
        self.health().runtimes.remove(&language)
    }

    /// The table its sessions live in; None: it keeps none.
    fn session_table(&self) -> Option<&Arc<Sessions>> {
        None
    }

    /// Creates a session of `language` for `owner`, idle for at most `idle_timeout` (the
    /// default when None), with `labels` and `env`.
    fn create_session(
        &self,
        owner: &Principal,
        language: Language,
        idle_timeout: Option<Duration>,
        labels: Labels,
        env: Env,
    ) -> Result<SessionInfo, ExecError> {
        let table = self.session_table();
        let table = table.ok_or(ExecError::LanguageNotServed(language))?;
        table.create(owner, language, idle_timeout, labels, env)
    }

    /// `owner`'s session `id`, and its language, to run an exec in.
    fn find_session(
        &self,
        _owner: &Principal,
        id: &str,
    ) -> Result<(Self::Session, Language), ExecError> {
        Err(ExecError::SessionNotFound(id.to_owned()))
    }

    /// Runs `job` in `session`, after the execs that arrived before it; its outcome names the
    /// session. Once its turn has come, it runs to its end even if nobody waits for it.
    fn exec_in_session(
        &self,
        _session: Self::Session,
        _job: Job,
    ) -> impl Future<Output = Result<Outcome, ExecError>> + Send {
        async {
            Err(ExecError::Internal(
                "this executor keeps no sessions".to_owned(),
            ))
        }
    }

    /// A new session of `owner` whose state is a copy of its session `id`'s checkpoint
    /// `checkpoint` (its newest when None), as the execs that arrived before left it (waiting
    /// at most `wait` for them).
    fn fork_session(
        &self,
        owner: &Principal,
        id: &str,
        checkpoint: Option<u64>,
        wait: Duration,
    ) -> impl Future<Output = Result<SessionInfo, ExecError>> + Send {
        async move { table(self, id)?.fork(owner, id, checkpoint, wait).await }
    }

    /// Parks `owner`'s session `id` now, after the execs that arrived before (waiting at most
    /// `wait` for them and for its state to reach the disk).
    fn park_session(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<SessionInfo, ExecError>> + Send {
        async move { table(self, id)?.park_now(owner, id, wait).await }
    }

    /// The checkpoints of `owner`'s session `id`, oldest first, as the execs that arrived
    /// before left them (waiting at most `wait` for them).
    fn session_checkpoints(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<CheckpointInfo>, ExecError>> + Send {
        async move { table(self, id)?.checkpoints(owner, id, wait).await }
    }

    /// Returns `owner`'s session `id` to its checkpoint `checkpoint`, dropping the later ones,
    /// after the execs that arrived before (waiting at most `wait` for them).
    fn rollback_session(
        &self,
        owner: &Principal,
        id: &str,
        checkpoint: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<SessionInfo, ExecError>> + Send {
        async move { table(self, id)?.rollback(owner, id, checkpoint, wait).await }
    }

    /// `owner`'s session `id`.
    fn session(&self, owner: &Principal, id: &str) -> Result<SessionInfo, ExecError> {
        table(self, id)?.get(owner, id)
    }

    /// Every live session of `owner` that has all of `labels`, oldest first.
    fn sessions(&self, owner: &Principal, labels: &Labels) -> Vec<SessionInfo> {
        self.session_table()
            .map(|table| table.list(owner, labels))
            .unwrap_or_default()
    }

    /// Sets `owner`'s session `id`'s idle timeout, counted from now (capped at the maximum).
    fn set_session_idle_timeout(
        &self,
        owner: &Principal,
        id: &str,
        idle: Duration,
    ) -> Result<SessionInfo, ExecError> {
        table(self, id)?.set_idle_timeout(owner, id, idle)
    }

    /// Deletes `owner`'s session `id`; an exec already running finishes. Returns its language.
    fn delete_session(&self, owner: &Principal, id: &str) -> Result<Language, ExecError> {
        table(self, id)?.delete(owner, id)
    }

    /// The working directory of `owner`'s session `id`, as the execs that arrived before left
    /// it (waiting at most `wait` for them).
    fn session_files(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Arc<Files>, ExecError>> + Send {
        async move { table(self, id)?.files(owner, id, wait).await }
    }

    /// The working directory of `owner`'s session `id` at its newest checkpoint, without
    /// waiting for an exec in flight (see [`Sessions::head_files`]).
    fn session_head_files(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Arc<Files>, ExecError>> + Send {
        async move { table(self, id)?.head_files(owner, id, wait).await }
    }
}

/// `executor`'s session table, or: no session `id` (it keeps none).
fn table<'a, E: Executor + ?Sized>(
    executor: &'a E,
    id: &str,
) -> Result<&'a Arc<Sessions>, ExecError> {
    executor
        .session_table()
        .ok_or_else(|| ExecError::SessionNotFound(id.to_owned()))
}
