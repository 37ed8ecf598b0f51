//! What callers do with a session's state between execs: fork it, read its files, list its
//! checkpoints, roll it back. Each waits for the execs that arrived before it (their turns,
//! and the saving of what they left), so that it sees the state they left.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tracing::info;

use super::history::History;
use super::{Session, Sessions, Start};
use crate::job::{CheckpointInfo, ExecError, Files, Principal, SessionInfo};

impl Sessions {
    /// A new session of `owner` whose checkpoint 0 is its session `id`'s checkpoint
    /// `checkpoint` (its newest when None), after the execs that arrived before (waiting at
    /// most `wait` for them). The origin is not changed.
    pub async fn fork(
        &self,
        owner: &Principal,
        id: &str,
        checkpoint: Option<u64>,
        wait: Duration,
    ) -> Result<SessionInfo, ExecError> {
        let (origin, mut history) = self.settled(owner, id, wait).await?;
        let number = checkpoint.unwrap_or_else(|| history.head().number());
        let start = history.get(number)?.clone();
        let image = match (start.image(), start.disk()) {
            (Some(image), _) => Some(image.clone()),
            (None, Some(disk)) => {
                // Parked: brought back, to be shared with the fork.
                let image = self
                    .bring_back(&origin, disk)
                    .await
                    .map_err(|why| unavailable(number, &why.to_string()))?;
                history.unpark(number, image.clone());
                origin.meta().record(&history);
                Some(image)
            }
            (None, None) => None,
        };
        drop(history);
        let start = Start {
            bytes: image.as_ref().map_or(0, |image| image.bytes()),
            image,
            from_disk: start.disk().cloned(),
        };
        let (labels, env) = (origin.labels.clone(), origin.env.clone());
        let idle_timeout = origin.meta().idle_timeout;
        let fork = self.insert(owner, origin.language, labels, env, idle_timeout, start)?;
        self.metrics.created(origin.language, "fork");
        info!(session = %fork.id, origin = %id, checkpoint = number, "session forked");
        Ok(fork.info())
    }

    /// The working directory of `owner`'s session `id` as its last exec left it, after the
    /// execs that arrived before (waiting at most `wait` for them).
    pub async fn files(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> Result<Arc<Files>, ExecError> {
        let (session, history) = self.settled(owner, id, wait).await?;
        let head = history.head();
        match (head.image(), head.disk()) {
            (Some(image), _) => Ok(image.files().clone()),
            (None, Some(disk)) => {
                let number = head.number();
                let files = self.files_from_disk(&session, disk).await;
                files.map_err(|why| unavailable(number, &why.to_string()))
            }
            (None, None) => Ok(Arc::default()),
        }
    }

    /// The working directory of `owner`'s session `id` at its newest checkpoint, without
    /// waiting for an exec in flight while that checkpoint is in memory; read from disk when it
    /// is parked or a restart left it there (after the execs that arrived before, waiting at
    /// most `wait` for them: an exec that brings a parked state back holds the session until it
    /// ends).
    pub async fn head_files(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> Result<Arc<Files>, ExecError> {
        let session = self.find(owner, id)?;
        let kept = session.meta().head_files.clone();
        match kept {
            Some(files) => Ok(files),
            None => self.files(owner, id, wait).await,
        }
    }

    /// The checkpoints `owner`'s session `id` keeps, oldest first, after the execs that
    /// arrived before (waiting at most `wait` for them).
    pub async fn checkpoints(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> Result<Vec<CheckpointInfo>, ExecError> {
        let (_, history) = self.settled(owner, id, wait).await?;
        Ok(history.list())
    }

    /// Returns `owner`'s session `id` to its checkpoint `checkpoint`, dropping the later ones,
    /// after the execs that arrived before (waiting at most `wait` for them). Its next exec
    /// starts from that state.
    pub async fn rollback(
        &self,
        owner: &Principal,
        id: &str,
        checkpoint: u64,
        wait: Duration,
    ) -> Result<SessionInfo, ExecError> {
        let (session, mut history) = self.settled(owner, id, wait).await?;
        let dropped = history.rollback(checkpoint)?;
        session.meta().record(&history);
        // The journal first: a daemon that stops before the later checkpoints are removed
        // removes them when it starts again.
        session.record(&history);
        self.drop_from_disk(&dropped);
        drop(history);
        self.metrics.rolled_back(session.language, "request");
        info!(session = %id, checkpoint, dropped = dropped.len(), "session rolled back on request");
        Ok(session.info())
    }

    /// `owner`'s session `id` and its history, once the execs that arrived before have saved
    /// what they left (waiting at most `wait`); the session may have gone meanwhile, or have
    /// lost its state.
    pub(super) async fn settled(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> Result<(Arc<Session>, OwnedMutexGuard<History>), ExecError> {
        let session = self.find(owner, id)?;
        session.usable()?;
        let turn = tokio::time::timeout(wait, session.history.clone().lock_owned());
        let Ok(history) = turn.await else {
            return Err(ExecError::SessionBusy { timeout: wait });
        };
        self.find(owner, id)?;
        Ok((session, history))
    }
}

/// A checkpoint on disk that could not be brought back for a fork or a read of its files: an
/// internal error, which says why (the session itself is untouched; its next exec drops the
/// checkpoint and says so).
fn unavailable(number: u64, why: &str) -> ExecError {
    ExecError::Internal(format!(
        "checkpoint {number} could not be brought back from disk ({why})"
    ))
}
