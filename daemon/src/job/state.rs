//! A guest's state as a session keeps it, and what a worker did about it after a session's
//! exec.

use std::any::Any;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::{ExecError, Files, Outcome};

/// A guest's saved state: immutable, and cheap to clone (a clone shares it). What is inside is
/// the guest's own business; only a sandbox of the guest that saved it can load it.
#[derive(Clone)]
pub struct SavedState(Arc<dyn Any + Send + Sync>);

impl SavedState {
    /// Wraps a guest's state.
    pub fn new<T: Any + Send + Sync>(state: T) -> Self {
        SavedState(Arc::new(state))
    }

    /// The state, if it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for SavedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SavedState")
    }
}

/// A guest state a worker saved after a session exec, and the host memory it holds.
#[derive(Clone)]
pub struct Saved {
    /// The state.
    pub state: SavedState,
    /// Host memory it holds, in bytes (its files' included).
    pub bytes: u64,
    /// The working directory the exec left.
    pub files: Arc<Files>,
}

impl std::fmt::Debug for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Saved").field("bytes", &self.bytes).finish()
    }
}

/// Where a session's exec starts: the state and working directory its last exec left.
#[derive(Debug, Clone)]
pub struct Resume {
    pub state: SavedState,
    pub files: Arc<Files>,
}

/// What a worker did about a session's state after running one of its execs.
#[derive(Debug)]
pub enum After {
    /// Nothing to save: the program did not get to run (it does not parse).
    Unchanged,
    /// The exec timed out, ran out of memory or brought its sandbox down: its effects are
    /// dropped. The reason is the metrics label.
    RolledBack(&'static str),
    /// The worker is saving the state the exec left; None if saving failed.
    Saving(oneshot::Receiver<Option<Saved>>),
}

/// A job as a worker answers it: its outcome, and what became of the state it ran in.
#[derive(Debug)]
pub struct Ran {
    /// What the program did.
    pub outcome: Outcome,
    /// What becomes of the session's state (always [`After::Unchanged`] outside a session).
    pub after: After,
}

/// What a worker answers for a job: how it ran, or why it did not.
pub type Answer = Result<Ran, ExecError>;
