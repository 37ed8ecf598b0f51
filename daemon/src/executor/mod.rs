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
    CheckpointInfo, ExecError, ExecutorHealth, Files, Job, Language, Outcome, SessionInfo,
};

pub use self::hyperlight::HyperlightExecutor;

/// Runs jobs, in a fresh interpreter or in a session's. Implemented by the Hyperlight executor,
/// and by stubs in tests. Sessions belong to the uid that created them: to any other `owner`
/// they do not exist.
///
/// The session methods' default bodies are those of an executor that keeps no sessions (every
/// id is unknown, none can be created): stubs that test something else implement only
/// [`exec`](Self::exec) and [`health`](Self::health).
pub trait Executor: Send + Sync + 'static {
    /// A live session as [`find_session`](Self::find_session) found it, handed back to run an
    /// exec in it: the session is looked up once.
    type Session: Send + 'static;

    /// Runs `job` in a fresh interpreter and returns its outcome, or says why it did not run
    /// it.
    fn exec(&self, job: Job) -> impl Future<Output = Result<Outcome, ExecError>> + Send;

    /// Current state, for health and metrics.
    fn health(&self) -> ExecutorHealth;

    /// Creates a session of `language` for `owner`, idle for at most `idle_timeout` (the
    /// default when None).
    fn create_session(
        &self,
        _owner: u32,
        language: Language,
        _idle_timeout: Option<Duration>,
    ) -> Result<SessionInfo, ExecError> {
        Err(ExecError::LanguageNotServed(language))
    }

    /// `owner`'s session `id`, and its language, to run an exec in.
    fn find_session(&self, _owner: u32, id: &str) -> Result<(Self::Session, Language), ExecError> {
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
        _owner: u32,
        id: &str,
        _checkpoint: Option<u64>,
        _wait: Duration,
    ) -> impl Future<Output = Result<SessionInfo, ExecError>> + Send {
        let unknown = ExecError::SessionNotFound(id.to_owned());
        async { Err(unknown) }
    }

    /// The checkpoints of `owner`'s session `id`, oldest first, as the execs that arrived
    /// before left them (waiting at most `wait` for them).
    fn session_checkpoints(
        &self,
        _owner: u32,
        id: &str,
        _wait: Duration,
    ) -> impl Future<Output = Result<Vec<CheckpointInfo>, ExecError>> + Send {
        let unknown = ExecError::SessionNotFound(id.to_owned());
        async { Err(unknown) }
    }

    /// Returns `owner`'s session `id` to its checkpoint `checkpoint`, dropping the later ones,
    /// after the execs that arrived before (waiting at most `wait` for them).
    fn rollback_session(
        &self,
        _owner: u32,
        id: &str,
        _checkpoint: u64,
        _wait: Duration,
    ) -> impl Future<Output = Result<SessionInfo, ExecError>> + Send {
        let unknown = ExecError::SessionNotFound(id.to_owned());
        async { Err(unknown) }
    }

    /// `owner`'s session `id`.
    fn session(&self, _owner: u32, id: &str) -> Result<SessionInfo, ExecError> {
        Err(ExecError::SessionNotFound(id.to_owned()))
    }

    /// Every live session of `owner`, oldest first.
    fn sessions(&self, _owner: u32) -> Vec<SessionInfo> {
        Vec::new()
    }

    /// Deletes `owner`'s session `id`; an exec already running finishes. Returns its language.
    fn delete_session(&self, _owner: u32, id: &str) -> Result<Language, ExecError> {
        Err(ExecError::SessionNotFound(id.to_owned()))
    }

    /// The working directory of `owner`'s session `id`, as the execs that arrived before left
    /// it (waiting at most `wait` for them).
    fn session_files(
        &self,
        _owner: u32,
        id: &str,
        _wait: Duration,
    ) -> impl Future<Output = Result<Arc<Files>, ExecError>> + Send {
        let unknown = ExecError::SessionNotFound(id.to_owned());
        async { Err(unknown) }
    }
}
